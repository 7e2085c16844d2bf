/* The sliding-window policy: ring arithmetic only, no I/O, and no
 * allocation after evd_window_new.
 *
 * Held positions form a pinned prefix (slots 0..np-1, np = min(size,
 * sinks)) and an unpinned run of consecutive ring slots from `head` to the
 * slot before `tail`, wrapping from `last` to `sinks`. Pins fill first, and
 * while they are filling nothing is unpinned, so one `tail` cursor hands out
 * every slot: the next pinned one while np < sinks, the ring after that.
 * Eviction pops unpinned positions at `head`; truncation and dropped drafts
 * pop at the newest end. Whenever no unpinned position is held, head and the
 * ring's next slot are both `sinks`. Eviction never empties the ring
 * (budget > sinks keeps the newest), so only popping the newest can. */
#include "window.h"

#include <stdlib.h>
#include <string.h>

int evd_window_config_valid(uint32_t budget, uint32_t sinks,
                            uint32_t lookahead) {
  return budget > 0 && sinks < budget && lookahead > 0 &&
         (uint64_t)budget + lookahead <= UINT32_MAX;
}

size_t evd_window_footprint(uint32_t budget, uint32_t lookahead) {
  return sizeof(evd_window_t) +
         ((size_t)budget + lookahead) * sizeof(uint32_t);
}

int evd_window_prepare(evd_window_t *w, uint32_t budget, uint32_t sinks,
                       uint32_t lookahead) {
  if (!evd_window_config_valid(budget, sinks, lookahead))
    return EVD_EINVAL;
  w->budget = budget;
  w->sinks = sinks;
  w->last = budget + lookahead - 1;
  /* The start state: position 0 exists before the first decode step and
   * sits in slot 0 (which evd_window_init clears; so do the other slots). */
  w->size = 1;
  w->newest = 0;
  w->head = sinks;
  w->tail = 1;
  w->committed = 0;
  return 0;
}

int evd_window_init(evd_window_t *w, uint32_t budget, uint32_t sinks,
                    uint32_t lookahead, evd_rng_t *rng) {
  (void)rng; /* Deterministic policy: the common interface's rng is unused. */
  if (evd_window_prepare(w, budget, sinks, lookahead) != 0)
    return EVD_EINVAL;
  /* Slot 0 holds position 0; the other slots are cleared too, so that a
   * saved window never carries whatever the memory held before. */
  memset(w->pos, 0, ((size_t)budget + lookahead) * sizeof w->pos[0]);
  return 0;
}

int evd_window_new(evd_window_t **out, uint32_t budget, uint32_t sinks,
                   uint32_t lookahead, evd_rng_t *rng) {
  evd_window_t *w;

  if (!evd_window_config_valid(budget, sinks, lookahead))
    return EVD_EINVAL;
  w = malloc(evd_window_footprint(budget, lookahead));
  if (w == NULL)
    return EVD_ENOMEM;
  evd_window_init(w, budget, sinks, lookahead, rng);
  *out = w;
  return 0;
}

void evd_window_free(evd_window_t *w) {
  free(w);
}

static uint32_t next_slot(const evd_window_t *w, uint32_t s) {
  uint32_t t = s + 1;
  return t > w->last ? w->sinks : t;
}

static uint32_t npinned(const evd_window_t *w) {
  return w->size < w->sinks ? w->size : w->sinks;
}

/* Appends pos at the tail; the caller has checked order and room. */
static uint32_t append(evd_window_t *w, uint32_t pos) {
  uint32_t s = w->tail;

  w->pos[s] = pos;
  w->tail = next_slot(w, s);
  w->size++;
  w->newest = pos;
  return s;
}

/* Pops the oldest unpinned positions until at most `budget` remain, into
 * victims; budget > sinks, so the newest always stays. */
static uint32_t evict_to(evd_window_t *w, uint32_t budget, uint32_t *victims) {
  uint32_t head = w->head, k, excess = w->size > budget ? w->size - budget : 0;

  for (k = 0; k < excess; k++) {
    victims[k] = w->pos[head];
    head = next_slot(w, head);
  }
  w->size -= excess;
  w->head = head;
  return excess;
}

/* Pops the newest position held (size > 0) and returns it. The run's next
 * slot becomes the one it leaves, or `sinks` when the run empties, and a
 * pinned one leaves its slot to the next position appended. */
