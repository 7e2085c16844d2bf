/* The link to evictd: the client made from the shared options, the one
 * resend rule (timeouts by the client, a proxy's 502 and 504 here), the
 * sentences of its failures, and the answers the batch's slow paths keep
 * past the client's next call. */
#include "common/link.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"

int fault_set(fault_t *f, int status, const char *code, const char *fmt,
              ...) {
  va_list ap;

  if (f == NULL)
    return -1;
  f->status = status;
  snprintf(f->code, sizeof(f->code), "%s", code);
  va_start(ap, fmt);
  vsnprintf(f->msg, sizeof(f->msg), fmt, ap);
  va_end(ap);
  return -1;
}

int link_open(link_t *l, const link_opts_t *o, fault_t *f) {
  char err[400];
  memset(l, 0, sizeof(*l));
  l->o = *o;
  l->expect = l->rehome = true;
  const char *mode = getenv("EVICTD_LLAMA_REHOME");
  if (mode != NULL && strcmp(mode, "off") == 0)
    l->expect = l->rehome = false;
  else if (mode != NULL && strcmp(mode, "no-expect") == 0)
    l->expect = false;
  else if (mode != NULL && *mode != '\0' && strcmp(mode, "on") != 0)
    return fault_set(f, 500, "evictd_client", "EVICTD_LLAMA_REHOME is '%s': "
                     "on, off or no-expect", mode);
  /* A repeatable request that timed out (its answer may have been lost
   * after it was applied) is sent again by the client itself, for
   * --reconnect-ms: evictd answers a resent step, commit or truncate with
   * its first answer, a delete is idempotent, and the engine's batches
   * name each session once. */
  evd_client_opts_t co = {.url = o->url, .timeout_ms = o->timeout_ms,
                          .reconnect_ms = o->reconnect_ms,
                          .token_file = o->token_file, .cafile = o->cafile,
                          .resend_timeouts = true};
  if (evd_client_new(&l->c, &co, err, sizeof(err)) != 0)
    return fault_set(f, 500, "evictd_client", "%s", err);
  return 0;
}

void link_close(link_t *l) {
  evd_client_free(l->c);
  evd_client_free(l->quick);
  l->c = l->quick = NULL;
  link_unkeep(l);
  free(l->kept);
  l->kept = NULL;
  l->cap_kept = 0;
}

static const char *const what[] = {
    [LINK_STEP] = "the step", [LINK_BATCH] = "the batch of steps",
    [LINK_COMMIT] = "the commit", [LINK_TRUNCATE] = "the truncate",
    [LINK_DELETE] = "the delete", [LINK_CREATE] = "the create",
    [LINK_FORK] = "the fork", [LINK_ADOPT] = "the adoption"};

/* The client's last error as a sentence about `act` ("the step") of
 * session (when not NULL). */
static int client_fault(evd_client_t *c, const char *act, const char *session,
                        fault_t *f) {
  const evd_client_err_t *e = evd_client_error(c);
  char of[160] = "";
  if (session != NULL)
    snprintf(of, sizeof(of), " of session %s", session);
  if (e->rc == EVD_CLIENT_EAPI)
    return fault_set(f, 502, "evictd_refused", "evictd refused %s%s: %d %s: "
                     "%s", act, of, e->status, e->code, e->message);
  /* The client's own check refused the request before it went: the
   * engine's fault, not the daemon's. */
  if (e->rc == EVD_CLIENT_EINVAL)
    return fault_set(f, 500, "internal_error", "%s%s was not sent: %s: %s",
                     act, of, e->code, e->message);
  return fault_set(f, 503, "evictd_unavailable", "%s%s failed: %s: %s", act,
                   of, e->code, e->message);
}

