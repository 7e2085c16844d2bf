/* The API's error codes and their HTTP statuses, for the tests that check
 * an error answer: read from the daemon's own table (server/apierr.c, which
 * the program links) rather than copied, so that a new code cannot be
 * missing here (two copies once lacked journal_failed). */
#ifndef EVICTD_TESTS_CHECK_APIERR_H
#define EVICTD_TESTS_CHECK_APIERR_H

#include <string.h>

#include "apierr.h"

/* The status of an error code, or -1 when the daemon has no such code. */
static inline int evd_check_status_of(const char *code) {
  int e;

  for (e = EVD_AE_OK + 1; e < EVD_AE_COUNT; e++)
    if (strcmp(evd_apierr_code((evd_apierr_t)e), code) == 0)
      return evd_apierr_status((evd_apierr_t)e);
  return -1;
}

#endif
