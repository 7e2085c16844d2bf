/* evictd-llama serve's decode loop: one thread owns llama.cpp and the
 * evictd client (neither is shared between threads: a client is one
 * connection used by one thread, and a llama.cpp context is decoded by
 * one caller). Each iteration it admits queued requests up to --parallel,
 * sends ONE evictd batch (POST /step) with a step for every active
 * request (a prompt chunk of at most `lookahead` positions while
 * prefilling, else the pending token), runs ONE llama_decode of every
 * sequence, removes from each sequence's cells exactly the victims its
 * answer names (after checking the answer's size against the engine's
 * count), and samples. Positions are the tokens' absolute positions. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "serve.h"

/* ---- the engine's state ---------------------------------------------- */

typedef struct engine_s {
  serve_t *sv;
  evd_client_t *ev;
  req_t *active;               /* running requests, in admission order */
  bool *seq_used;
  evd_step_t *steps;
  evd_batch_result_t *results;
  req_t **step_req;
  uint32_t *pos;
  evd_session_cfg_t cfg;
  bool ending;                 /* shutting down: a short-lived client */
  bool unreachable;            /* ... that met a dead daemon: no more */
} engine_t;

static uint64_t splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Greedy (the lowest id on a tie) at temperature 0, else a draw from
 * softmax(logits / temp): the same draw as `generate` with the same seed. */
static llama_token sample(engine_t *e, req_t *r, const float *l) {
  int n = e->sv->lm.n_vocab, best = 0;
  for (int i = 1; i < n; i++)
    if (l[i] > l[best])
      best = i;
  if (r->temp <= 0)
    return best;
  double t = r->temp, z = 0;
  for (int i = 0; i < n; i++)
    z += exp(((double)l[i] - l[best]) / t);
  double u = (double)(splitmix(&r->rng) >> 11) * 0x1.0p-53 * z, c = 0;
  for (int i = 0; i < n; i++) {
    c += exp(((double)l[i] - l[best]) / t);
    if (u < c)
      return i;
  }
  return best;
}

static int reserve(req_t *r, uint32_t need) {
  if (need <= r->cap)
    return 0;
  uint32_t cap = r->cap ? r->cap : 256;
  while (cap < need)
    cap *= 2;
  llama_token *h = realloc(r->hist, cap * sizeof(*h));
  if (h == NULL)
    return -1;
  r->hist = h;
  r->cap = cap;
  return 0;
}

/* Ends a request: its cells leave llama.cpp's cache, its session leaves
 * evictd (unless evictd cannot be reached: `reach` false), and the
 * connection's thread is woken. status 0: finished with stop_type. */
static void finish(engine_t *e, req_t *r, int status, const char *code,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void finish(engine_t *e, req_t *r, int status, const char *code,
                   const char *fmt, ...) {
  serve_t *sv = e->sv;
  llama_memory_seq_rm(sv->lm.mem, r->seq, -1, -1);
  bool reach = (status != 503 || strcmp(code, "shutting_down") == 0) &&
               !e->unreachable;
  if (reach) {
    /* missing_ok: a resent delete whose first answer was lost meets 404. */
    double t0 = serve_now();
    int rc;
    do
      rc = evd_client_delete(e->ev, r->session, true);
    while (rc == EVD_CLIENT_ETIMEOUT && !e->ending &&
           serve_now() - t0 < sv->o->reconnect_ms / 1000.0);
    if (e->ending &&
        (rc == EVD_CLIENT_ECONNECT || rc == EVD_CLIENT_ETIMEOUT))
      e->unreachable = true;
    if (rc != 0)
      fprintf(stderr, "evictd-llama serve: deleting session %s failed: "
              "%s: %s\n", r->session, evd_client_error(e->ev)->code,
              evd_client_error(e->ev)->message);
  }
  pthread_mutex_lock(&sv->mu);
  if (status == 0) {
    r->state = REQ_DONE;
  } else {
    r->state = REQ_FAILED;
    r->err_status = status;
    snprintf(r->err_code, sizeof(r->err_code), "%s", code);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err_msg, sizeof(r->err_msg), fmt, ap);
    va_end(ap);
    sv->m_failed++;
  }
  if (r->stream) {
    if (status == 0) {
      char tail[192];
      int n = snprintf(tail, sizeof(tail),
                       "data: {\"content\":\"\",\"stop\":true,\"stop_type\":"
                       "\"%s\",\"tokens_predicted\":%u,"
                       "\"tokens_evaluated\":%u}\n\n",
                       r->stop_type, r->predicted, r->n_prompt);
      req_append(r, tail, (size_t)n);
    } else {
      req_append(r, "data: {\"error\":{\"code\":", 23);
      req_append_json(r, r->err_code, strlen(r->err_code));
      req_append(r, ",\"message\":", 11);
      req_append_json(r, r->err_msg, strlen(r->err_msg));
      req_append(r, "}}\n\n", 4);
    }
  }
  /* off the active list */
  for (req_t **p = &e->active; *p != NULL; p = &(*p)->next)
    if (*p == r) {
      *p = r->next;
      break;
    }
  e->seq_used[r->seq] = false;
  sv->n_active--;
  pthread_cond_broadcast(&r->cv);
  req_unref(r);
  pthread_mutex_unlock(&sv->mu);
}

