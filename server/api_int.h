/* What the API's source files share and nobody else sees: the state
 * behind evd_api_t, the handlers' context, and the helpers of request
 * parsing (request.c), stepping (step.c), the view (view.c) and the fast
 * path (fastpath.c). */
#ifndef EVICTD_API_INT_H
#define EVICTD_API_INT_H

#include <jansson.h>

#include "api.h"
#include "apierr.h"
#include "journal.h"
#include "metrics.h"

struct evd_api_s {
  evd_config_t cfg;
  evd_table_t *table;
  evd_journal_t *journal; /* NULL without --state-dir */
  uint32_t now_tick;      /* the loop's clock in 100 ms ticks */
  /* Scratch arrays reused by every request: positions, their slots, the
   * victims, the dropped or removed positions, and the pages of a request.
   * Grown on demand, never shrunk. */
  uint32_t *pos, *slots, *victims, *gone, *pages;
  size_t pos_cap, slots_cap, victims_cap, gone_cap, pages_cap;
  struct evd__step_s *items; /* a batch read by the fast path */
  size_t items_cap;
  char msg[256]; /* an error message with figures in it */
  int ints_as_reals; /* this body was read with integers as reals */
  evd_metrics_t metrics;
};

/* What a route's handler gets (api.c): the request, the reply's headers,
 * the session id of the /session/{id} routes and the buffer the body is
 * written to. A handler returns the status. */
typedef struct evd__ctx_s {
  evd_api_t *api;
  const evd_request_t *req;
  evd_reply_t *reply;
  const char *id; /* for the /session/{id} routes */
  size_t idlen;
  evd_buf_t *out;
} evd__ctx_t;

/* Writes the error object of e as the whole body and returns its status
 * (api.c). */
int evd__fail(evd__ctx_t *c, evd_apierr_t e, const char *message);

/* api_adopt.c: the handler of POST /session/{id}/adopt. */
int evd__h_adopt(evd__ctx_t *c);

/* Puts session `id` in state st (which evd_window_check must accept) with
 * configuration cfg: replaces s, the existing session, or creates the
 * session when s is NULL, without its replay record either way; stores it
 * in *out. The adopt handler and journal recovery (apply.c) share it.
 * Returns 0, EVD_EINVAL for a state or configuration the window refuses,
 * EVD_ELIMIT at --max-sessions, or EVD_ENOMEM; nothing changes on
 * failure. */
int evd__adopt_apply(evd_api_t *api, evd_session_t *s, const char *id,
                     size_t idlen, const evd_session_config_t *cfg,
                     const evd_window_state_t *st, evd_session_t **out);

/* api_step.c: the handlers of POST /session/{id}/step, /commit,
 * /truncate and of the batch POST /step. */
int evd__h_step(evd__ctx_t *c);
int evd__h_batch(evd__ctx_t *c);
int evd__h_commit(evd__ctx_t *c);
int evd__h_truncate(evd__ctx_t *c);

/* A validated step, commit or truncate request (one batch item, or one
 * /session/{id}/... request); a step's positions are api->pos[first..first
 * + n). `arg` is the commit's newest (with has_arg in a step), or the
 * truncate's from. `cfg` is the configuration a step creates its session
 * with, defaults filled in. `expect` (with has_expect) is the newest the
 * engine believes the session has before the request (expect_newest). */
typedef struct evd__step_s {
  const char *id;
  size_t idlen;
  uint32_t first, n;
  uint8_t op;       /* EVD_RP_STEP, EVD_RP_COMMIT or EVD_RP_TRUNCATE */
  uint8_t tentative, has_arg;
  uint8_t given;    /* EVD__GIVEN_*: the configuration fields the request
                       named, which an existing session must match */
  uint32_t arg;
  evd_session_config_t cfg;
  uint8_t has_expect;
  uint32_t expect;
} evd__step_t;

#define EVD__GIVEN_BUDGET 1u
#define EVD__GIVEN_SINKS 2u
#define EVD__GIVEN_LOOKAHEAD 4u
#define EVD__GIVEN_PAGE_SIZE 8u

/* request.c: bodies and error objects. */

/* Grows a uint32 array to hold n. Returns 0 or EVD_ENOMEM. */
int evd__grow(uint32_t **p, size_t *cap, size_t n);

/* Parses the body into a JSON object (*root; NULL for an empty body when
 * `optional`) whose keys are all among `fields` (NULL-terminated; NULL:
 * any). Returns EVD_AE_OK or the error, with *message set when it is not
 * the default one; on an error nothing is left to free. */
evd_apierr_t evd__parse_body(evd_api_t *api, const evd_request_t *req,
                             int optional, const char *const *fields,
                             json_t **root, const char **message);

/* 1 when every key of obj is one of the NULL-terminated names; else 0
 * with a message naming the first other key in api->msg. */
int evd__only_fields(evd_api_t *api, json_t *obj, const char *const *names);

/* 1 when v is a JSON integer (or, in a body that held an integer beyond 64
 * bits and so was read with integers as reals, a whole real). */
int evd__is_int(const evd_api_t *api, json_t *v);

