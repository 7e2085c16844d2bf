/* serve's steps (engine_int.h): which positions each choice steps, sent
 * through its lane, this iteration's or ahead of the pass before its own;
 * the answers taken back and judged. */
#include <string.h>

#include "serve/engine/engine_int.h"

uint32_t steps_chunk(const engine_t *e, const choice_t *c, uint32_t n,
                     uint32_t *first) {
  uint32_t n_prompt = c->task->n_prompt;
  *first = n;
  if (n >= n_prompt)
    return 1;
  *first = n == 0 ? 1 : n;
  uint32_t end = *first + e->lookahead;
  if (end > n_prompt)
    end = n_prompt;
  /* The last CK_TAIL tokens go alone after a checkpoint (pass.c). */
  uint32_t cut = n_prompt > CK_TAIL ? n_prompt - CK_TAIL : 0;
  if (*first < cut && end > cut && conv_ckpt_wanted(e, c))
    end = cut;
  return end - *first;
}

/* How many generated positions choice c steps at once from `first`, the
 * session then holding `size`: a run of up to e->run while no victim can
 * fall (size plus the run within the budget: nothing is evicted, so the
 * answer is the one each position's own step would give), and no further
 * than c can decode (its length: position p is decoded only while
 * p < n_prompt + n_predict - 1). Else 1. The run's positions are decoded
 * one pass each; its answer, a single one, is followed at the first. */
static uint32_t run_len(const engine_t *e, const choice_t *c, uint32_t first,
                        uint32_t size) {
  const task_t *t = c->task;
  int64_t budget = c->s.cfg.budget;
  uint32_t k = e->run;
  uint64_t end = (uint64_t)t->n_prompt + t->want.n_predict - 1;
  if (k <= 1 || first < t->n_prompt || budget <= (int64_t)size ||
      end <= first)
    return 1;
  if ((int64_t)k > budget - size)
    k = (uint32_t)(budget - size);
  if (k > end - first)
    k = (uint32_t)(end - first);
  if (c->s.cfg.lookahead > 0 && k > c->s.cfg.lookahead)
    k = c->s.cfg.lookahead;
  return k > 0 ? k : 1;
}

bool steps_covers(const choice_t *c, uint32_t n) {
  const lane_item_t *it = c->ready;
  return it != NULL &&
         (it->kind == ITEM_STEP || it->kind == ITEM_SETTLE) &&
         it->step.n_positions > 0 &&
         n >= it->step.positions[0] &&
         n - it->step.positions[0] < it->step.n_positions;
}

/* Whether a step of cnt positions of c from first is one evictd takes
 * (checked before it goes into a batch, so that no item can fail the
 * batch, and with it every other sequence's step): some positions, all
 * above the session's newest. The engine makes no other, so a refusal
 * here is its own bug, told as such; c fails alone. */
static bool step_ok(choice_t *c, uint32_t first, uint32_t cnt,
                    uint32_t newest) {
  if (cnt > 0 && first > newest && first <= UINT32_MAX - cnt)
    return true;
  fault_set(&c->fault, 500, "internal_error", "the engine made a step of "
            "%u positions from %u for session %s, whose newest is %u",
            cnt, first, c->s.session, newest);
  c->failed = true;
  return false;
}

/* Makes c's free item a step of cnt positions from first, expecting the
 * session's newest to be `newest` (what the step before it leaves), into
 * e->sub[k]. 0, or -1 (c failed). */
