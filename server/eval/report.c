/* The text reports of evictd-eval: the table and its JSON twin. */
#include "eval.h"

#include <math.h>
#include <string.h>

#include "buf.h"
#include "error.h"

/* Writes s as a JSON string with the daemon's writer (buf.c: control
 * characters escaped, bytes that are not UTF-8 as U+FFFD). */
static int json_str(FILE *out, const char *s) {
  evd_buf_t b;
  int rc;

  evd_buf_init(&b);
  evd_buf_json_str(&b, s, strlen(s));
  rc = b.oom ? EVD_ENOMEM : 0;
  if (rc == 0)
    fwrite(b.data, 1, b.len, out);
  evd_buf_free(&b);
  return rc;
}

static int done(FILE *out) {
  return fflush(out) == 0 && !ferror(out) ? 0 : EVD_EIO;
}

int evd_eval_table(FILE *out, const evd_eval_t *e) {
  uint32_t i, j;
  char name[32];

  fprintf(out,
          "%s: T = %llu, H = %llu (%s); retained attention mass, mean over "
          "t = 1..%llu\n",
          e->trace, (unsigned long long)e->T, (unsigned long long)e->H,
          e->dtype, (unsigned long long)(e->T - 1));
  fprintf(out, "%8s", "budget");
  for (j = 0; j < e->np; j++) {
    evd_eval_policy_name(e->sinks[j], name, sizeof name);
    fprintf(out, "  %10s", name);
  }
  fputc('\n', out);
  for (i = 0; i < e->nb; i++) {
    fprintf(out, "%8u", e->budgets[i]);
    for (j = 0; j < e->np; j++)
      if (isnan(e->mass[i * e->np + j]))
        fprintf(out, "  %10s", "-");
      else
        fprintf(out, "  %10.6f", e->mass[i * e->np + j]);
    fputc('\n', out);
  }
  for (i = 0; i < e->nb * e->np; i++)
    if (isnan(e->mass[i])) {
      fputs("(-: no such window, the sinks are not below the budget)\n",
            out);
      break;
    }
  return done(out);
}

int evd_eval_json(FILE *out, const evd_eval_t *e) {
  uint32_t i, j;
  char name[32];

  fputs("{\"trace\":", out);
  if (json_str(out, e->trace) != 0)
    return EVD_ENOMEM;
  fprintf(out, ",\"T\":%llu,\"H\":%llu,\"shape\":[",
          (unsigned long long)e->T, (unsigned long long)e->H);
  if (e->ndim == 3)
    fprintf(out, "%llu,", (unsigned long long)e->H);
  fprintf(out, "%llu,%llu],\"dtype\":\"%s\",\"npy_version\":\"%d.0\"",
          (unsigned long long)e->T, (unsigned long long)e->T, e->dtype,
          e->version);
  fputs(",\"budgets\":[", out);
  for (i = 0; i < e->nb; i++)
    fprintf(out, "%s%u", i ? "," : "", e->budgets[i]);
  fputs("],\"policies\":[", out);
  for (j = 0; j < e->np; j++) {
    evd_eval_policy_name(e->sinks[j], name, sizeof name);
    fprintf(out, "%s{\"name\":\"%s\",\"sinks\":%u}", j ? "," : "", name,
            e->sinks[j]);
  }
  /* Rows budgets, columns policies, as in the table. */
  fputs("],\"retained\":[", out);
  for (i = 0; i < e->nb; i++) {
    fputs(i ? ",[" : "[", out);
    for (j = 0; j < e->np; j++)
      if (isnan(e->mass[i * e->np + j]))
        fprintf(out, "%snull", j ? "," : "");
      else
        fprintf(out, "%s%.6f", j ? "," : "", e->mass[i * e->np + j]);
    fputc(']', out);
  }
  fputs("]}\n", out);
  return done(out);
}
