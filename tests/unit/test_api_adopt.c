/* API unit tests of POST /session/{id}/adopt (created, resent, refused,
 * replaced; every rule of a state) and of the precondition expect_newest
 * on every change; part of build/test_api. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_harness.h"

/* The body of an adoption of session `from`'s view (kept, newest, slots,
 * its configuration), with `extra` fields appended ("" for none). */
static char *adoption_of(const char *from, const char *extra) {
  char path[300], *text;
  json_t *v, *a;

  snprintf(path, sizeof path, "/session/%s", from);
  ck_assert_int_eq(req(GET, path, NULL), 200);
  v = body;
  a = json_object();
  json_object_set(a, "budget", json_object_get(v, "budget"));
  json_object_set(a, "sinks", json_object_get(v, "sinks"));
  if (json_object_get(v, "lookahead") != NULL)
    json_object_set(a, "lookahead", json_object_get(v, "lookahead"));
  if (json_object_get(v, "page_size") != NULL) {
    json_object_set(a, "page_size", json_object_get(v, "page_size"));
    json_object_set(a, "pages", json_object_get(v, "pages"));
  }
  json_object_set(a, "kept", json_object_get(v, "kept"));
  json_object_set(a, "newest", json_object_get(v, "newest"));
  json_object_set(a, "slots", json_object_get(v, "slots"));
  text = json_dumps(a, JSON_COMPACT);
  json_decref(a);
  if (extra[0] != '\0') {
    size_t n = strlen(text);
    char *t = malloc(n + strlen(extra) + 2);
    ck_assert_ptr_nonnull(t);
    memcpy(t, text, n - 1);
    sprintf(t + n - 1, ",%s}", extra);
    free(text);
    text = t;
  }
  return text;
}

/* A view without its id, as compact text: two sessions' states compared. */
static char *state_of(const char *id) {
  char path[300];

  snprintf(path, sizeof path, "/session/%s", id);
  ck_assert_int_eq(req(GET, path, NULL), 200);
  json_object_del(body, "id");
  return json_dumps(body, JSON_SORT_KEYS | JSON_COMPACT);
}

START_TEST(adopt_creates_resends_refuses_and_replaces) {
  static const char *const a =
      "{\"budget\":4,\"sinks\":1,\"kept\":[0,5,9,10],\"newest\":12}";
  char *before;

  start();
  /* Created in the canonical layout; --no-autocreate would not matter. */
  expect_ok(POST, "/session/x/adopt", a, 201,
            "{\"id\":\"x\",\"budget\":4,\"sinks\":1,\"size\":4,\"newest\":12,"
            "\"kept\":[0,5,9,10],\"slots\":[0,1,2,3]}");
  ck_assert_int_eq(reply.route, EVD_R_ADOPT);
  /* Resent, with or without the slots it has: 200, nothing changes. */
  expect_ok(POST, "/session/x/adopt", a, 200, NULL);
  expect_ok(POST, "/session/x/adopt",
            "{\"budget\":4,\"sinks\":1,\"kept\":[0,5,9,10],\"newest\":12,"
            "\"slots\":[0,1,2,3],\"replace\":false}",
            200, NULL);
  /* Another state, another layout or another configuration: 409. */
  before = view_of("x");
  expect_error(POST, "/session/x/adopt",
               "{\"budget\":4,\"sinks\":1,\"kept\":[0,5,9,11],"
               "\"newest\":12}",
               409, "session_exists");
  expect_error(POST, "/session/x/adopt",
               "{\"budget\":4,\"sinks\":1,\"kept\":[0,5,9,10],\"newest\":12,"
               "\"slots\":[0,2,3,4]}",
               409, "session_exists");
  expect_error(POST, "/session/x/adopt",
               "{\"budget\":5,\"sinks\":1,\"kept\":[0,5,9,10],"
               "\"newest\":12}",
               409, "session_exists");
  expect_view("x", before);
  free(before);
  /* The session steps on from the adopted state. */
  expect_ok(POST, "/session/x/step", "{\"pos\":13}", 200,
            "{\"victims\":[5],\"slots\":[4],\"size\":4,\"newest\":13}");
  expect_ok(POST, "/session/x/step", "{\"pos\":13}", 200, NULL);
  ck_assert(json_is_true(json_object_get(body, "replayed")));
  /* Replaced: 200 with the new view, and the old replay record gone (the
   * resent step is a stale position now, not a replay). */
  expect_ok(POST, "/session/x/adopt",
            "{\"budget\":6,\"kept\":[2,3,4,20],\"newest\":20,"
            "\"slots\":[2,3,4,5],\"replace\":true,\"lookahead\":1}",
            200,
            "{\"id\":\"x\",\"budget\":6,\"sinks\":0,\"size\":4,"
            "\"newest\":20,\"kept\":[2,3,4,20],\"slots\":[2,3,4,5]}");
  expect_error(POST, "/session/x/step", "{\"pos\":13}", 409,
               "stale_position");
  stop();
}
END_TEST

