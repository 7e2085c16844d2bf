/* What evictd-llama perplexity prints: the trailing perplexities and where
 * each policy first passes twice full attention's, the table, the JSON and
 * the SVG of trailing perplexity against position (hand-written SVG). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "ppl.h"

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

/* A number, or null for NAN. */
static void json_num(FILE *f, const char *key, double v) {
  if (isnan(v))
    fprintf(f, "\"%s\":null,", key);
  else
    fprintf(f, "\"%s\":%.17g,", key, v);
}

/* A JSON string (the file and model names). */
static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

int ppl_json(const ppl_run_t *r, FILE *f) {
  fputs("{\"model\":", f);
  json_str(f, r->model);
  fputs(",\"file\":", f);
  json_str(f, r->file);
  fprintf(f, ",\"positions\":\"%s\",\"tokens\":%u,\"trail\":%u,"
          "\"n_ctx_train\":%d,\"seconds\":%.3f,\"policies\":[",
          posmap_name(r->positions), r->n_tokens, trail_w(r),
          r->n_ctx_train, r->seconds);
  for (uint32_t k = 0; k < r->n_pol; k++) {
    const ppl_policy_t *p = &r->pol[k];
    fprintf(f, "%s{\"policy\":\"%s\",", k ? "," : "", p->name);
    if (p->budget)
      fprintf(f, "\"budget\":%u,\"sinks\":%u,", p->budget, p->sinks);
    else
      fputs("\"budget\":null,\"sinks\":null,", f);
    fprintf(f, "\"perplexity\":%.17g,\"mean_nll\":%.17g,", exp(p->mean),
            p->mean);
    json_num(f, "perplexity_within_train", p->ppl_in);
    json_num(f, "perplexity_beyond_train", p->ppl_beyond);
    if (p->over >= 0)
      fprintf(f, "\"over_2x_at\":%lld,", (long long)p->over);
    else
      fputs("\"over_2x_at\":null,", f);
    fputs("\"nll\":[", f);
    for (uint32_t i = 0; i < r->n_tokens; i++)
      fprintf(f, "%s%.17g", i ? "," : "", p->nll[i]);
    fputs("]}", f);
  }
  fputs("]}\n", f);
  return ferror(f) ? -1 : 0;
}

/* ---- the SVG --------------------------------------------------------- */

enum { W = 820, H = 440, L = 70, R = 20, T = 50, B = 60 };

static void xml_str(FILE *f, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '&': fputs("&amp;", f); break;
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '"': fputs("&quot;", f); break;
    default: fputc(*s, f);
    }
  }
}

typedef struct axes_s {
  double x0, x1, ly0, ly1; /* positions, log10 perplexity */
} axes_t;

static double sx(const axes_t *a, double x) {
  return L + (x - a->x0) / (a->x1 - a->x0) * (W - L - R);
}

static double sy(const axes_t *a, double ppl) {
  return H - B - (log10(ppl) - a->ly0) / (a->ly1 - a->ly0) * (H - T - B);
}

static void line(FILE *f, const ppl_run_t *r, const axes_t *a,
                 const ppl_policy_t *p, const char *color, uint32_t w) {
  uint32_t n = r->n_tokens, every = (n - w + 1) / 800 + 1;
  fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
          "points=\"", color);
  for (uint32_t i = w - 1; i < n; i += every)
    fprintf(f, "%.1f,%.1f ", sx(a, i + 1.0), sy(a, p->trail[i]));
  fputs("\"/>\n", f);
}