static int send_once(evd_client_t *c, const link_req_t *r) {
  int64_t x = r->has_expect ? (int64_t)r->expect : EVD_NO_EXPECT;
  switch (r->op) {
  case LINK_STEP: return evd_client_step(c, r->steps, r->answer);
  case LINK_BATCH: return evd_client_batch(c, r->steps, r->n, r->results);
  case LINK_COMMIT:
    return evd_client_commit_if(c, r->session, r->at, x, r->answer);
  case LINK_TRUNCATE:
    return evd_client_truncate_if(c, r->session, r->at, x, r->answer);
  case LINK_DELETE: return evd_client_delete(c, r->session, true);
  case LINK_CREATE: return evd_client_create(c, r->session, r->cfg, r->view);
  case LINK_FORK:
    return evd_client_fork_if(c, r->session, r->into, x, r->view);
  case LINK_ADOPT:
    return evd_client_adopt(c, r->session, r->adopt, r->view);
  }
  return EVD_CLIENT_EINVAL;
}

/* A 502 or 504 is a proxy's (the daemon answers neither): nginx says so
 * while the instance behind it is down or restarting, and forwards
 * nothing more, so the request may be sent again, under the client's own
 * rules (every request the engine sends is repeatable). Its page is not
 * the daemon's JSON: EVD_CLIENT_EPROTO with the status kept. */
static bool gateway(const evd_client_t *c, int rc) {
  int status = evd_client_error(c)->status;
  return (rc == EVD_CLIENT_EAPI || rc == EVD_CLIENT_EPROTO) &&
         (status == 502 || status == 504);
}

int link_send(link_t *l, const link_req_t *r, fault_t *f) {
  double until = 0;
  long ms = 10;
  int rc;
  while ((rc = send_once(l->c, r)) != 0 && gateway(l->c, rc)) {
    /* The client's backoff: 10 ms doubling to 500 ms, for --reconnect-ms
     * after the first failure. */
    if (until == 0)
      until = clock_now() + l->o.reconnect_ms / 1e3;
    if (clock_now() + ms / 1e3 > until)
      break;
    nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
    ms = ms * 2 > 500 ? 500 : ms * 2;
    l->n.gateway++;
  }
  if (rc != 0)
    client_fault(l->c, what[r->op],
                 r->op == LINK_STEP ? r->steps[0].session : r->session, f);
  else
    l->gone = false; /* the daemon is back: tidying up may try again */
  return rc;
}

void link_batch_send(link_t *l, const evd_step_t *steps, size_t n) {
  l->sent = evd_client_batch_send(l->c, steps, n);
}

int link_batch_recv(link_t *l, const evd_step_t *steps, size_t n,
                    evd_batch_result_t *res, fault_t *f) {
  link_req_t r = {.op = LINK_BATCH, .steps = steps, .n = n, .results = res};
  int rc = l->sent != 0 ? l->sent : evd_client_batch_recv(l->c, res);
  if (rc == 0) {
    l->gone = false;
    return 0;
  }
  /* Not sent, or a proxy's 502/504: again, as link_send sends. (The
   * client itself resent what it may while it waited for the answer.) */
  if (l->sent != 0 || gateway(l->c, rc))
    return link_send(l, &r, f);
  client_fault(l->c, what[LINK_BATCH], NULL, f);
  return rc;
}

bool link_refused(const link_t *l, int rc, const char *code) {
  return rc == EVD_CLIENT_EAPI &&
         strcmp(evd_client_error(l->c)->code, code) == 0;
}

int link_create(link_t *l, const char *session, const evd_session_cfg_t *cfg,
                evd_view_t *v, fault_t *f) {
  return link_send(l, &(link_req_t){.op = LINK_CREATE, .session = session,
                                    .cfg = cfg, .view = v}, f) ? -1 : 0;
}

int link_fork(link_t *l, const char *from, const char *session,
              bool has_expect, uint32_t expect, evd_view_t *v, fault_t *f) {
  return link_send(l, &(link_req_t){.op = LINK_FORK, .session = from,
                                    .into = session, .has_expect = has_expect,
                                    .expect = expect, .view = v}, f) ? -1 : 0;
}

