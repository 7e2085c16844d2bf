/* Retries, batches, the limits set by flags and the body size limit: each
 * test starts the daemon it needs, and checks that whatever is refused
 * leaves the sessions exactly as they were. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Asserts `got` is `want` (a JSON text) plus "replayed":true. */
static void expect_replayed(json_t *got, const char *want) {
  json_t *copy = json_deep_copy(got);

  ck_assert_msg(json_object_get(got, "replayed") == json_true(),
                "expected a replay, got %s", ht_dump(got, 0));
  json_object_del(copy, "replayed");
  ht_json_eq(copy, want);
  json_decref(copy);
}

static void expect_view_unchanged(ht_t *t, const char *id, json_t *before,
                                  const char *after_what) {
  json_t *now = ht_view(t, id);

  ck_assert_msg(json_equal(before, now), "after %s: %s became %s", after_what,
                ht_dump(before, 0), ht_dump(now, 1));
  json_decref(now);
}

/* The i-th result of a batch answer (borrowed). */
static json_t *result(json_t *batch, size_t i) {
  return json_array_get(json_object_get(batch, "results"), i);
}

/* ---- retries ------------------------------------------------------------ */

START_TEST(retry_is_replayed) {
  static const char r1[] =
      "{\"victims\":[],\"slots\":[1,2],\"size\":3,\"newest\":6}";
  static const char r2[] =
      "{\"victims\":[0,5],\"slots\":[3,4,0],\"size\":4,\"newest\":9}";
  static const char r3[] =
      "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":10}";
  ht_t t;
  json_t *j, *v;

  ht_up(&t, NULL, NULL);
  ht_do(&t, "PUT", "/session/r", "{\"budget\":4}", 201);
  ht_expect(&t, "POST", "/session/r/step", "{\"positions\":[5,6]}", 200, r1);
  v = ht_view(&t, "r");
  j = ht_call(&t, "POST", "/session/r/step", "{\"positions\":[5,6]}", 200);
  expect_replayed(j, r1);
  json_decref(j);
  expect_view_unchanged(&t, "r", v, "a replay");
  json_decref(v);
  ht_expect(&t, "POST", "/session/r/step", "{\"positions\":[7,8,9]}", 200, r2);
  /* Only the last applied request is replayed. */
  ck_assert_int_eq(ht_error(&t, "POST", "/session/r/step",
                            "{\"positions\":[5,6]}", 409, "stale_position"),
                   9);
  /* Even after an evict, the original answer comes back. */
  ht_expect(&t, "POST", "/session/r/evict", "{\"budget\":1}", 200,
            "{\"victims\":[6,7,8],\"size\":1}");
  v = ht_view(&t, "r");
  j = ht_call(&t, "POST", "/session/r/step", "{\"positions\":[7,8,9]}", 200);
  expect_replayed(j, r2);
  json_decref(j);
  expect_view_unchanged(&t, "r", v, "a replay after an evict");
  json_decref(v);
  /* A different stale request is still stale. */
  ck_assert_int_eq(ht_error(&t, "POST", "/session/r/step", "{\"pos\":9}", 409,
                            "stale_position"),
                   9);
  ck_assert_int_eq(ht_error(&t, "POST", "/session/r/step",
                            "{\"positions\":[7,8]}", 409, "stale_position"),
                   9);
  ck_assert_int_eq(ht_error(&t, "POST", "/session/r/step",
                            "{\"positions\":[8,9]}", 409, "stale_position"),
                   9);
  /* The positions are what counts: "pos":10 and "positions":[10] are the
   * same request, and attention is ignored. */
  ht_expect(&t, "POST", "/session/r/step", "{\"pos\":10}", 200,
            "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":10}");
  j = ht_call(&t, "POST", "/session/r/step",
              "{\"positions\":[10],\"attention\":[0.25]}", 200);
  expect_replayed(j, "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":10}");
  json_decref(j);
  j = ht_call(&t, "POST", "/step",
              "{\"steps\":[{\"session\":\"r\",\"pos\":10}]}", 200);
  expect_replayed(result(j, 0),
                  "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":10}");
  json_decref(j);
  /* A new session under the same id has no record to replay. */
  ht_do(&t, "DELETE", "/session/r", NULL, 204);
  ht_do(&t, "PUT", "/session/r", "{\"budget\":4}", 201);
  ht_expect(&t, "POST", "/session/r/step", "{\"pos\":10}", 200, r3);
  ht_down(&t);
}
END_TEST

