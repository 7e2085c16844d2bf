/* The chart of evictd-eval: retained attention mass against budget on a log2
 * axis, one line per policy, as a self-contained SVG that reads on its own
 * (title naming the trace and T, labelled axes, ticks, a legend). */
#include "eval.h"

#include <math.h>
#include <string.h>

#include "error.h"

/* Okabe-Ito colours, told apart with colour-blindness too, and a dash pattern
 * per line as well, so lines that coincide (policies that tie) both show. */
static const char *const colours[] = {"#0072B2", "#D55E00", "#009E73",
                                      "#CC79A7", "#E69F00", "#56B4E9",
                                      "#000000", "#F0E442"};
static const char *const dashes[] = {"", "6,4", "2,3", "8,3,2,3"};
#define NCOLOURS (sizeof colours / sizeof colours[0])
#define NDASHES (sizeof dashes / sizeof dashes[0])

/* Canvas and plot area, in pixels. */
enum { W = 920, HGT = 500, X0 = 80, X1 = 600, Y0 = 80, Y1 = 420 };

static void xml_str(FILE *out, const char *s) {
  for (; *s != '\0'; s++) {
    switch (*s) {
    case '&': fputs("&amp;", out); break;
    case '<': fputs("&lt;", out); break;
    case '>': fputs("&gt;", out); break;
    case '"': fputs("&quot;", out); break;
    case '\'': fputs("&apos;", out); break;
    default:
      /* Control characters are not allowed in XML 1.0. */
      fputc((unsigned char)*s < 0x20 ? '?' : *s, out);
    }
  }
}

typedef struct {
  double lx0, lx1, y0; /* log2 range of x; lowest y shown (top is 1) */
} scale_t;

static double px(const scale_t *s, double budget) {
  return X0 + (log2(budget) - s->lx0) / (s->lx1 - s->lx0) * (X1 - X0);
}

static double py(const scale_t *s, double v) {
  return Y1 - (v - s->y0) / (1.0 - s->y0) * (Y1 - Y0);
}

/* x spans whole powers of two around the budgets, so that its ticks (the
 * powers of two) always include both ends; y spans 0..1, or a tenth-aligned
 * band up to 1 when every value is above one half, where the lines would
 * otherwise crowd together at the top. */
static scale_t pick_scale(const evd_eval_t *e) {
  scale_t s;
  double lo = 1.0;
  uint32_t k;

  s.lx0 = floor(log2((double)e->budgets[0]));
  s.lx1 = ceil(log2((double)e->budgets[e->nb - 1]));
  if (s.lx1 <= s.lx0)
    s.lx1 = s.lx0 + 1;
  for (k = 0; k < e->nb * e->np; k++)
    if (!isnan(e->mass[k]) && e->mass[k] < lo)
      lo = e->mass[k];
  s.y0 = lo >= 0.5 ? floor(lo * 10 - 1e-9) / 10 : 0.0;
  if (s.y0 > 0.9)
    s.y0 = 0.9;
  if (s.y0 < 0)
    s.y0 = 0;
  return s;
}

static void axes(FILE *out, const evd_eval_t *e, const scale_t *s) {
  int step = 1, k, i;
  double v;

  /* Powers of two, every `step`-th one so that at most 12 are labelled. */
  while ((s->lx1 - s->lx0) / step > 11)
    step *= 2;
  fprintf(out, "<g font-size=\"12\" fill=\"#333\">\n");
  for (k = (int)s->lx0; k <= (int)s->lx1; k += step) {
    double x = X0 + (k - s->lx0) / (s->lx1 - s->lx0) * (X1 - X0);
    fprintf(out,
            "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" "
            "stroke=\"#e4e4e4\"/>\n<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" "
            "y2=\"%d\" stroke=\"#333\"/>\n<text x=\"%.1f\" y=\"%d\" "
            "text-anchor=\"middle\">%.0f</text>\n",
            x, Y0, x, Y1, x, Y1, x, Y1 + 5, x, Y1 + 20, ldexp(1.0, k));
  }
  for (i = 0; (v = s->y0 + i * 0.1) <= 1.0 + 1e-9; i++) {
    double y = py(s, v);
    fprintf(out,
            "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
            "stroke=\"#e4e4e4\"/>\n<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" "
            "y2=\"%.1f\" stroke=\"#333\"/>\n<text x=\"%d\" y=\"%.1f\" "
            "text-anchor=\"end\">%.1f</text>\n",
            X0, y, X1, y, X0 - 5, y, X0, y, X0 - 8, y + 4, v);
  }
  fprintf(out, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
               "fill=\"none\" stroke=\"#333\"/>\n", X0, Y0, X1 - X0, Y1 - Y0);
  /* Budgets at or beyond T keep everything: mark where that starts. */
  if (log2((double)e->T) >= s->lx0 && log2((double)e->T) <= s->lx1) {
    double x = px(s, (double)e->T);
    fprintf(out,
            "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" "
            "stroke=\"#888\" stroke-dasharray=\"3,3\"/>\n<text x=\"%.1f\" "
            "y=\"%d\" text-anchor=\"end\" fill=\"#666\">budget = T = "
            "%llu</text>\n",
            x, Y0, x, Y1, x - 4, Y1 - 8, (unsigned long long)e->T);
  }
  fprintf(out,
          "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"13\">"
          "KV-cache budget (positions kept per sequence, log2 scale)</text>\n"
          "<text transform=\"translate(%d %d) rotate(-90)\" "
          "text-anchor=\"middle\" font-size=\"13\">retained attention mass "
          "(fraction of the row, mean over t)</text>\n</g>\n",
          (X0 + X1) / 2, Y1 + 45, 24, (Y0 + Y1) / 2);
}

