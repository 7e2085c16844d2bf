/* Tests of evictd-eval's figures: traces whose retained mass is known in
 * closed form (written here, float32 and float16, .npy versions 1.0 to
 * 3.0), an independent model of the kept set on random traces, the
 * reports, and a separate process whose peak memory stays far below its
 * trace. Malformed input is test_eval_input.c's. */
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "npy_write.h"

#ifndef EVD_EVAL_BIN
#define EVD_EVAL_BIN "build/evictd-eval"
#endif

/* Mean over t = 1..T-1 of f(t, b, s). */
static double mean_over_t(uint64_t T, double (*f)(uint64_t t, uint64_t b,
                                                  uint64_t s),
                          uint64_t b, uint64_t s) {
  double sum = 0;
  uint64_t t;

  for (t = 1; t < T; t++)
    sum += f(t, b, s);
  return sum / (double)(T - 1);
}

static double uniform_kept(uint64_t t, uint64_t b, uint64_t s) {
  (void)s;
  return (double)((t < b ? t : b) + 1) / (double)(t + 1);
}

static double zero_kept(uint64_t t, uint64_t b, uint64_t s) {
  return s > 0 || t <= b ? 1.0 : 0.0;
}

static const uint64_t budgets[] = {1, 2, 5, 16, 47, 63, 64, 100};
#define BUDGETS "1,2,5,16,47,63,64,100"

/* Checks a one-policy run over BUDGETS against f. */
static void expect_closed_form(const char *trace, uint64_t T, uint64_t s,
                               double (*f)(uint64_t, uint64_t, uint64_t),
                               double tol) {
  char sinks[16];
  json_t *doc;
  size_t i;

  snprintf(sinks, sizeof sinks, "%llu", (unsigned long long)s);
  doc = run_json(trace, s == 0 ? BUDGETS : "2,5,16,47,63,64,100", sinks);
  for (i = s == 0 ? 0 : 1; i < sizeof budgets / sizeof budgets[0]; i++) {
    double want = mean_over_t(T, f, budgets[i], s);
    double got = figure(doc, s == 0 ? i : i - 1, 0);
    ck_assert_msg(fabs(got - want) <= tol,
                  "%s, sinks %llu, budget %llu: %.6f, want %.6f", trace,
                  (unsigned long long)s, (unsigned long long)budgets[i], got,
                  want);
  }
  json_decref(doc);
}

/* ---- closed forms --------------------------------------------------------- */

START_TEST(uniform_rows_keep_min_t_b_plus_one_over_t_plus_one) {
  const char *f4 = write_trace("uniform4.npy", 1, 4, 0, 64, uniform);
  const char *f2 = write_trace("uniform2.npy", 2, 2, 0, 64, uniform);

  /* Uniform attention: which positions are kept does not matter, only
   * how many, so sinks change nothing. */
  expect_closed_form(f4, 64, 0, uniform_kept, 1e-6);
  expect_closed_form(f4, 64, 1, uniform_kept, 1e-6);
  expect_closed_form(f2, 64, 0, uniform_kept, 1e-3);
  expect_closed_form(f2, 64, 1, uniform_kept, 1e-3);
}
END_TEST

START_TEST(all_on_position_zero_is_where_sinks_matter) {
  const char *f4 = write_trace("zero4.npy", 1, 4, 0, 64, on_zero);
  const char *f2 = write_trace("zero2.npy", 2, 2, 0, 64, on_zero);
  json_t *doc;

  /* The window drops position 0 once t > budget; a sink never does. */
  expect_closed_form(f4, 64, 0, zero_kept, 1e-6);
  expect_closed_form(f4, 64, 1, zero_kept, 1e-6);
  expect_closed_form(f2, 64, 0, zero_kept, 1e-6);
  doc = run_json(f4, "16", "0,4");
  ck_assert_double_eq_tol(figure(doc, 0, 0), 16.0 / 63, 1e-6);
  ck_assert_double_eq_tol(figure(doc, 0, 1), 1.0, 1e-9);
  json_decref(doc);
}
END_TEST

