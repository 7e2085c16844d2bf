/* What evictd-llama perplexity prints: the trailing perplexities and where
 * each policy first passes twice full attention's, the table, the JSON
 * (jansson) and the SVG of trailing perplexity against position (the
 * daemon's chart writer, chart.h). */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chart.h"
#include "perplexity/perplexity.h"

/* The trailing window actually used: W, or the whole text when shorter. */
static uint32_t trail_w(const ppl_run_t *r) {
  return r->trail_w < r->n_tokens ? r->trail_w : r->n_tokens;
}

/* trail[i] = exp(mean of nll[i-W+1..i]) for i >= W - 1 (token i is the
 * one at position i + 1); `over` is the first position i + 1 at which a
 * windowed policy's trailing perplexity is above twice full attention's
 * over the same W tokens. */
void ppl_summarize(ppl_run_t *r) {
  uint32_t w = trail_w(r), n = r->n_tokens;
  for (uint32_t k = 0; k < r->n_pol; k++) {
    ppl_policy_t *p = &r->pol[k];
    double sum = 0, all = 0;
    for (uint32_t i = 0; i < n; i++) {
      sum += p->nll[i];
      all += p->nll[i];
      if (i >= w)
        sum -= p->nll[i - w];
      if (i + 1 >= w)
        p->trail[i] = exp(sum / w);
    }
    p->mean = all / n;
    /* Token i is at position i + 1: positions 1..n_ctx_train - 1 fit in
     * the training context with BOS at 0. */
    double in = 0, out = 0;
    uint32_t n_in = 0;
    for (uint32_t i = 0; i < n; i++) {
      bool within = r->n_ctx_train <= 0 || i + 1 < (uint32_t)r->n_ctx_train;
      *(within ? &in : &out) += p->nll[i];
      n_in += within;
    }
    p->ppl_in = n_in ? exp(in / n_in) : NAN;
    p->ppl_beyond = r->n_ctx_train > 0 && n > n_in ? exp(out / (n - n_in))
                                                   : NAN;
  }
  for (uint32_t k = 0; k < r->n_pol; k++) {
    ppl_policy_t *p = &r->pol[k];
    p->over = -1;
    for (uint32_t i = w - 1; k > 0 && i < n && p->over < 0; i++)
      if (p->trail[i] > 2 * r->pol[0].trail[i])
        p->over = (int64_t)i + 1;
  }
}

static void cell_over(char *buf, size_t len, int64_t over) {
  if (over < 0)
    snprintf(buf, len, "never");
  else
    snprintf(buf, len, "%lld", (long long)over);
}

void ppl_table(const ppl_run_t *r, FILE *f) {
  fprintf(f, "%s: %u tokens scored, positions %s, trailing window %u, "
          "%.1f s\n", r->file, r->n_tokens, posmap_name(r->positions),
          trail_w(r), r->seconds);
  fprintf(f, "full attention: perplexity %.4f\n\n", exp(r->pol[0].mean));
  fprintf(f, "| budget | window | sinks (%u) | window > 2x full at | "
          "sinks > 2x full at |\n", r->sinks);
  fprintf(f, "|---|---|---|---|---|\n");
  for (uint32_t b = 0; b < r->n_budgets; b++) {
    const ppl_policy_t *w = &r->pol[1 + 2 * b], *s = &r->pol[2 + 2 * b];
    char ow[32], os[32];
    cell_over(ow, sizeof(ow), w->over);
    cell_over(os, sizeof(os), s->over);
    fprintf(f, "| %u | %.4f | %.4f | %s | %s |\n", w->budget, exp(w->mean),
            exp(s->mean), ow, os);
  }
  if (isnan(r->pol[0].ppl_beyond))
    return;
  fprintf(f, "\nperplexity within / beyond the training context (positions "
          "1..%d / %d..%u):\n\n| policy | within | beyond |\n|---|---|---|\n"
          "| full attention | %.4f | %.4f |\n", r->n_ctx_train - 1,
          r->n_ctx_train, r->n_tokens, r->pol[0].ppl_in,
          r->pol[0].ppl_beyond);
  for (uint32_t k = 1; k < r->n_pol; k++)
    fprintf(f, "| %s %u | %.4f | %.4f |\n", r->pol[k].name,
            r->pol[k].budget, r->pol[k].ppl_in, r->pol[k].ppl_beyond);
}

/* A number, or null for NAN (which JSON has not). */
static json_t *num(double v) { return isnan(v) ? json_null() : json_real(v); }

