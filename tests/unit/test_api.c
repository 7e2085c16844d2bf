/* Unit tests of the API without HTTP, through evd_api_handle: every route
 * and error code, retries, the proto/vectors replayed, and the idle reaper
 * on a fake clock. Every answer is checked for well-formed JSON. */
#include <check.h>
#include <dirent.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evictd/api.h"
#include "evictd/error.h"
#include "evictd/replay.h"
#include "check_apierr.h"
#include "check_main.h"

#ifndef EVD_VECTORS_DIR
#define EVD_VECTORS_DIR "proto/vectors"
#endif

enum { GET = EVD_M_GET, HEAD = EVD_M_HEAD, PUT = EVD_M_PUT, POST = EVD_M_POST,
       DEL = EVD_M_DELETE, OTHER = EVD_M_OTHER };

/* Check records the place of every passing ck_assert with a write(2); in
 * loops of 10^5 operations that would dominate the run time, so the hot
 * paths here use this, which costs nothing until it fails. */
#define REQUIRE(cond, ...)                                                     \
  do {                                                                         \
    if (!(cond))                                                               \
      ck_abort_msg(__VA_ARGS__);                                               \
  } while (0)

/* ---- a client without sockets ------------------------------------------- */

static evd_api_t *api;
static evd_buf_t out;
static evd_reply_t reply;
static json_t *body;       /* the last answer, parsed; NULL for 204 */
static const char *auth;   /* Authorization header to send, or NULL */

/* Checks an error object: code, message and (in a batch) status, and that
 * the code belongs to that status. Returns the code. */
static const char *check_error_object(json_t *e, int status, int in_batch) {
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
    int known = strcmp(key, "code") == 0 || strcmp(key, "message") == 0 ||
                (in_batch && strcmp(key, "status") == 0) ||
                (strcmp(key, "newest") == 0 &&
                 strcmp(json_string_value(code), "stale_position") == 0 &&
                 json_is_integer(v));
    REQUIRE(known, "error %s has field %s", json_string_value(code), key);
  }
  if (strcmp(json_string_value(code), "stale_position") == 0)
    REQUIRE(json_is_integer(json_object_get(e, "newest")),
                  "stale_position without newest");
  return json_string_value(code);
}

static void start_with(const evd_config_t *cfg) {
  ck_assert_int_eq(evd_api_new(&api, cfg), 0);
  evd_buf_init(&out);
  body = NULL;
  auth = NULL;
}

/* Small limits so that every limit is easy to reach. */
static void default_cfg(evd_config_t *cfg) {
  evd_config_defaults(cfg);
  cfg->budget = 8;
  cfg->max_budget = 4096;
  cfg->max_sessions = 1000;
  cfg->max_positions = 64;
  cfg->max_batch = 16;
}

static void start(void) {
  evd_config_t cfg;

  default_cfg(&cfg);
  start_with(&cfg);
}

static void stop(void) {
  json_decref(body);
  body = NULL;
  evd_buf_free(&out);
  evd_api_free(api);
  api = NULL;
}

/* Sends one request and checks the answer's form. Returns the status. */
static int req_n(int method, const char *path, const char *b, size_t blen) {
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

static int req(int method, const char *path, const char *b) {
  return req_n(method, path, b, b != NULL ? strlen(b) : 0);
}

static const char *error_code(void) {
  return json_string_value(
      json_object_get(json_object_get(body, "error"), "code"));
}

static const char *error_message(void) {
  return json_string_value(
      json_object_get(json_object_get(body, "error"), "message"));
}

static void expect_error_n(int method, const char *path, const char *b,
                           size_t blen, int status, const char *code) {
  int got = req_n(method, path, b, blen);

  REQUIRE(got == status && body != NULL &&
                    strcmp(error_code(), code) == 0,
                "%s %.*s: expected %d %s, got %d %.*s", path,
                (int)(blen > 200 ? 200 : blen), b != NULL ? b : "", status,
                code, got, (int)out.len, out.data);
}

static void expect_error(int method, const char *path, const char *b,
                         int status, const char *code) {
  expect_error_n(method, path, b, b != NULL ? strlen(b) : 0, status, code);
}

/* Sends a request that must succeed with `status` and an answer equal (as
 * JSON, any key order) to `want`. */
static void expect_ok(int method, const char *path, const char *b, int status,
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
static char *view_of(const char *id) {
  char path[300];

  snprintf(path, sizeof path, "/session/%s", id);
  if (req(GET, path, NULL) == 404)
    return strdup("-");
  ck_assert_int_eq(reply.status, 200);
  return json_dumps(body, JSON_SORT_KEYS | JSON_COMPACT);
}

static void expect_view(const char *id, const char *before) {
  char *now = view_of(id);

  REQUIRE(strcmp(now, before) == 0, "session %s changed: %s -> %s", id,
                before, now);
  free(now);
}

/* ---- routes ------------------------------------------------------------- */

START_TEST(healthz_get_and_head) {
  start();
  expect_ok(GET, "/healthz", NULL, 200, "{\"status\":\"ok\"}");
  ck_assert_int_eq(reply.route, EVD_R_HEALTHZ);
  expect_ok(HEAD, "/healthz", NULL, 200, NULL);
  expect_error(POST, "/healthz", "{}", 405, "method_not_allowed");
  ck_assert_str_eq(reply.allow, "GET, HEAD");
  stop();
}
END_TEST

START_TEST(unknown_paths_not_found) {
  static const char *const paths[] = {
      "",          "/",            "/healthz/",      "/HEALTHZ",
      "/session",  "/sessions/a",  "/session/a/",    "/session/a/x",
      "/session/a/step/", "/session/a/evict/x", "/step/", "/stepx",
      "//session/a", "/session/a/b/step"};
  size_t i;

  start();
  for (i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    expect_error(GET, paths[i], NULL, 404, "not_found");
    ck_assert_int_eq(reply.route, EVD_R_NONE);
    expect_error(POST, paths[i], "{}", 404, "not_found");
  }
  stop();
}
END_TEST

START_TEST(wrong_method_lists_allowed_ones) {
  start();
  expect_error(POST, "/session/a", "{}", 405, "method_not_allowed");
  ck_assert_str_eq(reply.allow, "GET, HEAD, PUT, DELETE");
  expect_error(OTHER, "/session/a", NULL, 405, "method_not_allowed");
  ck_assert_str_eq(reply.allow, "GET, HEAD, PUT, DELETE");
  expect_error(GET, "/session/a/step", NULL, 405, "method_not_allowed");
  ck_assert_str_eq(reply.allow, "POST");
  expect_error(PUT, "/session/a/evict", NULL, 405, "method_not_allowed");
  ck_assert_str_eq(reply.allow, "POST");
  expect_error(DEL, "/step", NULL, 405, "method_not_allowed");
  ck_assert_str_eq(reply.allow, "POST");
  expect_error(GET, "/step", NULL, 405, "method_not_allowed");
  expect_error(PUT, "/healthz", NULL, 405, "method_not_allowed");
  /* Nothing was created on the way. */
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 0);
  stop();
}
END_TEST

START_TEST(session_ids_validated_in_path) {
  char path[300], id[140];

  start();
  /* An empty id matches no route (the contract's paths cannot hold one). */
  expect_error(PUT, "/session/", NULL, 404, "not_found");
  expect_error(POST, "/session//step", "{\"pos\":1}", 404, "not_found");
  expect_error(POST, "/session//evict", NULL, 404, "not_found");
  expect_error(PUT, "/session/a%20b", NULL, 400, "invalid_session_id");
  expect_error(PUT, "/session/%41", NULL, 400, "invalid_session_id");
  expect_error(PUT, "/session/a b", NULL, 400, "invalid_session_id");
  expect_error(GET, "/session/a+b", NULL, 400, "invalid_session_id");
  expect_error(DEL, "/session/\xc3\xa9", NULL, 400, "invalid_session_id");
  memset(id, 'x', sizeof id);
  id[129] = '\0';
  snprintf(path, sizeof path, "/session/%s", id);
  expect_error(PUT, path, NULL, 400, "invalid_session_id");
  id[128] = '\0';
  snprintf(path, sizeof path, "/session/%s", id);
  ck_assert_int_eq(req(PUT, path, NULL), 201);
  ck_assert_str_eq(json_string_value(json_object_get(body, "id")), id);
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 1);
  expect_ok(PUT, "/session/A-Z_a.z~09", NULL, 201, NULL);
  stop();
}
END_TEST

/* ---- PUT, GET, DELETE --------------------------------------------------- */

