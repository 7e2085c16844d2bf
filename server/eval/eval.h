/* evictd-eval: how much attention a sliding window (with or without sinks)
 * keeps, measured by sweeping evictd's policy core over an attention trace
 * (a .npy file of shape [T, T] or [H, T, T]); the pieces main.c joins. */
#ifndef EVICTD_EVAL_EVAL_H
#define EVICTD_EVAL_EVAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "npy.h"
#include "sweep.h"

/* Rows must sum to 1 within this, and weight above the diagonal (or below
 * zero) beyond it is an error, not rounding. */
#define EVD_EVAL_TOL 1e-3

/* Exit statuses: 2 for unusable arguments or input files, 1 for failures
 * while writing the results (or out of memory). */
enum { EVD_EVAL_OK = 0, EVD_EVAL_FAIL = 1, EVD_EVAL_USAGE = 2 };

/* What one run measured, as the reports read it. */
typedef struct {
  const char *trace;          /* the path as given (borrowed) */
  const char *dtype;          /* "<f4" or "<f2" */
  int version;                /* .npy format major version */
  int ndim;                   /* 2 or 3 */
  uint64_t T, H;              /* positions; heads (1 for a 2-D trace) */
  uint32_t nb, np;            /* budgets (ascending), policies */
  const uint32_t *budgets;    /* borrowed */
  const uint32_t *sinks;      /* one per policy, ascending (borrowed) */
  const double *mass;         /* nb * np means, budget-major (borrowed) */
} evd_eval_t;

/* Checks that f is a trace: shape (T, T) or (H, T, T) with H >= 1 and
 * 2 <= T <= EVD_WINDOW_MAX_BUDGET. Sets *H (1 for 2-D) and *T, or writes
 * the reason to msg and returns EVD_ECORRUPT. */
int evd_eval_shape(const evd_npy_t *f, uint64_t *H, uint64_t *T, char *msg,
                   size_t len);

/* Reads the trace row by row (the H rows of a position together), checks
 * each (finite, no weight below -EVD_EVAL_TOL, summing to 1 over 0..t
 * within EVD_EVAL_TOL, absolute weight above the diagonal at most
 * EVD_EVAL_TOL), scales its 0..t part to sum to exactly 1 (storage
 * rounding), and feeds positions 1..T-1 to r, head-averaged. Memory:
 * one row of floats and one of doubles. Returns 0, or EVD_ECORRUPT (a bad
 * row, or the file shrank), EVD_EIO or EVD_ENOMEM, with the reason in msg. */
int evd_eval_trace(const evd_npy_t *f, uint64_t H, uint64_t T,
                   evd_sweep_t *r, char *msg, size_t len);

/* The policy's name: "window" for no sinks, else "sinks N". */
void evd_eval_policy_name(uint32_t sinks, char *buf, size_t len);

/* The reports, written to out; each returns 0 or EVD_EIO (a write failed).
 * The table: one row per budget, one column per policy, six decimals. */
int evd_eval_table(FILE *out, const evd_eval_t *e);

/* The same figures as one JSON object. */
int evd_eval_json(FILE *out, const evd_eval_t *e);

/* An SVG line chart of retained mass against budget (log2 axis), one line
 * per policy, with title, axis labels, ticks and a legend. */
int evd_eval_svg(FILE *out, const evd_eval_t *e);

/* The command line: `evictd-eval TRACE.npy [--budgets LIST] [--sinks LIST]
 * [--json] [--svg FILE]`, results to out, errors (one line each) to err.
 * Returns the exit status (EVD_EVAL_*). */
int evd_eval_cli(int argc, char **argv, FILE *out, FILE *err);

#endif
