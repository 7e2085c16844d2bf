/* Unit tests of the sliding-window policy: the vectors in proto/vectors,
 * edge cases, and a randomized check against a plain-array model. */
#include <check.h>
#include <dirent.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evictd/window.h"
#include "check_main.h"

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

/* ---- edge cases ----------------------------------------------------- */

START_TEST(budget_zero_refused) {
  evd_window_t *w = NULL;
  ck_assert_int_eq(evd_window_new(&w, 0, 0, 1, NULL), EVD_EINVAL);
  ck_assert_ptr_null(w);
}
END_TEST

START_TEST(sinks_must_be_below_budget) {
  evd_window_t *w = NULL;
  ck_assert_int_eq(evd_window_new(&w, 4, 4, 1, NULL), EVD_EINVAL);
  ck_assert_int_eq(evd_window_new(&w, 4, 9, 1, NULL), EVD_EINVAL);
  ck_assert_ptr_null(w);
  ck_assert_int_eq(evd_window_new(&w, 4, 3, 1, NULL), 0);
  evd_window_free(w);
}
END_TEST

START_TEST(budget_above_max_refused) {
  evd_window_t *w = NULL;
  ck_assert_int_eq(evd_window_new(&w, UINT32_MAX, 0, 1, NULL), EVD_EINVAL);
  ck_assert_ptr_null(w);
}
END_TEST

START_TEST(footprint_is_budget_plus_one_slots) {
  /* The design card: 2,052 bytes of ring at budget 512, plus the struct. */
  ck_assert_uint_eq(evd_window_footprint(512, 1) - sizeof(evd_window_t), 2052);
  ck_assert_uint_eq(evd_window_footprint(1, 1) - sizeof(evd_window_t), 8);
}
END_TEST

START_TEST(start_state_holds_position_zero) {
  evd_window_t *w;
  uint32_t slot = 99;

  ck_assert_int_eq(evd_window_new(&w, 512, 4, 1, NULL), 0);
  ck_assert_uint_eq(evd_window_size(w), 1);
  ck_assert_uint_eq(evd_window_newest(w), 0);
  ck_assert_uint_eq(evd_window_at(w, 0, &slot), 0);
  ck_assert_uint_eq(slot, 0);
  ck_assert_int_eq(evd_window_step(w, 0, NULL, 0, &slot), EVD_ESTALE);
  evd_window_free(w);
}
END_TEST

