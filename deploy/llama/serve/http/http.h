/* evictd-llama serve's transport: libmicrohttpd with a thread per
 * connection, request bodies, the routes the APIs register, the API key
 * and CORS as llama-server checks and sends them, and the bytes of every
 * answer (http.c: the door; send.h: answers, errors, event streams). It
 * knows no API: a route is a path, a method and a handler, and what a
 * handler keeps for its request is its own (call_t's state, freed by the
 * function it gives). */
#ifndef EVICTD_LLAMA_HTTP_H
#define EVICTD_LLAMA_HTTP_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "serve/http/send.h"

typedef struct http_s http_t;

typedef enum MHD_Result (*http_handler_t)(call_t *c);

enum {
  HTTP_KEYLESS = 1 /* answered without the API key (probes) */
};

/* A route: what an API file exports, a table ended by a NULL path. A path
 * that ends in "{name}" takes any one segment there (not empty, no '/'),
 * one that ends in "{*}" all the rest (perhaps nothing); the handler finds
 * it in call_t's tail. A path matches the first route added that takes it
 * and its method; a "{*}" route never makes another method's a 405. */
struct http_route_s {
  const char *path;
  const char *method;
  http_handler_t fn;
  unsigned flags;         /* HTTP_* */
  http_errors_t errors;   /* its errors' shape (NULL: OpenAI's), the 401
                             of a missing key included */
  const void *data;       /* the handler's (call_t's route->data) */
};

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

/* A header of the request, or NULL. */
const char *http_header(call_t *c, const char *name);

/* The body as a JSON object into *out (a new reference), or an answer
 * already sent (400 or 413) into *sent and -1. */
int http_json(call_t *c, json_t **out, enum MHD_Result *sent);

/* A query argument of the request's URL, or NULL. */
const char *http_arg(call_t *c, const char *name);

#endif
