/* evictd-llama generate: llama.cpp decoding with each sequence's KV cache
 * kept by evictd (one request per decode iteration for all sequences).
 * The command's options and entry point (generate.c); the run's state and
 * its phases are decode.h's, below it. */
#ifndef EVICTD_LLAMA_GENERATE_H
#define EVICTD_LLAMA_GENERATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/link.h"
#include "common/lm.h"
#include "common/posmap.h"

typedef struct gen_opts_s {
  lm_settings_t lm;         /* the target model, threads */
  link_opts_t link;         /* evictd */
  const char *draft;        /* draft GGUF for speculative decoding, or NULL */
  const char *prompt;       /* the prompt's bytes */
  size_t prompt_len;
  const char *file;         /* -f: the prompt's file */
  uint32_t n_predict;       /* tokens to generate per sequence */
  evd_session_cfg_t cfg;    /* budget, sinks, lookahead (< 0: the
                               daemon's defaults) */
  const char *session;      /* session id (samples add .0, .1, ...) */
  uint32_t draft_n;         /* drafts per speculative iteration */
  uint32_t parallel;        /* samples, forked after the prompt */
  double temp;              /* 0: greedy */
  uint64_t seed;
  uint32_t n_ctx;           /* 0: what budget + lookahead need */
  uint32_t rewind_at, rewind_k; /* --rewind AT:K */
  pos_mode_t positions;     /* the RoPE position of a token (posmap.h) */
  const char *dump;         /* --dump PREFIX, or NULL */
  bool stats;               /* timings on stderr at the end */
  bool keep_session;        /* do not delete the sessions at the end */
} gen_opts_t;

/* evictd-llama generate's command line; the process exit status. */
int generate_main(int argc, char **argv);

#endif
