/* Which RoPE position llama.cpp gives each token of a sequence whose cache
 * evictd keeps: its absolute position (POS_ORIGINAL), or, as streaming-llm
 * does, its index within the kept cache (POS_CACHE), the keys above each
 * evicted gap moved down with llama_memory_seq_add so that the held
 * positions always sit at cache positions 0..n-1. */
#ifndef EVICTD_LLAMA_POSMAP_H
#define EVICTD_LLAMA_POSMAP_H

#include <stddef.h>
#include <stdint.h>

typedef enum { POS_ORIGINAL, POS_CACHE } pos_mode_t;

/* held: the absolute positions the cache holds, ascending; in cache mode
 * held[i] sits at cache position i. */
typedef struct posmap_s {
  pos_mode_t mode;
  uint32_t *held;
  uint32_t n, cap;
} posmap_t;

/* Makes an empty map with room for cap positions (it grows as needed).
 * 0, or -1 when out of memory. posmap_free releases it. */
int posmap_init(posmap_t *m, pos_mode_t mode, uint32_t cap);
void posmap_free(posmap_t *m);

/* Makes dst a copy of src (a fork: llama_memory_seq_cp copied the cells
 * with their positions). dst must be zeroed or initialized; what it held
 * is freed. 0, or -1 when out of memory (dst unchanged). */
int posmap_copy(posmap_t *dst, const posmap_t *src);

/* Appends absolute position p, which must be above every held one.
 * Returns the position to give llama.cpp for it: p, or in cache mode the
 * index it takes (the count held before it). -1 when out of memory or p
 * is not above the held ones. */
int32_t posmap_add(posmap_t *m, uint32_t p);

/* "original" or "cache" into *out; 0, or -1 for anything else. */
int posmap_parse(const char *s, pos_mode_t *out);

/* "original" or "cache". */
const char *posmap_name(pos_mode_t mode);

/* The position llama.cpp knows held absolute position p by (p itself, or
 * its index in cache mode), or -1 when p is not held. */
int32_t posmap_find(const posmap_t *m, uint32_t p);

/* Removes v[0..n) (absolute, ascending, each held) from the map, and from
 * a cache of sequence seq through ops (common/seq.c binds them to
 * llama.cpp's llama_memory_seq_rm and llama_memory_seq_add; the unit tests
 * to a model of its cells): rm removes the cells at positions [p0, p1)
 * and returns 0 or -1, one call per run of consecutive positions llama.cpp
 * knows them by; shift adds delta to the positions of the cells in
 * [p0, p1), p1 -1 meaning no upper bound: in cache mode each stretch of
 * cells above a gap moves down by the number removed below it (llama.cpp
 * re-rotates those keys at its next decode). 0, or -1 when a position is
 * not held or v is not ascending (nothing changed) or rm failed (the map
 * unchanged, the cache possibly short of earlier runs: the caller stops). */
typedef struct posmap_ops_s {
  int (*rm)(void *ud, int32_t seq, int32_t p0, int32_t p1);
  void (*shift)(void *ud, int32_t seq, int32_t p0, int32_t p1,
                int32_t delta);
} posmap_ops_t;
int posmap_remove_with(posmap_t *m, const posmap_ops_t *ops, void *ud,
                       int32_t seq, const uint32_t *v, size_t n);

#endif
