/* The C client's resend_timeouts option against the real daemon: a relay
 * (fake.h) holds the daemon's answer until the client gives up waiting, so
 * the request was applied and its answer never came. Part of the "client"
 * suite. */
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "fake.h"

static char dir[64], listen_at[128], relay_path[128], url[140];

relay_t *tc_relayed(evd_client_t **c) {
  const char *args[] = {"--listen", listen_at, NULL};
  relay_t *r;

  tc_tmpdir(dir, sizeof dir);
  snprintf(listen_at, sizeof listen_at, "unix:%s/evictd.sock", dir);
  snprintf(relay_path, sizeof relay_path, "%s/relay.sock", dir);
  snprintf(url, sizeof url, "unix:%s", relay_path);
  tc_start(args);
  ck_assert_ptr_nonnull(r = relay_start(relay_path, listen_at + 5));
  *c = tc_client_with(url, 500, 10000, true);
  return r;
}

void tc_relayed_stop(evd_client_t *c, relay_t *r) {
  evd_client_free(c);
  tc_stop();
  relay_stop(r);
  tc_rmdir(dir);
}

START_TEST(timed_out_step_is_resent_and_replayed) {
  static const uint32_t p[] = {0, 1, 2, 3, 4, 5, 6};
  evd_session_cfg_t cfg = {4, -1, -1, -1};
  evd_client_stats_t st;
  evd_step_t s = tc_step("t", p + 1, 3);
  evd_client_t *c;
  evd_answer_t a;
  evd_view_t v;
  relay_t *r = tc_relayed(&c);

  s.create = &cfg;
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  ck_assert(!a.replayed);
  /* Applied, its answer held: the client times out, sends it again on a
   * new connection, and gets the first answer back, replayed. */
  relay_hold_next(r);
  s.positions = p + 4;
  s.n_positions = 3;
  ck_assert_msg(evd_client_step(c, &s, &a) == 0, "%s",
                evd_client_error(c)->message);
  ck_assert(a.replayed);
  EXPECT(a.victims, 0, 1, 2);
  ck_assert_int_eq(a.newest, 6);
  ck_assert_ptr_nonnull(relay_lost_body(r));
  ck_assert_msg(strstr(relay_lost_body(r), "\"victims\":[0,1,2]") != NULL,
                "%s", relay_lost_body(r));
  evd_client_stats(c, &st);
  ck_assert_int_eq(st.resends, 1);
  ck_assert_int_eq(st.replayed, 1);
  ck_assert_int_eq(st.connections, 2);
  ck_assert_int_eq(evd_client_get(c, "t", &v), 0);
  EXPECT(v.kept, 3, 4, 5, 6);
  /* The same for a truncate. */
  ck_assert_int_eq(evd_client_truncate(c, "t", 6, NULL), 0);
  relay_hold_next(r);
  ck_assert_msg(evd_client_truncate(c, "t", 5, &a) == 0, "%s",
                evd_client_error(c)->message);
  ck_assert(a.replayed);
  EXPECT(a.removed, 5);
  tc_relayed_stop(c, r);
}
END_TEST

/* An evict whose answer was held: applied once, EVD_CLIENT_ETIMEOUT, never
 * sent again (the session shows what it holds). */
START_TEST(timed_out_evict_is_not_resent) {
  static const uint32_t p[] = {1, 2, 3, 4};
  evd_client_stats_t st;
  evd_step_t s = tc_step("e", p, 4);
  evd_client_t *c;
  evd_answer_t a;
  evd_view_t v;
  relay_t *r = tc_relayed(&c);

  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  relay_hold_next(r);
  tc_expect_err(c, evd_client_evict(c, "e", 2, &a), EVD_CLIENT_ETIMEOUT,
                "timeout", 0);
  evd_client_stats(c, &st);
  ck_assert_int_eq(st.resends, 0);
  ck_assert_msg(strstr(relay_lost_body(r), "\"victims\":[0,1,2]") != NULL,
                "%s", relay_lost_body(r));
  ck_assert_int_eq(evd_client_get(c, "e", &v), 0);
  EXPECT(v.kept, 3, 4);
  tc_relayed_stop(c, r);
}
END_TEST

/* Adds this file's tests to the "daemon" case, in this order. */
void tc_add_resend_tests(TCase *tc) {
  tcase_add_test(tc, timed_out_step_is_resent_and_replayed);
  tcase_add_test(tc, timed_out_evict_is_not_resent);
}
