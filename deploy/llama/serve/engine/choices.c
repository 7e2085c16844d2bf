/* A choice's life in serve's engine (engine_int.h): a task taken into
 * slots (its first choice continuing the conversation that keeps most of
 * its prompt, or a fresh session; the others forked from it once the
 * prompt is decoded), a choice's end, a task's end, and a slot left
 * behind (parked, or given back, or an orphan until its step comes
 * back). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/grow.h"
#include "serve/engine/engine_int.h"

/* Room in c's tokens up to position `upto` (exclusive). */
int choice_reserve(choice_t *c, uint32_t upto) {
  return grow(&c->hist, &c->cap, upto - c->hbase, sizeof(*c->hist));
}

void hist_compact(engine_t *e, choice_t *c) {
  uint32_t k = 0;
  while (c->n - (c->hbase + k * HIST_BLOCK) > e->keep + HIST_BLOCK) {
    c->hdig = hist_fold(e->key, c->hdig, c->hist + k * HIST_BLOCK);
    k++;
  }
  if (k == 0)
    return;
  uint32_t gone = k * HIST_BLOCK, left = c->n + 1 - c->hbase - gone;
  memmove(c->hist, c->hist + gone, left * sizeof(*c->hist));
  c->hbase += gone;
}

/* A choice leaves its task: its conversation parked when keep (the task
 * ended well and wants it kept), else its slot given back. With a step
 * out, it leaves an orphan, parked or given back when the step comes back
 * (the lane holds the sequence till then). */
static void leave(engine_t *e, choice_t *c, bool keep) {
  /* A conversation that never stepped (the BOS alone, one token drawn)
   * has no session in evictd, and nothing worth keeping. */
  keep = keep && c->s.newest > 0;
  /* A run's positions past the last decoded are in the session (and, for
   * --dump's reference, stepped) though no pass computed them; a
   * continuation truncates them. */
  if (keep && steps_covers(c, c->n))
    dump_step(e->dump, c->s.id,
              c->ready->step.positions + (c->n - c->ready->step.positions[0]),
              c->ready->step.positions[0] + c->ready->step.n_positions - c->n,
              false, -1);
  text_clear(&c->text);
  c->task = NULL;
  c->decodes = false;
  c->ready = NULL;
  if (c->sent != NULL) {
    c->orphan = true;
    c->keep = keep;
  } else if (keep) {
    conv_park(e, c);
  } else {
    engine_give_back(e, c);
    board_sequences(e->board, --e->used);
  }
}

/* An orphan's step came back: parked (its session then holds the step's
 * position, which its cells never computed: a continuation truncates it),
 * or its slot given back. */
void choices_orphan(engine_t *e, choice_t *c, lane_item_t *it) {
  fault_t f;
  if (c->keep && it->kind == ITEM_STEP && it->rc == 0 &&
      seq_verdict(lanes_flags(e->lanes), &c->s, 0, "", &it->answer,
                  it->step.n_positions) == SEQ_GO_ON &&
      (dump_step(e->dump, c->s.id, it->step.positions,
                 it->step.n_positions, false, -1),
       seq_remove(&c->s, &c->s.map, e->lm, "victims", it->answer.victims.v,
                  it->answer.victims.n, e->tr, &f) == 0)) {
    seq_stepped(&c->s, &it->step, &it->answer);
    c->s.held = it->answer.size;
    conv_park(e, c);
    return;
  }
  engine_give_back(e, c);
  board_sequences(e->board, --e->used);
}

/* Ends a task: each of its choices leaves (their conversations parked
 * when it ended well and keeps them), then the task is done (failed with
 * f when f is not NULL). */
void choices_end_task(engine_t *e, task_t *t, const fault_t *f) {
  bool keep = f == NULL && !tq_cancelled(e->q, t) && t->want.cache_prompt &&
              !e->o->no_cache_prompt;
  for (uint32_t i = 0; i < e->n_slot; i++)
    if (e->slot[i].task == t)
      leave(e, &e->slot[i], keep);
  publish_finish(e, t, f);
}

