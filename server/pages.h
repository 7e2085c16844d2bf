/* Page-granular answers: which logical pages (position / page_size) one
 * request made hold a position for the first time, which it left holding
 * none, and which held positions only within it, so that a paged engine
 * allocates and frees whole blocks. */
#ifndef EVICTD_PAGES_H
#define EVICTD_PAGES_H

#include <stdint.h>

#include "window.h"

/* What one request did to a window, for evd_pages_diff: the positions it
 * removed from the oldest end (`victims`) and from the newest end (`gone`:
 * dropped drafts, truncated positions), and the positions it appended
 * (`added`; later evicted ones included), each ascending. `created` says
 * that the request created the session, which held nothing before it. */
typedef struct evd_pages_change_s {
  const uint32_t *victims, *gone, *added;
  uint32_t nvictims, ngone, nadded;
  int created;
} evd_pages_change_t;

/* The pages of a request, each list ascending: `fresh` held no position
 * before it and hold one after it, `freed` held one before and none after,
 * `transient` held none before and none after but held a position within
 * it (a step past the budget writes and evicts them in one pass). */
typedef struct evd_pages_out_s {
  uint32_t *fresh, *freed, *transient;
  uint32_t nfresh, nfreed, ntransient;
} evd_pages_out_t;

/* Computes the page changes of a request from the window after it, `w`,
 * and the change `c` into *out, whose arrays the caller provides, each
 * with room for nvictims + ngone + nadded + 1 pages. O(pages touched x log
 * size): the window is searched, never scanned. page_size must be > 0. */
void evd_pages_diff(const evd_window_t *w, uint32_t page_size,
                    const evd_pages_change_t *c, evd_pages_out_t *out);

/* Writes the pages holding a position, ascending, to out[0..) and returns
 * their number; `out` needs room for evd_window_size(w) pages. O(size). */
uint32_t evd_pages_held(const evd_window_t *w, uint32_t page_size,
                        uint32_t *out);

#endif
