/* The C client (include/evictd/client.h) against the real daemon on an
 * ephemeral loopback port: every operation and field, the daemon's error
 * codes and statuses, unix: and https:// URLs, bearer tokens, timeouts,
 * refused connections, and answer memory that is reused, not grown. The
 * vectors, the fake-daemon faults and the restart across SIGKILL are in
 * vectors.c, faults.c and restart.c; main() runs all four suites. Every
 * test frees what it made (ASan's leak check runs in `make asan`). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"
#include "../unit/check_main.h"
#include "fake.h"

#define LIST(...) ((const uint32_t[]){__VA_ARGS__})
#define N(...) (sizeof((const uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t))
#define EXPECT(l, ...) tc_expect_list((l), LIST(__VA_ARGS__), N(__VA_ARGS__), #l)
#define EMPTY(l) tc_expect_list((l), NULL, 0, #l)

static evd_step_t step1(const char *session, const uint32_t *pos, size_t n) {
  evd_step_t s = {0};
  s.session = session;
  s.positions = pos;
  s.n_positions = n;
  return s;
}

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
  s = step1("spec", p + 1, 8);
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
  s = step1("spec", p + 9, 4);
  s.tentative = true;
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  EMPTY(a.victims);
  EXPECT(a.slots, 9, 10, 11, 0);
  ck_assert_int_eq(a.size, 12);
  ck_assert_int_eq(evd_client_get(c, "spec", &v), 0);
  EXPECT(v.tentative, 9, 10, 11, 12);
  /* A plain step while drafts are pending, drafts beyond the lookahead. */
  s = step1("spec", p + 13, 1);
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
  s = step1("spec", p + 11, 4);
  s.tentative = true;
  s.has_commit = true;
  s.commit = 10;
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  EMPTY(a.victims);
  EXPECT(a.slots, 11, 0, 1, 2);
  EMPTY(a.dropped);
  ck_assert_int_eq(a.newest, 14);
  s = step1("spec", NULL, 0);
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
  s = step1("spec", p + 5, 1);
  tc_expect_err(c, evd_client_step(c, &s, &a), EVD_CLIENT_EAPI,
                "stale_position", 409);
  ck_assert_int_eq(evd_client_error(c)->newest, 10);
  /* Positions that do not increase. */
  {
    uint32_t bad[] = {15, 13};
    s = step1("spec", bad, 2);
    tc_expect_err(c, evd_client_step(c, &s, &a), EVD_CLIENT_EAPI,
                  "invalid_position", 400);
    ck_assert_int_eq(evd_client_error(c)->newest, -1);
  }
  /* A single position goes as "pos", the session's id as it is. */
  s = step1("spec", p + 11, 1);
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
  evd_step_t s = step1("parent", p, 10);
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

START_TEST(pages_lists_with_page_size) {
  uint32_t p[19], i;
  evd_session_cfg_t cfg = {4, 0, 8, 4};
  evd_client_t *c;
  evd_answer_t a;
  evd_step_t s;
  evd_view_t v;

  for (i = 0; i < 19; i++)
    p[i] = i;
  tc_start(NULL);
  c = tc_client(NULL, 0);
  /* A step that creates its session lists page 0 in pages_new. */
  s = step1("pg", p + 1, 3);
  s.create = &cfg;
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  EXPECT(a.pages_new, 0);
  EMPTY(a.pages_freed);
  EMPTY(a.pages_transient);
  s = step1("pg", p + 4, 3);
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  EXPECT(a.victims, 0, 1, 2);
  EXPECT(a.pages_new, 1);
  EMPTY(a.pages_freed);
  EMPTY(a.pages_transient);
  /* 7..18 over a budget of 4: page 2 (8..11) is written and emptied by
   * the same request. */
  s = step1("pg", p + 7, 12);
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  EXPECT(a.pages_new, 3, 4);
  EXPECT(a.pages_freed, 0, 1);
  EXPECT(a.pages_transient, 2);
  ck_assert_int_eq(evd_client_get(c, "pg", &v), 0);
  EXPECT(v.pages, 3, 4);
  ck_assert_int_eq(v.page_size, 4);
  ck_assert_int_eq(v.lookahead, 8);
  ck_assert_int_eq(evd_client_evict(c, "pg", 1, &a), 0);
  EXPECT(a.pages_freed, 3);
  EMPTY(a.pages_new);
  EMPTY(a.pages_transient);
  ck_assert_int_eq(evd_client_truncate(c, "pg", 1, &a), 0);
  EXPECT(a.removed, 18);
  EXPECT(a.pages_freed, 4);
  EMPTY(a.pages_transient);
  ck_assert_int_eq(a.size, 0);
  evd_client_free(c);
  tc_stop();
}
END_TEST

