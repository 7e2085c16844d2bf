/* A sequence's changes to its session: each carries the newest position
 * the engine knows (expect_newest), and a session its daemon lost or
 * holds in another state is re-homed (adopted as the engine's cache holds
 * it) and the change sent again, for one change, a batch, or a batch sent
 * one session per request through a proxy that refuses batches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/seq.h"

/* Re-homings of one change in a row before it is given up: a daemon that
 * loses a session again at once each time is not one to go on with. */
#define ROUNDS 3

/* An outcome that needs nothing more (else a link_cause_t). */
#define GO_ON SEQ_GO_ON

/* ---- the books: what the session holds, as the engine knows it ---------- */

/* The number of the map's positions at or below the committed newest:
 * what the session holds but its pending drafts, which are the map's
 * last positions (the engine computed them in its last pass). */
static uint32_t n_committed(const seq_t *s) {
  uint32_t n = s->map.n;
  while (n > 0 && s->map.held[n - 1] > s->committed)
    n--;
  return n;
}

/* The committed newest a commit at c leaves: the newest pending draft at
 * or below c, else the committed newest as it was. */
static uint32_t commit_to(const seq_t *s, uint32_t c) {
  for (uint32_t i = s->map.n; i > 0 && s->map.held[i - 1] > s->committed;
       i--)
    if (s->map.held[i - 1] <= c)
      return s->map.held[i - 1];
  return s->committed;
}

void seq_stepped(seq_t *s, const evd_step_t *st, const evd_answer_t *a) {
  uint32_t committed = s->committed;
  if (st->has_commit)
    committed = commit_to(s, st->commit);
  if (st->n_positions > 0 && !st->tentative)
    committed = a->newest;
  s->newest = a->newest;
  s->committed = committed;
}

/* Records the newest a change left, from its request and its answer. */
static void advance(seq_t *s, const link_req_t *r, const evd_answer_t *a) {
  uint32_t committed = s->committed;
  if (r->op == LINK_STEP) {
    seq_stepped(s, r->steps, a);
    return;
  }
  if (r->op == LINK_COMMIT) {
    committed = commit_to(s, r->at);
  } else if (committed > a->newest) { /* a truncation took drafts too */
    committed = a->newest;
  }
  s->newest = a->newest;
  s->committed = committed;
}

/* Whether s is as a new session starts: position 0 alone, computed or
 * not. */
static bool at_start(const seq_t *s) {
  return s->newest == 0 && (s->map.n == 0 ||
                            (s->map.n == 1 && s->map.held[0] == 0));
}

/* What an outcome of a change of s asks for: GO_ON, or why s must be
 * re-homed. An answer (rc 0) must describe s's cache: the positions held,
 * plus those the request added, less those it says are gone; a fresh
 * window made by autocreate, when no precondition was sent, does not.
 * code: the daemon's error code when rc is EVD_CLIENT_EAPI. With
 * re-homing off, only a session at its start that the daemon does not
 * hold is taken care of (created: that is no re-homing). */
int seq_verdict(const link_t *l, const seq_t *s, int rc, const char *code,
                const evd_answer_t *a, size_t added) {
  if (!l->rehome)
    return rc == EVD_CLIENT_EAPI && at_start(s) &&
                   strcmp(code, "unknown_session") == 0 ? LINK_LOST : GO_ON;
  if (rc == 0) {
    if (a == NULL)
      return GO_ON;
    uint64_t held = (uint64_t)s->held + added;
    size_t gone = a->dropped.n + a->victims.n + a->removed.n;
    return gone <= held && held - gone == a->size ? GO_ON : LINK_FRESH;
  }
  if (rc != EVD_CLIENT_EAPI)
    return GO_ON;
  if (strcmp(code, "unknown_session") == 0)
    return LINK_LOST;
  if (strcmp(code, "diverged") == 0)
    return LINK_DIVERGED;
  return GO_ON;
}

static size_t added_by(const link_req_t *r) {
  return r->op == LINK_STEP ? r->steps->n_positions : 0;
}

static const char *client_code(const link_t *l, int rc) {
  return rc == EVD_CLIENT_EAPI ? evd_client_error(l->c)->code : "";
}

/* ---- re-homing ---------------------------------------------------------- */

static const char *const lost_how[] = {
    [LINK_LOST] = "does not hold",
    [LINK_DIVERGED] = "holds another window of",
    [LINK_FRESH] = "answered from a fresh window for"};

/* Puts s's session back in its daemon as the engine's cache holds it,
 * after `cause`: adopted with the positions of the map up to the
 * committed newest (position 0 alone before the first pass), that newest
 * and the configuration, replacing what the daemon holds unless it held
 * nothing (then an existing session found meanwhile is replaced too); then
 * the pending drafts stepped again as tentative positions. A session
 * still at its start that the daemon does not hold is created instead
 * (PUT: under --no-autocreate a first step creates nothing). The slots
 * are the daemon's canonical layout: llama.cpp's cells are not the
 * ring's, and victims depend on positions alone. 0, or LINK_EFAULT with f
 * set ("session_lost"). */
