/* Tokenizing a prompt that begins like one tokenized before from the last
 * special token both share, for every vocabulary llama.cpp has, with the
 * tokens llama_tokenize gives the whole text.
 *
 * Why that is exact. llama.cpp first splits a text at the text of its
 * special tokens (control and unknown ones when special is asked for,
 * user-defined ones always: tokenizer_st_partition), then tokenizes each
 * piece of plain text between them on its own, whatever the vocabulary
 * (SPM, BPE, WPM, UGM, RWKV, PLaMo-2); only a BOS/CLS before and an
 * EOS/SEP after are added once. The split itself is local: where no
 * special token's text crosses a place x in the text, and no token that
 * strips spaces beside it can take a byte across x, the text's split is
 * the split of what is before x followed by the split of what is after.
 * So a special token's text at [p, q) with such places at both ends is a
 * token of the whole text's split, and the text tokenizes as the part
 * before p, that one token, and the part after q, each alone. A prompt
 * shares with a kept one every such token that ends before they part
 * (checked again in the prompt: a token text that only the prompt's new
 * bytes complete could cross it); the kept tokens up to there are the
 * prompt's, and only the rest is tokenized, piece by piece between its
 * own such tokens, which are kept for the next turn.
 *
 * Safe from several threads at once (a mutex over the kept texts; the
 * tokenizing itself runs outside it). */
#ifndef EVD_LLAMA_SERVE_TOKSEG_H
#define EVD_LLAMA_SERVE_TOKSEG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/lm.h"

typedef struct tokseg_s tokseg_t;

typedef struct tokseg_stats_s {
  uint64_t prompts;  /* prompts tokenized here */
  uint64_t hits;     /* of them, those that reused a kept text's tokens */
  uint64_t reused;   /* tokens taken from kept texts */
  uint64_t tokens;   /* tokens of all those prompts */
  uint32_t kept;     /* texts kept now */
  size_t bytes;      /* the bytes they hold */
} tokseg_stats_t;

/* The last `entries` prompts' tokens over lm's vocabulary (borrowed: it
 * outlives the cache), at most max_bytes in all; NULL when out of memory.
 * A vocabulary whose added tokens it cannot tell apart is marked unusable
 * (tokseg_usable) and then every prompt is tokenized whole. */
tokseg_t *tokseg_new(const lm_t *lm, uint32_t entries, size_t max_bytes);
void tokseg_free(tokseg_t *ts);

/* Whether reuse is possible (the reason in why when not). */
bool tokseg_usable(const tokseg_t *ts, const char **why);

/* lm_tokenize(lm, text, len, special, out): the count of tokens in *out
 * (malloc'd, the caller frees), or -1. *reused (may be NULL): how many
 * came from a kept text. */
int tokseg_tokenize(tokseg_t *ts, const char *text, size_t len,
                    bool special, llama_token **out, uint32_t *reused);

/* Whether text holds a special token's text llama.cpp would split out
 * (under special): one pass over it, stopping at the first. Only for a
 * usable cache. */
bool tokseg_holds(const tokseg_t *ts, const char *text, size_t len,
                  bool special);

void tokseg_scrape(tokseg_t *ts, tokseg_stats_t *s);

#endif
