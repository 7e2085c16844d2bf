/* Adopt and expect_newest against the real daemon (issue 26; the daemon's
 * side is branch `adopt`): an adopted session behaves as one stepped to the
 * same state, a resent adopt is a success, another state is refused unless
 * replaced, a state the policy cannot be in is invalid_state; a change
 * whose expect_newest is not the daemon's newest is refused "diverged" and
 * changes nothing; a session lost in a restart without state is re-homed
 * as client.h says and goes on as if undisturbed; a resent step is
 * replayed whatever it expects. Case "daemon" of the "adopt" suite. */
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "fake.h"

/* Steps session one position at a time, 1..last (a session stepped so
 * is what adopt's canonical layout describes). */
static void step_to(evd_client_t *c, const char *session,
                    const evd_session_cfg_t *cfg, uint32_t last) {
  uint32_t p;
  evd_step_t s = tc_step(session, &p, 1);

  s.create = cfg;
  for (p = 1; p <= last; p++)
    ck_assert_msg(evd_client_step(c, &s, NULL) == 0, "%s",
                  evd_client_error(c)->message);
}

/* The kept positions and slots of a view, copied. */
typedef struct {
  uint32_t kept[64], slots[64], newest;
  size_t n;
} held_t;

static void hold(held_t *h, const evd_view_t *v) {
  ck_assert(v->kept.n <= 64);
  h->n = v->kept.n;
  h->newest = v->newest;
  memcpy(h->kept, v->kept.v, h->n * sizeof *h->kept);
  memcpy(h->slots, v->slots.v, h->n * sizeof *h->slots);
}

START_TEST(adopt_creates_resends_replaces_and_refuses) {
  evd_session_cfg_t cfg = {4, 1, -1, -1};
  static const uint32_t other[] = {0, 6, 7}, bad[] = {0, 7, 6};
  evd_adopt_t st = {0};
  evd_answer_t x, y;
  evd_client_t *c;
  evd_view_t v;
  held_t ref;
  uint32_t p = 8;
  evd_step_t s;

  tc_start(NULL);
  c = tc_client(NULL, 0);
  step_to(c, "ref", &cfg, 7);
  ck_assert_int_eq(evd_client_get(c, "ref", &v), 0);
  hold(&ref, &v);
  EXPECT(v.kept, 0, 5, 6, 7);
  /* The state "ref" is in, adopted by "a": the same slots (the canonical
   * layout), and the next step answered alike. */
  st.cfg = &cfg;
  st.kept = ref.kept;
  st.n_kept = ref.n;
  st.newest = ref.newest;
  ck_assert_msg(evd_client_adopt(c, "a", &st, &v) == 0, "%s",
                evd_client_error(c)->message);
  ck_assert(v.created);
  ck_assert_str_eq(v.id, "a");
  tc_expect_list(v.kept, ref.kept, ref.n, "adopted kept");
  tc_expect_list(v.slots, ref.slots, ref.n, "adopted slots");
  ck_assert_int_eq(v.newest, 7);
  EMPTY(v.tentative);
  s = tc_step("ref", &p, 1);
  ck_assert_int_eq(evd_client_step(c, &s, &x), 0);
  s.session = "a";
  ck_assert_int_eq(evd_client_step(c, &s, &y), 0);
  tc_expect_list(y.victims, x.victims.v, x.victims.n, "victims");
  tc_expect_list(y.slots, x.slots.v, x.slots.n, "slots");
  /* Given slots, and sent again: 200, not created. */
  st.slots = ref.slots;
  ck_assert_int_eq(evd_client_adopt(c, "a2", &st, &v), 0);
  ck_assert(v.created);
  ck_assert_int_eq(evd_client_adopt(c, "a2", &st, &v), 0);
  ck_assert(!v.created);
  /* Another state: refused, unless replaced. */
  st.slots = NULL;
  st.kept = other;
  st.n_kept = 3;
  tc_expect_err(c, evd_client_adopt(c, "a2", &st, &v), EVD_CLIENT_EAPI,
                "session_exists", 409);
  st.replace = true;
  ck_assert_int_eq(evd_client_adopt(c, "a2", &st, &v), 0);
  ck_assert(!v.created);
  EXPECT(v.kept, 0, 6, 7);
  /* A state the policy cannot be in: 400 naming the rule, nothing made. */
  st.kept = bad;
  tc_expect_err(c, evd_client_adopt(c, "bad", &st, &v), EVD_CLIENT_EAPI,
                "invalid_state", 400);
  ck_assert_msg(strstr(evd_client_error(c)->message, "increase") != NULL,
                "%s", evd_client_error(c)->message);
  tc_expect_err(c, evd_client_get(c, "bad", &v), EVD_CLIENT_EAPI,
                "unknown_session", 404);
  evd_client_free(c);
  tc_stop();
}
END_TEST

