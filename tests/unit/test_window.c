/* Unit tests of the sliding-window policy: the vectors in proto/vectors
 * (and proto/vectors/rehome: adoptions built with evd_window_build,
 * expect_newest against the window's newest) replayed here; edge cases, engine operations, the randomized model
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
  uint32_t page_size; /* the window has none: answers' pages come from it */
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

/* The u32 entries of a vector's list into *out (malloc'd); 0 when one is
 * not an integer in 0..UINT32_MAX. */
static int u32_list(json_t *list, uint32_t **out, uint32_t *n) {
  size_t i;
  json_t *v;

  *n = (uint32_t)json_array_size(list);
  *out = calloc(*n + 1, sizeof **out);
  ck_assert_ptr_nonnull(*out);
  json_array_foreach(list, i, v) {
    json_int_t x = json_integer_value(v);
    if (!json_is_integer(v) || x < 0 || x > (json_int_t)UINT32_MAX)
      return 0;
    (*out)[i] = (uint32_t)x;
  }
  return 1;
}

/* An adopt op: the state checked and built by the window (pages checked
 * here, as the API does), the session table's answers (a resend, an
 * existing session, a replacement) played on the vector's sessions. */
static void replay_adopt(vset_t *vs, json_t *op, const char *where) {
  const char *name = json_string_value(json_object_get(op, "session"));
  json_t *b = json_object_get(op, "adopt"), *pages = json_object_get(b,
                                                                  "pages");
  json_t *want_err = json_object_get(op, "error");
  uint32_t budget = (uint32_t)json_integer_value(json_object_get(b, "budget"));
  uint32_t sinks = (uint32_t)json_integer_value(json_object_get(b, "sinks"));
  uint32_t la = (uint32_t)json_integer_value(json_object_get(b, "lookahead"));
  uint32_t ps = (uint32_t)json_integer_value(json_object_get(b, "page_size"));
  uint32_t *kept, *slots = NULL, *pg = NULL, n, ns = 0, np = 0, i, at, k;
  json_int_t newest = json_integer_value(json_object_get(b, "newest"));
  evd_window_state_t st;
  evd_window_rule_t rule;
  vsess_t *old = NULL;
  evd_window_t *w;
  const char *err = NULL;
  int j;

  for (j = 0; j < vs->n; j++)
    if (strcmp(vs->s[j].name, name != NULL ? name : "") == 0)
      old = &vs->s[j];
  if (!u32_list(json_object_get(b, "kept"), &kept, &n) || newest < 0 ||
      newest > (json_int_t)UINT32_MAX)
    err = "invalid_position";
  st = (evd_window_state_t){.kept = kept, .n = n, .newest = (uint32_t)newest};
  if (err == NULL && json_object_get(b, "slots") != NULL) {
    if (!u32_list(json_object_get(b, "slots"), &slots, &ns) || ns != n)
      err = "invalid_state";
    st.slots = slots;
  }
  if (err == NULL && evd_window_check(budget, sinks, la, &st, &rule, &at) != 0)
    err = "invalid_state";
  if (err == NULL && pages != NULL) {
    /* The pages of the positions held, each once, ascending. */
    if (!u32_list(pages, &pg, &np))
      err = "invalid_state";
    for (i = 0, k = 0; err == NULL && i < n; i++) {
      if (ps == 0 || (i > 0 && kept[i] / ps == kept[i - 1] / ps))
        continue;
      if (k >= np || pg[k++] != kept[i] / ps)
        err = "invalid_state";
    }
    if (err == NULL && k != np)
      err = "invalid_state";
  }
  if (err == NULL && old != NULL) {
    int same = old->w->budget == budget && old->w->sinks == sinks &&
               evd_window_lookahead(old->w) == la && old->page_size == ps &&
               evd_window_is_state(old->w, &st);
    if (!same && !json_is_true(json_object_get(b, "replace")))
      err = "session_exists";
    else if (same)
      goto answer; /* a resend: nothing changes */
  }
  if (err != NULL || want_err != NULL) {
    ck_assert_msg(want_err != NULL && err != NULL &&
                      strcmp(err, json_string_value(want_err)) == 0,
                  "%s: error %s, vector says %s", where, err ? err : "none",
                  want_err ? json_string_value(want_err) : "none");
    goto done;
  }
  ck_assert_int_eq(evd_window_new(&w, budget, sinks, la, NULL), 0);
  ck_assert_int_eq(evd_window_build(w, &st, &rule, &at), 0);
  if (old == NULL) {
    ck_assert_int_lt(vs->n, 16);
    old = &vs->s[vs->n++];
    snprintf(old->name, sizeof old->name, "%s", name);
  } else {
    evd_window_free(old->w);
  }
  old->w = w;
  old->page_size = ps;
answer:
  ck_assert_msg(want_err == NULL, "%s: accepted, vector says %s", where,
                json_string_value(want_err));
  {
    uint32_t *got = calloc(n + 1, sizeof *got);
    ck_assert_ptr_nonnull(got);
    ck_assert_int_eq(json_integer_value(json_object_get(op, "budget")),
                     budget);
    ck_assert_int_eq(json_integer_value(json_object_get(op, "sinks")), sinks);
    ck_assert_int_eq(evd_window_size(old->w),
                     json_integer_value(json_object_get(op, "size")));
    ck_assert_int_eq(evd_window_newest(old->w),
                     json_integer_value(json_object_get(op, "newest")));
    for (i = 0; i < n; i++)
      ck_assert_uint_eq(evd_window_at(old->w, i, &got[i]), kept[i]);
    expect_u32_array(where, json_object_get(op, "kept"), kept, n);
    expect_u32_array(where, json_object_get(op, "slots"), got, n);
    free(got);
  }
done:
  free(kept);
  free(slots);
  free(pg);
}

