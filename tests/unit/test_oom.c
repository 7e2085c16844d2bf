/* A refused request changes nothing, also when memory runs out: every
 * allocation the daemon's code makes during a request is made to fail in
 * turn (the test links with --wrap=malloc,realloc,calloc), and each time
 * the answer must be either the one the request gets with memory to spare,
 * or an out_of_memory error that left the sessions as they were: for a
 * batch, per item (200) or for the whole request (503). */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "check_main.h"

/* ---- failing allocations ------------------------------------------------ */

void *__real_malloc(size_t n);
void *__real_realloc(void *p, size_t n);
void *__real_calloc(size_t k, size_t n);

static long countdown = -1; /* the allocation that fails; -1: none */
static long failed;         /* allocations failed so far */
static int inside;          /* in evd_api_handle: the daemon's allocations */

static int fail_now(void) {
  if (countdown < 0 || !inside)
    return 0;
  if (countdown-- == 0) {
    failed++;
    return 1;
  }
  return 0;
}

void *__wrap_malloc(size_t n) {
  return fail_now() ? NULL : __real_malloc(n);
}

void *__wrap_realloc(void *p, size_t n) {
  return fail_now() ? NULL : __real_realloc(p, n);
}

void *__wrap_calloc(size_t k, size_t n) {
  return fail_now() ? NULL : __real_calloc(k, n);
}

/* ---- the API ------------------------------------------------------------ */

static evd_api_t *api;
static evd_buf_t out;

static int call(int method, const char *path, const char *body,
                char **answer) {
  evd_request_t r = {.method = method, .path = path,
                     .path_len = strlen(path), .body = body,
                     .body_len = body != NULL ? strlen(body) : 0};
  evd_reply_t reply;

  inside = 1;
  evd_api_handle(api, &r, &out, &reply);
  inside = 0;
  if (answer != NULL) {
    *answer = __real_malloc(out.len + 1);
    ck_assert_ptr_nonnull(*answer);
    if (out.len > 0)
      memcpy(*answer, out.data, out.len);
    (*answer)[out.len] = '\0';
  }
  return reply.status;
}

#define NS 6

/* Sessions s0..s5 in varied states; s6..s9 do not exist yet. */
static void setup(void) {
  evd_config_t cfg;
  int st;

  evd_config_defaults(&cfg);
  cfg.budget = 8;
  ck_assert_int_eq(evd_api_new(&api, &cfg), 0);
  evd_buf_init(&out);
  st = call(EVD_M_PUT, "/session/s0", NULL, NULL);
  st |= call(EVD_M_PUT, "/session/s1", "{\"budget\":4,\"sinks\":2}", NULL);
  st |= call(EVD_M_PUT, "/session/s2", "{\"lookahead\":8,\"page_size\":4}",
             NULL);
  st |= call(EVD_M_POST, "/session/s2/step",
             "{\"positions\":[1,2,3,4,5,6,7,8,9,10,11,12]}", NULL);
  st |= call(EVD_M_POST, "/session/s3/step",
             "{\"positions\":[1,2,3],\"tentative\":true,\"lookahead\":4}",
             NULL);
  st |= call(EVD_M_PUT, "/session/s4", "{\"page_size\":2}", NULL);
  st |= call(EVD_M_POST, "/session/s5/step", "{\"pos\":3}", NULL);
  ck_assert_msg(st == 201 || st == 200 || st == 203, "setup: %d", st);
}

static void teardown(void) {
  evd_api_free(api);
  evd_buf_free(&out);
  api = NULL;
}

/* Each session's view, or "-" (the caller frees them). */
static void views(char *v[10]) {
  char path[32];
  int i;

  for (i = 0; i < 10; i++) {
    snprintf(path, sizeof path, "/session/s%d", i);
    if (call(EVD_M_GET, path, NULL, &v[i]) != 200) {
      free(v[i]);
      v[i] = strdup("-");
    }
  }
}

static void free_views(char *v[10]) {
  int i;

  for (i = 0; i < 10; i++)
    free(v[i]);
}

/* A batch with one item per session, of every kind. The general path's
 * form adds an "attention" field to each item. */