static int rehome(link_t *l, const seq_t *s, int cause, fault_t *f) {
  static const uint32_t start = 0;
  uint32_t k = n_committed(s);
  const uint32_t *kept = s->map.held;
  evd_view_t v;
  fault_t e;
  if (k == 0 && s->map.n > 0) {
    snprintf(e.msg, sizeof(e.msg), "the engine's cache holds drafts of it "
             "alone");
    goto lost;
  }
  if (k == 0) {
    kept = &start;
    k = 1;
  }
  if (cause == LINK_LOST && at_start(s)) {
    if (link_create(l, s->session, &s->cfg, &v, &e) != 0)
      goto lost;
    if (v.created || (v.size == 1 && v.newest == 0)) {
      l->n.creates++;
      return 0;
    }
    cause = LINK_DIVERGED; /* made meanwhile, and moved on: replaced */
  }
  if (!l->rehome) {
    snprintf(e.msg, sizeof(e.msg), "re-homing is off");
    goto lost;
  }
  evd_adopt_t st = {.cfg = &s->cfg, .kept = kept, .n_kept = k,
                    .newest = s->committed, .replace = cause != LINK_LOST};
  int rc = link_adopt(l, s->session, &st, &v, &e);
  if (rc != 0 && !st.replace && link_refused(l, EVD_CLIENT_EAPI,
                                             "session_exists")) {
    st.replace = true;
    rc = link_adopt(l, s->session, &st, &v, &e);
  }
  if (rc != 0)
    goto lost;
  l->n.rehomes[cause]++;
  if (s->map.n > k) {
    evd_step_t d = {.session = s->session, .positions = s->map.held + k,
                    .n_positions = s->map.n - k, .tentative = true,
                    .has_expect = true, .expect_newest = s->committed};
    evd_answer_t a;
    if (link_send(l, &(link_req_t){.op = LINK_STEP, .steps = &d,
                                   .answer = &a}, &e) != 0)
      goto lost;
  }
  return 0;
lost:
  fault_set(f, 502, "session_lost", "evictd %s session %s and could not "
            "take it back: %s", lost_how[cause], s->session, e.msg);
  return LINK_EFAULT;
}

/* Re-homes s after `cause` and sends r again, as often as its outcome
 * asks, ROUNDS times at most. r's answer, when it has one, is checked as
 * the first was. Returns what seq_change does. */
static int again(link_t *l, seq_t *s, const link_req_t *r, int cause,
                 fault_t *f) {
  int first = cause;
  for (int round = 0; round < ROUNDS; round++) {
    if (rehome(l, s, cause, f) != 0)
      return LINK_EFAULT;
    int rc = link_send(l, r, f);
    cause = seq_verdict(l, s, rc, client_code(l, rc), r->answer, added_by(r));
    if (cause == GO_ON) {
      if (rc == 0 && r->op != LINK_FORK)
        advance(s, r, r->answer);
      return rc;
    }
  }
  fault_set(f, 502, "session_lost", "evictd %s session %s again each of %d "
            "times it was re-homed (first it %s it)", lost_how[cause],
            s->session, ROUNDS, lost_how[first]);
  return LINK_EFAULT;
}

/* ---- one change, a batch ------------------------------------------------ */

int seq_change(link_t *l, seq_t *s, const link_req_t *r0, fault_t *f) {
  link_req_t r = *r0;
  evd_step_t st;
  if (r.op == LINK_STEP) {
    st = r0->steps[0];
    st.has_expect = l->expect;
    st.expect_newest = s->newest;
    r.steps = &st;
  } else {
    r.has_expect = l->expect;
    r.expect = s->newest;
  }
  int rc = link_send(l, &r, f);
  int cause = seq_verdict(l, s, rc, client_code(l, rc), r.answer, added_by(&r));
  if (cause != GO_ON)
    return again(l, s, &r, cause, f);
  if (rc == 0)
    advance(s, &r, r.answer);
  return rc;
}

int seq_fork_session(link_t *l, seq_t *from, const char *into,
                     evd_view_t *v, fault_t *f) {
  link_req_t r = {.op = LINK_FORK, .session = from->session, .into = into,
                  .has_expect = l->expect, .expect = from->newest,
                  .view = v};
  int rc = link_send(l, &r, f);
  int cause = seq_verdict(l, from, rc, client_code(l, rc), NULL, 0);
  return cause != GO_ON ? again(l, from, &r, cause, f) : rc;
}

/* Item i's outcome as a change of its own: its step sent (cause GO_ON)
 * or re-homed and sent again, the answer or the failure kept in res.
 * 0, or the client's code of a failure that is not this item's alone
 * (the daemon cannot be reached), f set. */
