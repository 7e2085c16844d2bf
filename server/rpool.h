/* The pool of replay records kept on the heap: records of any size, oldest
 * first, whose bytes are held to a limit by letting the oldest go. It knows
 * a record's owner only as the area of words that points at it (a
 * session's replay area, replay.h), so that the session table can free a
 * record without knowing what is in it, and replay.c can fill one without
 * knowing the table. */
#ifndef EVICTD_RPOOL_H
#define EVICTD_RPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "queue.h"

/* The pool: its records, oldest first, and their bytes against the
 * limit. */
typedef struct evd_rpool_s {
  evd_queue_t records; /* oldest first */
  size_t bytes, limit;
  uint64_t let_go; /* records let go for room, ever */
} evd_rpool_t;

/* An area's word 0 holds its form in the low four bits (the other bits
 * are the record's own, replay.c). A pooled record's address is in words 1
 * and 2 of its area; words 3 and 4 are the record's (replay.c keeps its
 * request's hash there, which outlives the record when it is let go). */
#define EVD_RPOOL_FORM_MASK 0xfu
enum {
  EVD_RPOOL_NONE = 0, /* no record */
  EVD_RPOOL_RUNS = 1, /* a record held in the area itself */
  EVD_RPOOL_HEAP = 2, /* a record in the pool */
  EVD_RPOOL_GONE = 3  /* a record let go: only words 3 and 4 remain */
};

/* The form of an area. */
static inline unsigned evd_rpool_form(const uint32_t *area) {
  return area[0] & EVD_RPOOL_FORM_MASK;
}

/* Makes an empty pool of at most `limit` bytes. */
void evd_rpool_init(evd_rpool_t *p, size_t limit);

/* Allocates a record of `words` 32-bit words for the area, links it as the
 * youngest and marks the area EVD_RPOOL_HEAP (its other bits of word 0
 * and words 3 and 4 are kept). The area must hold no pooled record.
 * Returns the record's words to fill, or NULL (area unchanged) when memory
 * is short or the record alone would exceed the limit. The caller then
 * calls evd_rpool_trim. */
uint32_t *evd_rpool_add(evd_rpool_t *p, uint32_t *area, size_t words);

/* The words of the pooled record of an EVD_RPOOL_HEAP area, borrowed
 * until the record is released or let go. */
uint32_t *evd_rpool_words(const uint32_t *area);

/* Lets the oldest records go while the pool is over its limit: their
 * areas become EVD_RPOOL_GONE, keeping their other bits and words 3 and
 * 4. */
void evd_rpool_trim(evd_rpool_t *p);

/* Frees the pooled record of the area, if it has one, and marks the area
 * EVD_RPOOL_NONE. Any area is accepted. */
void evd_rpool_release(evd_rpool_t *p, uint32_t *area);

#endif
