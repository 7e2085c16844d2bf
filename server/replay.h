/* Replay records: each session's last applied step, commit or truncate
 * request and its answer, so that a resend is answered again exactly.
 *
 * A request whose answer is made of runs (consecutive positions, victims,
 * dropped or removed positions and pages, and the slots the ring hands out
 * one after the other: every decode step and prefill chunk) is kept in a
 * fixed area of the session's own block, so that a session's memory does
 * not grow with its requests. Any other answer is kept on the heap, in a
 * pool shared by all sessions whose size is bounded (--replay-pool): when
 * it is full the oldest records are let go, keeping only a hash of their
 * request, so that a resend of it is told apart and answered 409
 * replay_unavailable rather than taken for a new request. */
#ifndef EVICTD_REPLAY_H
#define EVICTD_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "session.h"

/* A list of uint32 in a replay record: the values v[0..n), or, when v is
 * NULL, a run from `first`: first, first + 1, ... (`ring`: slots, stepping
 * as the window hands them out, see evd_replay_at). */
typedef struct evd_u32s_s {
  const uint32_t *v;
  uint32_t n, first;
  uint8_t ring;
} evd_u32s_t;

/* A request and its answer. From evd_replay_get the arrays are borrowed
 * from the session until its next step, commit or truncate or its removal;
 * to evd_replay_set they are borrowed for the call. `gone` is the dropped
 * (step with commit, commit) or removed (truncate) positions. */
typedef struct evd_replay_s {
  uint8_t op, flags; /* EVD_RP_*, EVD_RP_TENTATIVE | EVD_RP_COMMIT_ARG */
  uint8_t ends;      /* EVD_RP_FIRST_TRANSIENT | EVD_RP_LAST_TRANSIENT */
  uint32_t arg, size, newest;
  evd_u32s_t positions, victims, gone, slots, pages_new, pages_freed;
  uint32_t sinks, last; /* the window's, for runs of slots */
} evd_replay_t;

/* Which pages of a record are transient (held within the request only),
 * without storing them: they are the pages of its victims that are neither
 * new nor freed, except that the page of the first victim and that of the
 * last may still hold a position (a sink, a newer position) and are
 * transient only when their bit says so; every page between them held only
 * positions the request evicted. One bit each keeps a resend's answer
 * exact even after an eviction changed the window. */
#define EVD_RP_FIRST_TRANSIENT 1u
#define EVD_RP_LAST_TRANSIENT 2u

/* The i-th value of a list of rp. */
uint32_t evd_replay_at(const evd_replay_t *rp, const evd_u32s_t *l,
                       uint32_t i);

/* An array list (n values at v). */
static inline evd_u32s_t evd_u32s(const uint32_t *v, uint32_t n) {
  evd_u32s_t l = {v, n, 0, 0};
  return l;
}

/* The hash of a request (its op, flags, arg and positions), by which a
 * resend of a request whose record was let go is recognized, after a
 * restart too. */
uint64_t evd_replay_hash(const evd_replay_t *rp);

/* Records rp as the session's last request. Runs are kept in the session's
 * own area; anything else goes to the table's pool, letting the oldest
 * records go while the pool is over its limit. Without memory for the
 * record, or when it alone is over the limit, only its hash is kept.
 * Never fails. */
void evd_replay_set(evd_table_t *t, evd_session_t *s, const evd_replay_t *rp);

/* The decode step's record (one committed position, now the newest, its
 * slot, at most one victim, no pages), without the general checks. */
void evd_replay_step(evd_table_t *t, evd_session_t *s, uint32_t slot,
                     int has_victim, uint32_t victim, uint32_t size);

/* Fills *out with the session's record. Returns 1, or 0 when it has none
 * (or it was let go). */
int evd_replay_get(const evd_session_t *s, evd_replay_t *out);

/* 1 when the session's record was let go, with its request's hash in
 * *hash; else 0. */
int evd_replay_gone(const evd_session_t *s, uint64_t *hash);

/* Restores a record that was let go, from its hash (snapshot loading). */
void evd_replay_set_gone(evd_table_t *t, evd_session_t *s, uint64_t hash);

/* Forgets the session's record (freeing its pooled part). The table frees
 * a session's record itself (through the pool, rpool.h) with its block. */
void evd_replay_clear(evd_table_t *t, evd_session_t *s);

/* The 32-bit words of a session's area and the words of a record kept in
 * it, for the snapshot: `words` is 0 when the record is not kept there. */
const uint32_t *evd_replay_area(const evd_session_t *s, unsigned *words);

/* Copies a saved area back (snapshot loading). Returns 0, or EVD_ECORRUPT
 * when the words are not a record kept in an area. */
int evd_replay_load_area(evd_session_t *s, const uint32_t *w, unsigned words);

#endif