START_TEST(put_creates_then_is_idempotent) {
  start();
  expect_ok(PUT, "/session/a", "{\"budget\":4,\"sinks\":1}", 201,
            "{\"id\":\"a\",\"budget\":4,\"sinks\":1,\"size\":1,\"newest\":0,"
            "\"kept\":[0],\"slots\":[0]}");
  ck_assert_int_eq(reply.route, EVD_R_SESSION);
  expect_ok(PUT, "/session/a", "{\"sinks\":1,\"budget\":4}", 200,
            "{\"id\":\"a\",\"budget\":4,\"sinks\":1,\"size\":1,\"newest\":0,"
            "\"kept\":[0],\"slots\":[0]}");
  expect_error(PUT, "/session/a", "{\"budget\":5,\"sinks\":1}", 409,
               "session_exists");
  expect_error(PUT, "/session/a", "{\"budget\":4}", 409, "session_exists");
  /* Empty body and {} mean the defaults (budget 8, sinks 0). */
  expect_ok(PUT, "/session/b", NULL, 201,
            "{\"id\":\"b\",\"budget\":8,\"sinks\":0,\"size\":1,\"newest\":0,"
            "\"kept\":[0],\"slots\":[0]}");
  expect_ok(PUT, "/session/b", "{}", 200, NULL);
  expect_ok(PUT, "/session/c", "{\"budget\":4096}", 201, NULL);
  expect_ok(PUT, "/session/d", "{\"budget\":1,\"sinks\":0}", 201, NULL);
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 4);
  stop();
}
END_TEST

START_TEST(put_refuses_bad_bodies_creating_nothing) {
  static const struct {
    const char *body;
    const char *code;
  } cases[] = {
      {"{\"budget\":\"5\"}", "invalid_field"},
      {"{\"budget\":5.5}", "invalid_field"},
      {"{\"budget\":true}", "invalid_field"},
      {"{\"budget\":null}", "invalid_field"},
      {"{\"sinks\":\"1\"}", "invalid_field"},
      {"{\"budget\":4,\"extra\":1}", "invalid_field"},
      {"{\"budget\":0}", "invalid_budget"},
      {"{\"budget\":-3}", "invalid_budget"},
      {"{\"budget\":4097}", "invalid_budget"},
      {"{\"budget\":4294967296}", "invalid_budget"},
      {"{\"sinks\":-1}", "invalid_sinks"},
      {"{\"sinks\":8}", "invalid_sinks"},      /* default budget 8 */
      {"{\"budget\":3,\"sinks\":3}", "invalid_sinks"},
      {"{\"budget\":3,\"sinks\":4294967296}", "invalid_sinks"},
      {"[]", "invalid_json"},
      {"7", "invalid_json"},
      {"\"x\"", "invalid_json"},
      {"null", "invalid_json"},
      {"{", "invalid_json"},
      {"{\"budget\":4}x", "invalid_json"},
      {"{\"budget\":4,\"budget\":4}", "invalid_json"},
      {" ", "invalid_json"},
  };
  size_t i;

  start();
  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    expect_error(PUT, "/session/a", cases[i].body, 400, cases[i].code);
    ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 0);
  }
  /* A NUL byte inside the body is not JSON. */
  expect_error_n(PUT, "/session/a", "{\"budget\":4}\0", 13, 400,
                 "invalid_json");
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 0);
  stop();
}
END_TEST

START_TEST(put_of_existing_with_bad_body_changes_nothing) {
  char *before;

  start();
  expect_ok(PUT, "/session/a", "{\"budget\":4}", 201, NULL);
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2,3,4,5]}", 200, NULL);
  before = view_of("a");
  expect_error(PUT, "/session/a", "{\"budget\":0}", 400, "invalid_budget");
  expect_error(PUT, "/session/a", "{\"budget\":9}", 409, "session_exists");
  expect_error(PUT, "/session/a", "{\"nope\":1}", 400, "invalid_field");
  expect_view("a", before);
  free(before);
  stop();
}
END_TEST

START_TEST(get_head_and_delete) {
  start();
  expect_error(GET, "/session/a", NULL, 404, "unknown_session");
  expect_error(HEAD, "/session/a", NULL, 404, "unknown_session");
  expect_error(DEL, "/session/a", NULL, 404, "unknown_session");
  expect_ok(PUT, "/session/a", "{\"budget\":3,\"sinks\":1}", 201, NULL);
  expect_ok(POST, "/session/a/step", "{\"positions\":[5,6,7,9]}", 200,
            "{\"victims\":[5,6],\"slots\":[1,2,3,1],\"size\":3,\"newest\":9}");
  expect_ok(GET, "/session/a", NULL, 200,
            "{\"id\":\"a\",\"budget\":3,\"sinks\":1,\"size\":3,\"newest\":9,"
            "\"kept\":[0,7,9],\"slots\":[0,3,1]}");
  expect_ok(HEAD, "/session/a", NULL, 200,
            "{\"id\":\"a\",\"budget\":3,\"sinks\":1,\"size\":3,\"newest\":9,"
            "\"kept\":[0,7,9],\"slots\":[0,3,1]}");
  ck_assert_int_eq(req(DEL, "/session/a", NULL), 204);
  ck_assert_uint_eq(out.len, 0);
  expect_error(GET, "/session/a", NULL, 404, "unknown_session");
  expect_error(DEL, "/session/a", NULL, 404, "unknown_session");
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 0);
  /* The id is free again, and the new session starts afresh. */
  expect_ok(PUT, "/session/a", "{\"budget\":5}", 201,
            "{\"id\":\"a\",\"budget\":5,\"sinks\":0,\"size\":1,\"newest\":0,"
            "\"kept\":[0],\"slots\":[0]}");
  expect_ok(POST, "/session/a/step", "{\"pos\":9}", 200,
            "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":9}");
  stop();
}
END_TEST

/* ---- step --------------------------------------------------------------- */

START_TEST(step_creates_with_defaults_or_given_config) {
  start();
  expect_ok(POST, "/session/a/step", "{\"pos\":1}", 200,
            "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":1}");
  ck_assert_int_eq(reply.route, EVD_R_STEP);
  expect_ok(GET, "/session/a", NULL, 200,
            "{\"id\":\"a\",\"budget\":8,\"sinks\":0,\"size\":2,\"newest\":1,"
            "\"kept\":[0,1],\"slots\":[0,1]}");
  expect_ok(POST, "/session/b/step",
            "{\"positions\":[1,2,3],\"budget\":2,\"sinks\":1}", 200,
            "{\"victims\":[1,2],\"slots\":[1,2,1],\"size\":2,\"newest\":3}");
  expect_ok(GET, "/session/b", NULL, 200,
            "{\"id\":\"b\",\"budget\":2,\"sinks\":1,\"size\":2,\"newest\":3,"
            "\"kept\":[0,3],\"slots\":[0,1]}");
  /* The configuration a step to an existing session names must be the
   * session's, as a PUT's must: another value is 409 and changes nothing
   * (it was applied under the session's own configuration). */
  {
    char *before = view_of("b");
    expect_error(POST, "/session/b/step", "{\"pos\":4,\"budget\":100}", 409,
                 "session_exists");
    ck_assert_msg(strstr(json_string_value(json_object_get(
                             json_object_get(body, "error"), "message")),
                         "budget 2, sinks 1, lookahead 1, page_size 0") !=
                      NULL,
                  "message names the session's configuration");
    expect_error(POST, "/session/b/step", "{\"pos\":4,\"sinks\":0}", 409,
                 "session_exists");
    expect_error(POST, "/session/b/step", "{\"pos\":4,\"lookahead\":2}",
                 409, "session_exists");
    expect_error(POST, "/session/b/step", "{\"pos\":4,\"page_size\":4}",
                 409, "session_exists");
    expect_ok(POST, "/step",
              "{\"steps\":[{\"session\":\"b\",\"pos\":4,\"budget\":3,"
              "\"sinks\":1}]}",
              200, NULL);
    {
      json_t *e = json_object_get(
          json_array_get(json_object_get(body, "results"), 0), "error");
      ck_assert_str_eq(json_string_value(json_object_get(e, "code")),
                       "session_exists");
      ck_assert_int_eq(json_integer_value(json_object_get(e, "status")),
                       409);
    }
    expect_view("b", before);
    free(before);
  }
  /* the same values are fine, in any subset */
  expect_ok(POST, "/session/b/step", "{\"pos\":4,\"budget\":2}", 200,
            "{\"victims\":[3],\"slots\":[2],\"size\":2,\"newest\":4}");
  expect_ok(POST, "/session/b/step",
            "{\"pos\":5,\"budget\":2,\"sinks\":1,\"lookahead\":1,"
            "\"page_size\":0}",
            200, NULL);
  expect_error(POST, "/session/b/step", "{\"pos\":6,\"budget\":0}", 400,
               "invalid_budget");
  /* attention is accepted and ignored, whatever it holds */
  expect_ok(POST, "/session/c/step",
            "{\"pos\":1,\"attention\":[0.5,{\"x\":[null]},\"s\"]}", 200,
            "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":1}");
  stop();
}
END_TEST

