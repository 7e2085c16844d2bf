/* Drawing the next token from a pass's logits, the same way in every
 * command: greedy (the largest logit, the lowest id on a tie) at
 * temperature 0, else a draw from softmax(logits / temperature) with the
 * sequence's own generator (splitmix64 from its seed), so that a seed
 * gives the same text in generate and serve; with top_p below 1, from the
 * most likely tokens whose probabilities reach top_p (nucleus sampling). */
#ifndef EVICTD_LLAMA_SAMPLER_H
#define EVICTD_LLAMA_SAMPLER_H

#include <stdint.h>

#include "llama.h"

typedef struct sampler_s {
  double temp;        /* 0: greedy */
  double top_p;       /* 1: every token; 0: the best alone */
  uint64_t state;     /* the generator, seeded with the seed */
  struct sampler_prob_s *prob; /* top_p's room, n_vocab entries */
  size_t cap;
  llama_token ban[2];  /* never drawn (ignore_eos: EOS and EOT), n_ban */
  int n_ban;
  float *masked;       /* the logits with the banned ones at -inf */
  size_t masked_cap;
} sampler_t;

/* Frees what top_p and the bans used. */
void sampler_free(sampler_t *s);

/* The token with the largest logit of l[0..n) (the lowest id on a tie);
 * the runner-up in *alt when alt is not NULL. */
llama_token sampler_argmax(const float *l, int n, llama_token *alt);

/* The next token; the runner-up of the logits in *alt (may be NULL). Out
 * of memory for top_p, the draw is over every token. */
llama_token sampler_draw(sampler_t *s, const float *l, int n,
                         llama_token *alt);

#endif