static int put_step(engine_t *e, choice_t *c, size_t k, uint32_t first,
                    uint32_t cnt, uint32_t newest) {
  lane_item_t *it = c->ready == &c->item[0] ? &c->item[1] : &c->item[0];
  if (!step_ok(c, first, cnt, newest))
    return -1;
  if (lane_item_pos(it, cnt) != 0) {
    fault_set(&c->fault, 500, "out_of_memory", "out of memory");
    c->failed = true;
    return -1;
  }
  for (uint32_t j = 0; j < cnt; j++)
    it->pos[j] = first + j;
  const link_t *flags = lanes_flags(e->lanes);
  /* Behind a proxy found to refuse batches since, the choice moves to a
   * lane of its own (its steps so far are all answered). */
  if (lanes_instances(e->lanes) == 1)
    c->lane = lanes_route(e->lanes, c->s.session, (uint32_t)c->s.id);
  it->kind = ITEM_STEP;
  it->sq = &c->s;
  it->who = c;
  it->lane = c->lane;
  it->step = (evd_step_t){.session = c->s.session, .positions = it->pos,
                          .n_positions = cnt,
                          .create = c->index == 0 ? &e->cfg : NULL,
                          .has_expect = flags->expect,
                          .expect_newest = newest};
  c->sent = it;
  e->sub[k] = it;
  return 0;
}

size_t steps_now(engine_t *e) {
  size_t k = 0;
  for (uint32_t i = 0; i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (c->task == NULL || c->failed || c->sent != NULL ||
        c->ready != NULL || (c->index > 0 && !c->forked))
      continue;
    uint32_t first, cnt = steps_chunk(e, c, c->n, &first);
    if (cnt == 0) /* the BOS alone: computed without a step */
      continue;
    if (first >= c->task->n_prompt)
      cnt = run_len(e, c, first, c->s.held);
    if (put_step(e, c, k, first, cnt, c->s.newest) == 0)
      k++;
  }
  if (k > 0)
    lanes_submit(e->lanes, e->sub, k);
  e->steps += k;
  return k;
}

size_t steps_ahead(engine_t *e) {
  size_t k = 0;
  if (!e->pipeline)
    return 0;
  for (uint32_t i = 0; i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (!c->decodes || c->failed || c->chunk == 0 || c->sent != NULL)
      continue;
    const task_t *t = c->task;
    uint32_t n = c->n < t->n_prompt ? (c->n == 0 ? 1 : c->n) + c->chunk
                                    : c->n + 1;
    bool draws = n >= t->n_prompt;
    if (draws && (c->tokens + 1 >= t->want.n_predict ||
                  (c->index == 0 && t->want.n > 1 && c->tokens == 0)))
      continue;
    /* A run answered already steps the next position too. */
    if (draws && steps_covers(c, n))
      continue;
    uint32_t first, cnt = steps_chunk(e, c, n, &first);
    if (draws)
      cnt = run_len(e, c, first, c->ready->answer.size);
    /* The session's newest once this iteration's step is followed. */
    if (put_step(e, c, k, first, cnt, c->ready->answer.newest) == 0)
      k++;
  }
  if (k > 0)
    lanes_submit(e->lanes, e->sub, k);
  e->steps += k;
  e->ahead += k;
  return k;
}

/* Follows a truncation's answer: the positions it removed that the cache
 * holds leave it (a parked conversation's session may hold one position
 * the cache never computed: the step sent ahead of a pass that did not
 * come). 0, or -1 with c failed. */
static int truncated(engine_t *e, choice_t *c, const evd_answer_t *a) {
  const evd_list_t *r = &a->removed;
  size_t k = 0;
  while (k < r->n && posmap_find(&c->s.map, r->v[k]) >= 0)
    k++;
  dump_truncate(e->dump, c->s.id, c->n);
  if (seq_remove(&c->s, &c->s.map, e->lm, "removed", r->v, k, e->tr,
                 &c->fault) != 0) {
    c->failed = true;
    return -1;
  }
  /* The rest the session held and the cells never did. */
  dump_remove(e->dump, e->lm->label, c->s.id, "uncomputed", r->v + k,
              r->n - k);
  c->s.held = a->size;
  return 0;
}

/* Judges one answered step of c: ready, sent again to re-home c's
 * session, or failed. Returns the item to send again, or NULL. */
