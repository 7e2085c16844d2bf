/* Page-granular answers: evd_pages_diff against the plain definition (the
 * set of pages held before a request, the set after, their differences,
 * and the pages of positions it added held at neither end), over random
 * requests of every kind, and evd_pages_held. */
#include <check.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "pages.h"
#include "check_main.h"

static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

#define MAXPAGE 4096

/* Marks the pages of every held position in `set` (cleared first). */
static void page_set(const evd_window_t *w, uint32_t b, unsigned char *set) {
  uint32_t i;

  memset(set, 0, MAXPAGE);
  for (i = 0; i < evd_window_size(w); i++)
    set[evd_window_at(w, i, NULL) / b] = 1;
}

/* Checks a diff against the sets before and after, and `within`: the
 * pages of positions the request added (and page 0 of a new session). */
static void check_diff(const unsigned char *before, const unsigned char *after,
                       const unsigned char *within, const evd_pages_out_t *o,
                       uint64_t seed, long op) {
  uint32_t q, a = 0, f = 0, t = 0;

  for (q = 0; q < MAXPAGE; q++) {
    if (after[q] && !before[q]) {
      ck_assert_msg(a < o->nfresh && o->fresh[a] == q,
                    "seed %" PRIu64 " op %ld: page %u should be new", seed, op,
                    q);
      a++;
    }
    if (before[q] && !after[q]) {
      ck_assert_msg(f < o->nfreed && o->freed[f] == q,
                    "seed %" PRIu64 " op %ld: page %u should be freed", seed,
                    op, q);
      f++;
    }
    if (within[q] && !before[q] && !after[q]) {
      ck_assert_msg(t < o->ntransient && o->transient[t] == q,
                    "seed %" PRIu64 " op %ld: page %u should be transient",
                    seed, op, q);
      t++;
    }
  }
  ck_assert_msg(a == o->nfresh && f == o->nfreed && t == o->ntransient,
                "seed %" PRIu64 " op %ld: %u new (want %u), %u freed (want "
                "%u), %u transient (want %u)", seed, op, o->nfresh, a,
                o->nfreed, f, o->ntransient, t);
}

