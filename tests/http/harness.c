/* The HTTP suites' shared assertions, and main(): one Check runner over
 * every suite of tests/http. */
#include "harness.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../unit/check_apierr.h"
#include "../unit/check_main.h"

#ifndef EVD_VECTORS_DIR
#define EVD_VECTORS_DIR "proto/vectors"
#endif

const char *ht_vectors_dir(void) {
  const char *d = getenv("EVD_VECTORS_DIR");
  return d != NULL ? d : EVD_VECTORS_DIR;
}

void ht_sleep_ms(long ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

const char *ht_dump(json_t *j, int which) {
  static char buf[2][600];
  char *s = j != NULL ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;

  snprintf(buf[which & 1], sizeof buf[0], "%s", s != NULL ? s : "(none)");
  if (s != NULL && strlen(s) >= sizeof buf[0])
    strcpy(buf[which & 1] + sizeof buf[0] - 4, "...");
  free(s);
  return buf[which & 1];
}

/* The tail of a daemon's log, for failure messages. */
static const char *log_tail(const ht_daemon_t *d) {
  static char tail[2048];
  char *log = ht_daemon_log(d);
  size_t n = strlen(log);

  snprintf(tail, sizeof tail, "%s", n > sizeof tail - 1 ? log + n - (sizeof tail - 1) : log);
  free(log);
  return tail;
}

void ht_up_at(const char *file, int line, ht_t *t, const char *const *env,
              const char *const *args) {
  memset(t, 0, sizeof *t);
  t->c.fd = -1;
  if (ht_daemon_start(&t->d, args, env) != 0) {
    const char *tail = log_tail(&t->d);
    ht_daemon_free(&t->d);
    ck_abort_msg("%s:%d: %s did not start (exit %d, signal %d); log:\n%s",
                 file, line, ht_daemon_bin(), t->d.exit_code, t->d.signal,
                 tail);
  }
  ck_assert_msg(hc_connect(&t->c, t->d.addr, 20) == 0,
                "%s:%d: cannot connect to %s: %s", file, line, t->d.addr,
                strerror(errno));
}

void ht_expect_exit_at(const char *file, int line, ht_daemon_t *d, int sig,
                       int code) {
  int got = ht_daemon_stop(d, sig);

  if (got != code) {
    const char *tail = log_tail(d);
    ht_daemon_free(d);
    ck_abort_msg("%s:%d: daemon exited with %d (signal %d), expected %d; "
                 "log:\n%s",
                 file, line, got, d->signal, code, tail);
  }
  ht_daemon_free(d);
}

void ht_down_at(const char *file, int line, ht_t *t) {
  hc_close(&t->c);
  ht_expect_exit_at(file, line, &t->d, SIGTERM, 0);
}

json_t *ht_call_at(const char *file, int line, ht_t *t, const char *method,
                   const char *path, const char *body, int status) {
  hc_response_t r;
  json_error_t err;
  const char *ct;
  json_t *j = NULL;
  int head = strcmp(method, "HEAD") == 0;

  ck_assert_msg(hc_send(&t->c, method, path, t->headers, body,
                        body ? strlen(body) : 0, 0) == 0 &&
                    hc_read_response(&t->c, head, &r) == 0,
                "%s:%d: %s %s: no response (%s)", file, line, method, path,
                strerror(errno));
  if (r.status != status) {
    char got[512];
    int st = r.status;
    snprintf(got, sizeof got, "%s", r.body);
    hc_response_free(&r);
    ck_abort_msg("%s:%d: %s %s %.200s: status %d expected, got %d: %s", file,
                 line, method, path, body ? body : "", status, st, got);
  }
  if (r.status != 204) {
    ct = hc_header(&r, "Content-Type");
    if (ct == NULL || strcmp(ct, "application/json") != 0) {
      char got[200];
      snprintf(got, sizeof got, "%s", ct ? ct : "(none)");
      hc_response_free(&r);
      ck_abort_msg("%s:%d: %s %s: Content-Type %s, expected application/json",
                   file, line, method, path, got);
    }
  }
  if (!head && r.body_len > 0) {
    j = json_loadb(r.body, r.body_len, JSON_REJECT_DUPLICATES, &err);
    if (j == NULL) {
      char got[512];
      snprintf(got, sizeof got, "%s", r.body);
      hc_response_free(&r);
      ck_abort_msg("%s:%d: %s %s: the body is not JSON (%s): %s", file, line,
                   method, path, err.text, got);
    }
  }
  if (!head && r.status != 204)
    ck_assert_msg(j != NULL, "%s:%d: %s %s: empty body", file, line, method,
                  path);
  hc_response_free(&r);
  return j;
}

void ht_json_eq_at(const char *file, int line, json_t *got, const char *want) {
  json_error_t err;
  json_t *w = json_loads(want, JSON_DECODE_ANY, &err);
  int eq;

  ck_assert_msg(w != NULL, "%s:%d: bad expected JSON %s", file, line, want);
  eq = json_equal(got, w);
  json_decref(w);
  ck_assert_msg(eq, "%s:%d: expected %s, got %s", file, line, want,
                ht_dump(got, 0));
}

void ht_expect_at(const char *file, int line, ht_t *t, const char *method,
                  const char *path, const char *body, int status,
                  const char *want) {
  json_t *j = ht_call_at(file, line, t, method, path, body, status);

  ht_json_eq_at(file, line, j, want);
  json_decref(j);
}

int ht_status_of(const char *code) { return evd_check_status_of(code); }

void ht_check_error_at(const char *file, int line, json_t *body, int status,
                       const char *code, int in_batch) {
  json_t *e = json_object_get(body, "error"), *m;
  int stale = strcmp(code, "stale_position") == 0;
  int diverged = strcmp(code, "diverged") == 0;
  size_t keys = 2 + (size_t)stale + 2 * (size_t)diverged +
                (size_t)(in_batch != 0);

  ck_assert_msg(json_is_object(body) && json_object_size(body) == 1 &&
                    json_is_object(e),
                "%s:%d: expected {\"error\":{...}}, got %s", file, line,
                ht_dump(body, 0));
  ck_assert_msg(json_is_string(json_object_get(e, "code")) &&
                    strcmp(json_string_value(json_object_get(e, "code")),
                           code) == 0,
                "%s:%d: expected code %s, got %s", file, line, code,
                ht_dump(body, 0));
  m = json_object_get(e, "message");
  ck_assert_msg(json_is_string(m) && json_string_length(m) > 0,
                "%s:%d: the error has no message: %s", file, line,
                ht_dump(body, 0));
  if (stale || diverged)
    ck_assert_msg(json_is_integer(json_object_get(e, "newest")),
                  "%s:%d: %s without \"newest\": %s", file, line, code,
                  ht_dump(body, 0));
  if (diverged) /* the daemon's own view, whose newest it names */
    ck_assert_msg(json_is_object(json_object_get(e, "view")) &&
                      json_equal(json_object_get(e, "newest"),
                                 json_object_get(json_object_get(e, "view"),
                                                 "newest")),
                  "%s:%d: diverged without the session's view: %s", file,
                  line, ht_dump(body, 0));
  if (in_batch)
    ck_assert_msg(json_is_integer(json_object_get(e, "status")) &&
                      json_integer_value(json_object_get(e, "status")) ==
                          status,
                  "%s:%d: a batch error needs \"status\":%d: %s", file, line,
                  status, ht_dump(body, 0));
  ck_assert_msg(json_object_size(e) == keys,
                "%s:%d: unexpected fields in the error: %s", file, line,
                ht_dump(body, 0));
}

json_int_t ht_error_at(const char *file, int line, ht_t *t,
                       const char *method, const char *path, const char *body,
                       int status, const char *code) {
  json_t *j = ht_call_at(file, line, t, method, path, body, status);
  json_int_t newest = -1;

  ht_check_error_at(file, line, j, status, code, 0);
  if (strcmp(code, "stale_position") == 0 || strcmp(code, "diverged") == 0)
    newest = json_integer_value(
        json_object_get(json_object_get(j, "error"), "newest"));
  json_decref(j);
  return newest;
}

json_t *ht_view_at(const char *file, int line, ht_t *t, const char *id) {
  char path[300];

  snprintf(path, sizeof path, "/session/%s", id);
  return ht_call_at(file, line, t, "GET", path, NULL, 200);
}

EVD_CHECK_MAIN(api_suite(), limits_suite(), vectors_suite(), process_suite(),
               ops_suite(), adopt_suite())
