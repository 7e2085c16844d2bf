/* Adopt and the expect_newest precondition in the C client (issue 26),
 * against the fake daemon (fake.h): the bodies as the contract
 * (/work/wt/API-26.md, proto/openapi.yaml) writes them, the "diverged"
 * refusal readable from evd_client_error() and from a batch item, the
 * documented re-homing (diverged: adopt with replace, send again), and the
 * pool routing adopt. The real daemon's side is rehome.c. */
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "fake.h"

#define STEP "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":1}"
#define COMMIT "{\"victims\":[],\"dropped\":[],\"size\":2,\"newest\":5}"
#define TRUNC "{\"removed\":[],\"size\":2,\"newest\":3}"
#define EVICT "{\"victims\":[],\"size\":1}"
#define VIEW(id)                                                               \
  "{\"id\":\"" id "\",\"budget\":8,\"sinks\":2,\"size\":4,\"newest\":7,"      \
  "\"kept\":[0,1,5,6],\"slots\":[0,1,2,3]}"
#define DIVERGED                                                               \
  "{\"error\":{\"code\":\"diverged\",\"message\":\"The session's newest "     \
  "position is 12, not 7.\",\"newest\":12,\"view\":" VIEW("a") "}}"

static fake_t *fake(const fk_rule_t *rules, size_t n) {
  fake_t *f = fake_start(rules, n);
  ck_assert_msg(f != NULL, "the fake daemon did not start");
  return f;
}

static void expect_body(fake_t *f, int k, const char *want) {
  const char *got = fake_body(f, k);

  ck_assert_msg(got != NULL, "no request %d", k);
  ck_assert_msg(strcmp(got, want) == 0, "request %d: %s, want %s", k, got,
                want);
}

