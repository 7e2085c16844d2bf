/* The asynchronous batch (evd_client_batch_send / _recv): the request is on
 * its way when send returns; recv's answers are evd_client_batch's; misuse
 * is refused without touching the request in flight; a timeout, and a
 * connection reset between send and recv, are handled by recv under the
 * resend rules. The "async" suite: the fake daemon (fake.h), then the
 * real one. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "fake.h"

#define STEP "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":1}"
#define STEP_REPLAYED                                                          \
  "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":1,\"replayed\":true}"
#define BATCH2 "{\"results\":[" STEP "," STEP "]}"
#define BATCH2_REPLAYED "{\"results\":[" STEP_REPLAYED "," STEP_REPLAYED "]}"

static const uint32_t one = 1;

static fake_t *fake(const fk_rule_t *rules, size_t n) {
  fake_t *f = fake_start(rules, n);
  ck_assert_msg(f != NULL, "the fake daemon did not start");
  return f;
}

static evd_client_t *client(fake_t *f, unsigned timeout_ms,
                            unsigned reconnect_ms, bool resend_timeouts) {
  return tc_client_with(fake_url(f), timeout_ms, reconnect_ms,
                        resend_timeouts);
}

/* send returns with the request written: the fake daemon reads it while
 * the client is not called at all. */
START_TEST(send_returns_with_the_request_on_its_way) {
  static const fk_rule_t rules[] = {{FK_ANSWER, 200, BATCH2}};
  evd_step_t two[2] = {tc_step("a", &one, 1), tc_step("b", &one, 1)};
  evd_batch_result_t out[2];
  fake_t *f = fake(rules, 1);
  evd_client_t *c = client(f, 10000, 0, false);
  long t0;

  ck_assert_int_eq(evd_client_batch_send(c, two, 2), 0);
  t0 = tc_now_ms();
  while (fake_requests(f, "POST /step") == 0 && tc_now_ms() - t0 < 5000)
    usleep(1000);
  ck_assert_int_eq(fake_requests(f, "POST /step"), 1);
  ck_assert_int_eq(evd_client_batch_recv(c, out), 0);
  ck_assert_int_eq(out[1].rc, 0);
  EXPECT(out[1].answer.slots, 1);
  evd_client_free(c);
  fake_stop(f);
}
END_TEST

/* Misuse: recv without send, a second send, any other call while a batch
 * is in flight: EVD_CLIENT_EINVAL, and the batch in flight goes on
 * untouched. A step send refuses leaves nothing in flight. */
