/* evictd's C client: one function per operation, which writes its request
 * (body.c), sends it (transport.c) and reads its answer (reader.h) into
 * the client's memory. Making and freeing a client is in new.c. */
#include "client_int.h"

#include <stdio.h>
#include <string.h>

/* ---- answers ------------------------------------------------------------ */

static int eproto(evd_client_t *c, const char *why) {
  return evd__client_fail(c, EVD_CLIENT_EPROTO, "protocol_error",
                          "The answer to %s %s (HTTP %ld) is not the "
                          "contract's: %s",
                          evd__method_name(c->method), c->url.p, c->status, why);
}

/* A reader of the answer in c->ans, with the client's arena fitted to it:
 * 0, or EVD_CLIENT_ENOMEM. */
static int reader(evd_client_t *c, evd__reader_t *r) {
  if (evd__arena_fit(&c->arena, c->ans.len))
    return evd__enomem(c);
  evd__reader_init(r, c->ans.p, c->ans.len, &c->arena);
  return 0;
}

/* An answer of status >= 400: EVD_CLIENT_EAPI with the daemon's code,
 * message and newest, or EVD_CLIENT_EPROTO when it is not a JSON error
 * (libmicrohttpd's own pages for 414, 431 and malformed HTTP). */
static int api_error(evd_client_t *c) {
  evd_client_err_t e;
  evd__reader_t r;
  int rc;

  if ((rc = reader(c, &r)) != 0)
    return rc;
  if (evd__read_error(&r, &e))
    return eproto(c, r.why);
  snprintf(c->err_code, sizeof c->err_code, "%s", e.code);
  snprintf(c->err_msg, sizeof c->err_msg, "%s", e.message);
  c->err.rc = EVD_CLIENT_EAPI;
  c->err.status = (int)c->status;
  c->err.code = c->err_code;
  c->err.message = c->err_msg;
  c->err.newest = e.newest;
  return EVD_CLIENT_EAPI;
}

/* The status of the answer that came: 0 for 2xx, else the call's error. */
static int check_status(evd_client_t *c) {
  if (c->status >= 400)
    return api_error(c);
  if (c->status < 200 || c->status > 299)
    return eproto(c, "an unexpected status");
  return 0;
}

/* Sends the request prepared in c->url and c->body and checks the status:
 * 0 for a 2xx answer, else the call's error. */
static int exchange(evd_client_t *c, evd__method_t m, bool may_repeat) {
  int rc = evd__client_send(c, m, may_repeat);

  return rc != 0 ? rc : check_status(c);
}

/* The answer of a step, commit, truncate or evict; a step's has a slot
 * per position stepped (`slots`, else -1). */
static int read_answer(evd_client_t *c, unsigned required, long slots,
                       evd_answer_t *out) {
  evd_answer_t scratch;
  evd__reader_t r;
  int rc;

  if (out == NULL)
    out = &scratch;
  if ((rc = reader(c, &r)) != 0)
    return rc;
  if (evd__read_answer(&r, required, out))
    return eproto(c, r.why);
  if (slots >= 0 && out->slots.n != (size_t)slots)
    return eproto(c, "not one slot per position stepped");
  if (out->replayed)
    c->stats.replayed++;
  return 0;
}

static int read_view(evd_client_t *c, evd_view_t *out) {
  evd_view_t scratch;
  evd__reader_t r;
  int rc;

  if (out == NULL)
    out = &scratch;
  if ((rc = reader(c, &r)) != 0)
    return rc;
  if (evd__read_view(&r, out))
    return eproto(c, r.why);
  out->created = c->status == 201;
  return 0;
}

static int read_batch(evd_client_t *c, const evd_step_t *steps, size_t n,
                      evd_batch_result_t *out) {
  size_t i, replayed = 0;
  evd__reader_t r;
  int rc;

  if ((rc = reader(c, &r)) != 0)
    return rc;
  if (evd__read_batch(&r, out, n))
    return eproto(c, r.why);
  for (i = 0; i < n; i++) {
    if (out[i].rc != 0)
      continue;
    if (out[i].answer.slots.n != steps[i].n_positions)
      return eproto(c, "a batch item without one slot per position "
                       "stepped");
    replayed += out[i].answer.replayed;
  }
  c->stats.replayed += replayed;
  return 0;
}

