/* The sampler of every command (sampler.h). */
#include "common/sampler.h"

#include <math.h>
#include <stddef.h>

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

llama_token sampler_draw(sampler_t *s, const float *l, int n,
                         llama_token *alt) {
  llama_token best = sampler_argmax(l, n, alt);
  if (s->temp <= 0)
    return best;
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
