/* The API against a daemon on its defaults: every route and method, the
 * session life cycle, every validation error and its exact body, and that
 * a refused request changes nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* Each test gets a fresh daemon on its defaults. */
static ht_t T;

static void up(void) {
  ht_up(&T, NULL, NULL);
}

static void down(void) {
  ht_down(&T);
}

/* A step request for a single position, as text. */
static const char *pos_body(long long p) {
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

#define VIEW0(id, b, s)                                                     \
  "{\"id\":\"" id "\",\"budget\":" #b ",\"sinks\":" #s ",\"size\":1,"      \
  "\"newest\":0,\"kept\":[0],\"slots\":[0]}"

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

/* ---- bodies ------------------------------------------------------------- */

/* A step body whose "attention" nests arrays so that the whole document is
 * `depth` levels deep (the object is the first level). */
static char *nested_body(int depth) {
  size_t n = 64 + 2 * (size_t)depth;
  char *b = malloc(n), *p = b;
  int i;

  ck_assert_ptr_nonnull(b);
  p += sprintf(p, "{\"pos\":1,\"attention\":");
  for (i = 1; i < depth; i++)
    *p++ = '[';
  for (i = 1; i < depth; i++)
    *p++ = ']';
  strcpy(p, "}");
  return b;
}

START_TEST(invalid_json_variants) {
  static const char *const step_bodies[] = {
      "",           "{",          "{\"pos\":1,}",  "nul",    "{pos:1}",
      "{\"pos\":1} x", "{\"pos\":1}{}", "[1]",     "[]",     "5",
      "\"x\"",      "null",       "true",          "{\"pos\":1,\"pos\":2}",
      "{\"pos\":1,\"attention\":{\"a\":1,\"a\":2}}", "{'pos':1}"};
  static const char *const optional_bodies[] = {
      "[]", "x", "{\"budget\":4,\"budget\":4}", "7", "\"{}\""};
  size_t i;

  ht_do(&T, "PUT", "/session/a", NULL, 201);
  for (i = 0; i < sizeof step_bodies / sizeof step_bodies[0]; i++) {
    ht_error(&T, "POST", "/session/a/step", step_bodies[i], 400,
             "invalid_json");
    ht_error(&T, "POST", "/session/new/step", step_bodies[i], 400,
             "invalid_json");
  }
  for (i = 0; i < sizeof optional_bodies / sizeof optional_bodies[0]; i++) {
    ht_error(&T, "PUT", "/session/a", optional_bodies[i], 400, "invalid_json");
    ht_error(&T, "PUT", "/session/new", optional_bodies[i], 400,
             "invalid_json");
    ht_error(&T, "POST", "/session/a/evict", optional_bodies[i], 400,
             "invalid_json");
  }
  ht_error(&T, "POST", "/step", "", 400, "invalid_json");
  ht_error(&T, "POST", "/step", "[]", 400, "invalid_json");
  ht_error(&T, "POST", "/step", "{\"steps\":[],\"steps\":[]}", 400,
           "invalid_json");
  ht_error(&T, "POST", "/step", "{\"steps\":[{\"session\":\"a\",\"pos\":1,"
                                "\"pos\":2}]}", 400, "invalid_json");
  ht_error(&T, "GET", "/session/new", NULL, 404, "unknown_session");
  ht_expect(&T, "GET", "/session/a", NULL, 200, VIEW0("a", 512, 0));
}
END_TEST

START_TEST(json_nesting_limit_is_32) {
  char *ok = nested_body(32), *deep = nested_body(33), *deeper = nested_body(500);
  char batch[1200];
  json_t *j;
  const char *msg;

  ht_expect(&T, "POST", "/session/a/step", ok, 200,
            "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":1}");
  j = ht_call(&T, "POST", "/session/b/step", deep, 400);
  ht_check_error(j, 400, "invalid_json", 0);
  msg = json_string_value(json_object_get(json_object_get(j, "error"),
                                          "message"));
  ck_assert_msg(strstr(msg, "deep") != NULL, "message: %s", msg);
  json_decref(j);
  ht_error(&T, "POST", "/session/b/step", deeper, 400, "invalid_json");
  ht_error(&T, "GET", "/session/b", NULL, 404, "unknown_session");
  /* In a batch the object and the steps array are two levels already. */
  snprintf(batch, sizeof batch, "{\"steps\":[%s]}", deep);
  ht_error(&T, "POST", "/step", batch, 400, "invalid_json");
  ht_error(&T, "GET", "/session/b", NULL, 404, "unknown_session");
  /* Brackets inside strings are not nesting. */
  ht_do(&T, "POST", "/session/a/step",
          "{\"pos\":2,\"attention\":\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
          "[[[[\\\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"}",
          200);
  free(ok);
  free(deep);
  free(deeper);
}
END_TEST

