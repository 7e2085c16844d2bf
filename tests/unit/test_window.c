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
static const char *step_error(const evd_window_t *w, json_t *list) {
  size_t i, n = json_array_size(list);
  json_int_t prev = -1;

  if (n == 0)
    return "invalid_position";
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
  if (json_integer_value(json_array_get(list, 0)) <= evd_window_newest(w))
    return "stale_position";
  return NULL;
}

/* Replays step ops through evd_window_advance instead of step + evict. */
static int use_advance;

static void replay_step(evd_window_t *w, json_t *op, const char *where) {
  json_t *list = json_object_get(op, "step");
  json_t *want_err = json_object_get(op, "error");
  const char *err = step_error(w, list);
  uint32_t before = evd_window_size(w), newest = evd_window_newest(w);
  size_t i, n = json_array_size(list);
  uint32_t *victims, *slots, nv = 0;

  if (err != NULL || want_err != NULL) {
    ck_assert_msg(want_err != NULL && err != NULL &&
                      strcmp(err, json_string_value(want_err)) == 0,
                  "%s: error %s, vector says %s", where, err ? err : "none",
                  want_err ? json_string_value(want_err) : "none");
    /* The window itself refuses a stale first position unchanged. */
    if (strcmp(err, "stale_position") == 0) {
      uint32_t slot = 12345, victim = 54321;
      uint32_t p = (uint32_t)json_integer_value(json_array_get(list, 0));
      ck_assert_int_eq(evd_window_step(w, p, NULL, 0, &slot), EVD_ESTALE);
      ck_assert_int_eq(evd_window_advance(w, p, &slot, &victim), EVD_ESTALE);
      ck_assert_uint_eq(slot, 12345);
      ck_assert_uint_eq(victim, 54321);
    }
    ck_assert_uint_eq(evd_window_size(w), before);
    ck_assert_uint_eq(evd_window_newest(w), newest);
    return;
  }
  victims = calloc(n + w->budget + 1, sizeof *victims);
  slots = calloc(n, sizeof *slots);
  ck_assert_ptr_nonnull(victims);
  ck_assert_ptr_nonnull(slots);
  for (i = 0; i < n; i++) {
    uint32_t k = 0, p = (uint32_t)json_integer_value(json_array_get(list, i));
    if (use_advance) {
      int r = evd_window_advance(w, p, &slots[i], victims + nv);
      ck_assert_msg(r == 0 || r == 1, "%s: advance returned %d", where, r);
      nv += (uint32_t)r;
      continue;
    }
    ck_assert_int_eq(evd_window_step(w, p, NULL, 0, &slots[i]), 0);
    ck_assert_int_eq(evd_window_evict(w, w->budget, victims + nv,
                                      evd_window_size(w), &k),
                     0);
    nv += k;
  }
  expect_u32_array(where, json_object_get(op, "victims"), victims, nv);
  expect_u32_array(where, json_object_get(op, "slots"), slots, (uint32_t)n);
  ck_assert_int_eq(evd_window_size(w),
                   json_integer_value(json_object_get(op, "size")));
  ck_assert_int_eq(evd_window_newest(w),
                   json_integer_value(json_object_get(op, "newest")));
  free(victims);
  free(slots);
}

static void replay_evict(evd_window_t *w, json_t *op, const char *where) {
  json_int_t b = json_integer_value(json_object_get(op, "evict"));
  json_t *want_err = json_object_get(op, "error");
  uint32_t size = evd_window_size(w), n = 0;
  uint32_t *victims = calloc(size, sizeof *victims);
  int err;

  ck_assert_ptr_nonnull(victims);
  err = evd_window_evict(w, (uint32_t)b, victims, size, &n);
  if (want_err != NULL) {
    ck_assert_str_eq(json_string_value(want_err), "invalid_budget");
    ck_assert_msg(err == EVD_EINVAL, "%s: evict %" JSON_INTEGER_FORMAT
                  " returned %d", where, b, err);
    ck_assert_uint_eq(evd_window_size(w), size);
  } else {
    ck_assert_msg(err == 0, "%s: evict failed: %s", where, evd_strerror(err));
    expect_u32_array(where, json_object_get(op, "victims"), victims, n);
    ck_assert_int_eq(evd_window_size(w),
                     json_integer_value(json_object_get(op, "size")));
  }
  free(victims);
}

static void replay_check(evd_window_t *w, json_t *op, const char *where) {
  json_t *check = json_object_get(op, "check");
  uint32_t i, n = evd_window_size(w);
  uint32_t *kept = calloc(n, sizeof *kept), *slots = calloc(n, sizeof *slots);

  ck_assert_ptr_nonnull(kept);
  ck_assert_ptr_nonnull(slots);
  for (i = 0; i < n; i++)
    kept[i] = evd_window_at(w, i, &slots[i]);
  expect_u32_array(where, json_object_get(check, "kept"), kept, n);
  expect_u32_array(where, json_object_get(check, "slots"), slots, n);
  free(kept);
  free(slots);
}

static int replay_file(const char *path) {
  json_error_t jerr;
  json_t *vec = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
  json_t *ops, *op;
  evd_window_t *w = NULL;
  size_t i;
  char where[4200];

  ck_assert_msg(vec != NULL, "%s: %s", path, jerr.text);
  ck_assert_int_eq(
      evd_window_new(&w,
                     (uint32_t)json_integer_value(json_object_get(vec, "budget")),
                     (uint32_t)json_integer_value(json_object_get(vec, "sinks")),
                     1, NULL),
      0);
  ops = json_object_get(vec, "ops");
  ck_assert_msg(json_array_size(ops) > 0, "%s: no ops", path);
  json_array_foreach(ops, i, op) {
    snprintf(where, sizeof where, "%s op %zu", path, i);
    if (json_object_get(op, "step") != NULL)
      replay_step(w, op, where);
    else if (json_object_get(op, "evict") != NULL)
      replay_evict(w, op, where);
    else if (json_object_get(op, "check") != NULL)
      replay_check(w, op, where);
    else
      ck_abort_msg("%s: unknown op", where);
  }
  evd_window_free(w);
  json_decref(vec);
  return 1;
}

/* _i is 0 for step + evict, 1 for the fused evd_window_advance. */
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
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(window_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
