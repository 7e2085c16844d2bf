/* Page-granular answers. A request only ever removes positions at the two
 * ends of a window's sorted list and appends at the newest end, so the
 * pages whose holding can change are the pages of the positions it touched.
 * For each such page the window after the request says whether it holds a
 * position now; whether it held one before follows from the same window,
 * because the positions held after the request that are older than the
 * first appended one are exactly those held before and kept, plus the
 * removed positions that were there before (victims older than the first
 * appended position, and every dropped or truncated one). */
#include "pages.h"

/* A sorted source of touched positions with what it says of "before". */
typedef struct {
  const uint32_t *v;
  uint32_t n, i;
  int before;   /* its positions were held before the request */
  uint64_t cut; /* ... or only those below this */
} src_t;

static int src_next(src_t *s, uint32_t page_size, uint32_t *page,
                    int *before) {
  if (s->i >= s->n)
    return 0;
  *page = s->v[s->i] / page_size;
  *before = s->before && s->v[s->i] < s->cut;
  return 1;
}

void evd_pages_diff(const evd_window_t *w, uint32_t page_size,
                    const evd_pages_change_t *c, evd_pages_out_t *out) {
  /* Positions held after the request and older than `first` were held
   * before it; a new session held nothing. */
  uint64_t first = c->created ? 0
                   : c->nadded ? c->added[0]
                               : (uint64_t)UINT32_MAX + 1;
  static const uint32_t zero = 0;
  src_t src[4] = {{c->victims, c->nvictims, 0, 1, first},
                  {c->gone, c->ngone, 0, 1, UINT64_MAX},
                  {c->added, c->nadded, 0, 0, 0},
                  {&zero, c->created ? 1u : 0u, 0, 0, 0}};
  uint32_t page = 0, q;
  int k, before, b;

  out->nfresh = out->nfreed = out->ntransient = 0;
  for (;;) {
    /* The smallest page any source is at, and whether a source saw one of
     * its positions held before the request. */
    int found = 0;
    for (k = 0; k < 4; k++)
      if (src_next(&src[k], page_size, &q, &b) && (!found || q < page)) {
        page = q;
        found = 1;
      }
    if (!found)
      return;
    before = 0;
    for (k = 0; k < 4; k++)
      while (src_next(&src[k], page_size, &q, &b) && q == page) {
        before |= b;
        src[k].i++;
      }
    uint64_t lo = (uint64_t)page * page_size, hi = lo + page_size;
    int after = evd_window_holds(w, lo, hi);
    if (!before)
      before = evd_window_holds(w, lo, hi < first ? hi : first);
    if (after && !before)
      out->fresh[out->nfresh++] = page;
    else if (before && !after)
      out->freed[out->nfreed++] = page;
    else if (!before && !after) /* touched, so held within the request */
      out->transient[out->ntransient++] = page;
  }
}

uint32_t evd_pages_held(const evd_window_t *w, uint32_t page_size,
                        uint32_t *out) {
  uint32_t i, n = 0, size = evd_window_size(w);

  for (i = 0; i < size; i++) {
    uint32_t page = evd_window_at(w, i, NULL) / page_size;
    if (n == 0 || out[n - 1] != page)
      out[n++] = page;
  }
  return n;
}
