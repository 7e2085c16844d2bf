/* Growing an array in place: the one way evictd-llama's token histories
 * and event lists make room (byte buffers use the daemon's evd_buf_t). */
#ifndef EVICTD_LLAMA_GROW_H
#define EVICTD_LLAMA_GROW_H

#include <stddef.h>
#include <stdlib.h>

/* Makes room for `need` elements of `size` bytes in the array *p, whose
 * room is *cap elements: doubling from 16. 0, or -1 when out of memory
 * (the array and *cap unchanged). */
static inline int grow(void *p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap)
    return 0;
  size_t c = *cap ? *cap : 16;
  while (c < need)
    c *= 2;
  void *q = realloc(*(void **)p, c * size);
  if (q == NULL)
    return -1;
  *(void **)p = q;
  *cap = c;
  return 0;
}

#endif