static lane_item_t *judge(engine_t *e, choice_t *c, lane_item_t *it) {
  c->sent = NULL;
  if (it->kind == ITEM_TRUNCATE) {
    /* Going back to where the conversation's tokens and the prompt's
     * part: no step is answered, the prompt's first goes next. */
    if (it->rc != 0) {
      c->fault = it->fault;
      c->failed = true;
    } else {
      truncated(e, c, &it->answer);
    }
    return NULL;
  }
  if (it->kind == ITEM_STEP) {
    int cause = seq_verdict(lanes_flags(e->lanes), &c->s, it->rc, it->code,
                            &it->answer, it->step.n_positions);
    if (cause != SEQ_GO_ON) {
      it->kind = ITEM_SETTLE;
      it->cause = cause;
      c->sent = it;
      return it;
    }
    if (it->rc == 0)
      seq_stepped(&c->s, &it->step, &it->answer);
  }
  /* A run is followed at its first position: it must remove nothing
   * (run_len kept it within the budget), or its victims would leave the
   * cells before the positions that evict them are decoded. */
  if (it->rc == 0 && it->step.n_positions > 1 && c->task != NULL &&
      it->step.positions[0] >= c->task->n_prompt &&
      it->answer.victims.n + it->answer.dropped.n + it->answer.removed.n >
          0) {
    fault_set(&c->fault, 500, "internal_error", "evictd evicted positions "
              "from session %s for a run of %zu generated positions the "
              "engine stepped within its budget of %lld", c->s.session,
              it->step.n_positions, (long long)c->s.cfg.budget);
    c->failed = true;
    return NULL;
  }
  /* A settled item's outcome is final: seq_item recorded its newest. */
  if (it->rc != 0) {
    c->fault = it->fault;
    c->failed = true;
    return NULL;
  }
  c->ready = it;
  return NULL;
}

void steps_collect(engine_t *e,
                   void (*orphan)(engine_t *, choice_t *, lane_item_t *)) {
  size_t n, k = 0;
  while ((n = lanes_collect(e->lanes, e->got, 2 * (size_t)e->n_slot)) > 0)
    for (size_t j = 0; j < n; j++) {
      lane_item_t *it = e->got[j];
      choice_t *c = it->who;
      if (c->orphan) {
        c->sent = NULL;
        orphan(e, c, it);
        continue;
      }
      lane_item_t *again = judge(e, c, it);
      if (again != NULL)
        e->sub[k++] = again;
    }
  if (k > 0)
    lanes_submit(e->lanes, e->sub, k);
}

uint32_t steps_ready(engine_t *e) {
  uint32_t m = 0;
  for (uint32_t i = 0; i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    c->decodes = false;
    c->chunk = 0;
    c->out = -1;
    if (c->task == NULL || c->failed || (c->index > 0 && !c->forked))
      continue;
    uint32_t first, cnt = steps_chunk(e, c, c->n, &first);
    if (cnt > 0 && c->ready == NULL)
      continue; /* sits out: its step is out, or its lane is late */
    /* A prompt chunk's step is its own; a generated position's may be
     * a run that began at an earlier one. */
    if (cnt > 0 && ((c->ready->kind != ITEM_STEP &&
                     c->ready->kind != ITEM_SETTLE) ||
                    (first < c->task->n_prompt
                       ? c->ready->step.positions[0] != first ||
                           c->ready->step.n_positions != cnt
                       : !steps_covers(c, first)))) {
      fault_set(&c->fault, 500, "internal_error", "the step answered for "
                "session %s was not this iteration's", c->s.session);
      c->failed = true;
      continue;
    }
    c->chunk = cnt;
    c->decodes = true;
    /* Where a turn's new tokens begin and before its prompt's last
     * tokens, a checkpoint (park.c): the cells, the window and the record
     * as the steps below c->n left them. */
    uint32_t n_prompt = c->task->n_prompt;
    if (c->n < n_prompt && (c->n == c->start || c->n + CK_TAIL == n_prompt) &&
        conv_ckpt_wanted(e, c))
      conv_checkpoint(e, c);
    if (cnt > 0)
      dump_step(e->dump, c->s.id,
                c->ready->step.positions + (first -
                                            c->ready->step.positions[0]),
                cnt, false, -1);
    m++;
  }
  return m;
}