static const char *const items[] = {
    "{\"session\":\"s0\",\"positions\":[1,3,7]%s}", /* gaps: pooled */
    "{\"session\":\"s1\",\"positions\":[1,2,3,4,5,6,7,8,9],"
    "\"expect_newest\":0%s}",
    "{\"session\":\"s2\",\"positions\":[13,14,15,16,17,18,19,20,21,22,23,"
    "24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41]%s}",
    "{\"session\":\"s3\",\"commit\":2,\"positions\":[3,4,5,6],"
    "\"tentative\":true%s}",
    "{\"session\":\"s4\",\"positions\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,"
    "15,16,17,18,19,20],\"expect_newest\":9%s}", /* diverged: a view */
    "{\"session\":\"s5\",\"pos\":3,\"expect_newest\":2%s}", /* a replay */
    "{\"session\":\"s6\",\"pos\":5,\"page_size\":3,\"lookahead\":2%s}",
    "{\"session\":\"s7\",\"positions\":[1,2,3,4,5,6,7,8,9,10]%s}",
    "{\"session\":\"s8\",\"commit\":0%s}",
    "{\"session\":\"s9\",\"pos\":0%s}", /* refused: stale */
};
#define NITEMS (sizeof items / sizeof items[0])

static char *batch_body(int general) {
  char *b = __real_malloc(8192), one[1024];
  size_t i, n = 0;

  n += (size_t)snprintf(b, 8192, "{\"steps\":[");
  for (i = 0; i < NITEMS; i++) {
    snprintf(one, sizeof one, items[i], general ? ",\"attention\":null" : "");
    n += (size_t)snprintf(b + n, 8192 - n, "%s%s", i ? "," : "", one);
  }
  snprintf(b + n, 8192 - n, "]}");
  return b;
}

/* Runs a batch with the k-th allocation failing; checks the answer against
 * the one with no failure. Returns 1 when an allocation did fail. */
static int batch_with_failure(long k, int general, json_t *want,
                              char *after[10]) {
  char *body = batch_body(general), *answer, *before[10], *now[10];
  json_t *got, *results;
  long f0;
  int st, i;

  setup();
  views(before);
  evd_buf_free(&out); /* a new connection's: the answer must allocate */
  f0 = failed;
  countdown = k;
  st = call(EVD_M_POST, "/step", body, &answer);
  countdown = -1;
  views(now);
  got = json_loads(answer, 0, NULL);
  ck_assert_msg(got != NULL, "k %ld: answer is not JSON: %s", k, answer);
  if (st == 503) {
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(got, "error"), "code")),
                     "out_of_memory");
    for (i = 0; i < 10; i++)
      ck_assert_msg(strcmp(before[i], now[i]) == 0, "k %ld: a 503 batch "
                    "changed s%d: %s -> %s", k, i, before[i], now[i]);
  } else {
    ck_assert_msg(st == 200, "k %ld: status %d %s", k, st, answer);
    results = json_object_get(got, "results");
    ck_assert_uint_eq(json_array_size(results), NITEMS);
    for (i = 0; i < (int)NITEMS; i++) {
      json_t *res = json_array_get(results, (size_t)i);
      json_t *w = json_array_get(json_object_get(want, "results"), (size_t)i);
      json_t *e = json_object_get(res, "error");
      if (json_equal(res, w)) {
        ck_assert_msg(strcmp(now[i], after[i]) == 0, "k %ld: item %d as "
                      "expected but s%d is %s, want %s", k, i, i, now[i],
                      after[i]);
        continue;
      }
      ck_assert_msg(e != NULL && strcmp(json_string_value(json_object_get(
                                            e, "code")),
                                        "out_of_memory") == 0,
                    "k %ld: item %d is %s, want %s or out_of_memory", k, i,
                    json_dumps(res, 0), json_dumps(w, 0));
      ck_assert_msg(strcmp(before[i], now[i]) == 0, "k %ld: item %d refused "
                    "but s%d changed: %s -> %s", k, i, i, before[i], now[i]);
    }
  }
  json_decref(got);
  free(answer);
  free(body);
  free_views(before);
  free_views(now);
  teardown();
  return failed > f0;
}

