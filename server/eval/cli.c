/* The command line of evictd-eval: arguments checked up front (a long run
 * never fails on a typo at its end), then the trace pass, then the reports.
 * Every failure is one line on stderr. */
#include "eval.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"

#define MAX_BUDGETS 64
#define MAX_POLICIES 16 /* as many as the chart's legend has room for */

static const char usage[] =
    "usage: evictd-eval TRACE.npy [--budgets LIST] [--sinks LIST] [--json]\n"
    "                   [--svg FILE]\n"
    "\n"
    "Replays evictd's sliding-window policy (its own server/window.c) over an\n"
    "attention trace and prints how much of each token's attention the\n"
    "positions the window keeps receive.\n"
    "\n"
    "  TRACE.npy       NumPy .npy file (format 1.0, 2.0 or 3.0), '<f4' or\n"
    "                  '<f2', C order, shape [T, T] or [H, T, T]: row t is the\n"
    "                  attention of the token at position t over positions\n"
    "                  0..t, summing to 1 within 1e-3, zeros above the\n"
    "                  diagonal. A 3-D trace is averaged over its H heads.\n"
    "  --budgets LIST  comma-separated budgets (positions kept), default\n"
    "                  32,64,128,256; a budget >= T keeps everything\n"
    "  --sinks LIST    comma-separated sink counts, one policy each, default\n"
    "                  0,4: 0 is the plain window (\"window\"), 4 is\n"
    "                  streaming-llm (\"sinks 4\"); a cell whose sinks are\n"
    "                  not below its budget is left empty ('-', null in\n"
    "                  JSON)\n"
    "  --json          print the figures as JSON instead of the table\n"
    "  --svg FILE      also draw retained mass against budget (log2 axis),\n"
    "                  one line per policy\n"
    "  -h, --help      print this text\n"
    "\n"
    "Each (policy, budget) window starts holding position 0. For t = 1..T-1\n"
    "the token at t attends to the positions the window holds after step\n"
    "t-1, plus t itself; its retained mass is its row's sum over them. Then\n"
    "the window steps t. Printed: the mean over t = 1..T-1, six decimals.\n"
    "Each row is first scaled to sum to exactly 1, so that float16 rounding\n"
    "shows as no mass gained or lost (a budget >= T retains 1.000000).\n"
    "Memory is one row of the trace plus the windows, whatever T.\n"
    "\n"
    "Exit status: 0 success; 2 bad arguments or an unreadable or malformed\n"
    "trace (one line on stderr naming the file and the problem); 1 a failure\n"
    "writing the results or out of memory.\n";

typedef struct {
  const char *trace, *svg;
  int json;
  uint32_t budgets[MAX_BUDGETS], sinks[MAX_POLICIES], nb, np;
} opts_t;

