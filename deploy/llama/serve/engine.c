/* evictd-llama serve's engine thread (engine.h). A task of n choices takes
 * n sequences: the first decodes the prompt, in chunks of `lookahead`
 * positions; then evictd forks its session and llama.cpp copies its cells
 * into the others (the prompt decoded once), and every choice draws its
 * first token from the prompt's last logits with a generator of its own.
 * Positions are the tokens' absolute positions. A step needs positions
 * alone, not tokens, so the next iteration's steps go to evictd before
 * this iteration's llama_decode and are answered while it runs
 * (pipelining: the round trip leaves the critical path). */
#include "serve/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/grow.h"
#include "common/sampler.h"
#include "common/seq.h"
#include "serve/engine_int.h"
#include "serve/text.h"

#define say(...) fprintf(stderr, "evictd-llama serve: " __VA_ARGS__)

static int reserve(choice_t *c, uint32_t need) {
  return grow(&c->hist, &c->cap, need, sizeof(*c->hist));
}

/* A choice leaves its slot: its cells leave llama.cpp's cache and its
 * session evictd (quick: best effort, after evictd failed). */
static void leave(engine_t *e, choice_t *c, bool quick) {
  fault_t f;
  llama_memory_seq_rm(e->lm->mem, c->s.id, -1, -1);
  if (seq_close(&e->link, &c->s, quick, &f) != 0)
    say("deleting session %s failed: %s\n", c->s.session, f.msg);
  seq_free(&c->s);
  text_clear(&c->text);
  c->task = NULL;
  c->ahead = false;
  tq_sequences(e->q, --e->used);
}

/* Ends a task: each of its choices leaves, then the task is done (failed
 * with f when f is not NULL). */
static void end_task(engine_t *e, task_t *t, const fault_t *f, bool quick) {
  for (uint32_t i = 0; i < e->n_slot; i++)
    if (e->slot[i].task == t)
      leave(e, &e->slot[i], quick);
  tq_finish(e->q, t, f);
}

/* Takes a task into free slots: its choices' sessions are its id (one
 * choice) or ID~I; the first holds the prompt. (nginx's key is an id up to
 * its first '~', so that in a pool the forks' children live on their
 * parent's instance, where the fork makes them: deploy/SCALING.md.) */
static void admit(engine_t *e, task_t *t) {
  fault_t f;
  uint32_t k = 0;
  for (uint32_t i = 0; i < e->n_slot && k < t->want.n; i++) {
    choice_t *c = &e->slot[i];
    if (c->task != NULL)
      continue;
    char id[SEQ_ID_MAX + 1];
    snprintf(id, sizeof(id), t->want.n == 1 ? "%s" : "%s~%u", t->id, k);
    if (seq_init(&c->s, (int32_t)i, id, POS_ORIGINAL) != 0 ||
        reserve(c, t->n_prompt + 2) != 0) {
      seq_free(&c->s);
      fault_set(&f, 500, "out_of_memory", "out of memory");
      end_task(e, t, &f, false);
      return;
    }
    c->task = t;
    c->index = k++;
    c->n = c->tokens = 0;
    /* The first choice's session is made by its first step (a new one
     * holds position 0), the others' by the fork. */
    seq_start(&c->s, &e->cfg);
    c->s.created = c->index == 0;
    c->smp.temp = t->want.temp;
    c->smp.top_p = t->want.top_p;
    c->smp.state = t->want.seed + c->index;
    c->smp.n_ban = t->want.ignore_eos ? lm_end_tokens(e->lm, c->smp.ban) : 0;
    c->forked = c->failed = false;
    e->used++;
    if (c->index == 0)
      memcpy(c->hist, t->prompt, t->n_prompt * sizeof(*c->hist));
  }
  tq_sequences(e->q, e->used);
}

/* The first choice finished the prompt: the others get it by evictd's
 * fork and llama_memory_seq_cp. */