int seq_item(link_t *l, seq_t *s, const evd_step_t *st,
             evd_batch_result_t *res, int cause, fault_t *f) {
  evd_answer_t a;
  fault_t e;
  link_req_t r = {.op = LINK_STEP, .steps = st, .answer = &a};
  int rc = cause == GO_ON ? seq_change(l, s, &r, &e)
                          : again(l, s, &r, cause, &e);
  memset(res, 0, sizeof(*res));
  if (rc == 0) {
    res->error = (evd_client_err_t){.code = "", .message = "", .newest = -1};
    res->answer = a;
    if (link_keep(l, &res->answer) == 0)
      return 0;
  } else if (rc == EVD_CLIENT_EAPI || rc == LINK_EFAULT ||
             rc == EVD_CLIENT_EINVAL) {
    res->rc = LINK_EFAULT;
    if (link_keep_fault(l, &res->error, &e) == 0)
      return 0;
  } else {
    *f = e;
    return rc;
  }
  fault_set(f, 500, "out_of_memory", "out of memory");
  return EVD_CLIENT_ENOMEM;
}

/* The batch's slow path: some items need re-homing. The others' answers
 * (and refusals) are kept first, since re-homing calls the client again
 * (their newest is recorded already); then each of those items is
 * re-homed and sent again on its own. */
static int settle(link_t *l, seq_t *const *sq, evd_step_t *steps, size_t n,
                  evd_batch_result_t *res, fault_t *f) {
  int *cause = malloc(n * sizeof(*cause));
  int rc = 0;
  if (cause == NULL)
    return fault_set(f, 500, "out_of_memory", "out of memory"),
           EVD_CLIENT_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    cause[i] = seq_verdict(l, sq[i], res[i].rc, res[i].error.code,
                       &res[i].answer, steps[i].n_positions);
    if (cause[i] != GO_ON)
      continue;
    if ((res[i].rc == 0 ? link_keep(l, &res[i].answer)
                        : link_keep_error(l, &res[i].error)) != 0) {
      rc = EVD_CLIENT_ENOMEM;
      fault_set(f, 500, "out_of_memory", "out of memory");
      goto out;
    }
  }
  for (size_t i = 0; i < n && rc == 0; i++)
    if (cause[i] != GO_ON)
      rc = seq_item(l, sq[i], &steps[i], &res[i], cause[i], f);
out:
  free(cause);
  return rc;
}

/* Whether a batch's failure is a refusal of the request as a whole that
 * its items alone would not all meet: the client's own check of a step
 * (EVD_CLIENT_EINVAL), or the daemon's 4xx to the batch itself. Not an
 * unreachable daemon, whose failure every item would meet. */
static bool refused_whole(const link_t *l, int rc) {
  int status = evd_client_error(l->c)->status;
  return rc == EVD_CLIENT_EINVAL ||
         (rc == EVD_CLIENT_EAPI && status >= 400 && status < 500);
}

void seq_batch_send(link_t *l, seq_t *const *sq, evd_step_t *steps,
                    size_t n) {
  for (size_t i = 0; i < n; i++) {
    steps[i].has_expect = l->expect;
    steps[i].expect_newest = sq[i]->newest;
  }
  if (!l->per_session)
    link_batch_send(l, steps, n);
}

int seq_batch_recv(link_t *l, seq_t *const *sq, evd_step_t *steps, size_t n,
                   evd_batch_result_t *res, fault_t *f) {
  if (!l->per_session) {
    int rc = link_batch_recv(l, steps, n, res, f);
    if (rc == 0) {
      /* The verdict depends on what the engine holds, not on the newest,
       * so settle() finds the same for the items recorded here. */
      size_t slow = 0;
      for (size_t i = 0; i < n; i++) {
        if (seq_verdict(l, sq[i], res[i].rc, res[i].error.code, &res[i].answer,
                    steps[i].n_positions) != GO_ON)
          slow++;
        else if (res[i].rc == 0)
          seq_stepped(sq[i], &steps[i], &res[i].answer);
      }
      return slow > 0 ? settle(l, sq, steps, n, res, f) : 0;
    }
    if (link_refused(l, rc, "misdirected_request")) {
      /* nginx's deploy/nginx-shard.conf: a batch may name sessions of
       * several instances, so it is refused and nothing is forwarded. */
      l->per_session = true;
      fprintf(stderr, "evictd-llama: evictd's URL refuses POST /step (421 "
              "misdirected_request: a proxy in front of a pool of daemons); "
              "steps go one session per request from now on\n");
    } else if (!refused_whole(l, rc)) {
      return rc;
    }
    /* Else the batch was refused as a whole, which one bad item does (the
     * client checks every step before it writes any): each item goes on
     * its own, so that only the items at fault fail. */
  }
  for (size_t i = 0; i < n; i++) {
    int rc = seq_item(l, sq[i], &steps[i], &res[i], GO_ON, f);
    if (rc != 0)
      return rc;
  }
  return 0;
}

int seq_batch(link_t *l, seq_t *const *sq, evd_step_t *steps, size_t n,
              evd_batch_result_t *res, fault_t *f) {
  link_unkeep(l);
  seq_batch_send(l, sq, steps, n);
  return seq_batch_recv(l, sq, steps, n, res, f);
}
