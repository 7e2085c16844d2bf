/* API unit tests: every vector of proto/vectors and proto/vectors/rehome
 * replayed through the API, each answer and view compared with the
 * vector's; part of build/test_api. */
#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_harness.h"

#ifndef EVD_VECTORS_DIR
#define EVD_VECTORS_DIR "proto/vectors"
#endif

/* ---- the vectors, through the API --------------------------------------- */

static const char *vectors_dir(void) {
  const char *d = getenv("EVD_VECTORS_DIR");
  return d != NULL ? d : EVD_VECTORS_DIR;
}

/* The keys of a vector op that describe the request, not the answer. */
static int request_key(const char *k) {
  static const char *const keys[] = {"step",     "tentative", "commit",
                                     "evict",    "truncate",  "fork",
                                     "check",    "session",   "error",
                                     "adopt",    "expect_newest", NULL};
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
  json_t *made = json_object(); /* the sessions the vector has made */
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
  json_object_set_new(made, base, json_true());
  json_array_foreach(json_object_get(vec, "ops"), i, op) {
    json_t *err = json_object_get(op, "error"), *rq = json_object();
    const char *sess = json_string_value(json_object_get(op, "session"));
    char id[100], child[100];
    int st;
    if (sess != NULL)
      snprintf(id, sizeof id, "%s.%s", base, sess);
    else
      snprintf(id, sizeof id, "%s", base);
    snprintf(where, sizeof where, "%s op %zu", path, i);
    if (json_object_get(op, "expect_newest") != NULL)
      json_object_set(rq, "expect_newest",
                      json_object_get(op, "expect_newest"));
    if (json_object_get(op, "adopt") != NULL) {
      /* 201 for a name the vector has not made yet, else 200; the answer
       * is the view, compared without its id. */
      int fresh = json_object_get(made, id) == NULL;
      json_decref(rq);
      b = json_dumps(json_object_get(op, "adopt"), JSON_COMPACT);
      snprintf(sp, sizeof sp, "/session/%s/adopt", id);
      st = req(POST, sp, b);
      if (err != NULL) {
        ck_assert_msg(st >= 400 && strcmp(error_code(),
                                          json_string_value(err)) == 0,
                      "%s: %s expected, got %d %.*s", where,
                      json_string_value(err), st, (int)out.len, out.data);
      } else {
        ck_assert_msg(st == (fresh ? 201 : 200), "%s: adopt %d %.*s", where,
                      st, (int)out.len, out.data);
        ck_assert_str_eq(json_string_value(json_object_get(body, "id")), id);
        json_object_del(body, "id");
        expect_answer(op, where);
        json_object_set_new(made, id, json_true());
      }
      free(b);
      continue;
    }
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
      json_object_set_new(made, child, json_true());
    } else {
      ck_assert_msg(st == 200, "%s: %s: %d %.*s", where, b, st, (int)out.len,
                    out.data);
      expect_answer(op, where);
    }
    free(b);
  }
  json_decref(made);
  json_decref(vec);
}

/* Replays every vector file of `dir`; returns how many. */
static int replay_dir(const char *dir, int index) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[4096];
  int files = 0;

  ck_assert_msg(d != NULL, "cannot open %s", dir);
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0)
      continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    replay_vector(path, index + files);
    files++;
  }
  closedir(d);
  return files;
}

START_TEST(vectors_replay_through_the_api) {
  char rehome[4096];
  int files, more;

  start();
  files = replay_dir(vectors_dir(), 0);
  snprintf(rehome, sizeof rehome, "%s/rehome", vectors_dir());
  more = replay_dir(rehome, files); /* adopt and expect_newest */
  ck_assert_int_ge(files, 5);
  ck_assert_int_ge(more, 4);
  stop();
}
END_TEST

void api_vector_tests(TCase *ops) {
  tcase_add_test(ops, vectors_replay_through_the_api);
}