/* The error of an op whose expect_newest is not the window's newest. */
static const char *diverged(const evd_window_t *w, json_t *op) {
  json_t *e = json_object_get(op, "expect_newest");

  return e != NULL && json_integer_value(e) != (json_int_t)evd_window_newest(w)
             ? "diverged"
             : NULL;
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
    err = diverged(w, op);
    ck_assert_msg((err == NULL) == (want_err == NULL), "%s: error %s, "
                  "vector says %s", where, err ? err : "none",
                  want_err ? json_string_value(want_err) : "none");
    if (err != NULL)
      return;
    ck_assert_int_lt(vs->n, 16);
    snprintf(vs->s[vs->n].name, sizeof vs->s[vs->n].name, "%s",
             json_string_value(json_object_get(op, "fork")));
    for (i = 0; i < vs->n; i++)
      if (vs->s[i].w == w)
        vs->s[vs->n].page_size = vs->s[i].page_size;
    vs->s[vs->n++].w = copy_of(w);
    return;
  }
  list = json_object_get(op, "step");
  err = diverged(w, op);
  if (err == NULL && list != NULL)
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
  vs.s[0].page_size =
      (uint32_t)json_integer_value(json_object_get(vec, "page_size"));
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
    else if (json_object_get(op, "adopt") != NULL)
      replay_adopt(&vs, op, where);
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
static int replay_dir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int files = 0;
  char path[4096];

  ck_assert_msg(d != NULL, "cannot open %s", dir);
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0)
      continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    files += replay_file(path);
  }
  closedir(d);
  return files;
}

START_TEST(vectors_all_replay) {
  char rehome[4096];

  use_advance = _i;
  /* The issue names seven kinds of vector; losing files must fail. */
  ck_assert_int_ge(replay_dir(vectors_dir()), 10);
  snprintf(rehome, sizeof rehome, "%s/rehome", vectors_dir());
  ck_assert_int_ge(replay_dir(rehome), 4);
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
