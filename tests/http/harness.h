/* Shared pieces of the HTTP test suites: a daemon with one keep-alive
 * connection to it, requests that assert on status and content type, JSON
 * comparisons, and the exact shape of error bodies. The macros pass the
 * caller's line so that a failure points at the test, not at this file. */
#ifndef EVICTD_TESTS_HTTP_HARNESS_H
#define EVICTD_TESTS_HTTP_HARNESS_H

#include <check.h>
#include <jansson.h>

#include "client.h"
#include "daemon.h"

/* One daemon and the connection the tests talk to it over. */
typedef struct {
  ht_daemon_t d;
  hc_conn_t c;
  const char *headers; /* extra header lines for ht_call, or NULL */
} ht_t;

/* The Suite constructors, one per file. */
Suite *api_suite(void);
Suite *limits_suite(void);
Suite *vectors_suite(void);
Suite *process_suite(void);
Suite *ops_suite(void);
Suite *adopt_suite(void);

/* Starts a daemon with env (may be NULL) and args (may be NULL) and
 * connects to it; fails the test, showing the log, when either fails. */
void ht_up_at(const char *file, int line, ht_t *t, const char *const *env,
              const char *const *args);
#define ht_up(t, env, args) ht_up_at(__FILE__, __LINE__, t, env, args)

/* Closes the connection, sends SIGTERM and asserts that the daemon exits
 * 0 (under ASan that also means it leaked nothing). */
void ht_down_at(const char *file, int line, ht_t *t);
#define ht_down(t) ht_down_at(__FILE__, __LINE__, t)

/* Asserts the daemon exited (or exits after `sig`) with `code`, printing
 * its log otherwise, and removes the log. */
void ht_expect_exit_at(const char *file, int line, ht_daemon_t *d, int sig,
                       int code);
#define ht_expect_exit(d, sig, code) \
  ht_expect_exit_at(__FILE__, __LINE__, d, sig, code)

/* Sends one request over t->c and asserts the status. Returns the parsed
 * JSON body (new reference), or NULL when there is no body. Every non-204
 * answer to a non-HEAD request must be a JSON document with
 * Content-Type: application/json. */
json_t *ht_call_at(const char *file, int line, ht_t *t, const char *method,
                   const char *path, const char *body, int status);
#define ht_call(t, m, p, b, st) ht_call_at(__FILE__, __LINE__, t, m, p, b, st)

/* As ht_call, for when the body does not matter. */
#define ht_do(t, m, p, b, st) \
  json_decref(ht_call_at(__FILE__, __LINE__, t, m, p, b, st))

/* As ht_call, and also asserts the body equals the JSON text `want`. */
void ht_expect_at(const char *file, int line, ht_t *t, const char *method,
                  const char *path, const char *body, int status,
                  const char *want);
#define ht_expect(t, m, p, b, st, w) \
  ht_expect_at(__FILE__, __LINE__, t, m, p, b, st, w)

/* As ht_call, and asserts the body is exactly the error object for
 * `status` and `code`. Returns "newest" for stale_position and diverged,
 * else -1. */
json_int_t ht_error_at(const char *file, int line, ht_t *t,
                       const char *method, const char *path, const char *body,
                       int status, const char *code);
#define ht_error(t, m, p, b, st, c) \
  ht_error_at(__FILE__, __LINE__, t, m, p, b, st, c)

/* Asserts `body` is exactly an error: {"error":{"code","message"}} (plus
 * "newest" for stale_position; "newest" and "view" for diverged; plus
 * "status" inside when `in_batch`). */
void ht_check_error_at(const char *file, int line, json_t *body, int status,
                       const char *code, int in_batch);
#define ht_check_error(b, st, c, in_batch) \
  ht_check_error_at(__FILE__, __LINE__, b, st, c, in_batch)

/* Asserts `got` equals the JSON text `want`. */
void ht_json_eq_at(const char *file, int line, json_t *got, const char *want);
#define ht_json_eq(g, w) ht_json_eq_at(__FILE__, __LINE__, g, w)

/* GET /session/{id}: the view, asserted 200 (new reference). */
json_t *ht_view_at(const char *file, int line, ht_t *t, const char *id);
#define ht_view(t, id) ht_view_at(__FILE__, __LINE__, t, id)

/* The HTTP status an error code is answered with (the daemon's own table,
 * check_apierr.h), or -1 for no such code. */
int ht_status_of(const char *code);

/* A JSON dump for messages: a static buffer, overwritten by the next call
 * with the same `which` (0 or 1). */
const char *ht_dump(json_t *j, int which);

/* The vectors directory: $EVD_VECTORS_DIR, else the build-time default. */
const char *ht_vectors_dir(void);

/* Sleeps ms milliseconds. */
void ht_sleep_ms(long ms);

#endif
