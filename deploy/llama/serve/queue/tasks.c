/* evictd-llama serve's queue of tasks and their news (tasks.h). */
#include "serve/queue/tasks.h"

#include "serve/upstream/sampler.h"

#include "common/clock.h"
#include "common/grow.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void news_clear(news_t *n) {
  n->n_ev = 0;
  evd_buf_reset(&n->text, 1 << 20);
}

void news_free(news_t *n) {
  free(n->ev);
  evd_buf_free(&n->text);
  memset(n, 0, sizeof(*n));
}

/* Appends an event (and its bytes); 0 or -1. */
static int news_add(news_t *n, event_t ev, const char *s) {
  if (grow(&n->ev, &n->cap_ev, n->n_ev + 1, sizeof(*n->ev)) != 0)
    return -1;
  ev.off = n->text.len;
  evd_buf_add(&n->text, s, ev.len);
  if (n->text.oom)
    return -1;
  n->ev[n->n_ev++] = ev;
  return 0;
}

void tq_init(tq_t *q, uint32_t max_queued, const char *prefix) {
  memset(q, 0, sizeof(*q));
  snprintf(q->prefix, sizeof(q->prefix), "%s", prefix);
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->work, NULL);
  q->max_queued = max_queued;
}

void tq_destroy(tq_t *q) {
  pthread_cond_destroy(&q->work);
  pthread_mutex_destroy(&q->mu);
}

task_t *task_new(void) {
  task_t *t = calloc(1, sizeof(*t));
  if (t == NULL)
    return NULL;
  pthread_cond_init(&t->cv, NULL);
  t->refs = 1;
  return t;
}

/* Under the lock. */
static void unref(task_t *t) {
  if (--t->refs > 0)
    return;
  for (uint32_t i = 0; t->want.samplers != NULL && i < t->want.n; i++)
    up_sampler_free(t->want.samplers[i]);
  free(t->want.samplers);
  free(t->want.preserved);
  for (uint32_t i = 0; i < t->want.n_stop; i++)
    free(t->want.stop[i]);
  free(t->want.stop);
  free(t->prompt);
  news_free(&t->news);
  pthread_cond_destroy(&t->cv);
  free(t);
}

void tq_release(tq_t *q, task_t *t) {
  pthread_mutex_lock(&q->mu);
  unref(t);
  pthread_mutex_unlock(&q->mu);
}

int tq_submit(tq_t *q, task_t *t) {
  int rc = 0;
  pthread_mutex_lock(&q->mu);
  q->counts.requests++;
  if (q->stopping || q->counts.queued >= q->max_queued) {
    rc = q->stopping ? TQ_STOPPING : TQ_FULL;
    q->counts.rejected++;
  } else {
    snprintf(t->id, sizeof(t->id), "%s-%llu", q->prefix,
             (unsigned long long)++q->counter);
    t->state = TASK_QUEUED;
    t->refs++; /* the queue's, then the engine's */
    t->next = NULL;
    if (q->tail != NULL)
      q->tail->next = t;
    else
      q->head = t;
    q->tail = t;
    q->counts.queued++;
    pthread_cond_signal(&q->work);
  }
  pthread_mutex_unlock(&q->mu);
  return rc;
}

task_state_t tq_take(tq_t *q, task_t *t, news_t *into, int wait_ms) {
  pthread_mutex_lock(&q->mu);
  if ((t->news.n_ev == 0 || t->whole) && t->state != TASK_DONE &&
      wait_ms > 0) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += wait_ms % 1000 * 1000000L;
    ts.tv_sec += wait_ms / 1000 + ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&t->cv, &q->mu, &ts);
  }
  news_clear(into);
  news_t mine = *into;
  *into = t->news;
  t->news = mine;
  task_state_t st = t->state;
  pthread_mutex_unlock(&q->mu);
  return st;
}

/* Unlinks t from the queue (under the lock); false if it is not there. */
static bool unqueue(tq_t *q, task_t *t) {
  task_t *prev = NULL;
  for (task_t *p = q->head; p != NULL; prev = p, p = p->next)
    if (p == t) {
      if (prev != NULL)
        prev->next = t->next;
      else
        q->head = t->next;
      if (q->tail == t)
        q->tail = prev;
      q->counts.queued--;
      return true;
    }
  return false;
}

void tq_cancel(tq_t *q, task_t *t) {
  pthread_mutex_lock(&q->mu);
  if (t->state == TASK_QUEUED && unqueue(q, t)) {
    t->state = TASK_DONE;
    q->counts.cancelled++;
    unref(t); /* the queue's */
  } else if (t->state == TASK_RUNNING) {
    t->cancel = true;
    pthread_cond_signal(&q->work);
  }
  pthread_mutex_unlock(&q->mu);
}