int link_adopt(link_t *l, const char *session, const evd_adopt_t *st,
               evd_view_t *v, fault_t *f) {
  return link_send(l, &(link_req_t){.op = LINK_ADOPT, .session = session,
                                    .adopt = st, .view = v}, f) ? -1 : 0;
}

int link_item(const evd_batch_result_t *res, const char *session,
              fault_t *f) {
  if (res->rc == 0)
    return 0;
  const evd_client_err_t *e = &res->error;
  if (res->rc == LINK_EFAULT)
    return fault_set(f, e->status, e->code, "%s", e->message);
  return fault_set(f, 502, "evictd_refused", "evictd refused the step of "
                   "session %s: %d %s: %s", session, e->status, e->code,
                   e->message);
}

int link_delete(link_t *l, const char *session, bool quick, fault_t *f) {
  if (!quick)
    return link_send(l, &(link_req_t){.op = LINK_DELETE, .session = session},
                     f) == 0 ? 0 : -1;
  if (l->gone)
    return fault_set(f, 503, "evictd_unavailable", "evictd cannot be "
                     "reached: session %s is left to its --idle-ttl",
                     session);
  evd_client_opts_t co = {.url = l->o.url, .timeout_ms = 1000,
                          .token_file = l->o.token_file,
                          .cafile = l->o.cafile};
  if (l->quick == NULL && evd_client_new(&l->quick, &co, NULL, 0) != 0) {
    l->gone = true;
    return fault_set(f, 500, "evictd_client", "no client to delete session "
                     "%s with", session);
  }
  int rc = evd_client_delete(l->quick, session, true);
  if (rc == EVD_CLIENT_ECONNECT || rc == EVD_CLIENT_ETIMEOUT)
    l->gone = true;
  return rc == 0 ? 0 : client_fault(l->quick, "the delete", session, f);
}

/* ---- kept answers ------------------------------------------------------- */

/* A copy of n bytes of src in memory of the link's; NULL when out of it. */
static void *keep(link_t *l, const void *src, size_t n) {
  if (l->n_kept == l->cap_kept) {
    size_t cap = l->cap_kept ? l->cap_kept * 2 : 32;
    void **k = realloc(l->kept, cap * sizeof(*k));
    if (k == NULL)
      return NULL;
    l->kept = k;
    l->cap_kept = cap;
  }
  void *p = malloc(n ? n : 1);
  if (p == NULL)
    return NULL;
  memcpy(p, src, n);
  l->kept[l->n_kept++] = p;
  return p;
}

static int keep_list(link_t *l, evd_list_t *x) {
  if (x->n == 0)
    return 0;
  x->v = keep(l, x->v, x->n * sizeof(*x->v));
  return x->v == NULL ? -1 : 0;
}

int link_keep(link_t *l, evd_answer_t *a) {
  evd_list_t *lists[] = {&a->victims, &a->slots, &a->dropped, &a->removed,
                         &a->pages_new, &a->pages_freed,
                         &a->pages_transient};
  for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++)
    if (keep_list(l, lists[i]) != 0)
      return -1;
  return 0;
}

int link_keep_error(link_t *l, evd_client_err_t *e) {
  e->code = keep(l, e->code, strlen(e->code) + 1);
  e->message = keep(l, e->message, strlen(e->message) + 1);
  if (e->code == NULL || e->message == NULL) {
    e->code = e->message = "";
    return -1;
  }
  return 0;
}

int link_keep_fault(link_t *l, evd_client_err_t *e, const fault_t *f) {
  *e = (evd_client_err_t){.rc = LINK_EFAULT, .status = f->status,
                          .code = f->code, .message = f->msg, .newest = -1};
  return link_keep_error(l, e);
}

void link_unkeep(link_t *l) {
  for (size_t i = 0; i < l->n_kept; i++)
    free(l->kept[i]);
  l->n_kept = 0;
}
