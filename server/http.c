/* libmicrohttpd glue: per-connection buffers, request bodies with their size
 * limit, and the single place where an API reply becomes an HTTP response.
 * Handlers answer on the access handler's final call (after the body), never
 * its first, which keeps connections alive. */
#include "http.h"

#include <errno.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "apierr.h"
#include "journal.h"
#include "log.h"
#include "metrics.h"
#include "queue.h"

/* Buffers above this are freed after each request, so that one large
 * request does not pin memory to an idle connection. */
#define KEEP_BUF (64u * 1024u)

/* libmicrohttpd's memory per connection (see evd_http_start). */
#define CONN_POOL (8u * 1024u)

typedef struct conn_s {
  evd_queue_t dl;    /* the deadline list, soonest first (on none: cut) */
  uint64_t deadline; /* cut the connection off when the clock passes it */
  int fd;
  evd_buf_t body;  /* the request body so far */
  evd_buf_t out;   /* the response body, alive until it is sent */
  int too_large;   /* the body passed --max-body: answer 413 */
  int waiting;     /* suspended until its journal record is acknowledged */
  evd_reply_t reply;          /* the answer kept meanwhile */
  uint64_t wait_since;        /* when it was parked (ms) */
  int expired;     /* waited past --journal-wait with the journal failing */
  struct MHD_Connection *mc;
  evd_queue_t wait;           /* the waiting list, in LSN order */
  struct timespec start; /* when the request's headers were in */
} conn_t;

struct evd_http_s {
  struct MHD_Daemon *d;
  evd_api_t *api;
  evd_metrics_t *metrics;
  size_t max_body;
  int want_auth; /* --token-file: look the Authorization header up */
  unsigned busy;
  int quiesced;
  uint64_t now_ms, timeout_ms, journal_wait_ms;
  evd_journal_t *journal;
  evd_queue_t waits; /* answers held for durability (conn_t.wait) */
  /* Every connection, in deadline order: each gets the same timeout from
   * a clock that never goes back, so appending keeps the order. */
  evd_queue_t deadlines; /* conn_t.dl */
};

/* The first connection of a list (of its node `field`), or NULL. */
#define FIRST(h, field)                                                        \
  (evd_queue_empty(h) ? NULL                                                   \
                      : EVD_QUEUE_DATA(evd_queue_head(h), conn_t, field))

/* (Re)starts the connection's allowance for one request. */
static void deadline_renew(evd_http_t *h, conn_t *c) {
  evd_queue_remove(&c->dl);
  c->deadline = h->now_ms + h->timeout_ms;
  evd_queue_insert_tail(&h->deadlines, &c->dl);
}

static void log_mhd(void *cls, const char *fmt, va_list ap) {
  char line[512];
  size_t n;

  (void)cls;
  vsnprintf(line, sizeof line, fmt, ap);
  n = strlen(line);
  while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
    line[--n] = '\0';
  evd_log(EVD_LOG_WARN, "http: %s", line);
}

/* Paths are matched as sent: ids never need escapes, so none are decoded
 * (and "%2F" cannot smuggle a slash into an id). */
static size_t no_unescape(void *cls, struct MHD_Connection *c, char *s) {
  (void)cls;
  (void)c;
  return strlen(s);
}

