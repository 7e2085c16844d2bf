/* What the files of serve's engine share: a choice's state and the
 * engine's, and each file's part. The engine thread's loop (engine.c)
 * calls one iteration's pass (pass.c), which ends choices and tasks
 * (choices.c); those take and leave slots, whose conversations are parked
 * and saved (park.c over store.c and hist.c); steps go to evictd through
 * the lanes (steps.c); the board is told what changed (publish.c). Every
 * call runs that way down, none back up. Internal to serve/engine/. */
#ifndef EVICTD_LLAMA_SERVE_ENGINE_INT_H
#define EVICTD_LLAMA_SERVE_ENGINE_INT_H

#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/dump.h"
#include "common/lanes.h"
#include "common/sampler.h"
#include "common/seq.h"
#include "serve/engine/hist.h"
#include "serve/engine/store.h"
#include "serve/engine/text.h"
#include "serve/opts.h"
#include "serve/queue/stats.h"
#include "serve/queue/tasks.h"

/* llama.cpp's round figure for the cells a pass attends over (its
 * get_n_kv pads to at least 256): pass.c packs a sequence's cells to it,
 * engine.c keeps the default budget below a multiple of it. */
#define CELL_PAD 256

/* A prompt's last CK_TAIL tokens are a pass of their own where a
 * checkpoint is kept before them (park.c), so that the same prompt again
 * decodes only those: llama-server's figure for the same. */
#define CK_TAIL 4

typedef struct engine_s engine_t;

/* One sequence: a choice of a task. Its steps go through its lane (the
 * evictd instance its session lives on, or a connection of its own behind
 * a proxy): at most one is out at a time, and an answered one waits,
 * ready, for the pass it belongs to. Two items take turns: the next step
 * goes out (ahead of this iteration's pass) while this one's answer is
 * still to be followed. */
typedef struct choice_s {
  seq_t s;                /* id: the slot's index */
  task_t *task;           /* NULL: the slot is free (or an orphan's) */
  uint32_t index;         /* the choice's number in its task */
  llama_token *hist;      /* the token at each position from hbase on
                             (hist_at); position n's is the one pending */
  size_t cap;
  uint32_t hbase;         /* the positions below are folded into hdig */
  uint64_t hdig;          /* the digest of their tokens (hist_fold) */
  uint32_t n;             /* positions below n are computed */
  uint32_t chunk;         /* positions this iteration's step adds */
  int32_t out;            /* its row of logits in the pass, or -1 */
  uint32_t tokens;        /* generated */
  sampler_t smp;
  text_t text;
  bool forked;            /* a choice past the first has its prompt */
  bool failed;            /* its step failed: its task fails (fault) */
  fault_t fault;
  bool decodes;           /* in this iteration's pass */
  uint32_t lane;          /* its session's */
  lane_item_t item[2];
  lane_item_t *sent;      /* the step out (in its lane), or NULL */
  lane_item_t *ready;     /* an answered step not yet followed, or NULL;
                             a run of generated positions (steps.c's
                             run_len) stays here until its last position
                             is decoded, followed at its first */
  bool orphan;            /* its task ended while a step was out: the
                             slot is given back (or parked, keep) when the
                             step comes back */
  bool keep;              /* an orphan to park, not give back */
  bool parked;            /* no task: the slot holds a conversation, its
                             cells, its session and hist[0..n) (park.c) */
  double used_at;         /* when its conversation last decoded */
  uint64_t gen;           /* its conversation's generation: new each time
                             a request takes it (engine's e->gens) */
  uint32_t peak;          /* the most cells it held in a pass since its
                             cells were last packed (pack) */
  uint32_t start;         /* where its task's prompt began decoding (the
                             positions below kept from a conversation) */
  uint32_t ck_at;         /* the boundary of its last checkpoint (0:
                             none in this task) */
  char file[32];          /* its conversation's file in --cache-dir ("":
                             none yet) */
  /* Its conversation's newest checkpoint, written with it ("": none). */
  char ck_key[SEQ_ID_MAX + 1];
  bool dirty;             /* parked, and not written since */
  uint8_t from;           /* where its conversation was taken from
                             (cache_from_t; conv_take, conv_find) */
  double synced;          /* when it was last written */
} choice_t;

