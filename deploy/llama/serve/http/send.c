/* evictd-llama serve's answers (send.h): bytes with their content type,
 * JSON made with jansson, errors in one shape (a route's own, else
 * OpenAI's), event streams; every answer with the CORS headers
 * llama-server's flags ask for. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "serve/http/send.h"

/* Whether an Origin's host is localhost, 127.0.0.1 or ::1 (any port):
 * http or https, "://", the host ([::1] bracketed), then ":PORT" digits
 * or nothing, then nothing or a path. */
static bool origin_is_local(const char *o) {
  const char *h = strncmp(o, "http://", 7) == 0    ? o + 7
                  : strncmp(o, "https://", 8) == 0 ? o + 8
                                                   : NULL;
  if (h == NULL)
    return false;
  static const char *const hosts[] = {"localhost", "127.0.0.1", "[::1]"};
  for (size_t i = 0; i < 3; i++) {
    size_t n = strlen(hosts[i]);
    if (strncmp(h, hosts[i], n) != 0)
      continue;
    const char *p = h + n;
    if (*p == ':') {
      size_t d = strspn(p + 1, "0123456789");
      if (d == 0)
        return false;
      p += 1 + d;
    }
    return *p == '\0' || *p == '/';
  }
  return false;
}

/* Whether origin is one of list's comma-separated origins (blanks around
 * them ignored). */
static bool origin_listed(const char *list, const char *origin) {
  size_t n = strlen(origin);
  for (const char *p = list; *p;) {
    p += strspn(p, " \t,");
    size_t len = strcspn(p, ",");
    size_t l = len;
    while (l > 0 && (p[l - 1] == ' ' || p[l - 1] == '\t'))
      l--;
    if (l > 0 && l == n && strncmp(p, origin, n) == 0)
      return true;
    p += len;
  }
  return false;
}

void http_cors(const call_t *c, struct MHD_Response *rs) {
  const http_opts_t *o = c->opts;
  const char *origins = o->cors_origins ? o->cors_origins : "*";
  bool creds = !o->no_cors_credentials;
  const char *origin = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND,
                                                   "Origin");
  const char *allow;
  bool varies = true;
  if (creds && strcmp(origins, "*") == 0) /* any, credentials too */
    allow = origin;
  else if (strcmp(origins, "localhost") == 0)
    allow = origin != NULL && origin_is_local(origin) ? origin : NULL;
  else if (strchr(origins, ',') != NULL) /* one header names one origin */
    allow = origin != NULL && origin_listed(origins, origin) ? origin : NULL;
  else {
    allow = origins;
    varies = false;
  }
  if (allow != NULL && *allow != '\0') {
    MHD_add_response_header(rs, "Access-Control-Allow-Origin", allow);
    /* A browser shows a credentialed answer only when it says so. */
    if (creds && strcmp(allow, "*") != 0)
      MHD_add_response_header(rs, "Access-Control-Allow-Credentials",
                              "true");
  }
  if (varies)
    MHD_add_response_header(rs, MHD_HTTP_HEADER_VARY, "Origin");
}

enum MHD_Result http_send(call_t *c, unsigned status, const char *type,
                          char *body, size_t len) {
  return http_send_header(c, status, type, body, len, NULL, NULL);
}

/* Queues rs (taken) with the headers every answer has, and list's. */
static enum MHD_Result queue(call_t *c, unsigned status, const char *type,
                             struct MHD_Response *rs,
                             const http_header_t *list) {
  if (type != NULL)
    MHD_add_response_header(rs, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  for (size_t i = 0; list != NULL && list[i].name != NULL; i++)
    MHD_add_response_header(rs, list[i].name, list[i].value);
  if (status == 503)
    MHD_add_response_header(rs, MHD_HTTP_HEADER_RETRY_AFTER, "1");
  if (status == 405 && c->allow != NULL)
    MHD_add_response_header(rs, MHD_HTTP_HEADER_ALLOW, c->allow);
  http_cors(c, rs);
  enum MHD_Result ok = MHD_queue_response(c->conn, status, rs);
  MHD_destroy_response(rs);
  return ok;
}

enum MHD_Result http_send_header(call_t *c, unsigned status,
                                 const char *type, char *body, size_t len,
                                 const char *name, const char *value) {
  struct MHD_Response *rs = MHD_create_response_from_buffer(
      len, body, MHD_RESPMEM_MUST_FREE);
  if (rs == NULL) {
    free(body);
    return MHD_NO;
  }
  const http_header_t list[] = {{name, value}, {NULL, NULL}};
  return queue(c, status, type, rs, list);
}

enum MHD_Result http_send_static(call_t *c, unsigned status, const char *type,
                                 const void *body, size_t len,
                                 const http_header_t *list) {
  struct MHD_Response *rs = MHD_create_response_from_buffer(
      len, (void *)body, MHD_RESPMEM_PERSISTENT);
  return rs != NULL ? queue(c, status, type, rs, list) : MHD_NO;
}

enum MHD_Result http_send_fd(call_t *c, unsigned status, const char *type,
                             int fd, size_t size, const http_header_t *list) {
  struct MHD_Response *rs = MHD_create_response_from_fd(size, fd);
  if (rs == NULL) {
    close(fd);
    return MHD_NO;
  }
  return queue(c, status, type, rs, list);
}

enum MHD_Result http_send_json(call_t *c, unsigned status, json_t *j) {
  char *s = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  return s == NULL ? MHD_NO
                   : http_send(c, status, "application/json", s, strlen(s));
}

enum MHD_Result http_send_stream(call_t *c, MHD_ContentReaderCallback reader,
                                 void *cls) {
  struct MHD_Response *rs = MHD_create_response_from_callback(
      MHD_SIZE_UNKNOWN, 4096, reader, cls, NULL);
  const http_header_t list[] = {{MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache"},
                                {NULL, NULL}};
  return rs != NULL ? queue(c, 200, "text/event-stream", rs, list) : MHD_NO;
}

/* Makes s valid UTF-8 in place: each byte that begins no valid sequence
 * becomes '?'. A message may quote what a client sent (a percent-decoded
 * path is any bytes) and may have been cut mid-character by its buffer,
 * and jansson refuses a string that is not UTF-8: the client would get no
 * answer at all. */
static void utf8_fix(char *s) {
  size_t n = strlen(s);
  for (size_t i = 0; i < n;) {
    size_t k = evd_utf8_len((const unsigned char *)s + i, n - i);
    if (k == 0) {
      s[i] = '?';
      k = 1;
    }
    i += k;
  }
}

json_t *http_error_json(unsigned status, const char *code, const char *param,
                        const char *message) {
  char msg[640];
  snprintf(msg, sizeof(msg), "%s", message);
  utf8_fix(msg);
  const char *type = status == 401 ? "authentication_error"
                   : status == 404 ? "not_found_error"
                   : status == 403 ? "feature_disabled"
                   : status == 501 ? "not_supported_error"
                   : status < 500 ? "invalid_request_error" : "server_error";
  return json_pack("{s:{s:s,s:s,s:s?,s:s}}", "error", "message", msg,
                   "type", type, "param", param, "code", code);
}

enum MHD_Result http_error(call_t *c, unsigned status, const char *code,
                           const char *param, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  return http_send_json(c, status, (c->errors ? c->errors : http_error_json)(
                                       status, code, param, msg));
}

bool http_peer_gone(const call_t *c) {
  if (c->fd < 0)
    return false;
  char b;
  ssize_t n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                    errno != EINTR);
}
