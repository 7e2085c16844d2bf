/* Unit tests of the session table: ids, add/find/remove/touch, last-use
 * order, limits, block sizes, and the suite (the randomized run against
 * plain arrays is in test_session_model.c). */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "error.h"
#include "session.h"
#include "check_main.h"
#include "test_session.h"

/* ---- ids ---------------------------------------------------------------- */

static int allowed_byte(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '~' ||
         c == '-';
}

START_TEST(id_lengths_1_to_128_only) {
  char id[EVD_SESSION_ID_MAX + 2];

  memset(id, 'a', sizeof id);
  ck_assert_int_eq(evd_session_id_valid(id, 0), 0);
  ck_assert_int_eq(evd_session_id_valid("", 0), 0);
  ck_assert_int_eq(evd_session_id_valid(id, 1), 1);
  ck_assert_int_eq(evd_session_id_valid(id, 2), 1);
  ck_assert_int_eq(evd_session_id_valid(id, 127), 1);
  ck_assert_int_eq(evd_session_id_valid(id, 128), 1);
  ck_assert_int_eq(evd_session_id_valid(id, 129), 0);
  ck_assert_int_eq(evd_session_id_valid(id, 130), 0);
  ck_assert_int_eq(evd_session_id_valid(id, (size_t)-1), 0);
}
END_TEST

START_TEST(id_every_byte_class) {
  /* Each of the 256 byte values alone, first, in the middle and last of a
   * valid id: allowed exactly when it is in [A-Za-z0-9._~-]. */
  char id[5];
  int c, want;

  for (c = 0; c < 256; c++) {
    want = allowed_byte(c);
    id[0] = (char)c;
    ck_assert_msg(evd_session_id_valid(id, 1) == want, "byte 0x%02x alone",
                  c);
    memcpy(id, "abcd", 4);
    id[0] = (char)c;
    ck_assert_msg(evd_session_id_valid(id, 4) == want, "byte 0x%02x first",
                  c);
    memcpy(id, "abcd", 4);
    id[2] = (char)c;
    ck_assert_msg(evd_session_id_valid(id, 4) == want, "byte 0x%02x middle",
                  c);
    memcpy(id, "abcd", 4);
    id[3] = (char)c;
    ck_assert_msg(evd_session_id_valid(id, 4) == want, "byte 0x%02x last",
                  c);
  }
  /* The length, not a NUL, ends the id: bytes past it are not looked at,
   * and a NUL inside it is refused. */
  ck_assert_int_eq(evd_session_id_valid("ab/c", 2), 1);
  ck_assert_int_eq(evd_session_id_valid("ab\0c", 4), 0);
  /* Percent-escapes are not decoded, so they are refused. */
  ck_assert_int_eq(evd_session_id_valid("a%41", 4), 0);
  ck_assert_int_eq(evd_session_id_valid("A-Z_a.z~09", 10), 1);
}
END_TEST

START_TEST(id_of_128_bytes_stored_whole) {
  char id[EVD_SESSION_ID_MAX + 1];
  evd_table_t *t = new_table(10);
  evd_session_t *s;
  int i;

  for (i = 0; i < EVD_SESSION_ID_MAX; i++)
    id[i] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ._~-"
        [i % 66];
  id[EVD_SESSION_ID_MAX] = '\0';
  s = add(t, id, 4, 0, 0);
  ck_assert_uint_eq(s->idlen, EVD_SESSION_ID_MAX);
  ck_assert(memcmp(s->id, id, EVD_SESSION_ID_MAX) == 0);
  ck_assert_ptr_eq(find(t, id), s);
  /* A prefix or a one-byte change is another id. */
  ck_assert_ptr_null(evd_table_find(t, id, EVD_SESSION_ID_MAX - 1));
  id[EVD_SESSION_ID_MAX - 1] = 'x';
  ck_assert_ptr_null(find(t, id));
  evd_table_free(t);
}
END_TEST

/* ---- add, find, remove, touch ------------------------------------------- */

