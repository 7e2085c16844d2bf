/* The C client against a fake daemon (fake.h) that loses answers on cue:
 * when a request is sent again (by libcurl on a reused connection, or by
 * the client on a new one) and when it must not be (evict, a batch naming
 * a session twice, a timeout); and answers that are not the contract's,
 * which must come back as EVD_CLIENT_EPROTO with a clear message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fake.h"

#define HEALTH "{\"status\":\"ok\"}"
#define STEP "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":1}"
#define STEP_REPLAYED                                                          \
  "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":1,\"replayed\":true}"
#define EVICT "{\"victims\":[1],\"size\":1}"
#define BATCH2 "{\"results\":[" STEP "," STEP_REPLAYED "]}"

static fake_t *fake(const fk_rule_t *rules, size_t n) {
  fake_t *f = fake_start(rules, n);
  ck_assert_msg(f != NULL, "the fake daemon did not start");
  return f;
}

static evd_step_t one_step(const char *session) {
  static const uint32_t pos = 1;
  evd_step_t s = {0};
  s.session = session;
  s.positions = &pos;
  s.n_positions = 1;
  return s;
}

static void expect_stats(evd_client_t *c, uint64_t resends, uint64_t conns) {
  evd_client_stats_t st;

  evd_client_stats(c, &st);
  ck_assert_msg(st.resends == resends, "%lu resends, want %lu",
                (unsigned long)st.resends, (unsigned long)resends);
  ck_assert_msg(st.connections == conns, "%lu connections, want %lu",
                (unsigned long)st.connections, (unsigned long)conns);
}

/* libcurl sends a request again by itself when a reused connection gives
 * no byte of answer: for a step that is the replay the daemon answers. */
START_TEST(libcurl_resend_on_a_reused_connection_is_counted) {
  static const fk_rule_t rules[] = {{FK_ANSWER, 200, HEALTH},
                                    {FK_CLOSE, 0, NULL},
                                    {FK_ANSWER, 200, STEP_REPLAYED}};
  fake_t *f = fake(rules, 3);
  evd_client_t *c = tc_client(fake_url(f), 0);
  evd_step_t s = one_step("a");
  evd_client_stats_t st;
  evd_answer_t a;

  ck_assert_int_eq(evd_client_health(c), 0);
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  ck_assert(a.replayed);
  ck_assert_int_eq(fake_requests(f, "/session/a/step"), 2);
  expect_stats(c, 1, 2);
  evd_client_stats(c, &st);
  ck_assert_int_eq(st.replayed, 1);
  ck_assert_int_eq(st.requests, 2);
  evd_client_free(c);
  fake_stop(f);
}
END_TEST

/* The same loss under an evict: libcurl must not send it again. */
START_TEST(evict_is_never_resent_once_it_may_have_been_delivered) {
  static const fk_rule_t rules[] = {{FK_ANSWER, 200, HEALTH},
                                    {FK_CLOSE, 0, NULL},
                                    {FK_ANSWER, 200, EVICT}};
  static const fk_rule_t fresh[] = {{FK_CLOSE, 0, NULL},
                                    {FK_ANSWER, 200, EVICT}};
  fake_t *f = fake(rules, 3);
  evd_client_t *c = tc_client(fake_url(f), 5000);
  evd_answer_t a;

  ck_assert_int_eq(evd_client_health(c), 0);
  tc_expect_err(c, evd_client_evict(c, "a", 2, &a), EVD_CLIENT_ECONNECT,
                "connection_failed", 0);
  ck_assert_msg(strstr(evd_client_error(c)->message, "not sent again"),
                "%s", evd_client_error(c)->message);
  ck_assert_int_eq(fake_requests(f, "/evict"), 1);
  /* (libcurl opened the connection for its resend, then asked us.) */
  expect_stats(c, 0, 2);
  /* The next evict goes out on a new connection as usual. */
  ck_assert_int_eq(evd_client_evict(c, "a", 2, &a), 0);
  ck_assert_int_eq(a.victims.n, 1);
  ck_assert_int_eq(fake_requests(f, "/evict"), 2);
  evd_client_free(c);
  fake_stop(f);
  /* Lost on a new connection: the client does not send it again either. */
  f = fake(fresh, 2);
  c = tc_client(fake_url(f), 5000);
  tc_expect_err(c, evd_client_evict(c, "a", -1, &a), EVD_CLIENT_ECONNECT,
                "connection_failed", 0);
  ck_assert_int_eq(fake_requests(f, "/evict"), 1);
  expect_stats(c, 0, 1);
  evd_client_free(c);
  fake_stop(f);
}
END_TEST

