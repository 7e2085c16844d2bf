/* The bottom of the C client: its grow-only buffers, the one place a
 * failure of its own is recorded (evd_client_error), return codes' and
 * methods' names, and the counters. Every other file of the client may use
 * it; it uses none of them. */
#include "client_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int evd__cbuf_reserve(evd__cbuf_t *b, size_t extra) {
  size_t cap;
  char *p;

  if (b->cap - b->len >= extra)
    return 0;
  cap = b->cap ? b->cap : 256;
  while (cap - b->len < extra) {
    if (cap > SIZE_MAX / 2)
      return -1;
    cap *= 2;
  }
  if ((p = realloc(b->p, cap)) == NULL)
    return -1;
  b->p = p;
  b->cap = cap;
  return 0;
}

int evd__client_fail(evd_client_t *c, int rc, const char *code,
                     const char *fmt, ...) {
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(c->err_msg, sizeof c->err_msg, fmt, ap);
  va_end(ap);
  snprintf(c->err_code, sizeof c->err_code, "%s", code);
  c->err.rc = rc;
  c->err.status = rc == EVD_CLIENT_EPROTO ? (int)c->status : 0;
  c->err.code = c->err_code;
  c->err.message = c->err_msg;
  c->err.newest = -1;
  return rc;
}

int evd__einval(evd_client_t *c, const char *what) {
  return evd__client_fail(c, EVD_CLIENT_EINVAL, "invalid_argument", "%s",
                          what);
}

int evd__enomem(evd_client_t *c) {
  return evd__client_fail(c, EVD_CLIENT_ENOMEM, "out_of_memory",
                          "The client could not allocate memory.");
}

const char *evd__method_name(evd__method_t m) {
  static const char *const names[] = {"GET", "POST", "PUT", "DELETE"};
  return names[m];
}

const char *evd_client_strerror(int rc) {
  switch (rc) {
  case EVD_CLIENT_OK: return "success";
  case EVD_CLIENT_EAPI: return "the daemon answered with an error";
  case EVD_CLIENT_ECONNECT: return "no connection to the daemon";
  case EVD_CLIENT_ETIMEOUT: return "no answer within the timeout";
  case EVD_CLIENT_EPROTO: return "an answer that is not the contract's";
  case EVD_CLIENT_EINVAL: return "a bad argument";
  case EVD_CLIENT_ENOMEM: return "out of memory";
  default: return "unknown error";
  }
}

const evd_client_err_t *evd_client_error(const evd_client_t *c) {
  return &c->err;
}

void evd_client_stats(const evd_client_t *c, evd_client_stats_t *out) {
  *out = c->stats;
}
