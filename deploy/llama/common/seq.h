/* A sequence as every command of evictd-llama keeps one: a llama.cpp
 * sequence id, the evictd session that decides what its cache holds, the
 * map of the positions that cache holds (posmap.h), and the count of
 * positions evictd holds, against which every answer is checked. Opening
 * (create, else the session must be fresh), forking, following an answer
 * through the map and closing are here, once. */
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

/* Creates the session with cfg (the settings evictd chose in *v). A
 * session this program did not create now is used only if it is fresh:
 * holding position 0 alone. Then it holds one position (0, the BOS, which
 * the first pass computes without a step). 0, or -1 with f set. */
int seq_open(link_t *l, seq_t *s, const evd_session_cfg_t *cfg,
             evd_view_t *v, fault_t *f);

/* Forks `from`, whose newest position is `newest`, into `to`: evictd's
 * fork, then llama_memory_seq_cp of lm's cells and a copy of the map. A
 * child that existed already is ours only in the parent's exact state
 * (the answer to a resent fork whose first answer was lost). 0, or -1
 * with f set. */
int seq_fork(link_t *l, const seq_t *from, seq_t *to, lm_t *lm,
             uint32_t newest, fault_t *f);

/* Adds absolute position p of s, token tok, to lm's batch at the position
 * the map gives it (p, or in cache mode the count held). 0, or -1 with f
 * set (p not above the held ones, or out of memory). */
int seq_put(seq_t *s, lm_t *lm, llama_token tok, uint32_t p, bool output,
            fault_t *f);

/* Follows an answer: checks that evictd holds what the engine counts (the
 * positions held, plus `added` sent with the request, less what the answer
 * says is gone), then removes dropped, victims and removed from lm's cache
 * through the map. A session the daemon lost (a restart without
 * --state-dir, a reap) and recreated by autocreate shows up here, as
 * another size, before the cache follows it anywhere: "session_lost".
 * 0, or -1 with f set. */
int seq_follow(seq_t *s, lm_t *lm, const evd_answer_t *a, size_t added,
               const seq_trace_t *t, fault_t *f);

/* Removes absolute positions v[0..n) from lm's cache of s through map (s's
 * own, or another cache's map of the same sequence). 0, or -1 with f set. */
int seq_remove(const seq_t *s, posmap_t *map, lm_t *lm, const char *why,
               const uint32_t *v, size_t n, const seq_trace_t *t,
               fault_t *f);

/* Deletes s's session if this program created it (link_delete: quick
 * after a failure). 0, or -1 with f set (f may be NULL). */
int seq_close(link_t *l, seq_t *s, bool quick, fault_t *f);

#endif
