/* The daemon as a process: command line and environment, the addresses it
 * listens on, connections kept alive or timed out, idle sessions reaped,
 * and graceful stops on SIGTERM and SIGINT. Also a check of the test
 * client's own response parser. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* ---- command line ------------------------------------------------------- */

START_TEST(help_and_version_exit_0) {
  static const char *const flags[] = {
      "--listen",        "--budget",     "--sinks",        "--max-budget",
      "--max-sessions",  "--max-body",   "--max-positions", "--max-batch",
      "--max-conns",     "--conn-timeout", "--idle-ttl",   "--no-autocreate",
      "--log-level",     "--log-format", "--version",      "--help"};
  char *out;
  size_t i;

  ck_assert_int_eq(ht_daemon_run(ARGS("--help"), NULL, &out), 0);
  for (i = 0; i < sizeof flags / sizeof flags[0]; i++)
    ck_assert_msg(strstr(out, flags[i]) != NULL, "--help lacks %s:\n%s",
                  flags[i], out);
  free(out);
  ck_assert_int_eq(ht_daemon_run(ARGS("--version"), NULL, &out), 0);
  ck_assert_msg(strncmp(out, "evictd ", 7) == 0 && strchr(out, '\n') != NULL &&
                    out[7] >= '0' && out[7] <= '9',
                "--version printed: %s", out);
  free(out);
}
END_TEST

START_TEST(bad_flags_exit_2) {
  static const char *const bad[][3] = {
      {"--budget", "abc", NULL},      {"--budget", "0", NULL},
      {"--budget", "-1", NULL},       {"--budget", "12x", NULL},
      {"--sinks", "512", NULL},       {"--max-body", "lots", NULL},
      {"--idle-ttl", "-5", NULL},     {"--max-sessions", "0", NULL},
      {"--log-level", "loud", NULL},  {"--log-format", "xml", NULL},
      {"--bogus", NULL, NULL},        {"--budget", NULL, NULL},
      {"--no-autocreate=2", NULL, NULL}, {"stray-argument", NULL, NULL},
      {"-x", NULL, NULL}};
  size_t i;
  char *out;

  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc = ht_daemon_run(bad[i], NULL, &out);
    ck_assert_msg(rc == 2 && out[0] != '\0', "%s %s: exit %d, output: %s",
                  bad[i][0], bad[i][1] ? bad[i][1] : "", rc, out);
    free(out);
  }
  /* Values read from the environment are checked alike. */
  ck_assert_int_eq(ht_daemon_run(NULL, ARGS("EVICTD_BUDGET=abc"), &out), 2);
  free(out);
}
END_TEST

/* An unusable --listen value is a bad flag value too. */
START_TEST(bad_listen_values_exit_2) {
  static const char *const bad[] = {"nonsense", "127.0.0.1:99999",
                                    "127.0.0.1:", "unix:relative.sock",
                                    "[::1:0"};
  size_t i;
  char *out;

  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc = ht_daemon_run(ARGS("--listen", bad[i]), NULL, &out);
    ck_assert_msg(rc == 2 && out[0] != '\0', "--listen %s: exit %d, output: %s",
                  bad[i], rc, out);
    free(out);
  }
}
END_TEST

/* The messages that say what to write instead (issue: "--listen :8090"
 * and "--listen http://..." failed without a hint; "--probe host:port"
 * said "cannot connect"). */
START_TEST(bad_addresses_say_what_to_write) {
  static const char *const cases[][3] = {
      {"--listen", ":8090", "0.0.0.0:PORT"},
      {"--listen", "http://127.0.0.1:8090", "not a URL"},
      {"--probe", "127.0.0.1:1", "http://127.0.0.1:1/healthz"}};
  size_t i;
  char *out;

  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *args[] = {cases[i][0], cases[i][1], NULL};
    int rc = ht_daemon_run(args, NULL, &out);
    ck_assert_msg(rc == 2 && strstr(out, cases[i][2]) != NULL,
                  "%s %s: exit %d, output: %s (wanted '%s')", cases[i][0],
                  cases[i][1], rc, out, cases[i][2]);
    free(out);
  }
}
END_TEST