/* 1 when v is such an integer within [min, max] (stored in *out). */
int evd__int_in(const evd_api_t *api, json_t *v, json_int_t min,
                json_int_t max, json_int_t *out);

/* Reads the optional "budget", "sinks", "lookahead" and "page_size" of obj
 * (NULL: none) into *cfg, the flags' defaults filling in the others: sinks
 * must stay below budget. Returns EVD_AE_OK or the error with *message as
 * evd__parse_body. */
evd_apierr_t evd__session_config(evd_api_t *api, json_t *obj,
                                 evd_session_config_t *cfg,
                                 const char **message);

/* 1 when v is a JSON integer within [min, max] stored in *out. */
int evd__u32_field(evd_api_t *api, json_t *v, uint32_t min, uint32_t max,
                   uint32_t *out);

/* Writes an error object: the whole body of a single request, or a batch
 * result carrying its status too; `newest` goes in for stale errors.
 * Returns the status. */
int evd__write_error(evd_buf_t *out, evd_apierr_t e, const char *message,
                     int in_batch, const uint32_t *newest);

/* Reads the optional "expect_newest" of obj (NULL: none) into *has and
 * *expect. Returns EVD_AE_OK (absent too), or invalid_position with
 * *message. */
evd_apierr_t evd__expect_field(evd_api_t *api, json_t *obj, uint8_t *has,
                               uint32_t *expect, const char **message);


/* Validates a step object (a batch item when in_batch, whose id comes from
 * its "session" field; else the id is already in r) into *r and api->pos.
 * Returns EVD_AE_OK, or the error with *message (NULL: the default one). */
evd_apierr_t evd__step_parse(evd_api_t *api, json_t *obj, int in_batch,
                             evd__step_t *r, const char **message);

/* step.c: the step, commit and truncate operations. */

/* Applies a validated step, commit or truncate request, journals it, and
 * writes its result or error object. Returns the HTTP status of that
 * result. */
int evd__step_run(evd_api_t *api, const evd__step_t *r, int in_batch,
                  evd_buf_t *out);

/* Applies a journaled step, commit or truncate r (positions pos) to s as
 * its request did, without answering: journal recovery (apply.c). Returns
 * 0, EVD_ECORRUPT when it does not apply to the session's state, or
 * EVD_ENOMEM. */
int evd__step_replay(evd_api_t *api, evd_session_t *s, const evd__step_t *r,
                     const uint32_t *pos, int created);

/* The most bytes the result object of r on session s (NULL: r creates
 * it) can take in an answer, and in *journal the most its journal record
 * can: what must be free before it is applied. */
size_t evd__result_bound(evd_api_t *api, const evd_session_t *s,
                         const evd__step_t *r, size_t *journal);

/* Makes room for an answer of `answer` bytes and `journal` bytes of journal
 * records before anything changes, so that a request refused for want of
 * memory changed nothing and a change is never left unanswered or
 * unrecorded. Returns 0, or EVD_ENOMEM. */
int evd__room(evd_api_t *api, evd_buf_t *out, size_t answer,
              size_t journal);

/* Grows the scratch arrays for a request that may evict nvictims, drop or
 * remove ngone and append nadded positions, with pages of page_size (0:
 * none). Returns 0 or EVD_ENOMEM. */
int evd__reserve(evd_api_t *api, size_t nvictims, size_t ngone,
                 size_t nadded, uint32_t page_size);

/* Adds an op to the request's journal record, if there is a journal. */
void evd__journal(evd_api_t *api, const evd_op_t *op);

/* Journals a session's creation (in the version 1 form when its
 * configuration allows). */
void evd__journal_create(evd_api_t *api, const evd_session_t *s);

/* view.c: the session view. */

/* The most bytes a session's view can take. */
size_t evd__view_bound(const evd_session_t *s);

/* Writes a session's view (GET, PUT, fork); sets out->oom when the pages'
 * scratch array cannot grow. */
void evd__write_view(evd_api_t *api, evd_buf_t *out, const evd_session_t *s);

/* Grows the scratch array a view of s needs (its pages), so that writing
 * it later cannot fail. Returns 0 or EVD_ENOMEM. */
int evd__view_room(evd_api_t *api, const evd_session_t *s);

/* Writes the error object of a change refused because session s's newest
 * is not `expect`: 409 diverged with the session's newest and its view (a
 * batch result carries its status too). Counts it. Returns 409. */
int evd__write_diverged(evd_api_t *api, evd_buf_t *out,
                        const evd_session_t *s, uint32_t expect,
                        int in_batch);

/* fastpath.c: the hot bodies without jansson. Each returns 1 when the
 * body is a valid step (batch) and fills *r (api->items[0..*nitems)) and
 * the scratch arrays; 0 when the general path must read it instead. The
 * step keeps r->id and r->idlen from the path (the rest of *r need not be
 * set on the call) and, returning 0, leaves *r zeroed but for them. */
int evd__fast_step(evd_api_t *api, const char *body, size_t len,
                   evd__step_t *r);
int evd__fast_batch(evd_api_t *api, const char *body, size_t len,
                    size_t *nitems);

#endif