START_TEST(batch_naming_a_session_twice_is_never_resent) {
  static const fk_rule_t rules[] = {{FK_ANSWER, 200, HEALTH},
                                    {FK_CLOSE, 0, NULL},
                                    {FK_ANSWER, 200, BATCH2}};
  evd_step_t twice[2] = {one_step("a"), one_step("a")};
  evd_step_t two[2] = {one_step("a"), one_step("b")};
  evd_batch_result_t out[2];
  fake_t *f = fake(rules, 3);
  evd_client_t *c = tc_client(fake_url(f), 0);

  ck_assert_int_eq(evd_client_health(c), 0);
  tc_expect_err(c, evd_client_batch(c, twice, 2, out), EVD_CLIENT_ECONNECT,
                "connection_failed", 0);
  ck_assert_msg(strstr(evd_client_error(c)->message, "session twice"), "%s",
                evd_client_error(c)->message);
  ck_assert_int_eq(fake_requests(f, "POST /step"), 1);
  evd_client_free(c);
  fake_stop(f);
  f = fake(rules, 3);
  c = tc_client(fake_url(f), 0);
  ck_assert_int_eq(evd_client_health(c), 0);
  ck_assert_int_eq(evd_client_batch(c, two, 2, out), 0);
  ck_assert_int_eq(fake_requests(f, "POST /step"), 2);
  ck_assert(!out[0].answer.replayed);
  ck_assert(out[1].answer.replayed);
  expect_stats(c, 1, 2);
  evd_client_free(c);
  fake_stop(f);
}
END_TEST

/* Lost on a new connection (libcurl leaves that to the client), or half an
 * answer: the client sends a step again itself. */
START_TEST(client_resends_a_step_whose_answer_was_lost) {
  static const fk_rule_t fresh[] = {{FK_CLOSE, 0, NULL},
                                    {FK_ANSWER, 200, STEP_REPLAYED}};
  static const fk_rule_t half[] = {{FK_ANSWER, 200, HEALTH},
                                   {FK_PARTIAL, 200, STEP},
                                   {FK_ANSWER, 200, STEP_REPLAYED}};
  static const fk_rule_t thrice[] = {{FK_CLOSE, 0, NULL},
                                     {FK_CLOSE, 0, NULL},
                                     {FK_CLOSE, 0, NULL},
                                     {FK_ANSWER, 200, STEP}};
  evd_step_t s = one_step("a");
  evd_answer_t a;
  fake_t *f = fake(fresh, 2);
  evd_client_t *c = tc_client(fake_url(f), 0);

  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  ck_assert(a.replayed);
  ck_assert_int_eq(fake_requests(f, "/step"), 2);
  expect_stats(c, 1, 2);
  evd_client_free(c);
  fake_stop(f);

  f = fake(half, 3);
  c = tc_client(fake_url(f), 0);
  ck_assert_int_eq(evd_client_health(c), 0);
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  ck_assert(a.replayed);
  ck_assert_int_eq(a.slots.n, 1);
  ck_assert_int_eq(fake_requests(f, "/step"), 2);
  expect_stats(c, 1, 2);
  evd_client_free(c);
  fake_stop(f);

  /* Three losses: once is not enough, reconnect_ms is. */
  f = fake(thrice, 4);
  c = tc_client(fake_url(f), 0);
  tc_expect_err(c, evd_client_step(c, &s, &a), EVD_CLIENT_ECONNECT,
                "connection_failed", 0);
  ck_assert_int_eq(fake_requests(f, "/step"), 2);
  evd_client_free(c);
  fake_stop(f);
  f = fake(thrice, 4);
  c = tc_client(fake_url(f), 5000);
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  ck_assert_int_eq(fake_requests(f, "/step"), 4);
  expect_stats(c, 3, 4);
  evd_client_free(c);
  fake_stop(f);
}
END_TEST

START_TEST(silence_is_a_timeout_and_not_resent) {
  static const fk_rule_t rules[] = {{FK_ANSWER, 200, HEALTH},
                                    {FK_SILENT, 0, NULL}};
  evd_step_t s = one_step("a");
  fake_t *f = fake(rules, 2);
  evd_client_t *c = tc_client_with(fake_url(f), 300, 5000, false);

  ck_assert_int_eq(evd_client_health(c), 0);
  tc_expect_err(c, evd_client_step(c, &s, NULL), EVD_CLIENT_ETIMEOUT,
                "timeout", 0);
  ck_assert_int_eq(fake_requests(f, "/step"), 1);
  expect_stats(c, 0, 1);
  evd_client_free(c);
  fake_stop(f);
}
END_TEST