/* ---- the operations ----------------------------------------------------- */

int evd_client_health(evd_client_t *c) {
  int rc;

  if ((rc = evd__put_url(c, "/healthz", NULL, NULL)) != 0 ||
      (rc = exchange(c, EVD__GET, true)) != 0)
    return rc;
  return c->status == 200 ? 0 : eproto(c, "/healthz did not answer 200");
}

int evd_client_create(evd_client_t *c, const char *session,
                      const evd_session_cfg_t *cfg, evd_view_t *out) {
  int rc;

  if ((rc = evd__session_url(c, session, "")) != 0 ||
      (rc = evd__put_create(c, cfg)) != 0 ||
      (rc = exchange(c, EVD__PUT, true)) != 0)
    return rc;
  return read_view(c, out);
}

int evd_client_step(evd_client_t *c, const evd_step_t *step,
                    evd_answer_t *out) {
  int rc;

  if ((rc = evd__check_step(c, step)) != 0 ||
      (rc = evd__session_url(c, step->session, "/step")) != 0)
    return rc;
  c->body.len = 0;
  if ((rc = evd__put_step(c, step, false)) != 0 ||
      (rc = exchange(c, EVD__POST, true)) != 0)
    return rc;
  return read_answer(c, EVD__F_VICTIMS | EVD__F_SLOTS | EVD__F_SIZE |
                            EVD__F_NEWEST,
                     (long)step->n_positions, out);
}

/* A change whose body is one number and the precondition (commit,
 * truncate, evict): sends it and reads an answer with the `required`
 * fields. */
static int int_change(evd_client_t *c, const char *session,
                      const char *suffix, const char *key, int64_t v,
                      int64_t expect_newest, bool may_repeat,
                      unsigned required, evd_answer_t *out) {
  int rc;

  if ((rc = evd__session_url(c, session, suffix)) != 0 ||
      (rc = evd__put_int_body(c, key, v, expect_newest)) != 0 ||
      (rc = exchange(c, EVD__POST, may_repeat)) != 0)
    return rc;
  return read_answer(c, required, -1, out);
}

int evd_client_commit_if(evd_client_t *c, const char *session,
                         uint32_t newest, int64_t expect_newest,
                         evd_answer_t *out) {
  return int_change(c, session, "/commit", "newest", newest, expect_newest,
                    true,
                    EVD__F_VICTIMS | EVD__F_DROPPED | EVD__F_SIZE |
                        EVD__F_NEWEST,
                    out);
}

int evd_client_commit(evd_client_t *c, const char *session, uint32_t newest,
                      evd_answer_t *out) {
  return evd_client_commit_if(c, session, newest, EVD_NO_EXPECT, out);
}

int evd_client_truncate_if(evd_client_t *c, const char *session,
                           uint32_t from, int64_t expect_newest,
                           evd_answer_t *out) {
  return int_change(c, session, "/truncate", "from", from, expect_newest,
                    true, EVD__F_REMOVED | EVD__F_SIZE | EVD__F_NEWEST, out);
}

int evd_client_truncate(evd_client_t *c, const char *session, uint32_t from,
                        evd_answer_t *out) {
  return evd_client_truncate_if(c, session, from, EVD_NO_EXPECT, out);
}

int evd_client_fork_if(evd_client_t *c, const char *session,
                       const char *into, int64_t expect_newest,
                       evd_view_t *out) {
  int rc;

  if ((rc = evd__session_url(c, session, "/fork")) != 0 ||
      (rc = evd__put_fork(c, into, expect_newest)) != 0 ||
      (rc = exchange(c, EVD__POST, true)) != 0)
    return rc;
  return read_view(c, out);
}

int evd_client_fork(evd_client_t *c, const char *session, const char *into,
                    evd_view_t *out) {
  return evd_client_fork_if(c, session, into, EVD_NO_EXPECT, out);
}

