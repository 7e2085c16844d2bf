/* The parts of build/test_session (test_session.c holds the suite, the
 * randomized run is in test_session_model.c) and the helpers they share. */
#ifndef EVICTD_TESTS_TEST_SESSION_H
#define EVICTD_TESTS_TEST_SESSION_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "error.h"
#include "session.h"

/* Check records the place of every passing ck_assert with a write(2); in
 * loops of 10^5 operations that would dominate the run time, so the hot
 * paths here use this, which costs nothing until it fails. */
#define REQUIRE(cond, ...)                                                     \
  do {                                                                         \
    if (!(cond))                                                               \
      ck_abort_msg(__VA_ARGS__);                                               \
  } while (0)

static inline evd_table_t *new_table(uint32_t max) {
  evd_table_t *t = NULL;

  ck_assert_int_eq(evd_table_new(&t, max, 1u << 20), 0);
  ck_assert_ptr_nonnull(t);
  ck_assert_uint_eq(evd_table_count(t), 0);
  ck_assert_ptr_null(evd_table_oldest(t));
  return t;
}

/* evd_table_add with lookahead 1 and no pages. */
static inline int add_n(evd_table_t *t, const char *id, size_t len,
                        uint32_t budget, uint32_t sinks, uint32_t now,
                        evd_session_t **out) {
  evd_session_config_t cfg = {budget, sinks, 1, 0};
  return evd_table_add(t, id, len, &cfg, now, out);
}

static inline evd_session_t *add(evd_table_t *t, const char *id,
                                 uint32_t budget, uint32_t sinks,
                                 uint32_t now) {
  evd_session_t *s = NULL;
  int err = add_n(t, id, strlen(id), budget, sinks, now, &s);

  ck_assert_msg(err == 0, "add %s: %s", id, evd_strerror(err));
  ck_assert_ptr_nonnull(s);
  return s;
}

static inline evd_session_t *find(evd_table_t *t, const char *id) {
  return evd_table_find(t, id, strlen(id));
}

/* Adds test_session_model.c's test to the case it is given. */
void session_model_tests(TCase *table);

#endif