static int fork_choices(engine_t *e, choice_t *first, fault_t *f) {
  task_t *t = first->task;
  evd_view_t v;
  /* A prompt of the BOS alone stepped nothing, so its session is made
   * here, as its first step would have made it. */
  if (t->n_prompt == 1 &&
      link_create(&e->link, first->s.session, &e->cfg, &v, f) != 0)
    return -1;
  for (uint32_t i = 0; i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (c->task != t || c == first)
      continue;
    if (reserve(c, t->n_prompt + 2) != 0)
      return fault_set(f, 500, "out_of_memory", "out of memory");
    if (seq_fork(&e->link, &first->s, &c->s, e->lm, t->n_prompt - 1, f))
      return -1;
    memcpy(c->hist, first->hist, t->n_prompt * sizeof(*c->hist));
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
    tq_text(e->q, t, c->index, show, len);
  tq_end(e->q, t, c->index, why, c->tokens);
  leave(e, c, false);
  for (uint32_t i = 0; i < e->n_slot; i++)
    if (e->slot[i].task == t)
      return;
  tq_finish(e->q, t, NULL);
}

/* The token drawn for c at position c->n: its bytes shown as far as they
 * may be, then the end checked (an end token, a stop string, the length
 * asked for). */
static void emit(engine_t *e, choice_t *c, const float *logits) {
  task_t *t = c->task;
  llama_token tok = sampler_draw(&c->smp, logits, e->lm->n_vocab, NULL);
  c->hist[c->n] = tok;
  c->tokens++;
  e->tokens++;
  if (lm_is_end(e->lm, tok) && !t->want.ignore_eos) {
    end_choice(e, c, FIN_EOS);
    return;
  }
  char piece[256];
  const char *show;
  size_t len;
  int n = lm_piece(e->lm, tok, piece, sizeof(piece));
  /* A piece over 256 bytes: none in any vocabulary served so far. */
  int stop = text_push(&c->text, piece, n > 0 ? (size_t)n : 0,
                       t->want.stop, t->want.n_stop, &show, &len);
  if (stop >= 0)
    tq_text(e->q, t, c->index, show, len);
  if (stop == 1)
    end_choice(e, c, FIN_STOP);
  else if (c->tokens >= t->want.n_predict)
    end_choice(e, c, FIN_LIMIT);
}

/* Fails every running task after a failure of the whole iteration. */
static void fail_all(engine_t *e, const fault_t *f, bool quick) {
  for (uint32_t i = 0; i < e->n_slot; i++)
    if (e->slot[i].task != NULL)
      end_task(e, e->slot[i].task, f, quick);
}

/* ONE pass of every choice that decodes; -1 when llama.cpp failed. */
static int pass(engine_t *e, fault_t *f) {
  char err[256];
  lm_clear(e->lm);
  for (uint32_t i = 0; i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (c->task == NULL || c->failed || (c->index > 0 && !c->forked))
      continue;
    uint32_t n_prompt = c->task->n_prompt, from = c->n, to = c->n + 1;
    if (c->n < n_prompt)
      to = (c->n == 0 ? 1 : c->n) + c->chunk;
    for (uint32_t q = from; q < to; q++) {
      bool last = q + 1 == to && to >= n_prompt;
      if (seq_put(&c->s, e->lm, c->hist[q], q, last, f) != 0)
        return -1;
      if (last)
        c->out = e->lm->batch.n_tokens - 1;
    }
  }
  if (e->lm->batch.n_tokens > 0 && lm_decode(e->lm, err, sizeof(err)) != 0)
    return fault_set(f, 500, "decode_failed", "%s", err);
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
    const float *l = lm_logits(e->lm, c->out);
    task_t *t = c->task;
    bool prompt_done = c->index == 0 && c->n == t->n_prompt && c->tokens == 0;
    if (prompt_done && t->want.n > 1) {
      if (fork_choices(e, c, &f) != 0) {
        end_task(e, t, &f, false);
        continue;
      }
      /* Every choice draws its first token from these logits. */
      for (uint32_t j = 0; j < e->n_slot; j++)
        if (e->slot[j].task == t && &e->slot[j] != c &&
            reserve(&e->slot[j], e->slot[j].n + 2) == 0)
          emit(e, &e->slot[j], l);
      if (c->task != t) /* the others ended the task already */
        continue;
    }
    if (reserve(c, c->n + 2) != 0) {
      fault_set(&f, 500, "out_of_memory", "out of memory");
      end_task(e, t, &f, false);
      continue;
    }
    emit(e, c, l);
  }
}

