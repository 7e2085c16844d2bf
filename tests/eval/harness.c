/* Shared by the evaluator's test programs: a scratch directory, trace and
 * .npy writers, and the CLI run in process with its output captured. */
#include "harness.h"

#include <ftw.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "npy_write.h"
#include "../unit/check_main.h"

char dir[512]; /* $TMPDIR/evictd-eval-test.XXXXXX, made by harness_main */

const char *path_of(const char *name) {
  static char buf[8][600];
  static int k;
  char *p = buf[k++ % 8];
  snprintf(p, sizeof buf[0], "%s/%s", dir, name);
  return p;
}

/* ---- writing traces ---------------------------------------------------- */

void write_file(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(b, 1, n, f), n);
  ck_assert_int_eq(fclose(f), 0);
}

const char *write_trace(const char *name, int major, int esize, uint64_t H,
                        uint64_t T, weight_fn w) {
  const char *path = path_of(name);
  unsigned char hdr[256];
  uint64_t shape[3] = {H, T, T}, h, t, p;
  double *row = malloc(T * sizeof *row);
  char dict[160];
  size_t n;
  FILE *f;

  ck_assert_ptr_nonnull(row);
  npyw_dict(dict, sizeof dict, esize == 2 ? "<f2" : "<f4",
            H ? shape : shape + 1, H ? 3 : 2);
  n = npyw_header(hdr, sizeof hdr, major, dict);
  f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(hdr, 1, n, f), n);
  for (h = 0; h < (H ? H : 1); h++) {
    for (t = 0; t < T; t++) {
      for (p = 0; p < T; p++)
        row[p] = p <= t ? w(h, t, p, T) : 0.0;
      ck_assert_int_eq(npyw_values(f, row, T, esize), 0);
    }
  }
  ck_assert_int_eq(fclose(f), 0);
  free(row);
  return path;
}

double uniform(uint64_t h, uint64_t t, uint64_t p, uint64_t T) {
  (void)h, (void)p, (void)T;
  return 1.0 / (double)(t + 1);
}

double on_zero(uint64_t h, uint64_t t, uint64_t p, uint64_t T) {
  (void)h, (void)t, (void)T;
  return p == 0;
}

double on_diagonal(uint64_t h, uint64_t t, uint64_t p, uint64_t T) {
  (void)h, (void)T;
  return p == t;
}

double on_previous(uint64_t h, uint64_t t, uint64_t p, uint64_t T) {
  (void)h, (void)T;
  return t == 0 ? 1.0 : p == t - 1;
}

/* Head 0 all on position 0, head 1 on the diagonal, head 2 uniform. */
double heads_differ(uint64_t h, uint64_t t, uint64_t p, uint64_t T) {
  return h == 0 ? on_zero(h, t, p, T)
                : h == 1 ? on_diagonal(h, t, p, T) : uniform(h, t, p, T);
}

/* ---- running the CLI in process ---------------------------------------- */

run_t last;

/* Runs evd_eval_cli with the arguments given (NULL-terminated). */
run_t *run(const char *arg, ...) {
  char *argv[32];
  int argc = 0;
  va_list ap;
  FILE *out, *err;

  free(last.out);
  free(last.err);
  memset(&last, 0, sizeof last);
  argv[argc++] = "evictd-eval";
  va_start(ap, arg);
  for (; arg != NULL && argc < 31; arg = va_arg(ap, const char *))
    argv[argc++] = (char *)arg;
  va_end(ap);
  argv[argc] = NULL;
  out = open_memstream(&last.out, &last.nout);
  err = open_memstream(&last.err, &last.nerr);
  ck_assert(out != NULL && err != NULL);
  last.rc = evd_eval_cli(argc, argv, out, err);
  fclose(out);
  fclose(err);
  return &last;
}

/* The JSON figures of the last run; retained[i][j] (budget i, policy j). */
double figure(json_t *doc, size_t i, size_t j) {
  json_t *v = json_array_get(json_array_get(json_object_get(doc,
                                                            "retained"), i),
                             j);
  ck_assert_msg(json_is_real(v), "no figure [%zu][%zu]", i, j);
  return json_real_value(v);
}

json_t *run_json(const char *trace, const char *budgets, const char *sinks) {
  json_error_t e;
  json_t *doc;

  run(trace, "--budgets", budgets, "--sinks", sinks, "--json", NULL);
  ck_assert_msg(last.rc == 0, "exit %d: %s", last.rc, last.err);
  doc = json_loads(last.out, 0, &e);
  ck_assert_msg(doc != NULL, "bad JSON (%s): %s", e.text, last.out);
  return doc;
}

/* ---- .npy files of any header -------------------------------------------- */

const char *write_npy(const char *name, int major, const char *dict,
                      const double *v, size_t n, int esize) {
  const char *path = path_of(name);
  unsigned char hdr[512];
  size_t len = npyw_header(hdr, sizeof hdr, major, dict);
  FILE *f = fopen(path, "wb");

  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(hdr, 1, len, f), len);
  ck_assert_int_eq(npyw_values(f, v, n, esize), 0);
  ck_assert_int_eq(fclose(f), 0);
  return path;
}

void good4x4(double *v) {
  static const double m[16] = {1, 0, 0, 0,        0.5, 0.5, 0, 0,
                               0.25, 0.25, 0.5, 0, 0.1, 0.2, 0.3, 0.4};
  memcpy(v, m, sizeof m);
}

char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  char *b;
  long len;

  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
  len = ftell(f);
  rewind(f);
  b = malloc((size_t)len + 1);
  ck_assert_ptr_nonnull(b);
  ck_assert_uint_eq(fread(b, 1, (size_t)len, f), (size_t)len);
  b[len] = '\0';
  fclose(f);
  *n = (size_t)len;
  return b;
}

static int rm_entry(const char *p, const struct stat *st, int flag,
                    struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(p);
}

int harness_main(Suite *suite) {
  const char *tmp = getenv("TMPDIR");
  int rc;

  snprintf(dir, sizeof dir, "%s/evictd-eval-test.XXXXXX",
           tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return EXIT_FAILURE;
  }
  rc = evd_check_run(&suite, 1, CK_FORK_GETENV);
  free(last.out);
  free(last.err);
  nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  return rc;
}
