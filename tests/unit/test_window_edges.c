/* Unit tests of the sliding-window policy's edge cases: refused
 * configurations, full and stale steps, pins, caller memory; part of
 * build/test_window. */
#include <check.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "window.h"
#include "test_window.h"

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

void window_edge_tests(TCase *tc) {
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
}
