/* Tests of windows built in a given state (window_state.c): every state of
 * small windows that steps, commits, truncations and evictions reach, found
 * by searching them all, is accepted and built back exactly, and nothing
 * else is; random walks through larger windows (forks too) round-trip;
 * perturbed states are refused with the rule they break. Part of
 * build/test_window (EVD_SEED=N sets the walks' seed). */
#include <check.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "window.h"
#include "test_window.h"

/* ---- small windows, searched exhaustively ------------------------------ */

/* The largest position a held state may name in the search; positions up
 * to PMAX + 1 are stepped, so that a newest of PMAX need not be held. */
#define PMAX 6u
#define SMALL_SLOTS 8u
#define KEY_WORDS (5 + 2 * SMALL_SLOTS)

/* A window of at most SMALL_SLOTS slots, by value. */
typedef struct {
  uint32_t mem[sizeof(evd_window_t) / 4 + SMALL_SLOTS];
} small_t;

static evd_window_t *win(small_t *s) {
  return (evd_window_t *)(void *)s->mem;
}

/* What tells two states apart: the cursors, newest and committed, and the
 * positions held with their slots (what the other slots hold is not part
 * of a state). */
static void key_of(const evd_window_t *w, uint32_t key[KEY_WORDS]) {
  uint32_t i, slot;

  memset(key, 0, KEY_WORDS * sizeof key[0]);
  key[0] = w->size;
  key[1] = w->head;
  key[2] = w->tail;
  key[3] = w->newest;
  key[4] = w->committed;
  for (i = 0; i < w->size; i++) {
    key[5 + 2 * i] = evd_window_at(w, i, &slot);
    key[6 + 2 * i] = slot;
  }
}

/* A set of keys, open addressing; grows by doubling. */
typedef struct {
  uint32_t (*keys)[KEY_WORDS];
  int32_t *slot; /* index into keys, -1 free */
  size_t n, cap, mask;
} keyset_t;

static uint64_t key_hash(const uint32_t *k) {
  uint64_t h = 1469598103934665603u;
  uint32_t i;

  for (i = 0; i < KEY_WORDS; i++)
    h = (h ^ k[i]) * 1099511628211u;
  return h;
}

static void keyset_init(keyset_t *s) {
  s->cap = 1u << 12;
  s->mask = 2 * s->cap - 1;
  s->n = 0;
  s->keys = malloc(s->cap * sizeof *s->keys);
  s->slot = malloc(2 * s->cap * sizeof *s->slot);
  ck_assert(s->keys != NULL && s->slot != NULL);
  memset(s->slot, 0xff, 2 * s->cap * sizeof *s->slot);
}

static void keyset_free(keyset_t *s) {
  free(s->keys);
  free(s->slot);
}

/* Adds k; returns 1 when it was new. */
static int keyset_add(keyset_t *s, const uint32_t *k, int add) {
  size_t i = key_hash(k) & s->mask;

  while (s->slot[i] >= 0) {
    if (memcmp(s->keys[s->slot[i]], k, KEY_WORDS * 4) == 0)
      return 0;
    i = (i + 1) & s->mask;
  }
  if (!add)
    return 1;
  if (s->n == s->cap) { /* grow: rehash every key */
    keyset_t t;
    size_t j;
    t.cap = 2 * s->cap;
    t.mask = 2 * t.cap - 1;
    t.n = 0;
    t.keys = malloc(t.cap * sizeof *t.keys);
    t.slot = malloc(2 * t.cap * sizeof *t.slot);
    ck_assert(t.keys != NULL && t.slot != NULL);
    memset(t.slot, 0xff, 2 * t.cap * sizeof *t.slot);
    for (j = 0; j < s->n; j++)
      keyset_add(&t, s->keys[j], 1);
    keyset_free(s);
    *s = t;
    return keyset_add(s, k, 1);
  }
  memcpy(s->keys[s->n], k, KEY_WORDS * 4);
  s->slot[i] = (int32_t)s->n++;
  return 1;
}

