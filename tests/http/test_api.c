/* The API against a daemon on its defaults: every route and method and the
 * session life cycle (request bodies and their errors: test_api_bodies.c),
 * and that a refused request changes nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_api.h"

/* Each test gets a fresh daemon on its defaults. */
ht_t T;

static void up(void) {
  ht_up(&T, NULL, NULL);
}

static void down(void) {
  ht_down(&T);
}

const char *pos_body(long long p) {
  static char b[64];
  snprintf(b, sizeof b, "{\"pos\":%lld}", p);
  return b;
}

/* ---- routes ------------------------------------------------------------- */

START_TEST(healthz_get_and_head) {
  hc_response_t r;

  ht_expect(&T, "GET", "/healthz", NULL, 200, "{\"status\":\"ok\"}");
  ck_assert_int_eq(hc_request(&T.c, "HEAD", "/healthz", NULL, &r), 0);
  ck_assert_int_eq(r.status, 200);
  ck_assert_str_eq(hc_header(&r, "Content-Type"), "application/json");
  ck_assert_uint_eq(r.body_len, 0);
  hc_response_free(&r);
  /* The HEAD left the connection in step: the next answer is whole. */
  ht_expect(&T, "GET", "/healthz", NULL, 200, "{\"status\":\"ok\"}");
}
END_TEST

START_TEST(unknown_paths_are_not_found) {
  static const char *const paths[] = {
      "/",          "/sessions",         "/session",     "/session/a/",
      "/healthz/",  "/session/a/foo",    "/step/x",      "/session/a/step/x",
      "/session/a/evict/", "/HEALTHZ",   "/Session/a",   "/steps"};
  size_t i;

  for (i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    ht_error(&T, "GET", paths[i], NULL, 404, "not_found");
    ht_error(&T, "POST", paths[i], "{}", 404, "not_found");
  }
}
END_TEST

START_TEST(wrong_method_is_405_with_allow) {
  static const struct {
    const char *method, *path, *allow;
  } cases[] = {
      {"POST", "/session/a", "GET, HEAD, PUT, DELETE"},
      {"PATCH", "/session/a", "GET, HEAD, PUT, DELETE"},
      {"GET", "/session/a/step", "POST"},
      {"PUT", "/session/a/step", "POST"},
      {"DELETE", "/session/a/step", "POST"},
      {"HEAD", "/session/a/step", "POST"},
      {"GET", "/session/a/evict", "POST"},
      {"DELETE", "/session/a/evict", "POST"},
      {"GET", "/step", "POST"},
      {"PUT", "/step", "POST"},
      {"HEAD", "/step", "POST"},
      {"POST", "/healthz", "GET, HEAD"},
      {"PUT", "/healthz", "GET, HEAD"},
      {"DELETE", "/healthz", "GET, HEAD"},
  };
  size_t i;

  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int head = strcmp(cases[i].method, "HEAD") == 0;
    const char *body = head ? NULL : "{}";
    hc_response_t r;
    json_t *j;
    ck_assert_int_eq(hc_send(&T.c, cases[i].method, cases[i].path, NULL, body,
                             body ? 2 : 0, 0),
                     0);
    ck_assert_int_eq(hc_read_response(&T.c, head, &r), 0);
    ck_assert_msg(r.status == 405, "%s %s: status %d", cases[i].method,
                  cases[i].path, r.status);
    ck_assert_msg(hc_header_count(&r, "Allow") == 1 &&
                      strcmp(hc_header(&r, "Allow"), cases[i].allow) == 0,
                  "%s %s: Allow %s, expected %s", cases[i].method,
                  cases[i].path, hc_header(&r, "Allow"), cases[i].allow);
    ck_assert_str_eq(hc_header(&r, "Content-Type"), "application/json");
    if (!head) {
      j = json_loads(r.body, 0, NULL);
      ht_check_error(j, 405, "method_not_allowed", 0);
      json_decref(j);
    }
    hc_response_free(&r);
  }
  /* A refused method created nothing. */
  ht_error(&T, "GET", "/session/a", NULL, 404, "unknown_session");
}
END_TEST

/* ---- session life cycle --------------------------------------------- */

