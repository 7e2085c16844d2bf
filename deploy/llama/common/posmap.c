/* The position map: which absolute positions a sequence's cache holds, and
 * the arithmetic of removing some of them in either position mode. No
 * llama.cpp here (common/seq.c binds posmap_remove_with to it), so the unit
 * tests run it against a model of the cache. */
#include "posmap.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int posmap_init(posmap_t *m, pos_mode_t mode, uint32_t cap) {
  memset(m, 0, sizeof(*m));
  m->mode = mode;
  if (cap == 0)
    cap = 16;
  m->held = malloc(cap * sizeof(*m->held));
  if (m->held == NULL)
    return -1;
  m->cap = cap;
  return 0;
}

void posmap_free(posmap_t *m) {
  free(m->held);
  m->held = NULL;
  m->n = m->cap = 0;
}

int posmap_copy(posmap_t *dst, const posmap_t *src) {
  uint32_t cap = src->cap > src->n ? src->cap : src->n + 1;
  uint32_t *h = malloc(cap * sizeof(*h));
  if (h == NULL)
    return -1;
  if (src->n > 0)
    memcpy(h, src->held, src->n * sizeof(*h));
  free(dst->held);
  dst->mode = src->mode;
  dst->held = h;
  dst->n = src->n;
  dst->cap = cap;
  return 0;
}

int32_t posmap_add(posmap_t *m, uint32_t p) {
  if (p > INT32_MAX || (m->n > 0 && p <= m->held[m->n - 1]))
    return -1;
  if (m->n == m->cap) {
    uint32_t cap = m->cap ? m->cap * 2 : 16;
    uint32_t *h = realloc(m->held, cap * sizeof(*h));
    if (h == NULL)
      return -1;
    m->held = h;
    m->cap = cap;
  }
  m->held[m->n] = p;
  return m->mode == POS_CACHE ? (int32_t)m->n++ : (m->n++, (int32_t)p);
}

/* The index of p in held, or -1. */
static int32_t index_of(const posmap_t *m, uint32_t p) {
  uint32_t lo = 0, hi = m->n;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (m->held[mid] < p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < m->n && m->held[lo] == p ? (int32_t)lo : -1;
}

int32_t posmap_find(const posmap_t *m, uint32_t p) {
  int32_t i = index_of(m, p);
  if (i < 0)
    return -1;
  return m->mode == POS_CACHE ? i : (int32_t)p;
}

int posmap_remove_with(posmap_t *m, const posmap_ops_t *ops, void *ud,
                       int32_t seq, const uint32_t *v, size_t n) {
  for (size_t k = 0; k < n; k++)
    if ((k > 0 && v[k] <= v[k - 1]) || index_of(m, v[k]) < 0)
      return -1;
  if (n == 0)
    return 0;
  /* What llama.cpp knows each removed position by: cache mode removes runs
   * of consecutive indices (held 5 and 9 may be neighbours in the cache). */
  bool cache = m->mode == POS_CACHE;
  for (size_t i = 0; i < n;) {
    int32_t first = cache ? index_of(m, v[i]) : (int32_t)v[i], last = first;
    size_t j = i + 1;
    while (j < n) {
      int32_t key = cache ? index_of(m, v[j]) : (int32_t)v[j];
      if (key != last + 1)
        break;
      last = key;
      j++;
    }
    if (ops->rm(ud, seq, first, last + 1) != 0)
      return -1;
    i = j;
  }
  if (cache) {
    /* Each stretch of cells above a gap moves down by what was removed
     * below it, the lowest stretch first: a moved stretch lands below
     * every stretch still to move, so no range catches a cell twice. */
    int32_t gone = 0;
    for (size_t i = 0; i < n;) {
      int32_t last = index_of(m, v[i]);
      size_t j = i + 1;
      while (j < n && index_of(m, v[j]) == last + 1)
        last++, j++;
      gone += (int32_t)(j - i);
      int32_t above = last + 1;
      int32_t next = j < n ? index_of(m, v[j]) : (int32_t)m->n;
      if (next > above)
        ops->shift(ud, seq, above, j < n ? next : -1, -gone);
      i = j;
    }
  }
  uint32_t w = 0;
  size_t k = 0;
  for (uint32_t r = 0; r < m->n; r++) {
    if (k < n && m->held[r] == v[k]) {
      k++;
      continue;
    }
    m->held[w++] = m->held[r];
  }
  m->n = w;
  return 0;
}

int posmap_parse(const char *s, pos_mode_t *out) {
  if (strcmp(s, "original") == 0)
    *out = POS_ORIGINAL;
  else if (strcmp(s, "cache") == 0)
    *out = POS_CACHE;
  else
    return -1;
  return 0;
}

const char *posmap_name(pos_mode_t mode) {
  return mode == POS_CACHE ? "cache" : "original";
}