/* --help fits an 80-column terminal. */
START_TEST(help_fits_80_columns) {
  char *out, *line, *save = NULL;

  ck_assert_int_eq(ht_daemon_run(ARGS("--help"), NULL, &out), 0);
  for (line = strtok_r(out, "\n", &save); line != NULL;
       line = strtok_r(NULL, "\n", &save))
    ck_assert_msg(strlen(line) < 80, "%zu columns: %s", strlen(line), line);
  free(out);
}
END_TEST

/* --fsync without --state-dir does nothing: the log says so. */
START_TEST(fsync_without_state_dir_warns) {
  ht_t t;
  char *log;

  ht_up(&t, NULL, ARGS("--fsync", "always"));
  ht_do(&t, "GET", "/healthz", NULL, 200);
  log = ht_daemon_log(&t.d);
  ck_assert_msg(log != NULL && strstr(log, "no effect without --state-dir"),
                "log: %s", log ? log : "(none)");
  free(log);
  ht_down(&t);
}
END_TEST

/* A --state-dir the daemon cannot write in is named as such (it was
 * reported as a failure to lock). As root (CI) the daemon runs as nobody,
 * since root may write anywhere. */
START_TEST(unwritable_state_dir_says_so) {
  char dir[] = "/tmp/evictd-ro-XXXXXX", out[4096];
  int fds[2], status;
  ssize_t n, got = 0;
  pid_t pid;

  ck_assert_ptr_nonnull(mkdtemp(dir));
  ck_assert_int_eq(chmod(dir, 0555), 0);
  ck_assert_int_eq(pipe(fds), 0);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    const char *bin = ht_daemon_bin();
    dup2(fds[1], 2);
    dup2(fds[1], 1);
    close(fds[0]);
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
      _exit(99);
    execl(bin, bin, "--listen", "127.0.0.1:0", "--state-dir", dir,
          (char *)NULL);
    _exit(98);
  }
  close(fds[1]);
  while (got < (ssize_t)sizeof out - 1 &&
         (n = read(fds[0], out + got, sizeof out - 1 - (size_t)got)) > 0)
    got += n;
  out[got] = '\0';
  close(fds[0]);
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  rmdir(dir);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1 &&
                    strstr(out, "cannot write in") != NULL &&
                    strstr(out, "writable by it") != NULL,
                "status %d, output: %s", status, out);
}
END_TEST

START_TEST(environment_configures_and_flags_win) {
  ht_t t;

  ht_up(&t, ARGS("EVICTD_BUDGET=7"), NULL);
  ht_expect(&t, "PUT", "/session/a", NULL, 201,
            "{\"id\":\"a\",\"budget\":7,\"sinks\":0,\"size\":1,\"newest\":0,"
            "\"kept\":[0],\"slots\":[0]}");
  ht_down(&t);
  ht_up(&t, ARGS("EVICTD_BUDGET=7", "EVICTD_SINKS=2"), ARGS("--budget", "9"));
  ht_expect(&t, "PUT", "/session/a", NULL, 201,
            "{\"id\":\"a\",\"budget\":9,\"sinks\":2,\"size\":1,\"newest\":0,"
            "\"kept\":[0],\"slots\":[0]}");
  ht_down(&t);
  /* The address, limits and switches come from the environment too. */
  ht_up(&t,
        ARGS("EVICTD_LISTEN=127.0.0.1:0", "EVICTD_MAX_SESSIONS=1",
             "EVICTD_NO_AUTOCREATE=yes", "EVICTD_MAX_POSITIONS=2",
             "EVICTD_MAX_BATCH=1"),
        NULL);
  ck_assert_msg(strncmp(t.d.addr, "127.0.0.1:", 10) == 0, "address %s",
                t.d.addr);
  ht_error(&t, "POST", "/session/a/step", "{\"pos\":1}", 404,
           "unknown_session");
  ht_do(&t, "PUT", "/session/a", NULL, 201);
  ht_error(&t, "PUT", "/session/b", NULL, 503, "session_limit");
  ht_error(&t, "POST", "/session/a/step", "{\"positions\":[1,2,3]}", 400,
           "too_many_positions");
  ht_error(&t, "POST", "/step", "{\"steps\":[1,2]}", 400, "too_many_steps");
  ht_down(&t);
  ht_up(&t, ARGS("EVICTD_MAX_SESSIONS=1"), ARGS("--max-sessions", "2"));
  ht_do(&t, "PUT", "/session/a", NULL, 201);
  ht_do(&t, "PUT", "/session/b", NULL, 201);
  ht_down(&t);
}
END_TEST

