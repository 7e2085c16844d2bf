/* serve's steps (engine_int.h): which positions each choice steps this
 * iteration, and which it will step in the next, sent ahead of this
 * iteration's pass; an answer that came ahead kept for its choice. */
#include <string.h>

#include "common/grow.h"
#include "serve/engine_int.h"

/* The positions choice c steps from position n on: a prompt chunk of at
 * most `lookahead` (position 0, the BOS, needs none: a prompt of the BOS
 * alone, an empty one, steps nothing before its first draw), else its
 * pending token. */
static uint32_t chunk_at(const engine_t *e, const choice_t *c, uint32_t n,
                         uint32_t *first) {
  uint32_t n_prompt = c->task->n_prompt;
  *first = n;
  if (n >= n_prompt)
    return 1;
  *first = n == 0 ? 1 : n;
  uint32_t end = *first + e->lookahead;
  return (end > n_prompt ? n_prompt : end) - *first;
}

/* Whether a step of cnt positions of c from first is one evictd takes
 * (checked before it goes into a batch, so that no item can fail the
 * batch, and with it every other sequence's step): some positions, all
 * above the session's newest. The engine makes no other, so a refusal
 * here is its own bug, told as such; c fails alone. */
static bool step_ok(choice_t *c, uint32_t first, uint32_t cnt) {
  if (cnt > 0 && first > c->s.newest && first <= UINT32_MAX - cnt)
    return true;
  fault_set(&c->fault, 500, "internal_error", "the engine made a step of "
            "%u positions from %u for session %s, whose newest is %u",
            cnt, first, c->s.session, c->s.newest);
  c->failed = true;
  return false;
}

/* Item k of set b: cnt positions of c from first, at b->pos[np]. */
static void put_step(engine_t *e, stepset_t *b, size_t k, size_t np,
                     choice_t *c, uint32_t first, uint32_t cnt) {
  for (uint32_t j = 0; j < cnt; j++)
    b->pos[np + j] = first + j;
  b->steps[k] = (evd_step_t){.session = c->s.session,
                             .positions = &b->pos[np], .n_positions = cnt,
                             .create = c->index == 0 ? &e->cfg : NULL};
  b->sq[k] = &c->s;
  b->who[k] = c;
}

size_t steps_now(engine_t *e, size_t *n_early) {
  size_t k = 0, np = 0, m = 0;
  for (uint32_t i = 0; i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    c->chunk = 0;
    c->out = -1;
    if (c->task == NULL || (c->index > 0 && !c->forked))
      continue;
    uint32_t first, cnt = chunk_at(e, c, c->n, &first);
    c->chunk = cnt;
    if (cnt == 0) /* the BOS alone: computed without a step */
      continue;
    if (c->ahead) {
      c->ahead = false;
      if (c->ahead_first != first || c->ahead_cnt != cnt) {
        fault_set(&c->fault, 500, "internal_error", "the step sent ahead "
                  "for session %s was not this iteration's", c->s.session);
        c->ahead_failed = true;
      }
      c->failed = c->ahead_failed;
      e->early[m++] = c;
      continue;
    }
    if (!step_ok(c, first, cnt))
      continue;
    put_step(e, &e->now, k++, np, c, first, cnt);
    np += cnt;
  }
  *n_early = m;
  return k;
}

size_t steps_ahead(engine_t *e) {
  size_t k = 0, np = 0;
  if (!e->pipeline)
    return 0;
  for (uint32_t i = 0; i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (c->task == NULL || c->failed || c->chunk == 0)
      continue;
    const task_t *t = c->task;
    uint32_t n = c->n < t->n_prompt ? (c->n == 0 ? 1 : c->n) + c->chunk
                                    : c->n + 1;
    bool draws = n >= t->n_prompt;
    if (draws && (c->tokens + 1 >= t->want.n_predict ||
                  (c->index == 0 && t->want.n > 1 && c->tokens == 0)))
      continue;
    uint32_t first, cnt = chunk_at(e, c, n, &first);
    if (!step_ok(c, first, cnt))
      continue;
    put_step(e, &e->next, k++, np, c, first, cnt);
    c->ahead_first = first;
    c->ahead_cnt = cnt;
    np += cnt;
  }
  return k;
}

int steps_keep(engine_t *e, size_t j) {
  choice_t *c = e->next.who[j];
  const evd_batch_result_t *r = &e->next.results[j];
  c->ahead = true;
  c->ahead_failed = link_item(r, c->s.session, &c->fault) != 0;
  if (c->ahead_failed)
    return 0;
  const evd_answer_t *a = &r->answer;
  size_t need = a->victims.n + a->dropped.n + a->removed.n;
  if (grow(&c->got_buf, &c->got_cap, need, sizeof(*c->got_buf)) != 0)
    return -1;
  c->got = (evd_answer_t){.size = a->size, .newest = a->newest,
                          .replayed = a->replayed};
  uint32_t *p = c->got_buf;
  const evd_list_t *from[] = {&a->victims, &a->dropped, &a->removed};
  evd_list_t *to[] = {&c->got.victims, &c->got.dropped, &c->got.removed};
  for (size_t i = 0; i < 3; i++) {
    if (from[i]->n > 0)
      memcpy(p, from[i]->v, from[i]->n * sizeof(*p));
    *to[i] = (evd_list_t){.v = from[i]->n > 0 ? p : NULL, .n = from[i]->n};
    p += from[i]->n;
  }
  return 0;
}
