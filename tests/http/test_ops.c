/* What operators rely on: GET /metrics, the bearer token of --token-file,
 * the --probe health check, and --conn-timeout cutting off connections
 * that are idle or trickle their request. */
#include <errno.h>
#include <netinet/in.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

#define TOKEN "0123456789abcdef-Token_~"

/* ---- metrics ------------------------------------------------------------ */

/* Asserts that every line is a comment or a sample of the Prometheus text
 * format, and that there are samples. */
static void check_prometheus_text(const char *text) {
  regex_t sample;
  char *copy = strdup(text), *line, *save = NULL;
  int samples = 0;

  ck_assert_int_eq(
      regcomp(&sample,
              "^[a-zA-Z_:][a-zA-Z0-9_:]*(\\{[a-zA-Z_][a-zA-Z0-9_]*=\"[^\"]*\""
              "(,[a-zA-Z_][a-zA-Z0-9_]*=\"[^\"]*\")*\\})? "
              "(-?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?|NaN|[-+]Inf)"
              "( -?[0-9]+)?$",
              REG_EXTENDED | REG_NOSUB),
      0);
  ck_assert_msg(text[0] != '\0' && text[strlen(text) - 1] == '\n',
                "the exposition must end with a newline");
  for (line = strtok_r(copy, "\n", &save); line != NULL;
       line = strtok_r(NULL, "\n", &save)) {
    if (line[0] == '#') {
      ck_assert_msg(strncmp(line, "# HELP ", 7) == 0 ||
                        strncmp(line, "# TYPE ", 7) == 0,
                    "odd comment: %s", line);
      continue;
    }
    ck_assert_msg(regexec(&sample, line, 0, NULL, 0) == 0,
                  "not a sample line: %s", line);
    samples++;
  }
  regfree(&sample);
  free(copy);
  ck_assert_int_gt(samples, 0);
}

START_TEST(metrics_get_and_head) {
  static const char ct[] = "text/plain; version=0.0.4; charset=utf-8";
  hc_response_t r;
  ht_t t;
  json_t *j;

  ht_up(&t, NULL, NULL);
  ht_do(&t, "POST", "/session/m/step", "{\"pos\":1}", 200);
  ck_assert_int_eq(hc_request(&t.c, "GET", "/metrics", NULL, &r), 0);
  ck_assert_int_eq(r.status, 200);
  ck_assert_str_eq(hc_header(&r, "Content-Type"), ct);
  check_prometheus_text(r.body);
  hc_response_free(&r);
  ck_assert_int_eq(hc_request(&t.c, "HEAD", "/metrics", NULL, &r), 0);
  ck_assert_int_eq(r.status, 200);
  ck_assert_str_eq(hc_header(&r, "Content-Type"), ct);
  ck_assert_uint_eq(r.body_len, 0);
  hc_response_free(&r);
  ck_assert_int_eq(hc_request(&t.c, "POST", "/metrics", "{}", &r), 0);
  ck_assert_int_eq(r.status, 405);
  ck_assert_str_eq(hc_header(&r, "Allow"), "GET, HEAD");
  j = json_loads(r.body, 0, NULL);
  ht_check_error(j, 405, "method_not_allowed", 0);
  json_decref(j);
  hc_response_free(&r);
  ht_down(&t);
}
END_TEST

/* ---- bearer token ------------------------------------------------------- */

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");

  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

/* Asserts a 401 with its WWW-Authenticate header, sending `auth` (a whole
 * header line or NULL). */
static void expect_401(ht_t *t, const char *method, const char *path,
                       const char *auth) {
  hc_response_t r;
  json_t *j;

  ck_assert_int_eq(hc_send(&t->c, method, path, auth, NULL, 0, 0), 0);
  ck_assert_int_eq(hc_read_response(&t->c, strcmp(method, "HEAD") == 0, &r),
                   0);
  ck_assert_msg(r.status == 401, "%s %s (%s): status %d", method, path,
                auth ? auth : "no token", r.status);
  ck_assert_msg(hc_header(&r, "WWW-Authenticate") != NULL &&
                    strcmp(hc_header(&r, "WWW-Authenticate"),
                           "Bearer realm=\"evictd\"") == 0,
                "%s %s: WWW-Authenticate %s", method, path,
                hc_header(&r, "WWW-Authenticate"));
  if (strcmp(method, "HEAD") != 0) {
    j = json_loads(r.body, 0, NULL);
    ht_check_error(j, 401, "unauthorized", 0);
    json_decref(j);
  }
  hc_response_free(&r);
}

