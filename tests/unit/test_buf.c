/* Unit tests of the response buffer: decimal formatting, JSON string
 * escaping, growth and reset. (A failing allocation is not simulated; the
 * oom flag is reached through an impossible reservation instead.) */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "crc.h"
#include "error.h"
#include "check_main.h"

/* Asserts that the buffer holds exactly `want`. */
static void expect_text(const evd_buf_t *b, const char *want) {
  size_t n = strlen(want);

  ck_assert_msg(!b->oom, "buffer went oom");
  ck_assert_msg(b->len == n && (n == 0 || memcmp(b->data, want, n) == 0),
                "buffer holds \"%.*s\" (%zu bytes), expected \"%s\"",
                (int)b->len, b->data != NULL ? b->data : "", b->len, want);
}

/* ---- decimal ------------------------------------------------------------ */

static const uint32_t u32_cases[] = {0,     1,          9,         10,
                                     11,    19,         99,        100,
                                     101,   999,        1000,      65535,
                                     65536, 999999999u, 1000000000u,
                                     2147483647u, 2147483648u, 4294967294u,
                                     4294967295u};

START_TEST(u32_formats_like_printf) {
  evd_buf_t b;
  char want[32];
  size_t i;

  evd_buf_init(&b);
  for (i = 0; i < sizeof u32_cases / sizeof u32_cases[0]; i++) {
    evd_buf_reset(&b, 1024);
    evd_buf_u32(&b, u32_cases[i]);
    snprintf(want, sizeof want, "%" PRIu32, u32_cases[i]);
    expect_text(&b, want);
  }
  evd_buf_free(&b);
}
END_TEST

START_TEST(u64_formats_like_printf) {
  static const uint64_t cases[] = {0,
                                   9,
                                   10,
                                   99,
                                   100,
                                   4294967295u,
                                   4294967296u,
                                   9999999999999999999u,
                                   10000000000000000000u,
                                   UINT64_MAX - 1,
                                   UINT64_MAX};
  evd_buf_t b;
  char want[32];
  size_t i;

  evd_buf_init(&b);
  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    evd_buf_reset(&b, 1024);
    evd_buf_u64(&b, cases[i]);
    snprintf(want, sizeof want, "%" PRIu64, cases[i]);
    expect_text(&b, want);
  }
  /* Every power of ten and its neighbours, where digit pairs change. */
  for (uint64_t p = 1; p <= 10000000000000000000u; p *= 10) {
    for (int d = -1; d <= 1; d++) {
      uint64_t v = p + (uint64_t)(int64_t)d;
      evd_buf_reset(&b, 1024);
      evd_buf_u64(&b, v);
      snprintf(want, sizeof want, "%" PRIu64, v);
      expect_text(&b, want);
    }
    if (p == 10000000000000000000u)
      break;
  }
  evd_buf_free(&b);
}
END_TEST

START_TEST(numbers_append_after_text) {
  evd_buf_t b;

  evd_buf_init(&b);
  evd_buf_str(&b, "a=");
  evd_buf_u32(&b, 0);
  evd_buf_chr(&b, ',');
  evd_buf_u64(&b, UINT64_MAX);
  evd_buf_add(&b, "!", 1);
  expect_text(&b, "a=0,18446744073709551615!");
  evd_buf_free(&b);
}
END_TEST

START_TEST(u32_array_forms) {
  static const uint32_t v[] = {0, 9, 10, 99, 100, 4294967295u};
  evd_buf_t b;

  evd_buf_init(&b);
  evd_buf_u32_array(&b, v, 0);
  expect_text(&b, "[]");
  evd_buf_reset(&b, 1024);
  evd_buf_u32_array(&b, v, 1);
  expect_text(&b, "[0]");
  evd_buf_reset(&b, 1024);
  evd_buf_u32_array(&b, v, 6);
  expect_text(&b, "[0,9,10,99,100,4294967295]");
  evd_buf_free(&b);
}
END_TEST

