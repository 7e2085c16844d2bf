/* Replay records: answers made of runs stay in the session's own area (a
 * session's memory does not grow with its requests), any other goes to the
 * bounded pool, whose oldest records are let go keeping only the request's
 * hash; every form reads back exactly as it was set. */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"
#include "check_main.h"

static evd_table_t *t;

static evd_session_t *add(const char *id, uint32_t budget, uint32_t sinks,
                          uint32_t lookahead, uint32_t page_size) {
  evd_session_config_t c = {budget, sinks, lookahead, page_size};
  evd_session_t *s = NULL;

  ck_assert_int_eq(evd_table_add(t, id, strlen(id), &c, 0, &s), 0);
  return s;
}

static void setup(size_t pool) {
  ck_assert_int_eq(evd_table_new(&t, 1000, pool), 0);
}

/* A list equals the values v[0..n). */
static void expect_list(const evd_replay_t *rp, const evd_u32s_t *l,
                        const uint32_t *v, uint32_t n, const char *what) {
  uint32_t i;

  ck_assert_msg(l->n == n, "%s: %u values, want %u", what, l->n, n);
  for (i = 0; i < n; i++)
    ck_assert_msg(evd_replay_at(rp, l, i) == v[i], "%s[%u]: %u, want %u",
                  what, i, evd_replay_at(rp, l, i), v[i]);
}

/* Sets a record of the given lists on s and checks it reads back the same,
 * in the area (runs) or not, as `in_area` says. */
static void roundtrip(evd_session_t *s, evd_replay_t *rp, int in_area) {
  evd_replay_t got;
  unsigned words;

  rp->sinks = evd_session_window(s)->sinks;
  rp->last = evd_session_window(s)->last;
  /* A record is set right after its request: the window's newest is the
   * answer's (runs read the positions back from it). */
  evd_session_window(s)->newest = rp->newest;
  evd_replay_set(t, s, rp);
  evd_replay_area(s, &words);
  ck_assert_msg((words != 0) == in_area, "kept %s the area",
                words ? "in" : "outside");
  ck_assert_int_eq(evd_replay_get(s, &got), 1);
  ck_assert_uint_eq(got.op, rp->op);
  ck_assert_uint_eq(got.flags, rp->flags);
  ck_assert_uint_eq(got.arg, rp->arg);
  ck_assert_uint_eq(got.size, rp->size);
  ck_assert_uint_eq(got.newest, rp->newest);
  expect_list(&got, &got.positions, rp->positions.v, rp->positions.n,
              "positions");
  expect_list(&got, &got.victims, rp->victims.v, rp->victims.n, "victims");
  expect_list(&got, &got.gone, rp->gone.v, rp->gone.n, "gone");
  expect_list(&got, &got.slots, rp->slots.v, rp->slots.n, "slots");
  expect_list(&got, &got.pages_new, rp->pages_new.v, rp->pages_new.n,
              "pages_new");
  expect_list(&got, &got.pages_freed, rp->pages_freed.v, rp->pages_freed.n,
              "pages_freed");
}

START_TEST(prefill_and_decode_are_runs_in_the_area) {
  /* The real thing: a window stepped through a chunk and a decode step,
   * their answers recorded as step.c does. */
  evd_session_t *s;
  evd_window_t *w;
  uint32_t pos[600], slots[600], victims[600], nv, i;
  evd_replay_t rp = {.op = EVD_RP_STEP};
  evd_rpool_t *pool;

  setup(1u << 20);
  pool = evd_table_pool(t);
  s = add("a", 512, 4, 16, 0);
  w = evd_session_window(s);
  for (i = 0; i < 600; i++)
    pos[i] = i + 1;
  ck_assert_int_eq(evd_window_steps(w, pos, 600, 0, slots, victims, &nv), 0);
  rp.positions = evd_u32s(pos, 600);
  rp.slots = evd_u32s(slots, 600);
  rp.victims = evd_u32s(victims, nv);
  rp.size = w->size;
  rp.newest = w->newest;
  roundtrip(s, &rp, 1); /* pinned 1..3, ring wrapping: still runs */
  ck_assert_uint_eq(pool->bytes, 0);
  /* A decode step through the short lane reads the same as set. */
  ck_assert_int_eq(evd_window_steps(w, (uint32_t[]){601}, 1, 0, slots,
                                    victims, &nv), 0);
  evd_replay_step(t, s, slots[0], nv == 1, victims[0], w->size);
  {
    evd_replay_t got;
    unsigned words;
    ck_assert_int_eq(evd_replay_get(s, &got), 1);
    evd_replay_area(s, &words);
    ck_assert_uint_eq(words, EVD__RP_WORDS);
    ck_assert_uint_eq(got.positions.n, 1);
    ck_assert_uint_eq(evd_replay_at(&got, &got.positions, 0), 601);
    ck_assert_uint_eq(evd_replay_at(&got, &got.slots, 0), slots[0]);
    ck_assert_uint_eq(got.victims.n, nv);
  }
  evd_table_free(t);
}
END_TEST