void tq_counts(tq_t *q, tq_counts_t *out) {
  pthread_mutex_lock(&q->mu);
  *out = q->counts;
  pthread_mutex_unlock(&q->mu);
}

task_t *tq_admit(tq_t *q, uint32_t room, bool idle, double until,
                 bool *stop) {
  task_t *t = NULL;
  pthread_mutex_lock(&q->mu);
  while (idle && !q->stopping && q->head == NULL) {
    if (until <= 0) {
      pthread_cond_wait(&q->work, &q->mu);
      continue;
    }
    double left = until - clock_now();
    if (left <= 0)
      break;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long ns = ts.tv_nsec + (long)((left - (long)left) * 1e9);
    ts.tv_sec += (time_t)left + ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_cond_timedwait(&q->work, &q->mu, &ts);
  }
  *stop = q->stopping;
  if (!*stop && q->head != NULL && q->head->want.n <= room) {
    t = q->head;
    unqueue(q, t);
    t->state = TASK_RUNNING;
    q->counts.running++;
  }
  pthread_mutex_unlock(&q->mu);
  return t;
}

bool tq_cancelled(tq_t *q, const task_t *t) {
  pthread_mutex_lock(&q->mu);
  bool c = t->cancel;
  pthread_mutex_unlock(&q->mu);
  return c;
}

/* An event for t's HTTP side, woken for it unless it waits for the whole
 * answer (a wake-up per token cost the engine's thread a futex call and
 * the HTTP thread a switch, for nothing). Out of memory, it is lost: the
 * answer then lacks it (the task still ends, with its counts). */
static void emit(tq_t *q, task_t *t, event_t ev, const char *s) {
  pthread_mutex_lock(&q->mu);
  if (news_add(&t->news, ev, s) == 0 && !t->whole)
    pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&q->mu);
}

void tq_token(tq_t *q, task_t *t, uint32_t i, const token_ev_t *tok) {
  emit(q, t, (event_t){.kind = EV_TOKEN, .choice = i,
                       .len = sizeof(*tok) + tok->n * sizeof(tok->top[0])},
       (const char *)tok);
}

void tq_conv(tq_t *q, task_t *t, const char *session, uint32_t n,
             uint64_t gen, int32_t next) {
  pthread_mutex_lock(&q->mu);
  snprintf(t->conv, sizeof(t->conv), "%s", session);
  t->conv_n = n;
  t->conv_gen = gen;
  t->conv_next = next;
  pthread_mutex_unlock(&q->mu);
}

void tq_cached(tq_t *q, task_t *t, uint32_t n, cache_from_t from) {
  pthread_mutex_lock(&q->mu);
  t->cached = n;
  t->cache_from = (uint8_t)from;
  pthread_mutex_unlock(&q->mu);
}

void tq_progress(tq_t *q, task_t *t, uint32_t n) {
  emit(q, t, (event_t){.kind = EV_PROGRESS, .tokens = n}, "");
}

void tq_text(tq_t *q, task_t *t, uint32_t i, const char *s, size_t n,
             uint32_t tokens) {
  if (n > 0)
    emit(q, t, (event_t){.kind = EV_TEXT, .choice = i, .len = n,
                         .tokens = tokens}, s);
}

void tq_end(tq_t *q, task_t *t, uint32_t i, finish_t why, uint32_t tokens,
            uint32_t stop) {
  emit(q, t, (event_t){.kind = EV_END, .choice = i, .finish = why,
                       .tokens = tokens, .stop = stop}, "");
}

void tq_finish(tq_t *q, task_t *t, const fault_t *f) {
  pthread_mutex_lock(&q->mu);
  t->state = TASK_DONE;
  if (t->cancel)
    q->counts.cancelled++;
  else if (f != NULL)
    q->counts.failed++;
  else
    q->counts.ok++;
  if (f != NULL) {
    t->failed = true;
    t->fault = *f;
  }
  q->counts.running--;
  pthread_cond_broadcast(&t->cv);
  unref(t); /* the engine's */
  pthread_mutex_unlock(&q->mu);
}

void tq_stop(tq_t *q) {
  pthread_mutex_lock(&q->mu);
  q->stopping = true;
  pthread_cond_broadcast(&q->work);
  pthread_mutex_unlock(&q->mu);
}

void tq_drain(tq_t *q, const fault_t *f) {
  pthread_mutex_lock(&q->mu);
  q->stopping = true;
  while (q->head != NULL) {
    task_t *t = q->head;
    unqueue(q, t);
    t->state = TASK_DONE;
    t->failed = true;
    t->fault = *f;
    q->counts.failed++;
    pthread_cond_broadcast(&t->cv);
    unref(t);
  }
  pthread_mutex_unlock(&q->mu);
}
