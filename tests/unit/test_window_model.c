/* Randomized checks of the window against models that share no ring
 * arithmetic with window.c: step and evict against a plain array, then every
 * engine operation (EVD_SEED=N sets the seed); part of build/test_window. */
#include <check.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "window.h"
#include "test_window.h"

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

/* ---- randomized engine model check ---------------------------------- */

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

void window_model_tests(TCase *tc) {
  tcase_add_test(tc, random_ops_match_plain_array_model);
}

void window_engine_model_tests(TCase *tc) {
  tcase_add_test(tc, random_engine_ops_match_model);
}