/* Steps s's window through positions and records the answer. */
static void step_and_record(evd_session_t *s, const uint32_t *pos,
                            uint32_t n, int in_area) {
  evd_window_t *w = evd_session_window(s);
  uint32_t slots[64], victims[64], nv;
  evd_replay_t rp = {.op = EVD_RP_STEP};

  ck_assert_int_eq(evd_window_steps(w, pos, n, 0, slots, victims, &nv), 0);
  rp.positions = evd_u32s(pos, n);
  rp.slots = evd_u32s(slots, n);
  rp.victims = evd_u32s(victims, nv);
  rp.size = w->size;
  rp.newest = w->newest;
  roundtrip(s, &rp, in_area);
}

START_TEST(slots_from_the_pins_into_the_ring) {
  /* sinks 3: positions 1, 2 take pins 1, 2, then the ring from 3 on. */
  evd_session_t *s, *x;

  setup(1u << 20);
  s = add("b", 8, 3, 1, 0);
  step_and_record(s, (uint32_t[]){1, 2, 3, 4, 5}, 5, 1);
  /* Wrapping past the last slot (budget 4, lookahead 2: slots 3..5). */
  x = add("c", 4, 3, 2, 0);
  step_and_record(x, (uint32_t[]){1, 2, 3, 4, 5, 6}, 6, 1);
  step_and_record(x, (uint32_t[]){7, 8, 9}, 3, 1);
  step_and_record(x, (uint32_t[]){10}, 1, 1);
  /* Gaps in the positions: the pool. */
  step_and_record(x, (uint32_t[]){12, 14}, 2, 0);
  evd_table_free(t);
}
END_TEST

START_TEST(commits_truncates_and_pages_as_runs) {
  evd_session_t *s;
  uint32_t dropped[] = {12, 13, 14}, victims[] = {3, 4}, pn[] = {5, 6};
  uint32_t pf[] = {0};
  evd_replay_t rp = {.op = EVD_RP_COMMIT, .arg = 11, .size = 8,
                     .newest = 11};

  setup(1u << 20);
  s = add("p", 8, 0, 4, 2);
  /* (No positions: only the newest matters to the window, set below.) */
  rp.gone = evd_u32s(dropped, 3);
  rp.victims = evd_u32s(victims, 2);
  rp.pages_new = evd_u32s(pn, 2);
  rp.pages_freed = evd_u32s(pf, 1);
  roundtrip(s, &rp, 1);
  rp.op = EVD_RP_TRUNCATE;
  rp.arg = 12;
  rp.victims = evd_u32s(NULL, 0);
  roundtrip(s, &rp, 1);
  evd_table_free(t);
}
END_TEST

START_TEST(anything_else_goes_to_the_pool) {
  evd_session_t *s;
  uint32_t pos[] = {3, 5, 9}, slots[] = {1, 2, 3}, v[] = {0};
  evd_replay_t rp = {.op = EVD_RP_STEP, .size = 3, .newest = 9};
  evd_rpool_t *pool;

  setup(1u << 20);
  pool = evd_table_pool(t);
  s = add("g", 3, 0, 1, 0);
  rp.positions = evd_u32s(pos, 3); /* gaps: not a run */
  rp.slots = evd_u32s(slots, 3);
  rp.victims = evd_u32s(v, 1);
  roundtrip(s, &rp, 0);
  ck_assert_uint_gt(pool->bytes, 0);
  /* Replaced by a run: the pooled record is freed. */
  evd_replay_step(t, s, 0, 0, 0, 3);
  ck_assert_uint_eq(pool->bytes, 0);
  roundtrip(s, &rp, 0);
  evd_replay_clear(t, s);
  ck_assert_uint_eq(pool->bytes, 0);
  ck_assert_int_eq(evd_replay_get(s, &rp), 0);
  evd_table_free(t); /* frees what the pool holds (ASan checks) */
}
END_TEST

