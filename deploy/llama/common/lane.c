/* A lane's thread (lanes_int.h): a job of the lane's queue sent on the
 * lane's own link (one batch, or one request a step behind a proxy that
 * refuses batches, or a delete), its outcomes copied into its items, then
 * the items handed back to the caller's side (lanes.c). */
#include "common/lanes_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"

int lane_item_pos(lane_item_t *it, size_t n) {
  return grow(&it->pos, &it->pos_cap, n, sizeof(*it->pos));
}

void lane_item_free(lane_item_t *it) {
  free(it->pos);
  free(it->buf);
  it->pos = it->buf = NULL;
  it->pos_cap = it->buf_cap = 0;
}

/* ---- a lane's thread ----------------------------------------------------- */

/* Copies an outcome into the item: an answer (rc 0: its lists into the
 * item's buffer, since the client's memory is reused by its next call),
 * or a failure (its fault, and the daemon's error code when rc is
 * EVD_CLIENT_EAPI). */
static void keep_outcome(lane_item_t *it, int rc, const evd_answer_t *a,
                         const char *code, const fault_t *f) {
  it->rc = rc;
  snprintf(it->code, sizeof(it->code), "%s", code != NULL ? code : "");
  if (rc != 0) {
    it->fault = *f;
    memset(&it->answer, 0, sizeof(it->answer));
    return;
  }
  const evd_list_t *from[] = {&a->victims, &a->dropped, &a->removed};
  size_t need = a->victims.n + a->dropped.n + a->removed.n;
  if (grow(&it->buf, &it->buf_cap, need, sizeof(*it->buf)) != 0) {
    it->rc = LINK_EFAULT;
    fault_set(&it->fault, 500, "out_of_memory", "out of memory");
    return;
  }
  it->answer = (evd_answer_t){.size = a->size, .newest = a->newest,
                              .replayed = a->replayed};
  evd_list_t *to[] = {&it->answer.victims, &it->answer.dropped,
                      &it->answer.removed};
  uint32_t *p = it->buf;
  for (size_t i = 0; i < 3; i++) {
    if (from[i]->n > 0)
      memcpy(p, from[i]->v, from[i]->n * sizeof(*p));
    *to[i] = (evd_list_t){.v = from[i]->n > 0 ? p : NULL, .n = from[i]->n};
    p += from[i]->n;
  }
}

/* One step sent on its own: the outcome as the daemon gave it. */
static void send_one(lane_t *ln, lane_item_t *it) {
  evd_answer_t a;
  fault_t f;
  int rc = link_send(&ln->link, &(link_req_t){.op = LINK_STEP,
                                              .steps = &it->step,
                                              .answer = &a}, &f);
  keep_outcome(it, rc, &a, rc == EVD_CLIENT_EAPI
                               ? evd_client_error(ln->link.c)->code : NULL,
               &f);
}

/* Whether a batch's failure is a refusal of the request as a whole that
 * its items alone would not all meet (see change.c's refused_whole). */
static bool refused_whole(const link_t *l, int rc) {
  int status = evd_client_error(l->c)->status;
  return rc == EVD_CLIENT_EINVAL ||
         (rc == EVD_CLIENT_EAPI && status >= 400 && status < 500);
}

/* The items of job j, STEP ones, as one batch (or one request each when
 * the URL refuses batches or the batch was refused as a whole). */
static void send_steps(lane_t *ln, lane_item_t *first, size_t n) {
  size_t k = 0;
  if (grow(&ln->steps, &ln->cap_steps, n, sizeof(*ln->steps)) != 0 ||
      grow(&ln->res, &ln->cap_res, n, sizeof(*ln->res)) != 0 ||
      grow(&ln->it, &ln->cap_it, n, sizeof(*ln->it)) != 0) {
    for (lane_item_t *it = first; it != NULL; it = it->next)
      if (it->kind == ITEM_STEP) {
        it->rc = LINK_EFAULT;
        fault_set(&it->fault, 500, "out_of_memory", "out of memory");
      }
    return;
  }
  for (lane_item_t *it = first; it != NULL; it = it->next)
    if (it->kind == ITEM_STEP) {
      ln->steps[k] = it->step;
      ln->it[k++] = it;
    }
  if (k == 0)
    return;
  if (k > 1 && !ln->link.per_session) {
    fault_t f;
    int rc = link_send(&ln->link, &(link_req_t){.op = LINK_BATCH,
                                                .steps = ln->steps, .n = k,
                                                .results = ln->res}, &f);
    if (rc == 0) {
      for (size_t i = 0; i < k; i++) {
        evd_batch_result_t *r = &ln->res[i];
        fault_t g;
        link_item(r, ln->it[i]->step.session, &g);
        keep_outcome(ln->it[i], r->rc, &r->answer, r->error.code, &g);
      }
      return;
    }
    if (link_refused(&ln->link, rc, "misdirected_request")) {
      /* nginx in front of a pool: a batch may name sessions of several
       * instances, so it refuses them all. From now on every lane sends
       * one step per request, each sequence on a lane of its own. */
      if (!__atomic_exchange_n(&ln->L->per_session, true, __ATOMIC_RELAXED))
        fprintf(stderr, "evictd-llama: evictd's URL refuses POST /step "
                "(421 misdirected_request: a proxy in front of a pool of "
                "daemons); steps go one session per request, each sequence "
                "on a connection of its own, from now on\n");
      ln->link.per_session = true;
    } else if (!refused_whole(&ln->link, rc)) {
      /* The daemon cannot be reached: every item meets it. */
      for (size_t i = 0; i < k; i++)
        keep_outcome(ln->it[i], rc, NULL, NULL, &f);
      return;
    }
    /* Else refused as a whole, which one bad item does: each item goes on
     * its own, so that only the items at fault fail. */
  }
  for (size_t i = 0; i < k; i++)
    send_one(ln, ln->it[i]);
}