static int keyset_has(keyset_t *s, const uint32_t *k) {
  return !keyset_add(s, k, 0);
}

/* The state of a window without drafts as a build takes it. */
typedef struct {
  uint32_t kept[64], slots[64];
  evd_window_state_t st;
} held_t;

static void held_of(const evd_window_t *w, held_t *h) {
  uint32_t i;

  for (i = 0; i < w->size; i++)
    h->kept[i] = evd_window_at(w, i, &h->slots[i]);
  h->st = (evd_window_state_t){h->kept, h->slots, w->size, w->newest};
}

/* A reached state without drafts: accepted, and built back exactly, both
 * in its slots and (kept and newest the same) in the canonical layout. */
static void expect_round_trip(const evd_window_t *w, const char *where) {
  uint32_t la = evd_window_lookahead(w), at;
  evd_window_t *b;
  evd_window_rule_t rule;
  evd_window_state_t bare;
  held_t h;

  held_of(w, &h);
  ck_assert_int_eq(evd_window_new(&b, w->budget, w->sinks, la, NULL), 0);
  ck_assert_msg(evd_window_build(b, &h.st, &rule, &at) == 0,
                "%s: a reached state (budget %u sinks %u lookahead %u, "
                "%u held, newest %u) refused: rule %d at %u", where,
                w->budget, w->sinks, la, w->size, w->newest, rule, at);
  ck_assert_msg(evd_window_same_state(b, w), "%s: built state differs",
                where);
  ck_assert(evd_window_is_state(w, &h.st));
  bare = h.st;
  bare.slots = NULL;
  ck_assert_int_eq(evd_window_build(b, &bare, &rule, &at), 0);
  ck_assert(evd_window_is_state(b, &bare));
  ck_assert(evd_window_is_state(w, &bare));
  evd_window_free(b);
}

/* Every state of a (budget, sinks, lookahead) window that positions up to
 * PMAX + 1 reach, breadth first; each state found without drafts
 * round-trips, and is added (as kept, newest and slots) to `held`. */
static void search(uint32_t budget, uint32_t sinks, uint32_t la,
                   keyset_t *held) {
  keyset_t seen;
  small_t *queue;
  size_t qn = 0, qcap = 1u << 12, qi;
  uint32_t key[KEY_WORDS];
  small_t start;

  keyset_init(&seen);
  queue = malloc(qcap * sizeof *queue);
  ck_assert_ptr_nonnull(queue);
  ck_assert_int_eq(evd_window_init(win(&start), budget, sinks, la, NULL), 0);
  key_of(win(&start), key);
  keyset_add(&seen, key, 1);
  queue[qn++] = start;
  for (qi = 0; qi < qn; qi++) {
    small_t cur = queue[qi], next;
    evd_window_t *w = win(&cur), *x = win(&next);
    uint32_t pos[3], sl[3], v[16], d[16], nv, nd, k, a, b, c, op;
    if (!evd_window_has_drafts(w) && w->size > 0) {
      expect_round_trip(w, "search");
      key_of(w, key);
      key[1] = key[2] = 0; /* kept, newest and slots say it all */
      keyset_add(held, key, 1);
    }
    /* Every request: steps of one to three new positions (plain and
     * tentative), commits, truncations and evictions. */
    for (op = 0; op < 4000; op++) {
      int err;
      next = cur;
      if (op < 1024) {
        a = op & 7, b = op >> 3 & 7, c = op >> 6 & 7;
        k = 1 + (b > a) + (b > a && c > b);
        if ((b != 0 && b <= a) || (c != 0 && (b == 0 || c <= b)))
          continue;
        pos[0] = w->newest + 1 + a;
        pos[1] = w->newest + 1 + b;
        pos[2] = w->newest + 1 + c;
        if (pos[k - 1] > PMAX + 1)
          continue;
        err = evd_window_steps(x, pos, k, (int)(op >> 9 & 1), sl, v, &nv);
      } else if (op < 1024 + PMAX + 3) {
        err = evd_window_commit(x, op - 1024, d, &nd, v, &nv);
      } else if (op < 1024 + 2 * PMAX + 6) {
        err = evd_window_truncate(x, op - 1024 - PMAX - 3 + 1, d, &nd);
      } else if (op < 1024 + 2 * PMAX + 6 + budget + 1) {
        err = evd_window_evict(x, op - (1024 + 2 * PMAX + 6) + 1, v, 16,
                               &nv);
      } else {
        break;
      }
      if (err != 0)
        continue;
      key_of(x, key);
      if (!keyset_add(&seen, key, 1))
        continue;
      if (qn == qcap) {
        qcap *= 2;
        queue = realloc(queue, qcap * sizeof *queue);
        ck_assert_ptr_nonnull(queue);
      }
      queue[qn++] = next;
    }
  }
  free(queue);
  keyset_free(&seen);
}

