/* Unit tests of the session table: ids, add/find/remove/touch, last-use
 * order, limits, block sizes, and a randomized run against
 * plain arrays through several rehashes up and down. */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "evictd/error.h"
#include "evictd/session.h"
#include "check_main.h"

/* Check records the place of every passing ck_assert with a write(2); in
 * loops of 10^5 operations that would dominate the run time, so the hot
 * paths here use this, which costs nothing until it fails. */
#define REQUIRE(cond, ...)                                                     \
  do {                                                                         \
    if (!(cond))                                                               \
      ck_abort_msg(__VA_ARGS__);                                               \
  } while (0)

static evd_table_t *new_table(uint32_t max) {
  evd_table_t *t = NULL;

  ck_assert_int_eq(evd_table_new(&t, max, 1u << 20), 0);
  ck_assert_ptr_nonnull(t);
  ck_assert_uint_eq(evd_table_count(t), 0);
  ck_assert_ptr_null(evd_table_oldest(t));
  return t;
}

/* evd_table_add with lookahead 1 and no pages. */
static int add_n(evd_table_t *t, const char *id, size_t len, uint32_t budget,
                 uint32_t sinks, uint32_t now, evd_session_t **out) {
  evd_session_config_t cfg = {budget, sinks, 1, 0};
  return evd_table_add(t, id, len, &cfg, now, out);
}

static evd_session_t *add(evd_table_t *t, const char *id, uint32_t budget,
                          uint32_t sinks, uint32_t now) {
  evd_session_t *s = NULL;
  int err = add_n(t, id, strlen(id), budget, sinks, now, &s);

  ck_assert_msg(err == 0, "add %s: %s", id, evd_strerror(err));
  ck_assert_ptr_nonnull(s);
  return s;
}

static evd_session_t *find(evd_table_t *t, const char *id) {
  return evd_table_find(t, id, strlen(id));
}

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

/* ---- randomized run against plain arrays -------------------------------- */

