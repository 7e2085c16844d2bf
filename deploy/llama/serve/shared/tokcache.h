/* Tokenizing a prompt that begins like one tokenized before (a
 * conversation's history, resent at every turn) from where they part,
 * not from the start, with the same tokens llama_tokenize gives.
 *
 * Exact where the vocabulary says so, and only there: a SentencePiece
 * (SPM) vocabulary whose tokens hold "▁" (an escaped space) only in a
 * leading run. Its tokenizer merges pairs of neighbouring symbols into
 * tokens, so no merge ever makes a token across a space that follows a
 * character other than a space: the text splits there into parts each
 * tokenized on its own, whatever comes before or after. A prompt's
 * tokens up to the last such space it shares with a kept text are the
 * kept text's; the rest is tokenized alone, llama.cpp's space prefix
 * standing for that space. Prompts holding the text of a token the
 * tokenizer would split out first (control tokens with special, the
 * vocabulary's user-defined ones always), and all prompts of any other
 * vocabulary, go to tokseg.h: parted at the last special token they
 * share with a kept text, for every vocabulary. */
#ifndef EVD_LLAMA_SERVE_TOKCACHE_H
#define EVD_LLAMA_SERVE_TOKCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/lm.h"

typedef struct tokcache_s tokcache_t;

typedef struct tokcache_stats_s {
  uint64_t prompts;  /* prompts tokenized through the cache */
  uint64_t hits;     /* of them, those that reused a kept text's tokens */
  uint64_t reused;   /* tokens taken from kept texts */
  uint64_t tokens;   /* tokens of all those prompts */
  uint32_t kept;     /* texts kept now */
  size_t bytes;      /* the bytes they hold */
} tokcache_stats_t;

/* A cache of the last `entries` prompts' tokens over lm's vocabulary, at
 * most max_bytes in all; NULL when out of memory. Whether the vocabulary
 * allows reuse is found here: when not, the cache tokenizes every prompt
 * whole and keeps nothing. */
tokcache_t *tokcache_new(const lm_t *lm, uint32_t entries, size_t max_bytes);
void tokcache_free(tokcache_t *tc);

/* Whether lm's vocabulary allows reuse at all (the reason in why when
 * not). */
bool tokcache_usable(const tokcache_t *tc, const char **why);

/* lm_tokenize(lm, text, len, special, out) (the BOS added): the count of
 * tokens in *out (malloc'd), or -1. *reused (may be NULL): how many of
 * them came from a kept text. Safe from several threads at once. */
int tokcache_tokenize(tokcache_t *tc, const char *text, size_t len,
                      bool special, llama_token **out, uint32_t *reused);

void tokcache_scrape(tokcache_t *tc, tokcache_stats_t *s);

#endif