START_TEST(step_refusals_create_nothing) {
  static const struct {
    const char *body;
    const char *code;
  } cases[] = {
      {"{\"pos\":-1}", "invalid_position"},
      {"{\"pos\":4294967296}", "invalid_position"},
      {"{\"pos\":1.5}", "invalid_position"},
      {"{\"pos\":1.0}", "invalid_position"},
      {"{\"pos\":\"1\"}", "invalid_position"},
      {"{\"pos\":null}", "invalid_position"},
      {"{\"positions\":[]}", "invalid_position"},
      {"{\"positions\":[3,3]}", "invalid_position"},
      {"{\"positions\":[4,3]}", "invalid_position"},
      {"{\"positions\":[1,2,\"3\"]}", "invalid_position"},
      {"{\"positions\":[1,[2]]}", "invalid_position"},
      {"{\"positions\":5}", "invalid_field"},
      {"{\"positions\":{\"a\":1}}", "invalid_field"},
      {"{\"pos\":1,\"positions\":[2]}", "invalid_field"},
      {"{}", "invalid_field"},
      {"{\"attention\":[]}", "invalid_field"},
      {"{\"pos\":1,\"session\":\"a\"}", "invalid_field"},
      {"{\"pos\":1,\"other\":1}", "invalid_field"},
      {"{\"pos\":1,\"budget\":\"2\"}", "invalid_field"},
      {"{\"pos\":1,\"sinks\":1.5}", "invalid_field"},
      {"{\"pos\":1,\"budget\":0}", "invalid_budget"},
      {"{\"pos\":1,\"budget\":4097}", "invalid_budget"},
      {"{\"pos\":1,\"sinks\":-1}", "invalid_sinks"},
      {"{\"pos\":1,\"sinks\":8}", "invalid_sinks"},
      {"{\"pos\":1,\"budget\":2,\"sinks\":2}", "invalid_sinks"},
      {"", "invalid_json"}, /* the step body is required */
      {"[1]", "invalid_json"},
      {"{\"pos\":1,\"pos\":2}", "invalid_json"},
      {"{\"pos\":01}", "invalid_json"},
  };
  size_t i;

  start();
  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    expect_error(POST, "/session/a/step", cases[i].body, 400, cases[i].code);
    ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 0);
  }
  /* No body at all (the transport passes NULL for an empty one). */
  expect_error(POST, "/session/a/step", NULL, 400, "invalid_json");
  expect_error(POST, "/step", NULL, 400, "invalid_json");
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 0);
  /* Position 0 is held by every new session: stale, and nothing made. */
  expect_error(POST, "/session/a/step", "{\"pos\":0}", 409, "stale_position");
  ck_assert_int_eq(json_integer_value(json_object_get(
                       json_object_get(body, "error"), "newest")),
                   0);
  expect_error(POST, "/session/a/step", "{\"positions\":[0,1]}", 409,
               "stale_position");
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 0);
  stop();
}
END_TEST

START_TEST(step_refusals_change_nothing) {
  char *before;

  start();
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2,3,4,5,6,7,8,9]}",
            200, NULL);
  before = view_of("a");
  expect_error(POST, "/session/a/step", "{\"positions\":[10,11,\"x\"]}", 400,
               "invalid_position");
  expect_error(POST, "/session/a/step", "{\"positions\":[10,12,11]}", 400,
               "invalid_position");
  expect_error(POST, "/session/a/step", "{\"positions\":[9,10]}", 409,
               "stale_position");
  ck_assert_int_eq(json_integer_value(json_object_get(
                       json_object_get(body, "error"), "newest")),
                   9);
  expect_error(POST, "/session/a/step", "{\"pos\":3}", 409, "stale_position");
  expect_error(POST, "/session/a/step", "{\"pos\":10,\"sinks\":9}", 400,
               "invalid_sinks");
  expect_view("a", before);
  free(before);
  stop();
}
END_TEST

START_TEST(step_too_many_positions) {
  char b[1024];
  size_t n;
  int i;

  start(); /* max_positions 64 */
  n = (size_t)snprintf(b, sizeof b, "{\"positions\":[");
  for (i = 1; i <= 65; i++)
    n += (size_t)snprintf(b + n, sizeof b - n, "%s%d", i > 1 ? "," : "", i);
  snprintf(b + n, sizeof b - n, "]}");
  expect_error(POST, "/session/a/step", b, 400, "too_many_positions");
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 0);
  /* 64 is fine */
  n = (size_t)snprintf(b, sizeof b, "{\"positions\":[");
  for (i = 1; i <= 64; i++)
    n += (size_t)snprintf(b + n, sizeof b - n, "%s%d", i > 1 ? "," : "", i);
  snprintf(b + n, sizeof b - n, "]}");
  ck_assert_int_eq(req(POST, "/session/a/step", b), 200);
  ck_assert_uint_eq(json_array_size(json_object_get(body, "slots")), 64);
  ck_assert_uint_eq(json_array_size(json_object_get(body, "victims")), 57);
  stop();
}
END_TEST

START_TEST(step_retry_is_replayed) {
  static const char *const first =
      "{\"victims\":[0,1],\"slots\":[1,2,0],\"size\":2,\"newest\":3}";
  static const char *const replayed =
      "{\"victims\":[0,1],\"slots\":[1,2,0],\"size\":2,\"newest\":3,"
      "\"replayed\":true}";
  char *before;

  start();
  expect_ok(PUT, "/session/a", "{\"budget\":2}", 201, NULL);
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2,3]}", 200, first);
  before = view_of("a");
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2,3]}", 200, replayed);
  expect_ok(POST, "/session/a/step",
            "{\"positions\":[1,2,3],\"attention\":[1]}", 200, replayed);
  expect_view("a", before);
  free(before);
  /* Not the same list: stale. A prefix is not a retry either. */
  expect_error(POST, "/session/a/step", "{\"positions\":[1,2]}", 409,
               "stale_position");
  expect_error(POST, "/session/a/step", "{\"positions\":[2,3]}", 409,
               "stale_position");
  expect_error(POST, "/session/a/step", "{\"pos\":3}", 409, "stale_position");
  /* Still replayed after an eviction, with the original answer. */
  expect_ok(POST, "/session/a/evict", "{\"budget\":1}", 200,
            "{\"victims\":[2],\"size\":1}");
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2,3]}", 200, replayed);
  /* One position, with and without a victim. */
  expect_ok(POST, "/session/a/step", "{\"pos\":4}", 200,
            "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":4}");
  expect_ok(POST, "/session/a/step", "{\"pos\":4}", 200,
            "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":4,"
            "\"replayed\":true}");
  expect_ok(POST, "/session/a/step", "{\"positions\":[4]}", 200,
            "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":4,"
            "\"replayed\":true}");
  expect_ok(POST, "/session/a/step", "{\"pos\":5}", 200,
            "{\"victims\":[3],\"slots\":[2],\"size\":2,\"newest\":5}");
  expect_ok(POST, "/session/a/step", "{\"pos\":5}", 200,
            "{\"victims\":[3],\"slots\":[2],\"size\":2,\"newest\":5,"
            "\"replayed\":true}");
  /* The earlier request is no longer the last one. */
  expect_error(POST, "/session/a/step", "{\"pos\":4}", 409, "stale_position");
  stop();
}
END_TEST

START_TEST(step_up_to_the_largest_position) {
  start();
  expect_ok(POST, "/session/a/step", "{\"positions\":[4294967294,4294967295]}",
            200, "{\"victims\":[],\"slots\":[1,2],\"size\":3,"
                 "\"newest\":4294967295}");
  expect_error(POST, "/session/a/step", "{\"pos\":4294967295}", 409,
               "stale_position");
  ck_assert(json_integer_value(json_object_get(json_object_get(body, "error"),
                                               "newest")) == 4294967295LL);
  stop();
}
END_TEST

START_TEST(step_without_autocreate) {
  evd_config_t cfg;

  default_cfg(&cfg);
  cfg.autocreate = 0;
  start_with(&cfg);
  expect_error(POST, "/session/a/step", "{\"pos\":1}", 404, "unknown_session");
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 0);
  expect_ok(PUT, "/session/a", NULL, 201, NULL);
  expect_ok(POST, "/session/a/step", "{\"pos\":1}", 200, NULL);
  stop();
}
END_TEST

/* Integers too large for 64 bits are valid JSON (RFC 8259 sets no limit),
 * so the spec classifies them by field like any other out-of-range value,
 * and nothing is created. */
static const struct {
  const char *path, *body, *code;
} huge_ints[] = {
    {"/session/a/step", "{\"pos\":99999999999999999999}", "invalid_position"},
    {"/session/a/step", "{\"positions\":[1,99999999999999999999]}",
     "invalid_position"},
    {"/session/a", "{\"budget\":99999999999999999999}", "invalid_budget"},
    {"/session/a", "{\"budget\":4,\"sinks\":99999999999999999999}",
     "invalid_sinks"},
};

START_TEST(integers_beyond_64_bits_are_range_errors) {
  start();
  expect_error(strcmp(huge_ints[_i].path, "/session/a") == 0 ? PUT : POST,
               huge_ints[_i].path, huge_ints[_i].body, 400,
               huge_ints[_i].code);
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 0);
  stop();
}
END_TEST

/* ---- JSON depth ----------------------------------------------------------- */

static char *nested_attention(int arrays) {
  size_t n = 40 + 2 * (size_t)arrays;
  char *b = malloc(n), *p = b;
  int i;

  ck_assert_ptr_nonnull(b);
  p += sprintf(p, "{\"pos\":1,\"attention\":");
  for (i = 0; i < arrays; i++)
    *p++ = '[';
  for (i = 0; i < arrays; i++)
    *p++ = ']';
  strcpy(p, "}");
  return b;
}

