/* Tests of evictd-eval's refusals: every malformed trace and bad argument
 * exits 2 with one line on stderr naming the file (or option) and the
 * problem, and prints nothing on stdout. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "harness.h"
#include "npy_write.h"

/* ---- malformed files: exit 2, one line naming the file and the problem -- */

static void expect_refused(const char *path, const char *phrase) {
  char prefix[700];

  run(path, "--budgets", "2", "--sinks", "0", NULL);
  snprintf(prefix, sizeof prefix, "evictd-eval: %s: ", path);
  ck_assert_msg(last.rc == 2, "%s: exit %d, want 2", path, last.rc);
  ck_assert_msg(last.nout == 0, "%s: printed %s", path, last.out);
  ck_assert_msg(strncmp(last.err, prefix, strlen(prefix)) == 0,
                "%s: message '%s' does not name the file", path, last.err);
  ck_assert_msg(strstr(last.err, phrase) != NULL, "%s: '%s' lacks '%s'",
                path, last.err, phrase);
  ck_assert_msg(strchr(last.err, '\n') == last.err + last.nerr - 1,
                "%s: not one line: '%s'", path, last.err);
}

START_TEST(good_4x4_is_accepted) {
  double v[16];

  /* The base every malformed case below spoils, so each refusal is due to
   * the one thing spoiled. */
  good4x4(v);
  run(write_npy("good.npy", 1, F4_44, v, 16, 4), "--budgets", "1,2",
      "--sinks", "0", NULL);
  ck_assert_msg(last.rc == 0, "%s", last.err);
}
END_TEST

START_TEST(truncated_files_refused) {
  unsigned char hdr[128];
  double v[16];
  const char *p;
  size_t n;

  good4x4(v);
  p = write_npy("short.npy", 1, F4_44, v, 15, 4);
  expect_refused(p, "truncated data");
  expect_refused(p, "needs 64");
  write_file(path_of("tiny.npy"), "\x93NUMPY\x01", 7);
  expect_refused(path_of("tiny.npy"), "truncated header");
  n = npyw_header(hdr, sizeof hdr, 1, F4_44);
  write_file(path_of("halfhdr.npy"), hdr, n / 2);
  expect_refused(path_of("halfhdr.npy"), "truncated header");
  write_file(path_of("empty.npy"), "", 0);
  expect_refused(path_of("empty.npy"), "truncated header");
  p = write_npy("long.npy", 1, F4_44, v, 16, 4);
  ck_assert_int_eq(truncate(p, (off_t)(n + 64 + 3)), 0);
  expect_refused(p, "3 unexpected bytes after the data");
}
END_TEST

START_TEST(bad_magic_and_version_refused) {
  unsigned char b[128];
  double v[16];
  size_t n;

  good4x4(v);
  n = npyw_header(b, sizeof b, 1, F4_44);
  b[1] = 'n';
  write_file(path_of("magic.npy"), b, n);
  expect_refused(path_of("magic.npy"), "bad magic");
  write_file(path_of("text.npy"), "hello, world\n", 13);
  expect_refused(path_of("text.npy"), "bad magic");
  n = npyw_header(b, sizeof b, 1, F4_44);
  b[6] = 4;
  write_file(path_of("v4.npy"), b, n);
  expect_refused(path_of("v4.npy"), "format version 4.0");
  b[6] = 1;
  b[7] = 1;
  write_file(path_of("v11.npy"), b, n);
  expect_refused(path_of("v11.npy"), "format version 1.1");
}
END_TEST

START_TEST(unsupported_dtypes_refused) {
  static const char *const bad[] = {"<f8", ">f4", ">f2", "<i4", "|u1", "<c8"};
  char dict[128], name[32], phrase[64];
  double v[16];
  size_t i;

  good4x4(v);
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(dict, sizeof dict,
             "{'descr': '%s', 'fortran_order': False, 'shape': (4, 4), }",
             bad[i]);
    snprintf(name, sizeof name, "dtype%zu.npy", i);
    snprintf(phrase, sizeof phrase, "unsupported dtype '%s'", bad[i]);
    expect_refused(write_npy(name, 1, dict, v, 16, 4), phrase);
  }
  expect_refused(write_npy("struct.npy", 1,
                           "{'descr': [('a', '<f4')], 'fortran_order': "
                           "False, 'shape': (4, 4), }", v, 16, 4),
                 "structured");
}
END_TEST