static uint32_t pop_newest(evd_window_t *w) {
  uint32_t np = npinned(w), s;

  if (w->size > np) {
    s = w->tail == w->sinks ? w->last : w->tail - 1;
    w->size--;
    if (w->size == np)
      w->head = w->tail = w->sinks;
    else
      w->tail = s;
  } else {
    s = np - 1;
    w->size--;
    w->tail = s;
  }
  return w->pos[s];
}

#define has_drafts evd_window_has_drafts

/* The index of the first held position above p (size when none is). */
static uint32_t first_above(const evd_window_t *w, uint32_t p) {
  uint32_t a = 0, b = w->size;

  while (a < b) {
    uint32_t m = a + (b - a) / 2;
    if (evd_window_at(w, m, NULL) <= p)
      a = m + 1;
    else
      b = m;
  }
  return a;
}

uint32_t evd_window_tentative(const evd_window_t *w) {
  return has_drafts(w) ? w->size - first_above(w, w->committed) : 0;
}

/* Whether pos may be stepped: above the newest, no drafts pending, and at
 * most `most` positions held (the ring's free slot for a bare append, the
 * budget where the step evicts too). 0, or the refusal. */
static inline int may_step(const evd_window_t *w, uint32_t pos,
                           uint32_t most) {
  if (pos <= w->newest)
    return EVD_ESTALE;
  if (has_drafts(w))
    return EVD_EBUSY;
  if (w->size > most)
    return EVD_EFULL;
  return 0;
}

int evd_window_step(evd_window_t *w, uint32_t pos, const float *attention,
                    size_t n, uint32_t *slot) {
  int rc;

  (void)attention; /* Recency is all this policy looks at. */
  (void)n;
  if ((rc = may_step(w, pos, w->last)) != 0)
    return rc;
  *slot = append(w, pos);
  w->committed = pos;
  return 0;
}

int evd_window_evict(evd_window_t *w, uint32_t budget, uint32_t *victims,
                     uint32_t cap, uint32_t *n) {
  /* budget > sinks (which also refuses 0), so only unpinned positions go,
   * and at least one (the newest) always stays. */
  if (budget <= w->sinks)
    return EVD_EINVAL;
  if (has_drafts(w))
    return EVD_EBUSY;
  if (w->size > budget && w->size - budget > cap)
    return EVD_EINVAL;
  *n = evict_to(w, budget, victims);
  return 0;
}

/* advance without the checks: pos is new, no drafts, size <= budget. */
static inline __attribute__((always_inline)) int advance1(evd_window_t *w, uint32_t pos, uint32_t *slot,
                    uint32_t *victim) {
  uint32_t s = w->tail, h = w->head;

  if (w->size == w->budget) {
    /* Steady state: budget positions held and pins full, so the ring holds
     * at least one unpinned position, the head's, which is the victim. The
     * new position takes the tail (with lookahead 1 the only free slot,
     * right behind the head). */
    w->pos[s] = pos;
    w->newest = w->committed = pos;
    *slot = s;
    *victim = w->pos[h];
    w->tail = next_slot(w, s);
    w->head = next_slot(w, h);
    return 1;
  }
  *slot = append(w, pos); /* room left: nothing to evict */
  w->committed = pos;
  return 0;
}

static inline int advance_checked(evd_window_t *w, uint32_t pos,
                                  uint32_t *slot, uint32_t *victim) {
  int rc = may_step(w, pos, w->budget);

  return rc != 0 ? rc : advance1(w, pos, slot, victim);
}

int evd_window_advance(evd_window_t *w, uint32_t pos, uint32_t *slot,
                       uint32_t *victim) {
  return advance_checked(w, pos, slot, victim);
}

/* evd_window_steps but for the decode step, kept out of line so that the
 * decode step pays for none of its set-up. */
