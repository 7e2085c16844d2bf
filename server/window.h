/* The sliding-window eviction policy (and streaming-llm, its variant with
 * pinned "attention sink" positions): a ring buffer of budget + lookahead
 * token positions with O(1) step and evict and no allocation after set-up,
 * plus the operations engines need around it: multi-position steps in
 * sub-steps of `lookahead`, tentative (speculative) positions with commit,
 * and truncation. */
#ifndef EVICTD_WINDOW_H
#define EVICTD_WINDOW_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Random source of the common policy interface. Other policies draw from it;
 * this one is deterministic and never touches it, so NULL is fine. */
typedef struct evd_rng_s evd_rng_t;

/* The largest budget accepted: budget + 1 slot indices must fit a uint32. */
#define EVD_WINDOW_MAX_BUDGET (UINT32_MAX - 1u)

/* The budget of the design card, and so of the daemon's defaults. */
#define EVD_WINDOW_DEFAULT_BUDGET 512u

/* One window. The fields are public so that callers can embed the struct
 * (see evd_window_footprint), but they are read-only outside window.c:
 * use the accessors below.
 *
 * Slots are the ring's own indices 0..budget + lookahead - 1. Pinned
 * positions (the first `sinks` positions held) live in slots 0..sinks-1;
 * every other position takes the slot after the newest unpinned one held,
 * round-robin over sinks..last (slot `sinks` when no unpinned one is held).
 * Held positions increase with their age; those above `committed` are
 * tentative (speculative drafts not yet committed). Without drafts,
 * committed equals newest, which is how "no drafts" is told in O(1). */
typedef struct evd_window_s {
  uint32_t budget;    /* positions kept after an eviction, >= 1 */
  uint32_t sinks;     /* leading positions pinned, < budget */
  uint32_t last;      /* the highest slot: budget + lookahead - 1 */
  uint32_t size;      /* positions held, pinned and tentative included */
  uint32_t head;      /* slot of the oldest unpinned position (or sinks) */
  uint32_t tail;      /* slot the next position goes to */
  uint32_t newest;    /* a new position must be greater than this */
  uint32_t committed; /* the newest but the drafts; == newest without any */
  uint32_t pos[];     /* budget + lookahead entries: the position in a slot */
} evd_window_t;

/* Bytes an evd_window_t with its ring occupies: header plus budget +
 * lookahead uint32_t slots (2,052 bytes of ring at budget 512, lookahead 1).
 */
size_t evd_window_footprint(uint32_t budget, uint32_t lookahead);

/* 1 when (budget, sinks, lookahead) is a configuration the window takes:
 * budget >= 1, sinks < budget, lookahead >= 1, budget + lookahead slot
 * indices fitting a uint32. */
int evd_window_config_valid(uint32_t budget, uint32_t sinks,
                            uint32_t lookahead);

/* Initialises a window in caller memory of evd_window_footprint(budget,
 * lookahead) bytes, suitably aligned for a uint32_t. The window starts
 * holding position 0 in slot 0, with every other slot zeroed (O(budget),
 * once). `rng` is accepted for interface compatibility and never used.
 * Returns 0, or EVD_EINVAL (memory untouched) for a configuration
 * evd_window_config_valid refuses (budget 0: "a cache that holds nothing is
 * not a cache"). Nothing is allocated. */
int evd_window_init(evd_window_t *w, uint32_t budget, uint32_t sinks,
                    uint32_t lookahead, evd_rng_t *rng);

/* As evd_window_init, but allocates the window (one malloc, freed with
 * evd_window_free) and stores it in *out. Returns 0, EVD_EINVAL as above,
 * or EVD_ENOMEM; *out is set only on success. */
int evd_window_new(evd_window_t **out, uint32_t budget, uint32_t sinks,
                   uint32_t lookahead, evd_rng_t *rng);

/* Frees a window made by evd_window_new. NULL is accepted. */
void evd_window_free(evd_window_t *w);

/* Appends position `pos` (the decode step's new token) without evicting and
 * stores its slot in *slot. `attention` (n weights) is part of the common
 * policy interface and is never read; NULL is fine. O(1).
 * Returns 0, or, with nothing changed: EVD_ESTALE when pos is not greater
 * than the newest position (gaps are allowed), EVD_EBUSY while tentative
 * positions are pending, EVD_EFULL when every slot is held (evict first). */