/* A session built by steps (gaps, sinks, lookahead, pages), adopted under
 * another id from its view, is the same state and answers alike after. */
START_TEST(adopted_views_are_the_same_sessions) {
  static const char *const made[] = {
      "{\"budget\":5,\"sinks\":2,\"lookahead\":3}",
      "{\"budget\":3,\"lookahead\":2}",
      "{\"budget\":6,\"sinks\":1,\"page_size\":4,\"lookahead\":2}"};
  static const char *const steps[] = {
      "{\"positions\":[1,2,3,7,8,9,20]}", "{\"pos\":33}",
      "{\"positions\":[34,35],\"tentative\":true}", "{\"commit\":34}",
      "{\"positions\":[40,41,42,43,44,45]}"};
  char path[64], *body_text, *want, *got, *ans;
  size_t m, k;

  start();
  for (m = 0; m < 3; m++) {
    snprintf(path, sizeof path, "/session/o%zu", m);
    expect_ok(PUT, path, made[m], 201, NULL);
    snprintf(path, sizeof path, "/session/o%zu/step", m);
    for (k = 0; k < 5; k++) {
      char id[16], cpath[64];
      expect_ok(POST, path, steps[k], 200, NULL);
      if (k == 2)
        continue; /* drafts pending: not a state to adopt */
      snprintf(id, sizeof id, "o%zu", m);
      body_text = adoption_of(id, "\"replace\":true");
      snprintf(cpath, sizeof cpath, "/session/c%zu/adopt", m);
      ck_assert_int_ge(req(POST, cpath, body_text), 200);
      ck_assert_int_le(reply.status, 201);
      free(body_text);
      snprintf(cpath, sizeof cpath, "c%zu", m);
      want = state_of(id);
      got = state_of(cpath);
      ck_assert_str_eq(got, want);
      free(want);
      free(got);
    }
    /* The next request answers the same in both. */
    expect_ok(POST, path, "{\"positions\":[50,51,52]}", 200, NULL);
    ans = json_dumps(body, JSON_SORT_KEYS | JSON_COMPACT);
    snprintf(path, sizeof path, "/session/c%zu/step", m);
    expect_ok(POST, path, "{\"positions\":[50,51,52]}", 200, ans);
    free(ans);
  }
  stop();
}
END_TEST