START_TEST(token_file_requires_bearer_token) {
  static const char *const wrong[] = {
      "Authorization: Bearer 0123456789abcdef-Token_\r\n",
      "Authorization: Bearer " TOKEN "x\r\n",
      "Authorization: Bearer 0123456789abcdef-Token_!\r\n",
      "Authorization: Basic " TOKEN "\r\n",
      "Authorization: " TOKEN "\r\n",
      "Authorization: Bearer\r\n",
      NULL};
  static const char *const paths[] = {"/session/a", "/metrics", "/nope",
                                      "/step", "/session/a/step"};
  char path[80], flag[100];
  hc_response_t r;
  size_t i, k;
  ht_t t;

  snprintf(path, sizeof path, "/tmp/evictd-http-token-%ld", (long)getpid());
  write_file(path, "  " TOKEN "  \nsecond line is ignored\n");
  ht_up(&t, NULL, ARGS("--token-file", path));
  unlink(path); /* read at start-up: no need to leave it behind */
  ht_expect(&t, "GET", "/healthz", NULL, 200, "{\"status\":\"ok\"}");
  for (i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    expect_401(&t, "GET", paths[i], NULL);
    expect_401(&t, "POST", paths[i], NULL);
    for (k = 0; wrong[k] != NULL; k++)
      expect_401(&t, "GET", paths[i], wrong[k]);
  }
  expect_401(&t, "PUT", "/session/a", NULL);
  expect_401(&t, "HEAD", "/session/a", NULL);
  expect_401(&t, "DELETE", "/session/a", NULL);
  t.headers = "Authorization: Bearer " TOKEN "\r\n";
  /* Nothing refused was done. */
  ht_error(&t, "GET", "/session/a", NULL, 404, "unknown_session");
  ht_do(&t, "PUT", "/session/a", "{\"budget\":2}", 201);
  ht_do(&t, "POST", "/session/a/step", "{\"pos\":1}", 200);
  ht_do(&t, "POST", "/step", "{\"steps\":[{\"session\":\"a\",\"pos\":2}]}",
          200);
  ht_error(&t, "GET", "/nope", NULL, 404, "not_found");
  ck_assert_int_eq(hc_send(&t.c, "GET", "/metrics", t.headers, NULL, 0, 0), 0);
  ck_assert_int_eq(hc_read_response(&t.c, 0, &r), 0);
  ck_assert_int_eq(r.status, 200);
  hc_response_free(&r);
  ht_do(&t, "DELETE", "/session/a", NULL, 204);
  ht_down(&t);
  /* The same from the environment. */
  snprintf(flag, sizeof flag, "EVICTD_TOKEN_FILE=%s", path);
  write_file(path, TOKEN "\n");
  ht_up(&t, ARGS(flag), NULL);
  unlink(path);
  expect_401(&t, "GET", "/session/a", NULL);
  t.headers = "Authorization: Bearer " TOKEN "\r\n";
  ht_error(&t, "GET", "/session/a", NULL, 404, "unknown_session");
  ht_down(&t);
}
END_TEST

START_TEST(bad_token_files_exit_2) {
  static const char *const contents[] = {"short-token\n", "",
                                         "0123456789 abcdef-with-blank\n",
                                         "\n" TOKEN "\n"};
  char path[80], *out;
  size_t i;
  int rc;

  snprintf(path, sizeof path, "/tmp/evictd-http-badtoken-%ld",
           (long)getpid());
  for (i = 0; i < sizeof contents / sizeof contents[0]; i++) {
    write_file(path, contents[i]);
    rc = ht_daemon_run(ARGS("--listen", "127.0.0.1:0", "--token-file", path),
                       NULL, &out);
    unlink(path);
    ck_assert_msg(rc == 2 && out[0] != '\0', "token file %zu: exit %d: %s",
                  i, rc, out);
    free(out);
  }
  rc = ht_daemon_run(ARGS("--token-file", "/nonexistent/evictd-token"), NULL,
                     &out);
  ck_assert_msg(rc == 2, "missing token file: exit %d: %s", rc, out);
  free(out);
}
END_TEST

/* ---- probe -------------------------------------------------------------- */