static void on_connection(void *cls, struct MHD_Connection *mc,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  evd_http_t *h = cls;
  conn_t *c = *socket_context;

  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    h->metrics->connections++;
    h->metrics->connections_total++;
    /* On allocation failure the access handler refuses the request. */
    c = calloc(1, sizeof *c);
    if (c != NULL) {
      evd_buf_init(&c->body);
      evd_buf_init(&c->out);
      c->fd = ci != NULL ? ci->connect_fd : -1;
      evd_queue_init(&c->dl);
      evd_queue_init(&c->wait);
      deadline_renew(h, c);
    }
    *socket_context = c;
    return;
  }
  h->metrics->connections--;
  if (c != NULL) {
    evd_queue_remove(&c->dl);
    evd_buf_free(&c->body);
    evd_buf_free(&c->out);
    free(c);
    *socket_context = NULL;
  }
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **req_cls,
                         enum MHD_RequestTerminationCode toe) {
  evd_http_t *h = cls;
  conn_t *c = *req_cls;

  (void)mc;
  (void)toe;
  if (c == NULL)
    return;
  h->busy--;
  if (!evd_queue_empty(&c->dl)) /* not cut off meanwhile */
    deadline_renew(h, c);
  evd_buf_reset(&c->body, KEEP_BUF);
  evd_buf_reset(&c->out, KEEP_BUF);
  c->too_large = 0;
  *req_cls = NULL;
}

/* Queues c->out as the response: the buffer is the connection's and stays
 * untouched until the request completes, so libmicrohttpd need not copy.
 * Also the one place where requests are counted and timed. */
static enum MHD_Result respond(evd_http_t *h, struct MHD_Connection *mc,
                               conn_t *c, const evd_reply_t *reply) {
  struct MHD_Response *r;
  enum MHD_Result ret;
  struct timespec now;

  clock_gettime(CLOCK_MONOTONIC, &now);
  evd_metrics_request(h->metrics, reply->route, reply->status,
                      (double)(now.tv_sec - c->start.tv_sec) +
                          (double)(now.tv_nsec - c->start.tv_nsec) * 1e-9);
  r = MHD_create_response_from_buffer(c->out.len, c->out.data,
                                      MHD_RESPMEM_PERSISTENT);
  if (r == NULL)
    return MHD_NO;
  if (reply->status != 204 &&
      MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                              reply->content_type != NULL
                                  ? reply->content_type
                                  : "application/json") != MHD_YES)
    goto fail;
  if (reply->allow != NULL &&
      MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, reply->allow) !=
          MHD_YES)
    goto fail;
  if (reply->www_authenticate != NULL &&
      MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                              reply->www_authenticate) != MHD_YES)
    goto fail;
  ret = MHD_queue_response(mc, (unsigned)reply->status, r);
  MHD_destroy_response(r);
  return ret;
fail:
  MHD_destroy_response(r);
  return MHD_NO;
}

/* Answers with an error of the transport itself (413 and the like). */
static enum MHD_Result respond_error(evd_http_t *h, struct MHD_Connection *mc,
                                     conn_t *c, evd_apierr_t e) {
  evd_reply_t reply = {.status = evd_apierr_status(e), .route = EVD_R_NONE};

  evd_buf_reset(&c->out, KEEP_BUF);
  evd_apierr_body(&c->out, e, NULL);
  return respond(h, mc, c, &reply);
}