START_TEST(add_then_find_then_remove) {
  evd_table_t *t = new_table(100);
  evd_session_t *a, *b;
  evd_window_t *w;

  a = add(t, "a", 7, 2, 5);
  b = add(t, "b", 1, 0, 6);
  ck_assert_uint_eq(evd_table_count(t), 2);
  ck_assert_ptr_eq(find(t, "a"), a);
  ck_assert_ptr_eq(find(t, "b"), b);
  ck_assert_ptr_null(find(t, "c"));
  ck_assert_ptr_null(find(t, "ab"));
  ck_assert_ptr_null(find(t, "A"));
  ck_assert_uint_eq(a->used, 5);
  ck_assert_uint_eq(b->used, 6);
  /* A new session's window holds position 0 in slot 0. */
  w = evd_session_window(a);
  ck_assert_uint_eq(w->budget, 7);
  ck_assert_uint_eq(w->sinks, 2);
  ck_assert_uint_eq(evd_window_size(w), 1);
  ck_assert_uint_eq(evd_window_newest(w), 0);
  ck_assert_uint_eq(((uintptr_t)w) % sizeof(uint32_t), 0);
  evd_table_remove(t, a);
  ck_assert_uint_eq(evd_table_count(t), 1);
  ck_assert_ptr_null(find(t, "a"));
  ck_assert_ptr_eq(find(t, "b"), b);
  ck_assert_ptr_eq(evd_table_oldest(t), b);
  evd_table_remove(t, b);
  ck_assert_uint_eq(evd_table_count(t), 0);
  ck_assert_ptr_null(evd_table_oldest(t));
  /* The id can be used again after its removal. */
  a = add(t, "a", 3, 0, 9);
  ck_assert_ptr_eq(find(t, "a"), a);
  evd_table_free(t);
}
END_TEST

START_TEST(add_refuses_bad_window_config_unchanged) {
  evd_table_t *t = new_table(100);
  evd_session_t *s = NULL; /* must stay untouched */

  ck_assert_int_eq(add_n(t, "x", 1, 0, 0, 0, &s), EVD_EINVAL);
  ck_assert_int_eq(add_n(t, "x", 1, 4, 4, 0, &s), EVD_EINVAL);
  ck_assert_int_eq(add_n(t, "x", 1, 4, 5, 0, &s), EVD_EINVAL);
  ck_assert_int_eq(
      add_n(t, "x", 1, EVD_WINDOW_MAX_BUDGET + 1u, 0, 0, &s),
      EVD_EINVAL);
  {
    evd_session_config_t c = {4, 0, 0, 0}; /* lookahead 0 */
    ck_assert_int_eq(evd_table_add(t, "x", 1, &c, 0, &s), EVD_EINVAL);
    c = (evd_session_config_t){UINT32_MAX - 3, 0, 4, 0}; /* slots overflow */
    ck_assert_int_eq(evd_table_add(t, "x", 1, &c, 0, &s), EVD_EINVAL);
  }
  ck_assert_ptr_null(s);
  ck_assert_uint_eq(evd_table_count(t), 0);
  ck_assert_ptr_null(find(t, "x"));
  ck_assert_ptr_null(evd_table_oldest(t));
  evd_table_free(t);
}
END_TEST

START_TEST(session_limit_refuses_unchanged) {
  evd_table_t *t = new_table(3);
  evd_session_t *s = NULL, *a;

  a = add(t, "a", 4, 0, 1);
  add(t, "b", 4, 0, 2);
  add(t, "c", 4, 0, 3);
  ck_assert_int_eq(add_n(t, "d", 1, 4, 0, 4, &s), EVD_ELIMIT);
  ck_assert_ptr_null(s);
  ck_assert_uint_eq(evd_table_count(t), 3);
  ck_assert_ptr_null(find(t, "d"));
  ck_assert_ptr_eq(evd_table_oldest(t), a);
  /* Room again after a removal. */
  evd_table_remove(t, a);
  add(t, "d", 4, 0, 5);
  ck_assert_uint_eq(evd_table_count(t), 3);
  ck_assert_int_eq(add_n(t, "e", 1, 4, 0, 6, &s), EVD_ELIMIT);
  evd_table_free(t);
}
END_TEST

START_TEST(session_limit_zero_refuses_all) {
  evd_table_t *t = new_table(0);
  evd_session_t *s = NULL;

  ck_assert_int_eq(add_n(t, "a", 1, 4, 0, 0, &s), EVD_ELIMIT);
  ck_assert_uint_eq(evd_table_count(t), 0);
  evd_table_free(t);
}
END_TEST

