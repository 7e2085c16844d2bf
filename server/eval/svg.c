/* The chart of evictd-eval: retained attention mass against budget on a log2
 * axis, one line per policy, as a self-contained SVG that reads on its own
 * (title naming the trace and T, labelled axes, ticks, a legend), drawn
 * with the shared chart writer (chart.h). */
#include "eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chart.h"
#include "error.h"

/* Okabe-Ito colours, told apart with colour-blindness too, and a dash pattern
 * per line as well, so lines that coincide (policies that tie) both show. */
static const char *const colours[] = {"#0072B2", "#D55E00", "#009E73",
                                      "#CC79A7", "#E69F00", "#56B4E9",
                                      "#000000", "#F0E442"};
static const char *const dashes[] = {"", "6,4", "2,3", "8,3,2,3"};
#define NCOLOURS (sizeof colours / sizeof colours[0])
#define NDASHES (sizeof dashes / sizeof dashes[0])

/* x spans whole powers of two around the budgets, so that its ticks (the
 * powers of two) always include both ends; y spans 0..1, or a tenth-aligned
 * band up to 1 when every value is above one half, where the lines would
 * otherwise crowd together at the top. */
static void pick_scale(evd_chart_t *c, const evd_eval_t *e) {
  double lx0 = floor(log2((double)e->budgets[0]));
  double lx1 = ceil(log2((double)e->budgets[e->nb - 1])), lo = 1.0, y0;
  uint32_t k;

  if (lx1 <= lx0)
    lx1 = lx0 + 1;
  for (k = 0; k < e->nb * e->np; k++)
    if (!isnan(e->mass[k]) && e->mass[k] < lo)
      lo = e->mass[k];
  y0 = lo >= 0.5 ? floor(lo * 10 - 1e-9) / 10 : 0.0;
  if (y0 > 0.9)
    y0 = 0.9;
  if (y0 < 0)
    y0 = 0;
  c->x = (evd_chart_axis_t){EVD_CHART_LOG2, ldexp(1.0, (int)lx0),
                            ldexp(1.0, (int)lx1), 0,
                            "KV-cache budget (positions kept per sequence, "
                            "log2 scale)"};
  c->y = (evd_chart_axis_t){EVD_CHART_LINEAR, y0, 1.0, 0.1,
                            "retained attention mass (fraction of the row, "
                            "mean over t)"};
}

int evd_eval_svg(FILE *out, const evd_eval_t *e) {
  const char *base = strrchr(e->trace, '/');
  evd_chart_t c = {.out = out, .width = 920, .height = 500, .x0 = 80,
                   .y0 = 80, .x1 = 600, .y1 = 420, .legend_x = 620,
                   .legend_y = 110, .legend_step = 22};
  double *x = malloc(e->nb * sizeof(*x)), *y = malloc(e->nb * sizeof(*y));
  char sub[512], legend[64], name[32];
  uint32_t i, j;

  if (x == NULL || y == NULL) {
    free(x);
    free(y);
    return EVD_ENOMEM;
  }
  base = base != NULL && base[1] != '\0' ? base + 1 : e->trace;
  snprintf(sub, sizeof sub, "trace %s: T = %llu positions, H = %llu head%s "
           "(%s); mean over t = 1..%llu", base, (unsigned long long)e->T,
           (unsigned long long)e->H, e->H == 1 ? "" : "s",
           strcmp(e->dtype, "<f2") == 0 ? "float16" : "float32",
           (unsigned long long)(e->T - 1));
  pick_scale(&c, e);
  evd_chart_begin(&c, "Retained attention mass vs KV-cache budget (evictd "
                  "sliding window)", sub);
  evd_chart_axes(&c);
  /* Budgets at or beyond T keep everything: mark where that starts. */
  snprintf(legend, sizeof legend, "budget = T = %llu",
           (unsigned long long)e->T);
  evd_chart_vline(&c, (double)e->T, legend);
  evd_chart_text(&c, 620, 88, "font-size=\"13\" font-weight=\"bold\"",
                 "policy");
  for (i = 0; i < e->nb; i++)
    x[i] = e->budgets[i];
  for (j = 0; j < e->np; j++) {
    evd_series_t s = {legend, name, colours[j % NCOLOURS],
                      dashes[j % NDASHES], "budget"};
    evd_eval_policy_name(e->sinks[j], name, sizeof name);
    if (e->sinks[j] == 0)
      snprintf(legend, sizeof legend, "window (no sinks)");
    else if (e->sinks[j] == 1)
      snprintf(legend, sizeof legend, "sinks 1 (position 0 pinned)");
    else
      snprintf(legend, sizeof legend, "sinks %u (positions 0..%u pinned)",
               e->sinks[j], e->sinks[j] - 1);
    /* Empty cells (sinks not below the budget) are NaN: left out. */
    for (i = 0; i < e->nb; i++)
      y[i] = e->mass[i * e->np + j];
    evd_chart_series(&c, &s, x, y, e->nb);
  }
  free(x);
  free(y);
  return evd_chart_end(&c);
}