START_TEST(crc32c_known_value_and_both_ways_agree) {
  static const char check[] = "123456789";
  unsigned char data[4099];
  uint32_t a, b, x = 12345;
  size_t i, cut;

  /* The standard check value of CRC-32C. */
  ck_assert_uint_eq(evd_crc32c(0, check, 9), 0xE3069283u);
  ck_assert_uint_eq(evd__crc32c_sw(0, check, 9), 0xE3069283u);
  for (i = 0; i < sizeof data; i++) {
    x = x * 1103515245u + 12345u;
    data[i] = (unsigned char)(x >> 16);
  }
  /* Any length, any alignment, any split into pieces. */
  for (cut = 0; cut < 64; cut++) {
    a = evd_crc32c(evd_crc32c(0, data + 1, cut), data + 1 + cut,
                   sizeof data - 1 - cut);
    b = evd__crc32c_sw(0, data + 1, sizeof data - 1);
    ck_assert_uint_eq(a, b);
  }
}
END_TEST

START_TEST(u32_seq_values_and_ranges) {
  static const uint32_t v[] = {7, 4294967295u, 0};
  evd_buf_t b;

  evd_buf_init(&b);
  evd_buf_u32_seq(&b, v, 0, 0, 1);
  expect_text(&b, "");
  evd_buf_u32_seq(&b, v, 0, 3, 0);
  expect_text(&b, "7,4294967295,0");
  evd_buf_u32_seq(&b, NULL, 4294967293u, 3, 1);
  expect_text(&b, "7,4294967295,0,4294967293,4294967294,4294967295");
  evd_buf_reset(&b, 1024);
  evd_buf_u32_seq(&b, NULL, 98, 3, 0);
  expect_text(&b, "98,99,100");
  evd_buf_free(&b);
}
END_TEST

START_TEST(u32_array_of_max_values_fits_its_reservation) {
  /* The widest values use all 11 bytes per entry the writer reserves. */
  enum { N = 5000 };
  uint32_t *v = malloc(N * sizeof *v);
  evd_buf_t b;
  size_t i;

  ck_assert_ptr_nonnull(v);
  for (i = 0; i < N; i++)
    v[i] = 4294967295u - (uint32_t)i;
  evd_buf_init(&b);
  evd_buf_u32_array(&b, v, N);
  ck_assert(!b.oom);
  ck_assert_uint_eq(b.len, 2 + N * 10 + (N - 1));
  ck_assert_int_eq(b.data[0], '[');
  ck_assert_int_eq(b.data[b.len - 1], ']');
  ck_assert(memcmp(b.data, "[4294967295,4294967294,", 23) == 0);
  evd_buf_free(&b);
  free(v);
}
END_TEST

/* ---- JSON strings ------------------------------------------------------- */

START_TEST(json_str_plain_and_empty) {
  evd_buf_t b;

  evd_buf_init(&b);
  evd_buf_json_str(&b, "", 0);
  expect_text(&b, "\"\"");
  evd_buf_reset(&b, 1024);
  evd_buf_json_str(&b, "abc-._~ XYZ/019", 15);
  expect_text(&b, "\"abc-._~ XYZ/019\"");
  evd_buf_free(&b);
}
END_TEST

START_TEST(json_str_escapes_quote_and_backslash) {
  evd_buf_t b;

  evd_buf_init(&b);
  evd_buf_json_str(&b, "a\"b\\c", 5);
  expect_text(&b, "\"a\\\"b\\\\c\"");
  evd_buf_reset(&b, 1024);
  evd_buf_json_str(&b, "\"\\\"", 3);
  expect_text(&b, "\"\\\"\\\\\\\"\"");
  evd_buf_free(&b);
}
END_TEST

START_TEST(json_str_escapes_every_control_byte) {
  evd_buf_t b;
  char in, want[16];

  evd_buf_init(&b);
  for (int c = 0; c < 0x20; c++) {
    in = (char)c;
    evd_buf_reset(&b, 1024);
    evd_buf_json_str(&b, &in, 1);
    snprintf(want, sizeof want, "\"\\u%04x\"", c);
    expect_text(&b, want);
  }
  /* The length is honoured: an embedded NUL is escaped, not a terminator. */
  evd_buf_reset(&b, 1024);
  evd_buf_json_str(&b, "a\0b\n", 4);
  expect_text(&b, "\"a\\u0000b\\u000a\"");
  evd_buf_free(&b);
}
END_TEST