START_TEST(adopt_refuses_every_bad_state_creating_nothing) {
  static const struct {
    const char *body, *code, *says;
  } bad[] = {
      {"{\"kept\":[0,5,5],\"newest\":5}", "invalid_state", "repeats"},
      {"{\"kept\":[0,5,3],\"newest\":5}", "invalid_state", "below kept[1]"},
      {"{\"budget\":2,\"kept\":[0,1,2],\"newest\":2}", "invalid_state",
       "budget of 2"},
      {"{\"sinks\":1,\"kept\":[1,2],\"newest\":2}", "invalid_state",
       "Position 0"},
      {"{\"kept\":[0,5],\"newest\":4}", "invalid_state", "below kept[1]"},
      {"{\"kept\":[0,5],\"newest\":4294967295}", "invalid_state",
       "4294967296"},
      {"{\"kept\":[],\"newest\":4}", "invalid_state", "at least one"},
      {"{\"kept\":[0,5],\"newest\":5,\"slots\":[0]}", "invalid_state",
       "\"slots\" has 1"},
      {"{\"kept\":[0,5],\"newest\":5,\"slots\":[0,9]}", "invalid_state",
       "not a slot"},
      {"{\"kept\":[0,5],\"newest\":5,\"slots\":[0,-1]}", "invalid_state",
       "out of range"},
      {"{\"sinks\":2,\"kept\":[0,5,6],\"newest\":6,\"slots\":[1,0,2]}",
       "invalid_state", "pinned"},
      {"{\"sinks\":1,\"kept\":[0,5,6],\"newest\":6,\"slots\":[0,0,1]}",
       "invalid_state", "pinned slot"},
      {"{\"kept\":[0,5,6],\"newest\":6,\"slots\":[0,1,3]}", "invalid_state",
       "consecutive"},
      {"{\"kept\":[0,1,2],\"newest\":2,\"slots\":[3,4,5]}", "invalid_state",
       "further round the ring"},
      {"{\"page_size\":4,\"kept\":[0,5],\"newest\":5,\"pages\":[0,2]}",
       "invalid_state", "pages of the positions"},
      {"{\"page_size\":4,\"kept\":[0,5],\"newest\":5,\"pages\":[0]}",
       "invalid_state", "pages of the positions"},
      {"{\"kept\":[0,5],\"newest\":5,\"pages\":[0,1]}", "invalid_state",
       "page_size 0"},
      {"{\"kept\":[0,5],\"newest\":5,\"pages\":[0.5]}", "invalid_field",
       "integer"},
      {"{\"newest\":5}", "invalid_field", "\"kept\" is required"},
      {"{\"kept\":[0]}", "invalid_field", "\"newest\" is required"},
      {"{\"kept\":\"0\",\"newest\":5}", "invalid_field", "array"},
      {"{\"kept\":[0,\"5\"],\"newest\":5}", "invalid_field", "kept[1]"},
      {"{\"kept\":[0,4294967296],\"newest\":5}", "invalid_position",
       "kept[1]"},
      {"{\"kept\":[0],\"newest\":-1}", "invalid_position", "newest"},
      {"{\"kept\":[0],\"newest\":0,\"replace\":1}", "invalid_field",
       "replace"},
      {"{\"kept\":[0],\"newest\":0,\"tentative\":[]}", "invalid_field",
       "Unknown field"},
      {"{\"kept\":[0],\"newest\":0,\"budget\":0}", "invalid_budget", ""},
      {"{\"kept\":[0],\"newest\":0,\"budget\":4,\"sinks\":4}",
       "invalid_sinks", ""},
      {"{\"kept\":[0],\"newest\":0,\"lookahead\":0}", "invalid_lookahead",
       ""},
      {"{\"kept\":[0],\"newest\":0,\"page_size\":65537}",
       "invalid_page_size", ""},
      {"[1]", "invalid_json", ""},
      {"", "invalid_json", ""},
      {"{\"kept\":[0],", "invalid_json", ""},
  };
  size_t i;

  start();
  expect_ok(PUT, "/session/have", "{\"budget\":4}", 201, NULL);
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *before = view_of("have");
    expect_error(POST, "/session/new/adopt", bad[i].body, 400, bad[i].code);
    ck_assert_msg(strstr(error_message(), bad[i].says) != NULL,
                  "%s: the message \"%s\" does not say \"%s\"", bad[i].body,
                  error_message(), bad[i].says);
    /* The same body to an existing session: refused, unchanged. */
    expect_error(POST, "/session/have/adopt", bad[i].body, 400,
                 bad[i].code);
    expect_view("have", before);
    free(before);
  }
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 1);
  expect_error(POST, "/session/bad%20id/adopt", "{\"kept\":[0],\"newest\":0}",
               400, "invalid_session_id");
  expect_error(GET, "/session/x/adopt", NULL, 405, "method_not_allowed");
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 1);
  stop();
}
END_TEST