static int probe(const char *url) {
  char *out;
  int rc = ht_daemon_run(ARGS("--probe", url), NULL, &out);

  free(out);
  return rc;
}

/* A loopback port that nothing listens on (bound, then released). */
static int free_port(void) {
  struct sockaddr_in sa;
  socklen_t len = sizeof sa;
  int fd = socket(AF_INET, SOCK_STREAM, 0), port;

  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
  port = ntohs(sa.sin_port);
  close(fd);
  return port;
}

START_TEST(probe_exits_0_only_on_200) {
  char url[300], sock[80], listen[90];
  ht_t t;

  ht_up(&t, NULL, NULL);
  snprintf(url, sizeof url, "http://%s/healthz", t.d.addr);
  ck_assert_int_eq(probe(url), 0);
  snprintf(url, sizeof url, "http://%s/session/none", t.d.addr);
  ck_assert_int_eq(probe(url), 1);
  snprintf(url, sizeof url, "http://%s/nope", t.d.addr);
  ck_assert_int_eq(probe(url), 1);
  ht_do(&t, "PUT", "/session/p", NULL, 201);
  snprintf(url, sizeof url, "http://%s/session/p", t.d.addr);
  ck_assert_int_eq(probe(url), 0);
  ht_down(&t);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/healthz", free_port());
  ck_assert_int_eq(probe(url), 1);
  /* Over a Unix socket. */
  snprintf(sock, sizeof sock, "/tmp/evictd-http-probe-%ld.sock",
           (long)getpid());
  unlink(sock);
  snprintf(listen, sizeof listen, "unix:%s", sock);
  ht_up(&t, NULL, ARGS("--listen", listen));
  ck_assert_int_eq(probe(listen), 0);
  ht_down(&t);
  ck_assert_int_eq(probe(listen), 1);
  unlink(sock);
}
END_TEST

/* ---- connection deadlines ----------------------------------------------- */

START_TEST(conn_timeout_cuts_off_trickling_request) {
  static const char req[] = "GET /healthz HTTP/1.1\r\nHost: evictd.test\r\n"
                            "X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"
                            "\r\n";
  size_t i;
  int closed = 0;
  ht_t t;

  ht_up(&t, NULL, ARGS("--conn-timeout", "1"));
  /* One byte every 250 ms would take 25 s: far past the 1 s deadline. */
  for (i = 0; i < sizeof req - 1 && !closed; i++) {
    if (hc_write_all(&t.c, req + i, 1) != 0) {
      closed = 1;
      break;
    }
    closed = hc_wait_closed(&t.c, 250);
    ck_assert_msg(closed >= 0, "the daemon answered a request cut short");
  }
  ck_assert_msg(closed, "a trickling connection was never cut off");
  ck_assert_msg(i < 40, "cut off only after %zu bytes (%zu ms)", i, i * 250);
  /* Others are still served. */
  hc_close(&t.c);
  ck_assert_int_eq(hc_connect(&t.c, t.d.addr, 20), 0);
  ht_do(&t, "GET", "/healthz", NULL, 200);
  ht_down(&t);
}
END_TEST

START_TEST(conn_timeout_closes_idle_connection) {
  ht_t t;

  ht_up(&t, NULL, ARGS("--conn-timeout", "1"));
  ht_do(&t, "GET", "/healthz", NULL, 200);
  ck_assert_int_eq(hc_wait_closed(&t.c, 15000), 1);
  ht_down(&t);
}
END_TEST

/* Idle connections hold a descriptor each and nothing else: 2,000 of them
 * (fewer where the descriptor limit is lower), some with half a request
 * sent, must not keep a new client waiting. */
