/* evictd-llama serve's door to libmicrohttpd (http.h): a thread per
 * connection (a completion's thread waits on its task while the engine
 * decodes; connections are few, one per request in flight, so a thread
 * each costs little next to the model), request bodies, the routes the
 * APIs registered, the API key as llama-server checks it, a browser's
 * preflight, and the end of a request (its handler's state freed). */
#include "serve/http/http.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/grow.h"

#define BODY_MAX (1u << 20)

struct http_s {
  const http_opts_t *o;
  void *ctx;
  const http_route_t **routes; /* every table's, in the order added */
  size_t n, cap;
  struct MHD_Daemon *d;
  MHD_socket listening;   /* taken back by http_quiesce */
};

http_t *http_new(const http_opts_t *o, void *ctx) {
  http_t *h = calloc(1, sizeof(*h));
  if (h != NULL) {
    h->o = o;
    h->ctx = ctx;
    h->listening = MHD_INVALID_SOCKET;
  }
  return h;
}

int http_add(http_t *h, const http_route_t *routes) {
  for (const http_route_t *r = routes; r->path != NULL; r++) {
    if (grow(&h->routes, &h->cap, h->n + 1, sizeof(*h->routes)) != 0)
      return -1;
    h->routes[h->n++] = r;
  }
  return 0;
}

/* Whether url takes route r's path: the same, or, for a path that ends
 * in "{name}", what comes before it then one segment, or, for one that
 * ends in "{*}", what comes before it then anything (*tail: that part).
 * *rest: r takes any rest ("{*}"). */
static bool matches(const http_route_t *r, const char *url,
                    const char **tail, bool *rest) {
  const char *brace = strrchr(r->path, '{');
  *tail = NULL;
  *rest = false;
  if (brace == NULL)
    return strcmp(url, r->path) == 0;
  size_t n = (size_t)(brace - r->path);
  if (strncmp(url, r->path, n) != 0)
    return false;
  if (strcmp(brace, "{*}") == 0) {
    *rest = true;
    *tail = url + n;
    return true;
  }
  if (url[n] == '\0' || strchr(url + n, '/') != NULL)
    return false;
  *tail = url + n;
  return true;
}

/* The route of url for method; else NULL, with *any the first route of
 * url under another method (or NULL: no such path). */
static const http_route_t *route_of(const http_t *h, const char *url,
                                    const char *method, const char **tail,
                                    const http_route_t **any) {
  *any = NULL;
  for (size_t i = 0; i < h->n; i++) {
    const char *t;
    bool rest;
    /* A route of any rest ("{*}", --path's) never takes a path that a
     * route of its own has under another method (that is a 405). */
    if (!matches(h->routes[i], url, &t, &rest) || (rest && *any != NULL))
      continue;
    if (strcmp(method, h->routes[i]->method) == 0) {
      *tail = t;
      return h->routes[i];
    }
    if (*any == NULL && !rest)
      *any = h->routes[i];
  }
  return NULL;
}

/* A 405 (Allow: the methods the path takes) or a 404 that lists the
 * paths there are. */
static enum MHD_Result no_route(call_t *c, const http_t *h, const char *url,
                                const http_route_t *any) {
  char list[1024];
  size_t at = 0;
  list[0] = '\0';
  if (any != NULL) {
    for (size_t i = 0; i < h->n && at < sizeof(list); i++) {
      const char *t;
      bool rest;
      if (matches(h->routes[i], url, &t, &rest) && !rest)
        at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%s",
                               at > 0 ? ", " : "", h->routes[i]->method);
    }
    c->allow = list;
    return http_error(c, 405, "method_not_allowed", NULL, "%s %s", list,
                      any->path);
  }
  for (size_t i = 0; i < h->n && at < sizeof(list); i++)
    at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%s %s",
                           at > 0 ? ", " : "", h->routes[i]->method,
                           h->routes[i]->path);
  return http_error(c, 404, "not_found", NULL, "no such path: %.64s (%s)",
                    url, list);
}

int http_json(call_t *c, json_t **out, enum MHD_Result *sent) {
  json_error_t je;
  if (c->too_large) {
    *sent = http_error(c, 413, "body_too_large", NULL, "the request body "
                       "is over %u bytes", BODY_MAX);
    return -1;
  }
  json_t *j = json_loadb(c->body.data ? c->body.data : "", c->body.len, 0,
                         &je);
  if (j == NULL || !json_is_object(j)) {
    *sent = http_error(c, 400, "invalid_json", NULL, "the body is not a "
                       "JSON object%s%s", j ? "" : ": ", j ? "" : je.text);
    json_decref(j);
    return -1;
  }
  *out = j;
  return 0;
}

const char *http_header(call_t *c, const char *name) {
  return MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, name);
}

const char *http_arg(call_t *c, const char *name) {
  return MHD_lookup_connection_value(c->conn, MHD_GET_ARGUMENT_KIND, name);
}

/* Appends an upload's piece to the body (beyond BODY_MAX it is only
 * counted as too large); 0 or -1. */
static int add_body(call_t *c, const char *data, size_t n) {
  if (c->too_large || c->body.len + n > BODY_MAX) {
    c->too_large = true;
    return 0;
  }
  evd_buf_add(&c->body, data, n);
  return c->body.oom ? -1 : 0;
}

/* Whether a key given is one of the server's (--api-key's, and
 * --api-key-file's), each compared in time independent of where they
 * differ. */