/* ---- batches ------------------------------------------------------------ */

START_TEST(batch_items_apply_in_order) {
  char body[1024], id129[130];
  ht_t t;
  json_t *j;

  memset(id129, 'k', 129);
  id129[129] = '\0';
  ht_up(&t, NULL, NULL);
  ht_expect(&t, "POST", "/step", "{\"steps\":[]}", 200, "{\"results\":[]}");
  ht_do(&t, "PUT", "/session/x", "{\"budget\":2}", 201);
  snprintf(body, sizeof body,
           "{\"steps\":["
           "{\"session\":\"x\",\"pos\":1},"
           "{\"session\":\"x\",\"positions\":[2,3]},"
           "{\"session\":\"y\",\"pos\":4,\"budget\":2,\"sinks\":1,"
           "\"attention\":[0.5,0.25]},"
           "{\"session\":\"x\",\"pos\":3},"
           "{\"session\":\"x\",\"positions\":[2,3]},"
           "{\"session\":\"z\",\"pos\":0},"
           "{\"session\":\"a/b\",\"pos\":1},"
           "{\"session\":\"%s\",\"pos\":1},"
           "{\"session\":\"\",\"pos\":1},"
           "{\"session\":\"x\",\"positions\":[5,4]},"
           "{\"session\":\"y\",\"pos\":5,\"budget\":0},"
           "{\"session\":\"w\",\"pos\":5,\"budget\":3,\"sinks\":3},"
           "{\"session\":\"x\",\"positions\":[]}]}",
           id129);
  j = ht_call(&t, "POST", "/step", body, 200);
  ck_assert_msg(json_object_size(j) == 1 &&
                    json_array_size(json_object_get(j, "results")) == 13,
                "%s", ht_dump(j, 0));
  ht_json_eq(result(j, 0),
             "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":1}");
  ht_json_eq(result(j, 1),
             "{\"victims\":[0,1],\"slots\":[2,0],\"size\":2,\"newest\":3}");
  ht_json_eq(result(j, 2),
             "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":4}");
  ht_check_error(result(j, 3), 409, "stale_position", 1);
  ht_json_eq(json_object_get(json_object_get(result(j, 3), "error"), "newest"),
             "3");
  expect_replayed(result(j, 4),
                  "{\"victims\":[0,1],\"slots\":[2,0],\"size\":2,"
                  "\"newest\":3}");
  ht_check_error(result(j, 5), 409, "stale_position", 1);
  ht_json_eq(json_object_get(json_object_get(result(j, 5), "error"), "newest"),
             "0");
  ht_check_error(result(j, 6), 400, "invalid_session_id", 1);
  ht_check_error(result(j, 7), 400, "invalid_session_id", 1);
  ht_check_error(result(j, 8), 400, "invalid_session_id", 1);
  ht_check_error(result(j, 9), 400, "invalid_position", 1);
  ht_check_error(result(j, 10), 400, "invalid_budget", 1);
  ht_check_error(result(j, 11), 400, "invalid_sinks", 1);
  ht_check_error(result(j, 12), 400, "invalid_position", 1);
  json_decref(j);
  ht_expect(&t, "GET", "/session/y", NULL, 200,
            "{\"id\":\"y\",\"budget\":2,\"sinks\":1,\"size\":2,\"newest\":4,"
            "\"kept\":[0,4],\"slots\":[0,1]}");
  ht_expect(&t, "GET", "/session/x", NULL, 200,
            "{\"id\":\"x\",\"budget\":2,\"sinks\":0,\"size\":2,\"newest\":3,"
            "\"kept\":[2,3],\"slots\":[2,0]}");
  ht_error(&t, "GET", "/session/z", NULL, 404, "unknown_session");
  ht_error(&t, "GET", "/session/w", NULL, 404, "unknown_session");
  ht_down(&t);
}
END_TEST

