/* Answers of the C client's reader (deploy/clients/c/reader.h) written
 * back as JSON, compared field by field, and checked against the
 * contract's invariants, by code that shares nothing with the reader:
 * used by the reader's tests (reader.c) and its fuzz target
 * (tests/fuzz/fuzz_answer.c). */
#ifndef EVICTD_TESTS_CLIENT_REWRITE_H
#define EVICTD_TESTS_CLIENT_REWRITE_H

#include <stdbool.h>
#include <stddef.h>

#include "evictd/client.h"

/* A growing text; `failed` once memory ran out (the text is then cut). */
typedef struct {
  char *p;
  size_t len, cap;
  bool failed;
} rw_buf_t;

void rw_free(rw_buf_t *b);

/* Each appends the struct as the daemon writes it (every list, replayed
 * only when true; an error's newest only when >= 0, its status only when
 * not 0). */
void rw_answer(rw_buf_t *b, const evd_answer_t *a);
void rw_view(rw_buf_t *b, const evd_view_t *v);
void rw_batch(rw_buf_t *b, const evd_batch_result_t *r, size_t n);
void rw_error(rw_buf_t *b, const evd_client_err_t *e);

/* NULL when x and y hold the same values, else the first field that
 * differs (lists by content, strings by their bytes; a view's created is
 * not the body's and is not compared). */
const char *rw_answer_diff(const evd_answer_t *x, const evd_answer_t *y);
const char *rw_view_diff(const evd_view_t *x, const evd_view_t *y);
const char *rw_error_diff(const evd_client_err_t *x,
                          const evd_client_err_t *y);
const char *rw_batch_diff(const evd_batch_result_t *x,
                          const evd_batch_result_t *y, size_t n);

/* NULL when the struct keeps the contract's invariants (reader.h lists
 * them), else the one it breaks. */
const char *rw_answer_broken(const evd_answer_t *a);
const char *rw_view_broken(const evd_view_t *v);
const char *rw_error_broken(const evd_client_err_t *e, bool item);
const char *rw_batch_broken(const evd_batch_result_t *r, size_t n);

#endif
