/* The C client's connections: unix: and https:// URLs, idle connections the
 * daemon closed, bearer tokens, timeouts, refused connections, and answer
 * memory that is reused, not grown. Part of the "client" suite. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

START_TEST(unix_socket_url_keeps_one_connection) {
  char dir[64], listen[128];
  const char *args[] = {"--listen", listen, NULL};
  evd_client_stats_t st;
  evd_client_t *c;
  evd_answer_t a;
  uint32_t pos;
  evd_step_t s = tc_step("u", &pos, 1);

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
  evd_step_t s = tc_step("idle", &pos, 1);

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
  evd_step_t s = tc_step("tls", &pos, 1);

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
  evd_step_t s = tc_step("t", &pos, 1);
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
  evd_step_t s = tc_step("m", &p, 1);
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
    steps[i] = tc_step(ids[i], &pos[i], 1);
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
  evd_step_t s = tc_step("big", p, 60000);
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

/* Adds this file's tests to the "daemon" case, in this order. */
void tc_add_transport_tests(TCase *tc) {
  tcase_add_test(tc, unix_socket_url_keeps_one_connection);
  tcase_add_test(tc, idle_connection_closed_by_daemon_is_replaced);
  tcase_add_test(tc, https_with_cafile_insecure_and_untrusted);
  tcase_add_test(tc, token_file_and_unauthorized);
  tcase_add_test(tc, timeout_when_nothing_answers);
  tcase_add_test(tc, connection_refused);
  tcase_add_test(tc, answer_memory_is_reused);
  tcase_add_test(tc, large_answers);
}
