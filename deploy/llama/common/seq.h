/* A sequence as every command of evictd-llama keeps one: a llama.cpp
 * sequence id, the evictd session that decides what its cache holds, the
 * map of the positions that cache holds (posmap.h), the count of
 * positions evictd holds, against which every answer is checked, and the
 * session's newest position and configuration, which every change
 * carries as its precondition and a re-homing adopts. Opening (create,
 * else the session must be fresh), forking, sending changes (re-homing
 * the session when its daemon lost it or holds another window: change.c),
 * following an answer through the map and closing are here, once. */
#ifndef EVICTD_LLAMA_SEQ_H
#define EVICTD_LLAMA_SEQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/link.h"
#include "common/lm.h"
#include "evictd/client.h"
#include "common/posmap.h"

/* evictd's longest session id. */
#define SEQ_ID_MAX 128

typedef struct seq_s {
  int32_t id;                   /* llama.cpp sequence id */
  char session[SEQ_ID_MAX + 1]; /* evictd session id */
  posmap_t map;                 /* the positions lm's cache holds */
  uint32_t held;                /* positions evictd holds */
  uint32_t newest;              /* the session's newest position (held or
                                   truncated to), drafts included */
  uint32_t committed;           /* the newest but the pending drafts */
  evd_session_cfg_t cfg;        /* its budget, sinks, lookahead, page size */
  bool created;                 /* made by this program: deleted at the end */
} seq_t;

/* Told of every removal before it is made (generate's --dump): the cache,
 * the sequence, why ("victims", "dropped", "removed", ...) and the
 * absolute positions. */
typedef struct seq_trace_s {
  void (*remove)(void *ud, const lm_t *lm, const seq_t *s, const char *why,
                 const uint32_t *v, size_t n);
  void *ud;
} seq_trace_t;

/* An empty sequence with id and session. 0, or -1 when out of memory;
 * seq_free releases it (also a zeroed one). */
int seq_init(seq_t *s, int32_t id, const char *session, pos_mode_t mode);
void seq_free(seq_t *s);

/* The session as a new one starts: holding position 0 (the BOS, which
 * the first pass computes without a step), newest 0, with configuration
 * cfg (the values the daemon uses: a re-homing adopts the session with
 * them). For a session made by its first step (serve). */
void seq_start(seq_t *s, const evd_session_cfg_t *cfg);

/* Creates the session with cfg (the settings evictd chose in *v). A
 * session this program did not create now is used only if it is fresh:
 * holding position 0 alone. Then it starts (seq_start). 0, or -1 with f
 * set. */
int seq_open(link_t *l, seq_t *s, const evd_session_cfg_t *cfg,
             evd_view_t *v, fault_t *f);

/* Forks `from`, whose newest position is `newest`, into `to`: evictd's
 * fork (expecting the parent's newest; a parent the daemon lost or holds
 * otherwise is re-homed and the fork sent again), then
 * llama_memory_seq_cp of lm's cells and a copy of the map and the
 * session's state. A child that existed already is ours only in the
 * parent's exact state (the answer to a resent fork whose first answer
 * was lost). 0, or -1 with f set. */
int seq_fork(link_t *l, seq_t *from, seq_t *to, lm_t *lm, uint32_t newest,
             fault_t *f);

/* ---- changes (common/change.c) ----------------------------------------- */

/* Sends r, one change of s (LINK_STEP of r->steps[0], s's step;
 * LINK_COMMIT or LINK_TRUNCATE of s's session), with s's newest as its
 * expect_newest, and records the newest it leaves. When the daemon
 * answers unknown_session (it lost the session: restarted without its
 * state, or a pool that changed size sends the session to an instance
 * that never saw it), diverged (it holds another window: an older copy of
 * its state, or the instance the session left before the pool changed
 * back), or, without the precondition, a size that gives away a fresh
 * window made by autocreate, s is re-homed: adopted in the state its
 * cache holds (the positions of the map up to the committed newest, the
 * newest, the configuration; replacing what the daemon holds after a
 * divergence or a fresh window), its pending drafts stepped again as
 * tentative positions, and r sent again: the answer is the one the lost
 * session would have given. A session that never moved past its start
 * and met unknown_session (a daemon run with --no-autocreate, where a
 * step creates nothing) is created with PUT instead. 0, or non-zero (the
 * client's failure, or "session_lost" with status 502 when re-homing is
 * impossible: the daemon refused the adoption, or lost the session again
 * three times in a row) with f set; non-zero is the client's EVD_CLIENT_*
 * code, or LINK_EFAULT for session_lost. With re-homing off
 * (EVICTD_LLAMA_REHOME=off) neither the precondition is sent nor is
 * anything re-homed. */
int seq_change(link_t *l, seq_t *s, const link_req_t *r, fault_t *f);