static void series(FILE *out, const evd_eval_t *e, const scale_t *s,
                   uint32_t j) {
  const char *colour = colours[j % NCOLOURS];
  const char *dash = dashes[j % NDASHES];
  char name[32];
  uint32_t i;
  int first;

  evd_eval_policy_name(e->sinks[j], name, sizeof name);
  fprintf(out, "<g stroke=\"%s\" fill=\"%s\">\n<polyline fill=\"none\" "
               "stroke-width=\"2\" stroke-dasharray=\"%s\" points=\"",
          colour, colour, dash);
  /* Empty cells (sinks not below the budget) are left out. */
  for (i = 0, first = 1; i < e->nb; i++)
    if (!isnan(e->mass[i * e->np + j])) {
      fprintf(out, "%s%.1f,%.1f", first ? "" : " ", px(s, e->budgets[i]),
              py(s, e->mass[i * e->np + j]));
      first = 0;
    }
  fputs("\"/>\n", out);
  for (i = 0; i < e->nb; i++)
    if (!isnan(e->mass[i * e->np + j]))
      fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\"><title>%s, "
                 "budget %u: %.6f</title></circle>\n",
            px(s, e->budgets[i]), py(s, e->mass[i * e->np + j]), name,
            e->budgets[i], e->mass[i * e->np + j]);
  /* The legend entry, right of the plot. */
  fprintf(out, "<line x1=\"%d\" y1=\"%u\" x2=\"%d\" y2=\"%u\" "
               "stroke-width=\"2\" stroke-dasharray=\"%s\"/>\n<circle "
               "cx=\"%d\" cy=\"%u\" r=\"3.5\"/>\n<text x=\"%d\" y=\"%u\" "
               "stroke=\"none\" fill=\"#222\" font-size=\"13\">",
          X1 + 20, Y0 + 30 + 22 * j, X1 + 50, Y0 + 30 + 22 * j, dash, X1 + 35,
          Y0 + 30 + 22 * j, X1 + 58, Y0 + 34 + 22 * j);
  if (e->sinks[j] == 0)
    fputs("window (no sinks)", out);
  else if (e->sinks[j] == 1)
    fputs("sinks 1 (position 0 pinned)", out);
  else
    fprintf(out, "sinks %u (positions 0..%u pinned)", e->sinks[j],
            e->sinks[j] - 1);
  fputs("</text>\n</g>\n", out);
}

int evd_eval_svg(FILE *out, const evd_eval_t *e) {
  const char *base = strrchr(e->trace, '/');
  scale_t s = pick_scale(e);
  uint32_t j;

  base = base != NULL && base[1] != '\0' ? base + 1 : e->trace;
  fprintf(out,
          "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg "
          "xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "viewBox=\"0 0 %d %d\" font-family=\"Helvetica, Arial, "
          "sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" "
          "fill=\"white\"/>\n<title>Retained attention mass vs KV-cache "
          "budget: ",
          W, HGT, W, HGT);
  xml_str(out, base);
  fprintf(out, "</title>\n<text x=\"%d\" y=\"32\" font-size=\"18\" "
               "font-weight=\"bold\">Retained attention mass vs KV-cache "
               "budget (evictd sliding window)</text>\n<text x=\"%d\" "
               "y=\"56\" font-size=\"13\" fill=\"#333\">trace ",
          X0 - 60, X0 - 60);
  xml_str(out, base);
  fprintf(out, ": T = %llu positions, H = %llu head%s (%s); mean over t = "
               "1..%llu</text>\n",
          (unsigned long long)e->T, (unsigned long long)e->H,
          e->H == 1 ? "" : "s",
          strcmp(e->dtype, "<f2") == 0 ? "float16" : "float32",
          (unsigned long long)(e->T - 1));
  axes(out, e, &s);
  fprintf(out, "<text x=\"%d\" y=\"%d\" font-size=\"13\" "
               "font-weight=\"bold\">policy</text>\n", X1 + 20, Y0 + 8);
  for (j = 0; j < e->np; j++)
    series(out, e, &s, j);
  fputs("</svg>\n", out);
  return fflush(out) == 0 && !ferror(out) ? 0 : EVD_EIO;
}