int evd_window_step(evd_window_t *w, uint32_t pos, const float *attention,
                    size_t n, uint32_t *slot);

/* Removes the oldest unpinned positions until at most `budget` remain and
 * writes them to victims[0..*n-1], oldest first. `budget` may differ from the
 * window's own; `cap` is the room in `victims` (evd_window_size() always
 * suffices). O(1) per victim.
 * Returns 0, or, with nothing changed: EVD_EINVAL when budget is not greater
 * than the window's sinks (or is 0), or when cap is too small; EVD_EBUSY
 * while tentative positions are pending (drafts never make room). */
int evd_window_evict(evd_window_t *w, uint32_t budget, uint32_t *victims,
                     uint32_t cap, uint32_t *n);

/* Step and evict to the window's own budget in one call, for one position:
 * what a server does once per decoded token. Same effect as
 * evd_window_step followed by evd_window_evict(w, w->budget, ...), which can
 * return at most one victim there. Stores the new position's slot in *slot
 * and, when one position was evicted, that victim in *victim.
 * Returns 1 when a victim was evicted, 0 when none was, or, with nothing
 * changed, EVD_ESTALE or EVD_EBUSY as evd_window_step, or EVD_EFULL when
 * the window holds more than budget positions (evict first). O(1). */
int evd_window_advance(evd_window_t *w, uint32_t pos, uint32_t *slot,
                       uint32_t *victim);

/* One step request of n positions (strictly increasing). Without
 * `tentative` they are applied in sub-steps of up to lookahead positions:
 * each sub-step appends all its positions, then evicts the oldest unpinned
 * ones until at most budget remain, so that no slot is reused within a
 * sub-step. With `tentative` they are appended as drafts and nothing is
 * evicted. Slots go to slots[0..n), victims (oldest first; at most n) to
 * victims[0..*nv). O(1) per position and victim.
 * Returns 0, or, with nothing changed: EVD_ESTALE when positions[0] is not
 * greater than the newest, EVD_EINVAL when the positions do not strictly
 * increase, EVD_EBUSY for a non-tentative request while drafts are pending,
 * EVD_EFULL when drafts would exceed lookahead (or, for a non-tentative
 * request, the window holds more than budget). n = 0 changes nothing. */
int evd_window_steps(evd_window_t *w, const uint32_t *positions, uint32_t n,
                     int tentative, uint32_t *slots, uint32_t *victims,
                     uint32_t *nv);

/* Resolves the drafts: keeps the tentative positions <= p, drops the others
 * (written ascending to dropped[0..*nd); their slots are free again), then
 * evicts down to the budget (victims[0..*nv), oldest first). Both arrays
 * need room for evd_window_tentative(w) entries. The newest becomes the
 * last kept draft, or the committed newest when none is kept. Valid with no
 * drafts pending. Returns 0, or EVD_EINVAL (nothing changed) when p is below
 * evd_window_committed(w). O(1) per draft and victim. */
int evd_window_commit(evd_window_t *w, uint32_t p, uint32_t *dropped,
                      uint32_t *nd, uint32_t *victims, uint32_t *nv);

/* Removes every held position >= from (pinned and tentative ones too),
 * writing them ascending to removed[0..*nr) (room: evd_window_size(w)).
 * When from <= the newest, the newest becomes from - 1, so that from may be
 * stepped again; above it, nothing changes. Evicted positions never come
 * back: the window may hold fewer than budget positions, or none. Freed
 * pinned slots are taken again by the next positions appended. Returns 0,
 * or EVD_EINVAL when from is 0 (position 0 exists before any step). O(1)
 * per position removed. */
int evd_window_truncate(evd_window_t *w, uint32_t from, uint32_t *removed,
                        uint32_t *nr);

/* As evd_window_init, but pos[] is left as the memory held it: for a
 * window whose slots the caller fills at once and whose state it then
 * restores (evd_window_restore), as loading a snapshot does, which saves a
 * clearing of every ring. Not to be used before pos[] is filled. Returns
 * 0, or EVD_EINVAL as evd_window_init. */
int evd_window_prepare(evd_window_t *w, uint32_t budget, uint32_t sinks,
                       uint32_t lookahead);

/* Restores a saved state into a window made by evd_window_init or
 * evd_window_prepare with the same budget, sinks and lookahead, whose pos[]
 * the caller has already filled with the saved ring. Checks that the state
 * is one the window could have reached (cursors in range and consistent
 * with size, held positions strictly increasing and not above `newest`,
 * drafts within lookahead, at most budget committed ones, exactly
 * `tentative` held above `committed`). `committed` is read only when
 * tentative > 0.
 * Returns 0, or EVD_ECORRUPT with the window left in an unspecified state. */
