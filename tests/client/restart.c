/* The C client riding through a daemon killed with SIGKILL and restarted
 * on the same unix socket with its state directory (--fsync always): a
 * step sent while the daemon is down is sent again until it is back
 * (reconnect_ms), and a step whose answer was lost after the daemon had
 * applied it is answered, once sent again, with the same answer and
 * "replayed": true. The relay of fake.h loses that answer on cue. */
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "fake.h"

static char dir[64], sock[128], state[128];
static const char *args[] = {"--listen", sock,     "--state-dir", state,
                             "--fsync",  "always", NULL};
static int restarted_rc = -1;

static void setup_dirs(void) {
  tc_tmpdir(dir, sizeof dir);
  snprintf(sock, sizeof sock, "unix:%s/evictd.sock", dir);
  snprintf(state, sizeof state, "%s/state", dir);
}

static void kill9(void) {
  ck_assert_int_eq(kill(tc_daemon.pid, SIGKILL), 0);
  ht_daemon_stop(&tc_daemon, 0);
  ht_daemon_free(&tc_daemon);
}

/* The step that is sent while the daemon is down runs in a thread of its
 * own, so that the daemon is started again from the main thread: a child's
 * PR_SET_PDEATHSIG follows the thread that forked it. */
typedef struct {
  evd_client_t *c;
  const evd_step_t *s;
  evd_answer_t a;
  int rc;
} call_t;

static void *step_in_thread(void *arg) {
  call_t *k = arg;
  k->rc = evd_client_step(k->c, k->s, &k->a);
  return NULL;
}

/* A copy of a list, to compare with an answer that will have replaced it
 * in the client's memory. */
typedef struct {
  uint32_t v[64];
  size_t n;
} saved_t;

static void save(saved_t *s, evd_list_t l) {
  ck_assert(l.n <= 64);
  s->n = l.n;
  if (l.n > 0)
    memcpy(s->v, l.v, l.n * sizeof *l.v);
}

START_TEST(resend_rides_through_a_sigkill_and_restart) {
  static const uint32_t p[] = {0, 1, 2, 3, 4, 5};
  evd_session_cfg_t cfg = {4, -1, -1, -1};
  evd_step_t s = {0};
  evd_client_stats_t st;
  saved_t victims, slots;
  evd_client_t *c;
  evd_answer_t a;
  evd_view_t v;
  pthread_t t;
  long t0, took;
  call_t k;

  setup_dirs();
  tc_start(args);
  ck_assert_str_eq(tc_url, sock);
  c = tc_client(NULL, 10000);
  ck_assert_int_eq(evd_client_create(c, "r", &cfg, NULL), 0);
  s.session = "r";
  s.positions = p + 1;
  s.n_positions = 3;
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  /* Down while idle; back in 300 ms, on the same socket path. */
  kill9();
  s.positions = p + 4;
  s.n_positions = 2;
  k.c = c;
  k.s = &s;
  t0 = tc_now_ms();
  ck_assert_int_eq(pthread_create(&t, NULL, step_in_thread, &k), 0);
  usleep(300 * 1000);
  restarted_rc = ht_daemon_start(&tc_daemon, args, NULL);
  pthread_join(t, NULL);
  took = tc_now_ms() - t0;
  ck_assert_int_eq(restarted_rc, 0);
  ck_assert_msg(k.rc == 0, "%s", evd_client_error(c)->message);
  ck_assert_msg(took >= 250, "answered after %ld ms, before the restart",
                took);
  a = k.a;
  ck_assert(!a.replayed);
  tc_expect_list(a.victims, p, 2, "victims");
  save(&victims, a.victims);
  save(&slots, a.slots);
  evd_client_stats(c, &st);
  ck_assert_msg(st.resends >= 1, "%lu resends", (unsigned long)st.resends);
  /* The restarted daemon still knows the step: sent again, replayed. */
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  ck_assert(a.replayed);
  tc_expect_list(a.victims, victims.v, victims.n, "replayed victims");
  tc_expect_list(a.slots, slots.v, slots.n, "replayed slots");
  ck_assert_int_eq(evd_client_get(c, "r", &v), 0);
  tc_expect_list(v.kept, p + 2, 4, "kept");
  evd_client_free(c);
  tc_stop();
  tc_rmdir(dir);
}
END_TEST