struct engine_s {
  const serve_opts_t *o;
  lm_t *lm;
  tq_t *q;
  board_t *board;         /* the figures /metrics and /slots read */
  lanes_t *lanes;
  evd_session_cfg_t cfg;
  uint32_t budget, sinks, lookahead;
  choice_t *slot;         /* --parallel of them */
  uint32_t n_slot, used;  /* used: slots taken (orphans' included) */
  lane_item_t **sub;      /* room for one submission per slot, twice */
  lane_item_t **got;      /* room for what lanes_collect hands back */
  bool pipeline;          /* steps go ahead (EVICTD_LLAMA_PIPELINE=off:
                             not, for benchmarks' before and after) */
  uint32_t run;           /* the most generated positions one step takes
                             while no victim can fall (EVICTD_LLAMA_RUN;
                             1: a step per token) */
  double grace;           /* how long an iteration waits for a lane */
  uint64_t tokens;        /* this iteration's */
  uint64_t steps, ahead;  /* this iteration's items sent, and ahead */
  double last_lanes;      /* when the lanes' states were last published */
  store_t *store;         /* saved conversations (store.h), or NULL */
  uint32_t max_back;      /* the most positions a continued conversation
                             goes back */
  conv_counts_t cc;
  token_ev_t *probs;      /* room for a drawn token's candidates */
  uint8_t *packbuf;       /* a sequence's cells while they are packed */
  size_t packcap;
  uint32_t pack;          /* the cells' round figure packing keeps to
                             (EVICTD_LLAMA_PACK; 0: never packed) */
  uint64_t gens;          /* the last generation given out */
  uint64_t key[2];        /* the digests' SipHash key (kept in --cache-dir) */
  uint32_t keep;          /* tokens a conversation keeps unfolded behind
                             its newest: room to go back and to match */
  uint32_t ck_max;        /* the most checkpoints kept (--ctx-checkpoints
                             per slot; 0: none) */
  uint64_t ck_names;      /* the last checkpoint's number */
  double sync_s;          /* --cache-write-ms: a parked conversation is
                             written within this of parking */
  uint64_t disk_seen;     /* the writer's writes and failures published */
  dump_t dumpf;
  dump_t *dump;           /* --dump's record, or NULL */
  seq_trace_t trace;      /* its removals (NULL ud without --dump) */
  const seq_trace_t *tr;  /* &trace with --dump, else NULL */
  pthread_t thread;
  sem_t started;          /* posted once the thread has warmed up */
  int warm_rc;            /* the warm-up's outcome (0: done or none) */
  char warm_err[256];
};

/* ---- a conversation's tokens (choices.c) ------------------------------ */

/* A conversation keeps the tokens of its last positions (at least
 * e->keep of them: where a continuation may go back to, and compare a
 * prompt token by token); the older ones are folded into its digest
 * (hist.h). */
static inline llama_token *hist_at(choice_t *c, uint32_t q) {
  return &c->hist[q - c->hbase];
}

/* Folds choice c's oldest blocks while it keeps more than e->keep tokens
 * behind position c->n. */
void hist_compact(engine_t *e, choice_t *c);

/* Room in c's tokens up to position upto (exclusive); 0 or -1. */
int choice_reserve(choice_t *c, uint32_t upto);

/* Takes a task into slots (admit's rules in choices.c). */
void choices_admit(engine_t *e, task_t *t);

/* Ends a task: each of its choices leaves (their conversations parked
 * when it ended well and keeps them), then the task is done (failed with
 * f when f is not NULL). */
void choices_end_task(engine_t *e, task_t *t, const fault_t *f);

/* Choice c ends (why), what its text held back shown first. */
void choices_end(engine_t *e, choice_t *c, finish_t why);

/* An orphan's step came back (it): the slot parked or given back. */
void choices_orphan(engine_t *e, choice_t *c, lane_item_t *it);

/* The first choice finished the prompt: the others get it by evictd's
 * fork and llama_memory_seq_cp. 0, or -1 with f set. */
int choices_fork(engine_t *e, choice_t *first, fault_t *f);

/* ---- pass.c: one iteration's pass ------------------------------------ */

/* ONE pass of every choice that decodes, the answers followed, the cells
 * packed, then a token drawn for each (pass.c's rules); the iteration's
 * figures to the board. t0: when the iteration began; t_evd: what it
 * waited for evictd. */
void pass_run(engine_t *e, double t0, double t_evd);

/* Ends the tasks of the choices whose step failed (each task alone). */
void pass_end_failed(engine_t *e);

/* Ends, with 503, the tasks of the choices whose step has been out longer
 * than --reconnect-ms: their instance is down or hung. */
void pass_overdue(engine_t *e, double now);

/* Fails every running task (f). */
void pass_fail_all(engine_t *e, const fault_t *f);

/* ---- publish.c: the board -------------------------------------------- */

