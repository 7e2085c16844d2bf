/* The llama.cpp side of evictd-llama: loading, the context, one reusable
 * batch, decoding, tokens and their bytes. */
#include "common/lm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const lm_fa_names[] = {"off", "on", "auto", NULL};
/* The K/V cache types llama-server takes, in the order of LM_F32... */
const char *const lm_type_names[] = {"f32",  "f16",  "q8_0",   "bf16", "q4_0",
                                     "q4_1", "iq4_nl", "q5_0", "q5_1", NULL};

static const enum ggml_type types[] = {
    GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_Q8_0,
    GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
    GGML_TYPE_IQ4_NL, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1};
static const enum llama_flash_attn_type fa_types[] = {
    LLAMA_FLASH_ATTN_TYPE_DISABLED, LLAMA_FLASH_ATTN_TYPE_ENABLED,
    LLAMA_FLASH_ATTN_TYPE_AUTO};

int lm_settle(lm_settings_t *s, char *err, size_t errlen) {
  if (s->exact) {
    s->threads = 1;
    s->threads_batch = 0;
    s->flash_attn = LM_FA_OFF;
    s->type_k = s->type_v = LM_F32;
  }
  if (ggml_is_quantized(types[s->type_v]) && s->flash_attn == LM_FA_OFF) {
    snprintf(err, errlen, "--cache-type-v %s needs flash attention "
             "(-fa on or auto): llama.cpp keeps a quantized V cache only "
             "with it", lm_type_names[s->type_v]);
    return -1;
  }
  return 0;
}

static bool log_debug;

static void on_log(enum ggml_log_level level, const char *text, void *ud) {
  (void)ud;
  if (log_debug || level == GGML_LOG_LEVEL_WARN ||
      level == GGML_LOG_LEVEL_ERROR)
    fputs(text, stderr);
}

void lm_init(bool debug) {
  log_debug = debug;
  llama_log_set(on_log, NULL);
  llama_backend_init();
}

int lm_load(lm_t *lm, const char *label, const char *path, char *err,
            size_t errlen) {
  memset(lm, 0, sizeof(*lm));
  lm->label = label;
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  lm->model = llama_model_load_from_file(path, mp);
  if (lm->model == NULL) {
    snprintf(err, errlen, "cannot load the %s model %s (llama.cpp says why "
             "above)", label, path);
    return -1;
  }
  lm->vocab = llama_model_get_vocab(lm->model);
  lm->n_vocab = llama_vocab_n_tokens(lm->vocab);
  return 0;
}

