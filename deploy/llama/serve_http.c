/* evictd-llama serve's HTTP side, on libmicrohttpd with a thread per
 * connection: a completion's thread blocks on its request's condition
 * variable while the engine thread decodes (a plain wait, no event loop
 * to hand results back into), and looks at its socket between waits, so a
 * client that goes away is noticed within 100 ms even while nothing is
 * written to it. Connections are few (one per request in flight), so a
 * thread each costs little next to the model. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "serve.h"

#define BODY_MAX (1u << 20)

typedef struct conn_s {
  serve_t *sv;
  char *body;
  size_t len, cap;
  bool too_large;
  req_t *req;
  int fd;
} conn_t;

static enum MHD_Result send_body(struct MHD_Connection *c, unsigned status,
                                 const char *type, char *body) {
  struct MHD_Response *rs = MHD_create_response_from_buffer(
      strlen(body), body, MHD_RESPMEM_MUST_FREE);
  if (rs == NULL) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(rs, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  enum MHD_Result ok = MHD_queue_response(c, status, rs);
  MHD_destroy_response(rs);
  return ok;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status,
                                 json_t *j) {
  char *s = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  return s == NULL ? MHD_NO : send_body(c, status, "application/json", s);
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status,
                                  const char *code, const char *msg) {
  return send_json(c, status,
                   json_pack("{s:{s:s,s:s}}", "error", "code", code,
                             "message", msg));
}

/* Whether the peer closed its side (or the socket failed). */
static bool peer_gone(int fd) {
  if (fd < 0)
    return false;
  char b;
  ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                    errno != EINTR);
}

/* Waits (under sv->mu) for news of r, up to 100 ms; true if the client
 * went away meanwhile (the engine is told). */
static bool wait_news(conn_t *cn, req_t *r) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += 100 * 1000000L;
  if (ts.tv_nsec >= 1000000000L)
    ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  pthread_cond_timedwait(&r->cv, &cn->sv->mu, &ts);
  if ((r->state == REQ_QUEUED || r->state == REQ_RUNNING) &&
      peer_gone(cn->fd)) {
    r->cancel = true;
    pthread_cond_signal(&cn->sv->cv);
    return true;
  }
  return false;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf,
                             size_t max) {
  (void)pos;
  conn_t *cn = cls;
  req_t *r = cn->req;
  serve_t *sv = cn->sv;
  pthread_mutex_lock(&sv->mu);
  for (;;) {
    if (r->out_read < r->out_len) {
      size_t n = r->out_len - r->out_read;
      if (n > max)
        n = max;
      memcpy(buf, r->out + r->out_read, n);
      r->out_read += n;
      if (r->out_read == r->out_len) /* all sent: the memory is reused */
        r->out_read = r->out_len = 0;
      pthread_mutex_unlock(&sv->mu);
      return (ssize_t)n;
    }
    if (r->state == REQ_DONE || r->state == REQ_FAILED) {
      pthread_mutex_unlock(&sv->mu);
      return MHD_CONTENT_READER_END_OF_STREAM;
    }
    if (wait_news(cn, r)) {
      pthread_mutex_unlock(&sv->mu);
      return MHD_CONTENT_READER_END_WITH_ERROR;
    }
  }
}

/* A JSON integer field in [lo, hi], or def when missing; -1 if bad. */
static int int_field(json_t *body, const char *name, long long lo,
                     long long hi, long long def, long long *out,
                     char *msg, size_t msglen) {
  json_t *v = json_object_get(body, name);
  if (v == NULL || json_is_null(v)) {
    *out = def;
    return 0;
  }
  if (!json_is_integer(v) || json_integer_value(v) < lo ||
      json_integer_value(v) > hi) {
    snprintf(msg, msglen, "\"%s\" must be a whole number from %lld to %lld",
             name, lo, hi);
    return -1;
  }
  *out = json_integer_value(v);
  return 0;
}

