/* evictd-llama serve's engine thread (engine.h). A task of n choices takes
 * n sequences: the first decodes the prompt, in chunks of `lookahead`
 * positions; then evictd forks its session and llama.cpp copies its cells
 * into the others (the prompt decoded once), and every choice draws its
 * first token from the prompt's last logits with a generator of its own.
 * Positions are the tokens' absolute positions. Steps go to evictd through
 * lanes (common/lanes.h): a thread per instance of a pool, or per
 * sequence behind a proxy, so an iteration decodes the sequences whose
 * steps are answered and a sequence whose instance is down or hung sits
 * out, its cells kept, without holding up the others. A step needs
 * positions alone, not tokens, so the next iteration's steps go out
 * before this iteration's llama_decode and are answered while it runs
 * (pipelining: the round trip leaves the critical path). */
#include "serve/engine.h"

#include <errno.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/grow.h"
#include "common/sampler.h"
#include "common/seq.h"
#include "serve/engine_int.h"
#include "serve/upstream.h"
#include "siphash.h"
#include "serve/text.h"

#define say(...) fprintf(stderr, "evictd-llama serve: " __VA_ARGS__)

/* How long an iteration waits for a lane that has not answered before it
 * decodes without that lane's sequences (and waits on it no more until it
 * answers): far above an answer's round trip (tens of microseconds to a
 * millisecond), far below what a stream's client notices. */
#define GRACE_S 0.05

/* The most generated positions one step takes while the window has room
 * for them (EVICTD_LLAMA_RUN): a round trip to evictd per 16 tokens
 * instead of one per token. A choice that ends sooner (an end token, a
 * stop string) leaves at most 15 positions in its session that its cells
 * never computed, as a step sent ahead leaves one: a continuation
 * truncates them. */
#define ENGINE_RUN 16

/* llama.cpp's round figure for the cells a pass attends over (its
 * get_n_kv pads to at least 256): see pack(). */
#define CELL_PAD 256

static void publish_lanes(engine_t *e, double now, bool force);
static void publish_slots(engine_t *e);

/* A task is done: what its end changed (its conversation parked) shown in
 * /metrics before its client has its answer, then finished. */
static void finish(engine_t *e, task_t *t, const fault_t *f) {
  t->t_end = clock_now();
  publish_lanes(e, t->t_end, true);
  /* The tokens this iteration drew so far, its own last among them: a
   * scrape right after the answer counts them. */
  if (e->tokens > 0) {
    tq_tokens(e->q, e->tokens);
    e->tokens = 0;
  }
  tq_finish(e->q, t, f);
}

/* Room in c's tokens up to position `upto` (exclusive). */
static int reserve(choice_t *c, uint32_t upto) {
  return grow(&c->hist, &c->cap, upto - c->hbase, sizeof(*c->hist));
}

uint64_t hist_fold(const uint64_t key[2], uint64_t d, const llama_token *b) {
  uint8_t buf[8 + HIST_BLOCK * sizeof(llama_token)];
  memcpy(buf, &d, 8);
  memcpy(buf + 8, b, HIST_BLOCK * sizeof(llama_token));
  return evd__siphash13(key, buf, sizeof(buf));
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

void engine_give_back(engine_t *e, choice_t *c) {
  llama_memory_seq_rm(e->lm->mem, c->s.id, -1, -1);
  if (c->s.created)
    lanes_delete(e->lanes, c->s.session, (uint32_t)c->s.id);
  seq_free(&c->s);
  c->orphan = c->keep = c->parked = false;
  c->sent = c->ready = NULL;
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
    tq_sequences(e->q, --e->used);
  }
}

/* An orphan's step came back: parked (its session then holds the step's
 * position, which its cells never computed: a continuation truncates it),
 * or its slot given back. */
static void leave_orphan(engine_t *e, choice_t *c, lane_item_t *it) {
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
  tq_sequences(e->q, --e->used);
}

/* Ends a task: each of its choices leaves (their conversations parked
 * when it ended well and keeps them), then the task is done (failed with
 * f when f is not NULL). */
static void end_task(engine_t *e, task_t *t, const fault_t *f) {
  bool keep = f == NULL && !tq_cancelled(e->q, t) && t->want.cache_prompt &&
              !e->o->no_cache_prompt;
  for (uint32_t i = 0; i < e->n_slot; i++)
    if (e->slot[i].task == t)
      leave(e, &e->slot[i], keep);
  finish(e, t, f);
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
      reserve(c, need) != 0) {
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
  dump_open_seq(e->dump, slot);
  return 0;
}