/* A token decided: counted, its bytes to the output, the end checked. */
static void emit(engine_t *e, req_t *r, llama_token tok) {
  serve_t *sv = e->sv;
  r->hist[r->n] = tok;
  r->predicted++;
  bool end = llama_vocab_is_eog(sv->lm.vocab, tok);
  char piece[256];
  int n = end ? 0 : llama_token_to_piece(sv->lm.vocab, tok, piece,
                                         sizeof(piece), 0, false);
  if (n < 0)
    n = 0; /* a piece over 256 bytes: none in any vocabulary we serve */
  pthread_mutex_lock(&sv->mu);
  sv->m_tokens++;
  if (!r->stream) {
    req_append(r, piece, (size_t)n);
  } else if (n > 0) {
    char buf[sizeof(piece) + sizeof(r->pend)];
    memcpy(buf, r->pend, r->npend);
    memcpy(buf + r->npend, piece, (size_t)n);
    size_t len = r->npend + (size_t)n, whole = utf8_whole(buf, len);
    if (len - whole > sizeof(r->pend))
      whole = len - sizeof(r->pend);
    r->npend = len - whole;
    memcpy(r->pend, buf + whole, r->npend);
    if (whole > 0) {
      req_append(r, "data: {\"content\":", 17);
      req_append_json(r, buf, whole);
      req_append(r, ",\"stop\":false}\n\n", 16);
    }
  }
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&sv->mu);
  if (end || r->predicted >= r->n_predict) {
    r->stop_type = end ? "eos" : "limit";
    finish(e, r, 0, "", " ");
  }
}

/* Requests from the queue into free sequences (under sv->mu). */
static void admit(engine_t *e) {
  serve_t *sv = e->sv;
  while (sv->queue != NULL && sv->n_active < sv->o->parallel) {
    req_t *r = sv->queue;
    sv->queue = r->next;
    if (sv->queue == NULL)
      sv->queue_tail = NULL;
    sv->n_queued--;
    r->next = NULL;
    int32_t seq = 0;
    while (e->seq_used[seq])
      seq++;
    e->seq_used[seq] = true;
    r->seq = seq;
    r->state = REQ_RUNNING;
    r->n = 0;
    r->held = 1; /* a new session holds position 0 */
    r->rng = r->seed;
    if (reserve(r, r->n_prompt + 2) != 0) {
      r->state = REQ_FAILED; /* woken below, as a failure */
      r->err_status = 500;
      snprintf(r->err_code, sizeof(r->err_code), "out_of_memory");
      snprintf(r->err_msg, sizeof(r->err_msg), "out of memory");
      e->seq_used[seq] = false;
      pthread_cond_broadcast(&r->cv);
      req_unref(r);
      continue;
    }
    memcpy(r->hist, r->prompt, r->n_prompt * sizeof(*r->hist));
    sv->n_active++;
    req_t **p = &e->active;
    while (*p != NULL)
      p = &(*p)->next;
    *p = r;
  }
}

/* Fails every request in the pass (steps[0..k) and the ones with no
 * step) after a failure of the whole iteration. */
static void fail_all(engine_t *e, int status, const char *code,
                     const char *msg) {
  while (e->active != NULL)
    finish(e, e->active, status, code, "%s", msg);
}