START_TEST(two_thousand_idle_connections_do_not_block_others) {
  enum { MOST = 2000, SPARE = 150 };
  static hc_conn_t idle[MOST];
  struct rlimit rl;
  hc_response_t r;
  hc_conn_t fresh;
  int i, opened = 0, IDLE = MOST;
  ht_t t;

  /* This process needs a descriptor per connection too, and so does the
   * daemon (it has the same limit): take what the machine allows. */
  ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur < MOST + SPARE) {
    rl.rlim_cur = rl.rlim_max < MOST + SPARE ? rl.rlim_max : MOST + SPARE;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur < MOST + SPARE) {
    IDLE = rl.rlim_cur > 200 + SPARE ? (int)rl.rlim_cur - SPARE : 200;
    fprintf(stderr, "idle connections: the descriptor limit here is %llu "
            "(hard %llu), so %d idle connections instead of %d\n",
            (unsigned long long)rl.rlim_cur,
            (unsigned long long)rl.rlim_max, IDLE, MOST);
  }
  ht_up(&t, NULL, ARGS("--conn-timeout", "60"));
  for (i = 0; i < IDLE; i++) {
    ck_assert_msg(hc_connect(&idle[i], t.d.addr, 20) == 0,
                  "connection %d refused", i);
    opened++;
    if (i % 4 == 0) /* a request that never finishes */
      hc_write_all(&idle[i], "GET /healthz HTTP/1.1\r\nHost: x\r\n", 32);
  }
  /* A new client is served, as are the old connection and a step. */
  ck_assert_int_eq(hc_connect(&fresh, t.d.addr, 20), 0);
  ck_assert_int_eq(hc_send(&fresh, "GET", "/healthz", NULL, NULL, 0, 0), 0);
  ck_assert_int_eq(hc_read_response(&fresh, 0, &r), 0);
  ck_assert_int_eq(r.status, 200);
  hc_response_free(&r);
  ck_assert_int_eq(hc_send(&fresh, "POST", "/session/c/step", NULL,
                           "{\"pos\":1}", 9, 0), 0);
  ck_assert_int_eq(hc_read_response(&fresh, 0, &r), 0);
  ck_assert_int_eq(r.status, 200);
  hc_response_free(&r);
  /* The idle ones are really open: the daemon holds them all at once. */
  for (i = 0; i < 200; i++) {
    const char *g;
    int held;
    ck_assert_int_eq(hc_send(&fresh, "GET", "/metrics", NULL, NULL, 0, 0), 0);
    ck_assert_int_eq(hc_read_response(&fresh, 0, &r), 0);
    g = strstr(r.body, "\nevictd_connections ");
    ck_assert_ptr_nonnull(g);
    held = atoi(g + strlen("\nevictd_connections "));
    hc_response_free(&r);
    if (held >= IDLE)
      break;
    usleep(100000);
  }
  ck_assert_msg(i < 200, "the daemon never held %d connections at once", IDLE);
  hc_close(&fresh);
  for (i = 0; i < opened; i++)
    hc_close(&idle[i]);
  ht_do(&t, "GET", "/healthz", NULL, 200);
  ht_down(&t);
}
END_TEST

/* Headers beyond what the connection's pool holds are refused (431; when
 * the daemon closes with the rest of the headers unread, the kernel may
 * turn that into a reset the client sees instead), and the daemon goes on
 * serving. */
START_TEST(oversized_headers_are_refused) {
  static char req[24000];
  hc_response_t r;
  hc_conn_t big;
  size_t n;
  ht_t t;

  ht_up(&t, NULL, NULL);
  n = (size_t)snprintf(req, sizeof req,
                       "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ");
  memset(req + n, 'a', 12000);
  n += 12000;
  memcpy(req + n, "\r\n\r\n", 4);
  n += 4;
  ck_assert_int_eq(hc_connect(&big, t.d.addr, 20), 0);
  /* The daemon may answer and close before reading it all: a failed
   * write is fine, the answer is what counts. */
  (void)hc_write_all(&big, req, n);
  if (hc_read_response(&big, 0, &r) == 0) {
    ck_assert_int_eq(r.status, 431);
    hc_response_free(&r);
  } else {
    ck_assert_int_eq(hc_wait_closed(&big, 5000), 1);
  }
  hc_close(&big);
  ht_do(&t, "GET", "/healthz", NULL, 200);
  ht_down(&t);
}
END_TEST

Suite *ops_suite(void) {
  Suite *s = suite_create("ops");
  TCase *tc = tcase_create("ops");

  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, metrics_get_and_head);
  tcase_add_test(tc, token_file_requires_bearer_token);
  tcase_add_test(tc, bad_token_files_exit_2);
  tcase_add_test(tc, probe_exits_0_only_on_200);
  tcase_add_test(tc, conn_timeout_cuts_off_trickling_request);
  tcase_add_test(tc, conn_timeout_closes_idle_connection);
  tcase_add_test(tc, two_thousand_idle_connections_do_not_block_others);
  tcase_add_test(tc, oversized_headers_are_refused);
  suite_add_tcase(s, tc);
  return s;
}
