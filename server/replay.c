/* Replay records (see replay.h): runs in the session's area, anything else
 * in the table's bounded pool, and only a hash of what was let go.
 *
 * Area words: [0] form | op << 4 | flags << 8 | ends << 16, then per form
 *   RUNS  [1] arg [2] positions [3] size [4] first victim [5] victims
 *         [6] gone, with pages [7] first new page [8] new pages [9] first
 *         freed page [10] freed pages. What is not stored follows from the
 *         window, which only an evict changes until the next step, commit
 *         or truncate replaces the record, and an evict keeps the newest,
 *         the pins and the ring's cursor: the positions end at the newest;
 *         the slots end at the newest's slot, stepping as the ring hands
 *         them out (from the pin of the first position, when it is one);
 *         the gone positions start at the commit's newest + 1 or the
 *         truncate's from (a record where they do not is not runs)
 *   HEAP  [1..2] the pooled record (rpool.c) [3..4] the request's hash
 *   GONE  [3..4] the request's hash */
#include "replay.h"

#include <string.h>

#include "error.h"
#include "rpool.h"
#include "session_int.h"
#include "siphash.h"

/* The area's forms (rpool.h), short. */
enum {
  F_NONE = EVD_RPOOL_NONE,
  F_RUNS = EVD_RPOOL_RUNS,
  F_HEAP = EVD_RPOOL_HEAP,
  F_GONE = EVD_RPOOL_GONE
};

/* A record in the pool: the heap form, as uint32s: op | flags << 8 |
 * ends << 16, arg,
 * npos, nvictims, ngone, npages_new, npages_freed, size, newest, then
 * positions, victims, gone, slots, pages_new, pages_freed. */
#define HEAP_HDR 9

static unsigned area_words(const evd_session_t *s) {
  return (s->bits & EVD__PAGED) ? EVD__RP_WORDS_PAGED : EVD__RP_WORDS;
}

static unsigned form_of(const uint32_t *w) {
  return evd_rpool_form(w);
}

static void set_hash(uint32_t *w, uint64_t hash) {
  w[3] = (uint32_t)hash;
  w[4] = (uint32_t)(hash >> 32);
}

uint32_t evd_replay_at(const evd_replay_t *rp, const evd_u32s_t *l,
                       uint32_t i) {
  if (l->v != NULL)
    return l->v[i];
  if (!l->ring)
    return l->first + i;
  return evd_window_ring_nth(rp->sinks, rp->last, l->first, i);
}

uint64_t evd_replay_hash(const evd_replay_t *rp) {
  /* op, flags, arg, then the positions, little-endian, in one buffer of
   * bounded size: long requests are hashed in pieces, chained. */
  unsigned char b[4 * 64 + 16];
  uint64_t h = 0;
  uint32_t i = 0, k;
  size_t n;

  do {
    n = 0;
    b[n++] = rp->op;
    b[n++] = rp->flags;
    memcpy(b + n, &rp->arg, 4);
    n += 4;
    memcpy(b + n, &h, 8);
    n += 8;
    for (k = 0; k < 64 && i < rp->positions.n; k++, i++) {
      uint32_t p = evd_replay_at(rp, &rp->positions, i);
      memcpy(b + n, &p, 4);
      n += 4;
    }
    h = evd_hash64(b, n);
  } while (i < rp->positions.n);
  return h ^ rp->positions.n;
}

/* 1 when the list is a run from its first value (a ring run for slots). */
static int is_run(const evd_replay_t *rp, const evd_u32s_t *l, int ring,
                  uint32_t *first) {
  evd_u32s_t run = {NULL, l->n, 0, (uint8_t)ring};
  uint32_t i;

  if (l->n == 0) {
    *first = 0;
    return 1;
  }
  run.first = *first = evd_replay_at(rp, l, 0);
  for (i = 1; i < l->n; i++)
    if (evd_replay_at(rp, l, i) != evd_replay_at(rp, &run, i))
      return 0;
  return 1;
}

/* 1 when p is one of the np pinned positions, with its slot in *slot.
 * Apart from first_slot, whose usual case (no pins) then saves no
 * registers around calls it does not make. */
static __attribute__((noinline)) int pinned_slot(const evd_window_t *w,
                                                 uint32_t np, uint32_t p,
                                                 uint32_t *slot) {
  uint32_t i;

  for (i = 0; i < np; i++)
    if (evd_window_at(w, i, slot) == p)
      return 1;
  return 0;
}