/* The held-state key of kept[0..n), newest and slots, as search adds it. */
static void held_key(uint32_t n, const uint32_t *kept, const uint32_t *slots,
                     uint32_t newest, uint32_t key[KEY_WORDS]) {
  uint32_t i;

  memset(key, 0, KEY_WORDS * sizeof key[0]);
  key[0] = n;
  key[3] = key[4] = newest;
  for (i = 0; i < n; i++) {
    key[5 + 2 * i] = kept[i];
    key[6 + 2 * i] = slots[i];
  }
}

START_TEST(small_windows_accept_exactly_the_states_they_reach) {
  uint32_t budget, sinks, la, accepted = 0, reached = 0;

  for (budget = 1; budget <= 4; budget++)
    for (sinks = 0; sinks < budget; sinks++)
      for (la = 1; la <= 2; la++) {
        uint32_t last = budget + la - 1, region = last + 1 - sinks;
        uint32_t set, n, newest, head, i, at;
        keyset_t held;
        keyset_init(&held);
        search(budget, sinks, la, &held);
        /* Every set of positions up to PMAX, every newest, every head of
         * the ring: accepted exactly when the search reached it. */
        for (set = 1; set < (1u << (PMAX + 1)); set++) {
          uint32_t kept[8], slots[8], np;
          for (n = 0, i = 0; i <= PMAX; i++)
            if (set >> i & 1)
              kept[n++] = i;
          if (n > budget + 1)
            continue;
          np = n < sinks ? n : sinks;
          for (newest = kept[n - 1]; newest <= PMAX; newest++)
            for (head = sinks; head <= last; head++) {
              evd_window_state_t st = {kept, slots, n, newest};
              evd_window_rule_t rule;
              uint32_t key[KEY_WORDS];
              int ok, was;
              if (np == n && head > sinks)
                break; /* one layout without unpinned positions */
              for (i = 0; i < n; i++)
                slots[i] = i < np ? i : sinks + (head - sinks + i - np) %
                                                    region;
              ok = evd_window_check(budget, sinks, la, &st, &rule, &at) == 0;
              held_key(n, kept, slots, newest, key);
              was = keyset_has(&held, key);
              ck_assert_msg(ok == was, "budget %u sinks %u lookahead %u: "
                            "%u held from %u, newest %u, head %u: check "
                            "says %d (rule %d), the search %d", budget,
                            sinks, la, n, kept[0], newest, head, ok, rule,
                            was);
              accepted += (uint32_t)ok;
            }
        }
        reached += (uint32_t)held.n;
        keyset_free(&held);
      }
  /* The search did reach states with slots of every kind. */
  ck_assert_uint_gt(accepted, 1000);
  ck_assert_uint_gt(reached, accepted / 2);
}
END_TEST

