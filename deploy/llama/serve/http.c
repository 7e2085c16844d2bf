/* evictd-llama serve's door to libmicrohttpd: a thread per connection (a
 * completion's thread waits on its task while the engine decodes;
 * connections are few, one per request in flight, so a thread each costs
 * little next to the model), request bodies, the route table, and the end
 * of a request (a client that went away cancels its task). */
#include <stdlib.h>
#include <string.h>

#include "serve/http.h"

#define BODY_MAX (1u << 20)

typedef struct route_s {
  const char *path;
  const char *method;
  enum MHD_Result (*fn)(call_t *c);
} route_t;

static const route_t routes[] = {
    {"/v1/chat/completions", "POST", openai_chat},
    {"/v1/completions", "POST", openai_completions},
    {"/v1/models", "GET", openai_models},
    {"/v1/responses", "POST", responses_create},
    {"/v1/messages", "POST", anthropic_messages},
    {"/v1/messages/count_tokens", "POST", anthropic_count_tokens},
    {"/completion", "POST", native_completion},
    {"/health", "GET", status_health},
    {"/metrics", "GET", status_metrics},
};

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
  for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
    const route_t *r = &routes[i];
    if (strcmp(url, r->path) != 0)
      continue;
    if (strcmp(method, r->method) == 0)
      return r->fn(c);
    c->allow = r->method;
    return reply_error(c, 405, "method_not_allowed", NULL, "%s %s", r->method,
                       r->path);
  }
  return reply_error(c, 404, "not_found", NULL, "no such path: %s (POST "
                     "/v1/chat/completions, POST /v1/completions, POST "
                     "/v1/responses, GET /v1/responses/{id}, POST /v1/messages, "
                     "POST /v1/messages/count_tokens, GET /v1/models, POST "
                     "/completion, GET /health, GET /metrics)", url);
}

/* Whether given is the key, compared in time independent of where they
 * differ. */
static bool same_key(const char *key, const char *given) {
  size_t n = strlen(key), m = strlen(given);
  unsigned char diff = n != m;
  for (size_t i = 0; i < n; i++)
    diff |= (unsigned char)(key[i] ^ (i < m ? given[i] : 0));
  return diff == 0;
}

/* Whether a request may pass: no --api-key, or it sends the key, as a
 * bearer token or, as llama-server also takes it (Anthropic's clients send
 * it so), in x-api-key; or the route is /health, which probes reach
 * without a key. */
static bool allowed(call_t *c, const char *url) {
  const char *key = c->site->o->api_key;
  if (key == NULL || strcmp(url, "/health") == 0)
    return true;
  const char *auth = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_AUTHORIZATION);
  const char *xkey = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND,
                                                 "x-api-key");
  bool bearer = auth != NULL && strncmp(auth, "Bearer ", 7) == 0 &&
                same_key(key, auth + 7);
  return bearer || (xkey != NULL && same_key(key, xkey));
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