/* The answer choice c follows this iteration: item j of e->now, or its
 * step's that went ahead. */
static const evd_answer_t *answer_of(engine_t *e, const choice_t *c,
                                     size_t j, size_t k) {
  return j < k ? &e->now.results[j].answer : &c->got;
}

/* One iteration of every running choice: the steps not sent ahead, the
 * next iteration's steps sent, ONE pass, the answers followed, the next
 * steps' answers read, then the tokens drawn. */
static void iterate(engine_t *e) {
  double t0 = clock_now(), t_evd;
  fault_t f;
  size_t m, k = steps_now(e, &m), k_next = 0;
  e->tokens = 0;
  link_unkeep(&e->link);
  if (k > 0 && seq_batch(&e->link, e->now.sq, e->now.steps, k,
                         e->now.results, &f) != 0) {
    say("%s\n", f.msg);
    /* evictd unreachable: its sessions are deleted best effort only. */
    fail_all(e, &f, f.status == 503);
    return;
  }
  for (size_t j = 0; j < k; j++) {
    choice_t *c = e->now.who[j];
    c->failed = link_item(&e->now.results[j], c->s.session, &c->fault) != 0;
  }
  if ((k_next = steps_ahead(e)) > 0)
    seq_batch_send(&e->link, e->next.sq, e->next.steps, k_next);
  double t1 = clock_now();
  t_evd = t1 - t0;
  int rc = pass(e, &f);
  double t2 = clock_now();
  /* Follow the answers (llama.cpp alone: a failure ends its task once the
   * batch ahead is read), then read the batch ahead, whose re-homing
   * adopts what the caches hold now. */
  for (size_t j = 0; rc == 0 && j < k + m; j++) {
    choice_t *c = j < k ? e->now.who[j] : e->early[j - k];
    fault_t g;
    if (!c->failed && seq_follow(&c->s, e->lm, answer_of(e, c, j, k),
                                 c->chunk, NULL, &g) != 0) {
      c->fault = g;
      c->failed = true;
    }
  }
  if (k_next > 0) {
    double t3 = clock_now();
    if (seq_batch_recv(&e->link, e->next.sq, e->next.steps, k_next,
                       e->next.results, &f) != 0) {
      if (rc == 0)
        say("%s\n", f.msg);
      fail_all(e, &f, f.status == 503);
      return;
    }
    for (size_t j = 0; j < k_next; j++)
      if (steps_keep(e, j) != 0) {
        fault_set(&f, 500, "out_of_memory", "out of memory");
        rc = -1;
      }
    t_evd += clock_now() - t3;
  }
  if (rc != 0) {
    say("%s\n", f.msg);
    fail_all(e, &f, false);
    return;
  }
  /* The choices whose step failed end alone (their whole task); the
   * others decoded in this pass and draw. */
  for (uint32_t i = 0; i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (c->task != NULL && c->failed) {
      say("%s\n", c->fault.msg);
      c->failed = false;
      end_task(e, c->task, &c->fault, false);
    }
  }
  for (uint32_t i = 0; i < e->n_slot; i++) {
    choice_t *c = &e->slot[i];
    if (c->task != NULL && (c->chunk > 0 || c->out >= 0))
      c->n = c->n < c->task->n_prompt ? (c->n == 0 ? 1 : c->n) + c->chunk
                                      : c->n + 1;
  }
  draw_all(e);
  evd_client_stats_t cs;
  evd_client_stats(e->link.c, &cs);
  tq_count(e->q, e->tokens, k + k_next, k_next, t_evd, t2 - t1,
           clock_now() - t0, &cs, &e->link.n, e->link.per_session);
}