/* Choice c (the task's first) continues the conversation its slot holds,
 * keeping its first m positions: the prompt's tokens from m on are its
 * own, and when the session holds positions from m on (the conversation
 * goes back, or its step sent ahead of a pass that never came), they are
 * truncated first, through its lane, before its first step. 0, or -1. */
static int resume(engine_t *e, choice_t *c, task_t *t, uint32_t m) {
  if (reserve(c, t->n_prompt + 2) != 0)
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
 * that keeps most of its prompt, if any (convs.c), else gets a fresh
 * session, its id the task's; the others' sessions are forked from it,
 * ID~I (a continued one's: its id up to its first '~', then ~TASK.I).
 * (nginx's key is an id up to its first '~', so that in a pool the forks'
 * children live on their parent's instance, where the fork makes them:
 * deploy/SCALING.md.) */
static void admit(engine_t *e, task_t *t) {
  fault_t f;
  char base[SEQ_ID_MAX - 8], root[SEQ_ID_MAX + 1] = "";
  session_base(e, t, base, sizeof(base));
  for (uint32_t k = 0; k < t->want.n; k++) {
    uint32_t m;
    choice_t *c;
    if (k == 0 && t->cont[0] != '\0') {
      /* A continuation by id: its conversation, or nothing. */
      if ((c = conv_find(e, t, &f)) == NULL) {
        end_task(e, t, &f);
        return;
      }
      m = t->base;
    } else {
      c = conv_take(e, t, k, &m);
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
      end_task(e, t, &f);
      return;
    }
    c->task = t;
    c->index = k;
    c->tokens = 0;
    c->gen = ++e->gens; /* what it held before is no longer */
    if (k == 0) {
      tq_cached(e->q, t, m);
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
  tq_sequences(e->q, e->used);
}

/* The first choice finished the prompt: the others get it by evictd's
 * fork and llama_memory_seq_cp. The fork is sent on the engine's own link
 * to the parent's instance and waited for (once per request of n
 * choices; the parent has no step out then). */
static int fork_choices(engine_t *e, choice_t *first, fault_t *f) {
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
    if (reserve(c, t->n_prompt + 2) != 0)
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
static void end_choice(engine_t *e, choice_t *c, finish_t why) {
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
  finish(e, t, NULL);
}

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
    end_task(e, t, &f);
    return;
  }
  *hist_at(c, c->n) = tok;
  hist_compact(e, c);
  if (t->t_prompt == 0)
    t->t_prompt = clock_now();
  c->tokens++;
  e->tokens++;
  if (drawn == 1 || (lm_is_end(e->lm, tok) && !t->want.ignore_eos)) {
    end_choice(e, c, FIN_EOS);
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
    end_choice(e, c, FIN_STOP);
  else if (c->tokens >= t->want.n_predict)
    end_choice(e, c, FIN_LIMIT);
}

/* Fails every running task (f). */
static void fail_all(engine_t *e, const fault_t *f) {
  for (uint32_t i = 0; i < e->n_slot; i++)
    if (e->slot[i].task != NULL)
      end_task(e, e->slot[i].task, f);
}

/* Fails the tasks of the choices that decoded in this pass, after
 * llama.cpp failed it. */
static void fail_decoded(engine_t *e, const fault_t *f) {
  for (uint32_t i = 0; i < e->n_slot; i++)
    if (e->slot[i].task != NULL && e->slot[i].decodes)
      end_task(e, e->slot[i].task, f);
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
      if (fork_choices(e, c, &f) != 0) {
        end_task(e, t, &f);
        continue;
      }
      /* Every choice draws its first token from these logits. */
      for (uint32_t j = 0; j < e->n_slot; j++)
        if (e->slot[j].task == t && &e->slot[j] != c &&
            reserve(&e->slot[j], e->slot[j].n + 2) == 0)
          emit(e, &e->slot[j], c->out);
      if (c->task != t) /* the others ended the task already */
        continue;
    }
    if (reserve(c, c->n + 2) != 0) {
      fault_set(&f, 500, "out_of_memory", "out of memory");
      end_task(e, t, &f);
      continue;
    }
    emit(e, c, c->out);
  }
}

/* Ends the tasks of the choices whose step failed (each task alone). */
static void end_failed(engine_t *e) {
  for (uint32_t i = 0; i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (c->task != NULL && c->failed) {
      say("%s\n", c->fault.msg);
      c->failed = false;
      end_task(e, c->task, &c->fault);
    }
  }
}

/* Ends, with 503, the tasks of the choices whose step has been out longer
 * than --reconnect-ms: their instance is down or hung. Their cells are
 * freed once the step comes back (or at shutdown). */
static void overdue(engine_t *e, double now) {
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
    end_task(e, c->task, &f);
  }
}


/* Publishes what each slot holds, for GET /slots (read-only: a copy
 * under the queue's lock, as the lanes' states are). */
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
  tq_slots(e->q, st, n, e->budget, e->sinks, e->lookahead);
}