START_TEST(every_change_carries_expect_newest_when_asked) {
  static const fk_rule_t rules[] = {
      {FK_ANSWER, 200, STEP},   {FK_ANSWER, 200, STEP},
      {FK_ANSWER, 200, COMMIT}, {FK_ANSWER, 200, TRUNC},
      {FK_ANSWER, 200, EVICT},  {FK_ANSWER, 200, VIEW("b")},
      {FK_ANSWER, 200, "{\"results\":[" STEP "," STEP "]}"},
      {FK_ANSWER, 201, VIEW("a")}, {FK_ANSWER, 200, VIEW("a")}};
  static const uint32_t pos = 1, kept[] = {0, 1, 5, 6}, slots[] = {0, 1, 2, 3},
                        pages[] = {0, 1};
  evd_session_cfg_t cfg = {8, 2, -1, -1};
  evd_step_t s = tc_step("a", &pos, 1), two[2];
  evd_adopt_t st = {0};
  evd_batch_result_t out[2];
  fake_t *f = fake(rules, 9);
  evd_client_t *c = tc_client(fake_url(f), 0);
  evd_view_t v;

  ck_assert_int_eq(evd_client_step(c, &s, NULL), 0);
  s.has_expect = true;
  s.expect_newest = 0;
  ck_assert_int_eq(evd_client_step(c, &s, NULL), 0);
  ck_assert_int_eq(evd_client_commit_if(c, "a", 5, 4, NULL), 0);
  ck_assert_int_eq(evd_client_truncate_if(c, "a", 3, EVD_NO_EXPECT, NULL), 0);
  ck_assert_int_eq(evd_client_evict_if(c, "a", -1, 4294967295LL, NULL), 0);
  ck_assert_int_eq(evd_client_fork_if(c, "a", "b", 7, &v), 0);
  two[0] = s;
  two[1] = tc_step("b", &pos, 1);
  ck_assert_int_eq(evd_client_batch(c, two, 2, out), 0);
  st.cfg = &cfg;
  st.kept = kept;
  st.n_kept = 4;
  st.newest = 7;
  st.replace = true;
  ck_assert_int_eq(evd_client_adopt(c, "a", &st, &v), 0);
  ck_assert(v.created);
  EXPECT(v.kept, 0, 1, 5, 6);
  st.cfg = NULL;
  st.slots = slots;
  st.pages = pages;
  st.n_pages = 2;
  st.replace = false;
  ck_assert_int_eq(evd_client_adopt(c, "a", &st, &v), 0);
  ck_assert(!v.created);

  expect_body(f, 0, "{\"pos\":1}");
  expect_body(f, 1, "{\"pos\":1,\"expect_newest\":0}");
  expect_body(f, 2, "{\"newest\":5,\"expect_newest\":4}");
  expect_body(f, 3, "{\"from\":3}");
  expect_body(f, 4, "{\"expect_newest\":4294967295}");
  expect_body(f, 5, "{\"into\":\"b\",\"expect_newest\":7}");
  expect_body(f, 6, "{\"steps\":[{\"session\":\"a\",\"pos\":1,"
                    "\"expect_newest\":0},{\"session\":\"b\",\"pos\":1}]}");
  expect_body(f, 7, "{\"budget\":8,\"sinks\":2,\"kept\":[0,1,5,6],"
                    "\"newest\":7,\"replace\":true}");
  expect_body(f, 8, "{\"kept\":[0,1,5,6],\"newest\":7,\"slots\":[0,1,2,3],"
                    "\"pages\":[0,1]}");
  ck_assert_int_eq(fake_requests(f, "POST /session/a/adopt"), 2);
  ck_assert_int_eq(fake_requests(f, "POST /session/a/fork"), 1);

  /* Refused before sending: not a position, no state, NULL lists. */
  tc_expect_err(c, evd_client_evict_if(c, "a", 2, -2, NULL),
                EVD_CLIENT_EINVAL, "invalid_argument", 0);
  tc_expect_err(c, evd_client_commit_if(c, "a", 2, 4294967296LL, NULL),
                EVD_CLIENT_EINVAL, "invalid_argument", 0);
  tc_expect_err(c, evd_client_adopt(c, "a", NULL, &v), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  st.kept = NULL;
  tc_expect_err(c, evd_client_adopt(c, "a", &st, &v), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  ck_assert_int_eq(fake_requests(f, NULL), 9);
  evd_client_free(c);
  fake_stop(f);
}
END_TEST

/* The refusal: code, status and the daemon's newest, for a call and for a
 * batch item (the others go on); the view it carries is passed over. */
START_TEST(diverged_is_readable_from_the_error) {
  static const fk_rule_t rules[] = {
      {FK_ANSWER, 409, DIVERGED},
      {FK_ANSWER, 200,
       "{\"results\":[" STEP ",{\"error\":{\"code\":\"diverged\","
       "\"message\":\"m\",\"newest\":3,\"view\":" VIEW("b") ","
       "\"status\":409}}]}"}};
  static const uint32_t pos = 1;
  evd_step_t two[2] = {tc_step("a", &pos, 1), tc_step("b", &pos, 1)};
  evd_batch_result_t out[2];
  fake_t *f = fake(rules, 2);
  evd_client_t *c = tc_client(fake_url(f), 0);

  tc_expect_err(c, evd_client_commit_if(c, "a", 9, 7, NULL), EVD_CLIENT_EAPI,
                "diverged", 409);
  ck_assert_int_eq(evd_client_error(c)->newest, 12);
  two[1].has_expect = true;
  two[1].expect_newest = 5;
  ck_assert_int_eq(evd_client_batch(c, two, 2, out), 0);
  ck_assert_int_eq(out[0].rc, 0);
  ck_assert_int_eq(out[1].rc, EVD_CLIENT_EAPI);
  ck_assert_str_eq(out[1].error.code, "diverged");
  ck_assert_int_eq(out[1].error.status, 409);
  ck_assert_int_eq(out[1].error.newest, 3);
  evd_client_free(c);
  fake_stop(f);
}
END_TEST

/* client.h's re-homing: diverged, adopt what the engine holds with
 * replace, send the change again. */
START_TEST(rehoming_after_diverged) {
  static const fk_rule_t rules[] = {{FK_ANSWER, 409, DIVERGED},
                                    {FK_ANSWER, 200, VIEW("a")},
                                    {FK_ANSWER, 200, STEP}};
  static const uint32_t kept[] = {0, 1, 5, 6}, pos = 8;
  evd_session_cfg_t cfg = {8, 2, -1, -1};
  evd_step_t s = tc_step("a", &pos, 1);
  evd_adopt_t st = {&cfg, kept, 4, 7, NULL, NULL, 0, false};
  fake_t *f = fake(rules, 3);
  evd_client_t *c = tc_client(fake_url(f), 0);
  evd_answer_t a;
  int rc;

  s.has_expect = true;
  s.expect_newest = 7;
  rc = evd_client_step(c, &s, &a);
  ck_assert_int_eq(rc, EVD_CLIENT_EAPI);
  ck_assert_str_eq(evd_client_error(c)->code, "diverged");
  st.replace = true;
  ck_assert_int_eq(evd_client_adopt(c, "a", &st, NULL), 0);
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  ck_assert_int_eq(fake_requests(f, "/step"), 2);
  expect_body(f, 1, "{\"budget\":8,\"sinks\":2,\"kept\":[0,1,5,6],"
                    "\"newest\":7,\"replace\":true}");
  expect_body(f, 2, "{\"pos\":8,\"expect_newest\":7}");
  evd_client_free(c);
  fake_stop(f);
}
END_TEST

/* The pool sends an adopt to the instance the session is routed to. */
START_TEST(pool_routes_adopt) {
  static const fk_rule_t rules[] = {{FK_ANSWER, 201, VIEW("a")}};
  static const uint32_t kept[] = {0, 1, 5, 6};
  evd_adopt_t st = {NULL, kept, 4, 7, NULL, NULL, 0, false};
  fake_t *f[2] = {fake(rules, 1), fake(rules, 1)};
  const char *urls[2] = {fake_url(f[0]), fake_url(f[1])};
  const char *names[2] = {"10.0.0.1:8090", "10.0.0.2:8090"};
  evd_client_pool_t *p;
  char err[256], id[32];
  int i, seen[2] = {0, 0};
  evd_view_t v;

  ck_assert_int_eq(evd_client_pool_new(&p, urls, names, 2, NULL, err,
                                        sizeof err), 0);
  for (i = 0; i < 40; i++) {
    int k;
    snprintf(id, sizeof id, "s%d~x", i);
    k = evd_client_pool_instance(p, id);
    ck_assert(k == 0 || k == 1);
    ck_assert_int_eq(evd_client_pool_adopt(p, id, &st, &v), 0);
    seen[k]++;
    ck_assert_int_eq(fake_requests(f[k], "/adopt"), seen[k]);
  }
  ck_assert(seen[0] > 0 && seen[1] > 0);
  ck_assert_int_eq(evd_client_pool_adopt(p, "~x", &st, &v),
                   EVD_CLIENT_EINVAL);
  ck_assert_int_eq(fake_requests(f[0], NULL) + fake_requests(f[1], NULL), 40);
  evd_client_pool_free(p);
  fake_stop(f[0]);
  fake_stop(f[1]);
}
END_TEST

Suite *adopt_suite(void) {
  Suite *s = suite_create("adopt");
  TCase *tc = tcase_create("fake daemon");

  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, every_change_carries_expect_newest_when_asked);
  tcase_add_test(tc, diverged_is_readable_from_the_error);
  tcase_add_test(tc, rehoming_after_diverged);
  tcase_add_test(tc, pool_routes_adopt);
  suite_add_tcase(s, tc);
  tc_add_rehome_tests(s);
  return s;
}