static uint64_t rng_next(uint64_t *s) {
  /* splitmix64: a fixed, well-known mixing sequence. */
  uint64_t z = (*s += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

/* The id of key k: "k<decimal>" and then k-dependent '.' padding, so ids
 * are unique per key and their lengths spread over 2..128. */
static size_t key_id(uint32_t k, char *id) {
  size_t n = (size_t)snprintf(id, EVD_SESSION_ID_MAX + 1, "k%" PRIu32, k);
  size_t pad = k % 97 == 0 ? EVD_SESSION_ID_MAX - n
                           : (size_t)((k * 2654435761u) >> 27) % 24;

  memset(id + n, '.', pad);
  return n + pad;
}

/* Key back from a stored id. */
static uint32_t id_key(const evd_session_t *s) {
  char tmp[EVD_SESSION_ID_MAX + 1];

  memcpy(tmp, s->id, s->idlen);
  tmp[s->idlen] = '\0';
  return (uint32_t)strtoul(tmp + 1, NULL, 10);
}

/* The reference: per key, the session (NULL when absent) and the stamp of
 * its last add or touch; the live keys in a plain array; and the log of
 * stamps, from which the oldest live session is the first stamp that is
 * still its key's current one. */
typedef struct {
  uint32_t nkeys;              /* keys handed out so far */
  evd_session_t **sess;        /* [key] */
  uint32_t *stamp;             /* [key] */
  uint32_t *live, *live_at;    /* live keys; [key] -> index in live */
  uint32_t nlive;
  uint32_t *log, nstamps, cursor; /* [stamp] -> key */
} ref_t;

enum { REF_MAX = 400000 };

static void ref_init(ref_t *r) {
  memset(r, 0, sizeof *r);
  r->sess = calloc(REF_MAX, sizeof *r->sess);
  r->stamp = calloc(REF_MAX, sizeof *r->stamp);
  r->live = calloc(REF_MAX, sizeof *r->live);
  r->live_at = calloc(REF_MAX, sizeof *r->live_at);
  r->log = calloc(REF_MAX, sizeof *r->log);
  ck_assert(r->sess && r->stamp && r->live && r->live_at && r->log);
}

static void ref_free(ref_t *r) {
  free(r->sess);
  free(r->stamp);
  free(r->live);
  free(r->live_at);
  free(r->log);
}

static uint32_t ref_use(ref_t *r, uint32_t k) {
  REQUIRE(r->nstamps < REF_MAX, "too many stamps");
  r->stamp[k] = r->nstamps;
  r->log[r->nstamps] = k;
  return r->nstamps++;
}

static evd_session_t *ref_oldest(ref_t *r) {
  while (r->cursor < r->nstamps) {
    uint32_t k = r->log[r->cursor];
    if (r->sess[k] != NULL && r->stamp[k] == r->cursor)
      return r->sess[k];
    r->cursor++;
  }
  return NULL;
}

/* Walks the whole table oldest first and compares it with the reference. */
static void verify_all(evd_table_t *t, ref_t *r, uint64_t seed, long op) {
  evd_session_t *s;
  uint32_t n = 0, prev = 0;
  char id[EVD_SESSION_ID_MAX + 1];

  REQUIRE(evd_table_count(t) == r->nlive,
                "seed %" PRIu64 " op %ld: count %u, reference %u", seed, op,
                evd_table_count(t), r->nlive);
  for (s = evd_table_oldest(t); s != NULL; s = evd_table_younger(s)) {
    uint32_t k = id_key(s);
    REQUIRE(k < r->nkeys && r->sess[k] == s,
                  "seed %" PRIu64 " op %ld: session %.*s not in reference",
                  seed, op, (int)s->idlen, s->id);
    REQUIRE(n == 0 || r->stamp[k] > prev,
                  "seed %" PRIu64 " op %ld: last-use order broken at %.*s",
                  seed, op, (int)s->idlen, s->id);
    REQUIRE(s->used == r->stamp[k],
                  "seed %" PRIu64 " op %ld: tick %u, reference %u", seed, op,
                  s->used, r->stamp[k]);
    REQUIRE(evd_table_find(t, id, key_id(k, id)) == s,
                  "seed %" PRIu64 " op %ld: find %.*s", seed, op,
                  (int)s->idlen, s->id);
    prev = r->stamp[k];
    n++;
    REQUIRE(n <= r->nlive, "seed %" PRIu64 " op %ld: list too long",
                  seed, op);
  }
  REQUIRE(n == r->nlive, "seed %" PRIu64 " op %ld: list holds %u, "
                "reference %u", seed, op, n, r->nlive);
}

START_TEST(random_ops_match_plain_arrays) {
  const char *env = getenv("EVD_SEED");
  const uint64_t seed = env != NULL ? strtoull(env, NULL, 0) : 20261202u;
  const long ops = 250000;
  const uint32_t high = 20000, low = 40; /* 1024 buckets -> 32768 and back */
  uint64_t rs = seed;
  evd_table_t *t = new_table(high + 100);
  char id[EVD_SESSION_ID_MAX + 1];
  int growing = 1, cycles = 0;
  uint32_t peak = 0;
  ref_t r;
  long op;

  ref_init(&r);
  for (op = 0; op < ops; op++) {
    uint64_t x = rng_next(&rs);
    unsigned dice = (unsigned)(x % 100);
    evd_session_t *s;
    uint32_t k;
    size_t len;

    if (growing && r.nlive >= high) {
      growing = 0;
      verify_all(t, &r, seed, op);
    } else if (!growing && r.nlive <= low) {
      growing = 1;
      cycles++;
      verify_all(t, &r, seed, op);
    }
    /* Growing: 55% add, 20% remove; shrinking: 15% add, 60% remove; the
     * rest finds (hit and miss) and touches. */
    if (dice < (growing ? 55u : 15u) || r.nlive == 0) {
      uint32_t budget = 1 + (uint32_t)(x >> 8) % 6;
      uint32_t sinks = (uint32_t)(x >> 16) % budget;
      k = r.nkeys++;
      REQUIRE(k < REF_MAX, "too many keys");
      len = key_id(k, id);
      s = NULL;
      REQUIRE(add_n(t, id, len, budget, sinks, r.nstamps, &s) == 0,
                    "seed %" PRIu64 " op %ld: add %.*s", seed, op, (int)len,
                    id);
      REQUIRE(s->idlen == len && memcmp(s->id, id, len) == 0,
                    "seed %" PRIu64 " op %ld: id not stored", seed, op);
      REQUIRE(evd_session_window(s)->budget == budget &&
                  evd_session_window(s)->sinks == sinks,
              "seed %" PRIu64 " op %ld: window config", seed, op);
      r.sess[k] = s;
      ref_use(&r, k);
      r.live_at[k] = r.nlive;
      r.live[r.nlive++] = k;
    } else if (dice < 75) { /* remove a live one */
      uint32_t i = (uint32_t)(x >> 32) % r.nlive, last;
      k = r.live[i];
      len = key_id(k, id);
      s = evd_table_find(t, id, len);
      REQUIRE(s == r.sess[k], "seed %" PRIu64 " op %ld: find before "
                    "remove %.*s", seed, op, (int)len, id);
      evd_table_remove(t, s);
      r.sess[k] = NULL;
      last = r.live[--r.nlive];
      r.live[i] = last;
      r.live_at[last] = i;
      REQUIRE(evd_table_find(t, id, len) == NULL,
                    "seed %" PRIu64 " op %ld: %.*s found after removal", seed,
                    op, (int)len, id);
    } else if (dice < 85) { /* find a live one */
      k = r.live[(uint32_t)(x >> 32) % r.nlive];
      len = key_id(k, id);
      REQUIRE(evd_table_find(t, id, len) == r.sess[k],
                    "seed %" PRIu64 " op %ld: find %.*s", seed, op, (int)len,
                    id);
    } else if (dice < 92) { /* find one removed or never added */
      k = (uint32_t)(x >> 32) % (r.nkeys + 1000);
      if (k < r.nkeys && r.sess[k] != NULL)
        k = r.nkeys + (uint32_t)(x >> 8) % 1000;
      len = key_id(k, id);
      REQUIRE(evd_table_find(t, id, len) == NULL,
                    "seed %" PRIu64 " op %ld: absent %.*s found", seed, op,
                    (int)len, id);
    } else { /* touch a live one */
      k = r.live[(uint32_t)(x >> 32) % r.nlive];
      evd_table_touch(t, r.sess[k], r.nstamps);
      ref_use(&r, k);
    }
    REQUIRE(evd_table_count(t) == r.nlive,
                  "seed %" PRIu64 " op %ld: count %u, reference %u", seed, op,
                  evd_table_count(t), r.nlive);
    REQUIRE(evd_table_oldest(t) == ref_oldest(&r),
                  "seed %" PRIu64 " op %ld: wrong oldest session", seed, op);
    if (r.nlive > peak)
      peak = r.nlive;
    if (op % 10000 == 0)
      verify_all(t, &r, seed, op);
  }
  verify_all(t, &r, seed, op);
  /* The run must really have grown past several rehashes and back. */
  REQUIRE(peak >= high && cycles >= 2,
                "seed %" PRIu64 ": peak %u, %d shrink cycles", seed, peak,
                cycles);
  evd_table_free(t); /* frees the sessions still live; ASan checks it */
  ref_free(&r);
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
  tcase_add_test(table, random_ops_match_plain_arrays);
  tcase_add_test(table, reserve_sizes_buckets_once);
  tcase_add_test(table, footprint_is_header_id_and_window);
  tcase_add_test(table, window_sits_inside_the_block);
  suite_add_tcase(s, table);

  return s;
}

EVD_CHECK_MAIN(session_suite())