START_TEST(json_depth_32_allowed_33_refused) {
  char *b;

  start();
  b = nested_attention(31); /* 32 levels with the outer object */
  expect_ok(POST, "/session/a/step", b, 200, NULL);
  free(b);
  b = nested_attention(32);
  expect_error(POST, "/session/b/step", b, 400, "invalid_json");
  ck_assert_msg(strstr(error_message(), "deep") != NULL, "message: %s",
                error_message());
  free(b);
  b = nested_attention(100000); /* hostile nesting costs only the scan */
  expect_error(POST, "/session/b/step", b, 400, "invalid_json");
  free(b);
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 1);
  /* Brackets inside strings, escaped quotes included, do not count. */
  expect_ok(POST, "/session/a/step",
            "{\"pos\":2,\"attention\":\"\\\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
            "[[[[[[[[[[[[\\\\\"}",
            200, NULL);
  stop();
}
END_TEST

/* ---- evict -------------------------------------------------------------- */

START_TEST(evict_forms_and_refusals) {
  char *before;

  start();
  expect_error(POST, "/session/a/evict", NULL, 404, "unknown_session");
  expect_error(POST, "/session/a/evict", "{\"budget\":2}", 404,
               "unknown_session");
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 0);
  expect_ok(PUT, "/session/a", "{\"budget\":6,\"sinks\":2}", 201, NULL);
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2,3,4,5,6,7]}", 200,
            "{\"victims\":[2,3],\"slots\":[1,2,3,4,5,6,2],\"size\":6,"
            "\"newest\":7}");
  before = view_of("a");
  expect_error(POST, "/session/a/evict", "{\"budget\":0}", 400,
               "invalid_budget");
  expect_error(POST, "/session/a/evict", "{\"budget\":2}", 400,
               "invalid_budget"); /* not above the 2 sinks */
  expect_error(POST, "/session/a/evict", "{\"budget\":4294967295}", 400,
               "invalid_budget");
  expect_error(POST, "/session/a/evict", "{\"budget\":\"3\"}", 400,
               "invalid_field");
  expect_error(POST, "/session/a/evict", "{\"budget\":3.0}", 400,
               "invalid_field");
  expect_error(POST, "/session/a/evict", "{\"size\":3}", 400, "invalid_field");
  expect_error(POST, "/session/a/evict", "[]", 400, "invalid_json");
  expect_view("a", before);
  free(before);
  /* Empty body and {} evict to the session's own budget: nothing to do. */
  expect_ok(POST, "/session/a/evict", NULL, 200, "{\"victims\":[],\"size\":6}");
  expect_ok(POST, "/session/a/evict", "{}", 200, "{\"victims\":[],\"size\":6}");
  expect_ok(POST, "/session/a/evict", "{\"budget\":4294967294}", 200,
            "{\"victims\":[],\"size\":6}");
  expect_ok(POST, "/session/a/evict", "{\"budget\":3}", 200,
            "{\"victims\":[4,5,6],\"size\":3}");
  expect_ok(GET, "/session/a", NULL, 200,
            "{\"id\":\"a\",\"budget\":6,\"sinks\":2,\"size\":3,\"newest\":7,"
            "\"kept\":[0,1,7],\"slots\":[0,1,2]}");
  ck_assert_int_eq(reply.route, EVD_R_SESSION);
  stop();
}
END_TEST

/* ---- batch -------------------------------------------------------------- */

START_TEST(batch_items_apply_in_order) {
  json_t *res, *item;

  start();
  ck_assert_int_eq(
      req(POST, "/step",
          "{\"steps\":["
          "{\"session\":\"a\",\"pos\":5},"
          "{\"session\":\"b\",\"positions\":[7,8],\"budget\":2},"
          "{\"session\":\"a\",\"pos\":5},"
          "{\"session\":\"a\",\"pos\":1},"
          "{\"session\":\"a b\",\"pos\":6},"
          "7,"
          "{\"pos\":6},"
          "{\"session\":5,\"pos\":6},"
          "{\"session\":\"a\",\"pos\":6,\"extra\":1},"
          "{\"session\":\"a\",\"positions\":[6,7]},"
          "{\"session\":\"c\",\"pos\":0},"
          "{\"session\":\"c\",\"pos\":-1}"
          "]}"),
      200);
  ck_assert_int_eq(reply.route, EVD_R_BATCH);
  res = json_object_get(body, "results");
  ck_assert_uint_eq(json_array_size(res), 12);
#define ITEM_IS(i, text)                                                       \
  do {                                                                         \
    json_t *w_ = json_loads(text, 0, NULL);                                    \
    ck_assert_msg(json_equal(w_, json_array_get(res, i)),                      \
                  "item %d: expected %s, got %s", i, text,                     \
                  json_dumps(json_array_get(res, i), JSON_COMPACT));           \
    json_decref(w_);                                                           \
  } while (0)
#define ITEM_ERR(i, code, st)                                                  \
  do {                                                                         \
    item = json_object_get(json_array_get(res, i), "error");                   \
    ck_assert_msg(item != NULL, "item %d is not an error", i);                 \
    ck_assert_str_eq(check_error_object(item, 0, 1), code);                    \
    ck_assert_int_eq(json_integer_value(json_object_get(item, "status")), st); \
  } while (0)
  ITEM_IS(0, "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":5}");
  ITEM_IS(1, "{\"victims\":[0],\"slots\":[1,2],\"size\":2,\"newest\":8}");
  ITEM_IS(2, "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":5,"
             "\"replayed\":true}");
  ITEM_ERR(3, "stale_position", 409);
  ck_assert_int_eq(json_integer_value(json_object_get(item, "newest")), 5);
  ITEM_ERR(4, "invalid_session_id", 400);
  ITEM_ERR(5, "invalid_field", 400);
  ITEM_ERR(6, "invalid_field", 400);
  ITEM_ERR(7, "invalid_field", 400);
  ITEM_ERR(8, "invalid_field", 400);
  ITEM_IS(9, "{\"victims\":[],\"slots\":[2,3],\"size\":4,\"newest\":7}");
  ITEM_ERR(10, "stale_position", 409);
  ITEM_ERR(11, "invalid_position", 400);
  /* c was never created; b has the item's budget. */
  expect_error(GET, "/session/c", NULL, 404, "unknown_session");
  expect_ok(GET, "/session/b", NULL, 200,
            "{\"id\":\"b\",\"budget\":2,\"sinks\":0,\"size\":2,\"newest\":8,"
            "\"kept\":[7,8],\"slots\":[1,2]}");
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 2);
  expect_ok(POST, "/step", "{\"steps\":[]}", 200, "{\"results\":[]}");
  stop();
}
END_TEST

START_TEST(batch_refusals) {
  char b[1024];
  size_t n;
  int i;

  start(); /* max_batch 16 */
  expect_error(POST, "/step", "{}", 400, "invalid_field");
  expect_error(POST, "/step", "{\"steps\":{}}", 400, "invalid_field");
  expect_error(POST, "/step", "{\"steps\":\"x\"}", 400, "invalid_field");
  expect_error(POST, "/step", "{\"steps\":[],\"x\":1}", 400, "invalid_field");
  expect_error(POST, "/step", "[]", 400, "invalid_json");
  expect_error(POST, "/step", "", 400, "invalid_json");
  expect_error(POST, "/step", "{\"steps\":[],\"steps\":[]}", 400,
               "invalid_json");
  n = (size_t)snprintf(b, sizeof b, "{\"steps\":[");
  for (i = 1; i <= 17; i++)
    n += (size_t)snprintf(b + n, sizeof b - n, "%s{\"session\":\"s%d\","
                          "\"pos\":1}", i > 1 ? "," : "", i);
  snprintf(b + n, sizeof b - n, "]}");
  expect_error(POST, "/step", b, 400, "too_many_steps");
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 0);
  /* Too many positions in one item is that item's error only. */
  n = (size_t)snprintf(b, sizeof b,
                       "{\"steps\":[{\"session\":\"a\",\"positions\":[");
  for (i = 1; i <= 65; i++)
    n += (size_t)snprintf(b + n, sizeof b - n, "%s%d", i > 1 ? "," : "", i);
  snprintf(b + n, sizeof b - n, "]},{\"session\":\"b\",\"pos\":1}]}");
  ck_assert_int_eq(req(POST, "/step", b), 200);
  ck_assert_str_eq(
      check_error_object(json_object_get(json_array_get(json_object_get(
                                             body, "results"), 0), "error"),
                         0, 1),
      "too_many_positions");
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 1);
  stop();
}
END_TEST

/* ---- limits ------------------------------------------------------------- */

START_TEST(session_limit_everywhere) {
  evd_config_t cfg;
  json_t *e;

  default_cfg(&cfg);
  cfg.max_sessions = 2;
  start_with(&cfg);
  expect_ok(PUT, "/session/a", NULL, 201, NULL);
  expect_ok(POST, "/session/b/step", "{\"pos\":1}", 200, NULL);
  expect_error(PUT, "/session/c", NULL, 503, "session_limit");
  expect_error(POST, "/session/c/step", "{\"pos\":1}", 503, "session_limit");
  ck_assert_int_eq(req(POST, "/step",
                       "{\"steps\":[{\"session\":\"c\",\"pos\":1},"
                       "{\"session\":\"a\",\"pos\":1}]}"),
                   200);
  e = json_object_get(json_array_get(json_object_get(body, "results"), 0),
                      "error");
  ck_assert_str_eq(check_error_object(e, 0, 1), "session_limit");
  ck_assert_int_eq(json_integer_value(json_object_get(e, "status")), 503);
  ck_assert_ptr_null(
      json_object_get(json_array_get(json_object_get(body, "results"), 1),
                      "error"));
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 2);
  /* Existing sessions still work, and a deletion makes room. */
  expect_ok(PUT, "/session/a", NULL, 200, NULL);
  ck_assert_int_eq(req(DEL, "/session/a", NULL), 204);
  expect_ok(PUT, "/session/c", NULL, 201, NULL);
  stop();
}
END_TEST

