/* A request of serve's transport as its handler sees it, and its answers
 * (send.c): bytes with their content type, JSON, errors in one shape (the
 * route's own, else OpenAI's), event streams, each with the CORS headers
 * llama-server's flags ask for. http.h is the door that makes the calls. */
#ifndef EVICTD_LLAMA_HTTP_SEND_H
#define EVICTD_LLAMA_HTTP_SEND_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "buf.h"

typedef struct call_s call_t;

/* An error's JSON body (a new reference, or NULL when out of memory):
 * the status, a code, the field at fault (or NULL) and a sentence. */
typedef json_t *(*http_errors_t)(unsigned status, const char *code,
                                 const char *param, const char *message);

/* What the door checks and sends on every answer, as llama-server's
 * flags say it. */
typedef struct http_route_s http_route_t;

typedef struct http_opts_s {
  const char *prefix;     /* every path under it (--api-prefix), or NULL */
  char *const *api_keys;  /* NULL-terminated, or NULL: none asked */
  const char *cors_origins;  /* NULL: "*"; "localhost"; one or a list */
  const char *cors_methods;  /* NULL: "GET, POST, DELETE, OPTIONS" */
  const char *cors_headers;  /* NULL: "*" */
  bool no_cors_credentials;
} http_opts_t;

/* One request in flight, on its connection's thread. */
struct call_s {
  struct MHD_Connection *conn;
  const http_opts_t *opts; /* the transport's (CORS) */
  void *ctx;              /* the server's (http_new's ctx), borrowed */
  const http_route_t *route; /* the route that answers it */
  const char *tail;       /* a route's "{name}" or "{*}" part, or NULL */
  evd_buf_t body;
  bool too_large;
  int fd;                 /* the client's socket, to notice it leave */
  const char *allow;      /* a 405's Allow header: the path's methods */
  http_errors_t errors;   /* the route's error shape, or NULL: OpenAI's */
  /* What the route's handler keeps for the request, freed by state_free
   * when the request is over (completed: answered whole, or the client
   * went away first). */
  void *state;
  void (*state_free)(void *state, bool completed);
};

/* body[0..len) as it is (taken: malloc'd), of content type type. */
enum MHD_Result http_send(call_t *c, unsigned status, const char *type,
                          char *body, size_t len);
/* http_send with one more header, name: value (both borrowed). */
enum MHD_Result http_send_header(call_t *c, unsigned status,
                                 const char *type, char *body, size_t len,
                                 const char *name, const char *value);
/* j (taken) as JSON. */
enum MHD_Result http_send_json(call_t *c, unsigned status, json_t *j);

/* A header of an answer. */
typedef struct http_header_s {
  const char *name, *value;
} http_header_t;

/* body[0..len) (borrowed: it must outlive the process, as a static or an
 * embedded file's bytes do), with the headers of list (ended by a NULL
 * name; may be NULL). */
enum MHD_Result http_send_static(call_t *c, unsigned status, const char *type,
                                 const void *body, size_t len,
                                 const http_header_t *list);

/* A file's bytes, fd (taken: closed when sent) of size bytes, with the
 * headers of list. */
enum MHD_Result http_send_fd(call_t *c, unsigned status, const char *type,
                             int fd, size_t size, const http_header_t *list);

/* An event stream (text/event-stream, not cached): its bytes from
 * reader(cls, ...) as libmicrohttpd asks for them, each call on the
 * connection's thread. */
enum MHD_Result http_send_stream(call_t *c, MHD_ContentReaderCallback reader,
                                 void *cls);

/* The one shape of every error but a route's own: {"error": {"message",
 * "type", "param", "code"}} (OpenAI's), type from the status; param may
 * be NULL; the message made valid UTF-8. */
json_t *http_error_json(unsigned status, const char *code, const char *param,
                        const char *message);

/* Sends an error in the shape of the call's route (c->errors, else
 * OpenAI's); a 503 says when to try again (Retry-After). */
enum MHD_Result http_error(call_t *c, unsigned status, const char *code,
                           const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Adds the CORS headers (--cors-origins, --cors-credentials, as
 * llama-server sends them) to an answer of c's request; every answer
 * above has them. */
void http_cors(const call_t *c, struct MHD_Response *rs);

/* Whether the client closed its side (or its socket failed). */
bool http_peer_gone(const call_t *c);

#endif