static __attribute__((noinline)) int
steps_general(evd_window_t *w, const uint32_t *positions, uint32_t n,
              int tentative, uint32_t *slots, uint32_t *victims,
              uint32_t *nv) {
  uint32_t lookahead = w->last + 1 - w->budget, i, k, c, got = 0;

  *nv = 0;
  if (n == 0)
    return 0;
  if (positions[0] <= w->newest)
    return EVD_ESTALE;
  for (i = 1; i < n; i++)
    if (positions[i] <= positions[i - 1])
      return EVD_EINVAL;
  if (tentative) {
    /* At most budget committed positions are held, so lookahead drafts
     * always find free slots. `committed` stays where it is. */
    if (n > lookahead - evd_window_tentative(w))
      return EVD_EFULL;
    for (i = 0; i < n; i++)
      slots[i] = append(w, positions[i]);
    return 0;
  }
  if (has_drafts(w))
    return EVD_EBUSY;
  if (w->size > w->budget)
    return EVD_EFULL;
  for (i = 0; i < n; i += c) {
    c = n - i < lookahead ? n - i : lookahead;
    if (c == 1) {
      got += (uint32_t)advance1(w, positions[i], &slots[i], &victims[got]);
      continue;
    }
    for (k = i; k < i + c; k++)
      slots[k] = append(w, positions[k]);
    got += evict_to(w, w->budget, victims + got);
  }
  w->committed = w->newest;
  *nv = got;
  return 0;
}

int evd_window_steps(evd_window_t *w, const uint32_t *positions, uint32_t n,
                     int tentative, uint32_t *slots, uint32_t *victims,
                     uint32_t *nv) {
  if (n == 1 && !tentative) { /* the decode step */
    int r = advance_checked(w, positions[0], slots, victims);
    *nv = r > 0 ? (uint32_t)r : 0;
    return r < 0 ? r : 0;
  }
  return steps_general(w, positions, n, tentative, slots, victims, nv);
}

int evd_window_commit(evd_window_t *w, uint32_t p, uint32_t *dropped,
                      uint32_t *nd, uint32_t *victims, uint32_t *nv) {
  uint32_t committed = w->committed, drafts, d = 0, k;

  if (p < committed)
    return EVD_EINVAL;
  /* Drafts are the newest positions held, ascending: the rejected ones are
   * a suffix. */
  drafts = evd_window_tentative(w);
  while (d < drafts && evd_window_at(w, w->size - 1 - d, NULL) > p)
    d++;
  for (k = d; k > 0; k--)
    dropped[k - 1] = pop_newest(w);
  w->newest = w->committed =
      d < drafts ? evd_window_at(w, w->size - 1, NULL) : committed;
  *nd = d;
  *nv = evict_to(w, w->budget, victims);
  return 0;
}

int evd_window_truncate(evd_window_t *w, uint32_t from, uint32_t *removed,
                        uint32_t *nr) {
  uint32_t r = 0, k;

  *nr = 0;
  if (from == 0)
    return EVD_EINVAL;
  if (from > w->newest)
    return 0;
  while (r < w->size && evd_window_at(w, w->size - 1 - r, NULL) >= from)
    r++;
  for (k = r; k > 0; k--)
    removed[k - 1] = pop_newest(w);
  /* Drafts left are those above the committed newest, which cannot stay
   * above the new newest; with none left it is the new newest. */
  w->newest = from - 1;
  if (w->committed > w->newest || w->size == 0 ||
      evd_window_at(w, w->size - 1, NULL) <= w->committed)
    w->committed = w->newest;
  *nr = r;
  return 0;
}

/* Whether p[0..n) strictly increases. A restart checks every ring of
 * every session, so four at a time (GCC's and clang's vector extension),
 * without an early exit. */
static int increasing(const uint32_t *p, uint32_t n) {
#if defined(__GNUC__)
  typedef uint32_t v4 __attribute__((vector_size(16)));
  v4 acc = {0}, a, b;
  uint32_t k = 1, i, bad = 0;

  for (; k + 4 <= n; k += 4) {
    memcpy(&a, p + k, sizeof a);
    memcpy(&b, p + k - 1, sizeof b);
    acc |= (v4)(a <= b);
  }
  for (i = 0; i < 4; i++)
    bad |= acc[i];
#else
  uint32_t k = 1, bad = 0;
#endif
  for (; k < n; k++)
    bad |= p[k] <= p[k - 1];
  return bad == 0;
}

