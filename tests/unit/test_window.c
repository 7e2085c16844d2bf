/* Unit tests of the sliding-window policy: the vectors in proto/vectors
 * replayed here; edge cases, engine operations, the randomized model
 * checks and windows built in a given state in test_window_*.c, all in the
 * one suite below. */
#include <check.h>
#include <dirent.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "window.h"
#include "check_main.h"
#include "test_window.h"

#ifndef EVD_VECTORS_DIR
#define EVD_VECTORS_DIR "proto/vectors"
#endif

static const char *vectors_dir(void) {
  const char *d = getenv("EVD_VECTORS_DIR");
  return d != NULL ? d : EVD_VECTORS_DIR;
}

/* ---- vectors -------------------------------------------------------- */

static void expect_u32_array(const char *where, json_t *want,
                             const uint32_t *got, uint32_t n) {
  size_t i;

  ck_assert_msg(json_is_array(want), "%s: expected an array", where);
  ck_assert_msg(json_array_size(want) == n, "%s: %zu entries expected, got %u",
                where, json_array_size(want), n);
  for (i = 0; i < n; i++) {
    json_int_t v = json_integer_value(json_array_get(want, i));
    ck_assert_msg((json_int_t)got[i] == v,
                  "%s[%zu]: expected %" JSON_INTEGER_FORMAT ", got %" PRIu32,
                  where, i, v, got[i]);
  }
}

/* Validates a step op's positions the way a step request is validated:
 * returns NULL when they may be applied, else the expected error code. */
static const char *positions_error(json_t *list) {
  size_t i, n = json_array_size(list);
  json_int_t prev = -1;

  for (i = 0; i < n; i++) {
    json_t *p = json_array_get(list, i);
    json_int_t v;
    if (!json_is_integer(p))
      return "invalid_position";
    v = json_integer_value(p);
    if (v < 0 || v > (json_int_t)UINT32_MAX || (i > 0 && v <= prev))
      return "invalid_position";
    prev = v;
  }
  return NULL;
}

/* The API's error code for a window's refusal of an op. */
static const char *code_of(int err, int evict) {
  switch (err) {
  case EVD_ESTALE: return "stale_position";
  case EVD_EBUSY: return "tentative_pending";
  case EVD_EFULL: return "too_many_positions";
  case EVD_EINVAL: return evict ? "invalid_budget" : "invalid_position";
  }
  return "?";
}

/* Replays plain lookahead-1 steps position by position through
 * evd_window_advance (1) or step + evict (0); everything else goes through
 * evd_window_commit and evd_window_steps. */
static int use_advance;

/* The sessions of one vector: the main one ("") and its forks. */
typedef struct {
  char name[64];
  evd_window_t *w;
} vsess_t;

typedef struct {
  vsess_t s[16];
  int n;
} vset_t;

static evd_window_t *copy_of(const evd_window_t *w) {
  size_t size = evd_window_footprint(w->budget, evd_window_lookahead(w));
  evd_window_t *c = malloc(size);

  ck_assert_ptr_nonnull(c);
  memcpy(c, w, size);
  return c;
}

/* Applies one op to w (a scratch copy); returns 0 or the window's error,
 * with the answer's arrays filled. */
typedef struct {
  uint32_t *victims, *gone, *slots, nv, ng, n;
} answer_t;