/* Content-Length above the limit: refuse before reading the body. */
static int declared_too_large(struct MHD_Connection *mc, size_t max) {
  const char *v = MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
                                              MHD_HTTP_HEADER_CONTENT_LENGTH);
  unsigned long long n;
  char *end;

  if (v == NULL)
    return 0;
  errno = 0;
  n = strtoull(v, &end, 10);
  return errno == ERANGE || (end != v && n > max);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **req_cls) {
  evd_http_t *h = cls;
  conn_t *c = *req_cls;
  evd_request_t req;
  evd_reply_t reply;

  (void)version;
  if (c == NULL) { /* first call: headers are in, the body is not */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    c = ci != NULL ? ci->socket_context : NULL;
    if (c == NULL)
      return MHD_NO; /* out of memory when the connection opened */
    *req_cls = c;
    h->busy++;
    clock_gettime(CLOCK_MONOTONIC, &c->start);
    if (declared_too_large(mc, h->max_body))
      return respond_error(h, mc, c, EVD_AE_BODY_TOO_LARGE);
    return MHD_YES;
  }
  if (*upload_size > 0) { /* a piece of the body */
    if (!c->too_large && c->body.len + *upload_size > h->max_body) {
      /* A chunked body outgrew the limit: drop what came and the rest. */
      c->too_large = 1;
      evd_buf_reset(&c->body, 0);
    }
    if (!c->too_large)
      evd_buf_add(&c->body, upload, *upload_size);
    *upload_size = 0;
    return MHD_YES;
  }
  if (c->waiting) { /* resumed: the record is written (or durable) */
    c->waiting = 0;
    if (c->expired) {
      char msg[400];
      c->expired = 0;
      snprintf(msg, sizeof msg,
               "The change is applied in memory but not yet durable: the "
               "journal has not been able to write it for %llu s (%s). "
               "Resend the same request once /healthz says ok: it gets the "
               "original answer (a replay).",
               (unsigned long long)(h->journal_wait_ms / 1000),
               strerror(evd_journal_error(h->journal)));
      c->reply.status = evd_apierr_status(EVD_AE_JOURNAL_FAILED);
      evd_buf_reset(&c->out, KEEP_BUF);
      evd_apierr_body(&c->out, EVD_AE_JOURNAL_FAILED, msg);
    }
    return respond(h, mc, c, &c->reply);
  }
  if (c->too_large)
    return respond_error(h, mc, c, EVD_AE_BODY_TOO_LARGE);
  if (c->body.oom)
    return respond_error(h, mc, c, EVD_AE_OUT_OF_MEMORY);
  req.method = evd_method_parse(method);
  req.path = url;
  req.path_len = strlen(url);
  req.body = c->body.data;
  req.body_len = c->body.len;
  req.authorization =
      h->want_auth ? MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_AUTHORIZATION)
                   : NULL;
  evd_api_handle(h->api, &req, &c->out, &reply);
  if (reply.wait_lsn > 0 && h->journal != NULL &&
      reply.wait_lsn > evd_journal_acked(h->journal)) {
    /* Park the answer until its record is written (on disk, with --fsync
     * always); many requests share one write and one fsync meanwhile. A
     * failed write is retried, and the answer waits for it. */
    c->waiting = 1;
    c->reply = reply;
    c->wait_since = h->now_ms;
    c->mc = mc;
    evd_queue_insert_tail(&h->waits, &c->wait);
    MHD_suspend_connection(mc);
    return MHD_YES;
  }
  return respond(h, mc, c, &reply);
}

void evd_http_set_journal(evd_http_t *h, evd_journal_t *j) {
  h->journal = j;
}

unsigned evd_http_expire_waits(evd_http_t *h, uint64_t now_ms, int all) {
  unsigned n = 0;
  conn_t *c;

  if (h->journal == NULL || !evd_journal_failed(h->journal))
    return 0;
  /* Parked in LSN order, which is the order of their clocks too. */
  while ((c = FIRST(&h->waits, wait)) != NULL &&
         (all || now_ms - c->wait_since >= h->journal_wait_ms)) {
    evd_queue_remove(&c->wait);
    c->expired = 1;
    MHD_resume_connection(c->mc);
    n++;
  }
  if (n > 0)
    evd_log(EVD_LOG_WARN, "journal still failing: answered %u waiting "
            "change%s 503 journal_failed (applied in memory, not durable; "
            "a resend after recovery gets the replay)", n, n == 1 ? "" : "s");
  return n;
}

void evd_http_durable(evd_http_t *h, uint64_t lsn) {
  conn_t *c;

  /* Records are acknowledged in LSN order, and the list is in LSN order. */
  while ((c = FIRST(&h->waits, wait)) != NULL && c->reply.wait_lsn <= lsn) {
    evd_queue_remove(&c->wait);
    MHD_resume_connection(c->mc);
  }
}