int evd_window_restore(evd_window_t *w, uint32_t size, uint32_t head,
                       uint32_t tail, uint32_t newest, uint32_t tentative,
                       uint32_t committed);

/* A state to build a window in (evd_window_build, window_state.c): the
 * positions held, ascending, with the slot of each (slots NULL: the
 * canonical layout below), and the newest position. No drafts: a built
 * window has none. Arrays are borrowed for the call. */
typedef struct evd_window_state_s {
  const uint32_t *kept;
  const uint32_t *slots; /* n entries, or NULL */
  uint32_t n;
  uint32_t newest;
} evd_window_state_t;

/* The rule a refused state breaks (evd_window_check), the entry it is
 * found at in *at. The states accepted are exactly those without drafts
 * that steps, commits, truncations and evictions can leave a window in
 * (tests/unit/test_window_state.c checks both ways), less the empty one:
 *   EVD_WR_EMPTY      no position held (n is 0);
 *   EVD_WR_REPEATED   kept[at] equals kept[at - 1];
 *   EVD_WR_ORDER      kept[at] is below kept[at - 1];
 *   EVD_WR_BUDGET     more than budget positions (at: the budget);
 *   EVD_WR_SINK       sinks > 0 and position 0 is not held: it is pinned
 *                     from the start, and only truncating from 0 (refused)
 *                     could remove it;
 *   EVD_WR_NEWEST     newest is below kept[at], the largest held;
 *   EVD_WR_NEWEST_MAX newest is 4294967295 but not held: only truncating
 *                     from newest + 1 leaves a newest that is not held;
 *   EVD_WR_SLOT_RANGE slots[at] is past the ring's last slot;
 *   EVD_WR_PIN_SLOT   kept[at] is pinned (one of the first `sinks`) but
 *                     not in slot at;
 *   EVD_WR_RING       kept[at] is unpinned but not in the ring slot after
 *                     the one before it (or in a pinned slot);
 *   EVD_WR_TURN       the oldest unpinned position, kept[at], sits further
 *                     round the ring than the positions evicted before it
 *                     could have moved it: slot - sinks must not exceed the
 *                     number of positions between the newest pinned one
 *                     (or -1 without sinks) and kept[at]. */
typedef enum evd_window_rule_e {
  EVD_WR_OK = 0,
  EVD_WR_EMPTY,
  EVD_WR_REPEATED,
  EVD_WR_ORDER,
  EVD_WR_BUDGET,
  EVD_WR_SINK,
  EVD_WR_NEWEST,
  EVD_WR_NEWEST_MAX,
  EVD_WR_SLOT_RANGE,
  EVD_WR_PIN_SLOT,
  EVD_WR_RING,
  EVD_WR_TURN
} evd_window_rule_t;

/* Checks that st is a state a window of (budget, sinks, lookahead), a
 * configuration evd_window_config_valid accepts, can be in. Returns 0, or
 * EVD_EINVAL with the rule broken in *rule and its entry in *at. O(n). */
int evd_window_check(uint32_t budget, uint32_t sinks, uint32_t lookahead,
                     const evd_window_state_t *st, evd_window_rule_t *rule,
                     uint32_t *at);

/* Puts a window made by evd_window_init or evd_window_prepare into state
 * st, checked as evd_window_check does: afterwards it holds exactly those
 * positions in those slots (slots it does not hold are zeroed) with that
 * newest and no drafts, and behaves from then on as a window that reached
 * the state by steps. Without slots, the positions take the canonical
 * layout: pinned ones in slots 0.., and the oldest unpinned one, u, in
 * slot sinks + (u - p - 1) mod (budget + lookahead - sinks), where p is
 * the newest pinned position (-1 without sinks), the others after it round
 * the ring; that is where a window that stepped every position after p one
 * at a time holds them. Returns 0, or EVD_EINVAL (window unchanged) with
 * *rule and *at as evd_window_check. O(budget). */
int evd_window_build(evd_window_t *w, const evd_window_state_t *st,
                     evd_window_rule_t *rule, uint32_t *at);

/* 1 when w has no drafts and holds exactly st's positions with its newest
 * (and, when st->slots is not NULL, in those slots); else 0. O(n). */
