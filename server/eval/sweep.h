/* Sweeping evictd's own window (server/window.c) over a trace: one window
 * per (budget, policy), all advanced together position by position, each
 * adding up the attention its kept positions would have received. */
#ifndef EVICTD_EVAL_SWEEP_H
#define EVICTD_EVAL_SWEEP_H

#include <stdint.h>

#include "window.h"

typedef struct evd_sweep_s evd_sweep_t;

/* Makes nb * np windows in their start state (position 0 held), window
 * (i, j) with budget budgets[i] and sinks[j], for a trace of T positions.
 * A cell whose sinks[j] are not below its budgets[i] has no window (its
 * mean is NaN); at least one cell must have one. A budget at or above T
 * behaves as budget T (nothing is ever evicted from either, since at most T
 * positions are ever held), so it is allocated as T: memory stays
 * O(T + sum of budgets) whatever budget is asked for. Copies the arrays.
 * Returns 0 and *out, or EVD_EINVAL (no cell, a pair the window refuses,
 * T < 2, or T - 1 not a window position) or EVD_ENOMEM. Free with
 * evd_sweep_free. */
int evd_sweep_new(evd_sweep_t **out, const uint32_t *budgets, uint32_t nb,
                  const uint32_t *sinks, uint32_t np, uint64_t T);

/* Position t's turn, t = 1, 2, ... in order: the token at t attends to the
 * positions each window holds (after step t - 1) plus t itself, so each
 * window's retained mass is scale * (row[t] + the sum of row[p] over its
 * held p); then every window steps t. row[0..t] is borrowed for the call.
 * O(sum of the budgets). Returns 0, or EVD_ESTALE when t is not the next
 * position. */
int evd_sweep_row(evd_sweep_t *r, uint32_t t, const double *row,
                  double scale);

/* The mean retained mass of window (i, j) over the positions swept so
 * far (t = 1..), or 0 before any; NaN for an empty cell. */
double evd_sweep_mean(const evd_sweep_t *r, uint32_t i, uint32_t j);

/* Frees r and its windows; NULL is fine. */
void evd_sweep_free(evd_sweep_t *r);

#endif