START_TEST(diff_is_the_set_difference) {
  const char *env = getenv("EVD_SEED");
  uint64_t seed = env != NULL ? strtoull(env, NULL, 0) : 20261203u, s = seed;
  static unsigned char before[MAXPAGE], after[MAXPAGE], within[MAXPAGE];
  uint32_t pos[64], slots[64], v[256], g[256], pn[600], pf[600], pt[600];
  evd_pages_out_t o = {.fresh = pn, .freed = pf, .transient = pt};
  uint32_t nv, ng, b = 1, i, k;
  evd_window_t *w = NULL;
  long op;

  for (op = 0; op < 60000; op++) {
    uint64_t r = rng_next(&s);
    evd_pages_change_t c = {0};
    uint32_t budget, n;
    int err;
    if (op % 2000 == 0 || evd_window_newest(w) > 20000) {
      budget = 1 + (uint32_t)(r % 24);
      uint32_t sinks = (uint32_t)(r >> 8) % 4, la = 1 + (uint32_t)(r >> 12) % 6;
      static const uint32_t sizes[] = {1, 2, 3, 4, 5, 16};
      evd_window_free(w);
      if (sinks >= budget)
        sinks = 0;
      ck_assert_int_eq(evd_window_new(&w, budget, sinks, la, NULL), 0);
      b = sizes[(r >> 16) % 6];
      /* A new session: nothing before, page 0 after. */
      memset(before, 0, MAXPAGE);
      memset(within, 0, MAXPAGE);
      page_set(w, b, after);
      c.created = 1;
      evd_pages_diff(w, b, &c, &o);
      check_diff(before, after, within, &o, seed, op);
      continue;
    }
    page_set(w, b, before);
    nv = ng = 0;
    switch (r % 5) {
    case 0: case 1: { /* a step, maybe tentative, maybe with a commit */
      uint32_t la = evd_window_lookahead(w), p;
      int tent = (r >> 8) % 3 == 0;
      n = 1 + (uint32_t)(r >> 10) % (2 * la + 2);
      if ((r >> 20) % 2 && evd_window_tentative(w) > 0) {
        uint32_t cm = evd_window_committed(w) + (uint32_t)(r >> 24) % 3;
        ck_assert_int_eq(evd_window_commit(w, cm, g, &ng, v, &nv), 0);
      }
      if (tent && n > la - evd_window_tentative(w))
        n = la - evd_window_tentative(w);
      if (!tent && evd_window_tentative(w) > 0)
        n = 0;
      p = evd_window_newest(w);
      for (i = 0; i < n; i++) {
        p += (r >> (30 + i % 16)) % 5 == 0 ? 1 + (uint32_t)(r >> 50) % 9 : 1;
        pos[i] = p;
      }
      err = evd_window_steps(w, pos, n, tent, slots, v + nv, &k);
      ck_assert_int_eq(err, 0);
      nv += k;
      c.added = pos;
      c.nadded = n;
      break;
    }
    case 2: { /* commit */
      uint32_t cm = evd_window_committed(w) + (uint32_t)(r >> 8) % 4;
      ck_assert_int_eq(evd_window_commit(w, cm, g, &ng, v, &nv), 0);
      break;
    }
    case 3: { /* truncate */
      uint32_t from = 1 + (uint32_t)(r >> 8) % (evd_window_newest(w) + 2);
      if ((r >> 40) % 2)
        from = evd_window_newest(w) > 4 ? evd_window_newest(w) - 3 : 1;
      ck_assert_int_eq(evd_window_truncate(w, from, g, &ng), 0);
      break;
    }
    case 4: /* evict, when it may */
      if (evd_window_tentative(w) == 0)
        ck_assert_int_eq(
            evd_window_evict(w, w->sinks + 1 + (uint32_t)(r >> 8) % 3, v, 256,
                             &nv),
            0);
      break;
    }
    c.victims = v;
    c.nvictims = nv;
    c.gone = g;
    c.ngone = ng;
    page_set(w, b, after);
    memset(within, 0, MAXPAGE);
    for (i = 0; i < c.nadded; i++)
      within[c.added[i] / b] = 1;
    evd_pages_diff(w, b, &c, &o);
    check_diff(before, after, within, &o, seed, op);
  }
  evd_window_free(w);
}
END_TEST

/* The example and its relatives: a new session stepped past its
 * budget in one request writes pages it also empties. */
START_TEST(transient_pages_of_a_new_session) {
  static const struct {
    uint32_t budget, sinks, page, n, fresh[4], nfresh, trans[4], ntrans;
  } cases[] = {
      {3, 0, 2, 7, {2, 3}, 2, {0, 1}, 2},    /* keeps 5 6 7 */
      {1, 0, 1, 3, {3}, 1, {0, 1, 2}, 3},    /* keeps 3 */
      {3, 1, 2, 7, {0, 3}, 2, {1, 2}, 2},    /* keeps the sink 0, 6 7 */
      {8, 0, 4, 7, {0, 1}, 2, {0}, 0},       /* nothing evicted */
  };
  uint32_t i, j, pos[8], slots[8], v[8], nv, pn[9], pf[9], pt[9];
  evd_pages_out_t o = {.fresh = pn, .freed = pf, .transient = pt};

  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    evd_window_t *w;
    ck_assert_int_eq(
        evd_window_new(&w, cases[i].budget, cases[i].sinks, 8, NULL), 0);
    for (j = 0; j < cases[i].n; j++)
      pos[j] = j + 1;
    ck_assert_int_eq(evd_window_steps(w, pos, cases[i].n, 0, slots, v, &nv),
                     0);
    evd_pages_change_t c = {.victims = v, .nvictims = nv, .added = pos,
                            .nadded = cases[i].n, .created = 1};
    evd_pages_diff(w, cases[i].page, &c, &o);
    ck_assert_uint_eq(o.nfreed, 0);
    ck_assert_uint_eq(o.nfresh, cases[i].nfresh);
    ck_assert_uint_eq(o.ntransient, cases[i].ntrans);
    for (j = 0; j < o.nfresh; j++)
      ck_assert_uint_eq(pn[j], cases[i].fresh[j]);
    for (j = 0; j < o.ntransient; j++)
      ck_assert_uint_eq(pt[j], cases[i].trans[j]);
    evd_window_free(w);
  }
}
END_TEST