START_TEST(json_log_format_names_the_address) {
  ht_t t;
  char *log, *line;
  json_t *j;

  ht_up(&t, NULL, ARGS("--log-format", "json"));
  ht_do(&t, "GET", "/healthz", NULL, 200);
  log = ht_daemon_log(&t.d);
  line = strstr(log, "listening on");
  ck_assert_ptr_nonnull(line);
  while (line > log && line[-1] != '\n')
    line--;
  *strchrnul(line, '\n') = '\0';
  j = json_loads(line, 0, NULL);
  ck_assert_msg(json_is_object(j) &&
                    strstr(json_string_value(json_object_get(j, "msg")),
                           "listening on ") != NULL,
                "not a JSON log line: %s", line);
  json_decref(j);
  free(log);
  ht_down(&t);
}
END_TEST

/* ---- addresses ---------------------------------------------------------- */

START_TEST(listens_on_unix_socket) {
  char path[80], listen[90];
  ht_t t;

  snprintf(path, sizeof path, "/tmp/evictd-http-%ld.sock", (long)getpid());
  unlink(path);
  snprintf(listen, sizeof listen, "unix:%s", path);
  ht_up(&t, NULL, ARGS("--listen", listen));
  ck_assert_str_eq(t.d.addr, listen);
  ht_do(&t, "GET", "/healthz", NULL, 200);
  ht_do(&t, "PUT", "/session/u", "{\"budget\":2}", 201);
  ht_expect(&t, "POST", "/session/u/step", "{\"positions\":[1,2,3]}", 200,
            "{\"victims\":[0,1],\"slots\":[1,2,0],\"size\":2,\"newest\":3}");
  ck_assert_uint_eq(t.c.responses, 3);
  ht_down(&t);
  unlink(path);
}
END_TEST

/* Whether this machine has an IPv6 loopback to listen on. */
static int have_ipv6_loopback(void) {
  struct sockaddr_in6 sa;
  int fd = socket(AF_INET6, SOCK_STREAM, 0), ok;

  if (fd < 0)
    return 0;
  memset(&sa, 0, sizeof sa);
  sa.sin6_family = AF_INET6;
  sa.sin6_addr = in6addr_loopback;
  ok = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
  close(fd);
  return ok;
}

START_TEST(listens_on_ipv6_loopback) {
  ht_t t;

  if (!have_ipv6_loopback()) {
    fprintf(stderr, "listens_on_ipv6_loopback: skipped, no ::1 here\n");
    return;
  }
  ht_up(&t, NULL, ARGS("--listen", "[::1]:0"));
  ck_assert_msg(strncmp(t.d.addr, "[::1]:", 6) == 0 &&
                    atoi(t.d.addr + 6) > 0,
                "address %s", t.d.addr);
  ht_do(&t, "GET", "/healthz", NULL, 200);
  ht_do(&t, "POST", "/session/v6/step", "{\"pos\":1}", 200);
  ht_down(&t);
}
END_TEST

/* ---- connections -------------------------------------------------------- */

