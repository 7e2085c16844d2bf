/* What a choice may show of the bytes its tokens decode to: whole UTF-8
 * characters only (a token's piece may end inside one; bytes that are not
 * UTF-8 become U+FFFD, so that every event is valid JSON text), and
 * nothing of a stop string: the bytes that could begin one are held back
 * until they cannot, and a stop string found ends the choice, itself and
 * what follows left out. */
#ifndef EVICTD_LLAMA_TEXT_H
#define EVICTD_LLAMA_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

typedef struct text_s {
  evd_buf_t held;         /* bytes not shown yet */
  evd_buf_t out;          /* what push or flush returned last */
  uint32_t stop;          /* the stop string push found (its index) */
} text_t;

/* Appends a piece; *show, *len: what may be shown now (valid until the
 * next call). Returns true when a stop string was found (what precedes it
 * is in *show; the choice ends; t->stop says which). -1 when out of
 * memory. */
int text_push(text_t *t, const char *piece, size_t n, char *const *stops,
              uint32_t n_stops, const char **show, size_t *len);

/* At a choice's end: what was held back (a stop string's beginning, shown
 * after all; an unfinished character, dropped). */
int text_flush(text_t *t, const char **show, size_t *len);

/* Forgets what was held back (a choice that ended without its flush: its
 * task failed or was cancelled), keeping the memory for the next. */
void text_clear(text_t *t);

/* A text_t starts zeroed; text_free releases its memory. */
void text_free(text_t *t);

#endif