START_TEST(bearer_token_guards_all_but_healthz) {
  evd_config_t cfg;

  default_cfg(&cfg);
  cfg.token = "s3cret";
  start_with(&cfg);
  expect_error(PUT, "/session/a", NULL, 401, "unauthorized");
  ck_assert_ptr_nonnull(reply.www_authenticate);
  expect_error(GET, "/nope", NULL, 401, "unauthorized");
  auth = "Bearer wrong";
  expect_error(PUT, "/session/a", NULL, 401, "unauthorized");
  auth = "Bearer s3cre";
  expect_error(PUT, "/session/a", NULL, 401, "unauthorized");
  auth = "Bearer s3cretx";
  expect_error(PUT, "/session/a", NULL, 401, "unauthorized");
  auth = "Basic s3cret";
  expect_error(PUT, "/session/a", NULL, 401, "unauthorized");
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 0);
  auth = NULL;
  expect_ok(GET, "/healthz", NULL, 200, "{\"status\":\"ok\"}");
  auth = "Bearer s3cret";
  expect_ok(PUT, "/session/a", NULL, 201, NULL);
  expect_error(GET, "/nope", NULL, 404, "not_found");
  stop();
}
END_TEST

/* Messages carry parts of the request (an unknown key, the parser's
 * complaint): whatever bytes those hold, the answer must stay valid JSON,
 * which also means valid UTF-8. One check per body. */
static const char *const odd_bodies[] = {
    /* a key whose 40-byte cut lands inside a two-byte character */
    "{\"pos\":1,\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\xc3\xa9\":1}",
    /* and inside a four-byte one */
    "{\"pos\":1,\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\xf0\x9f\x98\x80\":1}",
    "{\"pos\":1,\"\\\"\\\\\\u0001\":1}", /* quote, backslash, control */
    "{\"pos\":1,\"\xe2\x82\xac\":1}",
    "{\"pos\":\xff}",
    "{\"pos\":1,\"a\":\"\xc3\"}",
    "{\"pos\":\"\\ud800\"}",
    ("{\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3"
     "\xa9\xc3\xa9\xc3\xa9\":"), /* cut short after a key */
    "{\"pos\":1\x01}",
    "\xef\xbb\xbf{\"pos\":1}",
    "{\"pos\":1,\"\xc3\xa9\xc3\xa9\":1}",
    /* the parser's complaint quotes the first byte of a character only */
    "{\"pos\":1,\"a\\\xc3\xa9\":1}",
};

START_TEST(error_messages_stay_valid_json) {
  int st;

  start();
  st = req(POST, "/session/a/step", odd_bodies[_i]); /* checks the JSON */
  ck_assert_msg(st == 400, "status %d", st);
  stop();
}
END_TEST

/* ---- the vectors, through the API --------------------------------------- */

static const char *vectors_dir(void) {
  const char *d = getenv("EVD_VECTORS_DIR");
  return d != NULL ? d : EVD_VECTORS_DIR;
}

/* The keys of a vector op that describe the request, not the answer. */
static int request_key(const char *k) {
  static const char *const keys[] = {"step",  "tentative", "commit", "evict",
                                     "truncate", "fork",   "check",  "session",
                                     "error", NULL};
  const char *const *p;

  for (p = keys; *p != NULL; p++)
    if (strcmp(k, *p) == 0)
      return 1;
  return 0;
}

/* The answer must have exactly the op's expected fields, with its values. */
static void expect_answer(json_t *op, const char *where) {
  const char *k;
  json_t *want;
  size_t n = 0;

  json_object_foreach(op, k, want) {
    if (request_key(k))
      continue;
    n++;
    ck_assert_msg(json_equal(want, json_object_get(body, k)),
                  "%s: %s differs: got %.*s", where, k, (int)out.len,
                  out.data);
  }
  ck_assert_msg(json_object_size(body) == n, "%s: answer has other fields: "
                "%.*s", where, (int)out.len, out.data);
}

/* The view must show what the check lists; a missing "tentative" or
 * "pages" in the view reads as []. */
static void expect_check(json_t *check, const char *where) {
  const char *k;
  json_t *want;

  json_object_foreach(check, k, want) {
    json_t *got = json_object_get(body, k), *empty = json_array();
    int ok = json_equal(want, got) ||
             (got == NULL && json_equal(want, empty) &&
              (strcmp(k, "tentative") == 0 || strcmp(k, "pages") == 0));
    json_decref(empty);
    ck_assert_msg(ok, "%s: view's %s differs: %.*s", where, k, (int)out.len,
                  out.data);
  }
}

static void replay_vector(const char *path, int index) {
  json_error_t jerr;
  json_t *vec = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr), *op;
  char where[4200], base[32], sp[200], *b;
  size_t i;

  ck_assert_msg(vec != NULL, "%s: %s", path, jerr.text);
  snprintf(base, sizeof base, "v%d", index);
  {
    json_t *cfg = json_pack("{s:O,s:O}", "budget",
                            json_object_get(vec, "budget"), "sinks",
                            json_object_get(vec, "sinks"));
    if (json_object_get(vec, "lookahead") != NULL)
      json_object_set(cfg, "lookahead", json_object_get(vec, "lookahead"));
    if (json_object_get(vec, "page_size") != NULL)
      json_object_set(cfg, "page_size", json_object_get(vec, "page_size"));
    b = json_dumps(cfg, JSON_COMPACT);
    json_decref(cfg);
  }
  snprintf(sp, sizeof sp, "/session/%s", base);
  ck_assert_msg(req(PUT, sp, b) == 201, "%s: PUT %s: %.*s", path, b,
                (int)out.len, out.data);
  free(b);
  json_array_foreach(json_object_get(vec, "ops"), i, op) {
    json_t *err = json_object_get(op, "error"), *rq = json_object();
    const char *sess = json_string_value(json_object_get(op, "session"));
    char id[100];
    int st;
    if (sess != NULL)
      snprintf(id, sizeof id, "%s.%s", base, sess);
    else
      snprintf(id, sizeof id, "%s", base);
    snprintf(where, sizeof where, "%s op %zu", path, i);
    if (json_object_get(op, "step") != NULL) {
      json_t *list = json_object_get(op, "step");
      if (json_array_size(list) > 0)
        json_object_set(rq, "positions", list);
      if (json_object_get(op, "tentative") != NULL)
        json_object_set(rq, "tentative", json_object_get(op, "tentative"));
      if (json_object_get(op, "commit") != NULL)
        json_object_set(rq, "commit", json_object_get(op, "commit"));
      snprintf(sp, sizeof sp, "/session/%s/step", id);
    } else if (json_object_get(op, "commit") != NULL) {
      json_object_set(rq, "newest", json_object_get(op, "commit"));
      snprintf(sp, sizeof sp, "/session/%s/commit", id);
    } else if (json_object_get(op, "truncate") != NULL) {
      json_object_set(rq, "from", json_object_get(op, "truncate"));
      snprintf(sp, sizeof sp, "/session/%s/truncate", id);
    } else if (json_object_get(op, "evict") != NULL) {
      json_object_set(rq, "budget", json_object_get(op, "evict"));
      snprintf(sp, sizeof sp, "/session/%s/evict", id);
    } else if (json_object_get(op, "fork") != NULL) {
      char child[100];
      snprintf(child, sizeof child, "%s.%s", base,
               json_string_value(json_object_get(op, "fork")));
      json_object_set_new(rq, "into", json_string(child));
      snprintf(sp, sizeof sp, "/session/%s/fork", id);
    } else {
      json_decref(rq);
      snprintf(sp, sizeof sp, "/session/%s", id);
      st = req(GET, sp, NULL);
      ck_assert_msg(st == 200, "%s: GET %d", where, st);
      expect_check(json_object_get(op, "check"), where);
      continue;
    }
    b = json_dumps(rq, JSON_COMPACT);
    json_decref(rq);
    st = req(POST, sp, b);
    if (err != NULL) {
      ck_assert_msg(st >= 400 && strcmp(error_code(), json_string_value(err))
                                     == 0,
                    "%s: %s expected, got %d %.*s", where,
                    json_string_value(err), st, (int)out.len, out.data);
    } else if (json_object_get(op, "fork") != NULL) {
      ck_assert_msg(st == 201, "%s: fork %d %.*s", where, st, (int)out.len,
                    out.data);
    } else {
      ck_assert_msg(st == 200, "%s: %s: %d %.*s", where, b, st, (int)out.len,
                    out.data);
      expect_answer(op, where);
    }
    free(b);
  }
  json_decref(vec);
}


/* ---- engine workflows: lookahead, pages, drafts, commit, truncate, fork -- */

