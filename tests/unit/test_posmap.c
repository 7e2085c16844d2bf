/* Unit tests of evictd-llama's position map (deploy/llama/common/posmap.c): the
 * calls it makes on a model of llama.cpp's cells (a cell per held position,
 * with the position llama.cpp knows it by), checked after every removal
 * against what each mode promises: original mode keeps every cell at its
 * absolute position and never shifts; cache mode keeps the held positions,
 * in order, at cache positions 0..n-1. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../deploy/llama/common/posmap.h"
#include "check_main.h"

/* A model of one sequence's cells: abs[i] the token's absolute position,
 * pos[i] what llama.cpp knows it by. */
typedef struct cells_s {
  uint32_t abs[512];
  int32_t pos[512];
  int n;
  int rms, shifts;
  int refuse; /* the rm call numbered so fails (1-based), 0 never */
} cells_t;

static int cells_rm(void *ud, int32_t seq, int32_t p0, int32_t p1) {
  cells_t *c = ud;
  ck_assert_int_eq(seq, 3);
  ck_assert_int_lt(p0, p1);
  if (++c->rms == c->refuse)
    return -1;
  int w = 0, found = 0;
  for (int i = 0; i < c->n; i++) {
    if (c->pos[i] >= p0 && c->pos[i] < p1) {
      found++;
      continue;
    }
    c->abs[w] = c->abs[i];
    c->pos[w++] = c->pos[i];
  }
  ck_assert_int_eq(found, p1 - p0); /* a run names held cells only */
  c->n = w;
  return 0;
}

static void cells_shift(void *ud, int32_t seq, int32_t p0, int32_t p1,
                        int32_t delta) {
  cells_t *c = ud;
  ck_assert_int_eq(seq, 3);
  ck_assert_int_lt(delta, 0);
  c->shifts++;
  for (int i = 0; i < c->n; i++)
    if (c->pos[i] >= p0 && (p1 < 0 || c->pos[i] < p1))
      c->pos[i] += delta;
}

static const posmap_ops_t ops = {cells_rm, cells_shift};

static void add(posmap_t *m, cells_t *c, uint32_t p) {
  int32_t q = posmap_add(m, p);
  ck_assert_int_eq(q, m->mode == POS_CACHE ? (int32_t)m->n - 1 : (int32_t)p);
  c->abs[c->n] = p;
  c->pos[c->n++] = q;
}

/* The cells hold exactly the map's positions, each where the mode says. */
static void check_agree(const posmap_t *m, const cells_t *c) {
  ck_assert_int_eq(c->n, (int)m->n);
  for (int i = 0; i < c->n; i++) {
    ck_assert_uint_eq(c->abs[i], m->held[i]);
    int32_t want = m->mode == POS_CACHE ? i : (int32_t)m->held[i];
    ck_assert_int_eq(c->pos[i], want);
    ck_assert_int_eq(posmap_find(m, m->held[i]), want);
  }
}

START_TEST(test_parse) {
  pos_mode_t m = POS_ORIGINAL;
  ck_assert_int_eq(posmap_parse("cache", &m), 0);
  ck_assert_int_eq(m, POS_CACHE);
  ck_assert_int_eq(posmap_parse("original", &m), 0);
  ck_assert_int_eq(m, POS_ORIGINAL);
  ck_assert_int_eq(posmap_parse("Cache", &m), -1);
  ck_assert_int_eq(posmap_parse("", &m), -1);
  ck_assert_str_eq(posmap_name(POS_CACHE), "cache");
}
END_TEST

/* The sinks-and-window shape by hand: held 0..9, remove 4 and 7..8. */
START_TEST(test_gaps_by_hand) {
  posmap_t m;
  cells_t c = {0};
  ck_assert_int_eq(posmap_init(&m, POS_CACHE, 2), 0);
  for (uint32_t p = 0; p < 10; p++)
    add(&m, &c, p);
  uint32_t v[] = {4, 7, 8};
  ck_assert_int_eq(posmap_remove_with(&m, &ops, &c, 3, v, 3), 0);
  ck_assert_int_eq(c.rms, 2);    /* [4,5) and [7,9) */
  ck_assert_int_eq(c.shifts, 2); /* 5..6 by -1, 9.. by -3 */
  check_agree(&m, &c);
  ck_assert_int_eq(m.n, 7);
  ck_assert_uint_eq(m.held[6], 9);
  ck_assert_int_eq(posmap_find(&m, 9), 6);
  ck_assert_int_eq(posmap_add(&m, 10), 7); /* the next goes at the count */
  /* Held 5 and 9 are neighbours in the cache now: one run, no shift. */
  c.rms = c.shifts = 0;
  c.abs[c.n] = 10, c.pos[c.n++] = 7;
  uint32_t w[] = {5, 6, 9, 10};
  ck_assert_int_eq(posmap_remove_with(&m, &ops, &c, 3, w, 4), 0);
  ck_assert_int_eq(c.rms, 1);
  ck_assert_int_eq(c.shifts, 0);
  check_agree(&m, &c);
  posmap_free(&m);
}
END_TEST