static int apply_op(evd_window_t *w, json_t *op, answer_t *a) {
  json_t *list = json_object_get(op, "step");
  size_t i;
  int err = 0;

  a->nv = a->ng = a->n = 0;
  if (json_object_get(op, "truncate") != NULL)
    return evd_window_truncate(
        w, (uint32_t)json_integer_value(json_object_get(op, "truncate")),
        a->gone, &a->ng);
  if (json_object_get(op, "evict") != NULL) {
    json_int_t b = json_integer_value(json_object_get(op, "evict"));
    if (b < 1 || b > (json_int_t)UINT32_MAX)
      return EVD_EINVAL;
    return evd_window_evict(w, (uint32_t)b, a->victims, evd_window_size(w),
                            &a->nv);
  }
  if (json_object_get(op, "commit") != NULL) {
    json_int_t c = json_integer_value(json_object_get(op, "commit"));
    if (c < 0 || c > (json_int_t)UINT32_MAX)
      return EVD_EINVAL;
    err = evd_window_commit(w, (uint32_t)c, a->gone, &a->ng, a->victims,
                            &a->nv);
    if (err != 0 || list == NULL)
      return err;
  }
  a->n = (uint32_t)json_array_size(list);
  for (i = 0; i < a->n; i++)
    a->slots[i] = (uint32_t)json_integer_value(json_array_get(list, i));
  if (evd_window_lookahead(w) == 1 && !json_is_true(json_object_get(op,
      "tentative")) && json_object_get(op, "commit") == NULL) {
    /* Position by position, as before lookahead existed. */
    for (i = 0; i < a->n; i++) {
      uint32_t p = a->slots[i], k = 0;
      if (use_advance) {
        int r = evd_window_advance(w, p, &a->slots[i], a->victims + a->nv);
        if (r < 0)
          return r;
        a->nv += (uint32_t)r;
        continue;
      }
      err = evd_window_step(w, p, NULL, 0, &a->slots[i]);
      if (err != 0)
        return err;
      ck_assert_int_eq(evd_window_evict(w, w->budget, a->victims + a->nv,
                                        evd_window_size(w), &k), 0);
      a->nv += k;
    }
    return 0;
  }
  {
    uint32_t k = 0;
    uint32_t *pos = malloc((a->n + 1) * sizeof *pos);
    ck_assert_ptr_nonnull(pos);
    memcpy(pos, a->slots, a->n * sizeof *pos);
    err = evd_window_steps(w, pos, a->n,
                           json_is_true(json_object_get(op, "tentative")),
                           a->slots, a->victims + a->nv, &k);
    free(pos);
    a->nv += k;
    return err;
  }
}

static void replay_op(vset_t *vs, json_t *op, const char *where) {
  const char *name = json_string_value(json_object_get(op, "session"));
  json_t *want_err = json_object_get(op, "error"), *list;
  evd_window_t *w = NULL, *c;
  const char *err = NULL;
  answer_t a;
  size_t cap;
  int i, r;

  for (i = 0; i < vs->n; i++)
    if (strcmp(vs->s[i].name, name != NULL ? name : "") == 0)
      w = vs->s[i].w;
  ck_assert_msg(w != NULL, "%s: no session %s", where, name);
  if (json_object_get(op, "fork") != NULL) {
    ck_assert_int_lt(vs->n, 16);
    snprintf(vs->s[vs->n].name, sizeof vs->s[vs->n].name, "%s",
             json_string_value(json_object_get(op, "fork")));
    vs->s[vs->n++].w = copy_of(w);
    return;
  }
  list = json_object_get(op, "step");
  if (list != NULL)
    err = json_array_size(list) == 0 && json_object_get(op, "commit") == NULL
              ? "invalid_position" /* a step of nothing, not a commit */
              : positions_error(list);
  cap = evd_window_size(w) + json_array_size(list) + w->budget + 8;
  a.victims = calloc(cap, sizeof(uint32_t));
  a.gone = calloc(cap, sizeof(uint32_t));
  a.slots = calloc(cap, sizeof(uint32_t));
  ck_assert(a.victims != NULL && a.gone != NULL && a.slots != NULL);
  c = copy_of(w); /* a refused op must leave the session as it was */
  if (err == NULL) {
    r = apply_op(c, op, &a);
    if (r != 0)
      err = code_of(r, json_object_get(op, "evict") != NULL);
  }
  if (err != NULL || want_err != NULL) {
    ck_assert_msg(want_err != NULL && err != NULL &&
                      strcmp(err, json_string_value(want_err)) == 0,
                  "%s: error %s, vector says %s", where, err ? err : "none",
                  want_err ? json_string_value(want_err) : "none");
  } else {
    memcpy(w, c, evd_window_footprint(w->budget, evd_window_lookahead(w)));
    if (json_object_get(op, "truncate") != NULL) {
      expect_u32_array(where, json_object_get(op, "removed"), a.gone, a.ng);
    } else {
      expect_u32_array(where, json_object_get(op, "victims"), a.victims,
                       a.nv);
      if (json_object_get(op, "dropped") != NULL)
        expect_u32_array(where, json_object_get(op, "dropped"), a.gone, a.ng);
      if (list != NULL)
        expect_u32_array(where, json_object_get(op, "slots"), a.slots, a.n);
    }
    ck_assert_int_eq(evd_window_size(w),
                     json_integer_value(json_object_get(op, "size")));
    if (json_object_get(op, "newest") != NULL)
      ck_assert_int_eq(evd_window_newest(w),
                       json_integer_value(json_object_get(op, "newest")));
  }
  free(c);
  free(a.victims);
  free(a.gone);
  free(a.slots);
}

