/* evictd-llama's link to evictd: one C client made from the options every
 * command shares (a repeatable request that timed out is sent again by
 * the client for up to --reconnect-ms: its resend_timeouts option; one a
 * proxy answered 502 or 504 is sent again here, as long), the requests the
 * commands send through it, the sentences its failures are told in, and
 * deletes that never wait long on a dead daemon. It also holds what
 * re-homing needs beside the client (common/change.c): whether to send
 * the precondition and to re-home, whether the daemon's URL is a proxy
 * that refuses batches, answers kept past the client's next call, and the
 * counters. Used by one thread at a time, like the client. */
#ifndef EVICTD_LLAMA_LINK_H
#define EVICTD_LLAMA_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "evictd/client.h"

/* The evictd options of every command (cli.c's cli_evictd_opts). */
typedef struct link_opts_s {
  const char *url;          /* NULL: $EVICTD_URL, else http://127.0.0.1:8090 */
  const char *token_file;
  const char *cafile;
  uint32_t timeout_ms;      /* one answer */
  uint32_t reconnect_ms;    /* resending while evictd restarts */
} link_opts_t;

#define LINK_OPTS_DEFAULT {.timeout_ms = 10000, .reconnect_ms = 30000}

/* A failure as every command tells it: a sentence, and for serve an HTTP
 * status and a code ("evictd_refused", "evictd_unavailable",
 * "session_lost", ...). */
typedef struct fault_s {
  int status;
  char code[48];
  char msg[480];
} fault_t;

