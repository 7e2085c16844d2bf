/* evictd-llama serve's answers: JSON made with jansson, errors in one
 * shape, and a task's events turned into an answer by its API, streamed as
 * server-sent events or gathered into one. A connection's thread waits on
 * its task (a plain wait, no event loop to hand results back into) and
 * looks at its socket between waits, so that a client that goes away is
 * noticed within 100 ms even while nothing is written to it. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "serve/http.h"

/* How long a connection's thread waits for news before it looks at its
 * client's socket again. */
#define WAIT_MS 100

enum MHD_Result reply_text(call_t *c, unsigned status, const char *type,
                           char *body, size_t len) {
  return reply_text_header(c, status, type, body, len, NULL, NULL);
}

enum MHD_Result reply_text_header(call_t *c, unsigned status,
                                  const char *type, char *body, size_t len,
                                  const char *name, const char *value) {
  struct MHD_Response *rs = MHD_create_response_from_buffer(
      len, body, MHD_RESPMEM_MUST_FREE);
  if (rs == NULL) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(rs, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (name != NULL)
    MHD_add_response_header(rs, name, value);
  if (status == 503)
    MHD_add_response_header(rs, MHD_HTTP_HEADER_RETRY_AFTER, "1");
  if (status == 405 && c->allow != NULL)
    MHD_add_response_header(rs, MHD_HTTP_HEADER_ALLOW, c->allow);
  http_cors(c, rs);
  enum MHD_Result ok = MHD_queue_response(c->conn, status, rs);
  MHD_destroy_response(rs);
  return ok;
}

enum MHD_Result reply_json(call_t *c, unsigned status, json_t *j) {
  char *s = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  return s == NULL ? MHD_NO
                   : reply_text(c, status, "application/json", s, strlen(s));
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

json_t *reply_error_json(unsigned status, const char *code,
                         const char *param, const char *message) {
  char msg[640];
  snprintf(msg, sizeof(msg), "%s", message);
  utf8_fix(msg);
  const char *type = status == 401 ? "authentication_error"
                   : status == 404 ? "not_found_error"
                   : status == 501 ? "not_supported_error"
                   : status < 500 ? "invalid_request_error" : "server_error";
  return json_pack("{s:{s:s,s:s,s:s?,s:s}}", "error", "message", msg,
                   "type", type, "param", param, "code", code);
}

enum MHD_Result reply_error(call_t *c, unsigned status, const char *code,
                            const char *param, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  return reply_json(c, status, (c->errors ? c->errors : reply_error_json)(
                                   status, code, param, msg));
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

/* ---- streams ------------------------------------------------------------ */

/* Appends "data: LINE\n\n" to the frames not sent yet; 0 or -1. */
static int frame(call_t *c, const char *line) {
  evd_buf_str(&c->out, "data: ");
  evd_buf_str(&c->out, line);
  evd_buf_str(&c->out, "\n\n");
  return c->out.oom ? -1 : 0;
}

/* A chunk as a frame (j taken; NULL: nothing). An API of typed events
 * (the Responses API) gives an array of them, each framed as "event:
 * TYPE" (its "type") and its data. */
static int frame_json(call_t *c, json_t *j) {
  if (j == NULL)
    return 0;
  int rc = 0;
  if (c->api->typed && json_is_array(j)) {
    size_t i;
    json_t *ev;
    json_array_foreach(j, i, ev) {
      json_t *type = json_object_get(ev, "type");
      char *s = json_dumps(ev, JSON_COMPACT);
      evd_buf_str(&c->out, "event: ");
      evd_buf_str(&c->out, json_is_string(type) ? json_string_value(type)
                                                 : "message");
      evd_buf_str(&c->out, "\n");
      if (s == NULL || frame(c, s) != 0)
        rc = -1;
      free(s);
    }
  } else if (c->api->multi && json_is_array(j)) {
    size_t i;
    json_t *one;
    json_array_foreach(j, i, one) {
      char *s = json_dumps(one, JSON_COMPACT);
      if (s == NULL || frame(c, s) != 0)
        rc = -1;
      free(s);
    }
  } else {
    char *s = json_dumps(j, JSON_COMPACT);
    rc = s != NULL ? frame(c, s) : -1;
    free(s);
  }
  json_decref(j);
  return rc;
}

/* Formats what the task said since last time; sets c->ended after its
 * last frame. */
static int format_news(call_t *c, task_state_t st) {
  task_t *t = c->task;
  for (size_t i = 0; i < c->news.n_ev; i++) {
    const event_t *e = &c->news.ev[i];
    if (frame_json(c, c->api->chunk(c, e, c->news.text.data + e->off)))
      return -1;
  }
  if (st != TASK_DONE)
    return 0;
  c->ended = true;
  if (t->failed)
    return frame_json(c, c->api->failed != NULL
                             ? c->api->failed(c, &t->fault)
                             : reply_error_json((unsigned)t->fault.status,
                                                t->fault.code, NULL,
                                                t->fault.msg));
  if (c->api->last != NULL && frame_json(c, c->api->last(c)) != 0)
    return -1;
  return c->api->done != NULL ? frame(c, c->api->done) : 0;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  call_t *c = cls;
  for (;;) {
    if (c->out_off < c->out.len) {
      size_t n = c->out.len - c->out_off;
      if (n > max)
        n = max;
      memcpy(buf, c->out.data + c->out_off, n);
      c->out_off += n;
      if (c->out_off == c->out.len) { /* all sent: the memory is reused */
        c->out_off = 0;
        evd_buf_reset(&c->out, 1 << 20);
      }
      return (ssize_t)n;
    }
    if (c->ended)
      return MHD_CONTENT_READER_END_OF_STREAM;
    task_state_t st = tq_take(c->site->q, c->task, &c->news, WAIT_MS);
    if (format_news(c, st) != 0)
      return MHD_CONTENT_READER_END_WITH_ERROR;
    if (c->out.len == 0 && !c->ended && peer_gone(c->fd)) {
      tq_cancel(c->site->q, c->task);
      return MHD_CONTENT_READER_END_WITH_ERROR;
    }
  }
}

/* ---- whole answers ------------------------------------------------------ */

static int gather(choice_out_t *out, uint32_t n, const news_t *nw) {
  for (size_t i = 0; i < nw->n_ev; i++) {
    const event_t *e = &nw->ev[i];
    choice_out_t *o = &out[e->choice < n ? e->choice : 0];
    if (e->kind == EV_END) {
      o->finish = e->finish;
      o->tokens = e->tokens;
      o->stop = e->stop;
    } else if (e->kind == EV_TOKEN) {
      evd_buf_add(&o->drawn, (const char *)&e->len, sizeof(e->len));
      evd_buf_add(&o->drawn, nw->text.data + e->off, e->len);
    } else if (e->kind == EV_TEXT) { /* progress: streams' alone */
      evd_buf_add(&o->text, nw->text.data + e->off, e->len);
    }
    if (o->text.oom || o->drawn.oom)
      return -1;
  }
  return 0;
}

/* Gathers task t's events into out[0..t->want.n) until it is done,
 * looking at the client's socket every WAIT_MS. 0; -1 out of memory; 1
 * the client went away (t cancelled). */
static int collect(call_t *c, task_t *t, choice_out_t *out) {
  uint32_t n = t->want.n;
  double looked = clock_now();
  for (task_state_t st = TASK_QUEUED; st != TASK_DONE;) {
    st = tq_take(c->site->q, t, &c->news, WAIT_MS);
    if (gather(out, n, &c->news) != 0)
      return -1;
    /* The socket is looked at every WAIT_MS, news or not: while tokens
     * flow there is news at every take, and a client gone would be
     * noticed only once its whole answer was made. */
    double now = clock_now();
    if (st != TASK_DONE && now - looked >= WAIT_MS / 1e3 &&
        (looked = now, peer_gone(c->fd))) {
      tq_cancel(c->site->q, t);
      return 1;
    }
  }
  return 0;
}

static void outs_free(choice_out_t *out, uint32_t n) {
  for (uint32_t i = 0; out != NULL && i < n; i++) {
    evd_buf_free(&out[i].text);
    evd_buf_free(&out[i].drawn);
  }
  free(out);
}

static enum MHD_Result whole(call_t *c) {
  task_t *t = c->task;
  uint32_t n = t->want.n;
  choice_out_t *out = calloc(n, sizeof(*out));
  int got = out == NULL ? -1 : collect(c, t, out);
  enum MHD_Result rc;
  if (got == 1)
    rc = MHD_NO; /* nobody to answer */
  else if (got != 0)
    rc = reply_error(c, 500, "out_of_memory", NULL, "out of memory");
  else if (t->failed)
    rc = reply_error(c, (unsigned)t->fault.status, t->fault.code, NULL, "%s",
                     t->fault.msg);
  else
    rc = reply_json(c, 200, c->api->whole(c, out, n));
  outs_free(out, n);
  return rc;
}

/* The 503 of a task the queue did not take. */
static enum MHD_Result refused(call_t *c, int q) {
  if (q == TQ_STOPPING)
    return reply_error(c, 503, "shutting_down", NULL,
                       "the server is shutting down");
  return reply_error(c, 503, "busy", NULL, "too many requests are "
                     "waiting (--queue %u): try again later",
                     c->site->o->queue);
}

enum MHD_Result reply_tasks(call_t *c, task_t **ts, uint32_t k,
                            const api_t *api,
                            void (*pick)(call_t *c, uint32_t i)) {
  uint32_t sent = 0;
  int q = 0;
  for (uint32_t i = 0; i < k; i++)
    ts[i]->whole = true;
  while (sent < k && (q = tq_submit(c->site->q, ts[sent])) == 0)
    sent++;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  c->fd = ci != NULL ? ci->connect_fd : -1;
  c->api = api;
  c->stream = false;
  json_t *list = json_array();
  enum MHD_Result rc = MHD_YES;
  bool over = sent < k;
  if (over)
    rc = refused(c, q);
  /* In order: a later task runs meanwhile, its news kept for it. */
  for (uint32_t i = 0; !over && i < k; i++) {
    task_t *t = ts[i];
    choice_out_t *out = calloc(t->want.n, sizeof(*out));
    int got = out == NULL ? -1 : collect(c, t, out);
    c->task = t;
    pick(c, i);
    if (got == 1) {
      rc = MHD_NO, over = true; /* nobody to answer */
    } else if (got != 0) {
      rc = reply_error(c, 500, "out_of_memory", NULL, "out of memory");
      over = true;
    } else if (t->failed) {
      rc = reply_error(c, (unsigned)t->fault.status, t->fault.code, NULL,
                       "%s", t->fault.msg);
      over = true;
    } else if (json_array_append_new(list, api->whole(c, out,
                                                      t->want.n)) != 0) {
      rc = reply_error(c, 500, "out_of_memory", NULL, "out of memory");
      over = true;
    }
    outs_free(out, t->want.n);
    c->task = NULL;
  }
  if (json_array_size(list) == k)
    rc = reply_json(c, 200, json_incref(list));
  json_decref(list);
  /* Those not done are ended (a failure, a client gone). */
  for (uint32_t i = 0; i < k; i++) {
    if (i < sent)
      tq_cancel(c->site->q, ts[i]);
    tq_release(c->site->q, ts[i]);
  }
  return rc;
}

enum MHD_Result reply_task(call_t *c, task_t *t, const api_t *api,
                           bool stream) {
  t->whole = !stream;
  int q = tq_submit(c->site->q, t);
  if (q != 0) {
    tq_release(c->site->q, t);
    return refused(c, q);
  }
  c->task = t;
  c->api = api;
  c->stream = stream;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  c->fd = ci != NULL ? ci->connect_fd : -1;
  if (!stream)
    return whole(c);
  struct MHD_Response *rs = MHD_create_response_from_callback(
      MHD_SIZE_UNKNOWN, 4096, stream_reader, c, NULL);
  if (rs == NULL)
    return MHD_NO;
  MHD_add_response_header(rs, MHD_HTTP_HEADER_CONTENT_TYPE,
                          "text/event-stream");
  MHD_add_response_header(rs, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  http_cors(c, rs);
  enum MHD_Result ok = MHD_queue_response(c->conn, 200, rs);
  MHD_destroy_response(rs);
  return ok;
}