/* The issue's example: budget 3, page size 2, positions 1..7 stepped on a
 * new session (the step creates it, position 0 with it). Pages 0 and 1 are
 * written and emptied within the request: pages_transient, for the
 * engine to allocate for the pass and free after it. The same through a
 * batch item, a resend (replayed with the same lists), a session created
 * first (page 0 held before: freed, not transient) and an evict (never
 * transient). */
START_TEST(pages_transient_issue_example) {
  uint32_t p[] = {1, 2, 3, 4, 5, 6, 7};
  evd_session_cfg_t cfg = {3, 0, -1, 2};
  evd_step_t s = step1("tr", p, 7), items[1];
  evd_batch_result_t out[1];
  evd_client_t *c;
  evd_answer_t a;
  evd_view_t v;

  tc_start(NULL);
  c = tc_client(NULL, 0);
  s.create = &cfg;
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  EXPECT(a.victims, 0, 1, 2, 3, 4);
  EXPECT(a.pages_new, 2, 3);
  EMPTY(a.pages_freed);
  EXPECT(a.pages_transient, 0, 1);
  ck_assert_int_eq(a.size, 3);
  ck_assert_int_eq(a.newest, 7);
  ck_assert(!a.replayed);
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  ck_assert(a.replayed);
  EXPECT(a.pages_new, 2, 3);
  EMPTY(a.pages_freed);
  EXPECT(a.pages_transient, 0, 1);
  ck_assert_int_eq(evd_client_get(c, "tr", &v), 0);
  EXPECT(v.kept, 5, 6, 7);
  EXPECT(v.pages, 2, 3);

  items[0] = step1("tr-b", p, 7);
  items[0].create = &cfg;
  ck_assert_int_eq(evd_client_batch(c, items, 1, out), 0);
  ck_assert_int_eq(out[0].rc, 0);
  EXPECT(out[0].answer.victims, 0, 1, 2, 3, 4);
  EXPECT(out[0].answer.pages_new, 2, 3);
  EMPTY(out[0].answer.pages_freed);
  EXPECT(out[0].answer.pages_transient, 0, 1);

  ck_assert_int_eq(evd_client_create(c, "tr-c", &cfg, NULL), 0);
  s = step1("tr-c", p, 7);
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  EXPECT(a.pages_new, 2, 3);
  EXPECT(a.pages_freed, 0);
  EXPECT(a.pages_transient, 1);
  ck_assert_int_eq(evd_client_evict(c, "tr-c", 1, &a), 0);
  EXPECT(a.victims, 5, 6);
  EXPECT(a.pages_freed, 2);
  EMPTY(a.pages_new);
  EMPTY(a.pages_transient);
  evd_client_free(c);
  tc_stop();
}
END_TEST

/* A daemon older than pages_transient (or one without pages) leaves lists
 * out: they come back empty, also after an answer that had them. */
