/* The API's reading of request bodies against a daemon on its defaults:
 * every validation error and its exact body, and that a refused request
 * changes nothing. Part of test_api.c's "defaults" case. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_api.h"

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

/* Adds this file's tests to the "defaults" case, in this order. */
void api_add_body_tests(TCase *tc) {
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
}