int evd_client_evict_if(evd_client_t *c, const char *session, int64_t budget,
                        int64_t expect_newest, evd_answer_t *out) {
  /* Never sent again once it may have been delivered: see transport.c. */
  return int_change(c, session, "/evict", "budget", budget, expect_newest,
                    false, EVD__F_VICTIMS | EVD__F_SIZE, out);
}

int evd_client_evict(evd_client_t *c, const char *session, int64_t budget,
                     evd_answer_t *out) {
  return evd_client_evict_if(c, session, budget, EVD_NO_EXPECT, out);
}

int evd_client_adopt(evd_client_t *c, const char *session,
                     const evd_adopt_t *state, evd_view_t *out) {
  int rc;

  if (state == NULL)
    return evd__einval(c, "An adopt needs the state to adopt.");
  /* Idempotent: the same state again is answered 200, so it may be sent
   * again like a create. */
  if ((rc = evd__session_url(c, session, "/adopt")) != 0 ||
      (rc = evd__put_adopt(c, state)) != 0 ||
      (rc = exchange(c, EVD__POST, true)) != 0)
    return rc;
  return read_view(c, out);
}

int evd_client_get(evd_client_t *c, const char *session, evd_view_t *out) {
  int rc;

  c->body.len = 0;
  if ((rc = evd__session_url(c, session, "")) != 0 ||
      (rc = exchange(c, EVD__GET, true)) != 0)
    return rc;
  return read_view(c, out);
}

int evd_client_delete(evd_client_t *c, const char *session, bool missing_ok) {
  int rc;

  c->body.len = 0;
  if ((rc = evd__session_url(c, session, "")) != 0)
    return rc;
  rc = exchange(c, EVD__DELETE, true);
  if (rc == EVD_CLIENT_EAPI && missing_ok && c->status == 404 &&
      strcmp(c->err.code, "unknown_session") == 0)
    return 0;
  return rc;
}

/* The batch request in c->url and c->body: 0, or the call's error. */
static int put_batch(evd_client_t *c, const evd_step_t *steps, size_t n) {
  int rc;

  if (n > 0 && steps == NULL)
    return evd__einval(c, "A batch of n > 0 steps needs steps.");
  if ((rc = evd__put_url(c, "/step", NULL, NULL)) != 0 ||
      (rc = evd__put_batch(c, steps, n)) != 0)
    return rc;
  c->batch_steps = steps;
  c->batch_n = n;
  return 0;
}

int evd_client_batch(evd_client_t *c, const evd_step_t *steps, size_t n,
                     evd_batch_result_t *out) {
  int rc;

  if (n > 0 && out == NULL)
    return evd__einval(c, "A batch of n > 0 steps needs out.");
  if ((rc = put_batch(c, steps, n)) != 0)
    return rc;
  rc = exchange(c, EVD__POST, true);
  c->batch_steps = NULL;
  if (rc != 0)
    return rc;
  return read_batch(c, steps, n, out);
}

int evd_client_batch_send(evd_client_t *c, const evd_step_t *steps,
                          size_t n) {
  int rc;

  if ((rc = put_batch(c, steps, n)) != 0)
    return rc;
  if ((rc = evd__client_begin(c, EVD__POST, true, true)) != 0) {
    c->batch_steps = NULL;
    return rc;
  }
  c->batch_sent = true;
  return 0;
}

int evd_client_batch_recv(evd_client_t *c, evd_batch_result_t *out) {
  const evd_step_t *steps = c->batch_steps;
  size_t n = c->batch_n;
  int rc;

  if (!c->batch_sent)
    return evd__einval(c, "No batch is in flight: evd_client_batch_send "
                          "first.");
  if (n > 0 && out == NULL)
    return evd__einval(c, "A batch of n > 0 steps needs out.");
  rc = evd__client_end(c);
  c->batch_sent = false;
  c->batch_steps = NULL;
  if (rc == 0)
    rc = check_status(c);
  if (rc != 0)
    return rc;
  return read_batch(c, steps, n, out);
}