/* The daemon's newest is 3: every change expecting another is refused with
 * it, and changes nothing. */
START_TEST(expect_newest_refuses_a_divergent_change) {
  evd_session_cfg_t cfg = {4, -1, -1, -1};
  uint32_t p = 4;
  evd_step_t s = tc_step("e", &p, 1), two[2];
  evd_batch_result_t out[2];
  evd_client_t *c;
  evd_answer_t a;
  evd_view_t v;

  tc_start(NULL);
  c = tc_client(NULL, 0);
  step_to(c, "e", &cfg, 3);
  s.has_expect = true;
  s.expect_newest = 2;
  tc_expect_err(c, evd_client_step(c, &s, &a), EVD_CLIENT_EAPI, "diverged",
                409);
  ck_assert_int_eq(evd_client_error(c)->newest, 3);
  tc_expect_err(c, evd_client_commit_if(c, "e", 3, 9, &a), EVD_CLIENT_EAPI,
                "diverged", 409);
  ck_assert_int_eq(evd_client_error(c)->newest, 3);
  tc_expect_err(c, evd_client_truncate_if(c, "e", 2, 9, &a),
                EVD_CLIENT_EAPI, "diverged", 409);
  tc_expect_err(c, evd_client_evict_if(c, "e", 2, 9, &a), EVD_CLIENT_EAPI,
                "diverged", 409);
  tc_expect_err(c, evd_client_fork_if(c, "e", "f", 9, &v), EVD_CLIENT_EAPI,
                "diverged", 409);
  ck_assert_int_eq(evd_client_error(c)->newest, 3);
  tc_expect_err(c, evd_client_get(c, "f", &v), EVD_CLIENT_EAPI,
                "unknown_session", 404);
  ck_assert_int_eq(evd_client_get(c, "e", &v), 0);
  EXPECT(v.kept, 0, 1, 2, 3);
  ck_assert_int_eq(v.newest, 3);
  /* Expecting what the daemon holds: applied. */
  s.expect_newest = 3;
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  EXPECT(a.victims, 0);
  ck_assert_int_eq(evd_client_truncate_if(c, "e", 4, 4, &a), 0);
  EXPECT(a.removed, 4);
  ck_assert_int_eq(evd_client_fork_if(c, "e", "f", 3, &v), 0);
  ck_assert(v.created);
  /* In a batch the refused item is that item's error; the others go on. */
  two[0] = s; /* expects 3: e is at 3 again after the truncate */
  two[0].expect_newest = 1;
  two[1] = tc_step("f", &p, 1);
  two[1].has_expect = true;
  two[1].expect_newest = 3;
  ck_assert_int_eq(evd_client_batch(c, two, 2, out), 0);
  ck_assert_int_eq(out[0].rc, EVD_CLIENT_EAPI);
  ck_assert_str_eq(out[0].error.code, "diverged");
  ck_assert_int_eq(out[0].error.status, 409);
  ck_assert_int_eq(out[0].error.newest, 3);
  ck_assert_int_eq(out[1].rc, 0);
  ck_assert_int_eq(out[1].answer.newest, 4);
  /* A session the daemon does not hold: with expect_newest > 0 it is not
   * created (a fresh window would describe another cache); with 0 it is. */
  s.session = "new";
  s.expect_newest = 3;
  tc_expect_err(c, evd_client_step(c, &s, &a), EVD_CLIENT_EAPI,
                "unknown_session", 404);
  tc_expect_err(c, evd_client_get(c, "new", &v), EVD_CLIENT_EAPI,
                "unknown_session", 404);
  s.expect_newest = 0;
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  ck_assert_int_eq(a.newest, 4);
  evd_client_free(c);
  tc_stop();
}
END_TEST

