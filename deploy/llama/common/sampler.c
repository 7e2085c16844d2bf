/* The sampler of every command (sampler.h). */
#include "common/sampler.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"

typedef struct sampler_prob_s {
  double p;
  llama_token id;
} prob_t;

static uint64_t splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

llama_token sampler_argmax(const float *l, int n, llama_token *alt) {
  int best = 0, second = n > 1 ? 1 : 0;
  if (n > 1 && l[1] > l[0])
    best = 1, second = 0;
  for (int i = 2; i < n; i++) {
    if (l[i] > l[best])
      second = best, best = i;
    else if (l[i] > l[second])
      second = i;
  }
  if (alt != NULL)
    *alt = second;
  return best;
}

void sampler_free(sampler_t *s) {
  free(s->prob);
  free(s->masked);
  s->prob = NULL;
  s->masked = NULL;
  s->cap = s->masked_cap = 0;
}

/* The most likely first; the lower id on a tie. */
static int by_prob(const void *a, const void *b) {
  const prob_t *x = a, *y = b;
  if (x->p != y->p)
    return x->p < y->p ? 1 : -1;
  return (x->id > y->id) - (x->id < y->id);
}

/* Nucleus sampling: the smallest set of the most likely tokens whose
 * probability reaches top_p (at least the best), drawn from in order. */
static llama_token draw_top_p(sampler_t *s, const float *l, int n,
                              llama_token best) {
  double z = 0, keep = 0, c = 0;
  for (int i = 0; i < n; i++) {
    s->prob[i] = (prob_t){exp(((double)l[i] - l[best]) / s->temp), i};
    z += s->prob[i].p;
  }
  qsort(s->prob, (size_t)n, sizeof(*s->prob), by_prob);
  int k = 0;
  do
    keep += s->prob[k++].p;
  while (k < n && keep < s->top_p * z);
  double u = (double)(splitmix(&s->state) >> 11) * 0x1.0p-53 * keep;
  for (int i = 0; i < k; i++) {
    c += s->prob[i].p;
    if (u < c)
      return s->prob[i].id;
  }
  return s->prob[0].id;
}

llama_token sampler_draw(sampler_t *s, const float *l, int n,
                         llama_token *alt) {
  /* Banned tokens: a copy of the logits with theirs at -inf (the loops
   * below stay those of an unbanned draw). */
  if (s->n_ban > 0 &&
      grow(&s->masked, &s->masked_cap, (size_t)n, sizeof(float)) == 0) {
    memcpy(s->masked, l, (size_t)n * sizeof(float));
    for (int k = 0; k < s->n_ban; k++)
      if (s->ban[k] >= 0 && s->ban[k] < n)
        s->masked[s->ban[k]] = -INFINITY;
    l = s->masked;
  }
  llama_token best = sampler_argmax(l, n, alt);
  if (s->temp <= 0)
    return best;
  if (s->top_p < 1 && grow(&s->prob, &s->cap, (size_t)n,
                           sizeof(*s->prob)) == 0)
    return draw_top_p(s, l, n, best);
  double t = s->temp, z = 0;
  for (int i = 0; i < n; i++)
    z += exp(((double)l[i] - l[best]) / t);
  double u = (double)(splitmix(&s->state) >> 11) * 0x1.0p-53 * z, c = 0;
  for (int i = 0; i < n; i++) {
    c += exp(((double)l[i] - l[best]) / t);
    if (u < c)
      return i;
  }
  return best;
}
