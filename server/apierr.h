/* The API's error vocabulary: each error has one HTTP status, one
 * snake_case code and a default message, kept in one table, and one writer
 * turns it into the JSON error object every error response carries. */
#ifndef EVICTD_APIERR_H
#define EVICTD_APIERR_H

#include <stdint.h>

#include "buf.h"

typedef enum evd_apierr_e {
  EVD_AE_OK = 0, /* no error */
  EVD_AE_INVALID_JSON,
  EVD_AE_INVALID_FIELD,
  EVD_AE_INVALID_SESSION_ID,
  EVD_AE_INVALID_BUDGET,
  EVD_AE_INVALID_SINKS,
  EVD_AE_INVALID_LOOKAHEAD,
  EVD_AE_INVALID_PAGE_SIZE,
  EVD_AE_INVALID_POSITION,
  EVD_AE_TOO_MANY_POSITIONS,
  EVD_AE_TOO_MANY_STEPS,
  EVD_AE_TOO_DEEP,
  EVD_AE_UNAUTHORIZED,
  EVD_AE_UNKNOWN_SESSION,
  EVD_AE_NOT_FOUND,
  EVD_AE_METHOD_NOT_ALLOWED,
  EVD_AE_SESSION_EXISTS,
  EVD_AE_STALE_POSITION,
  EVD_AE_TENTATIVE_PENDING,
  EVD_AE_REPLAY_UNAVAILABLE,
  EVD_AE_BODY_TOO_LARGE,
  EVD_AE_SESSION_LIMIT,
  EVD_AE_OUT_OF_MEMORY,
  EVD_AE_JOURNAL_FAILED,
  EVD_AE_INVALID_STATE,
  EVD_AE_DIVERGED,
  EVD_AE_COUNT
} evd_apierr_t;

/* The HTTP status of an error. */
int evd_apierr_status(evd_apierr_t e);

/* The snake_case code of an error. */
const char *evd_apierr_code(evd_apierr_t e);

/* Appends {"code":...,"message":...} fields of the error object (without
 * braces) to `out`: `message` replaces the default one when not NULL. */
void evd_apierr_fields(evd_buf_t *out, evd_apierr_t e, const char *message);

/* Appends a whole error body: {"error":{"code":...,"message":...}}. */
void evd_apierr_body(evd_buf_t *out, evd_apierr_t e, const char *message);

#endif
