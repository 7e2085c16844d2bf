/* Writes a synthetic but realistic attention trace for the evaluator's
 * benchmark and valgrind run: each head gives a sink column (position 0) a
 * fixed share, decays with distance over a head-specific length, spreads a
 * little uniformly, and jitters every weight; rows are normalised to 1.
 * Usage: eval_gentrace OUT.npy T H f4|f2   (H = 0 writes a [T, T] trace
 * of one head-averaged shape; H > 0 writes [H, T, T]). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy_write.h"

typedef struct {
  double sink, floor;
  double *decay; /* decay[d]: the recency weight at distance d, T entries */
} head_t;

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* A multiplicative jitter in [0.5, 1.5) (xorshift64*). */
static double jitter(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return 0.5 + (double)((rng * 0x2545f4914f6cdd1dull) >> 11) * 0x1p-53;
}

/* Head h (H > 0) of 8 kinds: sink shares from 0.05 to 0.4, decay lengths
 * from 2 to 256 positions. The head-averaged trace (H = 0) is one mix:
 * sink share 0.2, decay 0.6 e^(-d/4) + 0.4 e^(-d/64). Both spread 5 % of
 * the mass evenly. */
static void make_head(head_t *p, uint64_t T, long h) {
  double tau = ldexp(2.0, (int)(h % 8));
  uint64_t d;

  p->sink = h < 0 ? 0.2 : 0.05 + 0.05 * (double)(h % 8);
  p->floor = 0.05;
  for (d = 0; d < T; d++)
    p->decay[d] = h < 0 ? 0.6 * exp(-(double)d / 4) + 0.4 * exp(-(double)d / 64)
                        : exp(-(double)d / tau);
}

/* Row t into w[0..T). */
static void make_row(double *w, uint64_t T, uint64_t t, const head_t *p) {
  double sum = 0;
  uint64_t i;

  for (i = 0; i <= t; i++) {
    w[i] = p->decay[t - i] * jitter();
    sum += w[i];
  }
  for (i = 0; i <= t; i++)
    w[i] = (1 - p->sink - p->floor) * w[i] / sum + p->floor / (double)(t + 1);
  w[0] += p->sink;
  if (t == 0)
    w[0] = 1;
  for (i = t + 1; i < T; i++)
    w[i] = 0;
}

static int write_row(FILE *f, const double *w, uint64_t T, int esize,
                     unsigned char *buf) {
  uint64_t i;

  for (i = 0; i < T; i++) {
    float x = (float)w[i];
    if (esize == 2) {
      uint16_t h = npyw_half(x);
      buf[2 * i] = (unsigned char)h;
      buf[2 * i + 1] = (unsigned char)(h >> 8);
    } else {
      uint32_t b;
      memcpy(&b, &x, 4);
      buf[4 * i] = (unsigned char)b;
      buf[4 * i + 1] = (unsigned char)(b >> 8);
      buf[4 * i + 2] = (unsigned char)(b >> 16);
      buf[4 * i + 3] = (unsigned char)(b >> 24);
    }
  }
  return fwrite(buf, (size_t)esize, T, f) == T ? 0 : -1;
}

int main(int argc, char **argv) {
  unsigned char hdr[256], *buf = NULL;
  double *w = NULL;
  head_t head = {0, 0, NULL};
  char dict[160];
  uint64_t T, H, shape[3], t, h;
  int esize, rc = 1;
  size_t n;
  FILE *f = NULL;

  if (argc != 5 || (strcmp(argv[4], "f4") != 0 && strcmp(argv[4], "f2") != 0)) {
    fprintf(stderr, "usage: eval_gentrace OUT.npy T H f4|f2\n");
    return 2;
  }
  T = strtoull(argv[2], NULL, 10);
  H = strtoull(argv[3], NULL, 10);
  esize = argv[4][1] == '4' ? 4 : 2;
  if (T < 2 || T > (1u << 20) || H > 1024) {
    fprintf(stderr, "eval_gentrace: want 2 <= T <= 2^20, H <= 1024\n");
    return 2;
  }
  shape[0] = H;
  shape[1] = shape[2] = T;
  npyw_dict(dict, sizeof dict, esize == 2 ? "<f2" : "<f4",
            H > 0 ? shape : shape + 1, H > 0 ? 3 : 2);
  n = npyw_header(hdr, sizeof hdr, 1, dict);
  w = malloc(T * sizeof *w);
  head.decay = malloc(T * sizeof *head.decay);
  buf = malloc(T * 4);
  f = fopen(argv[1], "wb");
  if (w == NULL || head.decay == NULL || buf == NULL || f == NULL ||
      fwrite(hdr, 1, n, f) != n) {
    perror("eval_gentrace");
    goto cleanup;
  }
  for (h = 0; h < (H > 0 ? H : 1); h++) {
    make_head(&head, T, H > 0 ? (long)h : -1);
    for (t = 0; t < T; t++) {
      make_row(w, T, t, &head);
      if (write_row(f, w, T, esize, buf) < 0) {
        perror("eval_gentrace");
        goto cleanup;
      }
    }
  }
  rc = 0;

cleanup:
  if (f != NULL && fclose(f) != 0 && rc == 0) {
    perror("eval_gentrace");
    rc = 1;
  }
  free(buf);
  free(head.decay);
  free(w);
  return rc;
}