START_TEST(invalid_field_variants) {
  static const char *const put_bodies[] = {
      "{\"foo\":1}",        "{\"budget\":\"512\"}", "{\"budget\":512.5}",
      "{\"budget\":true}",  "{\"budget\":null}",    "{\"budget\":[8]}",
      "{\"sinks\":\"1\"}",  "{\"sinks\":1.5}",      "{\"budget\":8,\"x\":0}",
      "{\"pos\":1}"};
  static const char *const step_bodies[] = {
      "{}",
      "{\"attention\":[1]}",
      "{\"pos\":1,\"positions\":[2]}",
      "{\"positions\":5}",
      "{\"positions\":\"1,2\"}",
      "{\"positions\":{\"0\":1}}",
      "{\"positions\":null}",
      "{\"pos\":1,\"foo\":2}",
      "{\"pos\":1,\"session\":\"a\"}",
      "{\"pos\":1,\"budget\":\"5\"}",
      "{\"pos\":1,\"budget\":5.5}",
      "{\"pos\":1,\"sinks\":\"0\"}",
      "{\"pos\":1,\"sinks\":false}"};
  static const char *const evict_bodies[] = {
      "{\"foo\":1}", "{\"budget\":\"3\"}", "{\"budget\":3.5}",
      "{\"budget\":null}", "{\"budget\":3,\"sinks\":1}"};
  static const char *const batch_bodies[] = {
      "{}", "{\"steps\":5}", "{\"steps\":{}}", "{\"steps\":null}",
      "{\"steps\":\"[]\"}", "{\"steps\":[],\"foo\":1}"};
  static const char *const batch_items[] = {
      "5", "\"x\"", "null", "[1]", "{\"pos\":1}", "{\"session\":5,\"pos\":1}",
      "{\"session\":null,\"pos\":1}", "{\"session\":\"n\"}",
      "{\"session\":\"n\",\"pos\":1,\"foo\":1}",
      "{\"session\":\"n\",\"pos\":1,\"positions\":[2]}",
      "{\"session\":\"n\",\"positions\":3}",
      "{\"session\":\"n\",\"pos\":1,\"budget\":\"4\"}"};
  char body[300];
  size_t i;
  json_t *j;

  ht_do(&T, "PUT", "/session/a", NULL, 201);
  for (i = 0; i < sizeof put_bodies / sizeof put_bodies[0]; i++) {
    ht_error(&T, "PUT", "/session/a", put_bodies[i], 400, "invalid_field");
    ht_error(&T, "PUT", "/session/n", put_bodies[i], 400, "invalid_field");
  }
  for (i = 0; i < sizeof step_bodies / sizeof step_bodies[0]; i++) {
    ht_error(&T, "POST", "/session/a/step", step_bodies[i], 400,
             "invalid_field");
    ht_error(&T, "POST", "/session/n/step", step_bodies[i], 400,
             "invalid_field");
  }
  for (i = 0; i < sizeof evict_bodies / sizeof evict_bodies[0]; i++)
    ht_error(&T, "POST", "/session/a/evict", evict_bodies[i], 400,
             "invalid_field");
  for (i = 0; i < sizeof batch_bodies / sizeof batch_bodies[0]; i++)
    ht_error(&T, "POST", "/step", batch_bodies[i], 400, "invalid_field");
  for (i = 0; i < sizeof batch_items / sizeof batch_items[0]; i++) {
    /* A bad item is answered in its place; the items around it apply. */
    snprintf(body, sizeof body,
             "{\"steps\":[{\"session\":\"a\",\"pos\":%zu},%s,"
             "{\"session\":\"a\",\"pos\":%zu}]}",
             2 * i + 1, batch_items[i], 2 * i + 2);
    j = ht_call(&T, "POST", "/step", body, 200);
    ck_assert_uint_eq(json_array_size(json_object_get(j, "results")), 3);
    ht_check_error(json_array_get(json_object_get(j, "results"), 1), 400,
                   "invalid_field", 1);
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_array_get(json_object_get(j, "results"), 2),
                         "newest")),
                     (json_int_t)(2 * i + 2));
    json_decref(j);
  }
  ht_error(&T, "GET", "/session/n", NULL, 404, "unknown_session");
}
END_TEST

