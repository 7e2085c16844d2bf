/* The trace pass: every row read once, checked, head-averaged and handed to
 * the sweep. The only memory that grows with the trace is one row of
 * floats (the read buffer) and one row of doubles (the head sum). */
#include "eval.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>

static int fail(char *msg, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *msg, size_t len, const char *fmt, ...) {
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, len, fmt, ap);
  va_end(ap);
  return EVD_ECORRUPT;
}

int evd_eval_shape(const evd_npy_t *f, uint64_t *H, uint64_t *T, char *msg,
                   size_t len) {
  char shape[128];
  const uint64_t *s = f->shape;

  evd_npy_shape_str(f, shape, sizeof shape);
  if (f->ndim != 2 && f->ndim != 3)
    return fail(msg, len, "bad shape %s: %d-D, want (T, T) or (H, T, T)",
                shape, f->ndim);
  if (s[f->ndim - 1] != s[f->ndim - 2])
    return fail(msg, len,
                "bad shape %s: not square, want (T, T) or (H, T, T)", shape);
  *H = f->ndim == 3 ? s[0] : 1;
  *T = s[f->ndim - 1];
  if (*H == 0)
    return fail(msg, len, "bad shape %s: no heads", shape);
  if (*T < 2)
    return fail(msg, len,
                "bad shape %s: T = %llu, need at least 2 positions", shape,
                (unsigned long long)*T);
  if (*T > EVD_WINDOW_MAX_BUDGET)
    return fail(msg, len, "bad shape %s: T above %u positions", shape,
                EVD_WINDOW_MAX_BUDGET);
  return 0;
}

/* Names a row in messages: "row 5", or "head 2, row 5" in a 3-D trace. */
static const char *row_name(char *buf, size_t len, uint64_t t, uint64_t h,
                            uint64_t H) {
  if (H > 1)
    snprintf(buf, len, "head %llu, row %llu", (unsigned long long)h,
             (unsigned long long)t);
  else
    snprintf(buf, len, "row %llu", (unsigned long long)t);
  return buf;
}

/* The slow pass over a row already found bad (its first n elements
 * decoded, all of them when anything is above the diagonal): names the
 * first culprit. */
static int explain(const float *row, uint64_t n, uint64_t t,
                   const char *where, double sum, char *msg, size_t len) {
  double above = 0;
  uint64_t p, first = t + 1;

  for (p = 0; p < n; p++) {
    if (!isfinite(row[p]))
      return fail(msg, len, "%s: non-finite value %g at column %llu", where,
                  (double)row[p], (unsigned long long)p);
    if (p <= t && row[p] < -EVD_EVAL_TOL)
      return fail(msg, len, "%s: negative weight %g at column %llu", where,
                  (double)row[p], (unsigned long long)p);
    if (p > t && row[p] != 0 && first == t + 1)
      first = p;
    if (p > t)
      above += fabs(row[p]);
  }
  if (fabs(sum - 1.0) > EVD_EVAL_TOL)
    return fail(msg, len,
                "%s sums to %.6f over columns 0..%llu, not 1 (tolerance %g)",
                where, sum, (unsigned long long)t, EVD_EVAL_TOL);
  return fail(msg, len,
              "%s: nonzero above the diagonal (%g at column %llu; %g in "
              "all), want zeros there", where,
              first < n ? (double)row[first] : 0.0, (unsigned long long)first,
              above);
}

/* Decodes and checks row t of head h (T raw elements in buf) and adds its
 * 0..t part to acc. The zeros above the diagonal, half the trace, are
 * checked on the raw bytes; only a row with something there is decoded
 * whole. Errors are looked for in one pass and named in a second. */
static int check_row(const evd_npy_t *f, float *row, uint64_t T, uint64_t t,
                     uint64_t h, uint64_t H, double *acc, char *msg,
                     size_t len) {
  double sum = 0, above = 0;
  uint64_t p, decoded = T;
  int neg = 0;
  char where[64];

  if (evd_npy_raw_zero(f, row, t + 1, T))
    decoded = t + 1;
  evd_npy_decode(f, row, decoded);
  for (p = t + 1; p < decoded; p++)
    above += fabsf(row[p]);
  for (p = 0; p <= t; p++) {
    sum += row[p];
    neg |= row[p] < -EVD_EVAL_TOL;
  }
  /* NaN and infinities leave sum or above non-finite, and so fail here. */
  if (neg || !(fabs(sum - 1.0) <= EVD_EVAL_TOL) || !(above <= EVD_EVAL_TOL))
    return explain(row, decoded, t,
                   row_name(where, sizeof where, t, h, H), sum, msg, len);
  /* Scaled to sum to exactly 1: the retained mass is the share of the row
   * kept, and a float16 row's rounding (up to 5e-4) does not show as mass
   * gained or lost (a budget >= T keeps 1.000000, not 1.000009). */
  for (p = 0; p <= t; p++)
    acc[p] += row[p] / sum;
  return 0;
}

/* A 3-D trace is H sequential streams read in turn: readahead follows one
 * stream, so the next rows of every head are announced a chunk ahead. */
static void prefetch(const evd_npy_t *f, uint64_t H, uint64_t T, uint64_t t) {
  uint64_t rows = ((uint64_t)4 << 20) / (T * (uint64_t)f->dtype), h, from;

  if (H < 2)
    return;
  if (rows == 0)
    rows = 1;
  if (t % rows != 0)
    return;
  from = t == 0 ? 0 : t + rows;
  for (h = 0; h < H; h++)
    evd_npy_prefetch(f, (h * T + from) * T, (t == 0 ? 2 * rows : rows) * T);
}

int evd_eval_trace(const evd_npy_t *f, uint64_t H, uint64_t T,
                   evd_sweep_t *r, char *msg, size_t len) {
  int fits = T <= SIZE_MAX / sizeof(double);
  float *row = fits ? malloc(T * sizeof *row) : NULL;
  double *acc = fits ? malloc(T * sizeof *acc) : NULL;
  uint64_t t, h, p;
  int err = EVD_ENOMEM;

  if (row == NULL || acc == NULL) {
    snprintf(msg, len, "out of memory for a row of %llu positions",
             (unsigned long long)T);
    goto cleanup;
  }
  for (t = 0; t < T; t++) {
    prefetch(f, H, T, t);
    for (p = 0; p <= t; p++)
      acc[p] = 0;
    for (h = 0; h < H; h++) {
      err = evd_npy_read_raw(f, (h * T + t) * T, T, row, msg, len);
      if (err < 0)
        goto cleanup;
      err = check_row(f, row, T, t, h, H, acc, msg, len);
      if (err < 0)
        goto cleanup;
    }
    if (t == 0)
      continue; /* position 0 is held from the start: nothing to measure */
    err = evd_sweep_row(r, (uint32_t)t, acc, 1.0 / (double)H);
    if (err < 0) {
      snprintf(msg, len, "replay at position %llu: %s",
               (unsigned long long)t, evd_strerror(err));
      goto cleanup;
    }
  }
  err = 0;

cleanup:
  free(acc);
  free(row);
  return err;
}

void evd_eval_policy_name(uint32_t sinks, char *buf, size_t len) {
  if (sinks == 0)
    snprintf(buf, len, "window");
  else
    snprintf(buf, len, "sinks %u", sinks);
}