START_TEST(put_creates_201_then_200_then_409) {
  ht_expect(&T, "PUT", "/session/a", NULL, 201, VIEW0("a", 512, 0));
  ht_expect(&T, "PUT", "/session/a", NULL, 200, VIEW0("a", 512, 0));
  ht_expect(&T, "PUT", "/session/a", "", 200, VIEW0("a", 512, 0));
  ht_expect(&T, "PUT", "/session/a", "{}", 200, VIEW0("a", 512, 0));
  ht_expect(&T, "PUT", "/session/a", "{\"budget\":512}", 200,
            VIEW0("a", 512, 0));
  ht_expect(&T, "PUT", "/session/a", "{\"budget\":512,\"sinks\":0}", 200,
            VIEW0("a", 512, 0));
  ht_error(&T, "PUT", "/session/a", "{\"budget\":8}", 409, "session_exists");
  ht_error(&T, "PUT", "/session/a", "{\"sinks\":1}", 409, "session_exists");
  ht_error(&T, "PUT", "/session/a", "{\"budget\":511,\"sinks\":0}", 409,
           "session_exists");
  /* An empty body is {}: with a body of no bytes at all, too. */
  ht_expect(&T, "PUT", "/session/b", "", 201, VIEW0("b", 512, 0));
  ht_expect(&T, "PUT", "/session/c", "{\"budget\":8,\"sinks\":2}", 201,
            VIEW0("c", 8, 2));
  ht_expect(&T, "PUT", "/session/c", "{\"sinks\":2,\"budget\":8}", 200,
            VIEW0("c", 8, 2));
  ht_error(&T, "PUT", "/session/c", NULL, 409, "session_exists");
  /* The 200 answer is the session as it is now, not as created. */
  ht_do(&T, "POST", "/session/c/step", "{\"positions\":[1,2,3]}", 200);
  ht_expect(&T, "PUT", "/session/c", "{\"budget\":8,\"sinks\":2}", 200,
            "{\"id\":\"c\",\"budget\":8,\"sinks\":2,\"size\":4,\"newest\":3,"
            "\"kept\":[0,1,2,3],\"slots\":[0,1,2,3]}");
}
END_TEST

START_TEST(get_and_head_session) {
  hc_response_t r;

  ht_do(&T, "PUT", "/session/s1", "{\"budget\":3}", 201);
  ht_expect(&T, "GET", "/session/s1", NULL, 200, VIEW0("s1", 3, 0));
  ht_do(&T, "POST", "/session/s1/step", "{\"positions\":[4,9,10]}", 200);
  ht_expect(&T, "GET", "/session/s1", NULL, 200,
            "{\"id\":\"s1\",\"budget\":3,\"sinks\":0,\"size\":3,"
            "\"newest\":10,\"kept\":[4,9,10],\"slots\":[1,2,3]}");
  ck_assert_int_eq(hc_request(&T.c, "HEAD", "/session/s1", NULL, &r), 0);
  ck_assert_int_eq(r.status, 200);
  ck_assert_str_eq(hc_header(&r, "Content-Type"), "application/json");
  ck_assert_uint_eq(r.body_len, 0);
  hc_response_free(&r);
  ck_assert_int_eq(hc_request(&T.c, "HEAD", "/session/nope", NULL, &r), 0);
  ck_assert_int_eq(r.status, 404);
  ck_assert_uint_eq(r.body_len, 0);
  hc_response_free(&r);
  ht_do(&T, "GET", "/healthz", NULL, 200);
}
END_TEST

START_TEST(delete_is_204_then_404) {
  hc_response_t r;

  ht_do(&T, "PUT", "/session/d", "{\"budget\":4}", 201);
  ht_do(&T, "POST", "/session/d/step", pos_body(7), 200);
  ck_assert_int_eq(hc_request(&T.c, "DELETE", "/session/d", NULL, &r), 0);
  ck_assert_int_eq(r.status, 204);
  ck_assert_uint_eq(r.body_len, 0);
  hc_response_free(&r);
  ht_error(&T, "GET", "/session/d", NULL, 404, "unknown_session");
  ht_error(&T, "DELETE", "/session/d", NULL, 404, "unknown_session");
  /* The id is free again, for a session with another config. */
  ht_expect(&T, "PUT", "/session/d", "{\"budget\":5}", 201, VIEW0("d", 5, 0));
}
END_TEST

