/* The sliding-window eviction policy (and streaming-llm, its variant with
 * pinned "attention sink" positions): a ring buffer of exactly budget + 1
 * token positions with O(1) step and evict and no allocation after set-up. */
#ifndef EVICTD_WINDOW_H
#define EVICTD_WINDOW_H

#include <stddef.h>
#include <stdint.h>

#include "evictd/error.h"

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
 * Slots are the ring's own indices 0..budget. Pinned positions (the first
 * `sinks` positions the window ever holds, position 0 included) live in slots
 * 0..sinks-1 for ever; every other position takes the next slot round-robin
 * over sinks..budget. */
typedef struct evd_window_s {
  uint32_t budget; /* positions kept after an eviction, >= 1 */
  uint32_t sinks;  /* leading positions pinned for ever, < budget */
  uint32_t size;   /* positions held, pinned ones included, 1..budget + 1 */
  uint32_t head;   /* slot of the oldest unpinned position */
  uint32_t tail;   /* slot the next position goes to */
  uint32_t newest; /* the newest position held */
  uint32_t pos[];  /* budget + 1 entries: the position held in each slot */
} evd_window_t;

/* Bytes an evd_window_t with its ring occupies: header plus budget + 1
 * uint32_t slots (2,052 bytes of ring at the default budget of 512). */
size_t evd_window_footprint(uint32_t budget);

/* Initialises a window in caller memory of evd_window_footprint(budget)
 * bytes, suitably aligned for a uint32_t. The window starts holding position
 * 0 in slot 0, with every other slot zeroed (O(budget), once). `rng` is
 * accepted for interface compatibility and never used.
 * Returns 0, or EVD_EINVAL (memory untouched) when budget is 0 ("a cache that
 * holds nothing is not a cache"), above EVD_WINDOW_MAX_BUDGET, or not greater
 * than sinks. Nothing is allocated. */
int evd_window_init(evd_window_t *w, uint32_t budget, uint32_t sinks,
                    evd_rng_t *rng);

/* As evd_window_init, but allocates the window (one malloc, freed with
 * evd_window_free) and stores it in *out. Returns 0, EVD_EINVAL as above,
 * or EVD_ENOMEM; *out is set only on success. */
int evd_window_new(evd_window_t **out, uint32_t budget, uint32_t sinks,
                   evd_rng_t *rng);

/* Frees a window made by evd_window_new. NULL is accepted. */
void evd_window_free(evd_window_t *w);

/* Appends position `pos` (the decode step's new token) and stores its slot in
 * *slot. `attention` (n weights) is part of the common policy interface and
 * is never read; NULL is fine. O(1).
 * Returns 0, or, with nothing changed: EVD_ESTALE when pos is not greater
 * than the newest position held (gaps are allowed), EVD_EFULL when the window
 * already holds budget + 1 positions (evict first). */
int evd_window_step(evd_window_t *w, uint32_t pos, const float *attention,
                    size_t n, uint32_t *slot);

/* Removes the oldest unpinned positions until at most `budget` remain and
 * writes them to victims[0..*n-1], oldest first. `budget` may differ from the
 * window's own; `cap` is the room in `victims` (evd_window_size() always
 * suffices). O(1) per victim.
 * Returns 0, or, with nothing changed: EVD_EINVAL when budget is not greater
 * than the window's sinks (or is 0), or when cap is too small. */
int evd_window_evict(evd_window_t *w, uint32_t budget, uint32_t *victims,
                     uint32_t cap, uint32_t *n);

/* Step and evict to the window's own budget in one call: the operation a
 * server performs once per decoded token, and what the daemon uses. Same
 * effect as evd_window_step followed by evd_window_evict(w, w->budget, ...),
 * which can return at most one victim there. Stores the new position's slot
 * in *slot and, when one position was evicted, that victim in *victim.
 * Returns 1 when a victim was evicted, 0 when none was, or EVD_ESTALE /
 * EVD_EFULL exactly as evd_window_step, with nothing changed. O(1). */
int evd_window_advance(evd_window_t *w, uint32_t pos, uint32_t *slot,
                       uint32_t *victim);

/* Restores a saved state into a window made by evd_window_init with the
 * same budget and sinks, whose pos[] the caller has already filled with the
 * saved ring. Checks that the state is one the window could have reached
 * (cursors in range and consistent with size, kept positions strictly
 * increasing up to `newest`). Returns 0, or EVD_ECORRUPT with the window
 * left in an unspecified state. */
int evd_window_restore(evd_window_t *w, uint32_t size, uint32_t head,
                       uint32_t tail, uint32_t newest);

/* Number of positions held (pinned and unpinned). */
uint32_t evd_window_size(const evd_window_t *w);

/* The newest position held; 0 in the start state. */
uint32_t evd_window_newest(const evd_window_t *w);

/* The i-th oldest position held, 0 <= i < evd_window_size(w), with its slot
 * stored in *slot when slot is not NULL. Positions come out in ascending
 * order. O(1). */
uint32_t evd_window_at(const evd_window_t *w, uint32_t i, uint32_t *slot);

#endif