int ppl_svg(const ppl_run_t *r, uint32_t budget, FILE *f) {
  const ppl_policy_t *sel[3] = {&r->pol[0], NULL, NULL};
  for (uint32_t b = 0; b < r->n_budgets; b++)
    if (r->budgets[b] == budget) {
      sel[1] = &r->pol[1 + 2 * b];
      sel[2] = &r->pol[2 + 2 * b];
    }
  if (sel[1] == NULL)
    return -1;
  static const char *colors[3] = {"#222222", "#d62728", "#1f77b4"};
  uint32_t w = trail_w(r), n = r->n_tokens;
  double lo = INFINITY, hi = -INFINITY;
  for (int k = 0; k < 3; k++)
    for (uint32_t i = w - 1; i < n; i++) {
      lo = fmin(lo, sel[k]->trail[i]);
      hi = fmax(hi, sel[k]->trail[i]);
    }
  axes_t a = {w, n > w ? n : w + 1, floor(log10(lo) * 4) / 4,
              ceil(log10(hi) * 4) / 4};
  if (a.ly1 - a.ly0 < 0.25)
    a.ly1 = a.ly0 + 0.25;
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
          "height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
          "font-size=\"12\">\n<rect width=\"%d\" height=\"%d\" "
          "fill=\"white\"/>\n", W, H, W, H, W, H);
  fputs("<text x=\"70\" y=\"20\" font-size=\"14\">Perplexity over the "
        "last ", f);
  fprintf(f, "%u tokens against position, budget %u, positions %s</text>\n",
          w, budget, posmap_name(r->positions));
  fputs("<text x=\"70\" y=\"38\" fill=\"#555555\">", f);
  xml_str(f, r->model);
  fputs(" on ", f);
  xml_str(f, r->file);
  fputs("</text>\n", f);
  /* Axes, ticks at 1, 2 and 5 times each power of ten in range. */
  fprintf(f, "<g stroke=\"#999999\"><line x1=\"%d\" y1=\"%d\" x2=\"%d\" "
          "y2=\"%d\"/><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/></g>\n",
          L, H - B, W - R, H - B, L, T, L, H - B);
  for (double e = floor(a.ly0); e <= a.ly1; e++)
    for (int m = 1; m <= 5; m += (m == 1 ? 1 : 3)) {
      double v = m * pow(10, e);
      if (log10(v) < a.ly0 - 1e-9 || log10(v) > a.ly1 + 1e-9)
        continue;
      fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
              "stroke=\"#eeeeee\"/><text x=\"%d\" y=\"%.1f\" "
              "text-anchor=\"end\">%g</text>\n", L, sy(&a, v), W - R,
              sy(&a, v), L - 6, sy(&a, v) + 4, v);
    }
  for (int k = 0; k <= 8; k++) {
    double x = a.x0 + (a.x1 - a.x0) * k / 8;
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.0f"
            "</text>\n", sx(&a, x), H - B + 16, x);
  }
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">position "
          "(tokens)</text>\n", (L + W - R) / 2, H - B + 36);
  fprintf(f, "<text transform=\"translate(16,%d) rotate(-90)\" "
          "text-anchor=\"middle\">perplexity (log scale)</text>\n",
          (T + H - B) / 2);
  if (r->n_ctx_train > 0 && r->n_ctx_train > a.x0 && r->n_ctx_train < a.x1)
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" "
            "stroke=\"#999999\" stroke-dasharray=\"4 4\"/><text x=\"%.1f\" "
            "y=\"%d\" fill=\"#555555\">training context %d</text>\n",
            sx(&a, r->n_ctx_train), T, sx(&a, r->n_ctx_train), H - B,
            sx(&a, r->n_ctx_train) + 4, T + 12, r->n_ctx_train);
  for (int k = 0; k < 3; k++)
    line(f, r, &a, sel[k], colors[k], w);
  for (int k = 0; k < 3; k++) {
    char label[64];
    if (k == 0)
      snprintf(label, sizeof(label), "full attention (%.3f)",
               exp(sel[0]->mean));
    else
      snprintf(label, sizeof(label), "%s, sinks %u (%.3f)", sel[k]->name,
               sel[k]->sinks, exp(sel[k]->mean));
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
            "stroke-width=\"2\"/><text x=\"%d\" y=\"%d\">%s</text>\n",
            W - R - 230, T + 8 + 16 * k, W - R - 205, T + 8 + 16 * k,
            colors[k], W - R - 200, T + 12 + 16 * k, label);
  }
  fputs("</svg>\n", f);
  return ferror(f) ? -1 : 0;
}