/* Publishes the lanes' states for /metrics and /health, at most ten times
 * a second. */
static void publish_lanes(engine_t *e, double now, bool force) {
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
  tq_lanes(e->q, st, n, &cc);
  publish_slots(e);
}

/* One iteration: the answers taken back, the steps of the choices that
 * have none sent and waited for (as long as their lanes are on time),
 * then the choices whose steps are answered decode: their next steps sent
 * ahead, ONE pass, the answers followed, the tokens drawn. A choice whose
 * lane is late sits out, its cells kept. */
static void iterate(engine_t *e) {
  double t0 = clock_now();
  fault_t f;
  e->tokens = e->steps = e->ahead = 0;
  steps_collect(e, leave_orphan);
  steps_now(e);
  lanes_wait(e->lanes, e->grace, t0 + e->grace);
  steps_collect(e, leave_orphan);
  overdue(e, clock_now());
  end_failed(e);
  publish_lanes(e, t0, false);
  if (steps_ready(e) == 0) {
    end_failed(e);
    /* A choice whose truncation came back in this iteration's wait (a
     * continued conversation going back) sends its first step now, and
     * the next iteration waits for it: idling here would hold it 20 ms
     * with nothing out (every fifth turn of a conversation, measured).
     * Else every sequence waits on a lane: until one answers (or a
     * while, to admit new tasks and see cancellations). */
    if (steps_now(e) == 0 && e->used > 0)
      lanes_idle(e->lanes, clock_now() + 0.02);
    return;
  }
  double t1 = clock_now(), t_evd = t1 - t0;
  steps_ahead(e);
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
  end_failed(e);
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
  tq_count(e->q, e->tokens, e->steps, e->ahead, t_evd, t2 - t1, t_all, &cs,
           &lc, lanes_per_session(e->lanes));
  e->tokens = 0;
  pc.prompt_s = pc.prompt_tokens > 0 ? t_all : 0;
  pc.gen_s = (double)pc.gen_steps * t_all;
  tq_pass(e->q, &pc);
}

/* Ends the tasks whose client went away, before the next pass. */
static void cancellations(engine_t *e) {
  for (uint32_t i = 0; i < e->n_slot; i++) {
    task_t *t = e->slot[i].task;
    if (t != NULL && tq_cancelled(e->q, t)) {
      say("the client of session %s went away: its cells and session are "
          "deleted\n", e->slot[i].s.session);
      end_task(e, t, NULL);
    }
  }
}

/* dump_remove as a seq_trace_t (--dump). */
static void trace_remove(void *ud, const lm_t *lm, const seq_t *s,
                         const char *why, const uint32_t *v, size_t n) {
  dump_remove(ud, lm->label, s->id, why, v, n);
}

static void *engine_main(void *arg) {
  engine_t *e = arg;
  bool stop = false;
  /* What the start found (conversations in --cache-dir) shown at once. */
  publish_lanes(e, clock_now(), true);
  lanes_start(e->lanes);
  /* The warm-up's passes run here, on the thread that decodes every
   * request: run on another (serve's main thread, first), they left the
   * tiny model at a third of its tokens/s with 2 threads (measured: 550
   * against 1,900 at 1 client; llama.cpp's CPU threads are per calling
   * thread). engine_new waits for them. */
  if (e->o->ls.warmup) {
    double w0 = clock_now();
    e->warm_rc = lm_warmup(e->lm, e->warm_err, sizeof(e->warm_err));
    if (e->warm_rc == 0)
      say("warm-up pass: %.1f ms (--no-warmup skips it)\n",
          (clock_now() - w0) * 1e3);
  }
  sem_post(&e->started);
  if (e->warm_rc != 0)
    return NULL;
  for (;;) {
    task_t *t;
    bool took = false;
    while ((t = tq_admit(e->q, e->n_slot - e->used, e->used == 0, &stop))) {
      admit(e, t);
      took = true;
    }
    if (took) /* GET /slots shows a task decoding from its start */
      publish_lanes(e, clock_now(), true);
    if (stop)
      break;
    cancellations(e);
    if (e->used > 0) {
      iterate(e);
      /* Idle next: what it leaves (parked conversations) shown now. */
      if (e->used == 0)
        publish_lanes(e, clock_now(), true);
    }
  }
  /* Stopping: queued tasks are refused, running ones end; their sessions
   * are deleted through the lanes, which send what they have in hand for
   * two seconds at most (a shutdown does not wait on a dead daemon). An
   * orphan's session is deleted behind its step, in its lane. */
  fault_t f;
  fault_set(&f, 503, "shutting_down", "the server is shutting down");
  tq_drain(e->q, &f);
  fail_all(e, &f);
  conv_store_close(e);
  for (uint32_t i = 0; i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (c->orphan && c->s.created)
      lanes_delete(e->lanes, c->s.session, (uint32_t)c->s.id);
  }
  return NULL;
}