START_TEST(invalid_budget_variants) {
  static const char *const put_bodies[] = {
      "{\"budget\":0}", "{\"budget\":-1}", "{\"budget\":1048577}",
      "{\"budget\":4294967295}", "{\"budget\":4294967296}",
      "{\"budget\":99999999999999999}"};
  static const char *const evict_bodies[] = {
      "{\"budget\":0}", "{\"budget\":-5}", "{\"budget\":4}", "{\"budget\":3}",
      "{\"budget\":4294967295}", "{\"budget\":4294967296}"};
  size_t i;
  json_t *v0, *v1;

  for (i = 0; i < sizeof put_bodies / sizeof put_bodies[0]; i++)
    ht_error(&T, "PUT", "/session/n", put_bodies[i], 400, "invalid_budget");
  ht_error(&T, "POST", "/session/n/step", "{\"pos\":1,\"budget\":0}", 400,
           "invalid_budget");
  ht_error(&T, "POST", "/session/n/step", "{\"pos\":1,\"budget\":1048577}",
           400, "invalid_budget");
  ht_error(&T, "GET", "/session/n", NULL, 404, "unknown_session");
  /* The largest budget is --max-budget (default 1048576). */
  ht_expect(&T, "PUT", "/session/big", "{\"budget\":1048576}", 201,
            VIEW0("big", 1048576, 0));
  /* Budgets of steps are validated even when the session exists. */
  ht_do(&T, "PUT", "/session/s", "{\"budget\":8,\"sinks\":4}", 201);
  ht_do(&T, "POST", "/session/s/step", "{\"positions\":[1,2,3,4,5,6,7]}",
          200);
  v0 = ht_view(&T, "s");
  ht_error(&T, "POST", "/session/s/step", "{\"pos\":9,\"budget\":0}", 400,
           "invalid_budget");
  /* Evict: budget in 1..4294967294 and above the session's 4 sinks. */
  for (i = 0; i < sizeof evict_bodies / sizeof evict_bodies[0]; i++)
    ht_error(&T, "POST", "/session/s/evict", evict_bodies[i], 400,
             "invalid_budget");
  v1 = ht_view(&T, "s");
  ck_assert_msg(json_equal(v0, v1), "%s became %s", ht_dump(v0, 0),
                ht_dump(v1, 1));
  json_decref(v1);
  json_decref(v0);
  ht_expect(&T, "POST", "/session/s/evict", "{\"budget\":4294967294}", 200,
            "{\"victims\":[],\"size\":8}");
  /* Above --max-budget is fine for an eviction. */
  ht_expect(&T, "POST", "/session/s/evict", "{\"budget\":2000000}", 200,
            "{\"victims\":[],\"size\":8}");
  ht_expect(&T, "POST", "/session/s/evict", "{\"budget\":5}", 200,
            "{\"victims\":[4,5,6],\"size\":5}");
}
END_TEST

START_TEST(invalid_sinks_variants) {
  static const char *const put_bodies[] = {
      "{\"sinks\":-1}", "{\"budget\":4,\"sinks\":4}",
      "{\"budget\":4,\"sinks\":5}", "{\"sinks\":512}",
      "{\"sinks\":4294967296}", "{\"budget\":1,\"sinks\":1}"};
  static const char *const step_bodies[] = {
      "{\"pos\":1,\"sinks\":-1}", "{\"pos\":1,\"budget\":4,\"sinks\":4}",
      "{\"pos\":1,\"sinks\":512}", "{\"pos\":1,\"sinks\":4294967296}"};
  size_t i;

  for (i = 0; i < sizeof put_bodies / sizeof put_bodies[0]; i++)
    ht_error(&T, "PUT", "/session/n", put_bodies[i], 400, "invalid_sinks");
  ht_do(&T, "PUT", "/session/a", "{\"budget\":4,\"sinks\":3}", 201);
  for (i = 0; i < sizeof step_bodies / sizeof step_bodies[0]; i++) {
    ht_error(&T, "POST", "/session/n/step", step_bodies[i], 400,
             "invalid_sinks");
    ht_error(&T, "POST", "/session/a/step", step_bodies[i], 400,
             "invalid_sinks");
  }
  ht_error(&T, "GET", "/session/n", NULL, 404, "unknown_session");
  ht_expect(&T, "GET", "/session/a", NULL, 200, VIEW0("a", 4, 3));
}
END_TEST