START_TEST(diagonal_and_previous_position_always_kept) {
  const char *d = write_trace("diag.npy", 1, 4, 0, 40, on_diagonal);
  const char *p = write_trace("prev.npy", 3, 2, 0, 40, on_previous);
  json_t *doc;
  size_t i, j;

  /* Every window holds t - 1 (the newest) and t attends to itself. */
  for (i = 0; i < 2; i++) {
    doc = run_json(i ? p : d, "1,2,3,39,40,1000", "0");
    for (j = 0; j < 6; j++)
      ck_assert_double_eq_tol(figure(doc, j, 0), 1.0, 1e-9);
    json_decref(doc);
  }
  doc = run_json(p, "5,39", "0,4");
  ck_assert_double_eq_tol(figure(doc, 0, 1), 1.0, 1e-9);
  json_decref(doc);
}
END_TEST

START_TEST(three_d_trace_is_the_mean_of_its_heads) {
  const uint64_t T = 50;
  const char *f4 = write_trace("heads4.npy", 1, 4, 3, T, heads_differ);
  const char *f2 = write_trace("heads2.npy", 2, 2, 3, T, heads_differ);
  json_t *doc;
  uint64_t b;
  size_t i;

  for (i = 0; i < 2; i++) {
    doc = run_json(i ? f2 : f4, "1,7,20,49", "0");
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "H")), 3);
    for (b = 0; b < 4; b++) {
      uint64_t bud = (uint64_t[]){1, 7, 20, 49}[b];
      double want = (mean_over_t(T, zero_kept, bud, 0) + 1.0 +
                     mean_over_t(T, uniform_kept, bud, 0)) / 3;
      ck_assert_msg(fabs(figure(doc, b, 0) - want) <= (i ? 1e-3 : 1e-6),
                    "budget %llu: %.6f, want %.6f", (unsigned long long)bud,
                    figure(doc, b, 0), want);
    }
    json_decref(doc);
  }
}
END_TEST

START_TEST(budget_at_or_above_t_keeps_everything) {
  const char *f = write_trace("big.npy", 1, 4, 0, 30, uniform);
  const char *s = write_trace("bigsinks.npy", 1, 4, 0, 4, on_zero);
  json_t *doc = run_json(f, "29,30,31,4294967294", "0,4");
  size_t i;

  /* Budget 29 = T - 1 already holds every earlier position at every t. */
  for (i = 0; i < 8; i++)
    ck_assert_double_eq_tol(figure(doc, i / 2, i % 2), 1.0, 1e-6);
  json_decref(doc);
  /* float16 rows sum to 1 only within rounding; scaled, everything kept is
   * exactly 1 all the same. */
  doc = run_json(write_trace("big2.npy", 1, 2, 3, 30, heads_differ),
                 "30,1000", "0");
  ck_assert_double_eq_tol(figure(doc, 0, 0), 1.0, 1e-9);
  ck_assert_double_eq_tol(figure(doc, 1, 0), 1.0, 1e-9);
  json_decref(doc);
  /* Sinks above T are fine as long as they are below the budget. */
  doc = run_json(s, "8", "0,6");
  ck_assert_double_eq_tol(figure(doc, 0, 0), 1.0, 1e-9);
  ck_assert_double_eq_tol(figure(doc, 0, 1), 1.0, 1e-9);
  json_decref(doc);
}
END_TEST

/* ---- an independent model: random traces, kept set in closed form ------- */

static uint64_t seed;

static double rnd(void) {
  seed = seed * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(seed >> 11) * 0x1p-53;
}

static double *random_rows; /* [H][T][T] as floats will store them */

static double from_table(uint64_t h, uint64_t t, uint64_t p, uint64_t T) {
  return random_rows[(h * T + t) * T + p];
}