/* ---- a refused request changes nothing -------------------------------- */

START_TEST(refused_requests_change_nothing) {
  static const struct {
    const char *method, *path, *body;
    int status;
    const char *code;
  } refused[] = {
      {"POST", "/session/a/step", "{\"pos\":3}", 409, "stale_position"},
      {"POST", "/session/a/step", "{\"positions\":[5,6]}", 409,
       "stale_position"},
      {"POST", "/session/a/step", "{\"positions\":[10,9]}", 400,
       "invalid_position"},
      {"POST", "/session/a/step", "{\"positions\":[10,10]}", 400,
       "invalid_position"},
      {"POST", "/session/a/step", "{\"positions\":[10,11,4294967296]}", 400,
       "invalid_position"},
      {"POST", "/session/a/step",
       "{\"positions\":[10,11,12,13,14,15,16]}", 400, "too_many_positions"},
      {"POST", "/session/a/step", "{\"pos\":10,\"budget\":0}", 400,
       "invalid_budget"},
      {"POST", "/session/a/step", "{\"pos\":10,\"sinks\":600}", 400,
       "invalid_sinks"},
      {"POST", "/session/a/step", "{\"pos\":10,\"foo\":1}", 400,
       "invalid_field"},
      {"POST", "/session/a/step", "{\"pos\":10,\"pos\":11}", 400,
       "invalid_json"},
      {"POST", "/session/a/step", "", 400, "invalid_json"},
      {"PUT", "/session/a", "{\"budget\":5}", 409, "session_exists"},
      {"PUT", "/session/a", "{\"budget\":0}", 400, "invalid_budget"},
      {"PUT", "/session/a", "{\"budget\":4,\"sinks\":4}", 400,
       "invalid_sinks"},
      {"POST", "/session/a/evict", "{\"budget\":1}", 400, "invalid_budget"},
      {"POST", "/session/a/evict", "{\"budget\":\"2\"}", 400,
       "invalid_field"},
      {"POST", "/session/a/evict", "[2]", 400, "invalid_json"},
      {"POST", "/session/a", "{}", 405, "method_not_allowed"},
      {"PUT", "/session/a/step", "{\"pos\":10}", 405, "method_not_allowed"},
      {"POST", "/step",
       "{\"steps\":[{\"session\":\"a\",\"pos\":10},{\"session\":\"a\","
       "\"pos\":11},{\"session\":\"a\",\"pos\":12},{\"session\":\"a\","
       "\"pos\":13}]}",
       400, "too_many_steps"},
      {"POST", "/step", "{\"steps\":[{\"session\":\"a\",\"pos\":10}],\"x\":1}",
       400, "invalid_field"},
  };
  static const char r[] =
      "{\"victims\":[1,2,3],\"slots\":[1,2,3,4,1,2],\"size\":4,"
      "\"newest\":6}";
  char big[300];
  hc_response_t resp;
  hc_conn_t c2;
  size_t i;
  ht_t t;
  json_t *v0, *j;

  ht_up(&t, NULL,
        ARGS("--max-positions", "6", "--max-batch", "3", "--max-body", "256"));
  ht_do(&t, "PUT", "/session/a", "{\"budget\":4,\"sinks\":1}", 201);
  ht_expect(&t, "POST", "/session/a/step", "{\"positions\":[1,2,3,4,5,6]}",
            200, r);
  v0 = ht_view(&t, "a");
  for (i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    char what[300];
    ht_error(&t, refused[i].method, refused[i].path, refused[i].body,
             refused[i].status, refused[i].code);
    snprintf(what, sizeof what, "%s %s %s", refused[i].method,
             refused[i].path, refused[i].body);
    expect_view_unchanged(&t, "a", v0, what);
  }
  /* A body over --max-body, on a connection of its own. */
  memset(big, ' ', sizeof big);
  memcpy(big, "{\"pos\":10}", 10);
  ck_assert_int_eq(hc_connect(&c2, t.d.addr, 20), 0);
  ck_assert_int_eq(hc_send(&c2, "POST", "/session/a/step", NULL, big,
                           sizeof big, 0), 0);
  ck_assert_int_eq(hc_read_response(&c2, 0, &resp), 0);
  ck_assert_int_eq(resp.status, 413);
  j = json_loads(resp.body, 0, NULL);
  ht_check_error(j, 413, "body_too_large", 0);
  json_decref(j);
  hc_response_free(&resp);
  hc_close(&c2);
  expect_view_unchanged(&t, "a", v0, "a body over the limit");
  json_decref(v0);
  /* Nor did any of them replace the record a retry is answered from. */
  j = ht_call(&t, "POST", "/session/a/step", "{\"positions\":[1,2,3,4,5,6]}",
              200);
  expect_replayed(j, r);
  json_decref(j);
  ht_expect(&t, "POST", "/session/a/step", "{\"pos\":7}", 200,
            "{\"victims\":[4],\"slots\":[3],\"size\":4,\"newest\":7}");
  ht_down(&t);
}
END_TEST

