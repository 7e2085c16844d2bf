/* The lanes to evictd (lanes.h), the caller's side: a thread and a link
 * per lane (the thread is lane.c's), a queue of jobs per lane (one job:
 * the items one lanes_submit gave that lane), and the items handed back
 * when done. One mutex guards the queues, the items' state and the lanes'
 * published counters; a lane's link is its thread's alone (the caller has
 * links of its own: lanes_direct). */
#include "common/lanes_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/grow.h"

static void free_urls(lanes_t *L) {
  for (size_t i = 0; L->urls != NULL && i < L->n_inst; i++)
    free(L->urls[i]);
  free(L->urls);
}

/* Splits a comma-separated list of URLs into L->urls. */
static int split(lanes_t *L, const char *list, fault_t *f) {
  size_t n = 1;
  for (const char *p = list; *p; p++)
    n += *p == ',';
  if ((L->urls = calloc(n, sizeof(*L->urls))) == NULL)
    return fault_set(f, 500, "out_of_memory", "out of memory");
  const char *p = list;
  for (size_t i = 0; i < n; i++) {
    size_t len = strcspn(p, ",");
    if (len == 0 || (L->urls[i] = strndup(p, len)) == NULL) {
      L->n_inst = i;
      return fault_set(f, 500, "evictd_client", len == 0 ? "--evictd %s "
                       "has an empty instance in its list" : "out of "
                       "memory", list);
    }
    p += len + (p[len] == ',');
  }
  L->n_inst = n;
  return 0;
}

int lanes_new(lanes_t **out, const link_opts_t *o, uint32_t n_seq,
              fault_t *f) {
  lanes_t *L = calloc(1, sizeof(*L));
  char err[400];
  if (L == NULL)
    return fault_set(f, 500, "out_of_memory", "out of memory");
  L->o = *o;
  L->n_seq = n_seq > 0 ? n_seq : 1;
  pthread_mutex_init(&L->mu, NULL);
  pthread_cond_init(&L->done, NULL);
  const char *url = o->url;
  if (url == NULL || *url == '\0')
    url = getenv("EVICTD_URL");
  if (url == NULL || *url == '\0')
    url = "http://127.0.0.1:8090";
  if (split(L, url, f) != 0)
    goto fail;
  if (L->n_inst > 1) {
    evd_client_opts_t co = {.timeout_ms = o->timeout_ms,
                            .token_file = o->token_file,
                            .cafile = o->cafile};
    if (evd_client_pool_new(&L->ring, (const char *const *)L->urls, NULL,
                            L->n_inst, &co, err, sizeof(err)) != 0) {
      fault_set(f, 500, "evictd_client", "--evictd %s: %s", url, err);
      goto fail;
    }
  }
  L->n_lane = L->n_inst > L->n_seq ? L->n_inst : L->n_seq;
  L->n_all = L->n_lane + 1;
  if ((L->lane = calloc(L->n_all, sizeof(*L->lane))) == NULL) {
    fault_set(f, 500, "out_of_memory", "out of memory");
    goto fail;
  }
  for (size_t i = 0; i < L->n_all; i++) {
    lane_t *ln = &L->lane[i];
    size_t inst = i < L->n_inst ? i : 0;
    ln->L = L;
    ln->index = (uint32_t)i;
    ln->url = L->urls[inst];
    snprintf(ln->name, sizeof(ln->name), "%s", L->ring != NULL ?
             evd_client_pool_name(L->ring, inst) : ln->url);
    pthread_cond_init(&ln->go, NULL);
    link_opts_t lo = *o;
    lo.url = ln->url;
    if (i == L->n_lane) {
      /* The deletes' lane behind a proxy, where a session's instance is
       * not known: a delete that meets a stopped one gives up after a
       * second (the session is left to --idle-ttl), so the others wait
       * little behind it, and no sequence's steps wait behind any. */
      lo.timeout_ms = lo.timeout_ms < 1000 ? lo.timeout_ms : 1000;
      lo.reconnect_ms = lo.reconnect_ms < 1000 ? lo.reconnect_ms : 1000;
      snprintf(ln->name, sizeof(ln->name), "%s (deletes)", ln->url);
    }
    if (link_open(&ln->link, &lo, f) != 0)
      goto fail;
  }
  *out = L;
  return 0;
fail:
  lanes_free(L); /* no thread started yet */
  return -1;
}