/* Ends the tasks whose client went away, before the next pass. */
static void cancellations(engine_t *e) {
  for (uint32_t i = 0; i < e->n_slot; i++) {
    task_t *t = e->slot[i].task;
    if (t != NULL && tq_cancelled(e->q, t)) {
      say("the client of session %s went away: its cells and session are "
          "deleted\n", e->slot[i].s.session);
      end_task(e, t, NULL, false);
    }
  }
}

static void *engine_main(void *arg) {
  engine_t *e = arg;
  bool stop = false;
  for (;;) {
    task_t *t;
    while ((t = tq_admit(e->q, e->n_slot - e->used, e->used == 0, &stop)))
      admit(e, t);
    if (stop)
      break;
    cancellations(e);
    if (e->used > 0)
      iterate(e);
  }
  /* Stopping: queued tasks are refused, running ones end; their sessions
   * are deleted best effort (a shutdown does not wait on a dead daemon). */
  fault_t f;
  fault_set(&f, 503, "shutting_down", "the server is shutting down");
  tq_drain(e->q, &f);
  fail_all(e, &f, true);
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
  if (cfg->budget < 0 || cfg->sinks < 0 || cfg->lookahead < 0) {
    char probe[64];
    snprintf(probe, sizeof(probe), "serve-%ld-probe", (long)getpid());
    if (link_create(&e->link, probe, cfg, &v, &f) != 0 ||
        link_delete(&e->link, probe, false, &f) != 0)
      return snprintf(err, errlen, "cannot read evictd's session defaults "
                      "(give --budget, --sinks and --lookahead to start "
                      "without it): %s", f.msg), -1;
  }
  e->budget = v.budget;
  e->sinks = v.sinks;
  e->lookahead = v.lookahead;
  e->cfg = (evd_session_cfg_t){e->budget, e->sinks, e->lookahead, -1};
  return 0;
}

static void engine_free(engine_t *e) {
  for (uint32_t i = 0; e->slot != NULL && i < e->n_slot; i++) {
    free(e->slot[i].hist);
    text_free(&e->slot[i].text);
    sampler_free(&e->slot[i].smp);
    free(e->slot[i].got_buf);
  }
  free(e->slot);
  for (stepset_t *b = &e->now; b <= &e->next; b++) {
    free(b->steps);
    free(b->results);
    free(b->who);
    free(b->sq);
    free(b->pos);
  }
  free(e->early);
  link_close(&e->link);
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
  if (link_open(&e->link, &o->link, &f) != 0) {
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
  e->slot = calloc(e->n_slot, sizeof(*e->slot));
  e->early = calloc(e->n_slot, sizeof(*e->early));
  bool oom = e->slot == NULL || e->early == NULL;
  for (stepset_t *b = &e->now; b <= &e->next; b++) {
    b->steps = calloc(e->n_slot, sizeof(*b->steps));
    b->results = calloc(e->n_slot, sizeof(*b->results));
    b->who = calloc(e->n_slot, sizeof(*b->who));
    b->sq = calloc(e->n_slot, sizeof(*b->sq));
    b->pos = calloc(batch, sizeof(*b->pos));
    oom = oom || !b->steps || !b->results || !b->who || !b->sq || !b->pos;
  }
  if (oom) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  const char *pl = getenv("EVICTD_LLAMA_PIPELINE");
  e->pipeline = pl == NULL || strcmp(pl, "off") != 0;
  if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
    snprintf(err, errlen, "cannot start the engine thread");
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
