/* A task's events turned into an answer by its API (answer.c): streamed
 * as server-sent events, or gathered and answered whole once it is done;
 * several tasks answered as one list. The API's state for a request
 * begins with an answer_t (as libuv's handles begin with uv_handle_t), so
 * that this layer and the API share one object, freed with the request. */
#ifndef EVICTD_LLAMA_SERVE_ANSWER_H
#define EVICTD_LLAMA_SERVE_ANSWER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "serve/http/http.h"
#include "serve/queue/tasks.h"
#include "serve/shared/fields.h"
#include "serve/shared/site.h"

/* A choice's outcome gathered for an answer that is not streamed. */
typedef struct choice_out_s {
  evd_buf_t text;
  finish_t finish;
  uint32_t tokens;
  uint32_t stop;          /* FIN_STOP: which of want.stop */
  evd_buf_t drawn;        /* its EV_TOKEN events, each as a size_t length
                             then the token_ev_t's bytes */
} choice_out_t;

typedef struct answer_s answer_t;

/* How one API answers from a task's events. */
typedef struct api_s {
  /* One event of a stream as a JSON chunk (a new reference), or NULL when
   * the event is not sent. text: the event's bytes (EV_TEXT). */
  json_t *(*chunk)(answer_t *a, const event_t *e, const char *text);
  /* The answer once the task is done, not streamed: out[0..n). */
  json_t *(*whole)(answer_t *a, const choice_out_t *out, uint32_t n);
  /* A stream's last chunk before `done` (may be NULL, or return NULL). */
  json_t *(*last)(answer_t *a);
  /* A stream's failure as its event(s), or NULL: OpenAI's error shape. */
  json_t *(*failed)(answer_t *a, const fault_t *f);
  /* Frees what the API's state holds beyond its answer_t (may be NULL). */
  void (*free)(answer_t *a);
  const char *done;       /* the stream's last data line, or NULL */
  bool typed;             /* chunk and last give arrays of typed events
                             ("event: TYPE" frames: the Responses API) */
  bool multi;             /* chunk may give an array of chunks, each a
                             "data:" frame (a chat's deltas) */
} api_t;

/* What this layer keeps of a request: the first member of every API's
 * state. */
struct answer_s {
  call_t *c;              /* the request (the transport's) */
  const site_t *site;     /* c's ctx */
  const api_t *api;
  task_t *task;           /* once submitted (answer_tasks: the one whose
                             answer is made now) */
  bool stream;
  news_t news;            /* the task's events not yet formatted */
  evd_buf_t out;          /* a stream's frames not sent yet, from out_off */
  size_t out_off;
  bool ended;             /* a stream's last frame is in out */
};

/* The state of an API's request: size bytes (its struct, whose first
 * member is an answer_t), zeroed, tied to c (freed when the request is
 * over: the API's free, then this layer's parts; a task not done is
 * cancelled when its client went away). NULL when out of memory. */
void *answer_new(call_t *c, const api_t *api, size_t size);

/* Submits t (taken) and answers from its events with a's API: a stream of
 * server-sent events, or the whole answer when it is done; a client that
 * goes away cancels it. */
enum MHD_Result answer_task(answer_t *a, task_t *t, bool stream);

/* The start of an API's request of one task: the body parsed into f (a
 * new reference in f->body, which the caller drops), the API's state of
 * size bytes (answer_new) and a task (*t). The state, or NULL with the
 * answer sent into *sent: the body's 400 or 413, or a 500 (out of
 * memory). */
void *answer_begin(call_t *c, const api_t *api, size_t size, fields_t *f,
                   task_t **t, enum MHD_Result *sent);

/* The end of an API's request of one task: t (taken) answered as
 * answer_task does (streamed when a->stream); or, when its fields were
 * refused (bad not 0), t released and f's 400 sent; or, t NULL (out of
 * memory, a then perhaps NULL too), a 500. */
enum MHD_Result answer_start(call_t *c, answer_t *a, task_t *t, int bad,
                             const fields_t *f);

/* Submits ts[0..k) (taken: each released here, the array the caller's)
 * and answers, once all are done, with the list of the API's whole
 * answers of each, in order; pick(a, i) makes task i's state current
 * (a->task is set) before the API reads it. A task the queue does not
 * take, or one that fails, ends the others and answers as a single one
 * would. Not streamed. */
enum MHD_Result answer_tasks(answer_t *a, task_t **ts, uint32_t k,
                             void (*pick)(answer_t *a, uint32_t i));

/* Calls take(a, i, bytes, len) for each token choice i drew (out's
 * drawn: EV_TOKEN events' bytes, a token_ev_t each), in order. */
void answer_drawn(answer_t *a, uint32_t i, const choice_out_t *out,
                  void (*take)(answer_t *a, uint32_t i, const char *bytes,
                               size_t len));

/* 24 random characters of abc (its length at most 256) after prefix, into
 * out: an answer's id (msg_..., resp_...). */
void answer_random_id(char *out, size_t len, const char *prefix,
                      const char *abc);

#endif