/* The base of a task's session ids: its id, or in a pool, when the
 * instance that id is routed to is down or late, its id with a suffix
 * that is routed to one that is not (a new session needs to wait on no
 * instance). */
static void session_base(engine_t *e, const task_t *t, char *base,
                         size_t len) {
  snprintf(base, len, "%s", t->id);
  if (lanes_instances(e->lanes) < 2)
    return;
  for (unsigned r = 1; r <= 64 && !lanes_ok(e->lanes,
                                            lanes_route(e->lanes, base, 0));
       r++)
    snprintf(base, len, "%s.%u", t->id, r);
  if (!lanes_ok(e->lanes, lanes_route(e->lanes, base, 0)))
    snprintf(base, len, "%s", t->id); /* none is up: its own instance */
}

/* Sets choice c up for a fresh sequence of session id. 0, or -1 (out of
 * memory). */
static int fresh(engine_t *e, choice_t *c, const char *id, uint32_t need) {
  int32_t slot = (int32_t)(c - e->slot);
  c->hbase = 0;
  if (seq_init(&c->s, slot, id, POS_ORIGINAL) != 0 ||
      choice_reserve(c, need) != 0) {
    seq_free(&c->s);
    return -1;
  }
  /* The first choice's session is made by its first step (a new one holds
   * position 0), the others' by the fork. */
  seq_start(&c->s, &e->cfg);
  c->n = 0;
  c->hbase = 0;
  c->hdig = 0;
  c->peak = 0;
  c->ck_at = 0;
  c->ck_key[0] = '\0';
  dump_open_seq(e->dump, slot);
  return 0;
}

/* Choice c (the task's first) continues the conversation its slot holds,
 * keeping its first m positions: the prompt's tokens from m on are its
 * own, and when the session holds positions from m on (the conversation
 * goes back, or its step sent ahead of a pass that never came), they are
 * truncated first, through its lane, before its first step. 0, or -1. */
static int resume(engine_t *e, choice_t *c, task_t *t, uint32_t m) {
  if (choice_reserve(c, t->n_prompt + 2) != 0)
    return -1;
  memcpy(hist_at(c, m), t->prompt + (m - t->base),
         (t->n_prompt - m) * sizeof(*c->hist));
  c->n = m;
  e->cc.reused += m;
  if (c->s.newest < m)
    return 0;
  lane_item_t *it = &c->item[0];
  it->kind = ITEM_TRUNCATE;
  it->sq = &c->s;
  it->who = c;
  it->lane = c->lane;
  it->from = m;
  it->step.session = c->s.session;
  c->sent = it;
  lanes_submit(e->lanes, &it, 1);
  return 0;
}

/* Takes a task into slots: its first choice continues the conversation
 * that keeps most of its prompt, if any (park.c), else gets a fresh
 * session, its id the task's; the others' sessions are forked from it,
 * ID~I (a continued one's: its id up to its first '~', then ~TASK.I).
 * (nginx's key is an id up to its first '~', so that in a pool the forks'
 * children live on their parent's instance, where the fork makes them:
 * deploy/SCALING.md.) */