static json_t *policy(const ppl_run_t *r, const ppl_policy_t *p) {
  json_t *nll = json_array();
  for (uint32_t i = 0; nll != NULL && i < r->n_tokens; i++)
    json_array_append_new(nll, json_real(p->nll[i]));
  return json_pack("{s:s,s:o,s:o,s:f,s:f,s:o,s:o,s:o,s:o}", "policy",
                   p->name, "budget",
                   p->budget ? json_integer(p->budget) : json_null(),
                   "sinks", p->budget ? json_integer(p->sinks) : json_null(),
                   "perplexity", exp(p->mean), "mean_nll", p->mean,
                   "perplexity_within_train", num(p->ppl_in),
                   "perplexity_beyond_train", num(p->ppl_beyond),
                   "over_2x_at",
                   p->over >= 0 ? json_integer(p->over) : json_null(), "nll",
                   nll);
}

int ppl_json(const ppl_run_t *r, FILE *f) {
  json_t *pols = json_array();
  for (uint32_t k = 0; pols != NULL && k < r->n_pol; k++)
    json_array_append_new(pols, policy(r, &r->pol[k]));
  json_t *j = json_pack("{s:s,s:s,s:s,s:i,s:i,s:i,s:f,s:o}", "model",
                        r->model, "file", r->file, "positions",
                        posmap_name(r->positions), "tokens", (int)r->n_tokens,
                        "trail", (int)trail_w(r), "n_ctx_train",
                        r->n_ctx_train, "seconds", r->seconds, "policies",
                        pols);
  int rc = j != NULL && json_dumpf(j, f, JSON_COMPACT | JSON_REAL_PRECISION(17))
           == 0 ? 0 : -1;
  json_decref(j);
  fputc('\n', f);
  return rc == 0 && !ferror(f) ? 0 : -1;
}

/* ---- the SVG ------------------------------------------------------------ */

int ppl_svg(const ppl_run_t *r, uint32_t budget, FILE *f) {
  const ppl_policy_t *sel[3] = {&r->pol[0], NULL, NULL};
  for (uint32_t b = 0; b < r->n_budgets; b++)
    if (r->budgets[b] == budget) {
      sel[1] = &r->pol[1 + 2 * b];
      sel[2] = &r->pol[2 + 2 * b];
    }
  if (sel[1] == NULL)
    return -1;
  static const char *colours[3] = {"#222222", "#d62728", "#1f77b4"};
  uint32_t w = trail_w(r), n = r->n_tokens;
  /* At most about 800 points a line, every `every`-th position. */
  uint32_t every = (n - w + 1) / 800 + 1, m = (n - w) / every + 1;
  double lo = INFINITY, hi = -INFINITY;
  double *x = malloc(m * sizeof(*x)), *y = malloc(m * sizeof(*y));
  if (x == NULL || y == NULL) {
    free(x);
    free(y);
    return -1;
  }
  for (int k = 0; k < 3; k++)
    for (uint32_t i = w - 1; i < n; i++) {
      lo = fmin(lo, sel[k]->trail[i]);
      hi = fmax(hi, sel[k]->trail[i]);
    }
  evd_chart_t c = {.out = f, .width = 820, .height = 460, .x0 = 80,
                   .y0 = 80, .x1 = 800, .y1 = 380, .legend_x = 560,
                   .legend_y = 96, .legend_step = 18};
  c.x = (evd_chart_axis_t){EVD_CHART_LINEAR, w, n > w ? n : w + 1, 0,
                           "position (tokens)"};
  c.y = (evd_chart_axis_t){EVD_CHART_LOG10, pow(10, floor(log10(lo) * 4) / 4),
                           pow(10, ceil(log10(hi) * 4) / 4), 0,
                           "perplexity (log scale)"};
  if (c.y.hi / c.y.lo < pow(10, 0.25))
    c.y.hi = c.y.lo * pow(10, 0.25);
  char title[160], sub[1024];
  snprintf(title, sizeof(title), "Perplexity over the last %u tokens "
           "against position, budget %u, positions %s", w, budget,
           posmap_name(r->positions));
  snprintf(sub, sizeof(sub), "%s on %s", r->model, r->file);
  evd_chart_begin(&c, title, sub);
  evd_chart_axes(&c);
  if (r->n_ctx_train > 0) {
    char label[64];
    snprintf(label, sizeof(label), "training context %d", r->n_ctx_train);
    evd_chart_vline(&c, r->n_ctx_train, label);
  }
  for (int k = 0; k < 3; k++) {
    char legend[64];
    if (k == 0)
      snprintf(legend, sizeof(legend), "full attention (%.3f)",
               exp(sel[0]->mean));
    else
      snprintf(legend, sizeof(legend), "%s, sinks %u (%.3f)", sel[k]->name,
               sel[k]->sinks, exp(sel[k]->mean));
    for (uint32_t j = 0; j < m; j++) {
      x[j] = w + (double)j * every;
      y[j] = sel[k]->trail[w - 1 + j * every];
    }
    evd_series_t s = {legend, sel[k]->name, colours[k], "", NULL};
    evd_chart_series(&c, &s, x, y, m);
  }
  free(x);
  free(y);
  return evd_chart_end(&c) == 0 ? 0 : -1;
}
