/* The link to evictd: the client made from the shared options, the one
 * resend-on-timeout rule, and the sentences of its failures. */
#include "common/link.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>


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
}

static const char *const what[] = {
    [LINK_STEP] = "the step", [LINK_BATCH] = "the batch of steps",
    [LINK_COMMIT] = "the commit", [LINK_TRUNCATE] = "the truncate",
    [LINK_DELETE] = "the delete"};

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
  return fault_set(f, 503, "evictd_unavailable", "%s%s failed: %s: %s", act,
                   of, e->code, e->message);
}

static int send_once(evd_client_t *c, const link_req_t *r) {
  switch (r->op) {
  case LINK_STEP: return evd_client_step(c, r->steps, r->answer);
  case LINK_BATCH: return evd_client_batch(c, r->steps, r->n, r->results);
  case LINK_COMMIT:
    return evd_client_commit(c, r->session, r->at, r->answer);
  case LINK_TRUNCATE:
    return evd_client_truncate(c, r->session, r->at, r->answer);
  case LINK_DELETE: return evd_client_delete(c, r->session, true);
  }
  return EVD_CLIENT_EINVAL;
}

int link_send(link_t *l, const link_req_t *r, fault_t *f) {
  int rc = send_once(l->c, r);
  if (rc != 0)
    client_fault(l->c, what[r->op],
                 r->op == LINK_STEP ? r->steps[0].session : r->session, f);
  else
    l->gone = false; /* the daemon is back: tidying up may try again */
  return rc;
}

int link_create(link_t *l, const char *session, const evd_session_cfg_t *cfg,
                evd_view_t *v, fault_t *f) {
  if (evd_client_create(l->c, session, cfg, v) != 0)
    return client_fault(l->c, "the create", session, f);
  return 0;
}

int link_fork(link_t *l, const char *from, const char *session,
              evd_view_t *v, fault_t *f) {
  if (evd_client_fork(l->c, from, session, v) != 0)
    return client_fault(l->c, "the fork", from, f);
  return 0;
}

int link_item(const evd_batch_result_t *res, const char *session,
              fault_t *f) {
  if (res->rc == 0)
    return 0;
  const evd_client_err_t *e = &res->error;
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