int evd_window_restore(evd_window_t *w, uint32_t size, uint32_t head,
                       uint32_t tail, uint32_t newest, uint32_t tentative,
                       uint32_t committed) {
  uint32_t prev = 0, count, room, np;

  if (size > w->last + 1 || head > w->last || tail > w->last ||
      tentative > size || tentative > w->last + 1 - w->budget ||
      size - tentative > w->budget)
    return EVD_ECORRUPT;
  np = size < w->sinks ? size : w->sinks;
  count = size - np;
  if (count == 0) {
    if (head != w->sinks || tail != (np < w->sinks ? np : w->sinks))
      return EVD_ECORRUPT;
  } else {
    room = w->last + 1 - head;
    if (head < w->sinks || count > w->last + 1 - w->sinks ||
        tail != (count < room ? head + count : w->sinks + (count - room)))
      return EVD_ECORRUPT;
  }
  w->size = size;
  w->head = head;
  w->tail = tail;
  w->newest = newest;
  w->committed = tentative != 0 ? committed : newest;
  {
    /* Held positions strictly increase in hold order, over the ring's at
     * most three runs (loading a snapshot checks every session so). */
    uint32_t run[3][2] = {{0, np}, {head, count}, {0, 0}}, r, bad = 0;
    int any = 0;
    if (count > 0 && count > w->last + 1 - head) {
      run[1][1] = w->last + 1 - head;
      run[2][0] = w->sinks;
      run[2][1] = count - run[1][1];
    }
    for (r = 0; r < 3; r++) {
      const uint32_t *p = w->pos + run[r][0];
      if (run[r][1] == 0)
        continue;
      if (any && p[0] <= prev)
        return EVD_ECORRUPT;
      bad |= !increasing(p, run[r][1]);
      prev = p[run[r][1] - 1];
      any = 1;
    }
    if (bad)
      return EVD_ECORRUPT;
  }
  if (tentative != 0) {
    /* Exactly the last `tentative` positions are above committed. */
    if (committed >= newest ||
        evd_window_at(w, size - tentative, NULL) <= committed ||
        (size > tentative &&
         evd_window_at(w, size - tentative - 1, NULL) > committed))
      return EVD_ECORRUPT;
  }
  return size == 0 || prev <= newest ? 0 : EVD_ECORRUPT;
}

uint32_t evd_window_at(const evd_window_t *w, uint32_t i, uint32_t *slot) {
  uint32_t np = npinned(w);
  uint32_t s, room;

  if (i < np) {
    s = i;
  } else {
    /* k places after the head, wrapped inside sinks..last; written without
     * head + k so that nothing can overflow. */
    uint32_t k = i - np;
    room = w->last + 1 - w->head;
    s = k < room ? w->head + k : w->sinks + (k - room);
  }
  if (slot != NULL)
    *slot = s;
  return w->pos[s];
}

uint32_t evd_window_runs(const evd_window_t *w, uint32_t from,
                         evd_window_run_t run[3]) {
  uint32_t np = npinned(w), nrun = 0, k, room, count;

  if (from < np) { /* pinned: slots from..np-1 */
    run[nrun++] = (evd_window_run_t){w->pos + from, from, np - from};
  }
  k = from > np ? from - np : 0; /* unpinned ones to skip */
  if (k >= w->size - np)
    return nrun;
  count = w->size - np - k;
  room = w->last + 1 - w->head;
  if (k < room) { /* from the head up to `last` */
    uint32_t a = count < room - k ? count : room - k;
    run[nrun++] = (evd_window_run_t){w->pos + w->head + k, w->head + k, a};
    count -= a;
    k = 0;
  } else {
    k -= room;
  }
  if (count > 0) /* wrapped round to `sinks` */
    run[nrun++] = (evd_window_run_t){w->pos + w->sinks + k, w->sinks + k,
                                     count};
  return nrun;
}

int evd_window_same_state(const evd_window_t *a, const evd_window_t *b) {
  uint32_t i, sa, sb;

  if (a->budget != b->budget || a->sinks != b->sinks || a->last != b->last ||
      a->size != b->size || a->newest != b->newest ||
      a->committed != b->committed)
    return 0;
  for (i = 0; i < a->size; i++)
    if (evd_window_at(a, i, &sa) != evd_window_at(b, i, &sb) || sa != sb)
      return 0;
  /* The next slots too: they decide where the next positions go. */
  return a->tail == b->tail && a->head == b->head;
}

int evd_window_holds(const evd_window_t *w, uint64_t lo, uint64_t hi) {
  uint32_t a = 0, b = w->size; /* the first held position >= lo is in [a, b] */

  while (a < b) {
    uint32_t m = a + (b - a) / 2;
    if (evd_window_at(w, m, NULL) < lo)
      a = m + 1;
    else
      b = m;
  }
  return a < w->size && evd_window_at(w, a, NULL) < hi;
}