START_TEST(invalid_position_variants) {
  static const char *const bodies[] = {
      "{\"pos\":4294967296}",      "{\"pos\":-1}",
      "{\"pos\":1.5}",             "{\"pos\":\"5\"}",
      "{\"pos\":null}",            "{\"pos\":true}",
      "{\"pos\":[1]}",             "{\"pos\":1e3}",
      "{\"positions\":[]}",        "{\"positions\":[3,3]}",
      "{\"positions\":[5,4]}",     "{\"positions\":[7,8,8]}",
      "{\"positions\":[1,\"2\"]}", "{\"positions\":[1,2.0]}",
      "{\"positions\":[4294967296]}", "{\"positions\":[-1]}",
      "{\"positions\":[1,2,4294967296]}", "{\"positions\":[null]}",
      "{\"positions\":[[1]]}"};
  size_t i;
  json_t *v0, *v1;

  ht_do(&T, "PUT", "/session/a", "{\"budget\":3}", 201);
  ht_do(&T, "POST", "/session/a/step", "{\"positions\":[1,2]}", 200);
  v0 = ht_view(&T, "a");
  for (i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
    ht_error(&T, "POST", "/session/a/step", bodies[i], 400,
             "invalid_position");
    ht_error(&T, "POST", "/session/n/step", bodies[i], 400,
             "invalid_position");
  }
  v1 = ht_view(&T, "a");
  ck_assert_msg(json_equal(v0, v1), "%s became %s", ht_dump(v0, 0),
                ht_dump(v1, 1));
  json_decref(v0);
  json_decref(v1);
  ht_error(&T, "GET", "/session/n", NULL, 404, "unknown_session");
  ht_expect(&T, "POST", "/session/a/step", "{\"pos\":4294967295}", 200,
            "{\"victims\":[0],\"slots\":[3],\"size\":3,"
            "\"newest\":4294967295}");
}
END_TEST

/* Valid JSON whose integer does not fit 64 bits is still a position out
 * of range, not a JSON syntax error. */
/* An integer beyond 64 bits is still an integer, just out of range. */
START_TEST(position_beyond_int64_is_invalid_position) {
  ht_error(&T, "POST", "/session/a/step", "{\"pos\":18446744073709551616}",
           400, "invalid_position");
  ht_error(&T, "POST", "/session/a/step",
           "{\"positions\":[1,99999999999999999999999]}", 400,
           "invalid_position");
  ht_error(&T, "GET", "/session/a", NULL, 404, "unknown_session");
}
END_TEST

START_TEST(stale_position_names_newest) {
  json_t *j;

  ck_assert_int_eq(ht_error(&T, "POST", "/session/a/step", pos_body(0), 409,
                            "stale_position"),
                   0);
  /* Position 0 on a new session: the message says what to do. */
  j = ht_call(&T, "POST", "/session/a/step", "{\"positions\":[0,1,2]}", 409);
  ht_check_error(j, 409, "stale_position", 0);
  ck_assert_msg(strstr(json_string_value(json_object_get(
                           json_object_get(j, "error"), "message")),
                       "start") != NULL &&
                    strstr(json_string_value(json_object_get(
                               json_object_get(j, "error"), "message")),
                           "position 1") != NULL,
                "%s", ht_dump(j, 0));
  json_decref(j);
  /* Refused before it was created. */
  ht_error(&T, "GET", "/session/a", NULL, 404, "unknown_session");
  ht_do(&T, "POST", "/session/a/step", pos_body(5), 200);
  ck_assert_int_eq(ht_error(&T, "POST", "/session/a/step", pos_body(3), 409,
                            "stale_position"),
                   5);
  ck_assert_int_eq(ht_error(&T, "POST", "/session/a/step",
                            "{\"positions\":[4,6]}", 409, "stale_position"),
                   5);
  ck_assert_int_eq(ht_error(&T, "POST", "/session/a/step",
                            "{\"positions\":[5,6]}", 409, "stale_position"),
                   5);
  ht_do(&T, "PUT", "/session/b", NULL, 201);
  ck_assert_int_eq(ht_error(&T, "POST", "/session/b/step", pos_body(0), 409,
                            "stale_position"),
                   0);
  ht_expect(&T, "GET", "/session/b", NULL, 200, VIEW0("b", 512, 0));
}
END_TEST

