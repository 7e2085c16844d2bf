/* What the "api" suite's files share: test_api.c (routes, the session life
 * cycle, the "defaults" case's fixture) and test_api_bodies.c (request
 * bodies and their validation errors). */
#ifndef EVICTD_TESTS_HTTP_TEST_API_H
#define EVICTD_TESTS_HTTP_TEST_API_H

#include "harness.h"

/* The daemon on its defaults, started afresh for each test of the
 * "defaults" case by test_api.c's fixture. One letter, as the tests name
 * it in nearly every line. */
extern ht_t T;

/* A step request for a single position, as text (a static buffer: valid
 * until the next call). */
const char *pos_body(long long p);

/* The view of a session that holds position 0 only. */
#define VIEW0(id, b, s)                                                     \
  "{\"id\":\"" id "\",\"budget\":" #b ",\"sinks\":" #s ",\"size\":1,"      \
  "\"newest\":0,\"kept\":[0],\"slots\":[0]}"

/* Adds test_api_bodies.c's tests to the "defaults" case, in its order. */
void api_add_body_tests(TCase *tc);

#endif
