/* evictd-llama serve: what the HTTP side (serve.c, serve_http.c) and the
 * decode loop (engine.c) share. A request is handed from an HTTP
 * connection's thread to the engine thread through a queue under one
 * mutex; the engine writes its output into the request and signals the
 * request's condition variable; the connection's thread copies it out. */
#ifndef EVICTD_LLAMA_SERVE_H
#define EVICTD_LLAMA_SERVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "evictd/client.h"
#include "lm.h"

typedef struct serve_opts_s {
  const char *model;
  const char *listen;        /* HOST:PORT or unix:/path */
  const char *url;           /* evictd */
  int64_t budget, sinks, lookahead; /* < 0: the daemon's defaults */
  uint32_t parallel;         /* sequences decoding at once */
  uint32_t queue;            /* requests waiting beyond those */
  uint32_t n_predict_max;
  int threads;
  const char *token_file, *cafile;
  unsigned timeout_ms, reconnect_ms;
  bool debug;
} serve_opts_t;

enum req_state { REQ_QUEUED, REQ_RUNNING, REQ_DONE, REQ_FAILED };

typedef struct req_s {
  struct req_s *next;          /* the engine's queue or active list */
  /* set by the HTTP side before queueing, read-only afterwards */
  llama_token *prompt;
  uint32_t n_prompt, n_predict;
  double temp;
  uint64_t seed;
  bool stream;
  char session[64];
  /* the engine's alone */
  int32_t seq;                 /* llama.cpp sequence id while running */
  llama_token *hist;           /* the token at each position */
  uint32_t cap;
  uint32_t n;                  /* positions below n are computed */
  uint32_t held;               /* positions evictd holds */
  uint32_t chunk;              /* positions the current step adds */
  int32_t out_idx;             /* its logits in the pass, or -1 */
  uint64_t rng;
  char pend[8];                /* bytes of an unfinished UTF-8 character */
  size_t npend;
  /* under serve_t.mu */
  enum req_state state;
  bool cancel;                 /* the client went away */
  int refs;                    /* the connection and the engine */
  char *out;                   /* content, or SSE events when streamed */
  size_t out_len, out_cap, out_read;
  uint32_t predicted;
  const char *stop_type;       /* "eos" or "limit" */
  int err_status;
  char err_code[48];
  char err_msg[384];
  pthread_cond_t cv;
} req_t;

typedef struct serve_s {
  const serve_opts_t *o;
  lm_t lm;
  uint32_t budget, sinks, lookahead; /* of every session */
  uint32_t n_batch;
  pid_t pid;
  pthread_mutex_t mu;
  pthread_cond_t cv;           /* the engine waits on it for work */
  req_t *queue, *queue_tail;
  uint32_t n_queued, n_active;
  uint64_t counter;            /* session ids */
  bool stopping;
  bool engine_done;
  /* metrics, under mu */
  uint64_t m_requests, m_tokens, m_failed, m_iterations, m_steps_sent;
  uint64_t m_connections, m_resends; /* the evictd client's */
  double m_evictd_s, m_decode_s, m_total_s;
} serve_t;

/* The engine thread (engine.c): starts, runs until stopping, then ends
 * the requests still active and deletes their sessions. */
int engine_start(serve_t *sv, pthread_t *th, char *err, size_t errlen);

/* Queues a request (under sv->mu, by the HTTP side): 0, or -1 when the
 * queue is full or the server stopping (503). */
int engine_submit(serve_t *sv, req_t *r);

/* Drops a reference (under sv->mu); the last one frees the request. */
void req_unref(req_t *r);

/* Appends n bytes to the string *p (length *len, room *cap); 0 or -1. */
int buf_add(char **p, size_t *len, size_t *cap, const char *s, size_t n);

/* Appends s[0..n) as a JSON string literal, bytes that are not UTF-8
 * replaced by U+FFFD. */
int buf_json(char **p, size_t *len, size_t *cap, const char *s, size_t n);

/* The length of s[0..n) without an unfinished UTF-8 character at its end
 * (a token's piece may hold part of one). */
size_t utf8_whole(const char *s, size_t n);

/* Appends bytes to r->out (under sv->mu); 0 or -1. */
int req_append(req_t *r, const char *s, size_t n);

/* Writes a JSON string literal of s[0..n) into r->out. */
int req_append_json(req_t *r, const char *s, size_t n);

/* The HTTP side (serve_http.c) on the listening socket fd. */
struct MHD_Daemon;
struct MHD_Daemon *serve_http_start(serve_t *sv, int fd);

/* evictd-llama serve's command line (serve.c). */
int serve_main(int argc, char **argv);

double serve_now(void);

#endif