/* ---- random walks ------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s) {
  /* splitmix64: a fixed, well-known mixing sequence. */
  uint64_t z = (*s += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

/* Refusals of perturbed copies of a reached state h (of w's
 * configuration), each with the rule the perturbation breaks. */
static void expect_refusals(const evd_window_t *w, const held_t *h,
                            uint64_t r, uint64_t seed, long op) {
  uint32_t la = evd_window_lookahead(w), n = h->st.n, sinks = w->sinks;
  uint32_t last = w->last, np = n < sinks ? n : sinks, kept[80], slots[80];
  uint32_t at, i = n > 1 ? 1 + (uint32_t)(r % (n - 1)) : 0;
  evd_window_state_t st = h->st;
  evd_window_rule_t rule;

#define REFUSED(want, want_at)                                                 \
  do {                                                                         \
    ck_assert_msg(evd_window_check(w->budget, sinks, la, &st, &rule, &at) ==  \
                          EVD_EINVAL &&                                        \
                      rule == (want) && at == (want_at),                       \
                  "seed %" PRIu64 " op %ld: rule %d at %u, want %d at %u",    \
                  seed, op, rule, at, (want), (uint32_t)(want_at));           \
    st = h->st;                                                                \
    memcpy(kept, h->kept, n * sizeof kept[0]);                                 \
    memcpy(slots, h->slots, n * sizeof slots[0]);                              \
  } while (0)

  memcpy(kept, h->kept, n * sizeof kept[0]);
  memcpy(slots, h->slots, n * sizeof slots[0]);
  st.n = 0;
  REFUSED(EVD_WR_EMPTY, 0);
  if (n > 1) { /* a position repeated, two out of order */
    st.kept = kept;
    kept[i] = kept[i - 1];
    REFUSED(EVD_WR_REPEATED, i);
    st.kept = kept;
    kept[i] = h->kept[i - 1];
    kept[i - 1] = h->kept[i];
    REFUSED(EVD_WR_ORDER, i);
  }
  if (h->st.newest < UINT32_MAX - 100) { /* past the budget */
    uint32_t k;
    st.kept = kept;
    st.slots = NULL;
    for (k = n; k <= w->budget; k++)
      kept[k] = h->st.newest + 1 + (k - n);
    st.n = w->budget + 1;
    st.newest = kept[w->budget];
    REFUSED(EVD_WR_BUDGET, w->budget);
  }
  if (sinks > 0 && n > 1) { /* position 0 dropped */
    st.kept = h->kept + 1;
    st.slots = h->slots + 1;
    st.n = n - 1;
    REFUSED(EVD_WR_SINK, 0);
  }
  if (h->kept[n - 1] > 0) { /* a newest below what is held */
    st.newest = h->kept[n - 1] - 1;
    REFUSED(EVD_WR_NEWEST, n - 1);
  }
  st.slots = slots;
  slots[i] = last + 1 + (uint32_t)(r >> 32) % 3;
  REFUSED(EVD_WR_SLOT_RANGE, i);
  if (np > 0) { /* a pin out of its slot */
    uint32_t p = (uint32_t)(r >> 40) % np;
    st.slots = slots;
    slots[p] = (p + 1) % (last + 1);
    REFUSED(EVD_WR_PIN_SLOT, p);
  }
  if (n > np) {
    uint32_t region = last + 1 - sinks, u = h->kept[np], shift;
    uint64_t room = np > 0 ? (uint64_t)u - h->kept[np - 1] - 1 : u;
    uint32_t k;
    if (n > np + 1 && region > 2) { /* the run broken */
      uint32_t j = np + 1 + (uint32_t)(r >> 44) % (n - np - 1);
      st.slots = slots;
      slots[j] = sinks + (slots[j] - sinks + 1) % region;
      REFUSED(EVD_WR_RING, j);
    }
    if (sinks > 0) { /* an unpinned position in a pinned slot */
      st.slots = slots;
      slots[np] = (uint32_t)(r >> 48) % sinks;
      REFUSED(EVD_WR_RING, np);
    }
    /* The ring turned further than the evictions could have moved it:
     * the whole run shifted to a head past `room`. */
    if (room + 1 < region) {
      shift = (uint32_t)(room + 1) +
              (uint32_t)(r >> 52) % (uint32_t)(region - room - 1);
      st.slots = slots;
      for (k = np; k < n; k++)
        slots[k] = sinks + (shift + k - np) % region;
      REFUSED(EVD_WR_TURN, np);
    }
  }
#undef REFUSED
}

START_TEST(random_walks_round_trip_and_perturbations_are_refused) {
  const char *env = getenv("EVD_SEED");
  uint64_t seed = env != NULL ? strtoull(env, NULL, 0) : 20261226u;
  uint64_t s = seed;
  evd_window_t *w = NULL, *b = NULL;
  uint32_t pos[16], sl[16], v[128], d[128], nv, nd, i, checked = 0;
  long op;

  for (op = 0; op < 60000; op++) {
    uint64_t r = rng_next(&s);
    uint32_t la, n, p;
    if (op % 3000 == 0) {
      uint32_t budget = 1 + (uint32_t)(r % 60), sinks = (uint32_t)(r >> 8) % 6;
      la = 1 + (uint32_t)(r >> 16) % 6;
      if (sinks >= budget)
        sinks = (uint32_t)(r >> 20) % budget;
      evd_window_free(w);
      ck_assert_int_eq(evd_window_new(&w, budget, sinks, la, NULL), 0);
      continue;
    }
    la = evd_window_lookahead(w);
    switch (r % 9) {
    case 0: case 1: case 2: case 3: /* steps, with gaps now and then */
      n = 1 + (uint32_t)(r >> 8) % (2 * la + 1);
      if (n > 16)
        n = 16;
      for (p = w->newest, i = 0; i < n; i++) {
        p += (r >> (16 + i % 16)) % 5 == 0 ? 1 + (uint32_t)(r >> 40) % 9 : 1;
        pos[i] = p;
      }
      evd_window_steps(w, pos, n, (r >> 36) % 4 == 0, sl, v, &nv);
      break;
    case 4: /* commit some drafts */
      evd_window_commit(w, evd_window_committed(w) + (uint32_t)(r >> 8) % 4,
                        d, &nd, v, &nv);
      break;
    case 5: /* truncate near the newest, sometimes deep */
      if (w->newest < UINT32_MAX)
        evd_window_truncate(w, (r >> 8) % 6 == 0
                                   ? 1 + (uint32_t)(r >> 12) % (w->newest + 1)
                                   : w->newest - (uint32_t)(r >> 12) % 4,
                            d, &nd);
      break;
    case 6: /* evict to a smaller budget */
      evd_window_evict(w, w->sinks + 1 + (uint32_t)(r >> 8) % w->budget, v,
                       128, &nv);
      break;
    case 7: { /* fork: the walk goes on in a copy */
      evd_window_t *c;
      ck_assert_int_eq(evd_window_new(&c, w->budget, w->sinks, la, NULL), 0);
      memcpy(c, w, evd_window_footprint(w->budget, la));
      evd_window_free(w);
      w = c;
      break;
    }
    case 8: /* far positions: near the top of the range too */
      if ((r >> 8) % 50 == 0 && !evd_window_has_drafts(w)) {
        pos[0] = UINT32_MAX - (uint32_t)(r >> 16) % 3;
        if (pos[0] > w->newest)
          evd_window_steps(w, pos, 1, 0, sl, v, &nv);
      }
      break;
    }
    if (!evd_window_has_drafts(w) && w->size > 0) {
      held_t h;
      expect_round_trip(w, "walk");
      held_of(w, &h);
      expect_refusals(w, &h, rng_next(&s), seed, op);
      /* The built window goes on as the walked one does. */
      if ((r >> 60) == 0 && w->newest < UINT32_MAX - 20) {
        evd_window_rule_t rule;
        uint32_t at, sa[16], va[16], na;
        ck_assert_int_eq(evd_window_new(&b, w->budget, w->sinks, la, NULL),
                         0);
        ck_assert_int_eq(evd_window_build(b, &h.st, &rule, &at), 0);
        for (i = 0; i < 8; i++) {
          pos[0] = w->newest + 1 + i % 3;
          ck_assert_int_eq(evd_window_steps(w, pos, 1, 0, sl, v, &nv), 0);
          ck_assert_int_eq(evd_window_steps(b, pos, 1, 0, sa, va, &na), 0);
          ck_assert(sl[0] == sa[0] && nv == na &&
                    (nv == 0 || v[0] == va[0]));
        }
        ck_assert(evd_window_same_state(b, w));
        evd_window_free(b);
      }
      checked++;
    }
  }
  ck_assert_uint_gt(checked, 20000);
  evd_window_free(w);
}
END_TEST

/* ---- the canonical layout ---------------------------------------------- */

START_TEST(the_canonical_layout_is_stepping_one_at_a_time) {
  /* A window that stepped every position one at a time holds them where
   * a build without slots puts them, whatever the configuration. */
  uint32_t budget, sinks, la, p, slot, victim;

  for (budget = 1; budget <= 9; budget++)
    for (sinks = 0; sinks < budget; sinks++)
      for (la = 1; la <= 3; la++) {
        evd_window_t *w, *b;
        evd_window_rule_t rule;
        uint32_t at;
        held_t h;
        ck_assert_int_eq(evd_window_new(&w, budget, sinks, la, NULL), 0);
        ck_assert_int_eq(evd_window_new(&b, budget, sinks, la, NULL), 0);
        for (p = 1; p <= 40; p++) {
          ck_assert_int_ge(evd_window_advance(w, p, &slot, &victim), 0);
          held_of(w, &h);
          h.st.slots = NULL;
          ck_assert_int_eq(evd_window_build(b, &h.st, &rule, &at), 0);
          ck_assert_msg(evd_window_same_state(b, w), "budget %u sinks %u "
                        "lookahead %u after %u", budget, sinks, la, p);
        }
        evd_window_free(w);
        evd_window_free(b);
      }
}
END_TEST

START_TEST(a_refused_build_leaves_the_window_alone) {
  /* Gaps in the pins are a reachable state; the run after them is laid
   * out from the pins' newest on; a refusal changes nothing. */
  uint32_t kept[] = {0, 5, 9, 10}, slots[4], at;
  evd_window_state_t st = {kept, NULL, 4, 12};
  evd_window_rule_t rule;
  evd_window_t *w, *before;

  ck_assert_int_eq(evd_window_new(&w, 4, 2, 1, NULL), 0);
  ck_assert_int_eq(evd_window_build(w, &st, &rule, &at), 0);
  /* Pins 0 and 5 in slots 0, 1; 9 is the 4th position after 5, in the
   * ring of slots 2..4: 2 + 3 % 3 = 2. */
  evd_window_at(w, 2, &slots[2]);
  evd_window_at(w, 3, &slots[3]);
  ck_assert_uint_eq(slots[2], 2);
  ck_assert_uint_eq(slots[3], 3);
  ck_assert_uint_eq(evd_window_newest(w), 12);
  ck_assert_int_eq(evd_window_new(&before, 4, 2, 1, NULL), 0);
  memcpy(before, w, evd_window_footprint(4, 1));
  kept[1] = 0;
  ck_assert_int_eq(evd_window_build(w, &st, &rule, &at), EVD_EINVAL);
  ck_assert_int_eq(rule, EVD_WR_REPEATED);
  ck_assert_uint_eq(at, 1);
  ck_assert_mem_eq(w, before, evd_window_footprint(4, 1));
  /* The top position as a newest: only when it is held. */
  kept[1] = 5;
  st.newest = UINT32_MAX;
  ck_assert_int_eq(evd_window_check(4, 2, 1, &st, &rule, &at), EVD_EINVAL);
  ck_assert_int_eq(rule, EVD_WR_NEWEST_MAX);
  kept[3] = UINT32_MAX;
  ck_assert_int_eq(evd_window_check(4, 2, 1, &st, &rule, &at), 0);
  evd_window_free(w);
  evd_window_free(before);
}
END_TEST

void window_state_tests(TCase *tc) {
  tcase_add_test(tc, small_windows_accept_exactly_the_states_they_reach);
  tcase_add_test(tc, random_walks_round_trip_and_perturbations_are_refused);
  tcase_add_test(tc, the_canonical_layout_is_stepping_one_at_a_time);
  tcase_add_test(tc, a_refused_build_leaves_the_window_alone);
}
