/* Sequences: opening, forking, following evictd's answers through the
 * position map into llama.cpp's cache, closing. */
#include "common/seq.h"

#include <stdio.h>
#include <string.h>

int seq_init(seq_t *s, int32_t id, const char *session, pos_mode_t mode) {
  memset(s, 0, sizeof(*s));
  s->id = id;
  snprintf(s->session, sizeof(s->session), "%s", session);
  return posmap_init(&s->map, mode, 64);
}

void seq_free(seq_t *s) { posmap_free(&s->map); }

void seq_start(seq_t *s, const evd_session_cfg_t *cfg) {
  s->held = 1;
  s->newest = s->committed = 0;
  s->cfg = *cfg;
}

int seq_open(link_t *l, seq_t *s, const evd_session_cfg_t *cfg,
             evd_view_t *v, fault_t *f) {
  if (link_create(l, s->session, cfg, v, f) != 0)
    return -1;
  s->created = v->created;
  if (!v->created && (v->size != 1 || v->newest != 0))
    return fault_set(f, 409, "session_exists", "session %s exists and has "
                     "moved past position 0; delete it or pick another "
                     "session id", s->session);
  seq_start(s, &(evd_session_cfg_t){v->budget, v->sinks, v->lookahead,
                                    v->page_size});
  return 0;
}

int seq_fork(link_t *l, seq_t *from, seq_t *to, lm_t *lm, uint32_t newest,
             fault_t *f) {
  evd_view_t v;
  if (seq_fork_session(l, from, to->session, &v, f) != 0)
    return -1;
  if (!v.created && (v.size != from->held || v.newest != newest))
    return fault_set(f, 409, "session_exists", "session %s exists already; "
                     "delete it or pick another session id", to->session);
  to->created = true;
  to->held = from->held;
  to->newest = from->newest;
  to->committed = from->committed;
  to->cfg = from->cfg;
  llama_memory_seq_cp(lm->mem, from->id, to->id, -1, -1);
  if (posmap_copy(&to->map, &from->map) != 0)
    return fault_set(f, 500, "out_of_memory", "out of memory");
  return 0;
}

int seq_put(seq_t *s, lm_t *lm, llama_token tok, uint32_t p, bool output,
            fault_t *f) {
  int32_t at = posmap_add(&s->map, p);
  if (at < 0)
    return fault_set(f, 500, "bad_position", "position %u of sequence %d "
                     "is not above what the %s model's cache holds, or out "
                     "of memory", p, s->id, lm->label);
  lm_add(lm, tok, at, s->id, output);
  return 0;
}

/* posmap_remove_with bound to llama.cpp's memory: the attention layers'
 * cells (a recurrent state keeps what it read, mem.h). */
static int rm(void *ud, int32_t seq, int32_t p0, int32_t p1) {
  lm_t *lm = ud;
  /* Attention alone: llama.cpp's own call, as it always was. */
  if (lm->kind != LM_MEM_HYBRID && lm->kind != LM_MEM_RECURRENT)
    return llama_memory_seq_rm(lm->mem, seq, p0, p1) ? 0 : -1;
  return lm_mem_rm(lm->mem, seq, p0, p1) ? 0 : -1;
}

static void shift(void *ud, int32_t seq, int32_t p0, int32_t p1,
                  int32_t delta) {
  lm_t *lm = ud;
  llama_memory_seq_add(lm->mem, seq, p0, p1, delta);
}

int seq_remove(const seq_t *s, posmap_t *map, lm_t *lm, const char *why,
               const uint32_t *v, size_t n, const seq_trace_t *t,
               fault_t *f) {
  static const posmap_ops_t ops = {rm, shift};
  if (n == 0)
    return 0;
  if (t != NULL)
    t->remove(t->ud, lm, s, why, v, n);
  /* In cache mode the cells above each gap move down with
   * llama_memory_seq_add, and llama.cpp re-rotates their keys (K-shift)
   * as its next llama_decode begins. */
  if (posmap_remove_with(map, &ops, lm, s->id, v, n) != 0)
    return fault_set(f, 500, "remove_failed", "llama.cpp refused to remove "
                     "positions of sequence %d (session %s) from the %s "
                     "model's cache (or it does not hold them)", s->id,
                     s->session, lm->label);
  return 0;
}

int seq_follow(seq_t *s, lm_t *lm, const evd_answer_t *a, size_t added,
               const seq_trace_t *t, fault_t *f) {
  uint64_t held = (uint64_t)s->held + added;
  size_t gone = a->dropped.n + a->victims.n + a->removed.n;
  if (gone > held || held - gone != a->size)
    return fault_set(f, 502, "session_lost", "evictd says session %s holds "
                     "%u positions, the engine counts %llu: the daemon lost "
                     "the session (restarted without --state-dir, or reaped "
                     "by --idle-ttl?), so its answers no longer describe "
                     "this cache", s->session, a->size,
                     (unsigned long long)(held - (gone > held ? 0 : gone)));
  s->held = a->size;
  if (seq_remove(s, &s->map, lm, "dropped", a->dropped.v, a->dropped.n, t,
                 f) != 0 ||
      seq_remove(s, &s->map, lm, "victims", a->victims.v, a->victims.n, t,
                 f) != 0 ||
      seq_remove(s, &s->map, lm, "removed", a->removed.v, a->removed.n, t,
                 f) != 0)
    return -1;
  return 0;
}

int seq_positions_ok(const lm_t *lm, pos_mode_t mode, char *err,
                     size_t errlen) {
  if (mode != POS_CACHE ||
      (lm->kind == LM_MEM_FULL && llama_memory_can_shift(lm->mem)))
    return 0;
  snprintf(err, errlen, "--positions cache moves keys down the cache, and "
           "the %s model's cache cannot have them moved (%s): use "
           "--positions original", lm->label, lm->kind == LM_MEM_FULL
           ? "llama_memory_can_shift says so" : lm->kind == LM_MEM_WINDOWED
           ? "sliding-window or chunked attention layers" : "recurrent "
           "layers, or a cache of its own");
  return -1;
}

int seq_close(link_t *l, seq_t *s, bool quick, fault_t *f) {
  if (!s->created)
    return 0;
  /* missing_ok: a resent delete whose first answer was lost meets 404. */
  if (link_delete(l, s->session, quick, f) != 0)
    return -1;
  s->created = false;
  return 0;
}
