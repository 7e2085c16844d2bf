/* Drawing the next token from a pass's logits, the same way in every
 * command: greedy (the largest logit, the lowest id on a tie) at
 * temperature 0, else a draw from softmax(logits / temperature) with the
 * sequence's own generator (splitmix64 from its seed), so that a seed
 * gives the same text in generate and serve. */
#ifndef EVICTD_LLAMA_SAMPLER_H
#define EVICTD_LLAMA_SAMPLER_H

#include <stdint.h>

#include "llama.h"

typedef struct sampler_s {
  double temp;        /* 0: greedy */
  uint64_t state;     /* the generator, seeded with the seed */
} sampler_t;

/* The token with the largest logit of l[0..n) (the lowest id on a tie);
 * the runner-up in *alt when alt is not NULL. */
llama_token sampler_argmax(const float *l, int n, llama_token *alt);

/* The next token; the runner-up of the logits in *alt (may be NULL). */
llama_token sampler_draw(sampler_t *s, const float *l, int n,
                         llama_token *alt);

#endif