void choices_admit(engine_t *e, task_t *t) {
  fault_t f;
  char base[SEQ_ID_MAX - 8], root[SEQ_ID_MAX + 1] = "";
  session_base(e, t, base, sizeof(base));
  for (uint32_t k = 0; k < t->want.n; k++) {
    uint32_t m;
    choice_t *c;
    if (k == 0 && t->cont[0] != '\0') {
      /* A continuation by id: its conversation, or nothing. */
      if ((c = conv_find(e, t, &f)) == NULL) {
        choices_end_task(e, t, &f);
        return;
      }
      m = t->base;
    } else {
      c = conv_take(e, t, k, &m, base);
    }
    char id[SEQ_ID_MAX + 1];
    int w = k > 0 && root[0] != '\0'
              ? snprintf(id, sizeof(id), "%s~%s.%u", root, t->id, k)
              : snprintf(id, sizeof(id), t->want.n == 1 ? "%s" : "%s~%u",
                         base, k);
    /* A cut id could name another's session: none is made. */
    int rc = c == NULL || w < 0 || (size_t)w >= sizeof(id) ? -1
             : m > 0 ? resume(e, c, t, m)
                     : fresh(e, c, id, t->n_prompt + 2);
    if (c != NULL && k == 0 && m > 0)
      snprintf(root, sizeof(root), "%.*s",
               (int)strcspn(c->s.session, "~"), c->s.session);
    if (rc != 0) {
      fault_set(&f, 500, "out_of_memory", "out of memory, or no sequence "
                "free");
      choices_end_task(e, t, &f);
      return;
    }
    c->task = t;
    c->index = k;
    c->tokens = 0;
    c->start = m;
    c->gen = ++e->gens; /* what it held before is no longer */
    if (k == 0) {
      tq_cached(e->q, t, m, m > 0 ? (cache_from_t)c->from : CACHE_NONE);
      t->t_start = clock_now();
      if (t->want.progress)
        tq_progress(e->q, t, m);
    }
    c->lane = lanes_route(e->lanes, c->s.session, (uint32_t)c->s.id);
    if (m == 0)
      c->sent = c->ready = NULL;
    c->s.created = c->s.created || k == 0;
    c->smp.temp = t->want.temp;
    c->smp.top_p = t->want.top_p;
    c->smp.state = t->want.seed + k;
    c->smp.n_ban = t->want.ignore_eos ? lm_end_tokens(e->lm, c->smp.ban) : 0;
    c->forked = c->failed = false;
    e->used++;
    if (k == 0 && m == 0)
      memcpy(c->hist, t->prompt, t->n_prompt * sizeof(*c->hist));
    if (k == 0)
      e->cc.prefilled += t->n_prompt - m;
  }
  board_sequences(e->board, e->used);
}

/* The first choice finished the prompt: the others get it by evictd's
 * fork and llama_memory_seq_cp. The fork is sent on the engine's own link
 * to the parent's instance and waited for (once per request of n
 * choices; the parent has no step out then). */
int choices_fork(engine_t *e, choice_t *first, fault_t *f) {
  task_t *t = first->task;
  evd_view_t v;
  link_t *l = lanes_direct(e->lanes, first->lane, f);
  if (l == NULL)
    return -1;
  /* A prompt of the BOS alone stepped nothing, so its session is made
   * here, as its first step would have made it. */
  if (t->n_prompt == 1 &&
      link_create(l, first->s.session, &e->cfg, &v, f) != 0)
    return -1;
  for (uint32_t i = 0; i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (c->task != t || c == first)
      continue;
    c->hbase = first->hbase;
    c->hdig = first->hdig;
    if (choice_reserve(c, t->n_prompt + 2) != 0)
      return fault_set(f, 500, "out_of_memory", "out of memory");
    if (seq_fork(l, &first->s, &c->s, e->lm, t->n_prompt - 1, f))
      return -1;
    dump_fork(e->dump, first->s.id, c->s.id);
    memcpy(c->hist, first->hist,
           (t->n_prompt - first->hbase) * sizeof(*c->hist));
    c->n = t->n_prompt;
    c->forked = true;
  }
  return 0;
}

/* Choice c ends (why), what its text held back shown first. */
void choices_end(engine_t *e, choice_t *c, finish_t why) {
  const char *show;
  size_t len;
  task_t *t = c->task;
  if (why != FIN_STOP && text_flush(&c->text, &show, &len) == 0)
    tq_text(e->q, t, c->index, show, len, c->tokens);
  tq_end(e->q, t, c->index, why, c->tokens, c->text.stop);
  bool keep = t->want.cache_prompt && !e->o->no_cache_prompt &&
              !tq_cancelled(e->q, t);
  /* What a later request continues by id (the Responses API). */
  if (keep && c->index == 0 && c->s.newest > 0)
    tq_conv(e->q, t, c->s.session, c->n, c->gen,
            why == FIN_EOS ? -1 : *hist_at(c, c->n));
  leave(e, c, keep);
  for (uint32_t i = 0; i < e->n_slot; i++)
    if (e->slot[i].task == t)
      return;
  publish_finish(e, t, NULL);
}
