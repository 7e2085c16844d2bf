/* Unit tests of the API without HTTP, through evd_api_handle (the fake
 * client is api_harness.c): routes, PUT/GET/DELETE and the limits here; the
 * suite lists every file's tests (step, vectors, engine, reaper). */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_harness.h"
#include "check_main.h"

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
  api_step_tests(ops); /* step, evict, batch */
  tcase_add_test(ops, session_limit_everywhere);
  tcase_add_loop_test(ops, error_messages_stay_valid_json, 0,
                      (int)(sizeof odd_bodies / sizeof odd_bodies[0]));
  api_vector_tests(ops);
  api_engine_tests(ops); /* lookahead, pages, drafts, commit, truncate, fork */
  api_adopt_tests(ops);  /* adopt, expect_newest */
  suite_add_tcase(s, ops);

  tcase_set_timeout(reaper, 120);
  api_reaper_tests(reaper);
  suite_add_tcase(s, reaper);
  return s;
}

EVD_CHECK_MAIN(api_suite())