/* Fills f (status, code, then printf-style message); returns -1. */
int fault_set(fault_t *f, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Why a session was re-homed (common/change.c): the daemon did not hold
 * it (404 unknown_session: restarted without its state, or a pool that
 * changed size routes it to an instance that never saw it), held another
 * window (409 diverged: an older copy), or, with no precondition sent, an
 * answer whose size gave away a fresh window made by autocreate. */
typedef enum {
  LINK_LOST,
  LINK_DIVERGED,
  LINK_FRESH,
  LINK_CAUSES
} link_cause_t;

/* The link's counters, for generate's --stats and serve's /metrics. */
typedef struct link_counts_s {
  uint64_t rehomes[LINK_CAUSES]; /* adoptions, by cause */
  uint64_t creates;   /* sessions created (PUT) when their first step met
                         unknown_session: a daemon run with
                         --no-autocreate, not a re-home */
  uint64_t gateway;   /* requests sent again after a proxy's 502 or 504 */
} link_counts_t;

typedef struct link_s {
  evd_client_t *c;
  evd_client_t *quick;      /* link_delete's after a failure, made once */
  link_opts_t o;
  bool gone;                /* the quick client met no daemon: stop trying */
  bool expect;              /* changes carry expect_newest */
  bool rehome;              /* sessions are re-homed (else: session_lost) */
  bool per_session;         /* the URL refused POST /step with 421 (nginx
                               in front of a pool): one step per request */
  link_counts_t n;
  int sent;                 /* link_batch_send's outcome, for its recv */
  void **kept;              /* link_keep's copies, freed by link_unkeep */
  size_t n_kept, cap_kept;
} link_t;

/* Makes the client (it connects on its first request). Re-homing is on
 * unless the environment says otherwise: EVICTD_LLAMA_REHOME=off sends no
 * precondition and re-homes nothing (evictd-llama as it was before
 * re-homing: the tests' negative control), =no-expect re-homes without
 * the precondition (as against a daemon that does not check it), =on is
 * the default; for tests, not documented to users. 0, or -1 with f set.
 * link_close frees what link_open made; a zeroed link is closed. */
int link_open(link_t *l, const link_opts_t *o, fault_t *f);
void link_close(link_t *l);

/* The requests: the first five are followed through a position map. */
typedef enum {
  LINK_STEP,      /* steps[0]: answer */
  LINK_BATCH,     /* steps[0..n): results (items may fail: link_item) */
  LINK_COMMIT,    /* session, at = the newest kept: answer */
  LINK_TRUNCATE,  /* session, at = the first removed: answer */
  LINK_DELETE,    /* session (missing_ok: a resent delete meets 404) */
  LINK_CREATE,    /* session, cfg: view */
  LINK_FORK,      /* session (the parent), into: view */
  LINK_ADOPT      /* session, adopt: view */
} link_op_t;

typedef struct link_req_s {
  link_op_t op;
  const char *session;
  const evd_step_t *steps;
  size_t n;
  uint32_t at;
  bool has_expect;      /* commit, truncate, fork: send expect */
  uint32_t expect;      /* the session's newest before the change */
  evd_answer_t *answer;
  evd_batch_result_t *results;
  const evd_session_cfg_t *cfg;
  const char *into;
  const evd_adopt_t *adopt;
  evd_view_t *view;
} link_req_t;

/* Sends r (resent by the client while the daemon restarts or answers too
 * late, for --reconnect-ms; and here, for as long, while a proxy answers
 * 502 or 504, which nginx does while the instance behind it is down).
 * 0, or the client's EVD_CLIENT_* code with f set ("evictd refused the
 * step of session S: 400 invalid_sinks: ..." with status 502, or "the
 * step of session S failed: connection_failed: ..." with 503). */
int link_send(link_t *l, const link_req_t *r, fault_t *f);

/* A batch in two halves, for an engine that decodes while evictd
 * answers: link_batch_send writes it and returns; the caller does other
 * work (with nothing else of the link's: the client refuses every other
 * call meanwhile) and link_batch_recv waits for the answers, then does
 * what link_send does with them. steps are borrowed until recv returns.
 * A send that could not go (no connection) is no failure yet: recv sends
 * the batch again under link_send's rules. send returns nothing to act
 * on; recv returns what link_send would, with f set. */
void link_batch_send(link_t *l, const evd_step_t *steps, size_t n);
int link_batch_recv(link_t *l, const evd_step_t *steps, size_t n,
                    evd_batch_result_t *res, fault_t *f);

/* Whether the last failure of l's client was code ("unknown_session",
 * "diverged", ...) in an answer of the daemon's (EVD_CLIENT_EAPI). */
bool link_refused(const link_t *l, int rc, const char *code);

/* Creates session with cfg (view in *v), forks `from` (whose newest is
 * expect, sent when has_expect) into session, or adopts session in state
 * st: idempotent, sent again like link_send's requests. 0, or -1 with f
 * set. */
int link_create(link_t *l, const char *session, const evd_session_cfg_t *cfg,
                evd_view_t *v, fault_t *f);
int link_fork(link_t *l, const char *from, const char *session,
              bool has_expect, uint32_t expect, evd_view_t *v, fault_t *f);
int link_adopt(link_t *l, const char *session, const evd_adopt_t *st,
               evd_view_t *v, fault_t *f);

/* A batch item's rc when its outcome is one of the link's own sentences
 * (common/change.c: an item re-homed, then failed): its error carries the
 * fault's status, code and message. */
#define LINK_EFAULT (-100)

/* Item i of a batch that failed alone: f set, -1; 0 when it did not. */
int link_item(const evd_batch_result_t *res, const char *session,
              fault_t *f);

/* Answers and errors normally live in the client until its next call;
 * the batch's slow paths (re-homing an item, one request per session)
 * make more calls before the engine follows the answers, so they keep
 * copies here: link_keep copies a's lists (and link_keep_error e's
 * strings, link_keep_fault a fault as e) into memory of the link's,
 * repointing them; link_unkeep frees every copy (the next batch does it
 * first). 0, or -1 when out of memory. */
int link_keep(link_t *l, evd_answer_t *a);
int link_keep_error(link_t *l, evd_client_err_t *e);
int link_keep_fault(link_t *l, evd_client_err_t *e, const fault_t *f);
void link_unkeep(link_t *l);

/* Deletes session. After a success (quick false) through the link's
 * client, with link_send's rule; after a failure (quick true) best
 * effort: a client of its own that waits a second at most and never
 * resends, and no attempt at all once it met no daemon, so that tidying
 * up never waits --reconnect-ms on a dead one. 0, or -1 with f set (f may
 * be NULL). */
int link_delete(link_t *l, const char *session, bool quick, fault_t *f);

#endif
