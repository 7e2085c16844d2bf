/* SVG line charts (chart.h): scales, ticks, series and legend. */
#include "chart.h"

#include <math.h>
#include <string.h>

#include "error.h"

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

/* Where v falls on an axis, from 0 (lo) to 1 (hi). */
static double frac(const evd_chart_axis_t *a, double v) {
  switch (a->scale) {
  case EVD_CHART_LOG2: return (log2(v) - log2(a->lo)) /
                              (log2(a->hi) - log2(a->lo));
  case EVD_CHART_LOG10: return (log10(v) - log10(a->lo)) /
                               (log10(a->hi) - log10(a->lo));
  case EVD_CHART_LINEAR: break;
  }
  return (v - a->lo) / (a->hi - a->lo);
}

static double px(const evd_chart_t *c, double x) {
  return c->x0 + frac(&c->x, x) * (c->x1 - c->x0);
}

static double py(const evd_chart_t *c, double y) {
  return c->y1 - frac(&c->y, y) * (c->y1 - c->y0);
}

void evd_chart_text(const evd_chart_t *c, int x, int y, const char *attrs,
                    const char *text) {
  fprintf(c->out, "<text x=\"%d\" y=\"%d\" %s>", x, y, attrs);
  xml_str(c->out, text);
  fputs("</text>\n", c->out);
}

void evd_chart_begin(evd_chart_t *c, const char *title,
                     const char *subtitle) {
  fprintf(c->out,
          "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg "
          "xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "viewBox=\"0 0 %d %d\" font-family=\"Helvetica, Arial, "
          "sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" "
          "fill=\"white\"/>\n<title>",
          c->width, c->height, c->width, c->height);
  xml_str(c->out, title);
  fputs("</title>\n", c->out);
  evd_chart_text(c, 20, 32, "font-size=\"18\" font-weight=\"bold\"", title);
  if (subtitle != NULL)
    evd_chart_text(c, 20, 56, "font-size=\"13\" fill=\"#333\"", subtitle);
}

/* The ticks of an axis into v (at most max), ascending. */
static size_t ticks(const evd_chart_axis_t *a, double *v, size_t max) {
  size_t n = 0;
  if (a->scale == EVD_CHART_LOG2) {
    int k0 = (int)ceil(log2(a->lo) - 1e-9), k1 = (int)floor(log2(a->hi) +
                                                            1e-9), step = 1;
    /* Every `step`-th power of two, so that at most 12 are labelled. */
    while ((k1 - k0) / step > 11)
      step *= 2;
    for (int k = k0; k <= k1 && n < max; k += step)
      v[n++] = ldexp(1.0, k);
  } else if (a->scale == EVD_CHART_LOG10) {
    for (double e = floor(log10(a->lo)); e <= ceil(log10(a->hi)); e++)
      for (int m = 1; m <= 5; m += m == 1 ? 1 : 3) {
        double t = m * pow(10, e);
        if (t >= a->lo * (1 - 1e-9) && t <= a->hi * (1 + 1e-9) && n < max)
          v[n++] = t;
      }
  } else {
    double step = a->step;
    if (step <= 0) { /* 1, 2 or 5 times a power of ten: about 8 ticks */
      double raw = (a->hi - a->lo) / 8, p = pow(10, floor(log10(raw)));
      step = raw <= p ? p : raw <= 2 * p ? 2 * p : raw <= 5 * p ? 5 * p
                                                                : 10 * p;
    }
    for (double t = ceil(a->lo / step - 1e-9) * step;
         t <= a->hi + step * 1e-9 && n < max; t += step)
      v[n++] = fabs(t) < step * 1e-9 ? 0 : t;
  }
  return n;
}

/* A tick's label: whole numbers as such, else as many decimals as the
 * step needs. */
static void tick_label(const evd_chart_axis_t *a, double t, char *buf,
                       size_t len) {
  int dec = 0;
  if (a->scale == EVD_CHART_LINEAR && a->step > 0 && a->step < 1)
    dec = (int)ceil(-log10(a->step) - 1e-9);
  if (a->scale == EVD_CHART_LOG10 || (a->scale == EVD_CHART_LINEAR &&
                                      a->step <= 0))
    snprintf(buf, len, "%g", t);
  else
    snprintf(buf, len, "%.*f", dec, t);
}