int evd_window_is_state(const evd_window_t *w, const evd_window_state_t *st);

/* Number of positions held (pinned, unpinned and tentative). */
static inline uint32_t evd_window_size(const evd_window_t *w) {
  return w->size;
}

/* The newest position; a new one must be greater. 0 in the start state. */
static inline uint32_t evd_window_newest(const evd_window_t *w) {
  return w->newest;
}

/* The newest position before the pending drafts (the newest when there are
 * none): a commit must name at least this. */
static inline uint32_t evd_window_committed(const evd_window_t *w) {
  return w->committed;
}

/* 1 when tentative positions are pending. O(1). */
static inline int evd_window_has_drafts(const evd_window_t *w) {
  return w->committed != w->newest;
}

/* Number of tentative positions pending (the newest ones held). O(1)
 * without drafts, O(log size) with. */
uint32_t evd_window_tentative(const evd_window_t *w);

/* The lookahead: slots beyond the budget. */
static inline uint32_t evd_window_lookahead(const evd_window_t *w) {
  return w->last + 1 - w->budget;
}

/* The i-th oldest position held, 0 <= i < evd_window_size(w), with its slot
 * stored in *slot when slot is not NULL. Positions come out in ascending
 * order. O(1). */
uint32_t evd_window_at(const evd_window_t *w, uint32_t i, uint32_t *slot);

/* A run of held positions in consecutive slots: pos[0..n) are the
 * positions in slots slot..slot + n - 1 (pos borrowed from the window
 * until its next change). */
typedef struct evd_window_run_s {
  const uint32_t *pos;
  uint32_t slot, n;
} evd_window_run_t;

/* The held positions from the from-th oldest on, oldest first, as at most
 * three runs of the ring written to run[0..): the pinned slots, the
 * unpinned run from the head up to the highest slot, and its wrap from
 * slot `sinks`. Returns the number of runs (0 when from >= size). Lets a
 * caller copy or print what is held without reading the ring. O(1). */
uint32_t evd_window_runs(const evd_window_t *w, uint32_t from,
                         evd_window_run_t run[3]);

/* The unpinned slot k places before `slot` (an unpinned slot) in the order
 * the ring hands slots out, round sinks..last: the slot the ring handed
 * out k positions earlier, when nothing was pinned meanwhile. O(1);
 * inline, as it runs for each replay record of a step. */
static inline uint32_t evd_window_slot_back(const evd_window_t *w,
                                            uint32_t slot, uint32_t k) {
  uint64_t region = (uint64_t)w->last + 1 - w->sinks;

  return w->sinks + (uint32_t)(((uint64_t)(slot - w->sinks) + region -
                                k % region) % region);
}

/* The i-th slot (from 0) that a ring of slots sinks..last hands out from
 * slot `first` on: the pinned slots first while they fill (first < sinks;
 * no unpinned position is held meanwhile, so the ring then starts at
 * `sinks`), then round sinks..last. For a record of the slots a request
 * was given, which keeps the window's sinks and last slot so that it can
 * be read without the window (replay.h). O(1); inline, as answers are
 * written with it. */
static inline uint32_t evd_window_ring_nth(uint32_t sinks, uint32_t last,
                                           uint32_t first, uint32_t i) {
  uint64_t region = (uint64_t)last + 1 - sinks, k;

  if (first < sinks) {
    if (i < sinks - first)
      return first + i;
    k = i - (sinks - first);
  } else {
    k = (uint64_t)(first - sinks) + i;
  }
  return sinks + (uint32_t)(k % region);
}

/* The slot after which the ring wraps back to slot `sinks` (budget +
 * lookahead - 1), and the number of pinned slots: what a record of slots
 * handed out needs to step through them without the window (replay.h). */
static inline uint32_t evd_window_last_slot(const evd_window_t *w) {
  return w->last;
}
static inline uint32_t evd_window_sinks(const evd_window_t *w) {
  return w->sinks;
}

/* 1 when windows a and b have the same budget, sinks and lookahead and
 * hold the same positions in the same slots, with the same newest, drafts
 * and cursors (so that the next positions go to the same slots too); else
 * 0. O(size). */
int evd_window_same_state(const evd_window_t *a, const evd_window_t *b);

/* 1 when the window holds a position p with lo <= p < hi, else 0.
 * O(log size). */
int evd_window_holds(const evd_window_t *w, uint64_t lo, uint64_t hi);

#endif
