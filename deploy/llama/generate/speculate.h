/* evictd-llama generate --draft (speculate.c): speculative decoding of one
 * sequence over decode.h's phases. */
#ifndef EVICTD_LLAMA_GENERATE_SPECULATE_H
#define EVICTD_LLAMA_GENERATE_SPECULATE_H

#include <stdbool.h>

#include "generate/decode.h"

/* One speculative iteration: K drafts, one evictd step, one target pass
 * (*more: whether another follows); 0 or 1. */
int gen_speculate(gen_t *g, bool *more);

/* The last commit of a speculative run, so that the session and the cache
 * end with only accepted positions; 0 or 1. */
int gen_settle(gen_t *g);

#endif
