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
 * (pipelining: the round trip leaves the critical path). This file is
 * the thread and its loop; engine_int.h says how the rest is laid out. */
#include "serve/engine/engine.h"

#include <errno.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/sampler.h"
#include "common/seq.h"
#include "serve/engine/engine_int.h"

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

/* One iteration: the answers taken back, the steps of the choices that
 * have none sent and waited for (as long as their lanes are on time),
 * then the choices whose steps are answered decode: their next steps sent
 * ahead, ONE pass, the answers followed, the tokens drawn. A choice whose
 * lane is late sits out, its cells kept. */
static void iterate(engine_t *e) {
  double t0 = clock_now();
  e->tokens = e->steps = e->ahead = 0;
  steps_collect(e, choices_orphan);
  steps_now(e);
  lanes_wait(e->lanes, e->grace, t0 + e->grace);
  steps_collect(e, choices_orphan);
  pass_overdue(e, clock_now());
  pass_end_failed(e);
  publish(e, t0, false);
  if (steps_ready(e) == 0) {
    pass_end_failed(e);
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
  double t1 = clock_now();
  steps_ahead(e);
  pass_run(e, t0, t1);
}

/* --cache-dir's writer's figures shown on the board when they moved
 * (it writes while the engine idles); when to look again (0: nothing
 * waits to be written). */
static double disk_watch(engine_t *e, double now) {
  uint64_t w, b, err;
  uint32_t pending;
  store_disk(e->store, &w, &b, &err, &pending);
  if (w + err != e->disk_seen) {
    e->disk_seen = w + err;
    publish(e, now, true);
  }
  return pending > 0 ? now + 0.1 : 0;
}

/* Ends the tasks whose client went away, before the next pass. */
static void cancellations(engine_t *e) {
  for (uint32_t i = 0; i < e->n_slot; i++) {
    task_t *t = e->slot[i].task;
    if (t != NULL && tq_cancelled(e->q, t)) {
      say("the client of session %s went away: its cells and session are "
          "deleted\n", e->slot[i].s.session);
      choices_end_task(e, t, NULL);
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
  publish(e, clock_now(), true);
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
    /* Idle, it wakes for the next parked conversation to write. */
    double now = clock_now(), due = conv_sync(e, now, false);
    double look = disk_watch(e, now);
    if (look > 0 && (due == 0 || look < due))
      due = look;
    while ((t = tq_admit(e->q, e->n_slot - e->used, e->used == 0, due,
                         &stop))) {
      choices_admit(e, t);
      took = true;
    }
    if (took) /* GET /slots shows a task decoding from its start */
      publish(e, clock_now(), true);
    if (stop)
      break;
    cancellations(e);
    if (e->used > 0) {
      iterate(e);
      /* Idle next: what it leaves (parked conversations) shown now. */
      if (e->used == 0)
        publish(e, clock_now(), true);
    }
  }
  /* Stopping: queued tasks are refused, running ones end; their sessions
   * are deleted through the lanes, which send what they have in hand for
   * two seconds at most (a shutdown does not wait on a dead daemon). An
   * orphan's session is deleted behind its step, in its lane. */
  fault_t f;
  fault_set(&f, 503, "shutting_down", "the server is shutting down");
  tq_drain(e->q, &f);
  pass_fail_all(e, &f);
  for (uint32_t i = 0; i < e->n_slot; i++)
    if (e->slot[i].orphan) /* its file goes with its session (below) */
      store_unlink(e->store, e->slot[i].file);
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
                 board_t *board, char *err, size_t errlen) {
  engine_t *e = calloc(1, sizeof(*e));
  fault_t f;
  if (e == NULL)
    return snprintf(err, errlen, "out of memory"), -1;
  e->o = o;
  e->lm = lm;
  e->q = q;
  e->board = board;
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
  /* A checkpoint goes back to evictd by adoption (re-homing): none
   * without it (EVICTD_LLAMA_REHOME=off, the negative controls). */
  e->ck_max = lanes_flags(e->lanes)->rehome && lanes_flags(e->lanes)->expect
                  ? o->ctx_checkpoints * o->parallel
                  : 0;
  e->sync_s = o->cache_write_ms / 1e3;
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
  store_trim_ckpt(e->store, e->ck_max); /* those found in --cache-dir */
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