int lm_context(lm_t *lm, const lm_opts_t *o, const lm_settings_t *set,
               char *err, size_t errlen) {
  const char *label = lm->label;
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = o->n_ctx * o->n_seq; /* split evenly into the streams */
  cp.n_batch = o->n_batch;
  cp.n_ubatch = o->n_batch; /* one pass is one ubatch: one causal mask */
  cp.n_seq_max = o->n_seq;
  cp.n_threads = set->threads;
  cp.n_threads_batch = set->threads_batch > 0 ? set->threads_batch
                                               : set->threads;
  cp.flash_attn_type = fa_types[set->flash_attn];
  cp.type_k = types[set->type_k];
  cp.type_v = types[set->type_v];
  /* A stream of cells per sequence: a token's attention then spans its own
   * sequence's cells, not all of them (with 16 sequences of the tiny
   * model, 3.8 ms per pass instead of 7.1 ms); a fork's
   * llama_memory_seq_cp copies the prompt's cells into the child's
   * stream once, and after budget steps nothing is shared anyway. */
  cp.kv_unified = false;
  /* llama-server's default (llama.cpp's C default is the full size). */
  cp.swa_full = set->swa_full;
  cp.no_perf = true;
  lm->ctx = llama_init_from_model(lm->model, cp);
  if (lm->ctx == NULL) {
    snprintf(err, errlen, "cannot make a llama.cpp context for the %s model "
             "(%u cells per sequence, n_batch %u, %u sequences, K/V %s/%s, "
             "flash attention %s)", label, o->n_ctx, o->n_batch, o->n_seq,
             lm_type_names[set->type_k], lm_type_names[set->type_v],
             lm_fa_names[set->flash_attn]);
    return -1;
  }
  lm->mem = llama_get_memory(lm->ctx);
  if (lm->mem == NULL) {
    snprintf(err, errlen, "the %s model keeps no cache (llama.cpp makes "
             "none for an encoder or a diffusion model): evictd-llama "
             "decodes causal language models", label);
    return -1;
  }
  lm->kind = lm_mem_kind(lm->mem, llama_model_n_swa(lm->model));
  lm->rewind = lm->kind == LM_MEM_FULL;
  /* evictd removes positions older than the newest: a cache that refuses
   * one (seq 0 is empty: nothing changes) cannot be kept by it. */
  if (!lm_mem_rm(lm->mem, 0, 1, 2)) {
    snprintf(err, errlen, "llama.cpp's cache of the %s model (%s) refuses "
             "to lose a single position (llama_memory_seq_rm of one says "
             "no): evictd's window cannot keep it", label,
             lm_mem_name(lm->kind));
    return -1;
  }
  lm->n_ctx = llama_n_ctx(lm->ctx) / o->n_seq;
  lm->batch_cap = (int32_t)o->n_batch;
  lm->batch = llama_batch_init(lm->batch_cap, 0, 1);
  return 0;
}

void lm_close(lm_t *lm) {
  if (lm->ctx != NULL) {
    llama_batch_free(lm->batch);
    llama_free(lm->ctx);
  }
  if (lm->model != NULL)
    llama_model_free(lm->model);
  memset(lm, 0, sizeof(*lm));
}

void lm_clear(lm_t *lm) { lm->batch.n_tokens = 0; }

int lm_warmup(lm_t *lm, char *err, size_t errlen) {
  llama_token t[2];
  int32_t n = 0, chunk = lm->batch_cap < 32 ? lm->batch_cap : 32, p = 0;
  if (llama_vocab_bos(lm->vocab) != LLAMA_TOKEN_NULL)
    t[n++] = llama_vocab_bos(lm->vocab);
  if (llama_vocab_eos(lm->vocab) != LLAMA_TOKEN_NULL)
    t[n++] = llama_vocab_eos(lm->vocab);
  if (n == 0)
    t[n++] = 0;
  /* A prompt chunk's pass, then a generated token's: the first of each
   * costs llama.cpp more than the next (about 1 ms of the tiny model's
   * first request, measured; 32 tokens took more of it than 16). */
  int rc = 0;
  for (int32_t len = chunk; rc == 0 && len >= 1; len = len > 1 ? 1 : 0) {
    lm_clear(lm);
    for (int32_t i = 0; i < len; i++, p++)
      lm_add(lm, t[p % n], p, 0, i == len - 1);
    rc = lm_decode(lm, err, errlen);
  }
  lm_clear(lm);
  llama_memory_clear(lm->mem, true);
  llama_synchronize(lm->ctx);
  return rc;
}

void lm_add(lm_t *lm, llama_token tok, int32_t pos, int32_t seq,
            bool output) {
  struct llama_batch *b = &lm->batch;
  int32_t i = b->n_tokens;
  /* Callers size n_batch for their largest pass; going past it is a bug. */
  if (i >= lm->batch_cap) {
    fprintf(stderr, "evictd-llama: internal error: a pass of more than %d "
            "tokens\n", lm->batch_cap);
    abort();
  }
  b->token[i] = tok;
  b->pos[i] = pos;
  b->n_seq_id[i] = 1;
  b->seq_id[i][0] = seq;
  b->logits[i] = output;
  b->n_tokens = i + 1;
}