START_TEST(json_str_passes_other_bytes_through) {
  /* DEL, '/' and bytes >= 0x80 (UTF-8) need no escape in JSON. */
  static const char in[] = "\x7f/\xc3\xa9\xe2\x82\xac";
  evd_buf_t b;

  evd_buf_init(&b);
  evd_buf_json_str(&b, in, sizeof in - 1);
  ck_assert_uint_eq(b.len, sizeof in - 1 + 2);
  ck_assert(memcmp(b.data + 1, in, sizeof in - 1) == 0);
  ck_assert_int_eq(b.data[0], '"');
  ck_assert_int_eq(b.data[b.len - 1], '"');
  evd_buf_free(&b);
}
END_TEST

/* ---- storage ------------------------------------------------------------ */

START_TEST(init_allocates_nothing) {
  evd_buf_t b;

  evd_buf_init(&b);
  ck_assert_ptr_null(b.data);
  ck_assert_uint_eq(b.len, 0);
  ck_assert_uint_eq(b.cap, 0);
  ck_assert_int_eq(b.oom, 0);
  evd_buf_free(&b); /* freeing an empty buffer is fine */
  evd_buf_free(&b); /* and so is freeing it twice */
  ck_assert_ptr_null(b.data);
}
END_TEST

START_TEST(adding_nothing_to_an_empty_buffer) {
  evd_buf_t b;

  evd_buf_init(&b);
  evd_buf_add(&b, "", 0); /* once NULL + 0 in memcpy's destination */
  evd_buf_add(&b, NULL, 0);
  ck_assert_uint_eq(b.len, 0);
  ck_assert(!b.oom);
  evd_buf_str(&b, "");
  ck_assert_uint_eq(b.len, 0);
  evd_buf_free(&b);
}
END_TEST

START_TEST(growth_keeps_contents) {
  enum { N = 300000 };
  evd_buf_t b;
  size_t i, prev_cap = 0, over = 0, wrong = 0;
  int grew = 0;

  /* Counted in the loops, asserted once: 600,000 Check asserts took past
   * the suite's timeout under ASan on a loaded machine. */
  evd_buf_init(&b);
  for (i = 0; i < N; i++) {
    evd_buf_chr(&b, (char)('a' + i % 26));
    over += b.len > b.cap;
    if (b.cap != prev_cap) {
      grew++;
      prev_cap = b.cap;
    }
  }
  ck_assert_uint_eq(over, 0);
  ck_assert(!b.oom);
  ck_assert_uint_eq(b.len, N);
  ck_assert_msg(grew >= 5, "capacity changed only %d times", grew);
  for (i = 0; i < N; i++)
    wrong += b.data[i] != (char)('a' + i % 26);
  ck_assert_uint_eq(wrong, 0);
  /* One large append past the capacity. */
  {
    size_t big = 3 * b.cap, old = b.len;
    char *blob = malloc(big);
    ck_assert_ptr_nonnull(blob);
    memset(blob, 'z', big);
    evd_buf_add(&b, blob, big);
    ck_assert(!b.oom);
    ck_assert_uint_eq(b.len, old + big);
    ck_assert_int_eq(b.data[old - 1], (char)('a' + (N - 1) % 26));
    ck_assert_int_eq(b.data[old], 'z');
    ck_assert_int_eq(b.data[b.len - 1], 'z');
    free(blob);
  }
  evd_buf_free(&b);
}
END_TEST

START_TEST(reserve_makes_room_without_changing_length) {
  evd_buf_t b;

  evd_buf_init(&b);
  ck_assert_int_eq(evd_buf_reserve(&b, 0), 0);
  ck_assert_int_eq(evd_buf_reserve(&b, 1000), 0);
  ck_assert_uint_eq(b.len, 0);
  ck_assert(b.cap >= 1000);
  evd_buf_str(&b, "xy");
  ck_assert_int_eq(evd_buf_reserve(&b, b.cap - b.len), 0);
  expect_text(&b, "xy");
  evd_buf_free(&b);
}
END_TEST