/* One iteration of every active request. */
static void iterate(engine_t *e) {
  serve_t *sv = e->sv;
  double t0 = serve_now();
  size_t k = 0, np = 0;
  for (req_t *r = e->active; r != NULL; r = r->next) {
    uint32_t first = r->n, cnt = 1;
    if (r->n < r->n_prompt) { /* a prompt chunk; 0 (BOS) needs no step */
      first = r->n == 0 ? 1 : r->n;
      uint32_t end = first + sv->lookahead;
      if (end > r->n_prompt)
        end = r->n_prompt;
      cnt = end > first ? end - first : 0;
    }
    r->chunk = cnt;
    for (uint32_t i = 0; i < cnt; i++)
      e->pos[np + i] = first + i;
    if (cnt > 0) {
      e->steps[k] = (evd_step_t){.session = r->session,
                                 .positions = &e->pos[np],
                                 .n_positions = cnt, .create = &e->cfg};
      e->step_req[k++] = r;
    }
    np += cnt;
  }
  int rc = 0;
  if (k > 0) {
    /* A timed-out batch may have been applied: resent, evictd replays
     * each session's last step (no session is named twice). */
    do
      rc = evd_client_batch(e->ev, e->steps, k, e->results);
    while (rc == EVD_CLIENT_ETIMEOUT &&
           serve_now() - t0 < sv->o->reconnect_ms / 1000.0);
  }
  double t1 = serve_now();
  if (rc != 0) {
    const evd_client_err_t *er = evd_client_error(e->ev);
    char msg[384];
    snprintf(msg, sizeof(msg), "evictd did not answer the step: %s: %s",
             er->code, er->message);
    fprintf(stderr, "evictd-llama serve: %s\n", msg);
    fail_all(e, rc == EVD_CLIENT_EAPI ? 502 : 503,
             rc == EVD_CLIENT_EAPI ? "evictd_error" : "evictd_unavailable",
             msg);
    return;
  }
  for (size_t j = 0; j < k; j++)
    if (e->results[j].rc != 0) {
      const evd_client_err_t *er = &e->results[j].error;
      e->step_req[j]->chunk = UINT32_MAX; /* failed below, after the pass */
      fprintf(stderr, "evictd-llama serve: evictd refused the step of "
              "session %s: %d %s: %s\n", e->step_req[j]->session,
              er->status, er->code, er->message);
    }
  /* ONE pass for every sequence. */
  lm_clear(&sv->lm);
  int32_t outs = 0;
  for (req_t *r = e->active; r != NULL; r = r->next) {
    r->out_idx = -1;
    if (r->chunk == UINT32_MAX)
      continue;
    uint32_t from = r->n, to = r->n + 1;
    if (r->n < r->n_prompt)
      to = (r->n == 0 ? 1 : r->n) + r->chunk;
    for (uint32_t q = from; q < to; q++) {
      bool last = q + 1 == to && to >= r->n_prompt;
      lm_add(&sv->lm, r->hist[q], (int32_t)q, r->seq, last);
      if (last)
        r->out_idx = sv->lm.batch.n_tokens - 1;
    }
    outs += r->out_idx >= 0;
  }
  char err[256];
  if (sv->lm.batch.n_tokens > 0 && lm_decode(&sv->lm, err, sizeof(err))) {
    fprintf(stderr, "evictd-llama serve: %s\n", err);
    fail_all(e, 500, "decode_failed", err);
    return;
  }
  double t2 = serve_now();
  /* Follow the answers, then sample; finish() unlinks, so walk a copy. */
  for (size_t j = 0; j < k; j++) {
    req_t *r = e->step_req[j];
    const evd_answer_t *a = &e->results[j].answer;
    if (r->chunk == UINT32_MAX) {
      const evd_client_err_t *er = &e->results[j].error;
      finish(e, r, 502, "evictd_refused", "evictd refused the step of "
             "session %s: %d %s: %s", r->session, er->status, er->code,
             er->message);
      continue;
    }
    uint64_t held = (uint64_t)r->held + r->chunk;
    if (a->victims.n > held || held - a->victims.n != a->size) {
      r->chunk = UINT32_MAX;
      finish(e, r, 502, "session_lost", "evictd says session %s holds %u "
             "positions, the engine counts %llu: the daemon lost the "
             "session (restarted without --state-dir, or reaped by "
             "--idle-ttl?), so this completion cannot go on", r->session,
             a->size, (unsigned long long)(held - a->victims.n));
      continue;
    }
    r->held = a->size;
    if (lm_remove(&sv->lm, r->seq, a->victims.v, a->victims.n) != 0) {
      r->chunk = UINT32_MAX;
      finish(e, r, 500, "remove_failed", "llama.cpp refused to remove "
             "positions of session %s", r->session);
    }
  }
  double t3 = serve_now();
  req_t *list[1024];
  size_t nl = 0;
  for (req_t *r = e->active; r != NULL && nl < 1024; r = r->next)
    list[nl++] = r;
  for (size_t i = 0; i < nl; i++) {
    req_t *r = list[i];
    if (r->chunk == UINT32_MAX)
      continue;
    r->n = r->n < r->n_prompt ? (r->n == 0 ? 1 : r->n) + r->chunk : r->n + 1;
    if (r->out_idx < 0)
      continue;
    if (reserve(r, r->n + 2) != 0) {
      finish(e, r, 500, "out_of_memory", "out of memory");
      continue;
    }
    emit(e, r, sample(e, r, lm_logits(&sv->lm, r->out_idx)));
  }
  evd_client_stats_t cs;
  evd_client_stats(e->ev, &cs);
  pthread_mutex_lock(&sv->mu);
  sv->m_connections = cs.connections;
  sv->m_resends = cs.resends;
  sv->m_iterations++;
  sv->m_steps_sent += k;
  sv->m_evictd_s += t1 - t0;
  sv->m_decode_s += t2 - t1;
  sv->m_total_s += serve_now() - t0;
  pthread_mutex_unlock(&sv->mu);
  (void)t3;
  (void)outs;
}