static void batch_under_every_failure(int general) {
  char *body = batch_body(general), *answer, *after[10];
  json_t *want;
  long k, hit = 0;

  /* With memory to spare: the answer and the views to expect. */
  setup();
  ck_assert_int_eq(call(EVD_M_POST, "/step", body, &answer), 200);
  want = json_loads(answer, 0, NULL);
  ck_assert_ptr_nonnull(want);
  views(after);
  teardown();
  for (k = 0; k < 10000 && batch_with_failure(k, general, want, after); k++)
    hit++;
  ck_assert_msg(hit >= 5, "only %ld allocations during the batch", hit);
  fprintf(stderr, "oom: batch (%s path): each of its %ld allocations "
          "failed in turn, every answer consistent\n",
          general ? "general" : "fast", hit);
  json_decref(want);
  free(answer);
  free(body);
  free_views(after);
}

START_TEST(fast_batch_under_every_failure) {
  batch_under_every_failure(0);
}
END_TEST

START_TEST(general_batch_under_every_failure) {
  batch_under_every_failure(1);
}
END_TEST

/* Single requests of every kind: 200 as with memory to spare, or an error
 * that changed nothing. */
START_TEST(single_requests_under_every_failure) {
  static const struct {
    int method;
    const char *path, *body;
  } reqs[] = {
      {EVD_M_POST, "/session/s2/step",
       "{\"positions\":[13,14,15,16,17,18,19,20,21,22,23,24,25,26]}"},
      {EVD_M_POST, "/session/s3/commit", "{\"newest\":2}"},
      {EVD_M_POST, "/session/s2/truncate", "{\"from\":5}"},
      {EVD_M_POST, "/session/s2/fork", "{\"into\":\"s9\"}"},
      {EVD_M_POST, "/session/s1/evict", "{\"budget\":3}"},
      {EVD_M_PUT, "/session/s8", "{\"lookahead\":3}"},
      {EVD_M_DELETE, "/session/s4", NULL},
      {EVD_M_POST, "/session/s7/step", "{\"positions\":[1,2,3,4,5,6,7,8,9]}"},
      {EVD_M_POST, "/session/s9/adopt",
       "{\"budget\":6,\"sinks\":1,\"page_size\":2,\"kept\":[0,5,9],"
       "\"newest\":11,\"pages\":[0,2,4]}"},
      {EVD_M_POST, "/session/s2/adopt",
       "{\"kept\":[0,3],\"newest\":3,\"replace\":true}"},
      {EVD_M_POST, "/session/s2/step", "{\"pos\":99,\"expect_newest\":1}"},
  };
  size_t q;

  for (q = 0; q < sizeof reqs / sizeof reqs[0]; q++) {
    char *want, *after[10];
    int want_st;
    long k;
    setup();
    want_st = call(reqs[q].method, reqs[q].path, reqs[q].body, &want);
    views(after);
    teardown();
    for (k = 0; k < 1000; k++) {
      char *answer, *before[10], *now[10];
      long f0 = failed;
      int st, i;
      setup();
      views(before);
      evd_buf_free(&out);
      countdown = k;
      st = call(reqs[q].method, reqs[q].path, reqs[q].body, &answer);
      countdown = -1;
      views(now);
      if (st == want_st && strcmp(answer, want) == 0) {
        for (i = 0; i < 10; i++)
          ck_assert_msg(strcmp(now[i], after[i]) == 0, "%s k %ld: s%d is "
                        "%s, want %s", reqs[q].path, k, i, now[i], after[i]);
      } else {
        ck_assert_msg(st == 503 && strstr(answer, "out_of_memory") != NULL,
                      "%s k %ld: %d %s", reqs[q].path, k, st, answer);
        for (i = 0; i < 10; i++)
          ck_assert_msg(strcmp(before[i], now[i]) == 0, "%s k %ld: refused "
                        "but s%d changed: %s -> %s", reqs[q].path, k, i,
                        before[i], now[i]);
      }
      free(answer);
      free_views(before);
      free_views(now);
      teardown();
      if (failed == f0)
        break; /* every allocation of the request has failed once */
    }
    free(want);
    free_views(after);
  }
}
END_TEST

static Suite *oom_suite(void) {
  Suite *s = suite_create("oom");
  TCase *tc = tcase_create("allocation failures");

  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, fast_batch_under_every_failure);
  tcase_add_test(tc, general_batch_under_every_failure);
  tcase_add_test(tc, single_requests_under_every_failure);
  suite_add_tcase(s, tc);
  return s;
}

/* No fork: the allocation wrappers count calls in this process. */
int main(void) {
  Suite *suite = oom_suite();

  return evd_check_run(&suite, 1, CK_NOFORK);
}
