/* A llama.cpp model and context as evictd-llama uses them: exact settings
 * (F32 K/V, no flash attention, one thread), one batch reused for every
 * pass, and the cache edited only by position. */
#ifndef EVICTD_LLAMA_LM_H
#define EVICTD_LLAMA_LM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "llama.h"

typedef struct lm_opts_s {
  uint32_t n_ctx;     /* KV cells per sequence (a multiple of 256) */
  uint32_t n_batch;   /* most tokens one pass may hold */
  uint32_t n_seq;     /* sequences (each its own llama seq id) */
  int threads;        /* 1 unless asked: spin-waits on a busy machine */
  bool exact;         /* F32 K/V and no flash attention (the default) */
} lm_opts_t;

typedef struct lm_s {
  const char *label;              /* "target" or "draft", for messages */
  struct llama_model *model;
  struct llama_context *ctx;
  llama_memory_t mem;
  const struct llama_vocab *vocab;
  struct llama_batch batch;
  int32_t batch_cap;
  int32_t n_vocab;
  uint32_t n_ctx;                 /* as llama.cpp rounded it */
} lm_t;

/* Quiets llama.cpp's log below warnings (debug shows everything). Call
 * once before lm_open. */
void lm_init(bool debug);

/* Loads the GGUF at path (lm_context makes its context). Refuses models
 * whose cache is not addressed by position alone: recurrent and hybrid
 * ones (a partial llama_memory_seq_rm fails) and ones with sliding-window
 * layers (llama.cpp evicts those positions itself). Returns 0, or -1 with
 * a sentence in err. */
int lm_load(lm_t *lm, const char *label, const char *path, char *err,
            size_t errlen);

/* Makes the context of a loaded model. 0, or -1 with err set. */
int lm_context(lm_t *lm, const lm_opts_t *o, char *err, size_t errlen);

void lm_close(lm_t *lm);

/* Batch building: lm_clear, then lm_add for each token (output: its logits
 * are wanted), then lm_decode. Returns 0, or -1 with err set (1 from
 * llama_decode, no free cell, is named as such). */
void lm_clear(lm_t *lm);
void lm_add(lm_t *lm, llama_token tok, int32_t pos, int32_t seq, bool output);
int lm_decode(lm_t *lm, char *err, size_t errlen);

/* The logits of the i-th token added to the last decoded batch (it must
 * have been added with output set). */
const float *lm_logits(lm_t *lm, int32_t i);

/* Removes the positions v[0..n) (ascending) of sequence seq from the cache,
 * one llama_memory_seq_rm per run of consecutive positions. Returns 0, or
 * -1 when llama.cpp refused a removal. */
int lm_remove(lm_t *lm, int32_t seq, const uint32_t *v, size_t n);

/* The smallest and largest positions sequence seq holds (-1 when none). */
int32_t lm_pos_min(lm_t *lm, int32_t seq);
int32_t lm_pos_max(lm_t *lm, int32_t seq);

/* Tokenizes text (adding the model's BOS when it has one). Returns the
 * number of tokens written to *out (malloc'd, the caller frees), or -1. */
int lm_tokenize(lm_t *lm, const char *text, size_t len, llama_token **out);

/* Writes the bytes of a token (none for control tokens) to f. */
void lm_write_piece(lm_t *lm, llama_token tok, FILE *f);

#endif
