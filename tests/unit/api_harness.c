/* The fake client of the API unit tests: one evd_api_t driven through
 * evd_api_handle, every answer parsed and its form checked (api_harness.h). */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_harness.h"
#include "check_apierr.h"

/* ---- a client without sockets ------------------------------------------- */

evd_api_t *api;
evd_buf_t out;
evd_reply_t reply;
json_t *body;     /* the last answer, parsed; NULL for 204 */
const char *auth; /* Authorization header to send, or NULL */

/* Checks an error object: code, message and (in a batch) status, and that
 * the code belongs to that status. Returns the code. */
const char *check_error_object(json_t *e, int status, int in_batch) {
  json_t *code = json_object_get(e, "code"), *msg = json_object_get(e, "message");
  const char *key;
  json_t *v;

  REQUIRE(json_is_object(e), "error is not an object");
  REQUIRE(json_is_string(code), "error without a code");
  REQUIRE(json_is_string(msg) && json_string_length(msg) > 0,
                "error %s without a message", json_string_value(code));
  if (in_batch) {
    REQUIRE(json_is_integer(json_object_get(e, "status")),
                  "batch error %s without a status", json_string_value(code));
    status = (int)json_integer_value(json_object_get(e, "status"));
  }
  REQUIRE(evd_check_status_of(json_string_value(code)) == status,
                "code %s with status %d", json_string_value(code), status);
  json_object_foreach(e, key, v) {
    int stale = strcmp(json_string_value(code), "stale_position") == 0;
    int diverged = strcmp(json_string_value(code), "diverged") == 0;
    int known = strcmp(key, "code") == 0 || strcmp(key, "message") == 0 ||
                (in_batch && strcmp(key, "status") == 0) ||
                (strcmp(key, "newest") == 0 && (stale || diverged) &&
                 json_is_integer(v)) ||
                (strcmp(key, "view") == 0 && diverged && json_is_object(v));
    REQUIRE(known, "error %s has field %s", json_string_value(code), key);
  }
  if (strcmp(json_string_value(code), "stale_position") == 0 ||
      strcmp(json_string_value(code), "diverged") == 0)
    REQUIRE(json_is_integer(json_object_get(e, "newest")),
                  "%s without newest", json_string_value(code));
  if (strcmp(json_string_value(code), "diverged") == 0)
    REQUIRE(json_integer_value(json_object_get(e, "newest")) ==
                json_integer_value(json_object_get(
                    json_object_get(e, "view"), "newest")),
            "diverged: its newest is not its view's");
  return json_string_value(code);
}

void start_with(const evd_config_t *cfg) {
  ck_assert_int_eq(evd_api_new(&api, cfg), 0);
  evd_buf_init(&out);
  body = NULL;
  auth = NULL;
}

/* Small limits so that every limit is easy to reach. */
void default_cfg(evd_config_t *cfg) {
  evd_config_defaults(cfg);
  cfg->budget = 8;
  cfg->max_budget = 4096;
  cfg->max_sessions = 1000;
  cfg->max_positions = 64;
  cfg->max_batch = 16;
}

void start(void) {
  evd_config_t cfg;

  default_cfg(&cfg);
  start_with(&cfg);
}

void stop(void) {
  json_decref(body);
  body = NULL;
  evd_buf_free(&out);
  evd_api_free(api);
  api = NULL;
}

/* Sends one request and checks the answer's form. Returns the status. */
int req_n(int method, const char *path, const char *b, size_t blen) {
  evd_request_t r = {.method = method, .path = path, .path_len = strlen(path),
                     .body = b, .body_len = blen, .authorization = auth};
  json_error_t jerr;

  json_decref(body);
  body = NULL;
  memset(&reply, 0xa5, sizeof reply);
  evd_api_handle(api, &r, &out, &reply);
  if (reply.status == 204) {
    REQUIRE(out.len == 0, "%s: 204 with a body", path);
    return 204;
  }
  if (reply.content_type != NULL) /* not JSON (metrics) */
    return reply.status;
  body = json_loadb(out.data, out.len, JSON_REJECT_DUPLICATES, &jerr);
  REQUIRE(body != NULL, "%s: answer %d is not JSON (%s): %.*s", path,
                reply.status, jerr.text, (int)out.len, out.data);
  REQUIRE(json_is_object(body), "%s: answer is not an object", path);
  if (reply.status >= 400) {
    REQUIRE(json_object_size(body) == 1, "%s: error body has extra "
                  "fields: %.*s", path, (int)out.len, out.data);
    check_error_object(json_object_get(body, "error"), reply.status, 0);
    REQUIRE((reply.status == 405) == (reply.allow != NULL),
                  "%s: Allow header with status %d", path, reply.status);
  } else {
    REQUIRE(reply.allow == NULL, "%s: Allow header with %d", path,
            reply.status);
  }
  return reply.status;
}

int req(int method, const char *path, const char *b) {
  return req_n(method, path, b, b != NULL ? strlen(b) : 0);
}

const char *error_code(void) {
  return json_string_value(
      json_object_get(json_object_get(body, "error"), "code"));
}

const char *error_message(void) {
  return json_string_value(
      json_object_get(json_object_get(body, "error"), "message"));
}

void expect_error_n(int method, const char *path, const char *b,
                    size_t blen, int status, const char *code) {
  int got = req_n(method, path, b, blen);

  REQUIRE(got == status && body != NULL &&
                    strcmp(error_code(), code) == 0,
                "%s %.*s: expected %d %s, got %d %.*s", path,
                (int)(blen > 200 ? 200 : blen), b != NULL ? b : "", status,
                code, got, (int)out.len, out.data);
}

void expect_error(int method, const char *path, const char *b,
                  int status, const char *code) {
  expect_error_n(method, path, b, b != NULL ? strlen(b) : 0, status, code);
}

/* Sends a request that must succeed with `status` and an answer equal (as
 * JSON, any key order) to `want`. */
void expect_ok(int method, const char *path, const char *b, int status,
               const char *want) {
  int got = req(method, path, b);
  json_t *w;

  REQUIRE(got == status, "%s %s: expected %d, got %d %.*s", path,
                b != NULL ? b : "", status, got, (int)out.len, out.data);
  if (want == NULL)
    return;
  w = json_loads(want, 0, NULL);
  REQUIRE(w != NULL, "bad expectation %s", want);
  REQUIRE(json_equal(w, body), "%s %s: expected %s, got %.*s", path,
                b != NULL ? b : "", want, (int)out.len, out.data);
  json_decref(w);
}

/* A session's view as compact JSON text (for "nothing changed" checks),
 * or "-" when it does not exist. The caller frees it. */
char *view_of(const char *id) {
  char path[300];

  snprintf(path, sizeof path, "/session/%s", id);
  if (req(GET, path, NULL) == 404)
    return strdup("-");
  ck_assert_int_eq(reply.status, 200);
  return json_dumps(body, JSON_SORT_KEYS | JSON_COMPACT);
}

void expect_view(const char *id, const char *before) {
  char *now = view_of(id);

  REQUIRE(strcmp(now, before) == 0, "session %s changed: %s -> %s", id,
                before, now);
  free(now);
}