START_TEST(held_pages_ascending_and_unique) {
  evd_window_t *w;
  uint32_t pos[6] = {3, 4, 9, 17, 18, 40}, slots[6], v[6], nv, out[8], n;

  ck_assert_int_eq(evd_window_new(&w, 8, 1, 6, NULL), 0);
  ck_assert_int_eq(evd_window_steps(w, pos, 6, 0, slots, v, &nv), 0);
  n = evd_pages_held(w, 4, out);
  ck_assert_uint_eq(n, 5); /* 0 | 3 | 4 9 | 17 18 | 40 */
  ck_assert_uint_eq(out[0], 0);
  ck_assert_uint_eq(out[1], 1);
  ck_assert_uint_eq(out[2], 2);
  ck_assert_uint_eq(out[3], 4);
  ck_assert_uint_eq(out[4], 10);
  evd_window_free(w);
}
END_TEST

START_TEST(vllm_frees_the_same_blocks) {
  /* Sinks 0, consecutive positions: after position t is stepped, vLLM with
   * W = budget + 1 has computed n = t + 1 tokens and frees the blocks
   * wholly below n - W + 1 = t + 1 - budget. The freed pages reported so
   * far must be exactly those blocks. */
  static const uint32_t budgets[] = {1, 5, 8, 32}, sizes[] = {1, 4, 16};
  uint32_t bi, si, t, slot, victim, pn[4], pf[4], pt[4], freed;
  evd_pages_out_t o = {.fresh = pn, .freed = pf, .transient = pt};

  for (bi = 0; bi < 4; bi++)
    for (si = 0; si < 3; si++) {
      uint32_t budget = budgets[bi], b = sizes[si];
      evd_window_t *w;
      ck_assert_int_eq(evd_window_new(&w, budget, 0, 1, NULL), 0);
      freed = 0; /* pages 0..freed-1 are free */
      for (t = 1; t < 400; t++) {
        int r = evd_window_advance(w, t, &slot, &victim);
        evd_pages_change_t c = {.victims = &victim, .nvictims = r == 1,
                                .added = &t, .nadded = 1};
        uint32_t skipped = t + 1 > budget ? t + 1 - budget : 0;
        evd_pages_diff(w, b, &c, &o);
        ck_assert_uint_le(o.nfreed, 1);
        ck_assert_uint_eq(o.ntransient, 0); /* one position, one page */
        if (o.nfreed == 1)
          ck_assert_uint_eq(pf[0], freed++);
        ck_assert_msg(freed == skipped / b, "budget %u page %u, t %u: %u "
                      "blocks freed, vLLM %u", budget, b, t, freed,
                      skipped / b);
      }
      evd_window_free(w);
    }
}
END_TEST

static Suite *pages_suite(void) {
  Suite *s = suite_create("pages");
  TCase *tc = tcase_create("diff");

  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, diff_is_the_set_difference);
  tcase_add_test(tc, transient_pages_of_a_new_session);
  tcase_add_test(tc, held_pages_ascending_and_unique);
  tcase_add_test(tc, vllm_frees_the_same_blocks);
  suite_add_tcase(s, tc);
  return s;
}

EVD_CHECK_MAIN(pages_suite())
