/* A conversation's tokens and digests (hist.h). */
#include "serve/engine/hist.h"

#include <stdlib.h>
#include <string.h>

#include "siphash.h"

uint64_t hist_fold(const uint64_t key[2], uint64_t d, const llama_token *b) {
  uint8_t buf[8 + HIST_BLOCK * sizeof(llama_token)];
  memcpy(buf, &d, 8);
  memcpy(buf + 8, b, HIST_BLOCK * sizeof(llama_token));
  return evd__siphash13(key, buf, sizeof(buf));
}

void hist_prompt_free(hist_prompt_t *p) {
  free(p->dig);
  p->dig = NULL;
  p->n_dig = 0;
}

/* The digest of p's first k blocks, *ok false when the prompt is shorter
 * or out of memory: then no conversation folded that far matches. */
static uint64_t prompt_digest(hist_prompt_t *p, uint32_t k, bool *ok) {
  *ok = false;
  if ((uint64_t)k * HIST_BLOCK > p->n || p->by_id)
    return 0;
  if (p->dig == NULL) {
    p->dig = malloc((p->n / HIST_BLOCK + 1) * sizeof(*p->dig));
    if (p->dig == NULL)
      return 0;
    p->dig[0] = 0;
  }
  for (; p->n_dig < k; p->n_dig++)
    p->dig[p->n_dig + 1] = hist_fold(p->key, p->dig[p->n_dig],
                                     p->tok + (size_t)p->n_dig * HIST_BLOCK);
  *ok = true;
  return p->dig[k];
}

/* The number of held[0..n) (ascending) below m. */
static uint32_t below(const uint32_t *held, uint32_t n, uint32_t m) {
  uint32_t lo = 0, hi = n;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (held[mid] < m)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* hist_usable for a cache that can go back. */
static uint32_t usable(hist_prompt_t *p, const llama_token *hist,
                       uint32_t hbase, uint64_t hdig, uint32_t n,
                       const uint32_t *held, uint32_t n_held) {
  bool ok;
  if (hbase > 0 &&
      (prompt_digest(p, hbase / HIST_BLOCK, &ok) != hdig || !ok))
    return 0;
  uint32_t lim = n < p->n ? n : p->n, m = hbase;
  while (m < lim && hist[m - hbase] == p->tok[m])
    m++;
  if (m >= p->n)
    m = p->n - 1;
  /* Going back keeps at least half of it: a prompt that shares a few
   * first tokens with a long conversation would cut it down for a small
   * gain, and its own client could not continue it any more. */
  if (m < 2 || m < hbase || (m < n && (uint64_t)m * 2 < n))
    return 0;
  uint32_t k = below(held, n_held, m);
  if (k == 0 || held[k - 1] != m - 1)
    return 0;
  if (k == (m < p->budget ? m : p->budget))
    return m;
  return p->n > n && n - m <= p->max_back ? m : 0;
}

uint32_t hist_usable(hist_prompt_t *p, const llama_token *hist,
                     uint32_t hbase, uint64_t hdig, uint32_t n,
                     const uint32_t *held, uint32_t n_held) {
  uint32_t m = usable(p, hist, hbase, hdig, n, held, n_held);
  if (m == 0 || p->rewind || m == n)
    return m;
  p->no_back = true; /* kept, had the cache been able to go back */
  return 0;
}