static void run_job(lane_t *ln, job_t *j) {
  size_t n = 0;
  for (lane_item_t *it = j->items; it != NULL; it = it->next)
    n++;
  send_steps(ln, j->items, n);
  for (lane_item_t *it = j->items; it != NULL; it = it->next) {
    if (it->kind == ITEM_SETTLE) {
      /* Re-homed and sent again: its outcome is final. */
      evd_batch_result_t r;
      fault_t f, g;
      int rc = seq_item(&ln->link, it->sq, &it->step, &r, it->cause, &f);
      if (rc != 0)
        keep_outcome(it, rc, NULL, NULL, &f);
      else if (link_item(&r, it->step.session, &g) != 0)
        keep_outcome(it, LINK_EFAULT, NULL, NULL, &g);
      else
        keep_outcome(it, 0, &r.answer, NULL, NULL);
    } else if (it->kind == ITEM_TRUNCATE) {
      evd_answer_t a;
      fault_t f;
      int rc = seq_change(&ln->link, it->sq, &(link_req_t){
                              .op = LINK_TRUNCATE,
                              .session = it->sq->session, .at = it->from,
                              .answer = &a}, &f);
      keep_outcome(it, rc, &a, rc == EVD_CLIENT_EAPI
                                   ? evd_client_error(ln->link.c)->code
                                   : NULL, &f);
    } else if (it->kind == ITEM_DELETE) {
      fault_t f;
      it->rc = link_delete(&ln->link, it->session, false, &f);
      if (it->rc != 0)
        fprintf(stderr, "evictd-llama: deleting session %s failed: %s\n",
                it->session, f.msg);
    }
  }
}

/* Whether an outcome says the daemon could not be reached. */
static bool unreachable(const lane_item_t *it) {
  return it->rc != 0 && it->rc != EVD_CLIENT_EAPI &&
         it->rc != LINK_EFAULT && it->rc != EVD_CLIENT_EINVAL;
}

void *lane_main(void *arg) {
  lane_t *ln = arg;
  lanes_t *L = ln->L;
  /* Named for top -H and for what bench-serve counts as the lanes' CPU
   * (/proc/PID/task/TID/comm). */
  char name[16];
  snprintf(name, sizeof(name), "evd-lane-%u", ln->index % 100000u);
  (void)pthread_setname_np(pthread_self(), name);
  /* Started ahead of any request: its connection made now, with a probe
   * whose outcome says nothing of the lane (its first job's will). */
  if (ln->warm)
    (void)evd_client_health(ln->link.c);
  pthread_mutex_lock(&L->mu);
  for (;;) {
    while (!L->stopping && ln->head == NULL)
      pthread_cond_wait(&ln->go, &L->mu);
    /* Stopping, what is queued still goes (the sessions' deletes). */
    if (ln->head == NULL)
      break;
    job_t *j = ln->head;
    pthread_mutex_unlock(&L->mu);
    link_unkeep(&ln->link);
    run_job(ln, j);
    pthread_mutex_lock(&L->mu);
    ln->head = j->next;
    if (ln->head == NULL)
      ln->tail = NULL;
    bool missed = false, reached = false;
    ln->late = false;
    for (lane_item_t *it = j->items, *next; it != NULL; it = next) {
      next = it->next;
      ln->in_flight--;
      if (it->kind == ITEM_DELETE) {
        free(it); /* made by lanes_delete */
        continue;
      }
      ln->n_steps--;
      if (unreachable(it))
        missed = true;
      else
        reached = true;
      it->next = L->done_head;
      L->done_head = it;
    }
    if (missed || reached)
      ln->unreachable = missed && !reached;
    ln->n = ln->link.n;
    evd_client_stats(ln->link.c, &ln->cs);
    j->next = L->free_jobs;
    L->free_jobs = j;
    pthread_cond_broadcast(&L->done);
  }
  pthread_mutex_unlock(&L->mu);
  return NULL;
}