START_TEST(engine_config_fields) {
  char *before;

  start();
  expect_ok(PUT, "/session/a", "{\"budget\":4,\"lookahead\":3,\"page_size\":2}",
            201,
            "{\"id\":\"a\",\"budget\":4,\"sinks\":0,\"lookahead\":3,"
            "\"page_size\":2,\"size\":1,\"newest\":0,\"kept\":[0],"
            "\"slots\":[0],\"pages\":[0]}");
  expect_ok(PUT, "/session/a", "{\"budget\":4,\"lookahead\":3,\"page_size\":2}",
            200, NULL);
  before = view_of("a");
  expect_error(PUT, "/session/a", "{\"budget\":4,\"page_size\":2}", 409,
               "session_exists");
  expect_error(PUT, "/session/a", "{\"budget\":4,\"lookahead\":3}", 409,
               "session_exists");
  expect_view("a", before);
  free(before);
  expect_error(PUT, "/session/b", "{\"lookahead\":0}", 400,
               "invalid_lookahead");
  expect_error(PUT, "/session/b", "{\"lookahead\":65537}", 400,
               "invalid_lookahead");
  expect_error(PUT, "/session/b", "{\"lookahead\":\"2\"}", 400,
               "invalid_field");
  expect_error(PUT, "/session/b", "{\"page_size\":65537}", 400,
               "invalid_page_size");
  expect_error(PUT, "/session/b", "{\"page_size\":-1}", 400,
               "invalid_page_size");
  expect_error(PUT, "/session/b", "{\"page_size\":1.5}", 400,
               "invalid_field");
  expect_error(POST, "/session/b/step", "{\"pos\":1,\"lookahead\":0}", 400,
               "invalid_lookahead");
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 1);
  /* An autocreating step takes them; its answer lists page 0 as new. */
  expect_ok(POST, "/session/b/step",
            "{\"positions\":[1,2,3,4,5],\"budget\":2,\"lookahead\":5,"
            "\"page_size\":2}",
            200,
            "{\"victims\":[0,1,2,3],\"slots\":[1,2,3,4,5],\"size\":2,"
            "\"newest\":5,\"pages_new\":[2],\"pages_freed\":[],"
            "\"pages_transient\":[0,1]}");
  expect_ok(GET, "/session/b", NULL, 200,
            "{\"id\":\"b\",\"budget\":2,\"sinks\":0,\"lookahead\":5,"
            "\"page_size\":2,\"size\":2,\"newest\":5,\"kept\":[4,5],"
            "\"slots\":[4,5],\"pages\":[2]}");
  /* ... and they are creation parameters only: a later step may repeat
   * them, not change them. */
  expect_error(POST, "/session/b/step", "{\"pos\":6,\"lookahead\":1}", 409,
               "session_exists");
  expect_ok(POST, "/session/b/step", "{\"pos\":6,\"lookahead\":5}", 200,
            "{\"victims\":[4],\"slots\":[6],\"size\":2,\"newest\":6,"
            "\"pages_new\":[3],\"pages_freed\":[],\"pages_transient\":[]}");
  expect_ok(POST, "/session/c/step", "{\"pos\":1,\"page_size\":4}", 200,
            "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":1,"
            "\"pages_new\":[0],\"pages_freed\":[],\"pages_transient\":[]}");
  stop();
}
END_TEST

START_TEST(drafts_commit_and_their_refusals) {
  char *before;

  start();
  expect_ok(PUT, "/session/a", "{\"budget\":3,\"lookahead\":2}", 201, NULL);
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2,3]}", 200, NULL);
  expect_ok(POST, "/session/a/step", "{\"positions\":[4,5],\"tentative\":true}",
            200,
            "{\"victims\":[],\"slots\":[4,0],\"size\":5,\"newest\":5}");
  expect_ok(GET, "/session/a", NULL, 200,
            "{\"id\":\"a\",\"budget\":3,\"sinks\":0,\"lookahead\":2,"
            "\"size\":5,\"newest\":5,\"kept\":[1,2,3,4,5],"
            "\"slots\":[1,2,3,4,0],\"tentative\":[4,5]}");
  before = view_of("a");
  expect_error(POST, "/session/a/step", "{\"pos\":6}", 409,
               "tentative_pending");
  expect_error(POST, "/session/a/evict", NULL, 409, "tentative_pending");
  expect_error(POST, "/session/a/step", "{\"pos\":6,\"tentative\":true}", 400,
               "too_many_positions");
  expect_error(POST, "/session/a/step", "{\"pos\":5,\"tentative\":true}", 409,
               "stale_position");
  expect_error(POST, "/session/a/step", "{\"pos\":6,\"tentative\":1}", 400,
               "invalid_field");
  expect_error(POST, "/session/a/commit", "{\"newest\":2}", 400,
               "invalid_position");
  expect_error(POST, "/session/a/commit", "{\"newest\":-1}", 400,
               "invalid_position");
  expect_error(POST, "/session/a/commit", "{}", 400, "invalid_field");
  expect_error(POST, "/session/a/commit", NULL, 400, "invalid_json");
  expect_error(POST, "/session/a/commit", "{\"newest\":4,\"x\":1}", 400,
               "invalid_field");
  expect_error(POST, "/session/z/commit", "{\"newest\":4}", 404,
               "unknown_session");
  /* A step with a commit must still go above the commit's newest. */
  expect_error(POST, "/session/a/step", "{\"commit\":4,\"pos\":4}", 409,
               "stale_position");
  expect_error(POST, "/session/a/step", "{\"commit\":2,\"pos\":9}", 400,
               "invalid_position");
  expect_view("a", before);
  free(before);
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 1);
  /* Accept 4, drop 5; a resend is replayed. */
  expect_ok(POST, "/session/a/commit", "{\"newest\":4}", 200,
            "{\"victims\":[1],\"dropped\":[5],\"size\":3,\"newest\":4}");
  expect_ok(POST, "/session/a/commit", "{\"newest\":4}", 200,
            "{\"victims\":[1],\"dropped\":[5],\"size\":3,\"newest\":4,"
            "\"replayed\":true}");
  /* Commit and the next drafts in one request, and its replay. */
  expect_ok(POST, "/session/a/step",
            "{\"commit\":4,\"positions\":[5,6],\"tentative\":true}", 200,
            "{\"victims\":[],\"slots\":[0,1],\"size\":5,\"newest\":6,"
            "\"dropped\":[]}");
  expect_ok(POST, "/session/a/step",
            "{\"commit\":6,\"positions\":[7],\"tentative\":true}", 200,
            "{\"victims\":[2,3],\"slots\":[2],\"size\":4,\"newest\":7,"
            "\"dropped\":[]}");
  expect_ok(POST, "/session/a/step",
            "{\"commit\":6,\"positions\":[7],\"tentative\":true}", 200,
            "{\"victims\":[2,3],\"slots\":[2],\"size\":4,\"newest\":7,"
            "\"dropped\":[],\"replayed\":true}");
  /* The same positions without the flag are another request: drop the
   * draft 7, then step 7 for good. */
  expect_ok(POST, "/session/a/step", "{\"commit\":6,\"positions\":[7]}", 200,
            "{\"victims\":[4],\"slots\":[2],\"size\":3,\"newest\":7,"
            "\"dropped\":[7]}");
  /* A commit-only step, rejecting every draft. */
  expect_ok(POST, "/session/a/step", "{\"pos\":8,\"tentative\":true}", 200,
            NULL);
  expect_ok(POST, "/session/a/step", "{\"commit\":7}", 200,
            "{\"victims\":[],\"slots\":[],\"size\":3,\"newest\":7,"
            "\"dropped\":[8]}");
  expect_ok(POST, "/session/a/step", "{\"pos\":8}", 200,
            "{\"victims\":[5],\"slots\":[3],\"size\":3,\"newest\":8}");
  stop();
}
END_TEST

START_TEST(truncate_forms_and_refusals) {
  start();
  expect_ok(PUT, "/session/a", "{\"budget\":4,\"sinks\":2,\"page_size\":2}",
            201, NULL);
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2,3,4,5,6,7]}", 200,
            NULL);
  expect_error(POST, "/session/a/truncate", "{\"from\":0}", 400,
               "invalid_position");
  expect_error(POST, "/session/a/truncate", "{\"from\":\"1\"}", 400,
               "invalid_position");
  expect_error(POST, "/session/a/truncate", "{}", 400, "invalid_field");
  expect_error(POST, "/session/z/truncate", "{\"from\":1}", 404,
               "unknown_session");
  expect_ok(POST, "/session/a/truncate", "{\"from\":50}", 200,
            "{\"removed\":[],\"size\":4,\"newest\":7,\"pages_new\":[],"
            "\"pages_freed\":[],\"pages_transient\":[]}");
  expect_ok(POST, "/session/a/truncate", "{\"from\":1}", 200,
            "{\"removed\":[1,6,7],\"size\":1,\"newest\":0,\"pages_new\":[],"
            "\"pages_freed\":[3],\"pages_transient\":[]}");
  expect_ok(POST, "/session/a/truncate", "{\"from\":1}", 200,
            "{\"removed\":[1,6,7],\"size\":1,\"newest\":0,\"pages_new\":[],"
            "\"pages_freed\":[3],\"pages_transient\":[],\"replayed\":true}");
  /* 1 is pinned again in slot 1; 2 starts the ring at slot 2. */
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2]}", 200,
            "{\"victims\":[],\"slots\":[1,2],\"size\":3,\"newest\":2,"
            "\"pages_new\":[1],\"pages_freed\":[],\"pages_transient\":[]}");
  stop();
}
END_TEST

