/* evictd-llama serve's answers from tasks (answer.h): a task's events
 * turned into an answer by its API, streamed as server-sent events or
 * gathered into one. A connection's thread waits on its task (a plain
 * wait, no event loop to hand results back into) and looks at its socket
 * between waits, so that a client that goes away is noticed within 100 ms
 * even while nothing is written to it. */
#include "serve/shared/answer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/clock.h"

/* How long a connection's thread waits for news before it looks at its
 * client's socket again. */
#define WAIT_MS 100

/* Ends a's request: the API's parts, a task not done cancelled when the
 * client went away, then this layer's. */
static void answer_free(void *state, bool completed) {
  answer_t *a = state;
  if (a->api->free != NULL)
    a->api->free(a);
  if (a->task != NULL) {
    if (!completed)
      tq_cancel(a->site->q, a->task);
    tq_release(a->site->q, a->task);
  }
  news_free(&a->news);
  evd_buf_free(&a->out);
  free(a);
}

void *answer_new(call_t *c, const api_t *api, size_t size) {
  answer_t *a = calloc(1, size);
  if (a == NULL)
    return NULL;
  a->c = c;
  a->site = c->ctx;
  a->api = api;
  c->state = a;
  c->state_free = answer_free;
  return a;
}

void *answer_begin(call_t *c, const api_t *api, size_t size, fields_t *f,
                   task_t **t, enum MHD_Result *sent) {
  *f = (fields_t){.body = NULL};
  *t = NULL;
  if (http_json(c, &f->body, sent) != 0)
    return NULL;
  answer_t *a = answer_new(c, api, size);
  if (a == NULL || (*t = task_new()) == NULL) {
    json_decref(f->body);
    f->body = NULL;
    *sent = http_error(c, 500, "out_of_memory", NULL, "out of memory");
    return NULL;
  }
  return a;
}

void answer_drawn(answer_t *a, uint32_t i, const choice_out_t *out,
                  void (*take)(answer_t *a, uint32_t i, const char *bytes,
                               size_t len)) {
  for (size_t at = 0; at + sizeof(size_t) <= out->drawn.len;) {
    size_t len;
    memcpy(&len, out->drawn.data + at, sizeof(len));
    take(a, i, out->drawn.data + at + sizeof(len), len);
    at += sizeof(len) + len;
  }
}

void answer_random_id(char *out, size_t len, const char *prefix,
                      const char *abc) {
  size_t n = strlen(abc);
  unsigned char b[24];
  if (getrandom(b, sizeof(b), 0) != sizeof(b))
    for (size_t i = 0; i < sizeof(b); i++)
      b[i] = (unsigned char)rand();
  char s[25];
  for (size_t i = 0; i < 24; i++)
    s[i] = abc[b[i] % n];
  s[24] = '\0';
  snprintf(out, len, "%s%s", prefix, s);
}

/* ---- streams ------------------------------------------------------------ */

/* Appends "data: LINE\n\n" to the frames not sent yet; 0 or -1. */
static int frame(answer_t *a, const char *line) {
  evd_buf_str(&a->out, "data: ");
  evd_buf_str(&a->out, line);
  evd_buf_str(&a->out, "\n\n");
  return a->out.oom ? -1 : 0;
}

/* A chunk as a frame (j taken; NULL: nothing). An API of typed events
 * (the Responses API) gives an array of them, each framed as "event:
 * TYPE" (its "type") and its data. */
static int frame_json(answer_t *a, json_t *j) {
  if (j == NULL)
    return 0;
  int rc = 0;
  if (a->api->typed && json_is_array(j)) {
    size_t i;
    json_t *ev;
    json_array_foreach(j, i, ev) {
      json_t *type = json_object_get(ev, "type");
      char *s = json_dumps(ev, JSON_COMPACT);
      evd_buf_str(&a->out, "event: ");
      evd_buf_str(&a->out, json_is_string(type) ? json_string_value(type)
                                                 : "message");
      evd_buf_str(&a->out, "\n");
      if (s == NULL || frame(a, s) != 0)
        rc = -1;
      free(s);
    }
  } else if (a->api->multi && json_is_array(j)) {
    size_t i;
    json_t *one;
    json_array_foreach(j, i, one) {
      char *s = json_dumps(one, JSON_COMPACT);
      if (s == NULL || frame(a, s) != 0)
        rc = -1;
      free(s);
    }
  } else {
    char *s = json_dumps(j, JSON_COMPACT);
    rc = s != NULL ? frame(a, s) : -1;
    free(s);
  }
  json_decref(j);
  return rc;
}

/* Formats what the task said since last time; sets a->ended after its
 * last frame. */