/* The steps steps[0..n) of the sequences sq[0..n) (one each) as one
 * batch (POST /step), each carrying its sequence's newest; each item that
 * comes back as seq_change re-homes is re-homed and sent again on its own
 * within the call, the others' answers kept meanwhile (link_keep). When
 * the daemon's URL refuses POST /step with 421 misdirected_request (nginx
 * in front of a pool: a batch names sessions of several instances), the
 * link steps one session per request from then on (l->per_session), told
 * once on stderr. res[i] is item i's outcome (link_item turns a failure
 * into a sentence). 0 when every item has an outcome; the client's code
 * with f set when the request as a whole failed. */
int seq_batch(link_t *l, seq_t *const *sq, evd_step_t *steps, size_t n,
              evd_batch_result_t *res, fault_t *f);

/* seq_batch in two halves, for serve's engine, which sends the next
 * iteration's steps before this iteration's llama_decode and reads their
 * answers after it (link_batch_send/recv): send records each step's
 * precondition and writes the batch (nothing when the link steps one
 * session per request: recv then does it); recv is seq_batch from the
 * answers on. Between the two, nothing else may use the link, and what the
 * engine holds (the map, held) must be what it will be when the answers
 * are followed: recv re-homes from it. send keeps the answers link_keep
 * made (seq_batch frees them first). */
void seq_batch_send(link_t *l, seq_t *const *sq, evd_step_t *steps,
                    size_t n);
int seq_batch_recv(link_t *l, seq_t *const *sq, evd_step_t *steps, size_t n,
                   evd_batch_result_t *res, fault_t *f);

/* ---- the parts of a batch, for an engine that sends its steps through
 * lanes (common/lanes.h) and judges their outcomes itself -------------- */

/* An outcome that asks for nothing more (else seq_verdict's cause). */
#define SEQ_GO_ON LINK_CAUSES

/* What the outcome of a change of s asks for: SEQ_GO_ON, or the cause
 * (link_cause_t) for which s must be re-homed (as seq_change does). rc is
 * the request's, code the daemon's error code when rc is EVD_CLIENT_EAPI,
 * a the answer when rc is 0 (NULL: none to check), added the positions
 * the request added. Reads s, changes nothing. */
int seq_verdict(const link_t *l, const seq_t *s, int rc, const char *code,
                const evd_answer_t *a, size_t added);

/* Records the newest that step st of s left, by its answer a. */
void seq_stepped(seq_t *s, const evd_step_t *st, const evd_answer_t *a);

/* Step st of s as a change of its own: sent (cause SEQ_GO_ON, judged as
 * seq_change judges it) or s re-homed for `cause` and st sent again; the
 * answer or the item's own failure into res (kept: link_keep). 0, or the
 * client's code of a failure that is not the item's alone (the daemon
 * cannot be reached), f set. */
int seq_item(link_t *l, seq_t *s, const evd_step_t *st,
             evd_batch_result_t *res, int cause, fault_t *f);

/* evictd's fork of from into session `into` (its view in *v), expecting
 * from's newest, from re-homed as seq_change does when its daemon lost it
 * or holds another window (seq_fork's first half). 0, or non-zero with f
 * set. */
int seq_fork_session(link_t *l, seq_t *from, const char *into,
                     evd_view_t *v, fault_t *f);

/* Adds absolute position p of s, token tok, to lm's batch at the position
 * the map gives it (p, or in cache mode the count held). 0, or -1 with f
 * set (p not above the held ones, or out of memory). */
int seq_put(seq_t *s, lm_t *lm, llama_token tok, uint32_t p, bool output,
            fault_t *f);

/* Follows an answer: checks that evictd holds what the engine counts (the
 * positions held, plus `added` sent with the request, less what the answer
 * says is gone), then removes dropped, victims and removed from lm's cache
 * through the map. seq_change and seq_batch re-home a session whose
 * answer's size is off before it comes here; with re-homing off, a
 * session the daemon lost (a restart without --state-dir, a reap) and
 * recreated by autocreate shows up here, as another size, before the
 * cache follows it anywhere: "session_lost". 0, or -1 with f set. */
int seq_follow(seq_t *s, lm_t *lm, const evd_answer_t *a, size_t added,
               const seq_trace_t *t, fault_t *f);

/* Removes absolute positions v[0..n) from lm's cache of s through map (s's
 * own, or another cache's map of the same sequence). 0, or -1 with f set. */
int seq_remove(const seq_t *s, posmap_t *map, lm_t *lm, const char *why,
               const uint32_t *v, size_t n, const seq_trace_t *t,
               fault_t *f);

/* Whether lm's cache can give its sequences positions as mode says: cache
 * positions move keys (llama_memory_seq_add, then llama.cpp re-rotates
 * them), which only a cache of full attention that llama.cpp can shift
 * takes (a windowed layer would measure its window on moved positions,
 * llama.cpp aborts shifting a model whose every attention layer is
 * windowed, and a recurrent state has no keys). 0, or -1 with a sentence
 * in err. */
int seq_positions_ok(const lm_t *lm, pos_mode_t mode, char *err,
                     size_t errlen);

/* Deletes s's session if this program created it (link_delete: quick
 * after a failure). 0, or -1 with f set (f may be NULL). */
int seq_close(link_t *l, seq_t *s, bool quick, fault_t *f);

#endif