START_TEST(random_traces_match_kept_set_model) {
  const uint64_t H = 4, T = 97;
  const uint64_t bs[] = {1, 3, 8, 9, 30, 96, 97};
  const uint64_t ss[] = {0, 1, 4};
  const char *f;
  json_t *doc;
  uint64_t h, t, p, i, j;

  seed = 42;
  random_rows = calloc(H * T * T, sizeof *random_rows);
  ck_assert_ptr_nonnull(random_rows);
  for (h = 0; h < H; h++) {
    for (t = 0; t < T; t++) {
      double *r = random_rows + (h * T + t) * T, sum = 0;
      for (p = 0; p <= t; p++)
        sum += r[p] = pow(rnd(), 4) * (p == 0 ? 20 : 1);
      for (p = 0; p <= t; p++)
        r[p] = (double)(float)(r[p] / sum); /* what the file will hold */
    }
  }
  f = write_trace("random.npy", 1, 4, H, T, from_table);
  for (j = 0; j < 3; j++) {
    uint64_t s = ss[j], n = 0, b;
    char list[64] = "", sinks[8];
    size_t len = 0;
    /* One run per policy, over the budgets above its sinks. */
    for (i = 0; i < 7; i++)
      if (bs[i] > s)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%llu",
                                len ? "," : "", (unsigned long long)bs[i]);
    snprintf(sinks, sizeof sinks, "%llu", (unsigned long long)s);
    doc = run_json(f, list, sinks);
    for (i = 0; i < 7; i++) {
      double want = 0;
      if ((b = bs[i]) <= s)
        continue;
      for (t = 1; t < T; t++) {
        for (h = 0; h < H; h++) {
          const double *r = random_rows + (h * T + t) * T;
          /* Kept after step t-1: everything while t <= b, else the first
           * s positions and the b - s before t; plus t itself. */
          for (p = 0; p <= t; p++)
            if (p == t || t <= b || p < s || p + (b - s) >= t)
              want += r[p] / (double)H;
        }
      }
      want /= (double)(T - 1);
      ck_assert_msg(fabs(figure(doc, n, 0) - want) <= 1e-6,
                    "budget %llu sinks %llu: %.6f, want %.6f",
                    (unsigned long long)b, (unsigned long long)s,
                    figure(doc, n, 0), want);
      n++;
    }
    json_decref(doc);
  }
  free(random_rows);
}
END_TEST

/* ---- versions ----------------------------------------------------------- */

START_TEST(versions_1_2_3_and_python2_header_read) {
  double v[16];
  int major;
  char name[32];

  good4x4(v);
  for (major = 1; major <= 3; major++) {
    json_t *doc;
    snprintf(name, sizeof name, "v%d.npy", major);
    doc = run_json(write_npy(name, major, F4_44, v, 16, 4), "1", "0");
    /* Budget 1: row t keeps t - 1 and t. Row 1: 1; row 2: 0.75; row 3:
     * 0.7. */
    ck_assert_double_eq_tol(figure(doc, 0, 0), (1 + 0.75 + 0.7) / 3, 1e-6);
    json_decref(doc);
  }
  run(write_npy("py2.npy", 1,
                "{'descr': '<f4', 'fortran_order': False, "
                "'shape': (4L, 4L)}", v, 16, 4), NULL);
  ck_assert_msg(last.rc == 0, "%s", last.err);
}
END_TEST

/* ---- reports ------------------------------------------------------------ */
START_TEST(table_has_six_decimals_budget_rows_policy_columns) {
  const char *f = write_trace("table.npy", 1, 4, 0, 64, on_zero);
  char want[512];

  run(f, "--budgets", "63,16", "--sinks", "4,0", NULL);
  ck_assert_msg(last.rc == 0, "%s", last.err);
  /* Sorted budgets and policies; 16/63 = 0.253968. */
  snprintf(want, sizeof want,
           "%s: T = 64, H = 1 (<f4); retained attention mass, mean over "
           "t = 1..63\n"
           "  budget      window     sinks 4\n"
           "      16    0.253968    1.000000\n"
           "      63    1.000000    1.000000\n", f);
  ck_assert_str_eq(last.out, want);
  ck_assert_uint_eq(last.nerr, 0);
}
END_TEST

/* Budgets not above a policy's sinks leave that policy's cells empty; the
 * rest of the sweep is computed (it used to be refused whole). */