/* ---- limits ------------------------------------------------------------- */

START_TEST(session_limit_with_max_sessions_2) {
  ht_t t;
  json_t *j;

  ht_up(&t, NULL, ARGS("--max-sessions", "2"));
  ht_do(&t, "PUT", "/session/a", NULL, 201);
  ht_do(&t, "POST", "/session/b/step", "{\"pos\":1}", 200);
  ht_error(&t, "PUT", "/session/c", NULL, 503, "session_limit");
  ht_error(&t, "PUT", "/session/c", "{\"budget\":4}", 503, "session_limit");
  ht_error(&t, "POST", "/session/c/step", "{\"pos\":1}", 503,
           "session_limit");
  j = ht_call(&t, "POST", "/step",
              "{\"steps\":[{\"session\":\"c\",\"pos\":1},"
              "{\"session\":\"a\",\"pos\":1}]}",
              200);
  ht_check_error(result(j, 0), 503, "session_limit", 1);
  ht_json_eq(result(j, 1),
             "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":1}");
  json_decref(j);
  ht_error(&t, "GET", "/session/c", NULL, 404, "unknown_session");
  /* Existing sessions still answer as before. */
  ht_do(&t, "PUT", "/session/a", NULL, 200);
  ht_do(&t, "POST", "/session/b/step", "{\"pos\":2}", 200);
  ht_do(&t, "DELETE", "/session/a", NULL, 204);
  ht_do(&t, "PUT", "/session/c", NULL, 201);
  ht_error(&t, "PUT", "/session/a", NULL, 503, "session_limit");
  ht_down(&t);
}
END_TEST