static int format_news(answer_t *a, task_state_t st) {
  task_t *t = a->task;
  for (size_t i = 0; i < a->news.n_ev; i++) {
    const event_t *e = &a->news.ev[i];
    if (frame_json(a, a->api->chunk(a, e, a->news.text.data + e->off)))
      return -1;
  }
  if (st != TASK_DONE)
    return 0;
  a->ended = true;
  if (t->failed)
    return frame_json(a, a->api->failed != NULL
                             ? a->api->failed(a, &t->fault)
                             : http_error_json((unsigned)t->fault.status,
                                               t->fault.code, NULL,
                                               t->fault.msg));
  if (a->api->last != NULL && frame_json(a, a->api->last(a)) != 0)
    return -1;
  return a->api->done != NULL ? frame(a, a->api->done) : 0;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  answer_t *a = cls;
  for (;;) {
    if (a->out_off < a->out.len) {
      size_t n = a->out.len - a->out_off;
      if (n > max)
        n = max;
      memcpy(buf, a->out.data + a->out_off, n);
      a->out_off += n;
      if (a->out_off == a->out.len) { /* all sent: the memory is reused */
        a->out_off = 0;
        evd_buf_reset(&a->out, 1 << 20);
      }
      return (ssize_t)n;
    }
    if (a->ended)
      return MHD_CONTENT_READER_END_OF_STREAM;
    task_state_t st = tq_take(a->site->q, a->task, &a->news, WAIT_MS);
    if (format_news(a, st) != 0)
      return MHD_CONTENT_READER_END_WITH_ERROR;
    if (a->out.len == 0 && !a->ended && http_peer_gone(a->c)) {
      tq_cancel(a->site->q, a->task);
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
static int collect(answer_t *a, task_t *t, choice_out_t *out) {
  uint32_t n = t->want.n;
  double looked = clock_now();
  for (task_state_t st = TASK_QUEUED; st != TASK_DONE;) {
    st = tq_take(a->site->q, t, &a->news, WAIT_MS);
    if (gather(out, n, &a->news) != 0)
      return -1;
    /* The socket is looked at every WAIT_MS, news or not: while tokens
     * flow there is news at every take, and a client gone would be
     * noticed only once its whole answer was made. */
    double now = clock_now();
    if (st != TASK_DONE && now - looked >= WAIT_MS / 1e3 &&
        (looked = now, http_peer_gone(a->c))) {
      tq_cancel(a->site->q, t);
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

static enum MHD_Result whole(answer_t *a) {
  task_t *t = a->task;
  uint32_t n = t->want.n;
  choice_out_t *out = calloc(n, sizeof(*out));
  int got = out == NULL ? -1 : collect(a, t, out);
  enum MHD_Result rc;
  if (got == 1)
    rc = MHD_NO; /* nobody to answer */
  else if (got != 0)
    rc = http_error(a->c, 500, "out_of_memory", NULL, "out of memory");
  else if (t->failed)
    rc = http_error(a->c, (unsigned)t->fault.status, t->fault.code, NULL,
                    "%s", t->fault.msg);
  else
    rc = http_send_json(a->c, 200, a->api->whole(a, out, n));
  outs_free(out, n);
  return rc;
}

/* The 503 of a task the queue did not take. */
static enum MHD_Result refused(answer_t *a, int q) {
  if (q == TQ_STOPPING)
    return http_error(a->c, 503, "shutting_down", NULL,
                      "the server is shutting down");
  return http_error(a->c, 503, "busy", NULL, "too many requests are "
                    "waiting (--queue %u): try again later",
                    a->site->o->queue);
}

enum MHD_Result answer_tasks(answer_t *a, task_t **ts, uint32_t k,
                             void (*pick)(answer_t *a, uint32_t i)) {
  uint32_t sent = 0;
  int q = 0;
  for (uint32_t i = 0; i < k; i++)
    ts[i]->whole = true;
  while (sent < k && (q = tq_submit(a->site->q, ts[sent])) == 0)
    sent++;
  a->stream = false;
  json_t *list = json_array();
  enum MHD_Result rc = MHD_YES;
  bool over = sent < k;
  if (over)
    rc = refused(a, q);
  /* In order: a later task runs meanwhile, its news kept for it. */
  for (uint32_t i = 0; !over && i < k; i++) {
    task_t *t = ts[i];
    choice_out_t *out = calloc(t->want.n, sizeof(*out));
    int got = out == NULL ? -1 : collect(a, t, out);
    a->task = t;
    pick(a, i);
    if (got == 1) {
      rc = MHD_NO, over = true; /* nobody to answer */
    } else if (got != 0) {
      rc = http_error(a->c, 500, "out_of_memory", NULL, "out of memory");
      over = true;
    } else if (t->failed) {
      rc = http_error(a->c, (unsigned)t->fault.status, t->fault.code, NULL,
                      "%s", t->fault.msg);
      over = true;
    } else if (json_array_append_new(list, a->api->whole(a, out,
                                                         t->want.n)) != 0) {
      rc = http_error(a->c, 500, "out_of_memory", NULL, "out of memory");
      over = true;
    }
    outs_free(out, t->want.n);
    a->task = NULL;
  }
  if (json_array_size(list) == k)
    rc = http_send_json(a->c, 200, json_incref(list));
  json_decref(list);
  /* Those not done are ended (a failure, a client gone). */
  for (uint32_t i = 0; i < k; i++) {
    if (i < sent)
      tq_cancel(a->site->q, ts[i]);
    tq_release(a->site->q, ts[i]);
  }
  return rc;
}

enum MHD_Result answer_start(call_t *c, answer_t *a, task_t *t, int bad,
                             const fields_t *f) {
  if (t == NULL)
    return http_error(c, 500, "out_of_memory", NULL, "out of memory");
  if (bad != 0) {
    tq_release(a->site->q, t);
    return fields_refuse(c, f);
  }
  return answer_task(a, t, a->stream);
}

enum MHD_Result answer_task(answer_t *a, task_t *t, bool stream) {
  t->whole = !stream;
  int q = tq_submit(a->site->q, t);
  if (q != 0) {
    tq_release(a->site->q, t);
    return refused(a, q);
  }
  a->task = t;
  a->stream = stream;
  if (!stream)
    return whole(a);
  return http_send_stream(a->c, stream_reader, a);
}
