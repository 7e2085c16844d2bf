/* One iteration's pass in serve's engine (engine_int.h): the batch of
 * every choice that decodes (a prompt chunk, or its pending token), ONE
 * llama_decode, each answer followed into the cache (common/seq.c), the
 * cells packed back to cell 0 where a pass left them spread, then a token
 * drawn per choice (llama-server's sampler chain, or the plain draw) and
 * emitted as events; what fails ends its task alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/sampler.h"
#include "serve/engine/engine_int.h"
#include "serve/upstream/sampler.h"

#define say(...) fprintf(stderr, "evictd-llama serve: " __VA_ARGS__)

/* The token drawn for c at position c->n: its bytes shown as far as they
 * may be, then the end checked (an end token, a stop string, the length
 * asked for). */
/* The next token of c from output row idx of the pass: the task's
 * sampler chain (llama-server's: the prompt fed to it first, as
 * llama-server does, then each token drawn; its candidates reported when
 * asked), or the built-in draw. 0; 1 when no token may follow (a grammar
 * that is complete while ignore_eos bans the end tokens it would take
 * next), *tok then an end token; or -1 with f set. */
static int draw(engine_t *e, choice_t *c, int32_t idx, llama_token *tok,
                fault_t *f) {
  task_t *t = c->task;
  if (t->want.samplers == NULL) {
    *tok = sampler_draw(&c->smp, lm_logits(e->lm, idx), e->lm->n_vocab,
                        NULL);
    return 0;
  }
  up_sampler_t *sp = t->want.samplers[c->index];
  char err[400];
  if (c->tokens == 0)
    for (uint32_t q = c->hbase; q < c->n; q++)
      up_sampler_accept(sp, *hist_at(c, q), false, NULL, 0);
  int rc = up_sampler_sample(sp, e->lm->ctx, idx, tok, err, sizeof(err));
  if (rc < 0)
    return fault_set(f, 500, "sampling_failed", "%s", err);
  if (rc == 1) {
    llama_token end[2];
    *tok = lm_end_tokens(e->lm, end) > 0 ? end[0] : *tok;
    return 1;
  }
  if (t->want.n_probs > 0 || t->want.tokens) {
    uint32_t n = t->want.n_probs;
    token_ev_t *ev = e->probs;
    int k = n > 0 ? up_sampler_probs(sp, e->lm->ctx, idx, *tok,
                                     (up_prob_t *)ev->top, (int)n, &ev->p,
                                     err, sizeof(err))
                  : 0;
    ev->id = *tok;
    ev->n = k > 0 ? (uint32_t)k : 0;
    if (n == 0)
      ev->p = 0;
    tq_token(e->q, t, c->index, ev);
  }
  if (up_sampler_accept(sp, *tok, true, err, sizeof(err)) != 0)
    return fault_set(f, 500, "sampling_failed", "%s", err);
  return 0;
}

/* Whether tok is one the chat format needs to see as its text. */
static bool preserved(const task_t *t, llama_token tok) {
  for (uint32_t i = 0; i < t->want.n_preserved; i++)
    if (t->want.preserved[i] == tok)
      return true;
  return false;
}

static void emit(engine_t *e, choice_t *c, int32_t idx) {
  task_t *t = c->task;
  llama_token tok;
  fault_t f;
  int drawn = draw(e, c, idx, &tok, &f);
  if (drawn < 0) {
    choices_end_task(e, t, &f);
    return;
  }
  *hist_at(c, c->n) = tok;
  hist_compact(e, c);
  if (t->t_prompt == 0)
    t->t_prompt = clock_now();
  c->tokens++;
  e->tokens++;
  if (drawn == 1 || (lm_is_end(e->lm, tok) && !t->want.ignore_eos)) {
    choices_end(e, c, FIN_EOS);
    return;
  }
  char piece[256];
  const char *show;
  size_t len;
  int n = preserved(t, tok) ? lm_piece_special(e->lm, tok, piece,
                                               sizeof(piece))
                            : lm_piece(e->lm, tok, piece, sizeof(piece));
  /* A piece over 256 bytes: none in any vocabulary served so far. */
  int stop = text_push(&c->text, piece, n > 0 ? (size_t)n : 0,
                       t->want.stop, t->want.n_stop, &show, &len);
  if (stop >= 0)
    tq_text(e->q, t, c->index, show, len, c->tokens);
  if (stop == 1)
    choices_end(e, c, FIN_STOP);
  else if (c->tokens >= t->want.n_predict)
    choices_end(e, c, FIN_LIMIT);
}

