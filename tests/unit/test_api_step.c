/* API unit tests of a session's step (single, retried, refused), its evict,
 * and the batch route POST /step; part of build/test_api. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_harness.h"

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

void api_step_tests(TCase *ops) {
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
}