static enum MHD_Result completion(struct MHD_Connection *c, conn_t *cn) {
  serve_t *sv = cn->sv;
  if (cn->too_large)
    return send_error(c, 413, "body_too_large",
                      "the request body is over 1 MiB");
  json_error_t je;
  json_t *body = json_loadb(cn->body ? cn->body : "", cn->len, 0, &je);
  if (body == NULL || !json_is_object(body)) {
    char msg[256];
    snprintf(msg, sizeof(msg), "the body is not a JSON object%s%s",
             body ? "" : ": ", body ? "" : je.text);
    json_decref(body);
    return send_error(c, 400, "invalid_json", msg);
  }
  char msg[256];
  json_t *p = json_object_get(body, "prompt"), *st =
      json_object_get(body, "stream"), *t = json_object_get(body,
                                                            "temperature");
  long long n_predict, seed;
  const char *bad = NULL;
  if (p == NULL)
    bad = "\"prompt\" is required";
  else if (!json_is_string(p))
    bad = "\"prompt\" must be a string";
  else if (st != NULL && !json_is_boolean(st) && !json_is_null(st))
    bad = "\"stream\" must be true or false";
  else if (t != NULL && !json_is_null(t) &&
           (!json_is_number(t) || !(json_number_value(t) >= 0) ||
            json_number_value(t) > 100))
    bad = "\"temperature\" must be a number from 0 to 100";
  if (bad != NULL) {
    json_decref(body);
    return send_error(c, 400, "invalid_request", bad);
  }
  long long def = sv->o->n_predict_max < 128 ? sv->o->n_predict_max : 128;
  if (int_field(body, "n_predict", 1, sv->o->n_predict_max, def, &n_predict,
                msg, sizeof(msg)) != 0 ||
      int_field(body, "seed", 0, INT64_MAX, 0, &seed, msg, sizeof(msg))) {
    json_decref(body);
    return send_error(c, 400, "invalid_request", msg);
  }
  req_t *r = calloc(1, sizeof(*r));
  if (r == NULL) {
    json_decref(body);
    return send_error(c, 500, "out_of_memory", "out of memory");
  }
  pthread_cond_init(&r->cv, NULL);
  r->refs = 1;
  r->stream = st != NULL && json_is_true(st);
  r->temp = t != NULL && json_is_number(t) ? json_number_value(t) : 0;
  r->seed = (uint64_t)seed;
  r->n_predict = (uint32_t)n_predict;
  /* The vocabulary is only read: tokenizing here is safe beside the
   * engine's decoding. */
  int n = lm_tokenize(&sv->lm, json_string_value(p), json_string_length(p),
                      &r->prompt);
  json_decref(body);
  if (n <= 0) {
    req_unref(r);
    return send_error(c, 400, "invalid_request", n == 0 ?
                      "the prompt has no tokens (and the model adds no BOS)"
                      : "cannot tokenize the prompt");
  }
  r->n_prompt = (uint32_t)n;
  pthread_mutex_lock(&sv->mu);
  int q = engine_submit(sv, r);
  pthread_mutex_unlock(&sv->mu);
  if (q != 0) {
    req_unref(r);
    return send_error(c, 503, sv->stopping ? "shutting_down" : "busy",
                      sv->stopping ? "the server is shutting down"
                                   : "too many requests are waiting");
  }
  cn->req = r;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  cn->fd = ci != NULL ? ci->connect_fd : -1;
  if (r->stream) {
    struct MHD_Response *rs = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, 4096, stream_reader, cn, NULL);
    if (rs == NULL)
      return MHD_NO;
    MHD_add_response_header(rs, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/event-stream");
    MHD_add_response_header(rs, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ok = MHD_queue_response(c, 200, rs);
    MHD_destroy_response(rs);
    return ok;
  }
  pthread_mutex_lock(&sv->mu);
  while (r->state == REQ_QUEUED || r->state == REQ_RUNNING)
    if (wait_news(cn, r)) {
      pthread_mutex_unlock(&sv->mu);
      return MHD_NO; /* nobody to answer */
    }
  unsigned status = 200;
  char *b = NULL;
  size_t len = 0, cap = 0;
  int rc;
  if (r->state == REQ_FAILED) {
    status = (unsigned)r->err_status;
    rc = buf_add(&b, &len, &cap, "{\"error\":{\"code\":", 17) ||
         buf_json(&b, &len, &cap, r->err_code, strlen(r->err_code)) ||
         buf_add(&b, &len, &cap, ",\"message\":", 11) ||
         buf_json(&b, &len, &cap, r->err_msg, strlen(r->err_msg)) ||
         buf_add(&b, &len, &cap, "}}", 2);
  } else {
    /* An unfinished character at the end is left out, as a stream does. */
    char tail[320];
    int n = snprintf(tail, sizeof(tail), ",\"tokens_predicted\":%u,"
                     "\"tokens_evaluated\":%u,\"stop_type\":\"%s\","
                     "\"session\":\"%s\"}", r->predicted, r->n_prompt,
                     r->stop_type, r->session);
    rc = buf_add(&b, &len, &cap, "{\"content\":", 11) ||
         buf_json(&b, &len, &cap, r->out ? r->out : "",
                  utf8_whole(r->out ? r->out : "", r->out_len)) ||
         buf_add(&b, &len, &cap, tail, (size_t)n);
  }
  pthread_mutex_unlock(&sv->mu);
  if (rc != 0) {
    free(b);
    return send_error(c, 500, "out_of_memory", "out of memory");
  }
  return send_body(c, status, "application/json", b);
}

static enum MHD_Result health(struct MHD_Connection *c, serve_t *sv) {
  evd_client_opts_t co = {.url = sv->o->url, .timeout_ms = 2000,
                          .token_file = sv->o->token_file,
                          .cafile = sv->o->cafile};
  evd_client_t *ev = NULL;
  char err[256] = "";
  int rc = evd_client_new(&ev, &co, err, sizeof(err));
  if (rc == 0 && (rc = evd_client_health(ev)) != 0)
    snprintf(err, sizeof(err), "evictd: %s: %s", evd_client_error(ev)->code,
             evd_client_error(ev)->message);
  evd_client_free(ev);
  if (rc != 0)
    return send_json(c, 503, json_pack("{s:s,s:s}", "status", "unavailable",
                                       "error", err));
  return send_json(c, 200, json_pack("{s:s}", "status", "ok"));
}

static enum MHD_Result metrics(struct MHD_Connection *c, serve_t *sv) {
  char *s = malloc(2048);
  if (s == NULL)
    return MHD_NO;
  pthread_mutex_lock(&sv->mu);
  snprintf(s, 2048,
           "# TYPE evictd_llama_requests_total counter\n"
           "evictd_llama_requests_total %llu\n"
           "# TYPE evictd_llama_requests_failed_total counter\n"
           "evictd_llama_requests_failed_total %llu\n"
           "# TYPE evictd_llama_tokens_predicted_total counter\n"
           "evictd_llama_tokens_predicted_total %llu\n"
           "# TYPE evictd_llama_requests_active gauge\n"
           "evictd_llama_requests_active %u\n"
           "# TYPE evictd_llama_requests_queued gauge\n"
           "evictd_llama_requests_queued %u\n"
           "# TYPE evictd_llama_iterations_total counter\n"
           "evictd_llama_iterations_total %llu\n"
           "# TYPE evictd_llama_steps_total counter\n"
           "evictd_llama_steps_total %llu\n"
           "# TYPE evictd_llama_evictd_connections_total counter\n"
           "evictd_llama_evictd_connections_total %llu\n"
           "# TYPE evictd_llama_evictd_resends_total counter\n"
           "evictd_llama_evictd_resends_total %llu\n"
           "# TYPE evictd_llama_evictd_seconds_total counter\n"
           "evictd_llama_evictd_seconds_total %.6f\n"
           "# TYPE evictd_llama_decode_seconds_total counter\n"
           "evictd_llama_decode_seconds_total %.6f\n"
           "# TYPE evictd_llama_iteration_seconds_total counter\n"
           "evictd_llama_iteration_seconds_total %.6f\n",
           (unsigned long long)sv->m_requests,
           (unsigned long long)sv->m_failed,
           (unsigned long long)sv->m_tokens, sv->n_active, sv->n_queued,
           (unsigned long long)sv->m_iterations,
           (unsigned long long)sv->m_steps_sent,
           (unsigned long long)sv->m_connections,
           (unsigned long long)sv->m_resends, sv->m_evictd_s,
           sv->m_decode_s, sv->m_total_s);
  pthread_mutex_unlock(&sv->mu);
  return send_body(c, 200, "text/plain; version=0.0.4", s);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c,
                               const char *url, const char *method,
                               const char *version, const char *upload,
                               size_t *upload_size, void **ctx) {
  (void)version;
  serve_t *sv = cls;
  conn_t *cn = *ctx;
  if (cn == NULL) {
    if ((cn = calloc(1, sizeof(*cn))) == NULL)
      return MHD_NO;
    cn->sv = sv;
    cn->fd = -1;
    *ctx = cn;
    return MHD_YES;
  }
  if (*upload_size > 0) {
    size_t n = *upload_size;
    *upload_size = 0;
    if (cn->too_large || cn->len + n > BODY_MAX) {
      cn->too_large = true;
      return MHD_YES;
    }
    if (cn->len + n + 1 > cn->cap) {
      size_t cap = cn->cap ? cn->cap : 1024;
      while (cap < cn->len + n + 1)
        cap *= 2;
      char *b = realloc(cn->body, cap);
      if (b == NULL)
        return MHD_NO;
      cn->body = b;
      cn->cap = cap;
    }
    memcpy(cn->body + cn->len, upload, n);
    cn->len += n;
    return MHD_YES;
  }
  bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
  if (strcmp(url, "/completion") == 0)
    return post ? completion(c, cn)
                : send_error(c, 405, "method_not_allowed",
                             "POST /completion");
  if (strcmp(url, "/health") == 0)
    return get ? health(c, sv)
               : send_error(c, 405, "method_not_allowed", "GET /health");
  if (strcmp(url, "/metrics") == 0)
    return get ? metrics(c, sv)
               : send_error(c, 405, "method_not_allowed", "GET /metrics");
  return send_error(c, 404, "not_found",
                    "no such path (POST /completion, GET /health, "
                    "GET /metrics)");
}

/* The request is over: complete, or the client went away mid-way (the
 * engine then ends its sequence and deletes its session). */
static void completed(void *cls, struct MHD_Connection *c, void **ctx,
                      enum MHD_RequestTerminationCode toe) {
  (void)c;
  serve_t *sv = cls;
  conn_t *cn = *ctx;
  if (cn == NULL)
    return;
  if (cn->req != NULL) {
    pthread_mutex_lock(&sv->mu);
    req_t *r = cn->req;
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK &&
        (r->state == REQ_QUEUED || r->state == REQ_RUNNING)) {
      r->cancel = true;
      pthread_cond_signal(&sv->cv);
    }
    req_unref(r);
    pthread_mutex_unlock(&sv->mu);
  }
  free(cn->body);
  free(cn);
  *ctx = NULL;
}

struct MHD_Daemon *serve_http_start(serve_t *sv, int fd) {
  return MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
          MHD_USE_ERROR_LOG,
      0, NULL, NULL, handler, sv, MHD_OPTION_LISTEN_SOCKET, fd,
      MHD_OPTION_NOTIFY_COMPLETED, completed, sv, MHD_OPTION_END);
}