/* Fails every running task (f). */
void pass_fail_all(engine_t *e, const fault_t *f) {
  for (uint32_t i = 0; i < e->n_slot; i++)
    if (e->slot[i].task != NULL)
      choices_end_task(e, e->slot[i].task, f);
}

/* Fails the tasks of the choices that decoded in this pass, after
 * llama.cpp failed it. */
static void fail_decoded(engine_t *e, const fault_t *f) {
  for (uint32_t i = 0; i < e->n_slot; i++)
    if (e->slot[i].task != NULL && e->slot[i].decodes)
      choices_end_task(e, e->slot[i].task, f);
}

/* llama.cpp attends over a sequence's cells up to the highest one in
 * use, rounded up to 256 (its n_kv, kept a multiple of 256 so that its
 * graphs are reused). A pass that held more cells than the sequence
 * needs next (a prompt's chunk over a full window: budget + chunk cells,
 * then the chunk's victims gone) leaves cells in use above that round
 * figure, and every later pass pays for the wider span until those
 * positions are evicted, a window later: 768 cells for a window of 511,
 * at every pass of a conversation's turns (1.3x the time of a turn of
 * the tiny model). So the cells are packed: saved, removed and put back
 * from cell 0 (llama_state_seq_*: the same bits at the same positions),
 * when the peak's round figure is above the next pass's. That copies
 * the window's cells twice, once per spill; the spill would have read
 * 256 cells more at each pass for a window's worth. */
static uint32_t rounded(uint32_t n, uint32_t to) {
  return (uint32_t)(((uint64_t)n + to - 1) / to * to);
}

static int pack(engine_t *e, choice_t *c, fault_t *f) {
  uint32_t held = c->s.map.n;
  if (held == 0)
    c->peak = 0;
  if (rounded(c->peak, e->pack) <= rounded(held + 1, e->pack))
    return 0;
  c->peak = held;
  size_t n = llama_state_seq_get_size(e->lm->ctx, c->s.id);
  if (n == 0)
    return 0;
  if (n > e->packcap) {
    uint8_t *b = realloc(e->packbuf, n);
    if (b == NULL)
      return 0; /* left unpacked: slower, not wrong */
    e->packbuf = b;
    e->packcap = n;
  }
  if (llama_state_seq_get_data(e->lm->ctx, e->packbuf, n, c->s.id) != n)
    return 0;
  llama_memory_seq_rm(e->lm->mem, c->s.id, -1, -1);
  if (llama_state_seq_set_data(e->lm->ctx, e->packbuf, n, c->s.id) != n)
    return fault_set(f, 500, "pack_failed", "llama.cpp could not put back "
                     "the cells of sequence %d (session %s) while moving "
                     "them down: its request ends", c->s.id, c->s.session);
  e->cc.packed++;
  return 0;
}

/* ONE pass of every choice that decodes; -1 when llama.cpp failed. */
static int pass(engine_t *e, fault_t *f) {
  char err[256];
  lm_clear(e->lm);
  for (uint32_t i = 0; i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (!c->decodes || c->failed)
      continue;
    uint32_t n_prompt = c->task->n_prompt, from = c->n, to = c->n + 1;
    if (c->n < n_prompt)
      to = (c->n == 0 ? 1 : c->n) + c->chunk;
    if (e->dump != NULL)
      dump_cache(e->dump, e->lm->label, c->s.id, lm_pos_min(e->lm, c->s.id),
                 lm_pos_max(e->lm, c->s.id));
    for (uint32_t q = from; q < to; q++) {
      bool last = q + 1 == to && to >= n_prompt;
      /* The record wants every token's logits. */
      if (seq_put(&c->s, e->lm, *hist_at(c, q), q, last || e->dump != NULL,
                  f) != 0)
        return -1;
      if (last)
        c->out = e->lm->batch.n_tokens - 1;
    }
    if (c->s.map.n > c->peak)
      c->peak = c->s.map.n;
  }
  if (e->lm->batch.n_tokens > 0 && lm_decode(e->lm, err, sizeof(err)) != 0)
    return fault_set(f, 500, "decode_failed", "%s", err);
  if (e->lm->batch.n_tokens > 0)
    dump_pass(e->dump, e->lm);
  return 0;
}

/* After the pass: the choices whose prompt just ended fork, then every
 * choice with logits draws. */