static void lose(void *arg) {
  (void)arg;
  kill(tc_daemon.pid, SIGKILL);
  ht_daemon_stop(&tc_daemon, 0);
  ht_daemon_free(&tc_daemon);
  restarted_rc = ht_daemon_start(&tc_daemon, args, NULL);
}

/* The answer the relay lost, against the one the client got. */
static void expect_lost_answer(relay_t *r, const evd_answer_t *a) {
  const char *body = relay_lost_body(r);
  json_error_t err;
  json_t *o, *x;
  size_t i;

  ck_assert_ptr_nonnull(body);
  o = json_loads(body, 0, &err);
  ck_assert_msg(o != NULL, "the lost answer: %s", body);
  ck_assert_msg(json_object_get(o, "replayed") == NULL, "%s", body);
  ck_assert_int_eq(json_array_size(json_object_get(o, "victims")),
                   a->victims.n);
  json_array_foreach(json_object_get(o, "victims"), i, x)
      ck_assert_int_eq(json_integer_value(x), a->victims.v[i]);
  ck_assert_int_eq(json_array_size(json_object_get(o, "slots")), a->slots.n);
  json_array_foreach(json_object_get(o, "slots"), i, x)
      ck_assert_int_eq(json_integer_value(x), a->slots.v[i]);
  ck_assert_int_eq(json_integer_value(json_object_get(o, "size")), a->size);
  ck_assert_int_eq(json_integer_value(json_object_get(o, "newest")),
                   a->newest);
  json_decref(o);
}

START_TEST(lost_answer_of_an_applied_step_is_replayed_after_restart) {
  static const uint32_t p[] = {0, 1, 2, 3, 4, 5, 6};
  evd_session_cfg_t cfg = {4, -1, -1, -1};
  char relay_path[128], url[140];
  evd_client_stats_t st;
  evd_step_t s = {0};
  evd_client_t *c, *fresh;
  evd_answer_t a;
  evd_view_t v;
  relay_t *r;

  setup_dirs();
  tc_start(args);
  snprintf(relay_path, sizeof relay_path, "%s/relay.sock", dir);
  snprintf(url, sizeof url, "unix:%s", relay_path);
  ck_assert_ptr_nonnull(r = relay_start(relay_path, sock + 5));
  c = tc_client(url, 10000);
  s.session = "r";
  s.positions = p + 1;
  s.n_positions = 1;
  s.create = &cfg;
  ck_assert_int_eq(evd_client_step(c, &s, &a), 0);
  /* On the kept-alive connection: libcurl sends it again by itself. */
  relay_lose_next(r, lose, NULL);
  s.positions = p + 2;
  s.n_positions = 3;
  ck_assert_msg(evd_client_step(c, &s, &a) == 0, "%s",
                evd_client_error(c)->message);
  ck_assert_int_eq(restarted_rc, 0);
  ck_assert(a.replayed);
  expect_lost_answer(r, &a);
  tc_expect_list(a.victims, p, 1, "victims");
  evd_client_stats(c, &st);
  ck_assert_int_eq(st.resends, 1);
  ck_assert_int_eq(st.replayed, 1);
  /* On a new connection: the client sends it again itself. (The relay
   * serves one connection at a time: the first client's goes first.) */
  evd_client_free(c);
  fresh = tc_client(url, 10000);
  restarted_rc = -1;
  relay_lose_next(r, lose, NULL);
  s.positions = p + 5;
  s.n_positions = 2;
  ck_assert_msg(evd_client_step(fresh, &s, &a) == 0, "%s",
                evd_client_error(fresh)->message);
  ck_assert_int_eq(restarted_rc, 0);
  ck_assert(a.replayed);
  expect_lost_answer(r, &a);
  tc_expect_list(a.victims, p + 1, 2, "victims");
  evd_client_stats(fresh, &st);
  ck_assert_int_eq(st.resends, 1);
  ck_assert_int_eq(st.connections, 2);
  ck_assert_int_eq(evd_client_get(fresh, "r", &v), 0);
  tc_expect_list(v.kept, p + 3, 4, "kept");
  evd_client_free(fresh);
  tc_stop();
  relay_stop(r); /* after the daemon the relay's thread started */
  tc_rmdir(dir);
}
END_TEST

Suite *restart_suite(void) {
  Suite *s = suite_create("restart");
  TCase *tc = tcase_create("sigkill");

  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, resend_rides_through_a_sigkill_and_restart);
  tcase_add_test(tc, lost_answer_of_an_applied_step_is_replayed_after_restart);
  suite_add_tcase(s, tc);
  return s;
}
