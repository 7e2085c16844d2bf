/* Windows built in a given state: the check that a state (positions held,
 * their slots, the newest) is one the policy can reach, and the building
 * of a window in it, for a session adopted from what its engine holds.
 * Ring arithmetic only, no I/O, no allocation (window.h documents the
 * rules; window.c has the ring's invariants). */
#include "window.h"

#include <string.h>

/* The ring slot after s among sinks..last. */
static uint32_t ring_next(uint32_t sinks, uint32_t last, uint32_t s) {
  return s >= last ? sinks : s + 1;
}

/* How far round the ring (slots sinks..last) the oldest unpinned position
 * u may sit at most, or sits in the canonical layout: one slot for each
 * position that lies between the newest pinned one and u, all of which a
 * window may have stepped and evicted before u. np pinned positions are
 * kept[0..np). */
static uint64_t turn_room(const evd_window_state_t *st, uint32_t np) {
  uint64_t u = st->kept[np];

  return np > 0 ? u - st->kept[np - 1] - 1 : u;
}

static int refuse(evd_window_rule_t *rule, uint32_t *at,
                  evd_window_rule_t r, uint32_t i) {
  *rule = r;
  *at = i;
  return EVD_EINVAL;
}

int evd_window_check(uint32_t budget, uint32_t sinks, uint32_t lookahead,
                     const evd_window_state_t *st, evd_window_rule_t *rule,
                     uint32_t *at) {
  uint32_t last = budget + lookahead - 1, n = st->n, np, i;
  const uint32_t *k = st->kept, *s = st->slots;

  *rule = EVD_WR_OK;
  *at = 0;
  if (n == 0)
    return refuse(rule, at, EVD_WR_EMPTY, 0);
  for (i = 1; i < n; i++)
    if (k[i] <= k[i - 1])
      return refuse(rule, at, k[i] == k[i - 1] ? EVD_WR_REPEATED
                                               : EVD_WR_ORDER, i);
  /* No drafts: steps, commits and evictions all end at most at budget. */
  if (n > budget)
    return refuse(rule, at, EVD_WR_BUDGET, budget);
  /* Position 0 is held from the start, pinned in slot 0 when sinks > 0,
   * and only a truncation from 0 could remove it. */
  if (sinks > 0 && k[0] != 0)
    return refuse(rule, at, EVD_WR_SINK, 0);
  if (st->newest < k[n - 1])
    return refuse(rule, at, EVD_WR_NEWEST, n - 1);
  /* A newest above every position held is what a truncation from newest +
   * 1 leaves; that needs newest + 1 to be a position. */
  if (st->newest > k[n - 1] && st->newest == UINT32_MAX)
    return refuse(rule, at, EVD_WR_NEWEST_MAX, n - 1);
  if (s == NULL)
    return 0;
  for (i = 0; i < n; i++)
    if (s[i] > last)
      return refuse(rule, at, EVD_WR_SLOT_RANGE, i);
  /* Pins fill slots 0.. in order; the rest is one run round the ring. */
  np = n < sinks ? n : sinks;
  for (i = 0; i < np; i++)
    if (s[i] != i)
      return refuse(rule, at, EVD_WR_PIN_SLOT, i);
  if (np == n)
    return 0;
  if (s[np] < sinks)
    return refuse(rule, at, EVD_WR_RING, np);
  for (i = np + 1; i < n; i++)
    if (s[i] != ring_next(sinks, last, s[i - 1]))
      return refuse(rule, at, EVD_WR_RING, i);
  /* The ring turns one slot per position evicted since it last emptied,
   * and those positions lie between the pins and the oldest unpinned one
   * held. (It may have turned whole rounds more: the least turn counts.) */
  if ((uint64_t)(s[np] - sinks) > turn_room(st, np))
    return refuse(rule, at, EVD_WR_TURN, np);
  return 0;
}

int evd_window_build(evd_window_t *w, const evd_window_state_t *st,
                     evd_window_rule_t *rule, uint32_t *at) {
  uint32_t sinks = w->sinks, last = w->last, n = st->n, np, i, slot;

  if (evd_window_check(w->budget, sinks, last + 1 - w->budget, st, rule,
                       at) != 0)
    return EVD_EINVAL;
  memset(w->pos, 0, ((size_t)last + 1) * sizeof w->pos[0]);
  np = n < sinks ? n : sinks;
  for (i = 0; i < np; i++)
    w->pos[i] = st->kept[i];
  if (np == n) {
    /* Nothing unpinned: the ring starts at `sinks`, and the next position
     * takes the next pin while there is one. */
    w->head = sinks;
    w->tail = np < sinks ? np : sinks;
  } else {
    slot = st->slots != NULL
               ? st->slots[np]
               : sinks + (uint32_t)(turn_room(st, np) %
                                    ((uint64_t)last + 1 - sinks));
    w->head = slot;
    for (i = np; i < n; i++) {
      w->pos[slot] = st->kept[i];
      slot = ring_next(sinks, last, slot);
    }
    w->tail = slot;
  }
  w->size = n;
  w->newest = w->committed = st->newest;
  return 0;
}

int evd_window_is_state(const evd_window_t *w, const evd_window_state_t *st) {
  uint32_t i, slot;

  if (evd_window_has_drafts(w) || w->size != st->n ||
      w->newest != st->newest)
    return 0;
  for (i = 0; i < st->n; i++)
    if (evd_window_at(w, i, &slot) != st->kept[i] ||
        (st->slots != NULL && slot != st->slots[i]))
      return 0;
  return 1;
}