/* Publishes the lanes' and the slots' states for /metrics, /health and
 * /slots: at most ten times a second, unless force. */
void publish(engine_t *e, double now, bool force);

/* A task is done: what its end changed (its conversation parked) shown
 * on the board before its client has its answer, then finished. */
void publish_finish(engine_t *e, task_t *t, const fault_t *f);

/* ---- park.c: conversations, parked, saved, continued ----------------- */

/* Gives c's slot back: its cells leave llama.cpp's cache and its session
 * evictd (through its lane, without waiting). */
void engine_give_back(engine_t *e, choice_t *c);

/* Parks choice c, whose task ended: its slot keeps the conversation. */
void conv_park(engine_t *e, choice_t *c);

/* The slot choice `index` of task t takes, and the conversation it
 * continues: for the first choice of a task that may (cache_prompt), the
 * parked or saved conversation that keeps most of t's prompt (its slot,
 * *m the positions kept), else a free slot, else the least recently used
 * parked one, saved or dropped first (*m 0), or a checkpoint (a
 * prompt that extends it whole) restored under session id (the task's,
 * routed to an instance that is up). NULL when every slot is taken. A
 * restored conversation is put in the slot here. */
choice_t *conv_take(engine_t *e, task_t *t, uint32_t index, uint32_t *m,
                    const char *id);

/* The slot of the conversation task t continues by id (t->cont, whose
 * computed positions must be t->base), a saved one restored into a free
 * slot; NULL with f set (404: no longer kept; 409: being continued, or
 * moved on since). */
choice_t *conv_find(engine_t *e, task_t *t, fault_t *f);

/* Makes the store of saved conversations (--cache-ram, --cache-dir,
 * which it reads); 0, or -1 with err set (e->store, when made, is closed
 * by conv_store_close). */
int conv_store_open(engine_t *e, char *err, size_t errlen);

/* At shutdown: the parked conversations saved (with --cache-dir) or
 * dropped, then the store closed. */
void conv_store_close(engine_t *e);

/* The conversations' counters and gauges now. */
void conv_counts(engine_t *e, conv_counts_t *out);

/* Writes the parked conversations not written since they parked whose
 * --cache-write-ms is up (all of them when all). When the next one is due
 * (0: none waits). */
double conv_sync(engine_t *e, double now, bool all);

/* Whether choice c's task keeps checkpoints: its first choice, a task
 * that keeps its conversation, with a store, and a window its prompt and
 * answer can overflow (else going back loses nothing: hist.h). */
bool conv_ckpt_wanted(const engine_t *e, const choice_t *c);

/* Keeps a checkpoint of c at position c->n, before the pass that decodes
 * from there: its cells, tokens and window as they are, in the store, the
 * oldest checkpoints beyond e->ck_max dropped. A later prompt that
 * extends it continues from it (conv_take), exactly as c goes on now. Once
 * per boundary; nothing when it does not fit. */
void conv_checkpoint(engine_t *e, choice_t *c);

/* ---- steps.c: steps to evictd ---------------------------------------- */

/* The positions choice c steps from position n on (*first and the count
 * returned): a prompt chunk of at most `lookahead` (position 0, the BOS,
 * needs none, so a prompt of the BOS alone steps nothing before its first
 * draw), else its pending token. */
uint32_t steps_chunk(const engine_t *e, const choice_t *c, uint32_t n,
                     uint32_t *first);

/* Whether c's answered step (c->ready) holds position n: a prompt chunk,
 * a generated position, or a run of them stepped at once. */
bool steps_covers(const choice_t *c, uint32_t n);

/* Takes back the steps the lanes answered: each judged (seq_verdict) and
 * ready for its pass, or sent again to re-home its session, or failed
 * (c->failed); an orphan's gives its slot back or parks it (orphan:
 * choices_orphan, with the step that came back). A truncation's answer
 * is followed here. */
void steps_collect(engine_t *e,
                   void (*orphan)(engine_t *, choice_t *, lane_item_t *));

/* Sends this iteration's step of every choice that decodes and has
 * neither a step out nor one answered: how many. */
size_t steps_now(engine_t *e);

/* Sends the next iteration's step of every choice that decodes now and
 * surely goes on (not at its length, not a first choice whose prompt ends
 * now and whose task forks it: the fork copies the session as the prompt
 * left it), before this iteration's pass. How many (none when e->pipeline
 * is off). */
size_t steps_ahead(engine_t *e);

/* Marks the choices that decode in this iteration's pass (c->decodes,
 * c->chunk): those whose step for it is answered, and those that need
 * none. How many. */
uint32_t steps_ready(engine_t *e);

#endif
