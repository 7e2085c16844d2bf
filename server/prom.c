/* Prometheus exposition lines (prom.h). */
#include "prom.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void evd_prom_line(evd_buf_t *out, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  int n;

  va_start(ap, fmt);
  n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0)
    evd_buf_add(out, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

void evd_prom_family(evd_buf_t *out, const char *name, const char *type,
                     const char *help) {
  evd_prom_line(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void evd_prom_counter(evd_buf_t *out, const char *name, const char *help,
                      uint64_t v) {
  evd_prom_family(out, name, "counter", help);
  evd_prom_line(out, "%s %llu\n", name, (unsigned long long)v);
}

void evd_prom_gauge(evd_buf_t *out, const char *name, const char *help,
                    double v) {
  evd_prom_family(out, name, "gauge", help);
  evd_prom_line(out, "%s %.17g\n", name, v);
}

void evd_prom_histogram(evd_buf_t *out, const char *name, const char *labels,
                        const evd_histogram_t *h) {
  uint64_t cum = 0;
  int i;

  for (i = 0; i < EVD_HISTOGRAM_NBUCKETS; i++) {
    cum += h->bucket[i];
    evd_prom_line(out, "%s_bucket{%sle=\"%g\"} %llu\n", name, labels,
                  evd_histogram_bounds[i], (unsigned long long)cum);
  }
  cum += h->bucket[EVD_HISTOGRAM_NBUCKETS];
  evd_prom_line(out, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels,
                (unsigned long long)cum);
  if (labels[0] != '\0') {
    char l[64];
    snprintf(l, sizeof l, "%s", labels);
    l[strlen(l) - 1] = '\0'; /* drop the trailing comma */
    evd_prom_line(out, "%s_sum{%s} %.9f\n%s_count{%s} %llu\n", name, l,
                  h->sum, name, l, (unsigned long long)h->count);
  } else {
    evd_prom_line(out, "%s_sum %.9f\n%s_count %llu\n", name, h->sum, name,
                  (unsigned long long)h->count);
  }
}