bool lanes_free(lanes_t *L) {
  if (L == NULL)
    return true;
  pthread_mutex_lock(&L->mu);
  L->stopping = true;
  for (size_t i = 0; L->lane != NULL && i < L->n_all; i++)
    pthread_cond_signal(&L->lane[i].go);
  pthread_mutex_unlock(&L->mu);
  bool abandoned = false;
  /* Two seconds for every lane to send what it has (deletes, mostly): a
   * thread blocked on a daemon that does not answer is left to the
   * process's end, with the memory it uses, rather than waited for. */
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 2;
  for (size_t i = 0; L->lane != NULL && i < L->n_all; i++) {
    lane_t *ln = &L->lane[i];
    if (!ln->started)
      continue;
    if (pthread_timedjoin_np(ln->thread, NULL, &ts) != 0) {
      pthread_detach(ln->thread);
      abandoned = true;
    }
  }
  if (abandoned)
    return false;
  for (size_t i = 0; L->lane != NULL && i < L->n_all; i++) {
    lane_t *ln = &L->lane[i];
    link_close(&ln->link);
    if (ln->has_direct)
      link_close(&ln->direct);
    pthread_cond_destroy(&ln->go);
    for (job_t *j = ln->head, *next; j != NULL; j = next) {
      next = j->next;
      for (lane_item_t *it = j->items, *n2; it != NULL; it = n2) {
        n2 = it->next;
        if (it->kind == ITEM_DELETE)
          free(it);
      }
      free(j);
    }
    free(ln->steps);
    free(ln->res);
    free(ln->it);
  }
  for (job_t *j = L->free_jobs, *next; j != NULL; j = next) {
    next = j->next;
    free(j);
  }
  for (size_t i = 0; i < L->cap_bitems; i++)
    lane_item_free(&L->bitems[i]);
  free(L->bitems);
  free(L->lane);
  evd_client_pool_free(L->ring);
  free_urls(L);
  pthread_cond_destroy(&L->done);
  pthread_mutex_destroy(&L->mu);
  free(L);
  return true;
}

size_t lanes_instances(const lanes_t *L) { return L->n_inst; }

bool lanes_per_session(const lanes_t *L) {
  return __atomic_load_n(&L->per_session, __ATOMIC_RELAXED);
}

uint32_t lanes_route(const lanes_t *L, const char *session, uint32_t seq) {
  if (L->ring != NULL) {
    int i = evd_client_pool_instance(L->ring, session);
    return i < 0 ? 0 : (uint32_t)i;
  }
  return lanes_per_session(L) ? seq % (uint32_t)L->n_lane : 0;
}

/* Under the mutex: whether lane i is up at `now`. */
static bool up_locked(const lanes_t *L, uint32_t i, double now) {
  const lane_t *ln = &L->lane[i];
  return !ln->unreachable &&
         (ln->head == NULL || now - ln->head->since <= L->o.timeout_ms / 1e3);
}

bool lanes_ok(lanes_t *L, uint32_t i) {
  if (i >= L->n_lane)
    return false;
  pthread_mutex_lock(&L->mu);
  bool ok = !L->lane[i].late && up_locked(L, i, clock_now());
  pthread_mutex_unlock(&L->mu);
  return ok;
}

const link_t *lanes_flags(const lanes_t *L) { return &L->lane[0].link; }

bool lanes_up(lanes_t *L, uint32_t i) {
  if (i >= L->n_lane)
    return false;
  pthread_mutex_lock(&L->mu);
  bool up = up_locked(L, i, clock_now());
  pthread_mutex_unlock(&L->mu);
  return up;
}

link_t *lanes_direct(lanes_t *L, uint32_t i, fault_t *f) {
  lane_t *ln = &L->lane[i < L->n_lane ? i : 0];
  if (!ln->has_direct) {
    link_opts_t lo = L->o;
    lo.url = ln->url;
    if (link_open(&ln->direct, &lo, f) != 0)
      return NULL;
    ln->has_direct = true;
  }
  return &ln->direct;
}

