/* The sliding-window policy: ring arithmetic only, no I/O, and no
 * allocation after evd_window_new.
 *
 * Pinned slots are filled first and never emptied, so one `tail` cursor that
 * runs 0, 1, ..., budget and then wraps to `sinks` hands out every slot: the
 * pinned ones on its first pass, the ring region sinks..budget after that.
 * Eviction pops at `head`, which starts at `sinks` (at 0 without sinks,
 * where position 0 is itself the oldest ring entry). No eviction can happen
 * while pins are still filling, because then size <= sinks < budget. */
#include "evictd/window.h"

#include <stdlib.h>
#include <string.h>

size_t evd_window_footprint(uint32_t budget) {
  return sizeof(evd_window_t) + ((size_t)budget + 1) * sizeof(uint32_t);
}

static int valid_config(uint32_t budget, uint32_t sinks) {
  return budget > 0 && budget <= EVD_WINDOW_MAX_BUDGET && sinks < budget;
}

int evd_window_init(evd_window_t *w, uint32_t budget, uint32_t sinks,
                    evd_rng_t *rng) {
  (void)rng; /* Deterministic policy: the common interface's rng is unused. */
  if (!valid_config(budget, sinks))
    return EVD_EINVAL;
  w->budget = budget;
  w->sinks = sinks;
  /* Position 0 exists before the first decode step and sits in slot 0.
   * The other slots are cleared too, so that a saved window never carries
   * whatever the memory held before. */
  memset(w->pos, 0, ((size_t)budget + 1) * sizeof w->pos[0]);
  w->size = 1;
  w->newest = 0;
  w->head = sinks;
  w->tail = 1;
  return 0;
}

int evd_window_new(evd_window_t **out, uint32_t budget, uint32_t sinks,
                   evd_rng_t *rng) {
  evd_window_t *w;

  if (!valid_config(budget, sinks))
    return EVD_EINVAL;
  w = malloc(evd_window_footprint(budget));
  if (w == NULL)
    return EVD_ENOMEM;
  evd_window_init(w, budget, sinks, rng);
  *out = w;
  return 0;
}

void evd_window_free(evd_window_t *w) {
  free(w);
}

int evd_window_step(evd_window_t *w, uint32_t pos, const float *attention,
                    size_t n, uint32_t *slot) {
  uint32_t s = w->tail;

  (void)attention; /* Recency is all this policy looks at. */
  (void)n;
  if (pos <= w->newest)
    return EVD_ESTALE;
  if (w->size > w->budget)
    return EVD_EFULL;
  w->pos[s] = pos;
  w->tail = s == w->budget ? w->sinks : s + 1;
  w->size++;
  w->newest = pos;
  *slot = s;
  return 0;
}

int evd_window_evict(evd_window_t *w, uint32_t budget, uint32_t *victims,
                     uint32_t cap, uint32_t *n) {
  uint32_t head = w->head, k, excess;

  /* budget > sinks (which also refuses 0), so only unpinned positions go,
   * and at least one (the newest) always stays. */
  if (budget <= w->sinks)
    return EVD_EINVAL;
  excess = w->size > budget ? w->size - budget : 0;
  if (excess > cap)
    return EVD_EINVAL;
  for (k = 0; k < excess; k++) {
    victims[k] = w->pos[head];
    head = head == w->budget ? w->sinks : head + 1;
  }
  w->size -= excess;
  w->head = head;
  *n = excess;
  return 0;
}

int evd_window_advance(evd_window_t *w, uint32_t pos, uint32_t *slot,
                       uint32_t *victim) {
  uint32_t s = w->tail, h = w->head, budget = w->budget;

  if (pos <= w->newest)
    return EVD_ESTALE;
  if (w->size == budget) {
    /* Steady state: budget positions held and pins full, so the ring region
     * has exactly one free slot, the tail, right behind the head. The new
     * position takes it, the head's position is the victim, and the slot it
     * frees is the next tail. */
    w->pos[s] = pos;
    w->newest = pos;
    *slot = s;
    *victim = w->pos[h];
    w->tail = h;
    w->head = h == budget ? w->sinks : h + 1;
    return 1;
  }
  if (w->size > budget)
    return EVD_EFULL;
  w->pos[s] = pos; /* room left: nothing to evict */
  w->newest = pos;
  *slot = s;
  w->tail = s == budget ? w->sinks : s + 1;
  w->size++;
  return 0;
}

int evd_window_restore(evd_window_t *w, uint32_t size, uint32_t head,
                       uint32_t tail, uint32_t newest) {
  uint32_t i, prev = 0, count, room;

  if (size < 1 || size > w->budget + 1 || head > w->budget ||
      tail > w->budget)
    return EVD_ECORRUPT;
  if (size < w->sinks) { /* pins still filling: nothing in the ring yet */
    if (head != w->sinks || tail != size)
      return EVD_ECORRUPT;
  } else {
    count = size - w->sinks;
    room = w->budget + 1 - head;
    if (head < w->sinks ||
        tail != (count < room ? head + count : w->sinks + (count - room)))
      return EVD_ECORRUPT;
  }
  w->size = size;
  w->head = head;
  w->tail = tail;
  w->newest = newest;
  for (i = 0; i < size; i++) {
    uint32_t p = evd_window_at(w, i, NULL);
    if (i > 0 && p <= prev)
      return EVD_ECORRUPT;
    prev = p;
  }
  return prev == newest ? 0 : EVD_ECORRUPT;
}

uint32_t evd_window_size(const evd_window_t *w) {
  return w->size;
}

uint32_t evd_window_newest(const evd_window_t *w) {
  return w->newest;
}

uint32_t evd_window_at(const evd_window_t *w, uint32_t i, uint32_t *slot) {
  uint32_t npinned = w->size < w->sinks ? w->size : w->sinks;
  uint32_t s, room;

  if (i < npinned) {
    s = i;
  } else {
    /* k places after the head, wrapped inside sinks..budget; written
     * without head + k so that nothing can overflow. */
    uint32_t k = i - npinned;
    room = w->budget + 1 - w->head;
    s = k < room ? w->head + k : w->sinks + (k - room);
  }
  if (slot != NULL)
    *slot = s;
  return w->pos[s];
}
