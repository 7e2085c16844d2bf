/* The C client's page lists (pages_new, pages_freed, pages_transient) with
 * and without page_size, also from a daemon that leaves them out, and a
 * batch whose items fail one by one. Part of the "client" suite. */
#include <stdint.h>

#include "common.h"
#include "fake.h"

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
  s = tc_step("pg", p + 1, 3);
  s.create = &cfg;
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  EXPECT(a.pages_new, 0);
  EMPTY(a.pages_freed);
  EMPTY(a.pages_transient);
  s = tc_step("pg", p + 4, 3);
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  EXPECT(a.victims, 0, 1, 2);
  EXPECT(a.pages_new, 1);
  EMPTY(a.pages_freed);
  EMPTY(a.pages_transient);
  /* 7..18 over a budget of 4: page 2 (8..11) is written and emptied by
   * the same request. */
  s = tc_step("pg", p + 7, 12);
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
  evd_step_t s = tc_step("tr", p, 7), items[1];
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

  items[0] = tc_step("tr-b", p, 7);
  items[0].create = &cfg;
  ck_assert_int_eq(evd_client_batch(c, items, 1, out), 0);
  ck_assert_int_eq(out[0].rc, 0);
  EXPECT(out[0].answer.victims, 0, 1, 2, 3, 4);
  EXPECT(out[0].answer.pages_new, 2, 3);
  EMPTY(out[0].answer.pages_freed);
  EXPECT(out[0].answer.pages_transient, 0, 1);

  ck_assert_int_eq(evd_client_create(c, "tr-c", &cfg, NULL), 0);
  s = tc_step("tr-c", p, 7);
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
  s = tc_step("a", p, 7);
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  EXPECT(a.pages_transient, 0, 1);
  s = tc_step("a", p + 7, 1);
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  EXPECT(a.victims, 5);
  EXPECT(a.pages_new, 4);
  EXPECT(a.pages_freed, 2);
  EMPTY(a.pages_transient);
  items[0] = tc_step("a", p + 8, 1);
  items[1] = tc_step("b", p, 1);
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
  steps[0] = tc_step("a", p, 3);
  steps[0].create = &two;
  steps[1] = tc_step("b", p, 1);
  steps[1].create = &cfg;
  steps[2] = tc_step("a", p, 1); /* stale after item 0 */
  steps[3] = tc_step("bad/id", p, 1);
  steps[4] = tc_step("a", p + 3, 2);
  steps[4].tentative = true;
  steps[5] = tc_step("a", NULL, 0);
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

/* Adds this file's tests to the "daemon" case, in this order. */
void tc_add_pages_tests(TCase *tc) {
  tcase_add_test(tc, pages_lists_with_page_size);
  tcase_add_test(tc, pages_transient_issue_example);
  tcase_add_test(tc, pages_lists_absent_are_empty);
  tcase_add_test(tc, batch_with_per_item_errors);
}