START_TEST(test_refusals) {
  posmap_t m;
  cells_t c = {0};
  ck_assert_int_eq(posmap_init(&m, POS_CACHE, 4), 0);
  for (uint32_t p = 0; p < 6; p++)
    add(&m, &c, p * 2);
  ck_assert_int_eq(posmap_add(&m, 10), -1); /* not above the held */
  uint32_t absent[] = {3};
  uint32_t unsorted[] = {4, 2};
  ck_assert_int_eq(posmap_remove_with(&m, &ops, &c, 3, absent, 1), -1);
  ck_assert_int_eq(posmap_remove_with(&m, &ops, &c, 3, unsorted, 2), -1);
  ck_assert_int_eq(c.rms, 0);
  c.refuse = 1;
  uint32_t v[] = {2};
  ck_assert_int_eq(posmap_remove_with(&m, &ops, &c, 3, v, 1), -1);
  ck_assert_int_eq(m.n, 6); /* the map keeps what llama.cpp kept */
  posmap_free(&m);
}
END_TEST

START_TEST(test_copy) {
  posmap_t a, b;
  memset(&b, 0, sizeof(b));
  ck_assert_int_eq(posmap_init(&a, POS_CACHE, 1), 0);
  for (uint32_t p = 0; p < 40; p += 3)
    ck_assert_int_ge(posmap_add(&a, p), 0);
  ck_assert_int_eq(posmap_copy(&b, &a), 0);
  ck_assert_int_eq(b.mode, POS_CACHE);
  ck_assert_uint_eq(b.n, a.n);
  ck_assert_int_eq(memcmp(a.held, b.held, a.n * sizeof(*a.held)), 0);
  ck_assert_int_eq(posmap_add(&b, 100), (int32_t)a.n); /* independent */
  ck_assert_uint_eq(b.n, a.n + 1);
  ck_assert_int_eq(posmap_copy(&b, &a), 0); /* over an initialized one */
  ck_assert_uint_eq(b.n, a.n);
  posmap_free(&a);
  posmap_free(&b);
}
END_TEST

/* Random steps of a sinks-and-window policy with chunks, removals drawn
 * anywhere (victims) and from the top (a truncate), in both modes. */
static void random_run(pos_mode_t mode, unsigned seed) {
  srand(seed);
  posmap_t m;
  cells_t c = {0};
  ck_assert_int_eq(posmap_init(&m, mode, 1), 0);
  uint32_t next = 0;
  for (int it = 0; it < 400; it++) {
    int chunk = 1 + rand() % 4;
    for (int i = 0; i < chunk && c.n < 500; i++)
      add(&m, &c, next++);
    check_agree(&m, &c);
    uint32_t v[512];
    size_t k = 0;
    if (rand() % 5 == 0) { /* the top few go (truncate) */
      uint32_t from = m.n - (uint32_t)(rand() % (m.n < 4 ? m.n : 4));
      for (uint32_t i = from; i < m.n; i++)
        v[k++] = m.held[i];
    } else {
      for (uint32_t i = 0; i < m.n; i++)
        if (m.n - k > 24 ? rand() % 3 == 0 : rand() % 40 == 0)
          v[k++] = m.held[i];
    }
    int shifts = c.shifts;
    ck_assert_int_eq(posmap_remove_with(&m, &ops, &c, 3, v, k), 0);
    if (mode == POS_ORIGINAL)
      ck_assert_int_eq(c.shifts, shifts);
    check_agree(&m, &c);
  }
  posmap_free(&m);
}

START_TEST(test_random_cache) { random_run(POS_CACHE, 1 + (unsigned)_i); }
END_TEST

START_TEST(test_random_original) {
  random_run(POS_ORIGINAL, 100 + (unsigned)_i);
}
END_TEST

static Suite *posmap_suite(void) {
  Suite *s = suite_create("posmap");
  TCase *tc = tcase_create("posmap");
  tcase_add_test(tc, test_parse);
  tcase_add_test(tc, test_gaps_by_hand);
  tcase_add_test(tc, test_refusals);
  tcase_add_test(tc, test_copy);
  tcase_add_loop_test(tc, test_random_cache, 0, 8);
  tcase_add_loop_test(tc, test_random_original, 0, 4);
  suite_add_tcase(s, tc);
  return s;
}

EVD_CHECK_MAIN(posmap_suite())
