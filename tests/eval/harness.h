/* Shared by the evaluator's test programs (test_eval.c, test_eval_input.c):
 * a scratch directory, trace and .npy writers, and evd_eval_cli run in
 * process with its exit status, stdout and stderr captured. */
#ifndef EVICTD_TESTS_EVAL_HARNESS_H
#define EVICTD_TESTS_EVAL_HARNESS_H

#include <check.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "eval.h"

/* The scratch directory ($TMPDIR or /tmp), made and removed by
 * harness_main. */
extern char dir[512];

/* dir/name, in one of 8 rotating static buffers. */
const char *path_of(const char *name);

/* Weight of head h, row t, column p (p <= t) of a T-position trace. */
typedef double (*weight_fn)(uint64_t h, uint64_t t, uint64_t p, uint64_t T);

double uniform(uint64_t h, uint64_t t, uint64_t p, uint64_t T);
double on_zero(uint64_t h, uint64_t t, uint64_t p, uint64_t T);
double on_diagonal(uint64_t h, uint64_t t, uint64_t p, uint64_t T);
double on_previous(uint64_t h, uint64_t t, uint64_t p, uint64_t T);
/* Head 0 all on position 0, head 1 on the diagonal, head 2 uniform. */
double heads_differ(uint64_t h, uint64_t t, uint64_t p, uint64_t T);

/* Writes n bytes to path. */
void write_file(const char *path, const void *b, size_t n);

/* Writes dir/name, a trace [T, T] (H = 0) or [H, T, T] of '<f4' (esize 4)
 * or '<f2' (esize 2), .npy version major.0, zeros above the diagonal;
 * returns its path. */
const char *write_trace(const char *name, int major, int esize, uint64_t H,
                        uint64_t T, weight_fn w);

/* Writes dir/name: header `dict` (version major.0) and n values. */
const char *write_npy(const char *name, int major, const char *dict,
                      const double *v, size_t n, int esize);

/* A valid 4 x 4 lower-triangular trace, to be spoiled, and its header. */
void good4x4(double *v);
#define F4_44 "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4), }"

typedef struct {
  int rc;
  char *out, *err;
  size_t nout, nerr;
} run_t;

/* The last run's results (freed by the next run). */
extern run_t last;

/* Runs evd_eval_cli with the arguments given (NULL-terminated). */
run_t *run(const char *arg, ...);

/* Runs with --json (exit 0 asserted) and returns the parsed document. */
json_t *run_json(const char *trace, const char *budgets, const char *sinks);

/* retained[i][j] (budget i, policy j) of a --json document. */
double figure(json_t *doc, size_t i, size_t j);

/* A file's contents (malloc'd, NUL-terminated) and its length. */
char *slurp(const char *path, size_t *n);

/* Makes dir, runs the suite, removes dir; the exit status. */
int harness_main(Suite *suite);

#endif