/* Frees what engine_start allocated (the client included). */
static void engine_free(engine_t *e) {
  evd_client_free(e->ev);
  free(e->seq_used);
  free(e->steps);
  free(e->results);
  free(e->step_req);
  free(e->pos);
  free(e);
}

static void *engine_main(void *arg) {
  engine_t *e = arg;
  serve_t *sv = e->sv;
  for (;;) {
    pthread_mutex_lock(&sv->mu);
    while (!sv->stopping && e->active == NULL && sv->queue == NULL)
      pthread_cond_wait(&sv->cv, &sv->mu);
    bool stop = sv->stopping;
    if (!stop)
      admit(e);
    /* Requests whose client went away end before the next pass. */
    req_t *gone = NULL;
    for (req_t *r = e->active; r != NULL && gone == NULL; r = r->next)
      if (r->cancel)
        gone = r;
    pthread_mutex_unlock(&sv->mu);
    if (stop)
      break;
    if (gone != NULL) {
      fprintf(stderr, "evictd-llama serve: the client of session %s went "
              "away: its cells and session are deleted\n", gone->session);
      finish(e, gone, 499, "client_gone", "the client went away");
      continue;
    }
    if (e->active != NULL)
      iterate(e);
  }
  /* Stopping: queued requests are refused, active ones end. */
  pthread_mutex_lock(&sv->mu);
  while (sv->queue != NULL) {
    req_t *r = sv->queue;
    sv->queue = r->next;
    sv->n_queued--;
    r->state = REQ_FAILED;
    r->err_status = 503;
    snprintf(r->err_code, sizeof(r->err_code), "shutting_down");
    snprintf(r->err_msg, sizeof(r->err_msg), "the server is shutting down");
    pthread_cond_broadcast(&r->cv);
    req_unref(r);
  }
  sv->queue_tail = NULL;
  pthread_mutex_unlock(&sv->mu);
  /* The sessions are deleted with a client that waits a second at most
   * and never resends: a shutdown does not wait on a dead daemon. */
  evd_client_opts_t co = {.url = sv->o->url, .timeout_ms = 1000,
                          .token_file = sv->o->token_file,
                          .cafile = sv->o->cafile};
  evd_client_t *quick = NULL;
  if (e->active != NULL && evd_client_new(&quick, &co, NULL, 0) == 0) {
    evd_client_free(e->ev);
    e->ev = quick;
  }
  e->ending = true;
  fail_all(e, 503, "shutting_down", "the server is shutting down");
  pthread_mutex_lock(&sv->mu);
  sv->engine_done = true;
  pthread_mutex_unlock(&sv->mu);
  engine_free(e);
  return NULL;
}

