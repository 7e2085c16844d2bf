/* An SVG line chart, written as it is drawn: a white canvas with a title,
 * a plot area with two axes (linear, log2 or log10: grid, ticks, labels),
 * series as polylines (points optionally marked, each with a tooltip),
 * vertical marker lines and a legend. evictd-eval's chart (retained
 * attention mass against budget) and evictd-llama perplexity's (trailing
 * perplexity against position) are both drawn with it; it is built into
 * both (Makefile: evictd-common.a). Text is escaped for XML here. */
#ifndef EVICTD_CHART_H
#define EVICTD_CHART_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef enum { EVD_CHART_LINEAR, EVD_CHART_LOG2, EVD_CHART_LOG10 } evd_scale_t;

typedef struct evd_chart_axis_s {
  evd_scale_t scale;
  double lo, hi;         /* the range shown: lo < hi, both > 0 on logs */
  double step;           /* linear: the tick step (0: about 8 round ones) */
  const char *label;     /* under the x axis, beside the y axis */
} evd_chart_axis_t;

typedef struct evd_chart_s {
  FILE *out;
  int width, height;     /* the canvas, pixels */
  int x0, y0, x1, y1;    /* the plot area: left, top, right, bottom */
  evd_chart_axis_t x, y;
  int legend_x, legend_y; /* where the next legend entry goes */
  int legend_step;        /* pixels between legend entries */
} evd_chart_t;

/* One line. */
typedef struct evd_series_s {
  const char *legend;    /* the legend's text */
  const char *name;      /* the tooltips' name of the line */
  const char *colour;    /* "#0072B2" */
  const char *dash;      /* stroke-dasharray, "" for a solid line */
  const char *point_x;   /* non-NULL: each point marked, with the tooltip
                            "NAME, POINT_X X: Y" ("window, budget 16:
                            0.253968") */
} evd_series_t;

/* Starts the SVG: the canvas (c's size, which the caller set with the
 * plot area, the axes and the legend's place), a <title> for viewers, the
 * title (bold) and a subtitle line (may be NULL). */
void evd_chart_begin(evd_chart_t *c, const char *title,
                     const char *subtitle);

/* The axes: grid lines, ticks and their labels (linear: multiples of the
 * step; log2: powers of two, at most 12 labelled; log10: 1, 2 and 5 times
 * the powers of ten), the frame and both axis labels. */
void evd_chart_axes(const evd_chart_t *c);

/* A dashed vertical line at x across the plot, labelled at its top. */
void evd_chart_vline(const evd_chart_t *c, double x, const char *label);

/* A line through (x[i], y[i]), i < n; points with a NaN y are left out.
 * Adds its legend entry. */
void evd_chart_series(evd_chart_t *c, const evd_series_t *s, const double *x,
                      const double *y, size_t n);

/* Text at (x, y) with extra attributes (may be ""), escaped. */
void evd_chart_text(const evd_chart_t *c, int x, int y, const char *attrs,
                    const char *text);

/* Ends the SVG and flushes. 0, or EVD_EIO when a write failed. */
int evd_chart_end(const evd_chart_t *c);

#endif