/* Under the mutex: a job, from the free list or new; NULL when out of
 * memory. */
static job_t *job_new(lanes_t *L) {
  job_t *j = L->free_jobs;
  if (j != NULL)
    L->free_jobs = j->next;
  else
    j = malloc(sizeof(*j));
  return j;
}

/* Under the mutex: queues items (linked through next) as one job of lane
 * i, starting its thread if it has none. Out of memory, the items fail
 * at once (handed back). */
static void queue(lanes_t *L, uint32_t i, lane_item_t *items, double now) {
  lane_t *ln = &L->lane[i];
  job_t *j = job_new(L);
  bool thread = ln->started;
  if (j != NULL && !thread) {
    thread = pthread_create(&ln->thread, NULL, lane_main, ln) == 0;
    ln->started = thread;
  }
  if (j == NULL || !thread) {
    free(j);
    for (lane_item_t *it = items, *next; it != NULL; it = next) {
      next = it->next;
      if (it->kind == ITEM_DELETE) {
        free(it);
        continue;
      }
      it->rc = LINK_EFAULT;
      fault_set(&it->fault, 500, "out_of_memory", "out of memory, or no "
                "thread for evictd's lane %s", ln->name);
      it->next = L->done_head;
      L->done_head = it;
    }
    return;
  }
  j->items = items;
  j->since = now;
  j->next = NULL;
  for (lane_item_t *it = items; it != NULL; it = it->next) {
    ln->in_flight++;
    ln->n_steps += it->kind != ITEM_DELETE;
  }
  if (ln->tail != NULL)
    ln->tail->next = j;
  else
    ln->head = j;
  ln->tail = j;
  pthread_cond_signal(&ln->go);
}

void lanes_submit(lanes_t *L, lane_item_t *const *items, size_t n) {
  double now = clock_now();
  pthread_mutex_lock(&L->mu);
  /* One job per lane: the items of each lane in their order. */
  for (size_t a = 0; a < n; a++) {
    if (items[a]->busy)
      continue; /* taken into an earlier lane's job below */
    uint32_t lane = items[a]->lane < L->n_lane ? items[a]->lane : 0;
    lane_item_t *first = NULL, **tail = &first;
    for (size_t b = a; b < n; b++) {
      lane_item_t *it = items[b];
      if (it->busy || (it->lane < L->n_lane ? it->lane : 0) != lane)
        continue;
      it->busy = true;
      it->since = now;
      it->next = NULL;
      *tail = it;
      tail = &it->next;
    }
    queue(L, lane, first, now);
  }
  pthread_mutex_unlock(&L->mu);
}

void lanes_start(lanes_t *L) {
  pthread_mutex_lock(&L->mu);
  for (size_t i = 0; i < L->n_inst && i < L->n_all; i++) {
    lane_t *ln = &L->lane[i];
    if (ln->started)
      continue;
    ln->warm = true;
    ln->started = pthread_create(&ln->thread, NULL, lane_main, ln) == 0;
  }
  pthread_mutex_unlock(&L->mu);
}

void lanes_delete(lanes_t *L, const char *session, uint32_t seq) {
  lane_item_t *it = calloc(1, sizeof(*it));
  if (it == NULL) {
    fprintf(stderr, "evictd-llama: out of memory: session %s is left to "
            "evictd's --idle-ttl\n", session);
    return;
  }
  it->kind = ITEM_DELETE;
  snprintf(it->session, sizeof(it->session), "%s", session);
  /* In a pool, on its instance's lane; behind a proxy, on the deletes'
   * own (a sequence's lane would make its next request wait behind a
   * delete to an instance that is down). */
  uint32_t lane = L->ring == NULL && lanes_per_session(L)
                      ? (uint32_t)L->n_lane
                      : lanes_route(L, session, seq);
  pthread_mutex_lock(&L->mu);
  it->busy = true;
  queue(L, lane < L->n_all ? lane : 0, it, clock_now());
  pthread_mutex_unlock(&L->mu);
}