START_TEST(too_many_positions_with_max_positions_3) {
  ht_t t;
  json_t *j, *v;

  ht_up(&t, NULL, ARGS("--max-positions", "3"));
  ht_error(&t, "POST", "/session/n/step", "{\"positions\":[1,2,3,4]}", 400,
           "too_many_positions");
  ht_error(&t, "GET", "/session/n", NULL, 404, "unknown_session");
  ht_expect(&t, "POST", "/session/n/step", "{\"positions\":[1,2,3]}", 200,
            "{\"victims\":[],\"slots\":[1,2,3],\"size\":4,\"newest\":3}");
  v = ht_view(&t, "n");
  ht_error(&t, "POST", "/session/n/step", "{\"positions\":[4,5,6,7]}", 400,
           "too_many_positions");
  expect_view_unchanged(&t, "n", v, "too many positions");
  json_decref(v);
  j = ht_call(&t, "POST", "/step",
              "{\"steps\":[{\"session\":\"n\",\"positions\":[4,5,6,7]},"
              "{\"session\":\"n\",\"positions\":[4,5,6]},"
              "{\"session\":\"n\",\"pos\":7}]}",
              200);
  ht_check_error(result(j, 0), 400, "too_many_positions", 1);
  ht_json_eq(result(j, 1),
             "{\"victims\":[],\"slots\":[4,5,6],\"size\":7,\"newest\":6}");
  ht_json_eq(result(j, 2),
             "{\"victims\":[],\"slots\":[7],\"size\":8,\"newest\":7}");
  json_decref(j);
  ht_down(&t);
}
END_TEST

START_TEST(too_many_steps_with_max_batch_2) {
  ht_t t;
  json_t *j;

  ht_up(&t, NULL, ARGS("--max-batch", "2"));
  ht_error(&t, "POST", "/step",
           "{\"steps\":[{\"session\":\"a\",\"pos\":1},"
           "{\"session\":\"b\",\"pos\":1},{\"session\":\"c\",\"pos\":1}]}",
           400, "too_many_steps");
  ht_error(&t, "GET", "/session/a", NULL, 404, "unknown_session");
  ht_error(&t, "GET", "/session/b", NULL, 404, "unknown_session");
  ht_error(&t, "GET", "/session/c", NULL, 404, "unknown_session");
  /* Invalid items count as items. */
  ht_error(&t, "POST", "/step", "{\"steps\":[1,2,3]}", 400, "too_many_steps");
  j = ht_call(&t, "POST", "/step",
              "{\"steps\":[{\"session\":\"a\",\"pos\":1},"
              "{\"session\":\"b\",\"pos\":1}]}",
              200);
  ck_assert_uint_eq(json_array_size(json_object_get(j, "results")), 2);
  json_decref(j);
  ht_down(&t);
}
END_TEST

START_TEST(max_budget_flag_bounds_budgets) {
  ht_t t;

  ht_up(&t, NULL, ARGS("--budget", "10", "--max-budget", "100"));
  ht_do(&t, "PUT", "/session/d", NULL, 201);
  ht_expect(&t, "GET", "/session/d", NULL, 200,
            "{\"id\":\"d\",\"budget\":10,\"sinks\":0,\"size\":1,\"newest\":0,"
            "\"kept\":[0],\"slots\":[0]}");
  ht_do(&t, "PUT", "/session/a", "{\"budget\":100}", 201);
  ht_error(&t, "PUT", "/session/b", "{\"budget\":101}", 400, "invalid_budget");
  ht_error(&t, "POST", "/session/b/step", "{\"pos\":1,\"budget\":101}", 400,
           "invalid_budget");
  ht_error(&t, "GET", "/session/b", NULL, 404, "unknown_session");
  ht_do(&t, "POST", "/session/b/step", "{\"pos\":1,\"budget\":100}", 200);
  /* An eviction budget is not bound by --max-budget. */
  ht_expect(&t, "POST", "/session/a/evict", "{\"budget\":1000}", 200,
            "{\"victims\":[],\"size\":1}");
  ht_down(&t);
}
END_TEST

