/* A randomized run of the session table against plain arrays, through
 * several rehashes up and down (EVD_SEED=N sets the seed); part of
 * build/test_session. */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_session.h"

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

void session_model_tests(TCase *table) {
  tcase_add_test(table, random_ops_match_plain_arrays);
}