/* A step past the budget writes pages it also evicts: they are named, and
 * a resend gets the same lists even after an evict changed the window
 * (the record keeps two bits, not the pages). Positions with gaps keep
 * the record as arrays rather than runs: the same must hold. */
START_TEST(transient_pages_and_their_replay) {
  start();
  expect_ok(PUT, "/session/a", "{\"budget\":3,\"page_size\":2,"
            "\"lookahead\":8}", 201, NULL);
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2,3,4,5,6,7]}", 200,
            "{\"victims\":[0,1,2,3,4],\"slots\":[1,2,3,4,5,6,7],"
            "\"size\":3,\"newest\":7,\"pages_new\":[2,3],"
            "\"pages_freed\":[0],\"pages_transient\":[1]}");
  expect_ok(POST, "/session/a/evict", "{\"budget\":1}", 200,
            "{\"victims\":[5,6],\"size\":1,\"pages_new\":[],"
            "\"pages_freed\":[2],\"pages_transient\":[]}");
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2,3,4,5,6,7]}", 200,
            "{\"victims\":[0,1,2,3,4],\"slots\":[1,2,3,4,5,6,7],"
            "\"size\":3,\"newest\":7,\"pages_new\":[2,3],"
            "\"pages_freed\":[0],\"pages_transient\":[1],"
            "\"replayed\":true}");
  /* Gaps: victims 7 20 23 24 are not a run; 20, 23 and 24 each had a
   * page of its own, held within the request only. */
  expect_ok(POST, "/session/a/step", "{\"positions\":[20,23,24,29,31,33]}",
            200,
            "{\"victims\":[7,20,23,24],\"slots\":[8,9,10,0,1,2],"
            "\"size\":3,\"newest\":33,\"pages_new\":[14,15,16],"
            "\"pages_freed\":[3],\"pages_transient\":[10,11,12]}");
  expect_ok(POST, "/session/a/evict", "{\"budget\":1}", 200, NULL);
  expect_ok(POST, "/session/a/step", "{\"positions\":[20,23,24,29,31,33]}",
            200,
            "{\"victims\":[7,20,23,24],\"slots\":[8,9,10,0,1,2],"
            "\"size\":3,\"newest\":33,\"pages_new\":[14,15,16],"
            "\"pages_freed\":[3],\"pages_transient\":[10,11,12],"
            "\"replayed\":true}");
  /* The victims' page still held after the step (3 survives in page 0)
   * is not transient, and stays so in the replay after an evict emptied
   * it: the window then no longer says what it held. */
  expect_ok(PUT, "/session/b", "{\"budget\":3,\"page_size\":4,"
            "\"lookahead\":8}", 201, NULL);
  expect_ok(POST, "/session/b/step", "{\"positions\":[1,2,3]}", 200, NULL);
  expect_ok(POST, "/session/b/step", "{\"positions\":[4,5]}", 200,
            "{\"victims\":[1,2],\"slots\":[4,5],\"size\":3,"
            "\"newest\":5,\"pages_new\":[1],\"pages_freed\":[],"
            "\"pages_transient\":[]}");
  expect_ok(POST, "/session/b/evict", "{\"budget\":1}", 200,
            "{\"victims\":[3,4],\"size\":1,\"pages_new\":[],"
            "\"pages_freed\":[0],\"pages_transient\":[]}");
  expect_ok(POST, "/session/b/step", "{\"positions\":[4,5]}", 200,
            "{\"victims\":[1,2],\"slots\":[4,5],\"size\":3,"
            "\"newest\":5,\"pages_new\":[1],\"pages_freed\":[],"
            "\"pages_transient\":[],\"replayed\":true}");
  stop();
}
END_TEST

START_TEST(fork_forms_and_refusals) {
  evd_config_t cfg;

  default_cfg(&cfg);
  cfg.max_sessions = 3;
  start_with(&cfg);
  expect_ok(PUT, "/session/p", "{\"budget\":3,\"lookahead\":2}", 201, NULL);
  expect_ok(POST, "/session/p/step", "{\"positions\":[1,2,3,4]}", 200, NULL);
  expect_ok(POST, "/session/p/step", "{\"pos\":5,\"tentative\":true}", 200,
            NULL);
  expect_error(POST, "/session/p/fork", "{}", 400, "invalid_field");
  expect_error(POST, "/session/p/fork", "{\"into\":7}", 400, "invalid_field");
  expect_error(POST, "/session/p/fork", "{\"into\":\"a b\"}", 400,
               "invalid_session_id");
  expect_error(POST, "/session/z/fork", "{\"into\":\"c\"}", 404,
               "unknown_session");
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 1);
  expect_ok(POST, "/session/p/fork", "{\"into\":\"c\"}", 201,
            "{\"id\":\"c\",\"budget\":3,\"sinks\":0,\"lookahead\":2,"
            "\"size\":4,\"newest\":5,\"kept\":[2,3,4,5],"
            "\"slots\":[2,3,4,0],\"tentative\":[5]}");
  expect_ok(POST, "/session/p/fork", "{\"into\":\"c\"}", 200, NULL);
  expect_error(POST, "/session/p/fork", "{\"into\":\"p\"}", 400,
               "invalid_field");
  expect_error(POST, "/session/z/fork", "{\"into\":\"z\"}", 400,
               "invalid_field");
  /* The child's drafts are its own; so is its commit. */
  expect_ok(POST, "/session/c/commit", "{\"newest\":4}", 200,
            "{\"victims\":[],\"dropped\":[5],\"size\":3,\"newest\":4}");
  expect_ok(POST, "/session/p/commit", "{\"newest\":5}", 200,
            "{\"victims\":[2],\"dropped\":[],\"size\":3,\"newest\":5}");
  expect_error(POST, "/session/p/fork", "{\"into\":\"c\"}", 409,
               "session_exists");
  /* The child has no replay record: the parent's last request is new
   * there (and, here, applies). */
  expect_ok(POST, "/session/c/commit", "{\"newest\":5}", 200,
            "{\"victims\":[],\"dropped\":[],\"size\":3,\"newest\":4}");
  expect_ok(POST, "/session/p/fork", "{\"into\":\"d\"}", 201, NULL);
  expect_error(POST, "/session/p/fork", "{\"into\":\"e\"}", 503,
               "session_limit");
  stop();
}
END_TEST

START_TEST(batch_items_with_drafts_and_commits) {
  json_t *results;

  start();
  ck_assert_int_eq(req(POST, "/step",
                       "{\"steps\":[{\"session\":\"a\",\"positions\":[1,2],"
                       "\"tentative\":true,\"lookahead\":2,\"budget\":2},"
                       "{\"session\":\"a\",\"pos\":3},"
                       "{\"session\":\"a\",\"commit\":1,\"pos\":2},"
                       "{\"session\":\"a\",\"commit\":2},"
                       "{\"session\":\"b\",\"commit\":0,\"pos\":1}]}"),
                   200);
  results = json_object_get(body, "results");
  ck_assert_uint_eq(json_array_size(results), 5);
  ck_assert_str_eq(check_error_object(json_object_get(
                                          json_array_get(results, 1), "error"),
                                      0, 1),
                   "tentative_pending");
  {
    json_t *want = json_loads(
        "[{\"victims\":[],\"slots\":[1,2],\"size\":3,\"newest\":2},"
        "{\"victims\":[0],\"slots\":[2],\"size\":2,\"newest\":2,"
        "\"dropped\":[2]},"
        "{\"victims\":[],\"slots\":[],\"size\":2,\"newest\":2,"
        "\"dropped\":[]},"
        "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":1,"
        "\"dropped\":[]}]",
        0, NULL);
    json_array_remove(results, 1);
    ck_assert_msg(json_equal(want, results), "got %.*s", (int)out.len,
                  out.data);
    json_decref(want);
  }
  stop();
}
END_TEST

START_TEST(replays_of_runs_and_of_records_let_go) {
  evd_config_t cfg;
  evd_table_t *t;

  default_cfg(&cfg);
  cfg.replay_pool = 150; /* room for one small record at most */
  start_with(&cfg);
  /* A prefill and a decode step: runs, kept in the session whatever the
   * pool; resent, they are answered again. */
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2,3,4,5,6,7,8,9,10]}",
            200, NULL);
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2,3,4,5,6,7,8,9,10]}",
            200,
            "{\"victims\":[0,1,2],\"slots\":[1,2,3,4,5,6,7,8,0,1],"
            "\"size\":8,\"newest\":10,\"replayed\":true}");
  /* Positions with gaps: not runs, and too big for this pool: let go. */
  expect_ok(POST, "/session/a/step",
            "{\"positions\":[20,30,40,50,60,70,80,90,100,110,120]}", 200,
            NULL);
  expect_error(POST, "/session/a/step",
               "{\"positions\":[20,30,40,50,60,70,80,90,100,110,120]}", 409,
               "replay_unavailable");
  /* Another stale request is still stale, not a lost replay. */
  expect_error(POST, "/session/a/step", "{\"positions\":[20,30]}", 409,
               "stale_position");
  /* A small record with gaps fits the pool and is kept. */
  expect_ok(POST, "/session/a/step", "{\"positions\":[130,140]}", 200,
            NULL);
  expect_ok(POST, "/session/a/step", "{\"positions\":[130,140]}", 200,
            NULL);
  ck_assert(json_is_true(json_object_get(body, "replayed")));
  t = evd_api_table(api);
  ck_assert_uint_le(evd_table_pool(t)->bytes, 150);
  ck_assert_uint_gt(evd_table_pool(t)->let_go + 1, 0);
  stop();
}
END_TEST

