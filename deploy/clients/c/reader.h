/* The C client's answer reader, standing alone: the bytes of a daemon's
 * answer in, the answer structs of include/evictd/client.h out, their lists
 * and strings in an arena the caller gives it. It knows no connection (the
 * client hands it what the transport read; the tests and the fuzz target
 * hand it bytes of their own). Not installed. */
#ifndef EVICTD_CLIENT_READER_H
#define EVICTD_CLIENT_READER_H

#include "evictd/client.h"

#include <stddef.h>
#include <stdint.h>

/* Where an answer's lists and strings go. evd__arena_fit sizes it for an
 * answer of `len` bytes before reading (no list can hold more than len / 2
 * numbers, no string more than its quoted bytes), so reading never
 * reallocates it and the pointers handed out stay put until the next fit.
 * Zero-initialise; the owner frees it with evd__arena_free. */
typedef struct evd__arena_s {
  uint32_t *u32;
  size_t u32_len, u32_cap;
  char *chars;
  size_t chars_len, chars_cap;
} evd__arena_t;

/* Empties the arena and gives it room for any answer of len bytes: 0, or
 * -1 when memory ran out (the arena is then unchanged but empty). Grows
 * only: a warm arena allocates nothing. */
int evd__arena_fit(evd__arena_t *a, size_t len);
void evd__arena_free(evd__arena_t *a);

/* One answer to read: its bytes (len of them, no NUL needed), the arena
 * fitted to len, and after a refusal a sentence saying what is not the
 * contract's and at which byte. A reader is used for one read. */
typedef struct evd__reader_s {
  const char *s;
  size_t len;
  evd__arena_t *arena;
  char why[256];
} evd__reader_t;

static inline void evd__reader_init(evd__reader_t *r, const char *s,
                                    size_t len, evd__arena_t *arena) {
  r->s = s;
  r->len = len;
  r->arena = arena;
  r->why[0] = '\0';
}

/* The fields an answer must carry, by operation (evd__read_answer's
 * `required`): a step's are victims, slots, size and newest; a commit's
 * victims, dropped, size and newest; a truncate's removed, size and
 * newest; an evict's victims and size. */
enum {
  EVD__F_VICTIMS = 1 << 0,
  EVD__F_SLOTS = 1 << 1,
  EVD__F_DROPPED = 1 << 2,
  EVD__F_REMOVED = 1 << 3,
  EVD__F_SIZE = 1 << 4,
  EVD__F_NEWEST = 1 << 5
};

/* Each reads the whole answer and returns 0, or -1 with r->why set; out
 * is then unspecified. What is accepted holds the contract's invariants,
 * checked here so that no caller meets a list it cannot trust:
 *  - answers: victims, dropped, removed and the three pages lists
 *    strictly ascending, the pages lists pairwise disjoint;
 *  - views: kept, tentative and pages strictly ascending; as many slots
 *    and size as kept; tentative the newest of kept; newest at least the
 *    last kept; pages exactly the pages of kept (page = position /
 *    page_size), none when page_size is 0;
 *  - batches: exactly n results; an item is an answer with a step's
 *    fields or an error whose status is 400..599;
 *  - errors: a code and a message; newest 0..4294967295 or absent (-1).
 * Fields the reader does not know are passed over (a newer daemon may add
 * some); a repeated field counts once: its last value, but the first
 * "results" of a batch and the first "error" of an error answer. */
int evd__read_answer(evd__reader_t *r, unsigned required, evd_answer_t *out);
int evd__read_view(evd__reader_t *r, evd_view_t *out);
int evd__read_batch(evd__reader_t *r, evd_batch_result_t *out, size_t n);
/* An error answer {"error":{...}}: code and message (in the arena), the
 * body's status if it has one (batch items do) else 0, newest or -1, rc
 * EVD_CLIENT_EAPI. */
int evd__read_error(evd__reader_t *r, evd_client_err_t *err);

#endif