/* A client of the fake daemon that sends timed-out requests again. */
static evd_client_t *resending(fake_t *f, unsigned timeout_ms,
                               unsigned reconnect_ms) {
  return tc_client_with(fake_url(f), timeout_ms, reconnect_ms, true);
}

/* resend_timeouts: a step whose first attempt got no answer in time is
 * sent again on a new connection and answered from the replay record. */
START_TEST(resend_timeouts_sends_a_timed_out_step_again) {
  static const fk_rule_t rules[] = {{FK_ANSWER, 200, HEALTH},
                                    {FK_SILENT, 0, NULL},
                                    {FK_ANSWER, 200, STEP_REPLAYED}};
  evd_step_t s = one_step("a");
  evd_client_stats_t st;
  evd_answer_t a;
  fake_t *f = fake(rules, 3);
  evd_client_t *c = resending(f, 300, 5000);

  ck_assert_int_eq(evd_client_health(c), 0);
  ck_assert_msg(evd_client_step(c, &s, &a) == 0, "%s",
                evd_client_error(c)->message);
  ck_assert(a.replayed);
  EXPECT(a.slots, 1);
  ck_assert_int_eq(fake_requests(f, "/session/a/step"), 2);
  expect_stats(c, 1, 2);
  evd_client_stats(c, &st);
  ck_assert_int_eq(st.replayed, 1);
  evd_client_free(c);
  fake_stop(f);
}
END_TEST

/* Never an evict (a second would evict nothing and lose the victims), nor
 * a batch naming a session twice: EVD_CLIENT_ETIMEOUT at once. A batch of
 * distinct sessions is sent again. */
START_TEST(resend_timeouts_never_sends_an_evict_again) {
  static const fk_rule_t silent[] = {{FK_SILENT, 0, NULL},
                                     {FK_ANSWER, 200, EVICT}};
  static const fk_rule_t batch[] = {{FK_SILENT, 0, NULL},
                                    {FK_ANSWER, 200, BATCH2}};
  evd_step_t twice[2] = {one_step("a"), one_step("a")};
  evd_step_t two[2] = {one_step("a"), one_step("b")};
  evd_batch_result_t out[2];
  evd_answer_t a;
  fake_t *f = fake(silent, 2);
  evd_client_t *c = resending(f, 300, 5000);

  tc_expect_err(c, evd_client_evict(c, "a", 2, &a), EVD_CLIENT_ETIMEOUT,
                "timeout", 0);
  ck_assert_msg(strstr(evd_client_error(c)->message, "not sent again"), "%s",
                evd_client_error(c)->message);
  ck_assert_int_eq(fake_requests(f, "/evict"), 1);
  expect_stats(c, 0, 1);
  evd_client_free(c);
  fake_stop(f);

  f = fake(batch, 2);
  c = resending(f, 300, 5000);
  tc_expect_err(c, evd_client_batch(c, twice, 2, out), EVD_CLIENT_ETIMEOUT,
                "timeout", 0);
  ck_assert_msg(strstr(evd_client_error(c)->message, "session twice"), "%s",
                evd_client_error(c)->message);
  ck_assert_int_eq(fake_requests(f, "POST /step"), 1);
  evd_client_free(c);
  fake_stop(f);

  f = fake(batch, 2);
  c = resending(f, 300, 5000);
  ck_assert_msg(evd_client_batch(c, two, 2, out) == 0, "%s",
                evd_client_error(c)->message);
  ck_assert(out[1].answer.replayed);
  ck_assert_int_eq(fake_requests(f, "POST /step"), 2);
  expect_stats(c, 1, 2);
  evd_client_free(c);
  fake_stop(f);
}
END_TEST

/* The limit: once when reconnect_ms is 0; else no new attempt after
 * reconnect_ms has passed since the first failure, and the call fails
 * with the last attempt's error, a timeout. */