START_TEST(last_use_order_follows_touch) {
  evd_table_t *t = new_table(100);
  evd_session_t *a = add(t, "a", 4, 0, 1), *b = add(t, "b", 4, 0, 2),
                *c = add(t, "c", 4, 0, 3);

  ck_assert_ptr_eq(evd_table_oldest(t), a);
  ck_assert_ptr_eq(evd_table_younger(a), b);
  ck_assert_ptr_eq(evd_table_younger(b), c);
  ck_assert_ptr_null(evd_table_younger(c));
  evd_table_touch(t, a, 10); /* oldest to youngest */
  ck_assert_uint_eq(a->used, 10);
  ck_assert_ptr_eq(evd_table_oldest(t), b);
  ck_assert_ptr_eq(evd_table_younger(b), c);
  ck_assert_ptr_eq(evd_table_younger(c), a);
  ck_assert_ptr_null(evd_table_younger(a));
  evd_table_touch(t, c, 11); /* middle to youngest */
  ck_assert_ptr_eq(evd_table_oldest(t), b);
  ck_assert_ptr_eq(evd_table_younger(b), a);
  ck_assert_ptr_eq(evd_table_younger(a), c);
  ck_assert_ptr_null(evd_table_younger(c));
  evd_table_touch(t, c, 12); /* youngest stays, its tick moves */
  ck_assert_uint_eq(c->used, 12);
  ck_assert_ptr_eq(evd_table_younger(a), c);
  ck_assert_ptr_null(evd_table_younger(c));
  evd_table_remove(t, a); /* middle removal relinks */
  ck_assert_ptr_eq(evd_table_younger(b), c);
  evd_table_remove(t, c); /* youngest removal */
  ck_assert_ptr_eq(evd_table_oldest(t), b);
  ck_assert_ptr_null(evd_table_younger(b));
  evd_table_touch(t, b, 13); /* sole session */
  ck_assert_ptr_eq(evd_table_oldest(t), b);
  ck_assert_uint_eq(b->used, 13);
  evd_table_free(t);
}
END_TEST

START_TEST(remove_while_iterating_oldest_first) {
  enum { N = 3000 }; /* past MIN_BUCKETS, so removals also shrink */
  evd_table_t *t = new_table(N);
  evd_session_t *s, *next;
  char id[16];
  int i, k;

  for (i = 0; i < N; i++) {
    snprintf(id, sizeof id, "s%d", i);
    add(t, id, 2, 0, (uint32_t)i);
  }
  /* Remove every session whose number is odd, fetching the successor
   * first, as the reaper does. */
  for (s = evd_table_oldest(t), i = 0; s != NULL; s = next, i++) {
    next = evd_table_younger(s);
    if (i % 2 == 1)
      evd_table_remove(t, s);
  }
  ck_assert_int_eq(i, N);
  ck_assert_uint_eq(evd_table_count(t), N / 2);
  for (s = evd_table_oldest(t), k = 0; s != NULL; s = evd_table_younger(s)) {
    snprintf(id, sizeof id, "s%d", 2 * k);
    ck_assert_uint_eq(s->idlen, strlen(id));
    ck_assert(memcmp(s->id, id, s->idlen) == 0);
    ck_assert_ptr_eq(find(t, id), s);
    k++;
  }
  ck_assert_int_eq(k, N / 2);
  for (i = 1; i < N; i += 2) {
    snprintf(id, sizeof id, "s%d", i);
    ck_assert_ptr_null(find(t, id));
  }
  evd_table_free(t);
}
END_TEST

START_TEST(hash_key_differs_between_tables) {
  /* Each table draws its own key: the same ids hash differently (a chance
   * of 2^-128 that all four agree by accident). */
  static const char *const ids[] = {"a", "session-1", "x.y~z", "0"};
  evd_table_t *t1 = new_table(10), *t2 = new_table(10);
  int differ = 0;
  size_t i;

  for (i = 0; i < 4; i++) {
    evd_session_t *s1 = add(t1, ids[i], 2, 0, 0), *s2 = add(t2, ids[i], 2, 0, 0);
    differ += evd_table_hash(t1, ids[i], strlen(ids[i])) !=
              evd_table_hash(t2, ids[i], strlen(ids[i]));
    (void)s1;
    (void)s2;
  }
  ck_assert_int_gt(differ, 0);
  evd_table_free(t1);
  evd_table_free(t2);
}
END_TEST

/* Loading saved state sizes the table once for all its sessions: no
 * rehash on the way (the first insert into a big empty table used to shrink
 * it), every session found, and removals shrink it again as usual. 80 MiB
 * of heap are readied too (untouched, so cheap). */
START_TEST(reserve_sizes_buckets_once) {
  enum { N = 5000 };
  evd_table_t *t = new_table(N + 10);
  evd_session_t *s[N];
  char id[16];
  size_t before, buckets;
  int i;

  before = evd__table_buckets(t);
  evd_table_reserve(t, N, (size_t)80 << 20);
  buckets = evd__table_buckets(t);
  ck_assert_uint_ge(buckets, N);
  ck_assert_uint_lt(buckets, 2 * N);
  ck_assert_uint_gt(buckets, before);
  ck_assert_uint_eq(buckets & (buckets - 1), 0);
  for (i = 0; i < N; i++) {
    snprintf(id, sizeof id, "r%d", i);
    s[i] = add(t, id, 16, 4, (uint32_t)i);
    REQUIRE(evd__table_buckets(t) == buckets,
            "insert %d changed the buckets: %zu -> %zu", i, buckets,
            evd__table_buckets(t));
  }
  evd_table_reserve_done();
  /* A table that is not empty is left as it is. */
  evd_table_reserve(t, 4 * N, 0);
  ck_assert_uint_eq(evd__table_buckets(t), buckets);
  for (i = 0; i < N; i++) {
    snprintf(id, sizeof id, "r%d", i);
    REQUIRE(find(t, id) == s[i], "session %s not found", id);
  }
  for (i = 0; i < N; i++)
    evd_table_remove(t, s[i]);
  ck_assert_uint_eq(evd_table_count(t), 0);
  ck_assert_uint_lt(evd__table_buckets(t), buckets);
  evd_table_free(t);
}
END_TEST