START_TEST(bad_shapes_refused) {
  double v[64] = {0};

  good4x4(v);
  expect_refused(write_npy("4d.npy", 1,
                           "{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (1, 1, 4, 4), }", v, 16, 4),
                 "bad shape (1, 1, 4, 4): 4-D");
  expect_refused(write_npy("1d.npy", 1,
                           "{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (16,), }", v, 16, 4),
                 "bad shape (16,): 1-D");
  expect_refused(write_npy("0d.npy", 1,
                           "{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (), }", v, 1, 4),
                 "bad shape (): 0-D");
  expect_refused(write_npy("nonsq.npy", 1,
                           "{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (4, 5), }", v, 20, 4),
                 "not square");
  expect_refused(write_npy("nonsq3.npy", 1,
                           "{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (2, 4, 2), }", v, 16, 4),
                 "not square");
  v[0] = 1;
  expect_refused(write_npy("t1.npy", 1,
                           "{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (1, 1), }", v, 1, 4),
                 "need at least 2 positions");
  expect_refused(write_npy("h0.npy", 1,
                           "{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (0, 4, 4), }", v, 0, 4),
                 "no heads");
}
END_TEST

START_TEST(bad_headers_refused) {
  double v[16];

  good4x4(v);
  expect_refused(write_npy("fortran.npy", 1,
                           "{'descr': '<f4', 'fortran_order': True, "
                           "'shape': (4, 4), }", v, 16, 4),
                 "fortran_order is True");
  expect_refused(write_npy("nokey.npy", 1,
                           "{'descr': '<f4', 'shape': (4, 4), }", v, 16, 4),
                 "no 'fortran_order' key");
  expect_refused(write_npy("extra.npy", 1,
                           "{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (4, 4), 'x': 1}", v, 16, 4),
                 "unexpected key 'x'");
  expect_refused(write_npy("notdict.npy", 1, "[1, 2]", v, 16, 4),
                 "bad header");
  expect_refused(write_npy("badshape.npy", 1,
                           "{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (4, -4), }", v, 16, 4),
                 "bad header");
  expect_refused(write_npy("twice.npy", 1,
                           "{'descr': '<f4', 'descr': '<f4', "
                           "'fortran_order': False, 'shape': (4, 4), }",
                           v, 16, 4),
                 "key 'descr' twice");
}
END_TEST

START_TEST(bad_rows_refused) {
  double v[48];
  size_t i;

  good4x4(v);
  v[8] = v[9] = v[10] = 0.3; /* row 2 sums to 0.9 */
  expect_refused(write_npy("sum09.npy", 1, F4_44, v, 16, 4),
                 "row 2 sums to 0.900000");
  good4x4(v);
  v[9] = 0.2497; /* row 2 sums to 0.9997: rounding, accepted */
  run(write_npy("sum09997.npy", 1, F4_44, v, 16, 4), NULL);
  ck_assert_int_eq(last.rc, 0);
  good4x4(v);
  v[5] = 0.25, v[6] = 0.25; /* row 1: 0.5 + 0.25 on the diagonal, 0.25 above */
  v[4] = 0.5;
  expect_refused(write_npy("above.npy", 1, F4_44, v, 16, 4),
                 "row 1 sums to 0.750000");
  good4x4(v);
  v[3] = 0.5; /* row 0 sums to 1, and 0.5 sits above the diagonal */
  expect_refused(write_npy("above2.npy", 1, F4_44, v, 16, 4),
                 "row 0: nonzero above the diagonal (0.5 at column 3");
  good4x4(v);
  v[2] = -0.0, v[7] = 1e-4; /* not zero bits, but zero, or rounding */
  run(write_npy("negzero.npy", 1, F4_44, v, 16, 4), NULL);
  ck_assert_msg(last.rc == 0, "%s", last.err);
  good4x4(v);
  v[13] = NAN;
  expect_refused(write_npy("nan.npy", 1, F4_44, v, 16, 4),
                 "row 3: non-finite value nan at column 1");
  good4x4(v);
  v[11] = INFINITY;
  expect_refused(write_npy("inf.npy", 1, F4_44, v, 16, 4),
                 "row 2: non-finite value inf at column 3");
  good4x4(v);
  v[4] = 1.5, v[5] = -0.5;
  expect_refused(write_npy("neg.npy", 1, F4_44, v, 16, 4), "negative weight");
  /* 3-D: the message names the head; float16 too. */
  for (i = 0; i < 3; i++)
    good4x4(v + 16 * i);
  v[16 + 12] = 0.0; /* head 1, row 3 sums to 0.9 */
  expect_refused(write_npy("sum3d.npy", 2,
                           "{'descr': '<f2', 'fortran_order': False, "
                           "'shape': (3, 4, 4), }", v, 48, 2),
                 "head 1, row 3 sums to 0.89");
}
END_TEST

