/* evictd-llama's link to evictd: one C client made from the options every
 * command shares (a repeatable request that timed out is sent again by
 * the client for up to --reconnect-ms: its resend_timeouts option), the
 * requests the commands send through it, the sentences its failures are
 * told in, and deletes that never wait long on a dead daemon. Used by one
 * thread at a time, like the client. */
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

typedef struct link_s {
  evd_client_t *c;
  evd_client_t *quick;      /* link_delete's after a failure, made once */
  link_opts_t o;
  bool gone;                /* the quick client met no daemon: stop trying */
} link_t;

/* Makes the client (it connects on its first request). 0, or -1 with f
 * set. link_close frees what link_open made; a zeroed link is closed. */
int link_open(link_t *l, const link_opts_t *o, fault_t *f);
void link_close(link_t *l);

/* The requests that are followed through a position map. */
typedef enum {
  LINK_STEP,      /* steps[0]: answer */
  LINK_BATCH,     /* steps[0..n): results (items may fail: link_item) */
  LINK_COMMIT,    /* session, at = the newest kept: answer */
  LINK_TRUNCATE,  /* session, at = the first removed: answer */
  LINK_DELETE     /* session (missing_ok: a resent delete meets 404) */
} link_op_t;

typedef struct link_req_s {
  link_op_t op;
  const char *session;
  const evd_step_t *steps;
  size_t n;
  uint32_t at;
  evd_answer_t *answer;
  evd_batch_result_t *results;
} link_req_t;

/* Sends r (resent by the client while the daemon restarts or answers too
 * late, for --reconnect-ms). 0, or the client's EVD_CLIENT_* code with f
 * set ("evictd refused the step of session S: 400 invalid_sinks: ..."
 * with status 502, or "the step of session S failed: connection_failed:
 * ..." with 503). */
int link_send(link_t *l, const link_req_t *r, fault_t *f);

/* Creates session with cfg (view in *v), or forks `from` into session:
 * both idempotent, sent once (the client resends lost answers itself).
 * 0, or -1 with f set. */
int link_create(link_t *l, const char *session, const evd_session_cfg_t *cfg,
                evd_view_t *v, fault_t *f);
int link_fork(link_t *l, const char *from, const char *session,
              evd_view_t *v, fault_t *f);

/* Item i of a batch that failed alone: f set, -1; 0 when it did not. */
int link_item(const evd_batch_result_t *res, const char *session,
              fault_t *f);

/* Deletes session. After a success (quick false) through the link's
 * client, with link_send's rule; after a failure (quick true) best
 * effort: a client of its own that waits a second at most and never
 * resends, and no attempt at all once it met no daemon, so that tidying
 * up never waits --reconnect-ms on a dead one. 0, or -1 with f set (f may
 * be NULL). */
int link_delete(link_t *l, const char *session, bool quick, fault_t *f);

#endif