START_TEST(pages_lists_absent_are_empty) {
  static const fk_rule_t rules[] = {
      {FK_ANSWER, 200,
       "{\"victims\":[0,1,2,3,4],\"slots\":[1,2,3,4,5,6,0],\"size\":3,"
       "\"newest\":7,\"pages_new\":[2,3],\"pages_freed\":[],"
       "\"pages_transient\":[0,1]}"},
      {FK_ANSWER, 200,
       "{\"victims\":[5],\"slots\":[1],\"size\":3,\"newest\":8,"
       "\"pages_new\":[4],\"pages_freed\":[2]}"},
      {FK_ANSWER, 200,
       "{\"results\":[{\"victims\":[6],\"slots\":[2],\"size\":3,"
       "\"newest\":9,\"pages_new\":[],\"pages_freed\":[]},"
       "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":1}]}"},
      {FK_ANSWER, 200, "{\"victims\":[7],\"size\":2}"}};
  uint32_t p[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  fake_t *f = fake_start(rules, 4);
  evd_client_t *c;
  evd_step_t s, items[2];
  evd_batch_result_t out[2];
  evd_answer_t a;

  ck_assert_msg(f != NULL, "the fake daemon did not start");
  c = tc_client(fake_url(f), 0);
  s = step1("a", p, 7);
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  EXPECT(a.pages_transient, 0, 1);
  s = step1("a", p + 7, 1);
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  EXPECT(a.victims, 5);
  EXPECT(a.pages_new, 4);
  EXPECT(a.pages_freed, 2);
  EMPTY(a.pages_transient);
  items[0] = step1("a", p + 8, 1);
  items[1] = step1("b", p, 1);
  ck_assert_int_eq(evd_client_batch(c, items, 2, out), 0);
  ck_assert_int_eq(out[0].rc, 0);
  EMPTY(out[0].answer.pages_transient);
  ck_assert_int_eq(out[1].rc, 0);
  EMPTY(out[1].answer.pages_new);
  EMPTY(out[1].answer.pages_freed);
  EMPTY(out[1].answer.pages_transient);
  ck_assert_int_eq(evd_client_evict(c, "a", 2, &a), 0);
  EXPECT(a.victims, 7);
  EMPTY(a.pages_transient);
  evd_client_free(c);
  fake_stop(f);
}
END_TEST

START_TEST(batch_with_per_item_errors) {
  uint32_t p[] = {1, 2, 3, 4, 5};
  evd_session_cfg_t cfg = {2, 0, -1, 3}, two = {-1, -1, 2, -1};
  evd_step_t steps[6];
  evd_batch_result_t out[6];
  evd_client_stats_t st;
  evd_client_t *c;
  int rc;

  tc_start(NULL);
  c = tc_client(NULL, 0);
  steps[0] = step1("a", p, 3);
  steps[0].create = &two;
  steps[1] = step1("b", p, 1);
  steps[1].create = &cfg;
  steps[2] = step1("a", p, 1); /* stale after item 0 */
  steps[3] = step1("bad/id", p, 1);
  steps[4] = step1("a", p + 3, 2);
  steps[4].tentative = true;
  steps[5] = step1("a", NULL, 0);
  steps[5].has_commit = true;
  steps[5].commit = 4;
  rc = evd_client_batch(c, steps, 6, out);
  ck_assert_msg(rc == 0, "%s", evd_client_error(c)->message);
  ck_assert_int_eq(out[0].rc, 0);
  EXPECT(out[0].answer.slots, 1, 2, 3);
  ck_assert_int_eq(out[0].answer.newest, 3);
  ck_assert_str_eq(out[0].error.code, "");
  ck_assert_int_eq(out[1].rc, 0);
  EXPECT(out[1].answer.slots, 1);
  EXPECT(out[1].answer.pages_new, 0);
  ck_assert_int_eq(out[2].rc, EVD_CLIENT_EAPI);
  ck_assert_int_eq(out[2].error.rc, EVD_CLIENT_EAPI);
  ck_assert_str_eq(out[2].error.code, "stale_position");
  ck_assert_int_eq(out[2].error.status, 409);
  ck_assert_int_eq(out[2].error.newest, 3);
  ck_assert(strlen(out[2].error.message) > 0);
  EMPTY(out[2].answer.victims);
  ck_assert_int_eq(out[3].rc, EVD_CLIENT_EAPI);
  ck_assert_str_eq(out[3].error.code, "invalid_session_id");
  ck_assert_int_eq(out[3].error.status, 400);
  ck_assert_int_eq(out[3].error.newest, -1);
  ck_assert_int_eq(out[4].rc, 0);
  EXPECT(out[4].answer.slots, 4, 5);
  ck_assert_int_eq(out[5].rc, 0);
  EXPECT(out[5].answer.dropped, 5);
  EMPTY(out[5].answer.slots);
  ck_assert_int_eq(out[5].answer.newest, 4);
  /* a's last request was item 5: sent again, it is replayed; item 0 is
   * stale by now. */
  ck_assert_int_eq(evd_client_batch(c, steps + 5, 1, out), 0);
  ck_assert_int_eq(out[0].rc, 0);
  ck_assert(out[0].answer.replayed);
  EXPECT(out[0].answer.dropped, 5);
  ck_assert_int_eq(evd_client_batch(c, steps, 1, out), 0);
  ck_assert_str_eq(out[0].error.code, "stale_position");
  evd_client_stats(c, &st);
  ck_assert_int_eq(st.replayed, 1);
  /* An empty batch, and a whole-batch refusal are fine too. */
  ck_assert_int_eq(evd_client_batch(c, NULL, 0, NULL), 0);
  evd_client_free(c);
  tc_stop();
}
END_TEST

