/* The C client (include/evictd/client.h) against the real daemon: every
 * operation with every field. main() runs the "client" suite (this file,
 * pages.c, refusals.c, transport.c, resend.c) and those of vectors.c,
 * faults.c, restart.c, reader.c, adopt.c (with rehome.c) and async.c;
 * every test frees what it made (ASan checks in `make asan`). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "../unit/check_main.h"

START_TEST(create_get_delete_with_every_field) {
  evd_session_cfg_t cfg = {8, 2, 3, 4}, other = {9, 2, 3, 4};
  evd_client_t *c;
  evd_view_t v;
  int rc;

  tc_start(NULL);
  c = tc_client(NULL, 0);
  ck_assert_int_eq(evd_client_health(c), 0);
  rc = evd_client_create(c, "s-1", &cfg, &v);
  ck_assert_msg(rc == 0, "%s", evd_client_error(c)->message);
  ck_assert(v.created);
  ck_assert_str_eq(v.id, "s-1");
  ck_assert_int_eq(v.budget, 8);
  ck_assert_int_eq(v.sinks, 2);
  ck_assert_int_eq(v.lookahead, 3);
  ck_assert_int_eq(v.page_size, 4);
  ck_assert_int_eq(v.size, 1);
  ck_assert_int_eq(v.newest, 0);
  EXPECT(v.kept, 0);
  EXPECT(v.slots, 0);
  EXPECT(v.pages, 0);
  EMPTY(v.tentative);
  /* The same again: 200, not created; another configuration: 409. */
  ck_assert_int_eq(evd_client_create(c, "s-1", &cfg, &v), 0);
  ck_assert(!v.created);
  tc_expect_err(c, evd_client_create(c, "s-1", &other, &v), EVD_CLIENT_EAPI,
                "session_exists", 409);
  /* Defaults (cfg NULL, or fields < 0): the daemon's; out may be NULL. */
  ck_assert_int_eq(evd_client_create(c, "d", NULL, NULL), 0);
  ck_assert_int_eq(evd_client_get(c, "d", &v), 0);
  ck_assert_int_eq(v.budget, 512);
  ck_assert_int_eq(v.sinks, 0);
  ck_assert_int_eq(v.lookahead, 1);
  ck_assert_int_eq(v.page_size, 0);
  EMPTY(v.pages);
  ck_assert(!v.created);
  ck_assert_int_eq(evd_client_delete(c, "d", false), 0);
  tc_expect_err(c, evd_client_delete(c, "d", false), EVD_CLIENT_EAPI,
                "unknown_session", 404);
  ck_assert_int_eq(evd_client_delete(c, "d", true), 0);
  tc_expect_err(c, evd_client_get(c, "d", &v), EVD_CLIENT_EAPI,
                "unknown_session", 404);
  /* An empty id names no route. */
  tc_expect_err(c, evd_client_get(c, "", &v), EVD_CLIENT_EAPI, "not_found",
                404);
  evd_client_free(c);
  tc_stop();
}
END_TEST

START_TEST(step_single_multi_tentative_commit_truncate) {
  uint32_t p[20], i;
  evd_session_cfg_t cfg = {8, -1, 4, -1};
  evd_client_t *c;
  evd_answer_t a;
  evd_step_t s;
  evd_view_t v;

  for (i = 0; i < 20; i++)
    p[i] = i;
  tc_start(NULL);
  c = tc_client(NULL, 0);
  /* A step that creates its session, with its configuration. */
  s = tc_step("spec", p + 1, 8);
  s.create = &cfg;
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  EXPECT(a.victims, 0);
  EXPECT(a.slots, 1, 2, 3, 4, 5, 6, 7, 8);
  ck_assert_int_eq(a.size, 8);
  ck_assert_int_eq(a.newest, 8);
  EMPTY(a.dropped);
  EMPTY(a.pages_new);
  ck_assert(!a.replayed);
  /* Drafts: nothing evicted. */
  s = tc_step("spec", p + 9, 4);
  s.tentative = true;
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  EMPTY(a.victims);
  EXPECT(a.slots, 9, 10, 11, 0);
  ck_assert_int_eq(a.size, 12);
  ck_assert_int_eq(evd_client_get(c, "spec", &v), 0);
  EXPECT(v.tentative, 9, 10, 11, 12);
  /* A plain step while drafts are pending, drafts beyond the lookahead. */
  s = tc_step("spec", p + 13, 1);
  tc_expect_err(c, evd_client_step(c, &s, &a), EVD_CLIENT_EAPI,
                "tentative_pending", 409);
  s.tentative = true;
  tc_expect_err(c, evd_client_step(c, &s, &a), EVD_CLIENT_EAPI,
                "too_many_positions", 400);
  /* Commit 10: drafts 11, 12 dropped, 1 and 2 evicted. */
  ck_assert_int_eq(evd_client_commit(c, "spec", 10, &a), 0);
  EXPECT(a.victims, 1, 2);
  EXPECT(a.dropped, 11, 12);
  EMPTY(a.slots);
  ck_assert_int_eq(a.size, 8);
  ck_assert_int_eq(a.newest, 10);
  tc_expect_err(c, evd_client_commit(c, "spec", 3, &a), EVD_CLIENT_EAPI,
                "invalid_position", 400);
  /* A step with commit and drafts, then a commit-only step. */
  s = tc_step("spec", p + 11, 4);
  s.tentative = true;
  s.has_commit = true;
  s.commit = 10;
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  EMPTY(a.victims);
  EXPECT(a.slots, 11, 0, 1, 2);
  EMPTY(a.dropped);
  ck_assert_int_eq(a.newest, 14);
  s = tc_step("spec", NULL, 0);
  s.has_commit = true;
  s.commit = 12;
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  EXPECT(a.victims, 3, 4);
  EMPTY(a.slots);
  EXPECT(a.dropped, 13, 14);
  ck_assert_int_eq(a.size, 8);
  ck_assert_int_eq(a.newest, 12);
  /* The same commit-only step again: replayed. */
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  ck_assert(a.replayed);
  EXPECT(a.victims, 3, 4);
  EXPECT(a.dropped, 13, 14);
  /* Truncate from 11: 11 and 12 removed; again: replayed. */
  ck_assert_int_eq(evd_client_truncate(c, "spec", 11, &a), 0);
  EXPECT(a.removed, 11, 12);
  EMPTY(a.victims);
  ck_assert_int_eq(a.size, 6);
  ck_assert_int_eq(a.newest, 10);
  ck_assert(!a.replayed);
  ck_assert_int_eq(evd_client_truncate(c, "spec", 11, &a), 0);
  ck_assert(a.replayed);
  EXPECT(a.removed, 11, 12);
  tc_expect_err(c, evd_client_truncate(c, "spec", 0, &a), EVD_CLIENT_EAPI,
                "invalid_position", 400);
  /* stale_position carries the newest. */
  s = tc_step("spec", p + 5, 1);
  tc_expect_err(c, evd_client_step(c, &s, &a), EVD_CLIENT_EAPI,
                "stale_position", 409);
  ck_assert_int_eq(evd_client_error(c)->newest, 10);
  /* Positions that do not increase. */
  {
    uint32_t bad[] = {15, 13};
    s = tc_step("spec", bad, 2);
    tc_expect_err(c, evd_client_step(c, &s, &a), EVD_CLIENT_EAPI,
                  "invalid_position", 400);
    ck_assert_int_eq(evd_client_error(c)->newest, -1);
  }
  /* A single position goes as "pos", the session's id as it is. */
  s = tc_step("spec", p + 11, 1);
  ck_assert_int_eq(evd_client_step(c, &s, NULL), 0);
  ck_assert_int_eq(evd_client_get(c, "spec", &v), 0);
  ck_assert_int_eq(v.newest, 11);
  evd_client_free(c);
  tc_stop();
}
END_TEST