/* The sessions' settings: the options, or the daemon's defaults for those
 * not given, read from a probe session created and deleted at once. */
static int settings(engine_t *e, char *err, size_t errlen) {
  const serve_opts_t *o = e->o;
  const evd_session_cfg_t *cfg = &o->cfg;
  evd_view_t v = {.budget = (uint32_t)cfg->budget,
                  .sinks = (uint32_t)cfg->sinks,
                  .lookahead = (uint32_t)cfg->lookahead};
  fault_t f;
  if (cfg->budget < 0 || cfg->sinks < 0) {
    char probe[64];
    snprintf(probe, sizeof(probe), "serve-%ld-probe", (long)getpid());
    link_t *l = lanes_direct(e->lanes, lanes_route(e->lanes, probe, 0), &f);
    if (l == NULL || link_create(l, probe, cfg, &v, &f) != 0 ||
        link_delete(l, probe, false, &f) != 0)
      return snprintf(err, errlen, "cannot read evictd's session defaults "
                      "(give --budget, --sinks and --lookahead to start "
                      "without it): %s", f.msg), -1;
  }
  e->budget = v.budget;
  e->sinks = v.sinks;
  /* Not given, the daemon's default, less one when that is a multiple of
   * llama.cpp's round figure: a full window's pass holds budget + 1
   * cells, and 513 would attend over 768 (1.3x the time of a tiny model's
   * pass) where 512 attends over 512. */
  if (cfg->budget < 0 && v.budget % CELL_PAD == 0 && v.budget > v.sinks + 1)
    e->budget = v.budget - 1;
  /* Not given, the prompt goes in chunks of llama.cpp's micro-batch, not
   * the daemon's default lookahead (1: a token per pass). */
  e->lookahead = cfg->lookahead < 0 ? 512 : v.lookahead;
  e->cfg = (evd_session_cfg_t){e->budget, e->sinks, e->lookahead, -1};
  return 0;
}

static void engine_free(engine_t *e) {
  if (e->store != NULL)
    conv_store_close(e);
  if (e->dump != NULL && dump_close(e->dump) != 0)
    say("writing --dump %s failed\n", e->o->dump);
  e->dump = NULL;
  /* Lanes blocked on a daemon that does not answer hold items of the
   * slots: then the slots are left to the process's end too. */
  if (!lanes_free(e->lanes))
    return;
  for (uint32_t i = 0; e->slot != NULL && i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    free(c->hist);
    text_free(&c->text);
    sampler_free(&c->smp);
    lane_item_free(&c->item[0]);
    lane_item_free(&c->item[1]);
    if (c->orphan)
      seq_free(&c->s);
  }
  free(e->slot);
  free(e->sub);
  free(e->got);
  free(e->probs);
  free(e->packbuf);
  free(e);
}