START_TEST(misuse_is_refused_and_the_batch_goes_on) {
  static const fk_rule_t rules[] = {{FK_ANSWER, 200, BATCH2}};
  evd_step_t two[2] = {tc_step("a", &one, 1), tc_step("b", &one, 1)};
  evd_step_t bad = tc_step(NULL, &one, 1);
  evd_batch_result_t out[2];
  fake_t *f = fake(rules, 1);
  evd_client_t *c = client(f, 10000, 0, false);
  evd_view_t v;

  tc_expect_err(c, evd_client_batch_recv(c, out), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  tc_expect_err(c, evd_client_batch_send(c, &bad, 1), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  tc_expect_err(c, evd_client_batch_recv(c, out), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  ck_assert_int_eq(evd_client_batch_send(c, two, 2), 0);
  tc_expect_err(c, evd_client_batch_send(c, two, 1), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  tc_expect_err(c, evd_client_get(c, "a", &v), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  tc_expect_err(c, evd_client_batch(c, two, 1, out), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  ck_assert_msg(strstr(evd_client_error(c)->message, "in flight") != NULL,
                "%s", evd_client_error(c)->message);
  tc_expect_err(c, evd_client_batch_recv(c, NULL), EVD_CLIENT_EINVAL,
                "invalid_argument", 0);
  ck_assert_int_eq(evd_client_batch_recv(c, out), 0);
  ck_assert_int_eq(out[0].rc, 0);
  ck_assert_int_eq(fake_requests(f, NULL), 1);
  fake_stop(f);
  /* Freeing a client with a batch in flight is fine (ASan: no leak). */
  f = fake(rules, 1);
  evd_client_free(c);
  c = client(f, 10000, 0, false);
  ck_assert_int_eq(evd_client_batch_send(c, two, 2), 0);
  evd_client_free(c);
  fake_stop(f);
}
END_TEST

/* recv reports the whole request's failure as evd_client_batch does. */
START_TEST(recv_reports_a_refusal_and_a_timeout) {
  static const fk_rule_t refused[] = {
      {FK_ANSWER, 400, "{\"error\":{\"code\":\"invalid_json\","
                       "\"message\":\"m\"}}"}};
  static const fk_rule_t silent[] = {{FK_SILENT, 0, NULL},
                                     {FK_ANSWER, 200, BATCH2_REPLAYED}};
  evd_step_t two[2] = {tc_step("a", &one, 1), tc_step("b", &one, 1)};
  evd_batch_result_t out[2];
  fake_t *f = fake(refused, 1);
  evd_client_t *c = client(f, 10000, 0, false);

  ck_assert_int_eq(evd_client_batch_send(c, two, 2), 0);
  tc_expect_err(c, evd_client_batch_recv(c, out), EVD_CLIENT_EAPI,
                "invalid_json", 400);
  evd_client_free(c);
  fake_stop(f);
  /* No answer: a timeout; with resend_timeouts, sent again by recv. */
  f = fake(silent, 2);
  c = client(f, 300, 0, false);
  ck_assert_int_eq(evd_client_batch_send(c, two, 2), 0);
  tc_expect_err(c, evd_client_batch_recv(c, out), EVD_CLIENT_ETIMEOUT,
                "timeout", 0);
  ck_assert_int_eq(fake_requests(f, "POST /step"), 1);
  evd_client_free(c);
  fake_stop(f);
  f = fake(silent, 2);
  c = client(f, 300, 5000, true);
  ck_assert_int_eq(evd_client_batch_send(c, two, 2), 0);
  ck_assert_msg(evd_client_batch_recv(c, out) == 0, "%s",
                evd_client_error(c)->message);
  ck_assert(out[0].answer.replayed && out[1].answer.replayed);
  ck_assert_int_eq(fake_requests(f, "POST /step"), 2);
  evd_client_free(c);
  fake_stop(f);
}
END_TEST

/* The connection dies after the request went out (the fake reads it and
 * closes): recv sends it again, and the daemon's replay answers; a batch
 * naming a session twice is not sent again. */
START_TEST(connection_reset_between_send_and_recv) {
  static const fk_rule_t rules[] = {{FK_ANSWER, 200, BATCH2},
                                    {FK_CLOSE, 0, NULL},
                                    {FK_ANSWER, 200, BATCH2_REPLAYED}};
  evd_step_t two[2] = {tc_step("a", &one, 1), tc_step("b", &one, 1)};
  evd_step_t twice[2] = {tc_step("a", &one, 1), tc_step("a", &one, 1)};
  evd_batch_result_t out[2];
  evd_client_stats_t st;
  fake_t *f = fake(rules, 3);
  evd_client_t *c = client(f, 10000, 0, false);
  long t0;

  ck_assert_int_eq(evd_client_batch(c, two, 2, out), 0);
  ck_assert_int_eq(evd_client_batch_send(c, two, 2), 0);
  t0 = tc_now_ms(); /* the fake has read it and closed */
  while (fake_requests(f, "POST /step") < 2 && tc_now_ms() - t0 < 5000)
    usleep(1000);
  usleep(50 * 1000);
  ck_assert_msg(evd_client_batch_recv(c, out) == 0, "%s",
                evd_client_error(c)->message);
  ck_assert(out[0].answer.replayed && out[1].answer.replayed);
  ck_assert_int_eq(fake_requests(f, "POST /step"), 3);
  evd_client_stats(c, &st);
  ck_assert_int_eq(st.resends, 1);
  ck_assert_int_eq(st.replayed, 2);
  evd_client_free(c);
  fake_stop(f);

  f = fake(rules, 3);
  c = client(f, 10000, 5000, false);
  ck_assert_int_eq(evd_client_batch(c, two, 2, out), 0);
  ck_assert_int_eq(evd_client_batch_send(c, twice, 2), 0);
  tc_expect_err(c, evd_client_batch_recv(c, out), EVD_CLIENT_ECONNECT,
                "connection_failed", 0);
  ck_assert_msg(strstr(evd_client_error(c)->message, "session twice"), "%s",
                evd_client_error(c)->message);
  ck_assert_int_eq(fake_requests(f, "POST /step"), 2);
  evd_client_free(c);
  fake_stop(f);
}
END_TEST

/* ---- the real daemon ---------------------------------------------------- */

#define SEQS 6

/* Two sets of sequences stepped alike, one with evd_client_batch, one
 * with send and recv: every answer and every item's error the same. */
START_TEST(answers_equal_the_synchronous_call) {
  evd_session_cfg_t cfg = {5, 1, 2, 4};
  char ids[2][SEQS][16];
  uint32_t pos[2][SEQS][3];
  evd_step_t steps[2][SEQS];
  evd_batch_result_t out[2][SEQS];
  evd_client_t *sync, *async;
  int k, i, s;

  tc_start(NULL);
  sync = tc_client(NULL, 0);
  async = tc_client(NULL, 0);
  for (s = 0; s < 2; s++)
    for (i = 0; i < SEQS; i++) {
      snprintf(ids[s][i], sizeof ids[s][i], "%c%d", s ? 'y' : 'x', i);
      steps[s][i] = tc_step(ids[s][i], pos[s][i], 1);
      steps[s][i].create = &cfg;
    }
  for (k = 1; k <= 40; k++) {
    for (s = 0; s < 2; s++) {
      for (i = 0; i < SEQS; i++) {
        /* Sequence i steps 1 + i % 3 positions; every 7th iteration
         * sequence 0 sends a stale one, which is that item's error. */
        uint32_t n = 1 + (uint32_t)i % 3, j;
        for (j = 0; j < n; j++)
          pos[s][i][j] = (uint32_t)(k - 1) * 3 + j + 1;
        if (i == 0 && k % 7 == 0)
          pos[s][i][0] = 1, n = 1;
        steps[s][i].n_positions = n;
      }
    }
    ck_assert_int_eq(evd_client_batch(sync, steps[0], SEQS, out[0]), 0);
    ck_assert_int_eq(evd_client_batch_send(async, steps[1], SEQS), 0);
    ck_assert_int_eq(evd_client_batch_recv(async, out[1]), 0);
    for (i = 0; i < SEQS; i++) {
      const evd_answer_t *x = &out[0][i].answer, *y = &out[1][i].answer;
      ck_assert_int_eq(out[0][i].rc, out[1][i].rc);
      if (out[0][i].rc != 0) {
        ck_assert_str_eq(out[0][i].error.code, "stale_position");
        ck_assert_str_eq(out[1][i].error.code, out[0][i].error.code);
        ck_assert_int_eq(out[1][i].error.newest, out[0][i].error.newest);
        continue;
      }
      tc_expect_list(y->victims, x->victims.v, x->victims.n, "victims");
      tc_expect_list(y->slots, x->slots.v, x->slots.n, "slots");
      tc_expect_list(y->pages_new, x->pages_new.v, x->pages_new.n,
                     "pages_new");
      tc_expect_list(y->pages_freed, x->pages_freed.v, x->pages_freed.n,
                     "pages_freed");
      ck_assert_int_eq(y->size, x->size);
      ck_assert_int_eq(y->newest, x->newest);
    }
  }
  evd_client_free(sync);
  evd_client_free(async);
  tc_stop();
}
END_TEST

static void nothing(void *arg) {
  (void)arg;
}

/* The daemon applied the batch and its answer was lost between send and
 * recv (the relay closes the connection): recv sends it again and the
 * daemon answers from its replay records, the same answer. */
START_TEST(answer_lost_between_send_and_recv_is_replayed) {
  static const uint32_t p[] = {1, 2, 3, 4};
  evd_step_t two[2] = {tc_step("l0", p, 3), tc_step("l1", p, 2)};
  evd_batch_result_t out[2];
  evd_client_t *c;
  relay_t *r = tc_relayed(&c);

  ck_assert_int_eq(evd_client_batch(c, two, 2, out), 0);
  two[0] = tc_step("l0", p + 3, 1);
  two[1] = tc_step("l1", p + 2, 1);
  relay_lose_next(r, nothing, NULL);
  ck_assert_int_eq(evd_client_batch_send(c, two, 2), 0);
  ck_assert_msg(evd_client_batch_recv(c, out) == 0, "%s",
                evd_client_error(c)->message);
  ck_assert_int_eq(out[0].rc, 0);
  ck_assert_int_eq(out[1].rc, 0);
  ck_assert(out[0].answer.replayed && out[1].answer.replayed);
  ck_assert_int_eq(out[0].answer.newest, 4);
  ck_assert_int_eq(out[1].answer.newest, 3);
  ck_assert_ptr_nonnull(relay_lost_body(r));
  ck_assert_msg(strstr(relay_lost_body(r), "\"newest\":4") != NULL, "%s",
                relay_lost_body(r));
  tc_relayed_stop(c, r);
}
END_TEST

Suite *async_suite(void) {
  Suite *s = suite_create("async");
  TCase *fk = tcase_create("fake daemon"), *d = tcase_create("daemon");

  tcase_set_timeout(fk, 60);
  tcase_add_test(fk, send_returns_with_the_request_on_its_way);
  tcase_add_test(fk, misuse_is_refused_and_the_batch_goes_on);
  tcase_add_test(fk, recv_reports_a_refusal_and_a_timeout);
  tcase_add_test(fk, connection_reset_between_send_and_recv);
  suite_add_tcase(s, fk);
  tcase_set_timeout(d, 60);
  tcase_add_test(d, answers_equal_the_synchronous_call);
  tcase_add_test(d, answer_lost_between_send_and_recv_is_replayed);
  suite_add_tcase(s, d);
  return s;
}