static bool key_is(char *const *keys, const char *given) {
  bool ok = false;
  for (size_t k = 0; keys[k] != NULL; k++) {
    const char *key = keys[k];
    size_t n = strlen(key), m = strlen(given);
    unsigned char diff = n != m;
    for (size_t i = 0; i < n; i++)
      diff |= (unsigned char)(key[i] ^ (i < m ? given[i] : 0));
    ok |= diff == 0;
  }
  return ok;
}

/* Whether a request may pass: no --api-key, or its key is one of the
 * server's, or the route is a probe's (/health). The key, as llama-server
 * takes it: Authorization, "Bearer KEY" (or KEY alone), else X-Api-Key
 * (Anthropic's header). */
static bool allowed(call_t *c, const http_route_t *r) {
  char *const *keys = c->opts->api_keys;
  if (keys == NULL || (r != NULL && (r->flags & HTTP_KEYLESS)))
    return true;
  const char *auth = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_AUTHORIZATION);
  if (auth == NULL || *auth == '\0')
    auth = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND,
                                       "X-Api-Key");
  if (auth == NULL)
    return false;
  if (strncmp(auth, "Bearer ", 7) == 0)
    auth += 7;
  return key_is(keys, auth);
}

/* A preflight (any OPTIONS request, any path): 200, no body, what a
 * browser may send; answered before the API key is asked for, since
 * browsers send none with it. */
static enum MHD_Result preflight(call_t *c) {
  const http_opts_t *o = c->opts;
  struct MHD_Response *rs = MHD_create_response_from_buffer(
      0, (void *)"", MHD_RESPMEM_PERSISTENT);
  if (rs == NULL)
    return MHD_NO;
  http_cors(c, rs);
  if (MHD_get_response_header(rs, "Access-Control-Allow-Credentials") ==
      NULL)
    MHD_add_response_header(rs, "Access-Control-Allow-Credentials",
                            o->no_cors_credentials ? "false" : "true");
  MHD_add_response_header(rs, "Access-Control-Allow-Methods",
                          o->cors_methods ? o->cors_methods
                                          : "GET, POST, DELETE, OPTIONS");
  MHD_add_response_header(rs, "Access-Control-Allow-Headers",
                          o->cors_headers ? o->cors_headers : "*");
  MHD_add_response_header(rs, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html");
  enum MHD_Result ok = MHD_queue_response(c->conn, 200, rs);
  MHD_destroy_response(rs);
  return ok;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn,
                               const char *url, const char *method,
                               const char *version, const char *upload,
                               size_t *upload_size, void **ctx) {
  (void)version;
  http_t *h = cls;
  call_t *c = *ctx;
  if (c == NULL) {
    if ((c = calloc(1, sizeof(*c))) == NULL)
      return MHD_NO;
    c->conn = conn;
    c->opts = h->o;
    c->ctx = h->ctx;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    c->fd = ci != NULL ? ci->connect_fd : -1;
    *ctx = c;
    return MHD_YES;
  }
  if (*upload_size > 0) {
    size_t n = *upload_size;
    *upload_size = 0;
    return add_body(c, upload, n) == 0 ? MHD_YES : MHD_NO;
  }
  if (strcmp(method, "OPTIONS") == 0)
    return preflight(c);
  /* --api-prefix: every route under it, as llama-server registers them;
   * the prefix alone is its "/". */
  size_t pl = h->o->prefix != NULL ? strlen(h->o->prefix) : 0;
  if (pl > 0 && (strncmp(url, h->o->prefix, pl) != 0 ||
                 (url[pl] != '\0' && url[pl] != '/')))
    return http_error(c, 404, "not_found", NULL, "no such path: %.64s "
                      "(every path is under %s)", url, h->o->prefix);
  url = url[pl] == '\0' ? "/" : url + pl;
  const http_route_t *any, *r = route_of(h, url, method, &c->tail, &any);
  c->route = r;
  /* A route answers in its own error shape, the 401 too. */
  c->errors = r != NULL ? r->errors : any != NULL ? any->errors : NULL;
  if (!allowed(c, r != NULL ? r : any))
    return http_error(c, 401, "invalid_api_key", NULL, "no valid API key: "
                      "send 'Authorization: Bearer KEY' or 'x-api-key: KEY' "
                      "with the server's --api-key");
  return r != NULL ? r->fn(c) : no_route(c, h, url, any);
}

/* The request is over: complete, or the client went away mid-way (a
 * task's state then cancels it). */
static void completed(void *cls, struct MHD_Connection *conn, void **ctx,
                      enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)conn;
  call_t *c = *ctx;
  if (c == NULL)
    return;
  if (c->state_free != NULL)
    c->state_free(c->state, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
  evd_buf_free(&c->body);
  free(c);
  *ctx = NULL;
}

int http_start(http_t *h, int fd) {
  h->d = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
          MHD_USE_ERROR_LOG,
      0, NULL, NULL, handler, h, MHD_OPTION_LISTEN_SOCKET, fd,
      MHD_OPTION_NOTIFY_COMPLETED, completed, h, MHD_OPTION_END);
  return h->d != NULL ? 0 : -1;
}

void http_quiesce(http_t *h) {
  if (h->d != NULL)
    h->listening = MHD_quiesce_daemon(h->d);
}

void http_stop(http_t *h) {
  if (h == NULL)
    return;
  for (int i = 0; h->d != NULL && i < 200; i++) {
    const union MHD_DaemonInfo *di =
        MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    if (di == NULL || di->num_connections == 0)
      break;
    usleep(10 * 1000);
  }
  if (h->d != NULL)
    MHD_stop_daemon(h->d);
  if (h->listening != MHD_INVALID_SOCKET)
    close(h->listening);
  free(h->routes);
  free(h);
}