int lm_decode(lm_t *lm, char *err, size_t errlen) {
  int rc = llama_decode(lm->ctx, lm->batch);
  if (rc == 0)
    return 0;
  if (rc == 1)
    snprintf(err, errlen, "the %s model's KV cache (%u cells per sequence) "
             "has no room "
             "for a pass of %d tokens: the sequences hold more positions "
             "than budget + lookahead each", lm->label, lm->n_ctx,
             lm->batch.n_tokens);
  else
    snprintf(err, errlen, "llama_decode of the %s model failed (%d) on a "
             "pass of %d tokens", lm->label, rc, lm->batch.n_tokens);
  return -1;
}

const float *lm_logits(lm_t *lm, int32_t i) {
  return llama_get_logits_ith(lm->ctx, i);
}

int32_t lm_pos_min(lm_t *lm, int32_t seq) {
  return lm_mem_pos(lm->mem, seq, false);
}

int32_t lm_pos_max(lm_t *lm, int32_t seq) {
  return lm_mem_pos(lm->mem, seq, true);
}

static int tokenize(const lm_t *lm, const char *text, size_t len,
                    bool add_bos, bool special, llama_token **out);

int lm_tokenize(const lm_t *lm, const char *text, size_t len, bool special,
                llama_token **out) {
  return tokenize(lm, text, len, true, special, out);
}

int lm_tokenize_more(const lm_t *lm, const char *text, size_t len,
                     bool special, llama_token **out) {
  return tokenize(lm, text, len, false, special, out);
}

static int tokenize(const lm_t *lm, const char *text, size_t len,
                    bool add_bos, bool special, llama_token **out) {
  int32_t cap = (int32_t)len + 8;
  llama_token *toks = malloc(sizeof(*toks) * (size_t)cap);
  if (toks == NULL)
    return -1;
  int32_t n = llama_tokenize(lm->vocab, text, (int32_t)len, toks, cap,
                             add_bos, special);
  if (n < 0) { /* -n tokens needed */
    cap = -n;
    llama_token *t = realloc(toks, sizeof(*toks) * (size_t)cap);
    if (t == NULL) {
      free(toks);
      return -1;
    }
    toks = t;
    n = llama_tokenize(lm->vocab, text, (int32_t)len, toks, cap, add_bos,
                       special);
  }
  if (n < 0) {
    free(toks);
    return -1;
  }
  *out = toks;
  return n;
}

int lm_piece(const lm_t *lm, llama_token tok, char *buf, size_t cap) {
  return llama_token_to_piece(lm->vocab, tok, buf, (int32_t)cap, 0, false);
}

int lm_piece_special(const lm_t *lm, llama_token tok, char *buf,
                     size_t cap) {
  return llama_token_to_piece(lm->vocab, tok, buf, (int32_t)cap, 0, true);
}

void lm_write_piece(const lm_t *lm, llama_token tok, FILE *f) {
  char small[64];
  int n = lm_piece(lm, tok, small, sizeof(small));
  if (n >= 0) {
    fwrite(small, 1, (size_t)n, f);
    return;
  }
  char *big = malloc((size_t)-n); /* -n bytes are needed */
  if (big == NULL)
    return;
  n = lm_piece(lm, tok, big, (size_t)-n);
  if (n > 0)
    fwrite(big, 1, (size_t)n, f);
  free(big);
}

bool lm_is_end(const lm_t *lm, llama_token tok) {
  return llama_vocab_is_eog(lm->vocab, tok);
}

int lm_end_tokens(const lm_t *lm, llama_token out[2]) {
  llama_token eos = llama_vocab_eos(lm->vocab);
  llama_token eot = llama_vocab_eot(lm->vocab);
  int n = 0;
  if (eos != LLAMA_TOKEN_NULL)
    out[n++] = eos;
  if (eot != LLAMA_TOKEN_NULL && eot != eos)
    out[n++] = eot;
  return n;
}