START_TEST(missing_session_is_unknown_session) {
  ht_error(&T, "GET", "/session/ghost", NULL, 404, "unknown_session");
  ht_error(&T, "DELETE", "/session/ghost", NULL, 404, "unknown_session");
  ht_error(&T, "POST", "/session/ghost/evict", NULL, 404, "unknown_session");
  ht_error(&T, "POST", "/session/ghost/evict", "", 404, "unknown_session");
  ht_error(&T, "POST", "/session/ghost/evict", "{\"budget\":3}", 404,
           "unknown_session");
  /* Evict never creates. */
  ht_error(&T, "GET", "/session/ghost", NULL, 404, "unknown_session");
}
END_TEST

START_TEST(session_id_rules) {
  char id128[129], id129[130], path[300];
  static const char *const bad[] = {
      "a%2Fb", "a%2fb", "%41", "a%20b", "a+b", "a@b", "a:b", "a,b", "a!b",
      "a*b",   "a'b",   "a(b", "a$b",   "a=b", "a;b", "%2F", "a%2Eb"};
  static const char *const good[] = {"Az09._~-", "a.b", "~", "-", "_x_",
                                     "0"};
  size_t i;
  json_t *v;

  memset(id128, 'k', 128);
  id128[128] = '\0';
  memset(id129, 'k', 129);
  id129[129] = '\0';
  snprintf(path, sizeof path, "/session/%s", id128);
  ht_do(&T, "PUT", path, NULL, 201);
  v = ht_view(&T, id128);
  ck_assert_str_eq(json_string_value(json_object_get(v, "id")), id128);
  json_decref(v);
  snprintf(path, sizeof path, "/session/%s", id129);
  ht_error(&T, "PUT", path, NULL, 400, "invalid_session_id");
  ht_error(&T, "GET", path, NULL, 400, "invalid_session_id");
  ht_error(&T, "DELETE", path, NULL, 400, "invalid_session_id");
  snprintf(path, sizeof path, "/session/%s/step", id129);
  ht_error(&T, "POST", path, pos_body(1), 400, "invalid_session_id");
  snprintf(path, sizeof path, "/session/%s/evict", id129);
  ht_error(&T, "POST", path, NULL, 400, "invalid_session_id");
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(path, sizeof path, "/session/%s", bad[i]);
    ht_error(&T, "PUT", path, NULL, 400, "invalid_session_id");
    ht_error(&T, "GET", path, NULL, 400, "invalid_session_id");
    snprintf(path, sizeof path, "/session/%s/step", bad[i]);
    ht_error(&T, "POST", path, pos_body(1), 400, "invalid_session_id");
    snprintf(path, sizeof path, "/session/%s/evict", bad[i]);
    ht_error(&T, "POST", path, NULL, 400, "invalid_session_id");
  }
  /* An empty id matches no route: the contract's paths cannot hold one. */
  ht_error(&T, "PUT", "/session/", NULL, 404, "not_found");
  ht_error(&T, "POST", "/session//step", pos_body(1), 404, "not_found");
  ht_error(&T, "POST", "/session//evict", NULL, 404, "not_found");
  for (i = 0; i < sizeof good / sizeof good[0]; i++) {
    snprintf(path, sizeof path, "/session/%s", good[i]);
    ht_do(&T, "PUT", path, NULL, 201);
  }
  /* "a%2Fb" is not an escaped "a/b" that names session "a": nothing of
   * "a" exists. */
  ht_error(&T, "GET", "/session/a", NULL, 404, "unknown_session");
}
END_TEST

Suite *api_suite(void) {
  Suite *s = suite_create("api");
  TCase *tc = tcase_create("defaults");

  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, up, down);
  tcase_add_test(tc, healthz_get_and_head);
  tcase_add_test(tc, unknown_paths_are_not_found);
  tcase_add_test(tc, wrong_method_is_405_with_allow);
  tcase_add_test(tc, put_creates_201_then_200_then_409);
  tcase_add_test(tc, get_and_head_session);
  tcase_add_test(tc, delete_is_204_then_404);
  tcase_add_test(tc, missing_session_is_unknown_session);
  tcase_add_test(tc, session_id_rules);
  api_add_body_tests(tc);
  suite_add_tcase(s, tc);
  return s;
}