START_TEST(keep_alive_serves_many_requests_on_one_connection) {
  char body[64];
  int fd, i;
  ht_t t;
  json_t *j;

  ht_up(&t, NULL, NULL);
  fd = t.c.fd;
  ht_do(&t, "PUT", "/session/k", "{\"budget\":4}", 201);
  for (i = 1; i <= 300; i++) {
    hc_response_t r;
    snprintf(body, sizeof body, "{\"pos\":%d}", i);
    ck_assert_int_eq(hc_request(&t.c, "POST", "/session/k/step", body, &r), 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(!r.conn_close && r.has_length && !t.c.peer_closed,
                  "request %d: the server is closing the connection", i);
    hc_response_free(&r);
    if (i % 50 == 0)
      ht_do(&t, "HEAD", "/session/k", NULL, 200);
  }
  j = ht_view(&t, "k");
  ht_json_eq(json_object_get(j, "kept"), "[297,298,299,300]");
  json_decref(j);
  /* Our client never reconnects: one socket carried every answer. */
  ck_assert_int_eq(t.c.fd, fd);
  ck_assert_uint_eq(t.c.responses, 1 + 300 + 6 + 1);
  ck_assert_int_eq(hc_wait_closed(&t.c, 50), 0);
  ht_down(&t);
}
END_TEST

/* ---- idle sessions ------------------------------------------------------ */

START_TEST(idle_ttl_reaps_unused_sessions_only) {
  char body[64];
  int i;
  ht_t t;
  json_t *j;

  ht_up(&t, NULL, ARGS("--idle-ttl", "1"));
  ht_do(&t, "PUT", "/session/idle", NULL, 201);
  ht_do(&t, "PUT", "/session/busy", NULL, 201);
  /* Used every 0.3 s for 3 s: the busy one stays, and stays the same
   * session (a recreated one would restart at size 1). */
  for (i = 1; i <= 10; i++) {
    ht_sleep_ms(300);
    snprintf(body, sizeof body, "{\"pos\":%d}", i);
    j = ht_call(&t, "POST", "/session/busy/step", body, 200);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "size")), i + 1);
    json_decref(j);
  }
  ht_error(&t, "GET", "/session/idle", NULL, 404, "unknown_session");
  /* Then left alone, it goes within 2.5 s of its last use. */
  ht_sleep_ms(2500);
  ht_error(&t, "GET", "/session/busy", NULL, 404, "unknown_session");
  ht_down(&t);
}
END_TEST

/* ---- stopping ----------------------------------------------------------- */

START_TEST(sigterm_exits_0) {
  ht_t t;

  ht_up(&t, NULL, NULL);
  ht_do(&t, "PUT", "/session/a", NULL, 201);
  hc_close(&t.c);
  ht_expect_exit(&t.d, SIGTERM, 0);
}
END_TEST

START_TEST(sighup_is_ignored_and_logged) {
  ht_t t;
  char *log;
  int i;

  ht_up(&t, NULL, NULL);
  ht_do(&t, "PUT", "/session/a", NULL, 201);
  ck_assert_int_eq(kill(t.d.pid, SIGHUP), 0);
  /* Still serving, with the session, and said why. */
  for (i = 0; i < 100; i++) {
    log = ht_daemon_log(&t.d);
    if (log != NULL && strstr(log, "SIGHUP ignored") != NULL)
      break;
    free(log);
    log = NULL;
    ht_sleep_ms(20);
  }
  ck_assert_msg(log != NULL, "no 'SIGHUP ignored' in the log");
  free(log);
  ht_do(&t, "GET", "/session/a", NULL, 200);
  hc_close(&t.c);
  ht_expect_exit(&t.d, SIGTERM, 0);
}
END_TEST

START_TEST(sigint_exits_0_with_idle_connection_open) {
  ht_t t;

  ht_up(&t, NULL, NULL);
  ht_do(&t, "GET", "/healthz", NULL, 200);
  /* The idle keep-alive connection must not hold the daemon up. */
  ht_expect_exit(&t.d, SIGINT, 0);
  hc_close(&t.c);
}
END_TEST

START_TEST(sigterm_finishes_request_in_flight) {
  static const char head[] = "POST /session/f/step HTTP/1.1\r\n"
                             "Host: x\r\nContent-Type: application/json\r\n"
                             "Content-Length: 22\r\n\r\n";
  static const char body[] = "{\"positions\":[1,2,3]} ";
  hc_response_t r;
  hc_conn_t other;
  json_t *j;
  ht_t t;
  int refused = 0, i;

  ck_assert_uint_eq(sizeof body - 1, 22);
  ht_up(&t, NULL, NULL);
  /* A first answer proves the connection was accepted. */
  ht_do(&t, "GET", "/healthz", NULL, 200);
  ck_assert_int_eq(hc_write_all(&t.c, head, sizeof head - 1), 0);
  ck_assert_int_eq(hc_write_all(&t.c, body, 5), 0);
  ht_sleep_ms(300); /* let the daemon read the headers */
  kill(t.d.pid, SIGTERM);
  /* It soon stops accepting connections (which also shows that it has
   * handled the signal)... */
  for (i = 0; i < 1000 && !refused; i++) {
    if (hc_connect(&other, t.d.addr, 2) != 0)
      refused = errno == ECONNREFUSED;
    else
      ht_sleep_ms(10);
    hc_close(&other);
  }
  ck_assert_msg(refused, "new connections are still accepted");
  /* ...but the request in flight is answered. */
  ck_assert_int_eq(hc_write_all(&t.c, body + 5, sizeof body - 1 - 5), 0);
  ck_assert_int_eq(hc_read_response(&t.c, 0, &r), 0);
  ck_assert_int_eq(r.status, 200);
  j = json_loads(r.body, 0, NULL);
  ht_json_eq(j, "{\"victims\":[],\"slots\":[1,2,3],\"size\":4,\"newest\":3}");
  json_decref(j);
  hc_response_free(&r);
  ht_expect_exit(&t.d, 0, 0);
  hc_close(&t.c);
}
END_TEST