START_TEST(vectors_replay_through_the_api) {
  DIR *d = opendir(vectors_dir());
  struct dirent *e;
  char path[4096];
  int files = 0;

  start();
  ck_assert_msg(d != NULL, "cannot open %s", vectors_dir());
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0)
      continue;
    snprintf(path, sizeof path, "%s/%s", vectors_dir(), e->d_name);
    replay_vector(path, files);
    files++;
  }
  closedir(d);
  ck_assert_int_ge(files, 5);
  stop();
}
END_TEST

/* ---- the idle reaper ---------------------------------------------------- */

START_TEST(reaper_never_early_always_after) {
  evd_config_t cfg;

  default_cfg(&cfg);
  cfg.idle_ttl = 2;
  start_with(&cfg);
  evd_api_set_clock(api, 1000000);
  expect_ok(PUT, "/session/a", NULL, 201, NULL);
  ck_assert_uint_eq(evd_api_reap(api), 0);
  evd_api_set_clock(api, 1001999); /* idle 1.999 s */
  ck_assert_uint_eq(evd_api_reap(api), 0);
  evd_api_set_clock(api, 1002000); /* idle exactly the TTL: not longer */
  ck_assert_uint_eq(evd_api_reap(api), 0);
  evd_api_set_clock(api, 1002099);
  ck_assert_uint_eq(evd_api_reap(api), 0);
  expect_ok(GET, "/session/a", NULL, 200, NULL); /* use refreshes: t=2.099 */
  evd_api_set_clock(api, 1004099);
  ck_assert_uint_eq(evd_api_reap(api), 0);
  evd_api_set_clock(api, 1004300); /* idle 2.2 s: reaped */
  ck_assert_uint_eq(evd_api_reap(api), 1);
  expect_error(GET, "/session/a", NULL, 404, "unknown_session");
  ck_assert_uint_eq(evd_api_reap(api), 0);

  /* Steps, evictions and identical PUTs count as use too. */
  expect_ok(PUT, "/session/b", NULL, 201, NULL);     /* t=4.3 */
  evd_api_set_clock(api, 1006000);
  expect_ok(POST, "/session/b/step", "{\"pos\":1}", 200, NULL); /* t=6.0 */
  evd_api_set_clock(api, 1007500);
  ck_assert_uint_eq(evd_api_reap(api), 0);
  expect_ok(POST, "/session/b/evict", NULL, 200, NULL); /* t=7.5 */
  evd_api_set_clock(api, 1009000);
  ck_assert_uint_eq(evd_api_reap(api), 0);
  expect_ok(PUT, "/session/b", NULL, 200, NULL); /* t=9.0 */
  evd_api_set_clock(api, 1010900);
  ck_assert_uint_eq(evd_api_reap(api), 0);
  evd_api_set_clock(api, 1011200);
  ck_assert_uint_eq(evd_api_reap(api), 1);
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 0);
  stop();
}
END_TEST

START_TEST(reaper_off_with_ttl_zero) {
  start(); /* idle_ttl 0 */
  evd_api_set_clock(api, 0);
  expect_ok(PUT, "/session/a", NULL, 201, NULL);
  evd_api_set_clock(api, UINT64_C(1) << 40);
  ck_assert_uint_eq(evd_api_reap(api), 0);
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 1);
  stop();
}
END_TEST

static int expired(int i) {
  return i % 10000 == 1234; /* 10 of 100000, spread over the creation order */
}

START_TEST(reaper_takes_only_the_expired_among_many) {
  enum { N = 100000 };
  evd_config_t cfg;
  char path[64];
  int i;

  default_cfg(&cfg);
  cfg.max_sessions = N;
  cfg.idle_ttl = 1;
  start_with(&cfg);
  evd_api_set_clock(api, 50000);
  for (i = 0; i < N; i++) {
    snprintf(path, sizeof path, "/session/s%d", i);
    REQUIRE(req(PUT, path, "{\"budget\":1}") == 201, "PUT %s", path);
  }
  /* Half a second later every session but ten is used again, so that the
   * expired ones are not simply the first created. */
  evd_api_set_clock(api, 50500);
  for (i = 0; i < N; i++) {
    if (expired(i))
      continue;
    snprintf(path, sizeof path, "/session/s%d/step", i);
    REQUIRE(req(POST, path, "{\"pos\":1}") == 200, "POST %s", path);
  }
  evd_api_set_clock(api, 51000); /* ten idle 1.0 s: not yet */
  ck_assert_uint_eq(evd_api_reap(api), 0);
  evd_api_set_clock(api, 51100); /* ten idle 1.1 s, the rest 0.6 s */
  ck_assert_uint_eq(evd_api_reap(api), 10);
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), N - 10);
  /* Reaping again finds nothing, however often: it stops at the first
   * session still in use instead of walking the table. */
  for (i = 0; i < 1000; i++)
    REQUIRE(evd_api_reap(api) == 0, "reap %d found more", i);
  /* Later, a sample is used again; the expired ones are gone. */
  evd_api_set_clock(api, 55000);
  for (i = 0; i < N; i++) {
    snprintf(path, sizeof path, "/session/s%d", i);
    if (expired(i))
      expect_error(GET, path, NULL, 404, "unknown_session");
    else if (i % 997 == 0)
      REQUIRE(req(GET, path, NULL) == 200, "GET %s", path);
  }
  /* All but the sample expire together later. */
  evd_api_set_clock(api, 56000);
  ck_assert_uint_eq(evd_api_reap(api), N - 10 - (N / 997 + 1));
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), N / 997 + 1);
  stop();
}
END_TEST

static Suite *api_suite(void) {
  Suite *s = suite_create("api");
  TCase *routes = tcase_create("routes");
  TCase *ops = tcase_create("operations");
  TCase *reaper = tcase_create("reaper");

  tcase_add_test(routes, healthz_get_and_head);
  tcase_add_test(routes, unknown_paths_not_found);
  tcase_add_test(routes, wrong_method_lists_allowed_ones);
  tcase_add_test(routes, session_ids_validated_in_path);
  tcase_add_test(routes, bearer_token_guards_all_but_healthz);
  suite_add_tcase(s, routes);

  tcase_set_timeout(ops, 60);
  tcase_add_test(ops, put_creates_then_is_idempotent);
  tcase_add_test(ops, put_refuses_bad_bodies_creating_nothing);
  tcase_add_test(ops, put_of_existing_with_bad_body_changes_nothing);
  tcase_add_test(ops, get_head_and_delete);
  tcase_add_test(ops, step_creates_with_defaults_or_given_config);
  tcase_add_test(ops, step_refusals_create_nothing);
  tcase_add_test(ops, step_refusals_change_nothing);
  tcase_add_test(ops, step_too_many_positions);
  tcase_add_test(ops, step_retry_is_replayed);
  tcase_add_test(ops, step_up_to_the_largest_position);
  tcase_add_test(ops, step_without_autocreate);
  tcase_add_loop_test(ops, integers_beyond_64_bits_are_range_errors, 0,
                      (int)(sizeof huge_ints / sizeof huge_ints[0]));
  tcase_add_test(ops, json_depth_32_allowed_33_refused);
  tcase_add_test(ops, evict_forms_and_refusals);
  tcase_add_test(ops, batch_items_apply_in_order);
  tcase_add_test(ops, batch_refusals);
  tcase_add_test(ops, session_limit_everywhere);
  tcase_add_loop_test(ops, error_messages_stay_valid_json, 0,
                      (int)(sizeof odd_bodies / sizeof odd_bodies[0]));
  tcase_add_test(ops, vectors_replay_through_the_api);
  tcase_add_test(ops, replays_of_runs_and_of_records_let_go);
  tcase_add_test(ops, engine_config_fields);
  tcase_add_test(ops, drafts_commit_and_their_refusals);
  tcase_add_test(ops, truncate_forms_and_refusals);
  tcase_add_test(ops, transient_pages_and_their_replay);
  tcase_add_test(ops, fork_forms_and_refusals);
  tcase_add_test(ops, batch_items_with_drafts_and_commits);
  suite_add_tcase(s, ops);

  tcase_set_timeout(reaper, 120);
  tcase_add_test(reaper, reaper_never_early_always_after);
  tcase_add_test(reaper, reaper_off_with_ttl_zero);
  tcase_add_test(reaper, reaper_takes_only_the_expired_among_many);
  suite_add_tcase(s, reaper);
  return s;
}

EVD_CHECK_MAIN(api_suite())