START_TEST(create_config_errors) {
  static const struct {
    evd_session_cfg_t cfg;
    const char *code;
  } bad[] = {{{0, -1, -1, -1}, "invalid_budget"},
             {{5, 5, -1, -1}, "invalid_sinks"},
             {{5, -1, 0, -1}, "invalid_lookahead"},
             {{5, -1, -1, 70000}, "invalid_page_size"}};
  evd_client_t *c;
  evd_step_t s;
  evd_view_t v;
  uint32_t one = 1;
  char longid[200];
  size_t i;

  tc_start(NULL);
  c = tc_client(NULL, 0);
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tc_expect_err(c, evd_client_create(c, "x", &bad[i].cfg, &v),
                  EVD_CLIENT_EAPI, bad[i].code, 400);
    s = step1("x", &one, 1);
    s.create = &bad[i].cfg;
    tc_expect_err(c, evd_client_step(c, &s, NULL), EVD_CLIENT_EAPI,
                  bad[i].code, 400);
  }
  /* Ids the daemon refuses: escaped on the way, never another path. */
  tc_expect_err(c, evd_client_create(c, "a/b", NULL, &v), EVD_CLIENT_EAPI,
                "invalid_session_id", 400);
  tc_expect_err(c, evd_client_get(c, "a?b", &v), EVD_CLIENT_EAPI,
                "invalid_session_id", 400);
  memset(longid, 'a', 129);
  longid[129] = '\0';
  tc_expect_err(c, evd_client_get(c, longid, &v), EVD_CLIENT_EAPI,
                "invalid_session_id", 400);
  /* "." and ".." are ids like others (no dot segments folded). */
  s = step1("..", &one, 1);
  ck_assert_int_eq(evd_client_step(c, &s, NULL), 0);
  ck_assert_int_eq(evd_client_get(c, "..", &v), 0);
  ck_assert_str_eq(v.id, "..");
  ck_assert_int_eq(evd_client_get(c, ".", &v), EVD_CLIENT_EAPI);
  /* An id too long for the HTTP layer's 8 KiB: libmicrohttpd's own HTML
   * answer, which is not the contract's JSON. */
  {
    char *huge = malloc(10001);
    memset(huge, 'h', 10000);
    huge[10000] = '\0';
    int rc = evd_client_get(c, huge, &v);
    tc_expect_err(c, rc, EVD_CLIENT_EPROTO, "protocol_error",
                  evd_client_error(c)->status);
    ck_assert_int_ge(evd_client_error(c)->status, 414);
    free(huge);
  }
  evd_client_free(c);
  tc_stop();
}
END_TEST