START_TEST(a_full_pool_lets_the_oldest_go_keeping_the_hash) {
  char id[16];
  uint32_t pos[] = {3, 5, 9}, slots[] = {1, 2, 3};
  evd_replay_t rp = {.op = EVD_RP_STEP, .size = 4, .newest = 9};
  evd_session_t *s[10];
  evd_rpool_t *pool;
  uint64_t hash, want;
  int i;

  setup(300); /* room for two or three records */
  pool = evd_table_pool(t);
  rp.positions = evd_u32s(pos, 3);
  rp.slots = evd_u32s(slots, 3);
  want = evd_replay_hash(&rp);
  for (i = 0; i < 10; i++) {
    snprintf(id, sizeof id, "s%d", i);
    s[i] = add(id, 8, 0, 1, 0);
    rp.sinks = 0;
    rp.last = 8;
    evd_replay_set(t, s[i], &rp);
    ck_assert_uint_le(pool->bytes, 300);
  }
  ck_assert_uint_gt(pool->let_go, 0);
  /* The newest is kept; the oldest were let go, hash and all. */
  ck_assert_int_eq(evd_replay_get(s[9], &rp), 1);
  ck_assert_int_eq(evd_replay_get(s[0], &rp), 0);
  ck_assert_int_eq(evd_replay_gone(s[0], &hash), 1);
  ck_assert(hash == want);
  ck_assert_int_eq(evd_replay_gone(s[9], &hash), 0);
  /* Another request hashes differently. */
  rp.positions = evd_u32s((uint32_t[]){3, 5, 10}, 3);
  ck_assert(evd_replay_hash(&rp) != want);
  /* A record larger than the whole pool is let go at once. */
  {
    uint32_t big[200], bs[200];
    evd_replay_t r2 = {.op = EVD_RP_STEP, .size = 8, .newest = 1000};
    for (i = 0; i < 200; i++) {
      big[i] = 2 * (uint32_t)i + 602; /* gaps */
      bs[i] = (uint32_t)i % 9;
    }
    big[199] = 1000;
    r2.positions = evd_u32s(big, 200);
    r2.slots = evd_u32s(bs, 200);
    evd_replay_set(t, s[9], &r2);
    ck_assert_int_eq(evd_replay_gone(s[9], &hash), 1);
    ck_assert(hash == evd_replay_hash(&r2));
  }
  evd_table_free(t);
}
END_TEST

START_TEST(areas_load_back_and_refuse_nonsense) {
  evd_session_t *s, *x;
  uint32_t pos[] = {1, 2}, slots[] = {1, 2}, w[EVD__RP_WORDS];
  evd_replay_t rp = {.op = EVD_RP_STEP, .size = 3, .newest = 2}, got;
  const uint32_t *area;
  unsigned words;

  setup(1u << 20);
  s = add("a", 8, 0, 1, 0);
  x = add("b", 8, 0, 1, 0);
  ck_assert_int_eq(evd_window_steps(evd_session_window(s), pos, 2, 0, slots,
                                    (uint32_t[2]){0}, &words), 0);
  ck_assert_int_eq(evd_window_steps(evd_session_window(x), pos, 2, 0, slots,
                                    (uint32_t[2]){0}, &words), 0);
  rp.positions = evd_u32s(pos, 2);
  rp.slots = evd_u32s(slots, 2);
  rp.last = 8;
  evd_replay_set(t, s, &rp);
  area = evd_replay_area(s, &words);
  ck_assert_uint_eq(words, EVD__RP_WORDS);
  memcpy(w, area, sizeof w);
  ck_assert_int_eq(evd_replay_load_area(x, w, words), 0);
  ck_assert_int_eq(evd_replay_get(x, &got), 1);
  ck_assert_uint_eq(evd_replay_at(&got, &got.positions, 1), 2);
  ck_assert_int_eq(evd_replay_load_area(x, w, EVD__RP_WORDS_PAGED),
                   EVD_ECORRUPT);
  w[0] = (w[0] & ~0xf0u) | 7u << 4; /* no such op */
  ck_assert_int_eq(evd_replay_load_area(x, w, words), EVD_ECORRUPT);
  evd_replay_set_gone(t, x, 42);
  ck_assert_int_eq(evd_replay_get(x, &got), 0);
  evd_table_free(t);
}
END_TEST

static Suite *replay_suite(void) {
  Suite *s = suite_create("replay");
  TCase *tc = tcase_create("records");

  tcase_add_test(tc, prefill_and_decode_are_runs_in_the_area);
  tcase_add_test(tc, slots_from_the_pins_into_the_ring);
  tcase_add_test(tc, commits_truncates_and_pages_as_runs);
  tcase_add_test(tc, anything_else_goes_to_the_pool);
  tcase_add_test(tc, a_full_pool_lets_the_oldest_go_keeping_the_hash);
  tcase_add_test(tc, areas_load_back_and_refuse_nonsense);
  suite_add_tcase(s, tc);
  return s;
}

EVD_CHECK_MAIN(replay_suite())
