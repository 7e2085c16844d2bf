/* The one main() of every Check program (tests/unit, tests/http,
 * tests/client, tests/eval): runs the suites it is given, honouring Check's
 * CK_RUN_SUITE, CK_RUN_CASE and CK_FORK variables, and exits 0 only when
 * every test passed. tests/README.md says how to run one suite or case. */
#ifndef EVICTD_TESTS_CHECK_MAIN_H
#define EVICTD_TESTS_CHECK_MAIN_H

#include <check.h>
#include <stddef.h>
#include <stdlib.h>

/* Runs suites[0..n) in one runner (CK_FORK_GETENV: Check's default, the
 * CK_FORK variable decides; CK_NOFORK for a program whose tests must share
 * the process, such as the allocation-failure wrappers of test_oom). */
static inline int evd_check_run(Suite *const *suites, size_t n,
                                enum fork_status fork) {
  SRunner *sr = srunner_create(suites[0]);
  size_t i;
  int failed;

  for (i = 1; i < n; i++)
    srunner_add_suite(sr, suites[i]);
  if (fork != CK_FORK_GETENV)
    srunner_set_fork_status(sr, fork);
  srunner_run_all(sr, CK_ENV); /* CK_VERBOSITY, default normal */
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* main() for a program of these suites: EVD_CHECK_MAIN(a_suite(), ...). */
#define EVD_CHECK_MAIN(...)                                                  \
  int main(void) {                                                           \
    Suite *suites_[] = {__VA_ARGS__};                                        \
    return evd_check_run(suites_, sizeof suites_ / sizeof suites_[0],        \
                         CK_FORK_GETENV);                                    \
  }

#endif