static void draw_all(engine_t *e) {
  fault_t f;
  for (uint32_t i = 0; i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (c->task == NULL || c->out < 0)
      continue;
    task_t *t = c->task;
    bool prompt_done = c->index == 0 && c->n == t->n_prompt && c->tokens == 0;
    if (prompt_done && t->want.n > 1) {
      if (choices_fork(e, c, &f) != 0) {
        choices_end_task(e, t, &f);
        continue;
      }
      /* Every choice draws its first token from these logits. */
      for (uint32_t j = 0; j < e->n_slot; j++)
        if (e->slot[j].task == t && &e->slot[j] != c &&
            choice_reserve(&e->slot[j], e->slot[j].n + 2) == 0)
          emit(e, &e->slot[j], c->out);
      if (c->task != t) /* the others ended the task already */
        continue;
    }
    if (choice_reserve(c, c->n + 2) != 0) {
      fault_set(&f, 500, "out_of_memory", "out of memory");
      choices_end_task(e, t, &f);
      continue;
    }
    emit(e, c, c->out);
  }
}

/* Ends the tasks of the choices whose step failed (each task alone). */
void pass_end_failed(engine_t *e) {
  for (uint32_t i = 0; i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (c->task != NULL && c->failed) {
      say("%s\n", c->fault.msg);
      c->failed = false;
      choices_end_task(e, c->task, &c->fault);
    }
  }
}

/* Ends, with 503, the tasks of the choices whose step has been out longer
 * than --reconnect-ms: their instance is down or hung. Their cells are
 * freed once the step comes back (or at shutdown). */
void pass_overdue(engine_t *e, double now) {
  double limit = e->o->link.reconnect_ms / 1e3;
  for (uint32_t i = 0; i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (c->task == NULL || c->sent == NULL || now - c->sent->since <= limit)
      continue;
    lane_info_t li;
    lanes_info(e->lanes, c->lane, &li);
    fault_t f;
    fault_set(&f, 503, "evictd_unavailable", "the step of session %s has "
              "waited %.0f ms for evictd (%s; --reconnect-ms %u): the "
              "instance is down or hung", c->s.session,
              (now - c->sent->since) * 1e3, li.name,
              e->o->link.reconnect_ms);
    say("%s\n", f.msg);
    choices_end_task(e, c->task, &f);
  }
}

/* ONE pass of the choices that decode, then the answers followed (a
 * run's item stays ready for the passes of its other positions), the
 * cells packed, each choice's positions counted, a token drawn for each,
 * and the iteration's figures to the board. */
void pass_run(engine_t *e, double t0, double t1) {
  fault_t f;
  double t_evd = t1 - t0;
  int rc = pass(e, &f);
  double t2 = clock_now();
  /* Follow the answers (llama.cpp alone), unless the pass failed. */
  for (uint32_t i = 0; rc == 0 && i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (!c->decodes || c->failed || c->ready == NULL)
      continue;
    /* The step's answer is followed at its first position; a run's item
     * stays ready for the passes of its other positions. */
    const evd_step_t *st = &c->ready->step;
    uint32_t at = c->n < c->task->n_prompt ? 0 : c->n - st->positions[0];
    fault_t g;
    if (at == 0 && seq_follow(&c->s, e->lm, &c->ready->answer,
                              st->n_positions, e->tr, &g) != 0) {
      c->fault = g;
      c->failed = true;
    }
    if (c->failed || at + c->chunk >= st->n_positions)
      c->ready = NULL;
  }
  if (rc != 0) {
    say("%s\n", f.msg);
    fail_decoded(e, &f);
    return;
  }
  for (uint32_t i = 0; e->pack > 0 && i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (c->decodes && !c->failed && pack(e, c, &c->fault) != 0)
      c->failed = true;
  }
  pass_end_failed(e);
  pass_counts_t pc = {0};
  for (uint32_t i = 0; i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (c->task == NULL)
      continue;
    pc.busy++;
    if (!c->decodes)
      continue;
    uint32_t was = c->n;
    c->n = c->n < c->task->n_prompt ? (c->n == 0 ? 1 : c->n) + c->chunk
                                    : c->n + 1;
    if (was < c->task->n_prompt)
      pc.prompt_tokens += c->n - was;
    else
      pc.gen_steps++;
    if (was < c->task->n_prompt && c->index == 0 && c->task->want.progress)
      tq_progress(e->q, c->task, c->n < c->task->n_prompt
                                     ? c->n : c->task->n_prompt);
    if (c->n > pc.n_max)
      pc.n_max = c->n;
  }
  draw_all(e);
  evd_client_stats_t cs;
  link_counts_t lc;
  lanes_counts(e->lanes, &lc, &cs);
  double t_all = clock_now() - t0;
  board_count(e->board, e->tokens, e->steps, e->ahead, t_evd, t2 - t1,
              t_all, &cs, &lc, lanes_per_session(e->lanes));
  e->tokens = 0;
  pc.prompt_s = pc.prompt_tokens > 0 ? t_all : 0;
  pc.gen_s = (double)pc.gen_steps * t_all;
  board_pass(e->board, &pc);
}