/* The slot of the first of n positions that end at the window's newest,
 * stepped as the ring handed them out (see the area's layout). */
static uint32_t first_slot(const evd_window_t *w, uint32_t n) {
  uint32_t size = evd_window_size(w), sinks = evd_window_sinks(w), slot;
  uint32_t np = size < sinks ? size : sinks;

  if (n == 0 || size == 0)
    return 0;
  if (np > 0 && pinned_slot(w, np, evd_window_newest(w) - (n - 1), &slot))
    return slot; /* a pin: its own slot */
  evd_window_at(w, size - 1, &slot);
  return evd_window_slot_back(w, slot, n - 1);
}

/* The first gone position a runs record implies. */
static uint32_t first_gone(uint8_t op, uint32_t arg) {
  return op == EVD_RP_TRUNCATE ? arg : arg + 1;
}

/* Writes rp into the area as runs, when it is made of them. */
static int set_runs(evd_session_t *s, const evd_replay_t *rp) {
  const evd_window_t *win = evd_session_window(s);
  uint32_t *w = evd__session_rp(s), f[6];

  if (rp->newest != evd_window_newest(win) || !is_run(rp, &rp->positions, 0, &f[0]) ||
      (rp->positions.n > 0 &&
       evd_replay_at(rp, &rp->positions, rp->positions.n - 1) !=
           rp->newest) ||
      !is_run(rp, &rp->slots, 1, &f[1]) ||
      (rp->slots.n > 0 && f[1] != first_slot(win, rp->slots.n)) ||
      !is_run(rp, &rp->victims, 0, &f[2]) ||
      !is_run(rp, &rp->gone, 0, &f[3]) ||
      (rp->gone.n > 0 && f[3] != first_gone(rp->op, rp->arg)) ||
      !is_run(rp, &rp->pages_new, 0, &f[4]) ||
      !is_run(rp, &rp->pages_freed, 0, &f[5]) ||
      (!(s->bits & EVD__PAGED) && (rp->pages_new.n || rp->pages_freed.n)))
    return 0;
  w[0] = F_RUNS | (uint32_t)rp->op << 4 | (uint32_t)rp->flags << 8 |
         (uint32_t)rp->ends << 16;
  w[1] = rp->arg;
  w[2] = rp->positions.n;
  w[3] = rp->size;
  w[4] = f[2];
  w[5] = rp->victims.n;
  w[6] = rp->gone.n;
  if (s->bits & EVD__PAGED) {
    w[7] = f[4];
    w[8] = rp->pages_new.n;
    w[9] = f[5];
    w[10] = rp->pages_freed.n;
  }
  return 1;
}

void evd_replay_clear(evd_table_t *t, evd_session_t *s) {
  evd_rpool_release(evd_table_pool(t), evd__session_rp(s));
}

static void put_list(uint32_t **p, const evd_replay_t *rp,
                     const evd_u32s_t *l) {
  uint32_t i;

  for (i = 0; i < l->n; i++)
    *(*p)++ = evd_replay_at(rp, l, i);
}

void evd_replay_set(evd_table_t *t, evd_session_t *s,
                    const evd_replay_t *rp) {
  evd_rpool_t *pool = evd_table_pool(t);
  uint32_t *w = evd__session_rp(s), *p, *h;
  size_t n;

  evd_replay_clear(t, s);
  if (set_runs(s, rp))
    return;
  /* The pool: hash first, so that whatever happens a resend is known. */
  w[0] = F_GONE | (uint32_t)rp->op << 4 | (uint32_t)rp->flags << 8;
  set_hash(w, evd_replay_hash(rp));
  n = HEAP_HDR + 2 * (size_t)rp->positions.n + rp->victims.n + rp->gone.n +
      rp->pages_new.n + rp->pages_freed.n;
  /* Too big for the pool, or no memory: let go at once. */
  h = evd_rpool_add(pool, w, n);
  if (h == NULL)
    return;
  h[0] = rp->op | (uint32_t)rp->flags << 8 | (uint32_t)rp->ends << 16;
  h[1] = rp->arg;
  h[2] = rp->positions.n;
  h[3] = rp->victims.n;
  h[4] = rp->gone.n;
  h[5] = rp->pages_new.n;
  h[6] = rp->pages_freed.n;
  h[7] = rp->size;
  h[8] = rp->newest;
  p = h + HEAP_HDR;
  put_list(&p, rp, &rp->positions);
  put_list(&p, rp, &rp->victims);
  put_list(&p, rp, &rp->gone);
  put_list(&p, rp, &rp->slots);
  put_list(&p, rp, &rp->pages_new);
  put_list(&p, rp, &rp->pages_freed);
  evd_rpool_trim(pool);
}