START_TEST(fork_and_evict) {
  uint32_t p[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  evd_session_cfg_t cfg = {8, 0, -1, -1};
  evd_client_t *c;
  evd_answer_t a;
  evd_step_t s = tc_step("parent", p, 10);
  evd_view_t v;

  tc_start(NULL);
  c = tc_client(NULL, 0);
  ck_assert_int_eq(evd_client_create(c, "parent", &cfg, NULL), 0);
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  ck_assert_int_eq(evd_client_fork(c, "parent", "child", &v), 0);
  ck_assert(v.created);
  ck_assert_str_eq(v.id, "child");
  EXPECT(v.kept, 3, 4, 5, 6, 7, 8, 9, 10);
  ck_assert_int_eq(v.newest, 10);
  /* A resent fork: 200 with the same view. */
  ck_assert_int_eq(evd_client_fork(c, "parent", "child", &v), 0);
  ck_assert(!v.created);
  EXPECT(v.kept, 3, 4, 5, 6, 7, 8, 9, 10);
  /* Evict the child down to 3; the parent keeps its 8. */
  ck_assert_int_eq(evd_client_evict(c, "child", 3, &a), 0);
  EXPECT(a.victims, 3, 4, 5, 6, 7);
  ck_assert_int_eq(a.size, 3);
  EMPTY(a.slots);
  ck_assert(!a.replayed);
  ck_assert_int_eq(evd_client_evict(c, "child", -1, &a), 0);
  EMPTY(a.victims);
  ck_assert_int_eq(a.size, 3);
  ck_assert_int_eq(evd_client_get(c, "parent", &v), 0);
  ck_assert_int_eq(v.size, 8);
  /* Now the child differs: forking into it is 409. */
  tc_expect_err(c, evd_client_fork(c, "parent", "child", &v), EVD_CLIENT_EAPI,
                "session_exists", 409);
  tc_expect_err(c, evd_client_fork(c, "nobody", "x", &v), EVD_CLIENT_EAPI,
                "unknown_session", 404);
  tc_expect_err(c, evd_client_fork(c, "parent", "bad id", &v),
                EVD_CLIENT_EAPI, "invalid_session_id", 400);
  tc_expect_err(c, evd_client_evict(c, "child", 0, &a), EVD_CLIENT_EAPI,
                "invalid_budget", 400);
  tc_expect_err(c, evd_client_evict(c, "nobody", 2, &a), EVD_CLIENT_EAPI,
                "unknown_session", 404);
  tc_expect_err(c, evd_client_commit(c, "nobody", 2, &a), EVD_CLIENT_EAPI,
                "unknown_session", 404);
  tc_expect_err(c, evd_client_truncate(c, "nobody", 2, &a), EVD_CLIENT_EAPI,
                "unknown_session", 404);
  evd_client_free(c);
  tc_stop();
}
END_TEST

static Suite *client_suite(void) {
  Suite *s = suite_create("client");
  TCase *tc = tcase_create("daemon");

  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, create_get_delete_with_every_field);
  tcase_add_test(tc, step_single_multi_tentative_commit_truncate);
  tcase_add_test(tc, fork_and_evict);
  tc_add_pages_tests(tc);
  tc_add_refusal_tests(tc);
  tc_add_transport_tests(tc);
  tc_add_resend_tests(tc);
  suite_add_tcase(s, tc);
  return s;
}

EVD_CHECK_MAIN(client_suite(), vectors_suite(), faults_suite(),
               restart_suite(), reader_suite(), adopt_suite(),
               async_suite())