int engine_start(engine_t **out, const serve_opts_t *o, lm_t *lm, tq_t *q,
                 char *err, size_t errlen) {
  engine_t *e = calloc(1, sizeof(*e));
  fault_t f;
  if (e == NULL)
    return snprintf(err, errlen, "out of memory"), -1;
  e->o = o;
  e->lm = lm;
  e->q = q;
  e->n_slot = o->parallel;
  e->grace = GRACE_S;
  const char *g = getenv("EVICTD_LLAMA_GRACE_MS");
  if (g != NULL && *g != '\0')
    e->grace = atof(g) / 1e3;
  if (lanes_new(&e->lanes, &o->link, o->parallel, &f) != 0) {
    snprintf(err, errlen, "%s", f.msg);
    goto fail;
  }
  if (settings(e, err, errlen) != 0)
    goto fail;
  /* No sequence holds more than budget + lookahead positions in a pass;
   * a pass holds at most lookahead + 1 tokens of each. */
  uint64_t cells = ((uint64_t)e->budget + e->lookahead + 255) / 256 * 256;
  uint64_t batch = ((uint64_t)e->lookahead + 1) * o->parallel;
  if (cells * o->parallel > INT32_MAX || batch > INT32_MAX) {
    snprintf(err, errlen, "budget %u and lookahead %u with --parallel %u "
             "need more KV cells than llama.cpp allows", e->budget,
             e->lookahead, o->parallel);
    goto fail;
  }
  lm_opts_t lo = {.n_ctx = (uint32_t)cells, .n_batch = (uint32_t)batch,
                  .n_seq = o->parallel};
  if (lm_context(lm, &lo, &o->lm, err, errlen) != 0)
    goto fail;
  /* A conversation goes back at most half its window's unpinned part;
   * it keeps the tokens of its window and as many again unfolded. */
  e->max_back = e->budget > e->sinks ? (e->budget - e->sinks) / 2 : 0;
  e->keep = (e->budget + e->lookahead + 4096) / HIST_BLOCK * HIST_BLOCK;
  if (getrandom(e->key, sizeof(e->key), 0) != sizeof(e->key)) {
    snprintf(err, errlen, "no random key for the conversations' digests");
    goto fail;
  }
  e->slot = calloc(e->n_slot, sizeof(*e->slot));
  e->sub = calloc(2 * (size_t)e->n_slot, sizeof(*e->sub));
  e->got = calloc(2 * (size_t)e->n_slot, sizeof(*e->got));
  e->probs = calloc(1, sizeof(token_ev_t) +
                           SERVE_PROBS_MAX * sizeof(e->probs->top[0]));
  if (e->slot == NULL || e->sub == NULL || e->got == NULL ||
      e->probs == NULL) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  if (o->dump != NULL) {
    if (dump_open(&e->dumpf, o->dump) != 0) {
      snprintf(err, errlen, "cannot write --dump %s: %s", o->dump,
               strerror(errno));
      goto fail;
    }
    e->dump = &e->dumpf;
    e->trace = (seq_trace_t){trace_remove, e->dump};
    e->tr = &e->trace;
    dump_start(e->dump, o->lm.model, lm->n_vocab, e->budget, e->sinks,
               e->lookahead, e->n_slot, 0, "original");
  }
  if (conv_store_open(e, err, errlen) != 0)
    goto fail;
  const char *pl = getenv("EVICTD_LLAMA_PIPELINE");
  e->pipeline = pl == NULL || strcmp(pl, "off") != 0;
  const char *pk = getenv("EVICTD_LLAMA_PACK");
  e->pack = CELL_PAD;
  if (pk != NULL && *pk != '\0') {
    char *end;
    unsigned long v = strtoul(pk, &end, 10);
    if (*end != '\0' || v > 65536 || pk[0] == '-') {
      snprintf(err, errlen, "EVICTD_LLAMA_PACK=%s: give 0 to 65536 (the "
               "cells' round figure packing keeps to; 0: never pack, "
               "default %u, llama.cpp's)", pk, CELL_PAD);
      goto fail;
    }
    e->pack = (uint32_t)v;
  }
  const char *rn = getenv("EVICTD_LLAMA_RUN");
  e->run = ENGINE_RUN;
  if (rn != NULL) {
    char *end;
    unsigned long v = strtoul(rn, &end, 10);
    if (*rn == '\0' || *end != '\0' || v < 1 || v > 4096) {
      snprintf(err, errlen, "EVICTD_LLAMA_RUN=%s: give 1 to 4096 (1: a "
               "step per generated token)", rn);
      goto fail;
    }
    e->run = (uint32_t)v;
  }
  if (sem_init(&e->started, 0, 0) != 0 ||
      pthread_create(&e->thread, NULL, engine_main, e) != 0) {
    snprintf(err, errlen, "cannot start the engine thread");
    goto fail;
  }
  while (sem_wait(&e->started) != 0 && errno == EINTR)
    ;
  if (e->warm_rc != 0) {
    pthread_join(e->thread, NULL);
    snprintf(err, errlen, "the warm-up pass failed: %s", e->warm_err);
    goto fail;
  }
  *out = e;
  return 0;
fail:
  engine_free(e);
  return -1;
}

void engine_settings(const engine_t *e, uint32_t *budget, uint32_t *sinks,
                     uint32_t *lookahead) {
  *budget = e->budget;
  *sinks = e->sinks;
  *lookahead = e->lookahead;
}

void engine_stop(engine_t *e) {
  tq_stop(e->q);
  pthread_join(e->thread, NULL);
  engine_free(e);
}