START_TEST(resend_timeouts_stops_when_reconnect_ms_is_spent) {
  static const fk_rule_t silent[] = {{FK_SILENT, 0, NULL}};
  evd_step_t s = one_step("a");
  evd_client_stats_t st;
  fake_t *f = fake(silent, 1);
  evd_client_t *c = resending(f, 200, 0);
  long t0, took;
  int n;

  tc_expect_err(c, evd_client_step(c, &s, NULL), EVD_CLIENT_ETIMEOUT,
                "timeout", 0);
  ck_assert_msg(strstr(evd_client_error(c)->message, "sent again too"), "%s",
                evd_client_error(c)->message);
  ck_assert_int_eq(fake_requests(f, "/step"), 2);
  expect_stats(c, 1, 2);
  evd_client_free(c);
  fake_stop(f);

  f = fake(silent, 1);
  c = resending(f, 200, 700);
  t0 = tc_now_ms();
  tc_expect_err(c, evd_client_step(c, &s, NULL), EVD_CLIENT_ETIMEOUT,
                "timeout", 0);
  took = tc_now_ms() - t0;
  ck_assert_msg(strstr(evd_client_error(c)->message, "reconnect_ms"), "%s",
                evd_client_error(c)->message);
  /* The first failure comes at 200 ms, the last attempt begins before
   * 900 ms: at least 900 ms in all, and each attempt takes 200 ms or more,
   * so no more than 1 + 700 / 200 resends. */
  ck_assert_msg(took >= 890, "gave up after %ld ms", took);
  n = fake_requests(f, "/step");
  ck_assert_msg(n >= 3 && n <= 5, "%d attempts", n);
  evd_client_stats(c, &st);
  ck_assert_int_eq(st.resends, (uint64_t)n - 1);
  ck_assert_int_eq(st.requests, 0);
  evd_client_free(c);
  fake_stop(f);
}
END_TEST

/* Answers that are not the contract's. */
START_TEST(answers_that_are_not_the_contract) {
  static const struct {
    char op; /* s step, b batch of 2, g get, c commit, e evict */
    int status;
    const char *body, *says;
  } bad[] = {
      {'s', 200, "not json", "expected an object"},
      {'s', 200, "", "expected an object"},
      {'s', 200, "{\"victims\":[],\"size\":1,\"newest\":1}", "\"slots\""},
      {'s', 200, "{\"victims\":\"x\",\"slots\":[],\"size\":1,\"newest\":1}",
       "expected an array"},
      {'s', 200,
       "{\"victims\":[4294967296],\"slots\":[],\"size\":1,\"newest\":1}",
       "out of range"},
      {'s', 200, "{\"victims\":[1.5],\"slots\":[],\"size\":1,\"newest\":1}",
       "not an integer"},
      {'s', 200, "{\"victims\":[-1],\"slots\":[],\"size\":1,\"newest\":1}",
       "negative"},
      {'s', 200, "{\"victims\":[01],\"slots\":[],\"size\":1,\"newest\":1}",
       "leading zero"},
      {'s', 200, "{\"victims\":[],\"slots\":[],\"size\":1,\"newest\":1,"
                 "\"replayed\":1}",
       "true or false"},
      {'s', 200, "{\"victims\":[],\"slots\":[],\"size\":1,\"newest\":1} x",
       "bytes after"},
      {'s', 200, "{\"victims\":[],\"slots\":[],\"size\":1,\"newest\":1",
       "ends early"},
      {'s', 200, "{\"victims\":[1 2],\"slots\":[],\"size\":1,\"newest\":1}",
       "expected ','"},
      {'s', 200, "{\"victims\":[],\"slots\":[],\"size\":1,\"newest\":1,"
                 "\"x\":\"a\tb\"}",
       "control character"},
      {'s', 200, "{\"victims\":[],\"slots\":[],\"size\":1,\"newest\":1,"
                 "\"x\":\"\\ud800\"}",
       "surrogate"},
      {'s', 200, "{\"victims\":[],\"slots\":[],\"size\":1,\"newest\":1,"
                 "\"x\":tru}",
       "not a JSON value"},
      {'s', 500, "<html><body>oops</body></html>", "not a JSON object"},
      {'s', 409, "{\"error\":{\"code\":\"stale_position\"}}",
       "without \"message\""},
      {'s', 400, "{\"error\":\"x\"}", "not an object"},
      {'s', 404, "{\"nothing\":1}", "without \"error\""},
      {'s', 302, STEP, "unexpected status"},
      {'b', 200, "{\"results\":[" STEP "]}", "fewer results"},
      {'b', 200, "{\"results\":[" STEP "," STEP "," STEP "]}",
       "more results"},
      {'b', 200, "{\"results\":[" STEP ",{\"error\":{\"code\":\"x\","
                 "\"message\":\"m\"}}]}",
       "\"status\""},
      {'b', 200, "{\"steps\":[]}", "without \"results\""},
      {'g', 200, "{\"id\":\"a\",\"budget\":1,\"sinks\":0,\"size\":1,"
                 "\"newest\":0,\"slots\":[0]}",
       "\"kept\""},
      {'g', 200, "{\"id\":7,\"budget\":1,\"sinks\":0,\"size\":1,"
                 "\"newest\":0,\"kept\":[0],\"slots\":[0]}",
       "expected a string"},
      {'c', 200, "{\"victims\":[],\"size\":1,\"newest\":1}", "\"dropped\""},
      {'e', 200, "{\"victims\":[]}", "\"size\""},
  };
  evd_step_t two[2] = {one_step("a"), one_step("b")};
  evd_batch_result_t out[2];
  size_t i;

  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    fk_rule_t rule = {FK_ANSWER, bad[i].status, bad[i].body};
    fake_t *f = fake(&rule, 1);
    evd_client_t *c = tc_client(fake_url(f), 0);
    evd_step_t s = one_step("a");
    evd_answer_t a;
    evd_view_t v;
    int rc;

    switch (bad[i].op) {
    case 's': rc = evd_client_step(c, &s, &a); break;
    case 'b': rc = evd_client_batch(c, two, 2, out); break;
    case 'g': rc = evd_client_get(c, "a", &v); break;
    case 'c': rc = evd_client_commit(c, "a", 1, &a); break;
    default: rc = evd_client_evict(c, "a", -1, &a); break;
    }
    ck_assert_msg(rc == EVD_CLIENT_EPROTO, "case %zu (%s): rc %d (%s)", i,
                  bad[i].body, rc, evd_client_error(c)->message);
    ck_assert_str_eq(evd_client_error(c)->code, "protocol_error");
    ck_assert_int_eq(evd_client_error(c)->status, bad[i].status);
    ck_assert_msg(strstr(evd_client_error(c)->message, bad[i].says) != NULL,
                  "case %zu: \"%s\" does not say \"%s\"", i,
                  evd_client_error(c)->message, bad[i].says);
    evd_client_free(c);
    fake_stop(f);
  }
}
END_TEST