/* ---- the client itself -------------------------------------------------- */

START_TEST(client_parses_chunked_and_sized_responses) {
  static const char canned[] =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
      "Content-Type: application/json\r\n\r\n"
      "4\r\n{\"a\"\r\nA;ext=1\r\n:[1,2,3,4]\r\n1\r\n}\r\n0\r\nX-T: y\r\n\r\n"
      "HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\nConnection: close\r\n\r\n"
      "{}"
      "HTTP/1.1 204 No Content\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n"
      "HTTP/1.0 200 OK\r\n\r\nuntil the end";
  hc_response_t r;
  hc_conn_t c;
  int sv[2];

  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  memset(&c, 0, sizeof c);
  c.fd = sv[0];
  ck_assert_int_eq(write(sv[1], canned, sizeof canned - 1),
                   (ssize_t)(sizeof canned - 1));
  close(sv[1]);
  ck_assert_int_eq(hc_read_response(&c, 0, &r), 0);
  ck_assert_int_eq(r.status, 200);
  ck_assert(r.chunked);
  ck_assert_str_eq(r.body, "{\"a\":[1,2,3,4]}");
  hc_response_free(&r);
  ck_assert_int_eq(hc_read_response(&c, 0, &r), 0);
  ck_assert_int_eq(r.status, 404);
  ck_assert(r.conn_close && r.has_length && !r.chunked);
  ck_assert_str_eq(r.body, "{}");
  hc_response_free(&r);
  ck_assert_int_eq(hc_read_response(&c, 0, &r), 0);
  ck_assert_int_eq(r.status, 204);
  ck_assert_uint_eq(r.body_len, 0);
  hc_response_free(&r);
  /* A HEAD answer announces a length but has no body. */
  ck_assert_int_eq(hc_read_response(&c, 1, &r), 0);
  ck_assert_int_eq(r.status, 200);
  ck_assert_uint_eq(r.body_len, 0);
  hc_response_free(&r);
  ck_assert_int_eq(hc_read_response(&c, 0, &r), 0);
  ck_assert_str_eq(r.body, "until the end");
  hc_response_free(&r);
  ck_assert_int_eq(hc_read_response(&c, 0, &r), -1);
  ck_assert_uint_eq(c.responses, 5);
  hc_close(&c);
}
END_TEST

Suite *process_suite(void) {
  Suite *s = suite_create("process");
  TCase *tc = tcase_create("process");

  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, client_parses_chunked_and_sized_responses);
  tcase_add_test(tc, help_and_version_exit_0);
  tcase_add_test(tc, bad_flags_exit_2);
  tcase_add_test(tc, bad_listen_values_exit_2);
  tcase_add_test(tc, environment_configures_and_flags_win);
  tcase_add_test(tc, json_log_format_names_the_address);
  tcase_add_test(tc, listens_on_unix_socket);
  tcase_add_test(tc, listens_on_ipv6_loopback);
  tcase_add_test(tc, keep_alive_serves_many_requests_on_one_connection);
  tcase_add_test(tc, idle_ttl_reaps_unused_sessions_only);
  tcase_add_test(tc, bad_addresses_say_what_to_write);
  tcase_add_test(tc, help_fits_80_columns);
  tcase_add_test(tc, fsync_without_state_dir_warns);
  tcase_add_test(tc, unwritable_state_dir_says_so);
  tcase_add_test(tc, sigterm_exits_0);
  tcase_add_test(tc, sighup_is_ignored_and_logged);
  tcase_add_test(tc, sigint_exits_0_with_idle_connection_open);
  tcase_add_test(tc, sigterm_finishes_request_in_flight);
  suite_add_tcase(s, tc);
  return s;
}