START_TEST(adopt_counts_in_metrics_and_the_session_limit) {
  evd_config_t cfg;

  default_cfg(&cfg);
  cfg.max_sessions = 1;
  cfg.autocreate = 0;
  start_with(&cfg);
  expect_ok(POST, "/session/a/adopt", "{\"kept\":[0,3],\"newest\":3}", 201,
            NULL);
  expect_error(POST, "/session/b/adopt", "{\"kept\":[0,3],\"newest\":3}",
               503, "session_limit");
  /* A replacement does not count against the limit. */
  expect_ok(POST, "/session/a/adopt",
            "{\"kept\":[0,4],\"newest\":4,\"replace\":true}", 200, NULL);
  expect_ok(POST, "/session/a/adopt", "{\"kept\":[0,4],\"newest\":4}", 200,
            NULL);
  expect_error(POST, "/session/a/adopt", "{\"kept\":[0,5],\"newest\":5}", 409,
               "session_exists");
  expect_error(POST, "/session/a/step",
               "{\"pos\":9,\"expect_newest\":3}", 409, "diverged");
  ck_assert_int_eq(req(GET, "/metrics", NULL), 200);
  {
    char *m = strndup(out.data, out.len);
    ck_assert_ptr_nonnull(strstr(m, "evictd_adoptions_created_total 1\n"));
    ck_assert_ptr_nonnull(strstr(m, "evictd_adoptions_replaced_total 1\n"));
    ck_assert_ptr_nonnull(strstr(m, "evictd_adoptions_resent_total 1\n"));
    ck_assert_ptr_nonnull(strstr(m, "evictd_adoptions_refused_total 1\n"));
    ck_assert_ptr_nonnull(strstr(m, "evictd_divergences_total 1\n"));
    free(m);
  }
  stop();
}
END_TEST

/* ---- expect_newest ------------------------------------------------------- */

/* Checks that the last answer is 409 diverged naming newest, with the
 * view of session id. */
static void expect_diverged(const char *id, uint32_t newest) {
  json_t *e = json_object_get(body, "error"), *v = json_object_get(e, "view");

  ck_assert_str_eq(error_code(), "diverged");
  ck_assert_int_eq(json_integer_value(json_object_get(e, "newest")), newest);
  ck_assert_str_eq(json_string_value(json_object_get(v, "id")), id);
}

START_TEST(expect_newest_guards_every_change) {
  static const struct {
    const char *path, *good, *bad;
  } ops[] = {
      {"/session/a/step", "{\"pos\":11,\"expect_newest\":10}",
       "{\"pos\":12,\"expect_newest\":10}"},
      {"/session/a/step", "{\"positions\":[12,13],\"tentative\":true,"
                          "\"expect_newest\":11}",
       "{\"positions\":[14],\"tentative\":true,\"expect_newest\":11}"},
      {"/session/a/commit", "{\"newest\":12,\"expect_newest\":13}",
       "{\"newest\":13,\"expect_newest\":13}"},
      {"/session/a/truncate", "{\"from\":12,\"expect_newest\":12}",
       "{\"from\":11,\"expect_newest\":12}"},
      {"/session/a/evict", "{\"budget\":2,\"expect_newest\":11}",
       "{\"budget\":2,\"expect_newest\":0}"},
      {"/session/a/fork", "{\"into\":\"f\",\"expect_newest\":11}",
       "{\"into\":\"g\",\"expect_newest\":10}"},
  };
  char *before;
  size_t i;

  start();
  expect_ok(PUT, "/session/a", "{\"budget\":4,\"lookahead\":2}", 201, NULL);
  expect_ok(POST, "/session/a/step", "{\"positions\":[1,2,10]}", 200, NULL);
  for (i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    /* The good one applies; sent again it is a resend (a replay for the
     * window's requests, the child found for a fork) or changes nothing. */
    json_t *was;
    expect_ok(POST, ops[i].path, ops[i].good, 200 + (i == 5), NULL);
    before = view_of("a");
    was = json_loads(before, 0, NULL);
    ck_assert_int_eq(req(POST, ops[i].path, ops[i].good), 200);
    if (i < 4) /* the window's requests are replayed; evict and fork are
                  idempotent themselves */
      ck_assert(json_is_true(json_object_get(body, "replayed")));
    expect_view("a", before);
    /* The bad one changes nothing and says where the session is. */
    expect_error(POST, ops[i].path, ops[i].bad, 409, "diverged");
    expect_diverged("a", (uint32_t)json_integer_value(
                             json_object_get(was, "newest")));
    expect_view("a", before);
    json_decref(was);
    free(before);
  }
  ck_assert_ptr_null(evd_table_find(evd_api_table(api), "g", 1));
  /* An out-of-range expectation is refused as a position. */
  expect_error(POST, "/session/a/step", "{\"pos\":20,\"expect_newest\":-1}",
               400, "invalid_position");
  expect_error(POST, "/session/a/evict", "{\"expect_newest\":\"11\"}", 400,
               "invalid_position");
  stop();
}
END_TEST