/* ---- footprint ---------------------------------------------------------- */

START_TEST(footprint_is_header_id_and_window) {
  static const uint32_t budgets[] = {1, 2, 512, 1048576};
  size_t idlen, i;

  for (idlen = 1; idlen <= EVD_SESSION_ID_MAX; idlen++) {
    for (i = 0; i < sizeof budgets / sizeof budgets[0]; i++) {
      evd_session_config_t c = {budgets[i], 0, 1, 0};
      size_t f = evd_session_footprint(idlen, &c);
      size_t head = f - evd_window_footprint(budgets[i], 1);
      size_t rp = 4 * EVD__RP_WORDS; /* the replay area */
      ck_assert_msg(head >= offsetof(evd_session_t, id) + idlen + rp &&
                        head < offsetof(evd_session_t, id) + idlen + rp + 4 &&
                        head % sizeof(uint32_t) == 0,
                    "idlen %zu budget %u: %zu bytes before the window",
                    idlen, budgets[i], head);
    }
    /* One more budget costs exactly one more uint32 slot. */
    ck_assert_uint_eq(evd_session_footprint(idlen, &(evd_session_config_t){
                                                       513, 0, 1, 0}) -
                          evd_session_footprint(idlen, &(evd_session_config_t){
                                                       512, 0, 1, 0}),
                      sizeof(uint32_t));
  }
}
END_TEST

START_TEST(window_sits_inside_the_block) {
  /* The window must end exactly at the footprint: ASan would catch a write
   * past the block when the ring is filled. */
  evd_table_t *t = new_table(200);
  char id[EVD_SESSION_ID_MAX + 1];
  size_t idlen;

  memset(id, 'q', sizeof id);
  for (idlen = 1; idlen <= EVD_SESSION_ID_MAX; idlen++) {
    evd_session_t *s = NULL;
    evd_window_t *w;
    uint32_t p, slot, victim;
    ck_assert_int_eq(add_n(t, id, idlen, 3, 1, 0, &s), 0);
    w = evd_session_window(s);
    ck_assert_uint_eq((size_t)((char *)evd_session_window(s) - (char *)s),
                      evd_session_footprint(idlen, &(evd_session_config_t){
                                                       3, 1, 1, 0}) -
                          evd_window_footprint(3, 1));
    ck_assert((char *)w >= s->id + idlen);
    for (p = 1; p <= 10; p++) /* fills every slot of the ring */
      ck_assert_int_ge(evd_window_advance(w, p, &slot, &victim), 0);
    ck_assert_uint_eq(evd_window_size(w), 3);
    ck_assert(memcmp(s->id, id, idlen) == 0); /* the id was not overwritten */
  }
  evd_table_free(t);
}
END_TEST
static Suite *session_suite(void) {
  Suite *s = suite_create("session");
  TCase *ids = tcase_create("ids");
  TCase *table = tcase_create("table");

  tcase_add_test(ids, id_lengths_1_to_128_only);
  tcase_add_test(ids, id_every_byte_class);
  tcase_add_test(ids, id_of_128_bytes_stored_whole);
  suite_add_tcase(s, ids);

  tcase_set_timeout(table, 120);
  tcase_add_test(table, add_then_find_then_remove);
  tcase_add_test(table, add_refuses_bad_window_config_unchanged);
  tcase_add_test(table, session_limit_refuses_unchanged);
  tcase_add_test(table, session_limit_zero_refuses_all);
  tcase_add_test(table, last_use_order_follows_touch);
  tcase_add_test(table, remove_while_iterating_oldest_first);
  tcase_add_test(table, hash_key_differs_between_tables);
  session_model_tests(table); /* against plain arrays */
  tcase_add_test(table, reserve_sizes_buckets_once);
  tcase_add_test(table, footprint_is_header_id_and_window);
  tcase_add_test(table, window_sits_inside_the_block);
  suite_add_tcase(s, table);

  return s;
}

EVD_CHECK_MAIN(session_suite())
