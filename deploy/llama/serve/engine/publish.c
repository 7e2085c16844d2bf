/* What serve's engine shows of itself (engine_int.h): the evictd
 * instances', the slots' and the conversations' states copied to the
 * board (stats.h) for /metrics, /health and /slots, and a task's end told
 * there before its client is answered. */
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "serve/engine/engine_int.h"

/* Publishes what each slot holds, for GET /slots (read-only: a copy
 * under the board's lock, as the lanes' states are). */
static void publish_slots(engine_t *e) {
  slot_state_t st[SERVE_SLOTS_MAX];
  uint32_t n = e->n_slot < SERVE_SLOTS_MAX ? e->n_slot : SERVE_SLOTS_MAX;
  for (uint32_t i = 0; i < n; i++) {
    const choice_t *c = &e->slot[i];
    const task_t *t = c->task;
    slot_state_t *o = &st[i];
    memset(o, 0, sizeof(*o));
    o->use = t != NULL ? SLOT_PROCESSING : c->parked ? SLOT_PARKED
           : c->orphan ? SLOT_LEAVING : SLOT_FREE;
    o->budget = e->budget;
    o->sinks = e->sinks;
    o->lookahead = e->lookahead;
    if (o->use == SLOT_FREE)
      continue;
    snprintf(o->session, sizeof(o->session), "%s", c->s.session);
    o->n = c->n;
    o->held = c->s.held;
    if (c->s.cfg.budget >= 0 && c->s.cfg.sinks >= 0 &&
        c->s.cfg.lookahead >= 0) {
      o->budget = (uint32_t)c->s.cfg.budget;
      o->sinks = (uint32_t)c->s.cfg.sinks;
      o->lookahead = (uint32_t)c->s.cfg.lookahead;
    }
    if (t == NULL)
      continue;
    /* The task's fields the engine reads are set before it was queued,
     * or by the engine itself (cached): no lock needed to read them. */
    snprintf(o->task, sizeof(o->task), "%s", t->id);
    o->choice = c->index;
    o->n_prompt = t->n_prompt;
    o->cached = c->index == 0 ? t->cached : 0;
    o->tokens = c->tokens;
    o->n_predict = t->want.n_predict;
  }
  board_slots(e->board, st, n, e->budget, e->sinks, e->lookahead);
}

void publish(engine_t *e, double now, bool force) {
  if (!force && now - e->last_lanes < 0.1)
    return;
  e->last_lanes = now;
  lane_state_t st[SERVE_LANES_MAX];
  size_t n = lanes_instances(e->lanes);
  if (n > SERVE_LANES_MAX)
    n = SERVE_LANES_MAX;
  for (size_t i = 0; i < n; i++) {
    lane_info_t li;
    lanes_info(e->lanes, (uint32_t)i, &li);
    snprintf(st[i].name, sizeof(st[i].name), "%s", li.name);
    st[i].up = li.up;
    st[i].late = li.late;
    st[i].waiting = 0;
  }
  /* Behind a proxy, the lanes past the instances' are the sequences'
   * own: one instance (the proxy) is up when all of them are. */
  for (uint32_t i = (uint32_t)n; n == 1 && lanes_per_session(e->lanes) &&
                                 i < e->n_slot; i++) {
    lane_info_t li;
    if (lanes_info(e->lanes, i, &li) && li.started && !li.up)
      st[0].up = false;
  }
  for (uint32_t i = 0; i < e->n_slot; i++) {
    const choice_t *c = &e->slot[i];
    uint32_t at = n == 1 ? 0 : c->lane;
    if (c->task != NULL && c->sent != NULL && at < n)
      st[at].waiting++;
  }
  conv_counts_t cc;
  conv_counts(e, &cc);
  board_lanes(e->board, st, n, &cc);
  publish_slots(e);
}

void publish_finish(engine_t *e, task_t *t, const fault_t *f) {
  t->t_end = clock_now();
  publish(e, t->t_end, true);
  /* The tokens this iteration drew so far, its own last among them: a
   * scrape right after the answer counts them. */
  if (e->tokens > 0) {
    board_tokens(e->board, e->tokens);
    e->tokens = 0;
  }
  tq_finish(e->q, t, f);
}