size_t lanes_collect(lanes_t *L, lane_item_t **out, size_t max) {
  size_t k = 0;
  pthread_mutex_lock(&L->mu);
  while (L->done_head != NULL && k < max) {
    lane_item_t *it = L->done_head;
    L->done_head = it->next;
    it->next = NULL;
    it->busy = false;
    out[k++] = it;
  }
  pthread_mutex_unlock(&L->mu);
  return k;
}

/* A deadline `until` (clock_now's) as a timespec for a timed wait. */
static void deadline(struct timespec *ts, double until) {
  double left = until - clock_now();
  if (left < 0)
    left = 0;
  if (left > 3600)
    left = 3600;
  clock_gettime(CLOCK_REALTIME, ts);
  long ns = ts->tv_nsec + (long)((left - (long)left) * 1e9);
  ts->tv_sec += (time_t)left + ns / 1000000000L;
  ts->tv_nsec = ns % 1000000000L;
}

void lanes_wait(lanes_t *L, double grace, double until) {
  pthread_mutex_lock(&L->mu);
  double stop = clock_now() + grace;
  if (until < stop)
    stop = until;
  for (;;) {
    bool waiting = false;
    for (size_t i = 0; i < L->n_lane && !waiting; i++)
      waiting = L->lane[i].n_steps > 0 && !L->lane[i].late;
    if (!waiting || L->woken)
      break;
    if (clock_now() >= stop) {
      /* Those still out are late: no wait is spent on them again until
       * they answer. */
      for (size_t i = 0; i < L->n_lane; i++)
        if (L->lane[i].n_steps > 0)
          L->lane[i].late = true;
      break;
    }
    struct timespec ts;
    deadline(&ts, stop);
    pthread_cond_timedwait(&L->done, &L->mu, &ts);
  }
  L->woken = false;
  pthread_mutex_unlock(&L->mu);
}

void lanes_idle(lanes_t *L, double until) {
  pthread_mutex_lock(&L->mu);
  while (L->done_head == NULL && !L->woken && clock_now() < until) {
    struct timespec ts;
    deadline(&ts, until);
    pthread_cond_timedwait(&L->done, &L->mu, &ts);
  }
  L->woken = false;
  pthread_mutex_unlock(&L->mu);
}

void lanes_wake(lanes_t *L) {
  pthread_mutex_lock(&L->mu);
  L->woken = true;
  pthread_cond_broadcast(&L->done);
  pthread_mutex_unlock(&L->mu);
}

bool lanes_info(lanes_t *L, uint32_t i, lane_info_t *out) {
  if (i >= L->n_lane)
    return false;
  pthread_mutex_lock(&L->mu);
  const lane_t *ln = &L->lane[i];
  double now = clock_now();
  memset(out, 0, sizeof(*out));
  snprintf(out->name, sizeof(out->name), "%s", ln->name);
  out->up = up_locked(L, i, now);
  out->late = ln->late;
  out->started = ln->started;
  out->in_flight = ln->in_flight;
  out->oldest = ln->head != NULL ? now - ln->head->since : 0;
  out->n = ln->n;
  out->cs = ln->cs;
  pthread_mutex_unlock(&L->mu);
  return true;
}

void lanes_counts(lanes_t *L, link_counts_t *n, evd_client_stats_t *cs) {
  memset(n, 0, sizeof(*n));
  memset(cs, 0, sizeof(*cs));
  pthread_mutex_lock(&L->mu);
  for (size_t i = 0; i < L->n_all; i++) {
    const lane_t *ln = &L->lane[i];
    /* The direct links are the caller's, who asks this. */
    const link_counts_t *of[] = {&ln->n, ln->has_direct ? &ln->direct.n
                                                         : NULL};
    for (int d = 0; d < 2 && of[d] != NULL; d++) {
      for (int c = 0; c < LINK_CAUSES; c++)
        n->rehomes[c] += of[d]->rehomes[c];
      n->creates += of[d]->creates;
      n->gateway += of[d]->gateway;
    }
    evd_client_stats_t d = {0};
    if (ln->has_direct)
      evd_client_stats(ln->direct.c, &d);
    cs->requests += ln->cs.requests + d.requests;
    cs->connections += ln->cs.connections + d.connections;
    cs->resends += ln->cs.resends + d.resends;
    cs->replayed += ln->cs.replayed + d.replayed;
  }
  pthread_mutex_unlock(&L->mu);
}