static void replay_check(vset_t *vs, json_t *op, const char *where) {
  const char *name = json_string_value(json_object_get(op, "session"));
  json_t *check = json_object_get(op, "check"), *want;
  evd_window_t *w = NULL;
  uint32_t i, n, t, *kept, *slots;
  int k;

  for (k = 0; k < vs->n; k++)
    if (strcmp(vs->s[k].name, name != NULL ? name : "") == 0)
      w = vs->s[k].w;
  ck_assert_msg(w != NULL, "%s: no session %s", where, name);
  n = evd_window_size(w);
  t = evd_window_tentative(w);
  kept = calloc(n + 1, sizeof *kept);
  slots = calloc(n + 1, sizeof *slots);
  ck_assert_ptr_nonnull(kept);
  ck_assert_ptr_nonnull(slots);
  for (i = 0; i < n; i++)
    kept[i] = evd_window_at(w, i, &slots[i]);
  expect_u32_array(where, json_object_get(check, "kept"), kept, n);
  expect_u32_array(where, json_object_get(check, "slots"), slots, n);
  if ((want = json_object_get(check, "tentative")) != NULL)
    expect_u32_array(where, want, kept + n - t, t);
  if ((want = json_object_get(check, "newest")) != NULL)
    ck_assert_int_eq(evd_window_newest(w), json_integer_value(want));
  free(kept);
  free(slots);
}

static int replay_file(const char *path) {
  json_error_t jerr;
  json_t *vec = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
  json_t *ops, *op, *la;
  vset_t vs = {.n = 1};
  size_t i;
  char where[4200];
  int k;

  ck_assert_msg(vec != NULL, "%s: %s", path, jerr.text);
  la = json_object_get(vec, "lookahead");
  ck_assert_int_eq(
      evd_window_new(&vs.s[0].w,
                     (uint32_t)json_integer_value(json_object_get(vec, "budget")),
                     (uint32_t)json_integer_value(json_object_get(vec, "sinks")),
                     la != NULL ? (uint32_t)json_integer_value(la) : 1, NULL),
      0);
  ops = json_object_get(vec, "ops");
  ck_assert_msg(json_array_size(ops) > 0, "%s: no ops", path);
  json_array_foreach(ops, i, op) {
    snprintf(where, sizeof where, "%s op %zu", path, i);
    if (json_object_get(op, "check") != NULL)
      replay_check(&vs, op, where);
    else
      replay_op(&vs, op, where);
  }
  for (k = 0; k < vs.n; k++)
    evd_window_free(vs.s[k].w);
  json_decref(vec);
  return 1;
}

/* _i is 0 for step + evict, 1 for the fused evd_window_advance (for the
 * plain lookahead-1 steps; the rest always go through steps/commit). */
START_TEST(vectors_all_replay) {
  DIR *d = opendir(vectors_dir());
  struct dirent *e;
  int files = 0;
  char path[4096];

  use_advance = _i;
  ck_assert_msg(d != NULL, "cannot open %s", vectors_dir());
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0)
      continue;
    snprintf(path, sizeof path, "%s/%s", vectors_dir(), e->d_name);
    files += replay_file(path);
  }
  closedir(d);
  /* The issue names seven kinds of vector; losing files must fail. */
  ck_assert_int_ge(files, 10);
}
END_TEST

static Suite *window_suite(void) {
  Suite *s = suite_create("window");
  TCase *tc = tcase_create("core");

  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, vectors_all_replay, 0, 2);
  window_edge_tests(tc);
  window_model_tests(tc);        /* step and evict against a plain array */
  window_engine_tests(tc);       /* lookahead, drafts, truncate, primitives */
  window_engine_model_tests(tc); /* every engine operation against a model */
  window_state_tests(tc);        /* windows built in a given state */
  suite_add_tcase(s, tc);
  return s;
}

EVD_CHECK_MAIN(window_suite())
