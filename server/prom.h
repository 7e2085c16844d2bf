/* The Prometheus text exposition format (0.0.4), line by line: a family's
 * HELP and TYPE, samples, counters, gauges and histograms, appended to a
 * buffer. The daemon's GET /metrics (metrics.c) and evictd-llama serve's
 * are both written with it; it is built into both (Makefile:
 * evictd-common.a). */
#ifndef EVICTD_PROM_H
#define EVICTD_PROM_H

#include <stdint.h>

#include "buf.h"
#include "histogram.h"

/* Appends one printf-formatted line (or several), at most 511 bytes. */
void evd_prom_line(evd_buf_t *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "# HELP name help" and "# TYPE name type": the head of a family whose
 * samples follow (labelled ones, written with evd_prom_line). */
void evd_prom_family(evd_buf_t *out, const char *name, const char *type,
                     const char *help);

/* A family of one unlabelled sample. */
void evd_prom_counter(evd_buf_t *out, const char *name, const char *help,
                      uint64_t v);
void evd_prom_gauge(evd_buf_t *out, const char *name, const char *help,
                    double v);

/* The series of one histogram (its family's head written before):
 * cumulative buckets at evd_histogram_bounds, +Inf, sum and count.
 * `labels` is "" or `key="v",` (with the trailing comma). */
void evd_prom_histogram(evd_buf_t *out, const char *name, const char *labels,
                        const evd_histogram_t *h);

#endif
