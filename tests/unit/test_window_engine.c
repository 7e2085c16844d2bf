/* Unit tests of the window's engine operations (lookahead, drafts and
 * commit, truncate, restore) and of the ring primitives the daemon uses
 * (runs, slot_back, ring_nth, same_state); part of build/test_window. */
#include <check.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "window.h"
#include "test_window.h"

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

/* ---- ring primitives ------------------------------------------------ */

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

void window_engine_tests(TCase *tc) {
  tcase_add_test(tc, chunk_longer_than_budget_uses_lookahead_slots);
  tcase_add_test(tc, lookahead_one_sub_steps_are_single_steps);
  tcase_add_test(tc, drafts_then_partial_commit);
  tcase_add_test(tc, truncate_into_the_sinks_repins);
  tcase_add_test(tc, restore_refuses_impossible_states);
  tcase_add_test(tc, prepare_then_restore_is_the_saved_window);
  tcase_add_test(tc, runs_and_slot_back_match_at);
  tcase_add_test(tc, ring_nth_is_the_order_slots_are_handed_out);
  tcase_add_test(tc, same_state_compares_positions_slots_and_cursors);
}