int evd_http_start(evd_http_t **out, evd_api_t *api, const evd_config_t *cfg,
                   int listen_fd) {
  evd_http_t *h = calloc(1, sizeof *h);
  unsigned flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
  /* TLS, when configured: libmicrohttpd's own HTTPS, over GnuTLS. */
  struct MHD_OptionItem tls[] = {
      {MHD_OPTION_HTTPS_MEM_KEY, 0, cfg->tls_key_pem},
      {MHD_OPTION_HTTPS_MEM_CERT, 0, cfg->tls_cert_pem},
      {MHD_OPTION_END, 0, NULL}};

  if (h == NULL)
    return EVD_ENOMEM;
  if (cfg->tls_cert_pem != NULL)
    flags |= MHD_USE_TLS;
  else
    tls[0].option = MHD_OPTION_END;
  evd_queue_init(&h->waits);
  evd_queue_init(&h->deadlines);
  h->api = api;
  h->metrics = evd_api_metrics(api);
  h->timeout_ms = (uint64_t)cfg->conn_timeout * 1000;
  h->journal_wait_ms = (uint64_t)cfg->journal_wait * 1000;
  h->max_body = cfg->max_body;
  h->want_auth = cfg->token != NULL;
  h->d = MHD_start_daemon(
      flags, 0, NULL, NULL, on_request, h,
      MHD_OPTION_EXTERNAL_LOGGER, log_mhd, h, /* first, to catch all */
      MHD_OPTION_LISTEN_SOCKET, listen_fd,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_conns,
      /* libmicrohttpd clears a connection's memory pool for every request:
       * 32 KiB by default, most of the instructions a request costs. Our
       * requests need little: the pool holds the headers and a read buffer
       * (bodies are copied out as they arrive). Headers up to about 8 KiB
       * fit; larger ones are answered 431. */
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_POOL,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->conn_timeout,
      MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
      MHD_OPTION_UNESCAPE_CALLBACK, no_unescape, h,
      MHD_OPTION_SIGPIPE_HANDLED_BY_APP, 1,
      MHD_OPTION_ARRAY, tls,
      MHD_OPTION_END);
  if (h->d == NULL) {
    free(h);
    return EVD_EIO;
  }
  *out = h;
  return 0;
}

int evd_http_fd(const evd_http_t *h) {
  const union MHD_DaemonInfo *i =
      MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD);
  return i != NULL ? i->epoll_fd : -1;
}

void evd_http_run(evd_http_t *h, uint64_t now_ms) {
  h->now_ms = now_ms;
  MHD_run(h->d);
}

unsigned evd_http_sweep(evd_http_t *h, uint64_t now_ms) {
  unsigned n = 0;
  conn_t *c;

  h->now_ms = now_ms;
  while ((c = FIRST(&h->deadlines, dl)) != NULL && c->deadline <= now_ms) {
    /* Shutting the socket down makes libmicrohttpd see the end of the
     * stream on its next read and close the connection its usual way. */
    evd_queue_remove(&c->dl);
    if (c->fd >= 0)
      shutdown(c->fd, SHUT_RDWR);
    n++;
  }
  h->metrics->connections_cut += n;
  return n;
}

int evd_http_timeout(evd_http_t *h, uint64_t *ms) {
  MHD_UNSIGNED_LONG_LONG t;

  if (MHD_get_timeout(h->d, &t) != MHD_YES)
    return 0;
  *ms = (uint64_t)t;
  return 1;
}

void evd_http_quiesce(evd_http_t *h) {
  MHD_socket fd;

  if (h->quiesced)
    return;
  h->quiesced = 1;
  fd = MHD_quiesce_daemon(h->d);
  if (fd != MHD_INVALID_SOCKET)
    close(fd);
}

unsigned evd_http_busy(const evd_http_t *h) {
  return h->busy;
}

void evd_http_stop(evd_http_t *h) {
  conn_t *c;

  if (h == NULL)
    return;
  /* libmicrohttpd must not be stopped with connections suspended. */
  while ((c = FIRST(&h->waits, wait)) != NULL) {
    evd_queue_remove(&c->wait);
    MHD_resume_connection(c->mc);
  }
  MHD_stop_daemon(h->d);
  free(h);
}
