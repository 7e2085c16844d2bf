/* API unit tests of the idle reaper (evd_api_reap) on a fake clock: never
 * early, always after the TTL, only the expired; part of build/test_api. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_harness.h"

/* ---- the idle reaper ---------------------------------------------------- */

START_TEST(reaper_never_early_always_after) {
  evd_config_t cfg;

  default_cfg(&cfg);
  cfg.idle_ttl = 2;
  start_with(&cfg);
  evd_api_set_clock(api, 1000000);
  expect_ok(PUT, "/session/a", NULL, 201, NULL);
  ck_assert_uint_eq(evd_api_reap(api), 0);
  evd_api_set_clock(api, 1001999); /* idle 1.999 s */
  ck_assert_uint_eq(evd_api_reap(api), 0);
  evd_api_set_clock(api, 1002000); /* idle exactly the TTL: not longer */
  ck_assert_uint_eq(evd_api_reap(api), 0);
  evd_api_set_clock(api, 1002099);
  ck_assert_uint_eq(evd_api_reap(api), 0);
  expect_ok(GET, "/session/a", NULL, 200, NULL); /* use refreshes: t=2.099 */
  evd_api_set_clock(api, 1004099);
  ck_assert_uint_eq(evd_api_reap(api), 0);
  evd_api_set_clock(api, 1004300); /* idle 2.2 s: reaped */
  ck_assert_uint_eq(evd_api_reap(api), 1);
  expect_error(GET, "/session/a", NULL, 404, "unknown_session");
  ck_assert_uint_eq(evd_api_reap(api), 0);

  /* Steps, evictions and identical PUTs count as use too. */
  expect_ok(PUT, "/session/b", NULL, 201, NULL);     /* t=4.3 */
  evd_api_set_clock(api, 1006000);
  expect_ok(POST, "/session/b/step", "{\"pos\":1}", 200, NULL); /* t=6.0 */
  evd_api_set_clock(api, 1007500);
  ck_assert_uint_eq(evd_api_reap(api), 0);
  expect_ok(POST, "/session/b/evict", NULL, 200, NULL); /* t=7.5 */
  evd_api_set_clock(api, 1009000);
  ck_assert_uint_eq(evd_api_reap(api), 0);
  expect_ok(PUT, "/session/b", NULL, 200, NULL); /* t=9.0 */
  evd_api_set_clock(api, 1010900);
  ck_assert_uint_eq(evd_api_reap(api), 0);
  evd_api_set_clock(api, 1011200);
  ck_assert_uint_eq(evd_api_reap(api), 1);
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 0);
  stop();
}
END_TEST

START_TEST(reaper_off_with_ttl_zero) {
  start(); /* idle_ttl 0 */
  evd_api_set_clock(api, 0);
  expect_ok(PUT, "/session/a", NULL, 201, NULL);
  evd_api_set_clock(api, UINT64_C(1) << 40);
  ck_assert_uint_eq(evd_api_reap(api), 0);
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), 1);
  stop();
}
END_TEST

static int expired(int i) {
  return i % 10000 == 1234; /* 10 of 100000, spread over the creation order */
}

START_TEST(reaper_takes_only_the_expired_among_many) {
  enum { N = 100000 };
  evd_config_t cfg;
  char path[64];
  int i;

  default_cfg(&cfg);
  cfg.max_sessions = N;
  cfg.idle_ttl = 1;
  start_with(&cfg);
  evd_api_set_clock(api, 50000);
  for (i = 0; i < N; i++) {
    snprintf(path, sizeof path, "/session/s%d", i);
    REQUIRE(req(PUT, path, "{\"budget\":1}") == 201, "PUT %s", path);
  }
  /* Half a second later every session but ten is used again, so that the
   * expired ones are not simply the first created. */
  evd_api_set_clock(api, 50500);
  for (i = 0; i < N; i++) {
    if (expired(i))
      continue;
    snprintf(path, sizeof path, "/session/s%d/step", i);
    REQUIRE(req(POST, path, "{\"pos\":1}") == 200, "POST %s", path);
  }
  evd_api_set_clock(api, 51000); /* ten idle 1.0 s: not yet */
  ck_assert_uint_eq(evd_api_reap(api), 0);
  evd_api_set_clock(api, 51100); /* ten idle 1.1 s, the rest 0.6 s */
  ck_assert_uint_eq(evd_api_reap(api), 10);
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), N - 10);
  /* Reaping again finds nothing, however often: it stops at the first
   * session still in use instead of walking the table. */
  for (i = 0; i < 1000; i++)
    REQUIRE(evd_api_reap(api) == 0, "reap %d found more", i);
  /* Later, a sample is used again; the expired ones are gone. */
  evd_api_set_clock(api, 55000);
  for (i = 0; i < N; i++) {
    snprintf(path, sizeof path, "/session/s%d", i);
    if (expired(i))
      expect_error(GET, path, NULL, 404, "unknown_session");
    else if (i % 997 == 0)
      REQUIRE(req(GET, path, NULL) == 200, "GET %s", path);
  }
  /* All but the sample expire together later. */
  evd_api_set_clock(api, 56000);
  ck_assert_uint_eq(evd_api_reap(api), N - 10 - (N / 997 + 1));
  ck_assert_uint_eq(evd_table_count(evd_api_table(api)), N / 997 + 1);
  stop();
}
END_TEST

void api_reaper_tests(TCase *reaper) {
  tcase_add_test(reaper, reaper_never_early_always_after);
  tcase_add_test(reaper, reaper_off_with_ttl_zero);
  tcase_add_test(reaper, reaper_takes_only_the_expired_among_many);
}
