/* evictd-llama serve's door to libmicrohttpd: a thread per connection (a
 * completion's thread waits on its task while the engine decodes;
 * connections are few, one per request in flight, so a thread each costs
 * little next to the model), request bodies, the route table (llama-server's
 * paths), CORS and the API key as llama-server checks them, and the end of
 * a request (a client that went away cancels its task). */
#include <stdlib.h>
#include <string.h>

#include "serve/http.h"

#define BODY_MAX (1u << 20)

typedef struct route_s {
  const char *path;
  const char *method;
  enum MHD_Result (*fn)(call_t *c);
  bool keyless;           /* answered without the API key (probes) */
} route_t;

/* llama-server's paths, /v1 and not: its /completions is its own
 * /completion (not OpenAI's /v1/completions), and so is it here. */
static const route_t routes[] = {
    {"/v1/chat/completions", "POST", openai_chat, false},
    {"/chat/completions", "POST", openai_chat, false},
    {"/v1/chat/completions/input_tokens", "POST", openai_input_tokens, false},
    {"/chat/completions/input_tokens", "POST", openai_input_tokens, false},
    {"/v1/completions", "POST", openai_completions, false},
    {"/v1/models", "GET", openai_models, false},
    {"/models", "GET", openai_models, false},
    {"/v1/responses", "POST", responses_create, false},
    {"/responses", "POST", responses_create, false},
    {"/completion", "POST", native_completion, false},
    {"/completions", "POST", native_completion, false},
    {"/tokenize", "POST", extra_tokenize, false},
    {"/detokenize", "POST", extra_detokenize, false},
    {"/apply-template", "POST", extra_apply_template, false},
    {"/props", "GET", extra_props, false},
    {"/slots", "GET", extra_slots, false},
    {"/health", "GET", status_health, true},
    {"/v1/health", "GET", status_health, true},
    {"/v1/messages", "POST", anthropic_messages, false},
    {"/v1/messages/count_tokens", "POST", anthropic_count_tokens, false},
    {"/metrics", "GET", status_metrics, false},
};

#define N_ROUTES (sizeof(routes) / sizeof(routes[0]))

int http_body(call_t *c, json_t **out, enum MHD_Result *sent) {
  json_error_t je;
  if (c->too_large) {
    *sent = reply_error(c, 413, "body_too_large", NULL, "the request body "
                        "is over %u bytes", BODY_MAX);
    return -1;
  }
  json_t *j = json_loadb(c->body.data ? c->body.data : "", c->body.len, 0,
                        &je);
  if (j == NULL || !json_is_object(j)) {
    *sent = reply_error(c, 400, "invalid_json", NULL, "the body is not a "
                        "JSON object%s%s", j ? "" : ": ", j ? "" : je.text);
    json_decref(j);
    return -1;
  }
  *out = j;
  return 0;
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

/* The route of a path (any method), or NULL. */
static const route_t *route_of(const char *url) {
  for (size_t i = 0; i < N_ROUTES; i++)
    if (strcmp(url, routes[i].path) == 0)
      return &routes[i];
  return NULL;
}

static enum MHD_Result route(call_t *c, const char *url, const char *method) {
  /* /v1/responses/{id}: GET and DELETE a stored response. */
  static const char rp[] = "/v1/responses/";
  if (strncmp(url, rp, sizeof(rp) - 1) == 0 && url[sizeof(rp) - 1] != '\0' &&
      strchr(url + sizeof(rp) - 1, '/') == NULL) {
    if (strcmp(method, "GET") == 0)
      return responses_get(c, url + sizeof(rp) - 1);
    if (strcmp(method, "DELETE") == 0)
      return responses_delete(c, url + sizeof(rp) - 1);
    c->allow = "GET, DELETE";
    return reply_error(c, 405, "method_not_allowed", NULL, "GET or DELETE "
                       "%s", url);
  }
  const route_t *r = route_of(url);
  if (r != NULL && strcmp(method, r->method) == 0)
    return r->fn(c);
  if (r != NULL) {
    c->allow = r->method;
    return reply_error(c, 405, "method_not_allowed", NULL, "%s %s",
                       r->method, r->path);
  }
  /* The paths there are, from the table. */
  char list[1024];
  size_t at = 0;
  for (size_t i = 0; i < N_ROUTES && at < sizeof(list); i++)
    at += (size_t)snprintf(list + at, sizeof(list) - at, "%s %s, ",
                           routes[i].method, routes[i].path);
  return reply_error(c, 404, "not_found", NULL, "no such path: %.64s (%sGET "
                     "and DELETE /v1/responses/{id})", url, list);
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
static bool allowed(call_t *c, const char *url) {
  char *const *keys = c->site->o->api_keys;
  const route_t *r = route_of(url);
  if (keys == NULL || (r != NULL && r->keyless))
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

/* ---- CORS, as llama-server answers it ---------------------------------- */

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

void http_cors(call_t *c, struct MHD_Response *rs) {
  const serve_opts_t *o = c->site->o;
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

/* A preflight (any OPTIONS request, any path): 200, no body, what a
 * browser may send; answered before the API key is asked for, since
 * browsers send none with it. */
static enum MHD_Result preflight(call_t *c) {
  const serve_opts_t *o = c->site->o;
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
  call_t *c = *ctx;
  if (c == NULL) {
    if ((c = calloc(1, sizeof(*c))) == NULL)
      return MHD_NO;
    c->site = cls;
    c->conn = conn;
    c->fd = -1;
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
  /* Anthropic's routes answer in Anthropic's error shape, the 401 too. */
  if (strcmp(url, "/v1/messages") == 0 ||
      strcmp(url, "/v1/messages/count_tokens") == 0)
    c->errors = anthropic_error_json;
  if (!allowed(c, url))
    return reply_error(c, 401, "invalid_api_key", NULL, "no valid API key: "
                       "send 'Authorization: Bearer KEY' or 'x-api-key: KEY' "
                       "with the server's --api-key");
  return route(c, url, method);
}

/* The request is over: complete, or the client went away mid-way (the
 * engine then ends its sequences and deletes their sessions). */
static void completed(void *cls, struct MHD_Connection *conn, void **ctx,
                      enum MHD_RequestTerminationCode toe) {
  (void)conn;
  site_t *site = cls;
  call_t *c = *ctx;
  if (c == NULL)
    return;
  if (c->task != NULL) {
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
      tq_cancel(site->q, c->task);
    tq_release(site->q, c->task);
  }
  responses_call_free(c);
  openai_call_free(c);
  native_call_free(c);
  anthropic_call_free(c);
  news_free(&c->news);
  evd_buf_free(&c->out);
  evd_buf_free(&c->body);
  free(c->seen);
  free(c);
  *ctx = NULL;
}

struct MHD_Daemon *http_start(site_t *site, int fd) {
  return MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
          MHD_USE_ERROR_LOG,
      0, NULL, NULL, handler, site, MHD_OPTION_LISTEN_SOCKET, fd,
      MHD_OPTION_NOTIFY_COMPLETED, completed, site, MHD_OPTION_END);
}