/* A daemon restarted without --state-dir (or a pool that now routes the
 * session elsewhere) has lost the session: the change expecting the
 * engine's newest is refused unknown_session, the engine adopts what it
 * holds and sends the change again, and the answers go on exactly as an
 * undisturbed session's. */
START_TEST(rehome_after_a_restart_without_state) {
  evd_session_cfg_t cfg = {4, 1, -1, -1};
  evd_step_t s;
  evd_adopt_t st = {0};
  evd_client_t *c;
  evd_answer_t x, y;
  evd_view_t v;
  held_t engine;
  uint32_t p;

  tc_start(NULL);
  c = tc_client(NULL, 0);
  step_to(c, "r", &cfg, 10);
  ck_assert_int_eq(evd_client_get(c, "r", &v), 0);
  hold(&engine, &v);
  evd_client_free(c);
  tc_stop();
  tc_start(NULL);
  c = tc_client(NULL, 0);
  p = 11;
  s = tc_step("r", &p, 1);
  s.has_expect = true;
  s.expect_newest = 10;
  tc_expect_err(c, evd_client_step(c, &s, &y), EVD_CLIENT_EAPI,
                "unknown_session", 404);
  st.cfg = &cfg;
  st.kept = engine.kept;
  st.n_kept = engine.n;
  st.newest = engine.newest;
  ck_assert_int_eq(evd_client_adopt(c, "r", &st, NULL), 0);
  /* The undisturbed twin, stepped to 10 on this daemon. */
  step_to(c, "u", &cfg, 10);
  for (p = 11; p <= 20; p++) {
    s.session = "r";
    s.expect_newest = p - 1;
    ck_assert_msg(evd_client_step(c, &s, &y) == 0, "%s",
                  evd_client_error(c)->message);
    s.session = "u";
    ck_assert_int_eq(evd_client_step(c, &s, &x), 0);
    tc_expect_list(y.victims, x.victims.v, x.victims.n, "victims");
    tc_expect_list(y.slots, x.slots.v, x.slots.n, "slots");
    ck_assert_int_eq(y.size, x.size);
  }
  evd_client_free(c);
  tc_stop();
}
END_TEST

/* A step whose answer was lost after the daemon applied it is sent again
 * with the same expect_newest, which no longer matches: the replay record
 * answers it, not a divergence. */
START_TEST(resent_step_is_replayed_whatever_it_expects) {
  static const uint32_t p[] = {1, 2, 3};
  evd_client_t *c;
  relay_t *r = tc_relayed(&c);
  evd_step_t s = tc_step("x", p, 3);
  evd_answer_t a;

  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  s = tc_step("x", p + 2, 1);
  ck_assert_int_eq(evd_client_truncate(c, "x", 3, NULL), 0);
  s.has_expect = true;
  s.expect_newest = 2;
  relay_hold_next(r);
  ck_assert_msg(evd_client_step(c, &s, &a) == 0, "%s",
                evd_client_error(c)->message);
  ck_assert(a.replayed);
  ck_assert_int_eq(a.newest, 3);
  tc_relayed_stop(c, r);
}
END_TEST

/* Adds the real daemon's tests to the "adopt" suite, as case "daemon". */
void tc_add_rehome_tests(Suite *s) {
  TCase *tc = tcase_create("daemon");

  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, adopt_creates_resends_replaces_and_refuses);
  tcase_add_test(tc, expect_newest_refuses_a_divergent_change);
  tcase_add_test(tc, rehome_after_a_restart_without_state);
  tcase_add_test(tc, resent_step_is_replayed_whatever_it_expects);
  suite_add_tcase(s, tc);
}
