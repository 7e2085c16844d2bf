/* evictd-llama serve's transport: libmicrohttpd with a thread per
 * connection, request bodies, the routes the APIs register, the API key
 * and CORS as llama-server checks and sends them, and the bytes of every
 * answer (http.c: the door; send.c: answers, errors, event streams). It
 * knows no API: a route is a path, a method and a handler, and what a
 * handler keeps for its request is its own (call_t's state, freed by the
 * function it gives). */
#ifndef EVICTD_LLAMA_HTTP_H
#define EVICTD_LLAMA_HTTP_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "buf.h"

typedef struct http_s http_t;
typedef struct call_s call_t;

/* An error's JSON body (a new reference, or NULL when out of memory):
 * the status, a code, the field at fault (or NULL) and a sentence. */
typedef json_t *(*http_errors_t)(unsigned status, const char *code,
                                 const char *param, const char *message);

/* What the door checks and sends on every answer, as llama-server's
 * flags say it. */
typedef struct http_opts_s {
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
  const char *tail;       /* a prefix route's: the path past its prefix */
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

typedef enum MHD_Result (*http_handler_t)(call_t *c);

enum {
  HTTP_KEYLESS = 1, /* answered without the API key (probes) */
  HTTP_PREFIX = 2   /* path is a prefix, call_t's tail the rest (not
                       empty, no '/') */
};

/* A route: what an API file exports, a table ended by a NULL path. */
typedef struct http_route_s {
  const char *path;
  const char *method;
  http_handler_t fn;
  unsigned flags;         /* HTTP_* */
  http_errors_t errors;   /* its errors' shape (NULL: OpenAI's), the 401
                             of a missing key included */
} http_route_t;

/* ---- http.c: the door -------------------------------------------------- */

/* A transport with no routes yet; o (borrowed) and ctx (borrowed, every
 * call's ctx) must outlive it. NULL when out of memory. */
http_t *http_new(const http_opts_t *o, void *ctx);

/* Adds a table of routes (borrowed, ended by a NULL path), before
 * http_start: a path matches the first route of its method. 0, or -1
 * when out of memory. */
int http_add(http_t *h, const http_route_t *routes);

/* Starts libmicrohttpd on the listening socket fd. 0, or -1. */
int http_start(http_t *h, int fd);

/* Takes no new connection from now on (the listening socket closed). */
void http_quiesce(http_t *h);

/* Stops: the connections' last answers sent (2 s at most: an idle
 * keep-alive connection would wait for its timeout), then their threads
 * gone; frees h. */
void http_stop(http_t *h);

/* The body as a JSON object into *out (a new reference), or an answer
 * already sent (400 or 413) into *sent and -1. */
int http_json(call_t *c, json_t **out, enum MHD_Result *sent);

/* A query argument of the request's URL, or NULL. */
const char *http_arg(call_t *c, const char *name);

/* ---- send.c: answers --------------------------------------------------- */

/* body[0..len) as it is (taken: malloc'd), of content type type. */
enum MHD_Result http_send(call_t *c, unsigned status, const char *type,
                          char *body, size_t len);
/* http_send with one more header, name: value (both borrowed). */
enum MHD_Result http_send_header(call_t *c, unsigned status,
                                 const char *type, char *body, size_t len,
                                 const char *name, const char *value);
/* j (taken) as JSON. */
enum MHD_Result http_send_json(call_t *c, unsigned status, json_t *j);

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