START_TEST(step_creates_session) {
  ht_expect(&T, "POST", "/session/n/step", pos_body(3), 200,
            "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":3}");
  ht_expect(&T, "GET", "/session/n", NULL, 200,
            "{\"id\":\"n\",\"budget\":512,\"sinks\":0,\"size\":2,"
            "\"newest\":3,\"kept\":[0,3],\"slots\":[0,1]}");
  ht_expect(&T, "POST", "/session/m/step",
            "{\"positions\":[1,2,3,4],\"budget\":3,\"sinks\":1}", 200,
            "{\"victims\":[1,2],\"slots\":[1,2,3,1],\"size\":3,\"newest\":4}");
  ht_expect(&T, "GET", "/session/m", NULL, 200,
            "{\"id\":\"m\",\"budget\":3,\"sinks\":1,\"size\":3,\"newest\":4,"
            "\"kept\":[0,3,4],\"slots\":[0,3,1]}");
  /* Budget and sinks of a step to an existing session must be its own
   * (other values are refused, as a PUT's are); repeating them is fine. */
  ht_error(&T, "POST", "/session/m/step",
           "{\"pos\":5,\"budget\":7,\"sinks\":0}", 409, "session_exists");
  ht_expect(&T, "POST", "/session/m/step",
            "{\"pos\":5,\"budget\":3,\"sinks\":1,\"attention\":"
            "{\"x\":[1,2.5,{\"y\":null}],\"z\":\"w\"}}",
            200, "{\"victims\":[3],\"slots\":[2],\"size\":3,\"newest\":5}");
  ht_expect(&T, "GET", "/session/m", NULL, 200,
            "{\"id\":\"m\",\"budget\":3,\"sinks\":1,\"size\":3,\"newest\":5,"
            "\"kept\":[0,4,5],\"slots\":[0,1,2]}");
  /* A budget alone creates with the default sinks; sinks alone with the
   * default budget. */
  ht_do(&T, "POST", "/session/o/step", "{\"pos\":1,\"budget\":2}", 200);
  ht_expect(&T, "GET", "/session/o", NULL, 200,
            "{\"id\":\"o\",\"budget\":2,\"sinks\":0,\"size\":2,\"newest\":1,"
            "\"kept\":[0,1],\"slots\":[0,1]}");
  ht_do(&T, "POST", "/session/p/step", "{\"pos\":1,\"sinks\":4}", 200);
  ht_expect(&T, "GET", "/session/p", NULL, 200,
            "{\"id\":\"p\",\"budget\":512,\"sinks\":4,\"size\":2,"
            "\"newest\":1,\"kept\":[0,1],\"slots\":[0,1]}");
}
END_TEST

START_TEST(evict_defaults_and_empty_bodies) {
  hc_response_t r;

  ht_do(&T, "PUT", "/session/e", "{\"budget\":8}", 201);
  ht_do(&T, "POST", "/session/e/step",
          "{\"positions\":[1,2,3,4,5,6,7,8,9,10]}", 200);
  ht_expect(&T, "POST", "/session/e/evict", NULL, 200,
            "{\"victims\":[],\"size\":8}");
  ht_expect(&T, "POST", "/session/e/evict", "", 200,
            "{\"victims\":[],\"size\":8}");
  ht_expect(&T, "POST", "/session/e/evict", "{}", 200,
            "{\"victims\":[],\"size\":8}");
  ht_expect(&T, "POST", "/session/e/evict", "{\"budget\":6}", 200,
            "{\"victims\":[3,4],\"size\":6}");
  ht_expect(&T, "POST", "/session/e/evict", "{\"budget\":1}", 200,
            "{\"victims\":[5,6,7,8,9],\"size\":1}");
  ht_expect(&T, "GET", "/session/e", NULL, 200,
            "{\"id\":\"e\",\"budget\":8,\"sinks\":0,\"size\":1,"
            "\"newest\":10,\"kept\":[10],\"slots\":[1]}");
  /* An empty chunked body is empty too. */
  ck_assert_int_eq(hc_send(&T.c, "POST", "/session/e/evict", NULL, "", 0, 4),
                   0);
  ck_assert_int_eq(hc_read_response(&T.c, 0, &r), 0);
  ck_assert_int_eq(r.status, 200);
  ck_assert_str_eq(r.body, "{\"victims\":[],\"size\":1}");
  hc_response_free(&r);
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
  tcase_add_test(tc, invalid_json_variants);
  tcase_add_test(tc, json_nesting_limit_is_32);
  tcase_add_test(tc, invalid_field_variants);
  tcase_add_test(tc, invalid_budget_variants);
  tcase_add_test(tc, invalid_sinks_variants);
  tcase_add_test(tc, invalid_position_variants);
  tcase_add_test(tc, position_beyond_int64_is_invalid_position);
  tcase_add_test(tc, stale_position_names_newest);
  tcase_add_test(tc, step_creates_session);
  tcase_add_test(tc, evict_defaults_and_empty_bodies);
  suite_add_tcase(s, tc);
  return s;
}
