/* evictd-llama generate: llama.cpp decoding with each sequence's KV cache
 * kept by evictd (one request per decode iteration for all sequences). */
#ifndef EVICTD_LLAMA_GEN_H
#define EVICTD_LLAMA_GEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "posmap.h"

typedef struct gen_opts_s {
  const char *model;        /* target GGUF */
  const char *draft;        /* draft GGUF for speculative decoding, or NULL */
  const char *prompt;       /* the prompt's bytes */
  size_t prompt_len;
  uint32_t n_predict;       /* tokens to generate per sequence */
  int64_t budget, sinks, lookahead; /* < 0: the daemon's defaults */
  const char *url;          /* evictd: http://, https://, unix: */
  unsigned timeout_ms, reconnect_ms;
  const char *token_file, *cafile;
  const char *session;      /* session id (samples add .1, .2, ...) */
  uint32_t draft_n;         /* drafts per speculative iteration */
  uint32_t parallel;        /* samples, forked after the prompt */
  double temp;              /* 0: greedy */
  uint64_t seed;
  int threads;
  uint32_t n_ctx;           /* 0: what budget + lookahead need */
  uint32_t rewind_at, rewind_k; /* --rewind AT:K */
  pos_mode_t positions;     /* the RoPE position of a token (posmap.h) */
  const char *dump;         /* --dump PREFIX, or NULL */
  bool stats;               /* timings on stderr at the end */
  bool keep_session;        /* do not delete the sessions at the end */
  bool debug;               /* llama.cpp's whole log */
} gen_opts_t;

/* Runs a generation; returns the process exit code (0, or 1 with a message
 * on stderr). */
int gen_run(const gen_opts_t *o);

#endif