START_TEST(no_autocreate_refuses_unknown_steps) {
  ht_t t;
  json_t *j;

  ht_up(&t, NULL, ARGS("--no-autocreate"));
  ht_error(&t, "POST", "/session/x/step", "{\"pos\":1}", 404,
           "unknown_session");
  ht_error(&t, "POST", "/session/x/step",
           "{\"pos\":1,\"budget\":4,\"sinks\":1}", 404, "unknown_session");
  ht_error(&t, "POST", "/session/x/step", "{\"pos\":0}", 404,
           "unknown_session");
  j = ht_call(&t, "POST", "/step", "{\"steps\":[{\"session\":\"x\",\"pos\":1}]}",
              200);
  ht_check_error(result(j, 0), 404, "unknown_session", 1);
  json_decref(j);
  ht_error(&t, "GET", "/session/x", NULL, 404, "unknown_session");
  ht_do(&t, "PUT", "/session/x", NULL, 201);
  ht_expect(&t, "POST", "/session/x/step", "{\"pos\":1}", 200,
            "{\"victims\":[],\"slots\":[1],\"size\":2,\"newest\":1}");
  ht_down(&t);
}
END_TEST

/* ---- bodies ------------------------------------------------------------- */

/* Sends a step body of exactly n bytes ({"pos":P} padded with spaces) on a
 * new connection, chunked when chunk > 0, and returns the status. */
static int step_sized(ht_t *t, const char *id, int pos, size_t n,
                      size_t chunk) {
  char *b = malloc(n), path[64];
  int len = snprintf(path, sizeof path, "{\"pos\":%d}", pos), status;
  hc_response_t r;
  hc_conn_t c;
  json_t *j;

  ck_assert_ptr_nonnull(b);
  ck_assert((size_t)len <= n);
  memset(b, ' ', n);
  memcpy(b, path, (size_t)len);
  snprintf(path, sizeof path, "/session/%s/step", id);
  ck_assert_int_eq(hc_connect(&c, t->d.addr, 20), 0);
  /* A body refused by its Content-Length may be answered, and the
   * connection closed, before all of it is written: then the write fails
   * but the answer is there to read. */
  if (hc_send(&c, "POST", path, NULL, b, n, chunk) != 0)
    ck_assert_msg(chunk == 0, "the chunked body was cut off");
  ck_assert_int_eq(hc_read_response(&c, 0, &r), 0);
  status = r.status;
  j = json_loads(r.body, 0, NULL);
  if (status == 413)
    ht_check_error(j, 413, "body_too_large", 0);
  json_decref(j);
  hc_response_free(&r);
  hc_close(&c);
  free(b);
  return status;
}

START_TEST(body_limit_content_length_and_chunked) {
  static const char declared[] = "POST /session/a/step HTTP/1.1\r\n"
                                 "Host: x\r\nContent-Length: 100000\r\n\r\n";
  ht_t t;
  hc_response_t r;
  hc_conn_t c;
  json_t *v;

  ht_up(&t, NULL, ARGS("--max-body", "64"));
  ck_assert_int_eq(step_sized(&t, "a", 1, 64, 0), 200);
  v = ht_view(&t, "a");
  ck_assert_int_eq(step_sized(&t, "a", 2, 65, 0), 413);
  ck_assert_int_eq(step_sized(&t, "a", 2, 65, 10), 413);
  ck_assert_int_eq(step_sized(&t, "a", 2, 5000, 100), 413);
  ck_assert_int_eq(step_sized(&t, "b", 2, 5000, 0), 413);
  expect_view_unchanged(&t, "a", v, "bodies over the limit");
  json_decref(v);
  ht_error(&t, "GET", "/session/b", NULL, 404, "unknown_session");
  ck_assert_int_eq(step_sized(&t, "a", 2, 64, 10), 200);
  /* A declared length over the limit is refused before the body is sent. */
  ck_assert_int_eq(hc_connect(&c, t.d.addr, 20), 0);
  ck_assert_int_eq(hc_write_all(&c, declared, sizeof declared - 1), 0);
  ck_assert_int_eq(hc_read_response(&c, 0, &r), 0);
  ck_assert_int_eq(r.status, 413);
  hc_response_free(&r);
  hc_close(&c);
  ht_expect(&t, "GET", "/session/a", NULL, 200,
            "{\"id\":\"a\",\"budget\":512,\"sinks\":0,\"size\":3,\"newest\":2,"
            "\"kept\":[0,1,2],\"slots\":[0,1,2]}");
  ht_down(&t);
}
END_TEST