START_TEST(bad_arguments_are_refused_before_sending) {
  static const char *const bad_urls[] = {"ftp://x", "unix:", "http://",
                                         "http://h:1/?q=1", "http://u@h:1"};
  evd_client_opts_t o = {0};
  evd_client_t *c = NULL;
  evd_client_stats_t st;
  evd_step_t s = {0};
  uint32_t one = 1;
  char err[256];
  size_t i;

  for (i = 0; i < sizeof bad_urls / sizeof bad_urls[0]; i++) {
    o.url = bad_urls[i];
    ck_assert_int_eq(evd_client_new(&c, &o, err, sizeof err),
                     EVD_CLIENT_EINVAL);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(err, bad_urls[i]) != NULL, "%s", err);
  }
  o.url = "http://127.0.0.1:1";
  o.cafile = "/etc/hostname";
  ck_assert_int_eq(evd_client_new(&c, &o, err, sizeof err),
                   EVD_CLIENT_EINVAL);
  o.cafile = NULL;
  o.token_file = "/nonexistent/token";
  ck_assert_int_eq(evd_client_new(&c, &o, NULL, 0), EVD_CLIENT_EINVAL);
  o.token_file = NULL;
  o.token = "two words";
  ck_assert_int_eq(evd_client_new(&c, &o, err, sizeof err),
                   EVD_CLIENT_EINVAL);
  ck_assert_int_eq(evd_client_new(NULL, &o, NULL, 0), EVD_CLIENT_EINVAL);
  /* $EVICTD_URL when opts has no url; a port where nothing listens. */
  setenv("EVICTD_URL", "127.0.0.1:1", 1);
  ck_assert_int_eq(evd_client_new(&c, NULL, err, sizeof err), 0);
  unsetenv("EVICTD_URL");
  s.session = "x";
  tc_expect_err(c, evd_client_step(c, &s, NULL), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  s.n_positions = 1;
  tc_expect_err(c, evd_client_step(c, &s, NULL), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  s.positions = &one;
  s.session = NULL;
  tc_expect_err(c, evd_client_step(c, &s, NULL), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  tc_expect_err(c, evd_client_step(c, NULL, NULL), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  tc_expect_err(c, evd_client_get(c, NULL, NULL), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  tc_expect_err(c, evd_client_fork(c, "a", NULL, NULL), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  tc_expect_err(c, evd_client_batch(c, NULL, 2, NULL), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  evd_client_stats(c, &st);
  ck_assert_int_eq(st.connections, 0);
  ck_assert_int_eq(st.requests, 0);
  for (i = 0; i < 8; i++)
    ck_assert_ptr_nonnull(evd_client_strerror(-(int)i));
  ck_assert_str_eq(evd_client_strerror(EVD_CLIENT_EAPI),
                   "the daemon answered with an error");
  ck_assert_ptr_nonnull(evd_client_strerror(42));
  evd_client_free(c);
  evd_client_free(NULL);
}
END_TEST

START_TEST(unix_socket_url_keeps_one_connection) {
  char dir[64], listen[128];
  const char *args[] = {"--listen", listen, NULL};
  evd_client_stats_t st;
  evd_client_t *c;
  evd_answer_t a;
  uint32_t pos;
  evd_step_t s = step1("u", &pos, 1);

  tc_tmpdir(dir, sizeof dir);
  snprintf(listen, sizeof listen, "unix:%s/evictd.sock", dir);
  tc_start(args);
  ck_assert_str_eq(tc_url, listen);
  c = tc_client(NULL, 0);
  for (pos = 1; pos <= 100; pos++) {
    ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
    ck_assert_int_eq(a.newest, pos);
  }
  evd_client_stats(c, &st);
  ck_assert_int_eq(st.requests, 100);
  ck_assert_int_eq(st.connections, 1);
  ck_assert_int_eq(st.resends, 0);
  evd_client_free(c);
  tc_stop();
  tc_rmdir(dir);
}
END_TEST

/* A connection the daemon closed while idle (--conn-timeout) is noticed
 * before it is used: a new one, and no request is sent twice. */
START_TEST(idle_connection_closed_by_daemon_is_replaced) {
  const char *args[] = {"--conn-timeout", "1", NULL};
  evd_client_stats_t st;
  evd_client_t *c;
  evd_answer_t a;
  uint32_t pos = 1;
  evd_step_t s = step1("idle", &pos, 1);

  tc_start(args);
  c = tc_client(NULL, 0);
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  usleep(2500 * 1000);
  pos = 2;
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  ck_assert(!a.replayed);
  evd_client_stats(c, &st);
  ck_assert_int_eq(st.connections, 2);
  ck_assert_int_eq(st.resends, 0);
  evd_client_free(c);
  tc_stop();
}
END_TEST

START_TEST(https_with_cafile_insecure_and_untrusted) {
  char dir[64], cert[128], key[128], cmd[1024], url[300];
  const char *args[] = {"--tls-cert", cert, "--tls-key", key, NULL};
  evd_client_opts_t o = {0};
  evd_client_stats_t st;
  evd_client_t *c;
  evd_answer_t a;
  char err[256];
  uint32_t pos = 1;
  evd_step_t s = step1("tls", &pos, 1);

  tc_tmpdir(dir, sizeof dir);
  snprintf(cert, sizeof cert, "%s/cert.pem", dir);
  snprintf(key, sizeof key, "%s/key.pem", dir);
  snprintf(cmd, sizeof cmd,
           "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
           "-nodes -keyout %s -out %s -days 2 -subj /CN=localhost -addext "
           "subjectAltName=DNS:localhost,IP:127.0.0.1 >/dev/null 2>&1",
           key, cert);
  if (system(cmd) != 0) {
    fprintf(stderr, "https test skipped: openssl cannot make a certificate "
                    "(deploy/deps.sh tls installs it)\n");
    tc_rmdir(dir);
    return;
  }
  tc_start(args);
  snprintf(url, sizeof url, "https://%s", tc_daemon.addr);
  o.url = url;
  o.timeout_ms = 10000;
  o.cafile = cert;
  ck_assert_int_eq(evd_client_new(&c, &o, err, sizeof err), 0);
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  pos = 2;
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  ck_assert_int_eq(a.newest, 2);
  evd_client_stats(c, &st);
  ck_assert_int_eq(st.connections, 1);
  evd_client_free(c);
  /* insecure: no verification. */
  o.cafile = NULL;
  o.insecure = true;
  ck_assert_int_eq(evd_client_new(&c, &o, err, sizeof err), 0);
  ck_assert_int_eq(evd_client_health(c), 0);
  evd_client_free(c);
  /* The system's store does not know the certificate: refused, and not
   * sent again (a restart would not change that). */
  o.insecure = false;
  ck_assert_int_eq(evd_client_new(&c, &o, err, sizeof err), 0);
  tc_expect_err(c, evd_client_health(c), EVD_CLIENT_ECONNECT,
                "connection_failed", 0);
  evd_client_stats(c, &st);
  ck_assert_int_eq(st.resends, 0);
  evd_client_free(c);
  tc_stop();
  tc_rmdir(dir);
}
END_TEST

START_TEST(token_file_and_unauthorized) {
  static const char token[] = "0123456789abcdef0123456789abcdef";
  char dir[64], file[128];
  const char *args[] = {"--token-file", file, NULL};
  evd_client_opts_t o = {0};
  evd_client_t *c;
  evd_view_t v;
  char err[256];
  FILE *f;

  tc_tmpdir(dir, sizeof dir);
  snprintf(file, sizeof file, "%s/token", dir);
  ck_assert_ptr_nonnull(f = fopen(file, "w"));
  fprintf(f, "%s\n", token);
  fclose(f);
  tc_start(args);
  /* No token: 401, but /healthz needs none. */
  c = tc_client(NULL, 0);
  ck_assert_int_eq(evd_client_health(c), 0);
  tc_expect_err(c, evd_client_create(c, "t", NULL, &v), EVD_CLIENT_EAPI,
                "unauthorized", 401);
  evd_client_free(c);
  o.url = tc_url;
  o.token = "fedcba9876543210fedcba9876543210";
  ck_assert_int_eq(evd_client_new(&c, &o, err, sizeof err), 0);
  tc_expect_err(c, evd_client_create(c, "t", NULL, &v), EVD_CLIENT_EAPI,
                "unauthorized", 401);
  evd_client_free(c);
  o.token = token;
  ck_assert_int_eq(evd_client_new(&c, &o, err, sizeof err), 0);
  ck_assert_int_eq(evd_client_create(c, "t", NULL, &v), 0);
  evd_client_free(c);
  o.token = NULL;
  o.token_file = file;
  ck_assert_int_eq(evd_client_new(&c, &o, err, sizeof err), 0);
  ck_assert_int_eq(evd_client_get(c, "t", &v), 0);
  evd_client_free(c);
  tc_stop();
  tc_rmdir(dir);
}
END_TEST

/* A socket that listens but never accepts: the kernel completes the
 * handshake and takes the request, and no answer ever comes. */
START_TEST(timeout_when_nothing_answers) {
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof sa;
  evd_client_opts_t o = {0};
  evd_client_stats_t st;
  evd_client_t *c;
  char url[64], err[256];
  uint32_t pos = 1;
  evd_step_t s = step1("t", &pos, 1);
  long t0, took;
  int fd = socket(AF_INET, SOCK_STREAM, 0);

  ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  ck_assert_int_eq(listen(fd, 4), 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
  snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(sa.sin_port));
  o.url = url;
  o.timeout_ms = 300;
  o.reconnect_ms = 5000; /* a timeout is never sent again all the same */
  ck_assert_int_eq(evd_client_new(&c, &o, err, sizeof err), 0);
  t0 = tc_now_ms();
  tc_expect_err(c, evd_client_step(c, &s, NULL), EVD_CLIENT_ETIMEOUT,
                "timeout", 0);
  took = tc_now_ms() - t0;
  ck_assert_msg(took >= 290 && took < 3000, "timed out after %ld ms", took);
  evd_client_stats(c, &st);
  ck_assert_int_eq(st.resends, 0);
  ck_assert_int_eq(st.requests, 0);
  evd_client_free(c);
  close(fd);
}
END_TEST

START_TEST(connection_refused) {
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof sa;
  evd_client_stats_t st;
  evd_client_t *c;
  char url[64];
  long t0, took;
  int fd = socket(AF_INET, SOCK_STREAM, 0);

  /* A port that was just free: nothing listens there. */
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
  close(fd);
  snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(sa.sin_port));
  c = tc_client(url, 0);
  tc_expect_err(c, evd_client_health(c), EVD_CLIENT_ECONNECT,
                "connection_failed", 0);
  evd_client_stats(c, &st);
  ck_assert_int_eq(st.resends, 1); /* once, reconnect_ms 0 */
  ck_assert_int_eq(st.requests, 0);
  evd_client_free(c);
  /* With reconnect_ms: sent again with backoff until it is spent. */
  c = tc_client(url, 300);
  t0 = tc_now_ms();
  tc_expect_err(c, evd_client_evict(c, "x", -1, NULL), EVD_CLIENT_ECONNECT,
                "connection_failed", 0);
  took = tc_now_ms() - t0;
  ck_assert_msg(took >= 290 && took < 3000, "gave up after %ld ms", took);
  evd_client_stats(c, &st);
  ck_assert_msg(st.resends >= 4, "%lu resends", (unsigned long)st.resends);
  evd_client_free(c);
}
END_TEST

/* The answer memory is the client's and reused: after the first answers
 * the lists land where they did before, and nothing grows. */
START_TEST(answer_memory_is_reused) {
  static evd_step_t steps[256];
  static evd_batch_result_t out[256];
  static char ids[256][16];
  static uint32_t pos[256];
  const uint32_t *first = NULL, *first_batch = NULL;
  evd_session_cfg_t cfg = {4, -1, -1, -1};
  evd_client_t *c;
  evd_answer_t a;
  uint32_t p;
  evd_step_t s = step1("m", &p, 1);
  int i, k;

  tc_start(NULL);
  c = tc_client(NULL, 0);
  s.create = &cfg;
  for (p = 1; p <= 2000; p++) {
    ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
    if (p == 10)
      first = a.slots.v;
    if (p > 10)
      ck_assert_ptr_eq(a.slots.v, first);
  }
  for (i = 0; i < 256; i++) {
    snprintf(ids[i], sizeof ids[i], "m%d", i);
    steps[i] = step1(ids[i], &pos[i], 1);
    steps[i].create = &cfg;
  }
  for (k = 1; k <= 200; k++) {
    for (i = 0; i < 256; i++)
      pos[i] = (uint32_t)k;
    ck_assert_int_eq(evd_client_batch(c, steps, 256, out), 0);
    for (i = 0; i < 256; i++)
      ck_assert_int_eq(out[i].answer.newest, (uint32_t)k);
    if (k == 10)
      first_batch = out[0].answer.slots.v;
    if (k > 10)
      ck_assert_ptr_eq(out[0].answer.slots.v, first_batch);
  }
  evd_client_free(c);
  tc_stop();
}
END_TEST

/* Lists far larger than any buffer's first size. */
START_TEST(large_answers) {
  static uint32_t p[60000];
  evd_session_cfg_t cfg = {60000, -1, -1, -1};
  evd_client_t *c;
  evd_answer_t a;
  evd_view_t v;
  evd_step_t s = step1("big", p, 60000);
  uint32_t i;

  for (i = 0; i < 60000; i++)
    p[i] = i + 1;
  tc_start(NULL);
  c = tc_client(NULL, 0);
  s.create = &cfg;
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  ck_assert_int_eq(a.slots.n, 60000);
  EXPECT(a.victims, 0);
  ck_assert_int_eq(evd_client_get(c, "big", &v), 0);
  ck_assert_int_eq(v.kept.n, 60000);
  ck_assert_int_eq(v.kept.v[59999], 60000);
  ck_assert_int_eq(v.slots.v[59999], 60000);
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
  tcase_add_test(tc, pages_lists_with_page_size);
  tcase_add_test(tc, pages_transient_issue_example);
  tcase_add_test(tc, pages_lists_absent_are_empty);
  tcase_add_test(tc, batch_with_per_item_errors);
  tcase_add_test(tc, create_config_errors);
  tcase_add_test(tc, bad_arguments_are_refused_before_sending);
  tcase_add_test(tc, unix_socket_url_keeps_one_connection);
  tcase_add_test(tc, idle_connection_closed_by_daemon_is_replaced);
  tcase_add_test(tc, https_with_cafile_insecure_and_untrusted);
  tcase_add_test(tc, token_file_and_unauthorized);
  tcase_add_test(tc, timeout_when_nothing_answers);
  tcase_add_test(tc, connection_refused);
  tcase_add_test(tc, answer_memory_is_reused);
  tcase_add_test(tc, large_answers);
  suite_add_tcase(s, tc);
  return s;
}

EVD_CHECK_MAIN(client_suite(), vectors_suite(), faults_suite(),
               restart_suite())