START_TEST(expect_newest_on_missing_sessions_and_in_batches) {
  char *before;

  start(); /* autocreate on */
  /* Expecting more than a fresh session's newest: 404, nothing made. */
  expect_error(POST, "/session/n/step", "{\"pos\":5,\"expect_newest\":4}",
               404, "unknown_session");
  ck_assert_ptr_null(evd_table_find(evd_api_table(api), "n", 1));
  expect_error(POST, "/session/n/commit", "{\"newest\":0,\"expect_newest\":0}",
               404, "unknown_session");
  /* Expecting 0 is what a fresh session has: created. */
  expect_ok(POST, "/session/n/step", "{\"pos\":1,\"expect_newest\":0}", 200,
            "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":1}");
  /* In a batch, each item on its own: the diverged one fails, the others
   * go on. */
  before = view_of("n");
  expect_ok(POST, "/step",
            "{\"steps\":[{\"session\":\"n\",\"pos\":2,\"expect_newest\":0},"
            "{\"session\":\"m\",\"pos\":1,\"expect_newest\":7},"
            "{\"session\":\"k\",\"pos\":1,\"expect_newest\":0},"
            "{\"session\":\"n\",\"pos\":2,\"expect_newest\":1}]}",
            200, NULL);
  {
    json_t *r = json_object_get(body, "results"), *e;
    e = json_object_get(json_array_get(r, 0), "error");
    ck_assert_str_eq(json_string_value(json_object_get(e, "code")),
                     "diverged");
    ck_assert_int_eq(json_integer_value(json_object_get(e, "status")), 409);
    ck_assert_int_eq(json_integer_value(json_object_get(e, "newest")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_object_get(e, "view"), "newest")), 1);
    e = json_object_get(json_array_get(r, 1), "error");
    ck_assert_str_eq(json_string_value(json_object_get(e, "code")),
                     "unknown_session");
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_array_get(r, 2), "newest")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_array_get(r, 3), "newest")), 2);
  }
  free(before);
  ck_assert_ptr_null(evd_table_find(evd_api_table(api), "m", 1));
  /* A paged session's divergence carries its pages in the view. */
  expect_ok(PUT, "/session/p", "{\"page_size\":2}", 201, NULL);
  expect_error(POST, "/session/p/step", "{\"pos\":3,\"expect_newest\":2}", 409,
               "diverged");
  ck_assert(json_is_array(json_object_get(
      json_object_get(json_object_get(body, "error"), "view"), "pages")));
  stop();
}
END_TEST

void api_adopt_tests(TCase *ops) {
  tcase_add_test(ops, adopt_creates_resends_refuses_and_replaces);
  tcase_add_test(ops, adopted_views_are_the_same_sessions);
  tcase_add_test(ops, adopt_refuses_every_bad_state_creating_nothing);
  tcase_add_test(ops, adopt_counts_in_metrics_and_the_session_limit);
  tcase_add_test(ops, expect_newest_guards_every_change);
  tcase_add_test(ops, expect_newest_on_missing_sessions_and_in_batches);
}