/* One tick of the x axis (on_x) or the y axis at value v: its grid line
 * across the plot, its mark and its label. */
static void tick(const evd_chart_t *c, bool on_x, double v) {
  const evd_chart_axis_t *a = on_x ? &c->x : &c->y;
  double x = on_x ? px(c, v) : c->x0, y = on_x ? c->y1 : py(c, v);
  double gx = on_x ? x : c->x1, gy = on_x ? c->y0 : y;
  char label[32];
  tick_label(a, v, label, sizeof(label));
  fprintf(c->out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
          "stroke=\"#e4e4e4\"/>\n<line x1=\"%.1f\" y1=\"%.1f\" "
          "x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n<text x=\"%.1f\" "
          "y=\"%.1f\" text-anchor=\"%s\">%s</text>\n", x, y, gx, gy, x, y,
          on_x ? x : x - 5, on_x ? y + 5 : y, on_x ? x : x - 8,
          on_x ? y + 20 : y + 4, on_x ? "middle" : "end", label);
}

void evd_chart_axes(const evd_chart_t *c) {
  double v[64];
  fputs("<g font-size=\"12\" fill=\"#333\">\n", c->out);
  for (int axis = 0; axis < 2; axis++) {
    size_t n = ticks(axis == 0 ? &c->x : &c->y, v, 64);
    for (size_t i = 0; i < n; i++)
      tick(c, axis == 0, v[i]);
  }
  fprintf(c->out, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
          "fill=\"none\" stroke=\"#333\"/>\n", c->x0, c->y0, c->x1 - c->x0,
          c->y1 - c->y0);
  fprintf(c->out, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" "
          "font-size=\"13\">", (c->x0 + c->x1) / 2, c->y1 + 45);
  xml_str(c->out, c->x.label);
  fprintf(c->out, "</text>\n<text transform=\"translate(%d %d) "
          "rotate(-90)\" text-anchor=\"middle\" font-size=\"13\">", 24,
          (c->y0 + c->y1) / 2);
  xml_str(c->out, c->y.label);
  fputs("</text>\n</g>\n", c->out);
}

void evd_chart_vline(const evd_chart_t *c, double x, const char *label) {
  if (!(x >= c->x.lo && x <= c->x.hi))
    return;
  fprintf(c->out, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" "
          "stroke=\"#888\" stroke-dasharray=\"3,3\"/>\n", px(c, x), c->y0,
          px(c, x), c->y1);
  evd_chart_text(c, (int)px(c, x) + 4, c->y0 + 14,
                 "font-size=\"12\" fill=\"#666\"", label);
}

void evd_chart_series(evd_chart_t *c, const evd_series_t *s, const double *x,
                      const double *y, size_t n) {
  FILE *out = c->out;
  bool first = true;
  fprintf(out, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
          "stroke-dasharray=\"%s\" points=\"", s->colour, s->dash);
  for (size_t i = 0; i < n; i++)
    if (!isnan(y[i])) {
      fprintf(out, "%s%.1f,%.1f", first ? "" : " ", px(c, x[i]),
              py(c, y[i]));
      first = false;
    }
  fputs("\"/>\n", out);
  for (size_t i = 0; s->point_x != NULL && i < n; i++)
    if (!isnan(y[i])) {
      fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" "
              "fill=\"%s\"><title>", px(c, x[i]), py(c, y[i]), s->colour);
      xml_str(out, s->name);
      fprintf(out, ", %s %g: %.6f</title></circle>\n", s->point_x, x[i],
              y[i]);
    }
  /* The legend entry: a short stroke and the text. */
  int lx = c->legend_x, ly = c->legend_y;
  fprintf(out, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" "
          "stroke=\"%s\" stroke-width=\"2\" stroke-dasharray=\"%s\"/>\n",
          lx, ly, lx + 30, ly, s->colour, s->dash);
  evd_chart_text(c, lx + 38, ly + 4, "fill=\"#222\" font-size=\"13\"",
                 s->legend);
  c->legend_y += c->legend_step;
}

int evd_chart_end(const evd_chart_t *c) {
  fputs("</svg>\n", c->out);
  return fflush(c->out) == 0 && !ferror(c->out) ? 0 : EVD_EIO;
}
