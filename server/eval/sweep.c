/* The sweep: the windows are evictd's own (evd_window_advance, the call
 * the daemon makes per decoded token), and the kept set is read back from
 * them (evd_window_at), so the figures measure the code that serves. */
#include "sweep.h"

#include <math.h>
#include <stdlib.h>

struct evd_sweep_s {
  uint32_t nb, np;
  uint32_t next;       /* the position the next row must be for */
  evd_window_t **w;    /* nb * np, budget-major; NULL where sinks >=
                          budget (no such window: the cell is empty) */
  double *sum;         /* retained mass added up over the rows so far */
};

int evd_sweep_new(evd_sweep_t **out, const uint32_t *budgets, uint32_t nb,
                  const uint32_t *sinks, uint32_t np, uint64_t T) {
  evd_sweep_t *r;
  uint32_t i, j, k, n = nb * np;
  int err = EVD_ENOMEM;

  if (T < 2 || T > EVD_WINDOW_MAX_BUDGET || nb == 0 || np == 0 ||
      (uint64_t)nb * np > UINT32_MAX / sizeof(double))
    return EVD_EINVAL;
  for (i = 0, k = 0; i < nb; i++)
    for (j = 0; j < np; j++) {
      if (sinks[j] >= budgets[i])
        continue;
      if (!evd_window_config_valid(budgets[i], sinks[j], 1))
        return EVD_EINVAL;
      k++;
    }
  if (k == 0)
    return EVD_EINVAL; /* every cell empty */
  r = calloc(1, sizeof *r);
  if (r == NULL)
    return EVD_ENOMEM;
  r->nb = nb;
  r->np = np;
  r->next = 1;
  r->w = calloc(n, sizeof *r->w);
  r->sum = calloc(n, sizeof *r->sum);
  if (r->w == NULL || r->sum == NULL)
    goto fail;
  for (i = 0; i < nb; i++) {
    for (j = 0; j < np; j++) {
      /* At most T positions are ever held, so a budget of T or more never
       * evicts: allocating T (or sinks + 1, the least the window takes)
       * sweeps exactly the same windows. */
      uint64_t b = budgets[i];
      if (sinks[j] >= budgets[i])
        continue;
      if (b > T)
        b = T > (uint64_t)sinks[j] + 1 ? T : (uint64_t)sinks[j] + 1;
      k = i * np + j;
      err = evd_window_new(&r->w[k], (uint32_t)b, sinks[j], 1, NULL);
      if (err < 0)
        goto fail;
    }
  }
  *out = r;
  return 0;

fail:
  evd_sweep_free(r);
  return err;
}

int evd_sweep_row(evd_sweep_t *r, uint32_t t, const double *row,
                  double scale) {
  uint32_t k, i, n = r->nb * r->np;

  if (t != r->next)
    return EVD_ESTALE;
  for (k = 0; k < n; k++) {
    evd_window_t *w = r->w[k];
    uint32_t size, slot, victim;
    double mass = row[t];
    int err;

    if (w == NULL)
      continue;
    size = evd_window_size(w);
    for (i = 0; i < size; i++)
      mass += row[evd_window_at(w, i, NULL)];
    r->sum[k] += mass * scale;
    err = evd_window_advance(w, t, &slot, &victim);
    if (err < 0)
      return err;
  }
  r->next = t + 1;
  return 0;
}

double evd_sweep_mean(const evd_sweep_t *r, uint32_t i, uint32_t j) {
  uint32_t rows = r->next - 1;

  if (r->w[i * r->np + j] == NULL)
    return NAN;
  return rows == 0 ? 0.0 : r->sum[i * r->np + j] / rows;
}

void evd_sweep_free(evd_sweep_t *r) {
  uint32_t k;

  if (r == NULL)
    return;
  if (r->w != NULL)
    for (k = 0; k < r->nb * r->np; k++)
      evd_window_free(r->w[k]);
  free(r->w);
  free(r->sum);
  free(r);
}
