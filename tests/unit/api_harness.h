/* The fake client of the API unit tests (build/test_api, several files):
 * requests through evd_api_handle without sockets, each answer checked for
 * well-formed JSON and a well-formed error object. */
#ifndef EVICTD_TESTS_API_HARNESS_H
#define EVICTD_TESTS_API_HARNESS_H

#include <check.h>
#include <jansson.h>
#include <stddef.h>

#include "api.h"
#include "error.h"
#include "replay.h"

enum { GET = EVD_M_GET, HEAD = EVD_M_HEAD, PUT = EVD_M_PUT, POST = EVD_M_POST,
       DEL = EVD_M_DELETE, OTHER = EVD_M_OTHER };

/* Check records the place of every passing ck_assert with a write(2); in
 * loops of 10^5 operations that would dominate the run time, so the hot
 * paths here use this, which costs nothing until it fails. */
#define REQUIRE(cond, ...)                                                     \
  do {                                                                         \
    if (!(cond))                                                               \
      ck_abort_msg(__VA_ARGS__);                                               \
  } while (0)

/* The state of the one client, shared by the files of test_api: start()
 * makes it, every request replaces the last answer, stop() frees it. */
extern evd_api_t *api;
extern evd_buf_t out;
extern evd_reply_t reply;
extern json_t *body;     /* the last answer, parsed; NULL for 204 */
extern const char *auth; /* Authorization header to send, or NULL */

/* Checks an error object: code, message and (in a batch) status, and that
 * the code belongs to that status. Returns the code. */
const char *check_error_object(json_t *e, int status, int in_batch);

/* A fresh API with `cfg`, or with default_cfg's small limits (start). */
void start_with(const evd_config_t *cfg);
void default_cfg(evd_config_t *cfg);
void start(void);
void stop(void);

/* Sends one request and checks the answer's form. Returns the status. */
int req_n(int method, const char *path, const char *b, size_t blen);
int req(int method, const char *path, const char *b);
/* The last answer's error code and message. */
const char *error_code(void);
const char *error_message(void);

/* Sends a request that must fail with `status` and `code`. */
void expect_error_n(int method, const char *path, const char *b, size_t blen,
                    int status, const char *code);
void expect_error(int method, const char *path, const char *b, int status,
                  const char *code);
/* Sends a request that must succeed with `status` and an answer equal (as
 * JSON, any key order) to `want` (NULL: any answer). */
void expect_ok(int method, const char *path, const char *b, int status,
               const char *want);

/* A session's view as compact JSON text (for "nothing changed" checks),
 * or "-" when it does not exist. The caller frees it. */
char *view_of(const char *id);
/* Fails unless the session's view is still `before`. */
void expect_view(const char *id, const char *before);

/* The other files' tests, each adding its own to the case it is given in
 * the order test_api.c lists them. */
void api_step_tests(TCase *ops);    /* test_api_step.c */
void api_vector_tests(TCase *ops);  /* test_api_vectors.c */
void api_engine_tests(TCase *ops);  /* test_api_engine.c */
void api_adopt_tests(TCase *ops);   /* test_api_adopt.c */
void api_reaper_tests(TCase *reaper); /* test_api_reaper.c */

#endif