START_TEST(unreadable_traces_refused) {
  expect_refused(path_of("missing.npy"), "No such file");
  expect_refused(dir, "not a regular file");
}
END_TEST

/* ---- arguments ------------------------------------------------------------ */

static void expect_usage(const char *phrase) {
  ck_assert_msg(last.rc == 2, "exit %d, want 2", last.rc);
  ck_assert_msg(last.nout == 0, "printed %s", last.out);
  ck_assert_msg(strstr(last.err, phrase) != NULL, "'%s' lacks '%s'",
                last.err, phrase);
  ck_assert_msg(strchr(last.err, '\n') == last.err + last.nerr - 1,
                "not one line: '%s'", last.err);
}

START_TEST(bad_arguments_refused) {
  const char *f = write_trace("args.npy", 1, 4, 0, 8, uniform);

  run(NULL), expect_usage("no trace file given");
  run(f, f, NULL), expect_usage("one trace at a time");
  run(f, "--bogus", NULL), expect_usage("unknown option '--bogus'");
  run(f, "--budgets", NULL), expect_usage("--budgets needs a list");
  run(f, "--budgets", "32,x", NULL), expect_usage("'32,x' is not");
  run(f, "--budgets", "", NULL), expect_usage("is not");
  run(f, "--budgets", "32,", NULL), expect_usage("ends with a comma");
  run(f, "--budgets", "-3", NULL), expect_usage("is not");
  run(f, "--budgets", "0,8", NULL), expect_usage("budget 0 keeps nothing");
  run(f, "--budgets", "8,8", NULL), expect_usage("8 given twice");
  run(f, "--budgets", "4294967295", NULL), expect_usage("above the largest");
  run(f, "--budgets", "99999999999", NULL), expect_usage("integers up to");
  run(f, "--budgets", "8", "--sinks", "8", NULL),
      expect_usage("not below any budget");
  run(f, "--budgets", "2,4", "--sinks", "4,8", NULL),
      expect_usage("sinks < budget");
  run(f, "--sinks", "4,4", NULL), expect_usage("4 given twice");
  run(f, "--svg", NULL), expect_usage("--svg needs a file name");
  run(f, "--svg", "/nonexistent-dir/x.svg", NULL),
      expect_usage("cannot write /nonexistent-dir/x.svg");
  /* Arguments are judged before the trace is opened. */
  run(path_of("missing.npy"), "--budgets", "0", NULL),
      expect_usage("budget 0");
  run("--help", NULL);
  ck_assert_int_eq(last.rc, 0);
  ck_assert_ptr_nonnull(strstr(last.out, "usage: evictd-eval TRACE.npy"));
  ck_assert_uint_eq(last.nerr, 0);
}
END_TEST

/* ---- runner ------------------------------------------------------------- */

static Suite *input_suite(void) {
  Suite *s = suite_create("eval_input");
  TCase *bad = tcase_create("malformed");
  TCase *args = tcase_create("arguments");

  tcase_set_timeout(bad, 60);
  tcase_add_test(bad, good_4x4_is_accepted);
  tcase_add_test(bad, truncated_files_refused);
  tcase_add_test(bad, bad_magic_and_version_refused);
  tcase_add_test(bad, unsupported_dtypes_refused);
  tcase_add_test(bad, bad_shapes_refused);
  tcase_add_test(bad, bad_headers_refused);
  tcase_add_test(bad, bad_rows_refused);
  tcase_add_test(bad, unreadable_traces_refused);
  suite_add_tcase(s, bad);
  tcase_set_timeout(args, 60);
  tcase_add_test(args, bad_arguments_refused);
  suite_add_tcase(s, args);
  return s;
}

int main(void) {
  return harness_main(input_suite());
}