START_TEST(cells_with_sinks_not_below_budget_are_empty) {
  const char *f = write_trace("empty.npy", 1, 4, 0, 64, on_zero);
  char want[512];
  json_t *doc, *rows;

  run(f, "--budgets", "1,2,16,63", "--sinks", "0,4", NULL);
  ck_assert_msg(last.rc == 0, "%s", last.err);
  snprintf(want, sizeof want,
           "%s: T = 64, H = 1 (<f4); retained attention mass, mean over "
           "t = 1..63\n"
           "  budget      window     sinks 4\n"
           "       1    0.015873           -\n"
           "       2    0.031746           -\n"
           "      16    0.253968    1.000000\n"
           "      63    1.000000    1.000000\n"
           "(-: no such window, the sinks are not below the budget)\n", f);
  ck_assert_str_eq(last.out, want);
  doc = run_json(f, "1,16", "0,4");
  rows = json_object_get(doc, "retained");
  ck_assert(json_is_null(json_array_get(json_array_get(rows, 0), 1)));
  ck_assert(json_is_real(json_array_get(json_array_get(rows, 0), 0)));
  ck_assert_double_eq_tol(
      json_real_value(json_array_get(json_array_get(rows, 1), 1)), 1.0, 1e-9);
  json_decref(doc);
}
END_TEST

START_TEST(json_names_trace_shape_budgets_policies) {
  const char *f = write_trace("j\"son.npy", 2, 2, 2, 16, heads_differ);
  json_t *doc = run_json(f, "4,8", "0,2"), *pol;
  char want[600];

  ck_assert_str_eq(json_string_value(json_object_get(doc, "trace")), f);
  ck_assert_int_eq(json_integer_value(json_object_get(doc, "T")), 16);
  ck_assert_int_eq(json_integer_value(json_object_get(doc, "H")), 2);
  ck_assert_str_eq(json_string_value(json_object_get(doc, "dtype")), "<f2");
  ck_assert_str_eq(json_string_value(json_object_get(doc, "npy_version")),
                   "2.0");
  ck_assert_int_eq(
      json_integer_value(json_array_get(json_object_get(doc, "shape"), 0)), 2);
  ck_assert_int_eq(
      json_integer_value(json_array_get(json_object_get(doc, "budgets"), 1)),
      8);
  pol = json_array_get(json_object_get(doc, "policies"), 1);
  ck_assert_str_eq(json_string_value(json_object_get(pol, "name")), "sinks 2");
  ck_assert_int_eq(json_integer_value(json_object_get(pol, "sinks")), 2);
  ck_assert_uint_eq(json_array_size(json_object_get(doc, "retained")), 2);
  /* Head 0 all on position 0 (kept by the sinks), head 1 on the diagonal. */
  ck_assert_double_eq_tol(figure(doc, 0, 1), 1.0, 1e-9);
  ck_assert_double_eq_tol(figure(doc, 0, 0), (1.0 + 4.0 / 15) / 2, 1e-6);
  json_decref(doc);
  /* A control byte and a byte that is not UTF-8 in the name: escaped, and
   * U+FFFD, so that the report is still JSON (jansson refuses it else). */
  f = write_trace("j\tson\xff.npy", 1, 4, 0, 16, uniform);
  snprintf(want, sizeof want, "%.*s\xef\xbf\xbd.npy", (int)strlen(f) - 5, f);
  doc = run_json(f, "4", "0");
  ck_assert_str_eq(json_string_value(json_object_get(doc, "trace")), want);
  json_decref(doc);
}
END_TEST

START_TEST(svg_reads_on_its_own) {
  const char *f = write_trace("a&b.npy", 1, 4, 0, 64, on_zero);
  const char *svg = path_of("chart.svg");
  static const char *const parts[] = {
      "<?xml", "<svg", "</svg>", "Retained attention mass vs KV-cache budget",
      "trace a&amp;b.npy: T = 64 positions, H = 1 head (float32)",
      "KV-cache budget (positions kept per sequence, log2 scale)",
      "retained attention mass (fraction of the row, mean over t)",
      ">16</text>", ">0.5</text>", "window (no sinks)",
      "sinks 4 (positions 0..3 pinned)", "budget = T = 64",
      "window, budget 16: 0.253968"};
  size_t n, i;
  char *text;

  run(f, "--budgets", "8,16,32,64", "--svg", svg, NULL);
  ck_assert_msg(last.rc == 0, "%s", last.err);
  ck_assert_ptr_nonnull(strstr(last.out, "sinks 4")); /* the table too */
  text = slurp(svg, &n);
  for (i = 0; i < sizeof parts / sizeof parts[0]; i++)
    ck_assert_msg(strstr(text, parts[i]) != NULL, "SVG lacks '%s'", parts[i]);
  ck_assert_ptr_null(strstr(text, "a&b"));
  free(text);
}
END_TEST