/* What a newer daemon may add is passed over; escapes are decoded. */
START_TEST(unknown_fields_and_escapes) {
  static const fk_rule_t rules[] = {
      {FK_ANSWER, 200,
       "{\"future\":{\"a\":[1,-2.5e3,{\"b\":null}],\"c\":\"\\u00e9\\ud83d"
       "\\ude00\\\"\"},\"victims\" : [ 7 , 8 ],\"slots\":[1],\"size\":2,"
       "\"newest\":9,\"more\":[true,false]}"},
      {FK_ANSWER, 409,
       "{\"error\":{\"code\":\"stale_position\",\"message\":\"\\\"pos\\\" "
       "\\u00e9\\n\",\"newest\":4294967295,\"hint\":[]}}"}};
  fake_t *f = fake(rules, 2);
  evd_client_t *c = tc_client(fake_url(f), 0);
  evd_step_t s = one_step("a");
  evd_answer_t a;

  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  ck_assert_int_eq(a.victims.n, 2);
  ck_assert_int_eq(a.victims.v[1], 8);
  ck_assert_int_eq(a.newest, 9);
  tc_expect_err(c, evd_client_step(c, &s, &a), EVD_CLIENT_EAPI,
                "stale_position", 409);
  ck_assert_str_eq(evd_client_error(c)->message, "\"pos\" \xc3\xa9\n");
  ck_assert_int_eq(evd_client_error(c)->newest, 4294967295LL);
  evd_client_free(c);
  fake_stop(f);
}
END_TEST

Suite *faults_suite(void) {
  Suite *s = suite_create("faults");
  TCase *tc = tcase_create("fake daemon");

  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, libcurl_resend_on_a_reused_connection_is_counted);
  tcase_add_test(tc, evict_is_never_resent_once_it_may_have_been_delivered);
  tcase_add_test(tc, batch_naming_a_session_twice_is_never_resent);
  tcase_add_test(tc, client_resends_a_step_whose_answer_was_lost);
  tcase_add_test(tc, silence_is_a_timeout_and_not_resent);
  tcase_add_test(tc, resend_timeouts_sends_a_timed_out_step_again);
  tcase_add_test(tc, resend_timeouts_never_sends_an_evict_again);
  tcase_add_test(tc, resend_timeouts_stops_when_reconnect_ms_is_spent);
  tcase_add_test(tc, answers_that_are_not_the_contract);
  tcase_add_test(tc, unknown_fields_and_escapes);
  suite_add_tcase(s, tc);
  return s;
}
