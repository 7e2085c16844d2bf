/* A llama.cpp model and context as evictd-llama uses them: the settings
 * of the command line (exact ones, or llama.cpp's fast ones), one batch
 * reused for every pass, and the cache edited only by position
 * (common/seq.c). Nothing here knows about evictd. */
#ifndef EVICTD_LLAMA_LM_H
#define EVICTD_LLAMA_LM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/mem.h"
#include "llama.h"

/* How llama.cpp runs: --flash-attn off|on|auto, --cache-type-k/-v
 * f32|f16|q8_0|... (indices into these names, lm.c: llama.cpp's K/V
 * cache types, as llama-server takes them). */
enum { LM_FA_OFF, LM_FA_ON, LM_FA_AUTO };
enum { LM_F32, LM_F16, LM_Q8_0, LM_BF16, LM_Q4_0, LM_Q4_1, LM_IQ4_NL,
       LM_Q5_0, LM_Q5_1 };
extern const char *const lm_fa_names[];
extern const char *const lm_type_names[];

/* What every command's command line says about the model (cli.c's model
 * block). The exact settings (F32 K/V, flash attention off, one thread)
 * give logits within about 1e-6 of a float64 reference; llama.cpp's fast
 * defaults (F16 K/V, flash attention) within about 5e-3. */
typedef struct lm_settings_s {
  const char *model;  /* the GGUF */
  int threads;        /* llama.cpp threads (1: no spin-waits on a busy
                         machine) */
  int threads_batch;  /* a pass of several tokens' (0: threads) */
  int flash_attn;     /* LM_FA_* */
  int type_k, type_v; /* LM_F32, LM_F16, LM_Q8_0, ... */
  bool exact;         /* --exact: the exact settings, whatever else says */
  bool swa_full;      /* --swa-full: windowed layers' cells at full size */
  bool debug;         /* llama.cpp's whole log */
} lm_settings_t;

/* The exact settings, for a command's defaults and --exact. */
#define LM_EXACT .threads = 1, .flash_attn = LM_FA_OFF, .type_k = LM_F32, \
                 .type_v = LM_F32

/* Applies --exact; then checks the settings go together (a quantized V
 * cache needs flash attention). 0, or -1 with a sentence in err. */
int lm_settle(lm_settings_t *s, char *err, size_t errlen);

/* The context's size, from the command's sessions. */
typedef struct lm_opts_s {
  uint32_t n_ctx;     /* KV cells per sequence (a multiple of 256) */
  uint32_t n_batch;   /* most tokens one pass may hold */
  uint32_t n_seq;     /* sequences (each its own llama seq id) */
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
  lm_mem_kind_t kind;             /* what its memory keeps (mem.h) */
  bool rewind;                    /* its last positions can be removed and
                                     decoded again (full attention alone:
                                     a recurrent state cannot go back,
                                     and windowed layers reuse the cells
                                     of positions they left behind) */
} lm_t;

/* Quiets llama.cpp's log below warnings (debug shows everything). Call
 * once before lm_open. */
void lm_init(bool debug);

/* Loads the GGUF at path (lm_context makes its context): any model
 * llama.cpp loads, whatever its layers keep (mem.h). Returns 0, or -1
 * with a sentence in err. */
int lm_load(lm_t *lm, const char *label, const char *path, char *err,
            size_t errlen);

/* Makes the context of a loaded model, sized by o, run as set says, and
 * records what its memory keeps (kind, rewind). 0, or -1 with err set. */
int lm_context(lm_t *lm, const lm_opts_t *o, const lm_settings_t *set,
               char *err, size_t errlen);

void lm_close(lm_t *lm);

/* Two passes in sequence 0, of up to 32 tokens (the model's BOS and EOS
 * in turn, those it has; else token 0) and of one, then the cache
 * emptied: llama.cpp's first passes of each kind paid before any
 * request. 0, or -1 with err set. */
int lm_warmup(lm_t *lm, char *err, size_t errlen);

/* Batch building: lm_clear, then lm_add for each token (output: its logits
 * are wanted), then lm_decode. Returns 0, or -1 with err set (1 from
 * llama_decode, no free cell, is named as such). */
void lm_clear(lm_t *lm);
void lm_add(lm_t *lm, llama_token tok, int32_t pos, int32_t seq, bool output);
int lm_decode(lm_t *lm, char *err, size_t errlen);

/* The logits of the i-th token added to the last decoded batch (it must
 * have been added with output set). */
const float *lm_logits(lm_t *lm, int32_t i);

/* The smallest and largest positions sequence seq holds (-1 when none):
 * in its attention layers that keep all they are not told to remove
 * (mem.h's lm_mem_pos). */
int32_t lm_pos_min(lm_t *lm, int32_t seq);
int32_t lm_pos_max(lm_t *lm, int32_t seq);

/* Tokenizes text (adding the model's BOS when it has one; with special,
 * the text of special tokens, as a chat template writes them, becomes
 * those tokens). Returns the number of tokens written to *out (malloc'd,
 * the caller frees), or -1. */
int lm_tokenize(const lm_t *lm, const char *text, size_t len, bool special,
                llama_token **out);

/* The same without the BOS: text that goes on after tokens already
 * held (a conversation's next turn). */
int lm_tokenize_more(const lm_t *lm, const char *text, size_t len,
                     bool special, llama_token **out);

/* The bytes of a token (none for control tokens) into buf[0..cap): their
 * count, or -N when N bytes are needed. */
int lm_piece(const lm_t *lm, llama_token tok, char *buf, size_t cap);

/* The same, a control token's text included (its "<tool_call>", say):
 * for the tokens a chat format needs to see. */
int lm_piece_special(const lm_t *lm, llama_token tok, char *buf,
                     size_t cap);

/* Writes the bytes of a token to f. */
void lm_write_piece(const lm_t *lm, llama_token tok, FILE *f);

/* Whether tok ends a generation (EOS, EOT, ...). */
bool lm_is_end(const lm_t *lm, llama_token tok);

/* The model's EOS and EOT tokens into out (those it has); their count. */
int lm_end_tokens(const lm_t *lm, llama_token out[2]);

#endif