START_TEST(no_svg_left_behind_by_a_refused_trace) {
  const char *svg = path_of("never.svg");
  struct stat st;
  double v[16];

  good4x4(v);
  run(write_npy("noplot.npy", 1, F4_44, v, 15, 4), "--budgets", "2",
      "--svg", svg, NULL);
  ck_assert_int_eq(last.rc, 2);
  ck_assert_int_ne(stat(svg, &st), 0);
  run(path_of("noplot.npy"), "--budgets", "2", "--json", "--svg", svg, NULL);
  /* Nor a temporary file: the directory holds only what the tests wrote. */
  ck_assert_int_ne(stat(svg, &st), 0);
}
END_TEST

START_TEST(sweep_refuses_positions_out_of_order) {
  const uint32_t b[] = {4}, s[] = {0};
  double row[8] = {0.5, 0.5, 0, 0, 0, 0, 0, 0};
  evd_sweep_t *r;

  ck_assert_int_eq(evd_sweep_new(&r, b, 1, s, 1, 1), EVD_EINVAL);
  ck_assert_int_eq(evd_sweep_new(&r, b, 1, b, 1, 8), EVD_EINVAL);
  ck_assert_int_eq(evd_sweep_new(&r, b, 1, s, 1, 8), 0);
  ck_assert_int_eq(evd_sweep_row(r, 2, row, 1), EVD_ESTALE);
  ck_assert_int_eq(evd_sweep_row(r, 1, row, 1), 0);
  ck_assert_int_eq(evd_sweep_row(r, 1, row, 1), EVD_ESTALE);
  ck_assert_double_eq_tol(evd_sweep_mean(r, 0, 0), 1.0, 1e-12);
  evd_sweep_free(r);
}
END_TEST

START_TEST(half_decoding_is_exact) {
  uint32_t h;

  /* Every finite binary16 value decodes to a float that rounds back to it;
   * the signs of zero and the infinities survive; NaNs stay NaN. */
  for (h = 0; h < 0x10000u; h++) {
    float f = evd_npy_half((uint16_t)h);
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0)
      ck_assert(isnan(f));
    else
      ck_assert_uint_eq(npyw_half(f), h);
  }
  ck_assert(evd_npy_half(0x3c00u) == 1.0f);
  ck_assert(evd_npy_half(0x0001u) == 0x1p-24f);
  ck_assert(evd_npy_half(0xfc00u) == -INFINITY);
}
END_TEST

/* ---- memory: a separate process, its peak RSS from wait4 ---------------- */

/* A [T, T] float16 trace, half on position 0 and half on the diagonal,
 * written sparse: a few bytes per row, the rest holes. */
static const char *write_sparse(const char *name, uint64_t T) {
  const char *path = path_of(name);
  unsigned char hdr[128];
  uint64_t shape[2] = {T, T}, t;
  char dict[128];
  size_t n;
  int fd;

  npyw_dict(dict, sizeof dict, "<f2", shape, 2);
  n = npyw_header(hdr, sizeof hdr, 1, dict);
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pwrite(fd, hdr, n, 0), (ssize_t)n);
  for (t = 0; t < T; t++) {
    uint16_t h = npyw_half(t == 0 ? 1.0f : 0.5f);
    unsigned char b[2] = {(unsigned char)h, (unsigned char)(h >> 8)};
    off_t row = (off_t)(n + t * T * 2);
    ck_assert_int_eq(pwrite(fd, b, 2, row), 2);
    ck_assert_int_eq(pwrite(fd, b, 2, row + (off_t)(t * 2)), 2);
  }
  ck_assert_int_eq(ftruncate(fd, (off_t)(n + T * T * 2)), 0);
  ck_assert_int_eq(close(fd), 0);
  return path;
}

/* Runs the binary on trace (output to out.json); returns its peak RSS in
 * KiB. */