void evd_replay_step(evd_table_t *t, evd_session_t *s, uint32_t slot,
                     int has_victim, uint32_t victim, uint32_t size) {
  uint32_t *w = evd__session_rp(s);

  if (form_of(w) == F_HEAP)
    evd_replay_clear(t, s);
  (void)slot; /* the newest's, which the window keeps */
  w[0] = F_RUNS | (uint32_t)EVD_RP_STEP << 4;
  w[1] = 0;
  w[2] = 1;
  w[3] = size;
  w[4] = victim;
  w[5] = has_victim != 0;
  w[6] = 0;
}

static evd_u32s_t run(uint32_t first, uint32_t n, int ring) {
  evd_u32s_t l = {NULL, n, first, (uint8_t)ring};
  return l;
}

int evd_replay_get(const evd_session_t *s, evd_replay_t *out) {
  const uint32_t *w = evd__session_rp(s);
  const evd_window_t *win = evd_session_window(s);
  const uint32_t *h;

  memset(out, 0, sizeof *out);
  out->sinks = evd_window_sinks(win);
  out->last = evd_window_last_slot(win);
  out->op = (uint8_t)(w[0] >> 4 & 0xf);
  out->flags = (uint8_t)(w[0] >> 8);
  out->ends = (uint8_t)(w[0] >> 16 & 3);
  switch (form_of(w)) {
  case F_RUNS:
    out->arg = w[1];
    out->newest = evd_window_newest(win);
    out->positions = run(out->newest - w[2] + 1, w[2], 0);
    out->slots = run(first_slot(win, w[2]), w[2], 1);
    out->size = w[3];
    out->victims = run(w[4], w[5], 0);
    out->gone = run(first_gone(out->op, w[1]), w[6], 0);
    if (s->bits & EVD__PAGED) {
      out->pages_new = run(w[7], w[8], 0);
      out->pages_freed = run(w[9], w[10], 0);
    }
    return 1;
  case F_HEAP:
    h = evd_rpool_words(w);
    out->op = (uint8_t)(h[0] & 0xff);
    out->flags = (uint8_t)(h[0] >> 8);
    out->ends = (uint8_t)(h[0] >> 16 & 3);
    out->arg = h[1];
    out->size = h[7];
    out->newest = h[8];
    out->positions = evd_u32s(h + HEAP_HDR, h[2]);
    out->victims = evd_u32s(out->positions.v + h[2], h[3]);
    out->gone = evd_u32s(out->victims.v + h[3], h[4]);
    out->slots = evd_u32s(out->gone.v + h[4], h[2]);
    out->pages_new = evd_u32s(out->slots.v + h[2], h[5]);
    out->pages_freed = evd_u32s(out->pages_new.v + h[5], h[6]);
    return 1;
  }
  return 0;
}

int evd_replay_gone(const evd_session_t *s, uint64_t *hash) {
  const uint32_t *w = evd__session_rp(s);

  if (form_of(w) != F_GONE)
    return 0;
  *hash = (uint64_t)w[3] | (uint64_t)w[4] << 32;
  return 1;
}

void evd_replay_set_gone(evd_table_t *t, evd_session_t *s, uint64_t hash) {
  uint32_t *w = evd__session_rp(s);

  evd_replay_clear(t, s);
  w[0] = F_GONE;
  set_hash(w, hash);
}

const uint32_t *evd_replay_area(const evd_session_t *s, unsigned *words) {
  const uint32_t *w = evd__session_rp(s);

  *words = form_of(w) == F_RUNS ? area_words(s) : 0;
  return w;
}

int evd_replay_load_area(evd_session_t *s, const uint32_t *w,
                         unsigned words) {
  unsigned op = w[0] >> 4 & 0xf;

  if (words != area_words(s) || form_of(w) != F_RUNS || op < EVD_RP_STEP ||
      op > EVD_RP_TRUNCATE ||
      (w[0] >> 8 & 0xff) > (EVD_RP_TENTATIVE | EVD_RP_COMMIT_ARG) ||
      (w[0] >> 16) > (EVD_RP_FIRST_TRANSIENT | EVD_RP_LAST_TRANSIENT))
    return EVD_ECORRUPT;
  memcpy(evd__session_rp(s), w, 4 * (size_t)words);
  return 0;
}