int engine_submit(serve_t *sv, req_t *r) {
  if (sv->stopping || sv->n_queued >= sv->o->queue)
    return -1;
  snprintf(r->session, sizeof(r->session), "serve-%ld-%llu", (long)sv->pid,
           (unsigned long long)++sv->counter);
  r->state = REQ_QUEUED;
  r->refs++; /* the engine's */
  r->next = NULL;
  if (sv->queue_tail != NULL)
    sv->queue_tail->next = r;
  else
    sv->queue = r;
  sv->queue_tail = r;
  sv->n_queued++;
  sv->m_requests++;
  pthread_cond_signal(&sv->cv);
  return 0;
}

/* The sessions' settings: the options, or the daemon's defaults for those
 * not given, read from a probe session created and deleted at once. */
static int settings(serve_t *sv, evd_client_t *ev, char *err,
                    size_t errlen) {
  const serve_opts_t *o = sv->o;
  if (o->budget >= 0 && o->sinks >= 0 && o->lookahead >= 0) {
    sv->budget = (uint32_t)o->budget;
    sv->sinks = (uint32_t)o->sinks;
    sv->lookahead = (uint32_t)o->lookahead;
    return 0;
  }
  char probe[64];
  snprintf(probe, sizeof(probe), "serve-%ld-probe", (long)sv->pid);
  evd_session_cfg_t cfg = {o->budget, o->sinks, o->lookahead, -1};
  evd_view_t v;
  if (evd_client_create(ev, probe, &cfg, &v) != 0 ||
      evd_client_delete(ev, probe, true) != 0) {
    const evd_client_err_t *er = evd_client_error(ev);
    snprintf(err, errlen, "cannot read evictd's session defaults (give "
             "--budget, --sinks and --lookahead to start without it): "
             "%s: %s", er->code, er->message);
    return -1;
  }
  sv->budget = v.budget;
  sv->sinks = v.sinks;
  sv->lookahead = v.lookahead;
  return 0;
}

int engine_start(serve_t *sv, pthread_t *th, char *err, size_t errlen) {
  const serve_opts_t *o = sv->o;
  engine_t *e = calloc(1, sizeof(*e));
  if (e == NULL)
    return snprintf(err, errlen, "out of memory"), -1;
  e->sv = sv;
  evd_client_opts_t co = {.url = o->url, .timeout_ms = o->timeout_ms,
                          .reconnect_ms = o->reconnect_ms,
                          .token_file = o->token_file, .cafile = o->cafile};
  if (evd_client_new(&e->ev, &co, err, errlen) != 0 ||
      settings(sv, e->ev, err, errlen) != 0)
    goto fail;
  e->cfg = (evd_session_cfg_t){sv->budget, sv->sinks, sv->lookahead, -1};
  /* No sequence holds more than budget + lookahead positions in a pass;
   * a pass holds at most lookahead + 1 tokens of each. */
  uint64_t cells = ((uint64_t)sv->budget + sv->lookahead + 255) / 256 * 256;
  uint64_t batch = ((uint64_t)sv->lookahead + 1) * o->parallel;
  if (cells * o->parallel > INT32_MAX || batch > INT32_MAX) {
    snprintf(err, errlen, "budget %u and lookahead %u with --parallel %u "
             "need more KV cells than llama.cpp allows", sv->budget,
             sv->lookahead, o->parallel);
    goto fail;
  }
  lm_opts_t lo = {.n_ctx = (uint32_t)cells, .n_batch = (uint32_t)batch,
                  .n_seq = o->parallel, .threads = o->threads,
                  .exact = true};
  if (lm_context(&sv->lm, &lo, err, errlen) != 0)
    goto fail;
  sv->n_batch = (uint32_t)batch;
  e->seq_used = calloc(o->parallel, sizeof(*e->seq_used));
  e->steps = calloc(o->parallel, sizeof(*e->steps));
  e->results = calloc(o->parallel, sizeof(*e->results));
  e->step_req = calloc(o->parallel, sizeof(*e->step_req));
  e->pos = calloc(batch, sizeof(*e->pos));
  if (!e->seq_used || !e->steps || !e->results || !e->step_req || !e->pos) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  if (pthread_create(th, NULL, engine_main, e) != 0) {
    snprintf(err, errlen, "cannot start the engine thread");
    goto fail;
  }
  return 0;
fail:
  engine_free(e);
  return -1;
}