static long run_binary(const char *trace, const char *out) {
  const char *bin = getenv("EVICTD_EVAL_BIN");
  struct rusage ru;
  int status;
  pid_t pid;

  if (bin == NULL)
    bin = EVD_EVAL_BIN;
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || dup2(fd, 1) < 0)
      _exit(127);
    execl(bin, bin, trace, "--budgets", "32,64,128,256,512,1024", "--sinks",
          "0,4", "--json", (char *)NULL);
    _exit(127);
  }
  ck_assert_int_eq(wait4(pid, &status, 0, &ru), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "%s %s: status %d", bin, trace, status);
  return ru.ru_maxrss;
}

START_TEST(memory_stays_bounded_far_below_the_file) {
  const uint64_t T = 8192;
  const char *small = write_sparse("small.npy", 64);
  const char *big = write_sparse("big8192.npy", T);
  long base = run_binary(small, path_of("small.json"));
  long peak = run_binary(big, path_of("big.json"));
  long file_kib = (long)(T * T * 2 / 1024);
  size_t n;
  char *text = slurp(path_of("big.json"), &n);
  json_t *doc = json_loads(text, 0, NULL);

  /* The trace is 131,072 KiB; what the run needs beyond a 64-position run
   * is a row of floats, a row of doubles and twelve windows (about
   * 120 KiB). Allowed: 1/16 of the file (8 MiB), so the margin is 16x even
   * under the sanitizers' allocators. */
  /* ru_maxrss also counts the forked copy of this test before its exec,
   * so both figures are upper bounds. */
  fprintf(stderr, "memory: T = %llu float16 trace of %ld KiB: peak RSS at "
          "most %ld KiB (%ld KiB at T = 64)\n", (unsigned long long)T,
          file_kib, peak, base);
  ck_assert_msg(peak - base < file_kib / 16,
                "peak RSS %ld KiB, %ld KiB above T = 64, file %ld KiB", peak,
                peak - base, file_kib);
  ck_assert_msg(peak < file_kib / 2, "peak RSS %ld KiB, file %ld KiB", peak,
                file_kib);
  /* And the figures: window 0.5 + 0.5 min(b, T-1)/(T-1), sinks 1. */
  ck_assert_ptr_nonnull(doc);
  ck_assert_double_eq_tol(figure(doc, 5, 0), 0.5 + 0.5 * 1024.0 / 8191,
                          1e-6);
  ck_assert_double_eq_tol(figure(doc, 5, 1), 1.0, 1e-9);
  json_decref(doc);
  free(text);
  unlink(big);
}
END_TEST

/* ---- runner ------------------------------------------------------------- */

static Suite *eval_suite(void) {
  Suite *s = suite_create("eval");
  TCase *closed = tcase_create("closed_forms");
  TCase *out = tcase_create("reports");
  TCase *mem = tcase_create("memory");

  tcase_set_timeout(closed, 60);
  tcase_add_test(closed, uniform_rows_keep_min_t_b_plus_one_over_t_plus_one);
  tcase_add_test(closed, all_on_position_zero_is_where_sinks_matter);
  tcase_add_test(closed, diagonal_and_previous_position_always_kept);
  tcase_add_test(closed, three_d_trace_is_the_mean_of_its_heads);
  tcase_add_test(closed, budget_at_or_above_t_keeps_everything);
  tcase_add_test(closed, random_traces_match_kept_set_model);
  tcase_add_test(closed, versions_1_2_3_and_python2_header_read);
  suite_add_tcase(s, closed);
  tcase_set_timeout(out, 60);
  tcase_add_test(out, table_has_six_decimals_budget_rows_policy_columns);
  tcase_add_test(out, cells_with_sinks_not_below_budget_are_empty);
  tcase_add_test(out, json_names_trace_shape_budgets_policies);
  tcase_add_test(out, svg_reads_on_its_own);
  tcase_add_test(out, no_svg_left_behind_by_a_refused_trace);
  tcase_add_test(out, sweep_refuses_positions_out_of_order);
  tcase_add_test(out, half_decoding_is_exact);
  suite_add_tcase(s, out);
  tcase_set_timeout(mem, 120);
  tcase_add_test(mem, memory_stays_bounded_far_below_the_file);
  suite_add_tcase(s, mem);
  return s;
}

int main(void) {
  return harness_main(eval_suite());
}