START_TEST(budget_one_keeps_only_newest) {
  evd_window_t *w;
  uint32_t slot, v[2], n, p;

  ck_assert_int_eq(evd_window_new(&w, 1, 0, 1, NULL), 0);
  for (p = 1; p <= 1000; p++) {
    ck_assert_int_eq(evd_window_step(w, p, NULL, 0, &slot), 0);
    ck_assert_uint_eq(slot, p % 2);
    ck_assert_int_eq(evd_window_evict(w, 1, v, 2, &n), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(v[0], p - 1);
    ck_assert_uint_eq(evd_window_size(w), 1);
  }
  evd_window_free(w);
}
END_TEST

START_TEST(step_when_full_refused_unchanged) {
  evd_window_t *w;
  uint32_t slot = 7, p;

  ck_assert_int_eq(evd_window_new(&w, 3, 0, 1, NULL), 0);
  for (p = 1; p <= 3; p++)
    ck_assert_int_eq(evd_window_step(w, p, NULL, 0, &slot), 0);
  /* budget + 1 = 4 positions held: the ring has no free slot left. */
  slot = 77;
  ck_assert_int_eq(evd_window_step(w, 4, NULL, 0, &slot), EVD_EFULL);
  ck_assert_uint_eq(slot, 77);
  ck_assert_uint_eq(evd_window_size(w), 4);
  ck_assert_uint_eq(evd_window_newest(w), 3);
  evd_window_free(w);
}
END_TEST

START_TEST(advance_refuses_full_window_unchanged) {
  evd_window_t *w;
  uint32_t slot = 7, victim = 8, p;

  ck_assert_int_eq(evd_window_new(&w, 3, 1, 1, NULL), 0);
  for (p = 1; p <= 3; p++)
    ck_assert_int_eq(evd_window_step(w, p, NULL, 0, &slot), 0);
  slot = 7;
  ck_assert_int_eq(evd_window_advance(w, 4, &slot, &victim), EVD_EFULL);
  ck_assert_uint_eq(slot, 7);
  ck_assert_uint_eq(victim, 8);
  ck_assert_uint_eq(evd_window_newest(w), 3);
  ck_assert_uint_eq(evd_window_size(w), 4);
  evd_window_free(w);
}
END_TEST

START_TEST(max_position_then_everything_stale) {
  evd_window_t *w;
  uint32_t slot, v[3], n;

  ck_assert_int_eq(evd_window_new(&w, 2, 0, 1, NULL), 0);
  ck_assert_int_eq(evd_window_step(w, UINT32_MAX, NULL, 0, &slot), 0);
  ck_assert_uint_eq(evd_window_newest(w), UINT32_MAX);
  ck_assert_int_eq(evd_window_step(w, UINT32_MAX, NULL, 0, &slot), EVD_ESTALE);
  ck_assert_int_eq(evd_window_step(w, 5, NULL, 0, &slot), EVD_ESTALE);
  ck_assert_int_eq(evd_window_evict(w, 1, v, 3, &n), 0);
  ck_assert_uint_eq(n, 1);
  ck_assert_uint_eq(v[0], 0);
  ck_assert_uint_eq(evd_window_at(w, 0, NULL), UINT32_MAX);
  evd_window_free(w);
}
END_TEST

START_TEST(non_increasing_position_refused) {
  evd_window_t *w;
  uint32_t slot;

  ck_assert_int_eq(evd_window_new(&w, 8, 0, 1, NULL), 0);
  ck_assert_int_eq(evd_window_step(w, 10, NULL, 0, &slot), 0);
  ck_assert_int_eq(evd_window_step(w, 10, NULL, 0, &slot), EVD_ESTALE);
  ck_assert_int_eq(evd_window_step(w, 9, NULL, 0, &slot), EVD_ESTALE);
  ck_assert_uint_eq(evd_window_size(w), 2);
  ck_assert_int_eq(evd_window_step(w, 11, NULL, 0, &slot), 0);
  evd_window_free(w);
}
END_TEST

START_TEST(sinks_budget_minus_one_never_loses_pins) {
  evd_window_t *w;
  uint32_t slot, v[4], n, p, i;

  ck_assert_int_eq(evd_window_new(&w, 4, 3, 1, NULL), 0);
  for (p = 1; p < 500; p++) {
    ck_assert_int_eq(evd_window_step(w, p, NULL, 0, &slot), 0);
    ck_assert_int_eq(evd_window_evict(w, 4, v, 4, &n), 0);
    for (i = 0; i < 3 && i < evd_window_size(w); i++)
      ck_assert_uint_eq(evd_window_at(w, i, NULL), i);
  }
  ck_assert_int_eq(evd_window_evict(w, 3, v, 4, &n), EVD_EINVAL);
  ck_assert_uint_eq(evd_window_size(w), 4);
  evd_window_free(w);
}
END_TEST

START_TEST(evict_with_small_buffer_refused_unchanged) {
  evd_window_t *w;
  uint32_t slot, v[8], n = 99, p;

  ck_assert_int_eq(evd_window_new(&w, 8, 0, 1, NULL), 0);
  for (p = 1; p <= 8; p++)
    ck_assert_int_eq(evd_window_step(w, p, NULL, 0, &slot), 0);
  ck_assert_int_eq(evd_window_evict(w, 2, v, 6, &n), EVD_EINVAL);
  ck_assert_uint_eq(n, 99);
  ck_assert_uint_eq(evd_window_size(w), 9);
  ck_assert_int_eq(evd_window_evict(w, 2, v, 7, &n), 0);
  ck_assert_uint_eq(n, 7);
  evd_window_free(w);
}
END_TEST

START_TEST(attention_is_never_read) {
  evd_window_t *w;
  uint32_t slot;
  /* A pointer that must not be dereferenced: any read would crash or be
   * flagged by the sanitizers. */
  const float *poison = (const float *)(uintptr_t)0x10;

  ck_assert_int_eq(evd_window_new(&w, 4, 0, 1, NULL), 0);
  ck_assert_int_eq(evd_window_step(w, 1, poison, 1u << 30, &slot), 0);
  evd_window_free(w);
}
END_TEST

START_TEST(init_in_caller_memory) {
  union {
    evd_window_t w;
    unsigned char bytes[sizeof(evd_window_t) + 6 * sizeof(uint32_t)];
  } mem;
  uint32_t slot;

  ck_assert_uint_eq(evd_window_footprint(5, 1), sizeof mem.bytes);
  memset(&mem, 0xab, sizeof mem);
  ck_assert_int_eq(evd_window_init(&mem.w, 0, 0, 1, NULL), EVD_EINVAL);
  ck_assert_int_eq(evd_window_init(&mem.w, 5, 0, 1, NULL), 0);
  ck_assert_int_eq(evd_window_step(&mem.w, 3, NULL, 0, &slot), 0);
  ck_assert_uint_eq(slot, 1);
}
END_TEST

/* ---- randomized model check ----------------------------------------- */

/* The reference: positions and slots in a plain array, oldest first, slots
 * handed out by a counter. No ring arithmetic is shared with window.c. */
typedef struct {
  uint32_t budget, sinks, npinned, next_rr, newest, n;
  uint32_t pos[64], slot[64];
} model_t;

static void model_init(model_t *m, uint32_t budget, uint32_t sinks) {
  memset(m, 0, sizeof *m);
  m->budget = budget;
  m->sinks = sinks;
  m->n = 1; /* position 0 in slot 0 */
  m->npinned = sinks > 0;
  m->next_rr = sinks > 0 ? sinks : 1;
}

/* Appends p and returns the slot the model hands it. */
static uint32_t model_push(model_t *m, uint32_t p) {
  uint32_t ms;

  if (m->npinned < m->sinks) {
    ms = m->npinned++;
  } else {
    ms = m->next_rr;
    m->next_rr = ms == m->budget ? m->sinks : ms + 1;
  }
  m->pos[m->n] = p;
  m->slot[m->n] = ms;
  m->n++;
  m->newest = p;
  return ms;
}

/* Removes and returns the oldest unpinned position, which sits right after
 * the pinned ones. */
static uint32_t model_pop(model_t *m) {
  uint32_t at = m->npinned, p = m->pos[at];

  memmove(&m->pos[at], &m->pos[at + 1], (m->n - at - 1) * sizeof(uint32_t));
  memmove(&m->slot[at], &m->slot[at + 1], (m->n - at - 1) * sizeof(uint32_t));
  m->n--;
  return p;
}

static uint64_t rng_next(uint64_t *s) {
  /* splitmix64: a fixed, well-known mixing sequence. */
  uint64_t z = (*s += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

START_TEST(random_ops_match_plain_array_model) {
  const char *env = getenv("EVD_SEED");
  uint64_t seed = env != NULL ? strtoull(env, NULL, 0) : 20261202u;
  uint64_t s = seed;
  evd_window_t *w = NULL;
  model_t m;
  long op;
  uint32_t v[64], nv, slot, i;

  for (op = 0; op < 100000; op++) {
    uint64_t r = rng_next(&s);
    if (op % 5000 == 0) { /* a fresh session every so often */
      uint32_t budget = 1 + (uint32_t)(r % 40), sinks = (uint32_t)(r >> 8) % 5;
      if (sinks >= budget)
        sinks = 0;
      evd_window_free(w);
      ck_assert_int_eq(evd_window_new(&w, budget, sinks, 1, NULL), 0);
      model_init(&m, budget, sinks);
      continue;
    }
    switch (r % 8) {
    case 0: case 1: case 2: case 3: case 4: { /* step */
      uint32_t gap = (r >> 8) % 16 == 0 ? (uint32_t)(r >> 16) % 1000 : 1;
      uint32_t p = m.newest + gap;
      int want, got;
      if ((r >> 40) % 50 == 0)
        p = m.newest - (uint32_t)((r >> 48) % 3); /* stale on purpose */
      if (p < m.newest) /* wrapped past 2^32: a stale position too */
        p = m.newest;
      want = p <= m.newest ? EVD_ESTALE : m.n > m.budget ? EVD_EFULL : 0;
      /* Half the steps that evict right away go through the fused call. */
      if ((r >> 56) % 4 != 0 && (r >> 60) % 2 == 0) {
        uint32_t victim;
        int a = evd_window_advance(w, p, &slot, &victim);
        got = a > 0 ? 0 : a;
        if (want == 0) {
          uint32_t ms = model_push(&m, p);
          ck_assert_msg(slot == ms, "seed %" PRIu64 " op %ld: slot %u, model "
                        "%u", seed, op, slot, ms);
          ck_assert_msg(a == (m.n > m.budget),
                        "seed %" PRIu64 " op %ld: advance %d", seed, op, a);
          if (a == 1) {
            uint32_t mv = model_pop(&m);
            ck_assert_msg(victim == mv, "seed %" PRIu64 " op %ld: advance "
                          "victim %u, model %u", seed, op, victim, mv);
          }
        }
        ck_assert_msg(got == want, "seed %" PRIu64 " op %ld: advance %u -> "
                      "%d, model %d", seed, op, p, got, want);
        break;
      }
      got = evd_window_step(w, p, NULL, 0, &slot);
      ck_assert_msg(got == want, "seed %" PRIu64 " op %ld: step %u -> %d, "
                    "model %d", seed, op, p, got, want);
      if (want == 0) {
        uint32_t ms = model_push(&m, p);
        ck_assert_msg(slot == ms, "seed %" PRIu64 " op %ld: slot %u, model %u",
                      seed, op, slot, ms);
      }
      /* Usually evict to the session budget right away, as the API does;
       * sometimes not, so that the full-window refusal gets exercised. */
      if ((r >> 56) % 4 == 0)
        break;
    } /* fall through */
    case 5: case 6: { /* evict, sometimes below the budget or invalid */
      uint32_t b = (r >> 20) % 4 == 0 ? (uint32_t)(r >> 24) % (m.budget + 3)
                                      : m.budget;
      int got = evd_window_evict(w, b, v, 64, &nv);
      if (b == 0 || b <= m.sinks) {
        ck_assert_msg(got == EVD_EINVAL, "seed %" PRIu64 " op %ld", seed, op);
        break;
      }
      ck_assert_msg(got == 0, "seed %" PRIu64 " op %ld: %d", seed, op, got);
      for (i = 0; m.n > b; i++) {
        uint32_t mv = model_pop(&m);
        ck_assert_msg(i < nv && v[i] == mv, "seed %" PRIu64 " op %ld: victim "
                      "%u", seed, op, i);
      }
      ck_assert_msg(i == nv, "seed %" PRIu64 " op %ld: %u victims, model %u",
                    seed, op, nv, i);
      break;
    }
    case 7: /* full view */
      ck_assert_msg(evd_window_size(w) == m.n, "seed %" PRIu64 " op %ld", seed,
                    op);
      ck_assert_uint_eq(evd_window_newest(w), m.newest);
      for (i = 0; i < m.n; i++) {
        ck_assert_msg(evd_window_at(w, i, &slot) == m.pos[i] &&
                          slot == m.slot[i],
                      "seed %" PRIu64 " op %ld: entry %u", seed, op, i);
      }
      break;
    }
  }
  evd_window_free(w);
}
END_TEST


/* ---- engine operations: lookahead, drafts, commit, truncate ----------- */

START_TEST(chunk_longer_than_budget_uses_lookahead_slots) {
  /* Budget 8, lookahead 16: one request of 16 positions is one sub-step,
   * so all 16 take distinct slots and then 0..8 are evicted together. */
  evd_window_t *w;
  uint32_t pos[16], slots[16], victims[16], nv, i;

  ck_assert_int_eq(evd_window_new(&w, 8, 0, 16, NULL), 0);
  ck_assert_uint_eq(evd_window_lookahead(w), 16);
  for (i = 0; i < 16; i++)
    pos[i] = i + 1;
  ck_assert_int_eq(evd_window_steps(w, pos, 16, 0, slots, victims, &nv), 0);
  for (i = 0; i < 16; i++)
    ck_assert_uint_eq(slots[i], i + 1);
  ck_assert_uint_eq(nv, 9);
  for (i = 0; i < 9; i++)
    ck_assert_uint_eq(victims[i], i);
  ck_assert_uint_eq(evd_window_size(w), 8);
  ck_assert_uint_eq(evd_window_at(w, 0, NULL), 9);
  /* The next position takes slot 17, the one after the newest. */
  ck_assert_int_eq(evd_window_advance(w, 17, &slots[0], &victims[0]), 1);
  ck_assert_uint_eq(slots[0], 17);
  ck_assert_uint_eq(victims[0], 9);
  evd_window_free(w);
}
END_TEST

START_TEST(lookahead_one_sub_steps_are_single_steps) {
  /* At lookahead 1 a request of many positions is exactly one step per
   * position (today's behaviour); at lookahead 4 the victims are the same
   * and only the slots differ. */
  evd_window_t *a, *b;
  uint32_t pos[10], sa[10], sb[10], va[10], vb[10], na, nb, i;

  ck_assert_int_eq(evd_window_new(&a, 3, 1, 1, NULL), 0);
  ck_assert_int_eq(evd_window_new(&b, 3, 1, 4, NULL), 0);
  for (i = 0; i < 10; i++)
    pos[i] = 2 * i + 1;
  ck_assert_int_eq(evd_window_steps(a, pos, 10, 0, sa, va, &na), 0);
  ck_assert_int_eq(evd_window_steps(b, pos, 10, 0, sb, vb, &nb), 0);
  ck_assert_uint_eq(na, nb);
  ck_assert_mem_eq(va, vb, na * sizeof va[0]);
  ck_assert_uint_eq(evd_window_size(a), 3);
  ck_assert_uint_eq(evd_window_size(b), 3);
  for (i = 0; i < 10; i++) {
    ck_assert_uint_ge(sa[i], 1);
    ck_assert_uint_le(sa[i], 3);  /* ring slots 1..budget */
    ck_assert_uint_le(sb[i], 6);  /* ring slots 1..budget + 3 */
  }
  evd_window_free(a);
  evd_window_free(b);
}
END_TEST

START_TEST(drafts_then_partial_commit) {
  evd_window_t *w;
  uint32_t pos[4] = {9, 10, 11, 12}, slots[4], v[8], d[8], nv, nd, i, slot;

  ck_assert_int_eq(evd_window_new(&w, 4, 0, 4, NULL), 0);
  for (i = 1; i <= 8; i++)
    ck_assert_int_ge(evd_window_advance(w, i, &slot, &v[0]), 0);
  ck_assert_int_eq(evd_window_steps(w, pos, 4, 1, slots, v, &nv), 0);
  ck_assert_uint_eq(nv, 0); /* drafts evict nothing */
  ck_assert_uint_eq(evd_window_size(w), 8);
  ck_assert_uint_eq(evd_window_tentative(w), 4);
  ck_assert_uint_eq(evd_window_newest(w), 12);
  ck_assert_uint_eq(evd_window_committed(w), 8);
  /* No room for more drafts, no plain step, no eviction while pending. */
  ck_assert_int_eq(evd_window_steps(w, (uint32_t[]){13}, 1, 1, slots, v, &nv),
                   EVD_EFULL);
  ck_assert_int_eq(evd_window_steps(w, (uint32_t[]){13}, 1, 0, slots, v, &nv),
                   EVD_EBUSY);
  ck_assert_int_eq(evd_window_advance(w, 13, &slot, &v[0]), EVD_EBUSY);
  ck_assert_int_eq(evd_window_evict(w, 4, v, 8, &nv), EVD_EBUSY);
  ck_assert_int_eq(evd_window_commit(w, 7, d, &nd, v, &nv), EVD_EINVAL);
  ck_assert_uint_eq(evd_window_size(w), 8);
  /* Accept 9 and 10: 11 and 12 are dropped, then 5 and 6 evicted. */
  ck_assert_int_eq(evd_window_commit(w, 10, d, &nd, v, &nv), 0);
  ck_assert_uint_eq(nd, 2);
  ck_assert_uint_eq(d[0], 11);
  ck_assert_uint_eq(d[1], 12);
  ck_assert_uint_eq(nv, 2);
  ck_assert_uint_eq(v[0], 5);
  ck_assert_uint_eq(v[1], 6);
  ck_assert_uint_eq(evd_window_newest(w), 10);
  ck_assert_uint_eq(evd_window_tentative(w), 0);
  /* 11 may come again; its slot is the one the dropped 11 left. */
  ck_assert_int_eq(evd_window_advance(w, 11, &slot, &v[0]), 1);
  ck_assert_uint_eq(slot, slots[2]);
  /* Rejecting every draft leaves the committed newest. */
  ck_assert_int_eq(evd_window_steps(w, (uint32_t[]){20, 21}, 2, 1, slots, v,
                                    &nv), 0);
  ck_assert_int_eq(evd_window_commit(w, 11, d, &nd, v, &nv), 0);
  ck_assert_uint_eq(nd, 2);
  ck_assert_uint_eq(nv, 0);
  ck_assert_uint_eq(evd_window_newest(w), 11);
  evd_window_free(w);
}
END_TEST

START_TEST(truncate_into_the_sinks_repins) {
  evd_window_t *w;
  uint32_t r[16], slot, v, n, i;

  ck_assert_int_eq(evd_window_new(&w, 6, 4, 1, NULL), 0);
  for (i = 1; i <= 9; i++)
    ck_assert_int_ge(evd_window_advance(w, i, &slot, &v), 0);
  /* Held: 0 1 2 3 | 7 8 9 (budget 6... 4 pinned + 2 newest) */
  ck_assert_uint_eq(evd_window_size(w), 6);
  ck_assert_int_eq(evd_window_truncate(w, 0, r, &n), EVD_EINVAL);
  ck_assert_int_eq(evd_window_truncate(w, 100, r, &n), 0);
  ck_assert_uint_eq(n, 0);
  ck_assert_uint_eq(evd_window_newest(w), 9);
  ck_assert_int_eq(evd_window_truncate(w, 2, r, &n), 0);
  ck_assert_uint_eq(n, 4);
  ck_assert_uint_eq(r[0], 2);
  ck_assert_uint_eq(r[1], 3);
  ck_assert_uint_eq(r[2], 8);
  ck_assert_uint_eq(r[3], 9);
  ck_assert_uint_eq(evd_window_size(w), 2);
  ck_assert_uint_eq(evd_window_newest(w), 1);
  /* 2 and 3 are pinned again in slots 2 and 3; 4 starts the ring at the
   * first ring slot, 4. */
  ck_assert_int_eq(evd_window_advance(w, 2, &slot, &v), 0);
  ck_assert_uint_eq(slot, 2);
  ck_assert_int_eq(evd_window_advance(w, 3, &slot, &v), 0);
  ck_assert_uint_eq(slot, 3);
  ck_assert_int_eq(evd_window_advance(w, 4, &slot, &v), 0);
  ck_assert_uint_eq(slot, 4);
  /* Truncating everything (sinks 0) leaves an empty window. */
  evd_window_free(w);
  ck_assert_int_eq(evd_window_new(&w, 3, 0, 1, NULL), 0);
  for (i = 1; i <= 7; i++)
    ck_assert_int_ge(evd_window_advance(w, i, &slot, &v), 0);
  ck_assert_int_eq(evd_window_truncate(w, 1, r, &n), 0);
  ck_assert_uint_eq(n, 3);
  ck_assert_uint_eq(evd_window_size(w), 0);
  ck_assert_uint_eq(evd_window_newest(w), 0);
  ck_assert_int_eq(evd_window_holds(w, 0, UINT64_MAX), 0);
  ck_assert_int_eq(evd_window_evict(w, 3, r, 16, &n), 0);
  ck_assert_uint_eq(n, 0);
  ck_assert_int_eq(evd_window_advance(w, 1, &slot, &v), 0);
  ck_assert_uint_eq(slot, 0); /* slot `sinks` when nothing unpinned */
  ck_assert_uint_eq(evd_window_size(w), 1);
  evd_window_free(w);
}
END_TEST

START_TEST(restore_refuses_impossible_states) {
  evd_window_t *w;
  uint32_t slot, v, i;

  ck_assert_int_eq(evd_window_new(&w, 4, 1, 2, NULL), 0);
  for (i = 1; i <= 3; i++)
    ck_assert_int_ge(evd_window_advance(w, i, &slot, &v), 0);
  /* 0 | 1 2 3 in slots 0 | 1 2 3, head 1, tail 4 */
  ck_assert_int_eq(evd_window_restore(w, 4, 1, 4, 3, 0, 0), 0);
  ck_assert_int_eq(evd_window_restore(w, 4, 1, 4, 2, 0, 0), EVD_ECORRUPT);
  ck_assert_int_eq(evd_window_restore(w, 4, 1, 3, 3, 0, 0), EVD_ECORRUPT);
  ck_assert_int_eq(evd_window_restore(w, 7, 1, 4, 3, 0, 0), EVD_ECORRUPT);
  /* drafts: at most lookahead, above the committed newest */
  ck_assert_int_eq(evd_window_restore(w, 4, 1, 4, 3, 2, 1), 0);
  ck_assert_uint_eq(evd_window_committed(w), 1);
  ck_assert_int_eq(evd_window_restore(w, 4, 1, 4, 3, 2, 2), EVD_ECORRUPT);
  ck_assert_int_eq(evd_window_restore(w, 4, 1, 4, 3, 3, 0), EVD_ECORRUPT);
  /* empty, and newest above what is held */
  ck_assert_int_eq(evd_window_restore(w, 0, 1, 0, 50, 0, 0), 0);
  ck_assert_int_eq(evd_window_restore(w, 0, 1, 1, 50, 0, 0), EVD_ECORRUPT);
  ck_assert_int_eq(evd_window_restore(w, 0, 2, 0, 50, 0, 0), EVD_ECORRUPT);
  evd_window_free(w);
}
END_TEST

/* The engine model: positions with their slots oldest first, pinned ones
 * counted, drafts counted at the end. The next unpinned slot is computed
 * from the newest unpinned entry, as the contract words it, not kept in a
 * cursor. */
typedef struct {
  uint32_t budget, sinks, lookahead, npinned, newest, committed, drafts, n;
  uint32_t pos[256], slot[256];
} emodel_t;

static void emodel_init(emodel_t *m, uint32_t budget, uint32_t sinks,
                        uint32_t lookahead) {
  memset(m, 0, sizeof *m);
  m->budget = budget;
  m->sinks = sinks;
  m->lookahead = lookahead;
  m->n = 1;
  m->npinned = sinks > 0;
}

static void emodel_push(emodel_t *m, uint32_t p) {
  uint32_t s;

  if (m->npinned < m->sinks) {
    s = m->npinned++;
  } else if (m->n == m->npinned) {
    s = m->sinks;
  } else {
    s = m->slot[m->n - 1] + 1;
    if (s == m->budget + m->lookahead)
      s = m->sinks;
  }
  m->pos[m->n] = p;
  m->slot[m->n++] = s;
  m->newest = p;
}

static uint32_t emodel_pop_oldest(emodel_t *m) {
  uint32_t at = m->npinned, p = m->pos[at];

  memmove(&m->pos[at], &m->pos[at + 1], (m->n - at - 1) * sizeof(uint32_t));
  memmove(&m->slot[at], &m->slot[at + 1], (m->n - at - 1) * sizeof(uint32_t));
  m->n--;
  return p;
}

static uint32_t emodel_pop_newest(emodel_t *m) {
  m->n--;
  if (m->n < m->npinned) /* pinned ones are the oldest */
    m->npinned--;
  return m->pos[m->n];
}

static uint32_t emodel_evict(emodel_t *m, uint32_t *v) {
  uint32_t k = 0;

  while (m->n > m->budget)
    v[k++] = emodel_pop_oldest(m);
  return k;
}

static void emodel_check(const evd_window_t *w, const emodel_t *m,
                         uint64_t seed, long op) {
  uint32_t i, slot;

  ck_assert_msg(evd_window_size(w) == m->n && evd_window_newest(w) ==
                    m->newest && evd_window_tentative(w) == m->drafts,
                "seed %" PRIu64 " op %ld: size %u/%u newest %u/%u drafts "
                "%u/%u", seed, op, evd_window_size(w), m->n,
                evd_window_newest(w), m->newest, evd_window_tentative(w),
                m->drafts);
  if (m->drafts > 0)
    ck_assert_uint_eq(evd_window_committed(w), m->committed);
  for (i = 0; i < m->n; i++)
    ck_assert_msg(evd_window_at(w, i, &slot) == m->pos[i] &&
                      slot == m->slot[i],
                  "seed %" PRIu64 " op %ld: entry %u is %u@%u, model %u@%u",
                  seed, op, i, evd_window_at(w, i, NULL), slot, m->pos[i],
                  m->slot[i]);
}

/* evd_window_runs gives what evd_window_at gives, run by run, from every
 * starting point, and evd_window_slot_back steps back along the ring as
 * the held unpinned positions' slots do: over steps, evictions and
 * truncations that wrap the ring and empty and refill the pins. */
START_TEST(runs_and_slot_back_match_at) {
  static const uint32_t shapes[][3] = {{5, 2, 2}, {3, 0, 1}, {8, 3, 3},
                                       {1, 0, 1}, {4, 3, 1}};
  uint32_t v[16], slots[16], n, i, k, r, from, slot, s0;
  size_t shape;

  for (shape = 0; shape < sizeof shapes / sizeof shapes[0]; shape++) {
    evd_window_t *w;
    uint32_t next = 1, seed = 7;
    ck_assert_int_eq(evd_window_new(&w, shapes[shape][0], shapes[shape][1],
                                    shapes[shape][2], NULL), 0);
    for (i = 0; i < 400; i++) {
      evd_window_run_t run[3];
      seed = seed * 1103515245u + 12345u;
      if ((seed >> 16) % 7 == 0 && next > 2) {
        ck_assert_int_eq(evd_window_truncate(w, next - 1 - (seed >> 20) % 3
                                                      % (next - 1),
                                             v, &n), 0);
        next = evd_window_newest(w) + 1;
      } else {
        ck_assert_int_eq(evd_window_steps(w, &next, 1, 0, slots, v, &n), 0);
        next += 1 + (seed >> 24) % 2;
      }
      for (from = 0; from <= evd_window_size(w) + 1; from++) {
        uint32_t nrun = evd_window_runs(w, from, run), at = from;
        ck_assert_uint_le(nrun, 3);
        for (r = 0; r < nrun; r++) {
          ck_assert_uint_gt(run[r].n, 0);
          for (k = 0; k < run[r].n; k++, at++) {
            ck_assert_uint_eq(run[r].pos[k], evd_window_at(w, at, &slot));
            ck_assert_uint_eq(run[r].slot + k, slot);
          }
        }
        ck_assert_uint_eq(at, from < evd_window_size(w) ? evd_window_size(w)
                                                        : from);
      }
      n = evd_window_size(w);
      if (n <= evd_window_sinks(w))
        continue;
      evd_window_at(w, n - 1, &s0);
      for (k = 0; k < n - evd_window_sinks(w); k++) {
        evd_window_at(w, n - 1 - k, &slot);
        ck_assert_uint_eq(evd_window_slot_back(w, s0, k), slot);
      }
    }
    evd_window_free(w);
  }
}
END_TEST

/* evd_window_ring_nth hands out the slots the window hands out: from the
 * start state (position 0 in slot 0), the i-th position stepped goes to
 * the i-th slot from slot 0, pins first, then round the ring. */
START_TEST(ring_nth_is_the_order_slots_are_handed_out) {
  evd_window_t *w;
  uint32_t p, slot, v[4], n;

  ck_assert_int_eq(evd_window_new(&w, 5, 2, 2, NULL), 0);
  for (p = 1; p <= 40; p++) {
    ck_assert_int_eq(evd_window_steps(w, &p, 1, 0, &slot, v, &n), 0);
    ck_assert_uint_eq(evd_window_ring_nth(evd_window_sinks(w),
                                          evd_window_last_slot(w), 0, p),
                      slot);
    ck_assert_uint_eq(evd_window_ring_nth(evd_window_sinks(w),
                                          evd_window_last_slot(w), 3, p),
                      2 + (1 + p) % 5);
  }
  evd_window_free(w);
}
END_TEST

/* evd_window_same_state: equal after the same operations (a draft stepped
 * and dropped again included), told apart by a draft, a position held and
 * a configuration. */
START_TEST(same_state_compares_positions_slots_and_cursors) {
  evd_window_t *a, *b, *c;
  uint32_t p, slot, v[4], n;

  ck_assert_int_eq(evd_window_new(&a, 4, 1, 2, NULL), 0);
  ck_assert_int_eq(evd_window_new(&b, 4, 1, 2, NULL), 0);
  ck_assert_int_eq(evd_window_new(&c, 4, 1, 1, NULL), 0);
  ck_assert(evd_window_same_state(a, b));
  ck_assert(!evd_window_same_state(a, c)); /* another lookahead */
  for (p = 1; p <= 9; p++) {
    ck_assert_int_eq(evd_window_steps(a, &p, 1, 0, &slot, v, &n), 0);
    ck_assert_int_eq(evd_window_steps(b, &p, 1, 0, &slot, v, &n), 0);
  }
  ck_assert(evd_window_same_state(a, b));
  p = 10;
  ck_assert_int_eq(evd_window_steps(b, &p, 1, 1, &slot, v, &n), 0);
  ck_assert(!evd_window_same_state(a, b)); /* a draft more */
  ck_assert_int_eq(evd_window_truncate(b, 10, v, &n), 0);
  ck_assert(evd_window_same_state(a, b)); /* dropped again: as it was */
  ck_assert_int_eq(evd_window_truncate(a, 9, v, &n), 0);
  ck_assert_int_eq(evd_window_truncate(b, 9, v, &n), 0);
  p = 9;
  ck_assert_int_eq(evd_window_steps(a, &p, 1, 0, &slot, v, &n), 0);
  ck_assert(evd_window_same_state(a, a));
  ck_assert(!evd_window_same_state(a, b));
  evd_window_free(a);
  evd_window_free(b);
  evd_window_free(c);
}
END_TEST

START_TEST(random_engine_ops_match_model) {
  const char *env = getenv("EVD_SEED");
  uint64_t seed = env != NULL ? strtoull(env, NULL, 0) : 20261203u;
  uint64_t s = seed;
  evd_window_t *w = NULL, *copy = NULL;
  emodel_t m;
  long op;
  uint32_t pos[64], slots[64], v[128], d[128], mv[128], nv, nd, i, k;

  for (op = 0; op < 200000; op++) {
    uint64_t r = rng_next(&s);
    if (op % 4000 == 0) {
      uint32_t budget = 1 + (uint32_t)(r % 30), sinks = (uint32_t)(r >> 8) % 5;
      uint32_t la = 1 + (uint32_t)(r >> 16) % 9;
      if (sinks >= budget)
        sinks = 0;
      evd_window_free(w);
      evd_window_free(copy);
      ck_assert_int_eq(evd_window_new(&w, budget, sinks, la, NULL), 0);
      ck_assert_int_eq(evd_window_new(&copy, budget, sinks, la, NULL), 0);
      emodel_init(&m, budget, sinks, la);
      continue;
    }
    switch (r % 10) {
    case 0: case 1: case 2: case 3: { /* a step request */
      uint32_t n = 1 + (uint32_t)(r >> 8) % (2 * m.lookahead + 1), p = m.newest;
      int tent = (r >> 20) % 3 == 0, want, got;
      for (i = 0; i < n; i++) {
        p += (r >> (24 + i % 8)) % 7 == 0 ? 3 : 1;
        pos[i] = p;
      }
      if ((r >> 40) % 40 == 0)
        pos[0] = m.newest; /* stale */
      want = pos[0] <= m.newest                             ? EVD_ESTALE
             : tent && n > m.lookahead - m.drafts ? EVD_EFULL
             : !tent && m.drafts > 0                        ? EVD_EBUSY
                                                            : 0;
      got = evd_window_steps(w, pos, n, tent, slots, v, &nv);
      ck_assert_msg(got == want, "seed %" PRIu64 " op %ld: steps -> %d, "
                    "model %d", seed, op, got, want);
      if (want != 0)
        break;
      k = 0;
      if (tent) {
        if (m.drafts == 0)
          m.committed = m.newest;
        for (i = 0; i < n; i++) {
          emodel_push(&m, pos[i]);
          ck_assert_uint_eq(slots[i], m.slot[m.n - 1]);
        }
        m.drafts += n;
      } else {
        for (i = 0; i < n; i += m.lookahead) {
          uint32_t j;
          for (j = i; j < n && j < i + m.lookahead; j++) {
            emodel_push(&m, pos[j]);
            ck_assert_msg(slots[j] == m.slot[m.n - 1], "seed %" PRIu64
                          " op %ld: slot %u of %u, model %u", seed, op,
                          slots[j], pos[j], m.slot[m.n - 1]);
          }
          k += emodel_evict(&m, mv + k);
        }
      }
      ck_assert_uint_eq(nv, k);
      ck_assert_mem_eq(v, mv, k * sizeof v[0]);
      ck_assert_uint_le(evd_window_size(w), m.budget + m.lookahead);
      break;
    }
    case 4: case 5: { /* commit */
      uint32_t c = m.drafts ? m.committed : m.newest;
      uint32_t p = c + (uint32_t)(r >> 8) % (m.newest - c + 3) - 1;
      int got = evd_window_commit(w, p, d, &nd, v, &nv);
      if (p < c) {
        ck_assert_int_eq(got, EVD_EINVAL);
        break;
      }
      ck_assert_int_eq(got, 0);
      k = 0;
      while (m.drafts > 0 && m.pos[m.n - 1] > p) {
        m.drafts--;
        mv[k++] = emodel_pop_newest(&m);
      }
      ck_assert_uint_eq(nd, k);
      for (i = 0; i < k; i++)
        ck_assert_uint_eq(d[i], mv[k - 1 - i]);
      m.newest = m.drafts > 0 ? m.pos[m.n - 1] : c;
      m.drafts = 0;
      k = emodel_evict(&m, mv);
      ck_assert_uint_eq(nv, k);
      ck_assert_mem_eq(v, mv, k * sizeof v[0]);
      break;
    }
    case 6: { /* truncate, often near the newest, sometimes into the sinks */
      uint32_t from = (r >> 8) % 8 == 0 ? (uint32_t)(r >> 12) % 6
                                        : m.newest - (uint32_t)(r >> 12) % 8;
      int got = evd_window_truncate(w, from, d, &nd);
      if (from == 0) {
        ck_assert_int_eq(got, EVD_EINVAL);
        break;
      }
      ck_assert_int_eq(got, 0);
      if (from > m.newest) {
        ck_assert_uint_eq(nd, 0);
        break;
      }
      k = 0;
      while (m.n > 0 && m.pos[m.n - 1] >= from) {
        mv[k++] = emodel_pop_newest(&m);
        if (m.drafts > 0)
          m.drafts--;
      }
      ck_assert_uint_eq(nd, k);
      for (i = 0; i < k; i++)
        ck_assert_uint_eq(d[i], mv[k - 1 - i]);
      if (m.drafts > 0 && m.committed > from - 1)
        m.committed = from - 1;
      m.newest = from - 1;
      break;
    }
    case 7: { /* evict */
      uint32_t b = (r >> 8) % 3 == 0 ? m.sinks + 1 + (uint32_t)(r >> 12) % 3
                                     : m.budget;
      int got = evd_window_evict(w, b, v, 128, &nv);
      if (m.drafts > 0) {
        ck_assert_int_eq(got, EVD_EBUSY);
        break;
      }
      ck_assert_int_eq(got, 0);
      for (k = 0; m.n > b; k++)
        ck_assert_uint_eq(v[k], emodel_pop_oldest(&m));
      ck_assert_uint_eq(nv, k);
      break;
    }
    case 8: { /* holds() against a brute-force look */
      uint64_t lo = (r >> 8) % (m.newest + 3), hi = lo + (r >> 32) % 6;
      int want = 0;
      for (i = 0; i < m.n; i++)
        want |= m.pos[i] >= lo && m.pos[i] < hi;
      ck_assert_msg(evd_window_holds(w, lo, hi) == want, "seed %" PRIu64
                    " op %ld: holds [%" PRIu64 ", %" PRIu64 ")", seed, op,
                    lo, hi);
      break;
    }
    case 9: /* saved and restored, the state is the same */
      memcpy(copy->pos, w->pos,
             ((size_t)w->budget + evd_window_lookahead(w)) * sizeof(uint32_t));
      ck_assert_int_eq(evd_window_restore(copy, w->size, w->head, w->tail,
                                          w->newest, evd_window_tentative(w),
                                          evd_window_committed(w)),
                       0);
      ck_assert(copy->size == w->size && copy->head == w->head &&
                copy->tail == w->tail && copy->newest == w->newest &&
                evd_window_tentative(copy) == evd_window_tentative(w) &&
                evd_window_committed(copy) == evd_window_committed(w));
      break;
    }
    emodel_check(w, &m, seed, op);
  }
  evd_window_free(w);
  evd_window_free(copy);
}
END_TEST

/* A window prepared over memory full of garbage, its ring filled from a
 * saved one and restored, is the saved window: same state, and the same
 * answers step for step afterwards. Before the ring is filled, prepare
 * leaves the start state's cursors. */
START_TEST(prepare_then_restore_is_the_saved_window) {
  const uint32_t budget = 6, sinks = 2, lookahead = 3;
  size_t bytes = evd_window_footprint(budget, lookahead);
  evd_window_t *w, *copy = malloc(bytes);
  uint32_t slot, v, sc, vc, p;
  int a, ac;

  ck_assert_ptr_nonnull(copy);
  ck_assert_int_eq(evd_window_prepare(copy, 0, 0, 1), EVD_EINVAL);
  ck_assert_int_eq(evd_window_prepare(copy, 4, 4, 1), EVD_EINVAL);
  ck_assert_int_eq(evd_window_prepare(copy, 4, 1, 0), EVD_EINVAL);
  memset(copy, 0xa5, bytes);
  ck_assert_int_eq(evd_window_prepare(copy, budget, sinks, lookahead), 0);
  ck_assert(copy->budget == budget && copy->sinks == sinks &&
            evd_window_lookahead(copy) == lookahead && copy->size == 1 &&
            copy->newest == 0 && copy->head == sinks && copy->tail == 1 &&
            evd_window_tentative(copy) == 0);
  ck_assert_int_eq(evd_window_new(&w, budget, sinks, lookahead, NULL), 0);
  for (p = 1; p <= 13; p += 1 + p % 2) /* with gaps, past the ring's end */
    ck_assert_int_ge(evd_window_advance(w, p, &slot, &v), 0);
  memcpy(copy->pos, w->pos, (size_t)(budget + lookahead) * sizeof(uint32_t));
  ck_assert_int_eq(evd_window_restore(copy, w->size, w->head, w->tail,
                                      w->newest, 0, 0),
                   0);
  ck_assert_mem_eq(copy, w, bytes);
  for (p = 14; p < 40; p++) {
    a = evd_window_advance(w, p, &slot, &v);
    ac = evd_window_advance(copy, p, &sc, &vc);
    ck_assert_int_eq(ac, a);
    ck_assert_uint_eq(sc, slot);
    if (a > 0)
      ck_assert_uint_eq(vc, v);
  }
  ck_assert_mem_eq(copy, w, bytes);
  evd_window_free(w);
  free(copy);
}
END_TEST

static Suite *window_suite(void) {
  Suite *s = suite_create("window");
  TCase *tc = tcase_create("core");

  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, vectors_all_replay, 0, 2);
  tcase_add_test(tc, budget_zero_refused);
  tcase_add_test(tc, sinks_must_be_below_budget);
  tcase_add_test(tc, budget_above_max_refused);
  tcase_add_test(tc, footprint_is_budget_plus_one_slots);
  tcase_add_test(tc, start_state_holds_position_zero);
  tcase_add_test(tc, budget_one_keeps_only_newest);
  tcase_add_test(tc, step_when_full_refused_unchanged);
  tcase_add_test(tc, max_position_then_everything_stale);
  tcase_add_test(tc, advance_refuses_full_window_unchanged);
  tcase_add_test(tc, non_increasing_position_refused);
  tcase_add_test(tc, sinks_budget_minus_one_never_loses_pins);
  tcase_add_test(tc, evict_with_small_buffer_refused_unchanged);
  tcase_add_test(tc, attention_is_never_read);
  tcase_add_test(tc, init_in_caller_memory);
  tcase_add_test(tc, random_ops_match_plain_array_model);
  tcase_add_test(tc, chunk_longer_than_budget_uses_lookahead_slots);
  tcase_add_test(tc, lookahead_one_sub_steps_are_single_steps);
  tcase_add_test(tc, drafts_then_partial_commit);
  tcase_add_test(tc, truncate_into_the_sinks_repins);
  tcase_add_test(tc, restore_refuses_impossible_states);
  tcase_add_test(tc, prepare_then_restore_is_the_saved_window);
  tcase_add_test(tc, runs_and_slot_back_match_at);
  tcase_add_test(tc, ring_nth_is_the_order_slots_are_handed_out);
  tcase_add_test(tc, same_state_compares_positions_slots_and_cursors);
  tcase_add_test(tc, random_engine_ops_match_model);
  suite_add_tcase(s, tc);
  return s;
}

EVD_CHECK_MAIN(window_suite())