START_TEST(chunked_request_bodies) {
  static const char step[] = "{\"positions\":[1,2,3],\"attention\":[1,2,3]}";
  static const char put[] = "{\"budget\":2,\"sinks\":1}";
  static const char batch[] =
      "{\"steps\":[{\"session\":\"c\",\"pos\":4},{\"session\":\"d\","
      "\"pos\":1}]}";
  hc_response_t r;
  ht_t t;
  json_t *j;

  ht_up(&t, NULL, NULL);
  ck_assert_int_eq(hc_send(&t.c, "PUT", "/session/c", NULL, put,
                           sizeof put - 1, 3), 0);
  ck_assert_int_eq(hc_read_response(&t.c, 0, &r), 0);
  ck_assert_int_eq(r.status, 201);
  hc_response_free(&r);
  ck_assert_int_eq(hc_send(&t.c, "POST", "/session/c/step", NULL, step,
                           sizeof step - 1, 1), 0);
  ck_assert_int_eq(hc_read_response(&t.c, 0, &r), 0);
  ck_assert_int_eq(r.status, 200);
  j = json_loads(r.body, 0, NULL);
  ht_json_eq(j, "{\"victims\":[1,2],\"slots\":[1,2,1],\"size\":2,"
                "\"newest\":3}");
  json_decref(j);
  hc_response_free(&r);
  ck_assert_int_eq(hc_send(&t.c, "POST", "/step", NULL, batch,
                           sizeof batch - 1, 16), 0);
  ck_assert_int_eq(hc_read_response(&t.c, 0, &r), 0);
  ck_assert_int_eq(r.status, 200);
  j = json_loads(r.body, 0, NULL);
  ht_json_eq(j, "{\"results\":[{\"victims\":[3],\"slots\":[2],\"size\":2,"
                "\"newest\":4},{\"victims\":[],\"slots\":[1],\"size\":2,"
                "\"newest\":1}]}");
  json_decref(j);
  hc_response_free(&r);
  /* The connection carries on after chunked requests. */
  ht_expect(&t, "GET", "/session/c", NULL, 200,
            "{\"id\":\"c\",\"budget\":2,\"sinks\":1,\"size\":2,\"newest\":4,"
            "\"kept\":[0,4],\"slots\":[0,2]}");
  ck_assert_uint_eq(t.c.responses, 4);
  ht_down(&t);
}
END_TEST

START_TEST(default_body_limit_is_1_mib) {
  ht_t t;

  ht_up(&t, NULL, NULL);
  ck_assert_int_eq(step_sized(&t, "a", 1, 1048576, 0), 200);
  ck_assert_int_eq(step_sized(&t, "a", 2, 1048577, 0), 413);
  ck_assert_int_eq(step_sized(&t, "a", 2, 1048577, 65536), 413);
  ck_assert_int_eq(step_sized(&t, "a", 2, 1048576, 65536), 200);
  ht_down(&t);
}
END_TEST

Suite *limits_suite(void) {
  Suite *s = suite_create("limits");
  TCase *tc = tcase_create("flags");

  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, retry_is_replayed);
  tcase_add_test(tc, batch_items_apply_in_order);
  tcase_add_test(tc, refused_requests_change_nothing);
  tcase_add_test(tc, session_limit_with_max_sessions_2);
  tcase_add_test(tc, too_many_positions_with_max_positions_3);
  tcase_add_test(tc, too_many_steps_with_max_batch_2);
  tcase_add_test(tc, max_budget_flag_bounds_budgets);
  tcase_add_test(tc, no_autocreate_refuses_unknown_steps);
  tcase_add_test(tc, body_limit_content_length_and_chunked);
  tcase_add_test(tc, chunked_request_bodies);
  tcase_add_test(tc, default_body_limit_is_1_mib);
  suite_add_tcase(s, tc);
  return s;
}
