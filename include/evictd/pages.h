/* Page-granular answers: which logical pages (position / page_size) one
 * request made hold a position for the first time, and which it left
 * holding none, so that a paged engine allocates and frees whole blocks. */
#ifndef EVICTD_PAGES_H
#define EVICTD_PAGES_H

#include <stdint.h>

#include "evictd/window.h"

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

/* Computes the net page changes of a request from the window after it,
 * `w`, and the change `c`: pages that held no position before and hold one
 * now go to pnew[0..*nnew), pages that held one before and hold none now to
 * pfreed[0..*nfreed), both ascending. A page entered and left within the
 * request is in neither. Each array needs room for nvictims + ngone +
 * nadded + 1 pages. O(pages touched x log size): the window is searched,
 * never scanned. page_size must be > 0. */
void evd_pages_diff(const evd_window_t *w, uint32_t page_size,
                    const evd_pages_change_t *c, uint32_t *pnew,
                    uint32_t *nnew, uint32_t *pfreed, uint32_t *nfreed);

/* Writes the pages holding a position, ascending, to out[0..) and returns
 * their number; `out` needs room for evd_window_size(w) pages. O(size). */
uint32_t evd_pages_held(const evd_window_t *w, uint32_t page_size,
                        uint32_t *out);

#endif