START_TEST(reserve_of_absurd_size_fails_and_sticks) {
  /* Doubling cannot reach this without overflow: refused before any
   * allocation is tried, and the flag makes later appends no-ops. */
  evd_buf_t b;

  evd_buf_init(&b);
  evd_buf_str(&b, "ab");
  ck_assert_int_eq(evd_buf_reserve(&b, SIZE_MAX - 1), EVD_ENOMEM);
  ck_assert_int_eq(b.oom, 1);
  evd_buf_str(&b, "cd");
  evd_buf_u32(&b, 7);
  ck_assert_uint_eq(b.len, 2);
  ck_assert_int_eq(evd_buf_reserve(&b, 1), EVD_ENOMEM);
  /* Reset clears the flag and the buffer works again. */
  evd_buf_reset(&b, SIZE_MAX);
  ck_assert_int_eq(b.oom, 0);
  evd_buf_str(&b, "ok");
  expect_text(&b, "ok");
  evd_buf_free(&b);
}
END_TEST

START_TEST(reset_keeps_small_storage) {
  evd_buf_t b;
  char *data;
  size_t cap;

  evd_buf_init(&b);
  evd_buf_str(&b, "hello");
  data = b.data;
  cap = b.cap;
  evd_buf_reset(&b, cap); /* cap == keep: kept */
  ck_assert_ptr_eq(b.data, data);
  ck_assert_uint_eq(b.cap, cap);
  ck_assert_uint_eq(b.len, 0);
  evd_buf_str(&b, "again");
  expect_text(&b, "again");
  evd_buf_free(&b);
}
END_TEST

START_TEST(reset_frees_storage_grown_past_keep) {
  evd_buf_t b;
  size_t cap;

  evd_buf_init(&b);
  evd_buf_str(&b, "hello");
  cap = b.cap;
  evd_buf_reset(&b, cap - 1); /* cap > keep: freed */
  ck_assert_ptr_null(b.data);
  ck_assert_uint_eq(b.cap, 0);
  ck_assert_uint_eq(b.len, 0);
  ck_assert_int_eq(b.oom, 0);
  evd_buf_str(&b, "x");
  expect_text(&b, "x");
  evd_buf_reset(&b, 0); /* keep 0 frees any storage */
  ck_assert_ptr_null(b.data);
  evd_buf_free(&b);
}
END_TEST

static Suite *buf_suite(void) {
  Suite *s = suite_create("buf");
  TCase *tc = tcase_create("core");

  tcase_add_test(tc, u32_formats_like_printf);
  tcase_add_test(tc, u64_formats_like_printf);
  tcase_add_test(tc, numbers_append_after_text);
  tcase_add_test(tc, u32_array_forms);
  tcase_add_test(tc, u32_seq_values_and_ranges);
  tcase_add_test(tc, crc32c_known_value_and_both_ways_agree);
  tcase_add_test(tc, u32_array_of_max_values_fits_its_reservation);
  tcase_add_test(tc, json_str_plain_and_empty);
  tcase_add_test(tc, json_str_escapes_quote_and_backslash);
  tcase_add_test(tc, json_str_escapes_every_control_byte);
  tcase_add_test(tc, json_str_passes_other_bytes_through);
  tcase_add_test(tc, init_allocates_nothing);
  tcase_add_test(tc, adding_nothing_to_an_empty_buffer);
  tcase_add_test(tc, growth_keeps_contents);
  tcase_add_test(tc, reserve_makes_room_without_changing_length);
  tcase_add_test(tc, reserve_of_absurd_size_fails_and_sticks);
  tcase_add_test(tc, reset_keeps_small_storage);
  tcase_add_test(tc, reset_frees_storage_grown_past_keep);
  suite_add_tcase(s, tc);
  return s;
}

EVD_CHECK_MAIN(buf_suite())