/* ---- one batch, waited for whole (generate, perplexity) ---------------- */

int lanes_batch(lanes_t *L, seq_t *const *sq, evd_step_t *steps, size_t n,
                evd_batch_result_t *res, fault_t *f) {
  if (n == 0)
    return 0;
  if (L->n_inst == 1 && !lanes_per_session(L)) {
    /* One daemon: the batch on the caller's own link, as seq_batch sends
     * it (no thread in between). Once the URL refuses batches, every
     * session goes on a lane of its own. */
    link_t *l = lanes_direct(L, 0, f);
    if (l == NULL)
      return EVD_CLIENT_ENOMEM;
    int rc = seq_batch(l, sq, steps, n, res, f);
    if (l->per_session)
      __atomic_store_n(&L->per_session, true, __ATOMIC_RELAXED);
    return rc;
  }
  if (n > L->cap_bitems) {
    lane_item_t *b = realloc(L->bitems, n * sizeof(*b));
    if (b == NULL)
      return fault_set(f, 500, "out_of_memory", "out of memory"),
             EVD_CLIENT_ENOMEM;
    memset(b + L->cap_bitems, 0, (n - L->cap_bitems) * sizeof(*b));
    L->bitems = b;
    L->cap_bitems = n;
  }
  lane_item_t **sub = malloc(2 * n * sizeof(*sub)), **got = sub + n;
  if (sub == NULL)
    return fault_set(f, 500, "out_of_memory", "out of memory"),
           EVD_CLIENT_ENOMEM;
  const link_t *flags = lanes_flags(L);
  for (size_t i = 0; i < n; i++) {
    lane_item_t *it = &L->bitems[i];
    it->kind = ITEM_STEP;
    it->sq = sq[i];
    it->step = steps[i]; /* its positions are the caller's, borrowed */
    it->step.has_expect = flags->expect;
    it->step.expect_newest = sq[i]->newest;
    it->lane = lanes_route(L, steps[i].session, (uint32_t)i);
    it->who = NULL;
    sub[i] = it;
  }
  lanes_submit(L, sub, n);
  size_t left = n, k;
  int rc = 0;
  while (left > 0) {
    lanes_idle(L, clock_now() + 1);
    size_t again = 0;
    while ((k = lanes_collect(L, got, n)) > 0)
      for (size_t j = 0; j < k; j++) {
        lane_item_t *it = got[j];
        if (it->kind == ITEM_STEP) {
          int cause = seq_verdict(flags, it->sq, it->rc, it->code,
                                  &it->answer, it->step.n_positions);
          if (cause != SEQ_GO_ON) {
            /* Its session re-homed and the step sent again: final. */
            it->kind = ITEM_SETTLE;
            it->cause = cause;
            sub[again++] = it;
            continue;
          }
          if (it->rc == 0)
            seq_stepped(it->sq, &it->step, &it->answer);
        }
        left--;
      }
    if (again > 0)
      lanes_submit(L, sub, again);
  }
  free(sub);
  for (size_t i = 0; i < n; i++) {
    lane_item_t *it = &L->bitems[i];
    memset(&res[i], 0, sizeof(res[i]));
    if (it->rc == 0) {
      res[i].answer = it->answer;
      res[i].error = (evd_client_err_t){.code = "", .message = "",
                                        .newest = -1};
    } else if (it->rc == EVD_CLIENT_EAPI || it->rc == LINK_EFAULT ||
               it->rc == EVD_CLIENT_EINVAL) {
      res[i].rc = LINK_EFAULT;
      res[i].error = (evd_client_err_t){.rc = LINK_EFAULT,
                                        .status = it->fault.status,
                                        .code = it->fault.code,
                                        .message = it->fault.msg,
                                        .newest = -1};
    } else if (rc == 0) {
      /* The daemon could not be reached: the batch fails. */
      rc = it->rc;
      *f = it->fault;
    }
  }
  return rc;
}
