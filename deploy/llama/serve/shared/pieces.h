/* Tokens as text, as llama-server's detokenizer shows them (pieces.c):
 * a control token's own text included, bytes that begin no UTF-8
 * character as U+FFFD in a JSON string. */
#ifndef EVICTD_LLAMA_SERVE_PIECES_H
#define EVICTD_LLAMA_SERVE_PIECES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "llama.h"
#include "serve/shared/site.h"

/* tok's text into *buf (grown as needed: the caller frees it, *cap its
 * room); its length, or -1 when out of memory. */
int pieces_piece(const site_t *site, llama_token tok, char **buf,
                 size_t *cap);

/* Whether s[0..n) is UTF-8 throughout. */
bool pieces_utf8(const char *s, size_t n);

/* s[0..n) as a JSON string, each byte that begins no UTF-8 character as
 * U+FFFD (what llama-server's JSON writer makes of it); NULL when out of
 * memory. */
json_t *pieces_string(const char *s, size_t n);

/* The tokens' text, one after the other, as such a string; NULL when out
 * of memory. */
json_t *pieces_json(const site_t *site, const llama_token *toks, size_t n);

#endif