static int usage_error(FILE *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int usage_error(FILE *err, const char *fmt, ...) {
  va_list ap;

  fputs("evictd-eval: ", err);
  va_start(ap, fmt);
  vfprintf(err, fmt, ap);
  va_end(ap);
  fputs(" (see evictd-eval --help)\n", err);
  return EVD_EVAL_USAGE;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* "32,64,128" into out[0..*n), sorted; 0 or -1 with a message to err. */
static int parse_list(const char *opt, const char *s, uint32_t *out,
                      uint32_t cap, uint32_t *n, FILE *err) {
  const char *p = s;
  uint32_t k = 0, i;

  if (s == NULL)
    return usage_error(err, "%s needs a comma-separated list", opt), -1;
  do {
    char *end;
    unsigned long long v;
    if (*p < '0' || *p > '9')
      return usage_error(err, "%s: '%s' is not a comma-separated list of "
                         "non-negative integers", opt, s), -1;
    errno = 0;
    v = strtoull(p, &end, 10);
    if (errno != 0 || v > UINT32_MAX || (*end != ',' && *end != '\0'))
      return usage_error(err, "%s: '%s' is not a comma-separated list of "
                         "integers up to %u", opt, s, UINT32_MAX), -1;
    if (k == cap)
      return usage_error(err, "%s: more than %u values", opt, cap), -1;
    out[k++] = (uint32_t)v;
    p = *end == ',' ? end + 1 : end;
    if (*end == ',' && *p == '\0')
      return usage_error(err, "%s: '%s' ends with a comma", opt, s), -1;
  } while (*p != '\0');
  qsort(out, k, sizeof *out, cmp_u32);
  for (i = 1; i < k; i++)
    if (out[i] == out[i - 1])
      return usage_error(err, "%s: %u given twice", opt, out[i]), -1;
  *n = k;
  return 0;
}

/* An option's value: "--opt=VALUE" or the next argument. */
static const char *value_of(int argc, char **argv, int *i, const char *opt) {
  size_t n = strlen(opt);

  if (argv[*i][n] == '=')
    return argv[*i] + n + 1;
  return *i + 1 < argc ? argv[++*i] : NULL;
}

static int is_opt(const char *arg, const char *opt) {
  size_t n = strlen(opt);
  return strncmp(arg, opt, n) == 0 && (arg[n] == '\0' || arg[n] == '=');
}

/* Returns -1 when parsing stops with the exit status in *rc (an error, or
 * --help done), else 0. */
static int parse_args(int argc, char **argv, opts_t *o, FILE *out, FILE *err,
                      int *rc) {
  int i, opts_done = 0;
  const char *budgets = "32,64,128,256", *sinks = "0,4";

  memset(o, 0, sizeof *o);
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (opts_done || a[0] != '-' || a[1] == '\0') {
      if (o->trace != NULL)
        return *rc = usage_error(err, "one trace at a time ('%s' and '%s')",
                                 o->trace, a), -1;
      o->trace = a;
    } else if (strcmp(a, "--") == 0) {
      opts_done = 1;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      fputs(usage, out);
      *rc = fflush(out) == 0 && !ferror(out) ? EVD_EVAL_OK : EVD_EVAL_FAIL;
      return -1;
    } else if (strcmp(a, "--json") == 0) {
      o->json = 1;
    } else if (is_opt(a, "--budgets")) {
      if ((budgets = value_of(argc, argv, &i, "--budgets")) == NULL)
        return *rc = usage_error(err, "--budgets needs a list"), -1;
    } else if (is_opt(a, "--sinks")) {
      if ((sinks = value_of(argc, argv, &i, "--sinks")) == NULL)
        return *rc = usage_error(err, "--sinks needs a list"), -1;
    } else if (is_opt(a, "--svg")) {
      o->svg = value_of(argc, argv, &i, "--svg");
      if (o->svg == NULL || o->svg[0] == '\0')
        return *rc = usage_error(err, "--svg needs a file name"), -1;
    } else {
      return *rc = usage_error(err, "unknown option '%s'", a), -1;
    }
  }
  if (o->trace == NULL)
    return *rc = usage_error(err, "no trace file given"), -1;
  if (parse_list("--budgets", budgets, o->budgets, MAX_BUDGETS, &o->nb,
                 err) < 0 ||
      parse_list("--sinks", sinks, o->sinks, MAX_POLICIES, &o->np, err) < 0)
    return *rc = EVD_EVAL_USAGE, -1;
  /* Both sorted: the largest sink count against the smallest budget. */
  if (o->budgets[0] == 0)
    return *rc = usage_error(err, "--budgets: budget 0 keeps nothing (a "
                             "budget is at least 1)"), -1;
  if (o->budgets[o->nb - 1] > EVD_WINDOW_MAX_BUDGET)
    return *rc = usage_error(err, "--budgets: %u is above the largest "
                             "budget, %u", o->budgets[o->nb - 1],
                             EVD_WINDOW_MAX_BUDGET), -1;
  /* A (budget, sinks) cell whose sinks are not below the budget is left
   * empty; a sweep with no cell left is refused. */
  if (o->sinks[0] >= o->budgets[o->nb - 1])
    return *rc = usage_error(err, "--sinks %u is not below any budget (the "
                             "largest is %u; sinks < budget): nothing to "
                             "compute", o->sinks[0],
                             o->budgets[o->nb - 1]), -1;
  return 0;
}

/* The SVG goes to a temporary file beside FILE, made before the run so
 * that an unwritable place fails at once, and renamed over FILE only when
 * complete. Sets *f and *tmp (malloc'd, its name); returns the exit status
 * (EVD_EVAL_OK, or with *tmp NULL and the reason on err). */
static int svg_open(const char *path, FILE **f, char **tmp, FILE *err) {
  size_t n = strlen(path);
  mode_t mask;
  int fd;

  *tmp = malloc(n + sizeof ".tmpXXXXXX");
  if (*tmp == NULL) {
    fprintf(err, "evictd-eval: out of memory\n");
    return EVD_EVAL_FAIL;
  }
  memcpy(*tmp, path, n);
  memcpy(*tmp + n, ".tmpXXXXXX", sizeof ".tmpXXXXXX");
  fd = mkstemp(*tmp);
  if (fd < 0)
    goto fail_tmp;
  /* mkstemp makes 0600; a chart is as readable as any new file. */
  mask = umask(0);
  umask(mask);
  (void)fchmod(fd, 0666 & ~mask);
  *f = fdopen(fd, "w");
  if (*f == NULL)
    goto fail_fd;
  return EVD_EVAL_OK;

fail_fd:
  n = (size_t)errno; /* the reason, kept across the clean-up */
  close(fd);
  unlink(*tmp);
  errno = (int)n;
fail_tmp:
  fprintf(err, "evictd-eval: cannot write %s: %s\n", path, strerror(errno));
  free(*tmp);
  *tmp = NULL;
  return EVD_EVAL_USAGE;
}

/* Writes the chart and moves it into place; the exit status. */
static int svg_finish(FILE *f, const char *tmp, const char *path,
                      const evd_eval_t *e, FILE *err) {
  int bad = evd_eval_svg(f, e) < 0;

  bad |= fclose(f) != 0;
  if (!bad && rename(tmp, path) == 0)
    return EVD_EVAL_OK;
  fprintf(err, "evictd-eval: cannot write %s: %s\n", path, strerror(errno));
  unlink(tmp);
  return EVD_EVAL_FAIL;
}

static int status_of(int err) {
  return err == EVD_ENOMEM ? EVD_EVAL_FAIL : EVD_EVAL_USAGE;
}

int evd_eval_cli(int argc, char **argv, FILE *out, FILE *err) {
  opts_t o;
  evd_npy_t f;
  evd_sweep_t *r = NULL;
  evd_eval_t e;
  double *mass = NULL;
  FILE *svg = NULL;
  char msg[256], *svg_tmp = NULL;
  uint64_t H, T;
  uint32_t i, j;
  int rc, code;

  if (parse_args(argc, argv, &o, out, err, &rc) < 0)
    return rc;
  if (o.svg != NULL && (rc = svg_open(o.svg, &svg, &svg_tmp, err)) != 0)
    return rc;
  rc = EVD_EVAL_USAGE;
  if ((code = evd_npy_open(&f, o.trace, msg, sizeof msg)) < 0) {
    fprintf(err, "evictd-eval: %s: %s\n", o.trace, msg);
    rc = status_of(code);
    goto fail_svg;
  }
  if (evd_eval_shape(&f, &H, &T, msg, sizeof msg) < 0) {
    fprintf(err, "evictd-eval: %s: %s\n", o.trace, msg);
    goto fail_npy;
  }
  mass = malloc((size_t)o.nb * o.np * sizeof *mass);
  code = mass == NULL ? EVD_ENOMEM
                      : evd_sweep_new(&r, o.budgets, o.nb, o.sinks, o.np, T);
  if (code < 0) {
    /* The arguments and T were checked: only memory can be short here. */
    fprintf(err, "evictd-eval: %s: %s\n", o.trace, evd_strerror(code));
    rc = EVD_EVAL_FAIL;
    goto fail_npy;
  }
  if ((code = evd_eval_trace(&f, H, T, r, msg, sizeof msg)) < 0) {
    fprintf(err, "evictd-eval: %s: %s\n", o.trace, msg);
    rc = status_of(code);
    goto fail_sweep;
  }
  for (i = 0; i < o.nb; i++)
    for (j = 0; j < o.np; j++)
      mass[i * o.np + j] = evd_sweep_mean(r, i, j);
  e = (evd_eval_t){o.trace, evd_npy_dtype_str(&f), f.major, f.ndim, T, H,
                   o.nb, o.np, o.budgets, o.sinks, mass};
  if ((o.json ? evd_eval_json(out, &e) : evd_eval_table(out, &e)) < 0) {
    fprintf(err, "evictd-eval: cannot write the results: %s\n",
            strerror(errno));
    rc = EVD_EVAL_FAIL;
    goto fail_sweep;
  }
  rc = EVD_EVAL_OK;
  if (svg != NULL) {
    rc = svg_finish(svg, svg_tmp, o.svg, &e, err);
    svg = NULL;
  }

fail_sweep:
  evd_sweep_free(r);
fail_npy:
  free(mass);
  evd_npy_close(&f);
fail_svg:
  if (svg != NULL) {
    fclose(svg);
    unlink(svg_tmp);
  }
  free(svg_tmp);
  return rc;
}
