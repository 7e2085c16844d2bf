/* evictd-llama generate: the decode loops. Every sequence is an evictd
 * session and a llama.cpp sequence id; each iteration sends one request for
 * all sequences (a step, or a batch), runs one llama.cpp pass, and removes
 * from the cache exactly the positions evictd named: the victims of a step
 * after the pass that computed it (the new token attends to the window the
 * step found, as the policy says), the drafts a commit dropped and its
 * victims before the next pass, the positions a truncation removed at
 * once. llama.cpp picks the cells; positions are all it is told. */
#include "gen.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dump.h"
#include "evictd/client.h"
#include "lm.h"

typedef struct seq_s {
  int32_t id;           /* llama.cpp sequence id */
  char session[160];    /* evictd session id */
  llama_token *hist;    /* the token at each position; hist[n] is pending */
  llama_token *alt;     /* the runner-up where a token was sampled */
  uint32_t cap;
  uint32_t n;           /* positions below n are computed (or evicted) */
  uint32_t printed;     /* tokens streamed to stdout so far */
  uint64_t rng;
  bool done;            /* reached an end-of-generation token */
  bool created;         /* this run created the session (deleted if the
                           run fails) */
} seq_t;

/* Time per decode iteration, for --stats and the benchmark. */
typedef struct times_s {
  double *total, *evictd, *decode, *remove;
  size_t n, cap;
} times_t;

typedef struct gen_s {
  const gen_opts_t *o;
  lm_t target, draft;
  bool has_draft;
  evd_client_t *ev;
  dump_t dumpf;
  dump_t *dump;         /* &dumpf with --dump, else NULL */
  seq_t *seqs;
  uint32_t n_seqs;
  uint32_t n_prompt;    /* prompt tokens, BOS included (positions 0..) */
  uint32_t budget, sinks, lookahead;
  bool stream;          /* tokens go to stdout as they become final */
  /* per-iteration request memory, sized once */
  evd_step_t *steps;
  evd_batch_result_t *results;
  uint32_t *pos;
  uint32_t *idx;
  /* speculative state (one sequence) */
  uint32_t draft_next;  /* the draft cache has computed positions below */
  bool commit_due;
  uint32_t commit_at;   /* newest accepted position, to commit next */
  uint32_t drop_from, drop_to; /* the drafts that commit must drop */
  times_t times;
  uint64_t accepted, drafted;
} gen_t;

static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("evictd-llama: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

/* `what` is the request, e.g. "the step" ("the step of session X"). */
static int evd_fail(gen_t *g, const char *what, const char *session) {
  const evd_client_err_t *e = evd_client_error(g->ev);
  if (e->status != 0)
    return fail("evictd refused %s of session %s: %d %s: %s", what, session,
                e->status, e->code, e->message);
  return fail("%s of session %s failed: %s: %s", what, session, e->code,
              e->message);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int times_add(times_t *t, double total, double evd, double dec,
                     double rm) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 256;
    double *a[4] = {t->total, t->evictd, t->decode, t->remove};
    for (int i = 0; i < 4; i++) {
      double *p = realloc(a[i], cap * sizeof(double));
      if (p == NULL)
        return -1;
      a[i] = p;
    }
    t->total = a[0], t->evictd = a[1], t->decode = a[2], t->remove = a[3];
    t->cap = cap;
  }
  t->total[t->n] = total;
  t->evictd[t->n] = evd;
  t->decode[t->n] = dec;
  t->remove[t->n] = rm;
  t->n++;
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, size_t n) {
  if (n == 0)
    return 0;
  qsort(v, n, sizeof(*v), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double sum(const double *v, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++)
    s += v[i];
  return s;
}

/* ---- sequences and sampling ----------------------------------------- */

static int seq_reserve(seq_t *s, uint32_t need) {
  if (need <= s->cap)
    return 0;
  uint32_t cap = s->cap ? s->cap : 256;
  while (cap < need)
    cap *= 2;
  llama_token *h = realloc(s->hist, cap * sizeof(*h));
  if (h == NULL)
    return -1;
  s->hist = h;
  llama_token *a = realloc(s->alt, cap * sizeof(*a));
  if (a == NULL)
    return -1;
  s->alt = a;
  s->cap = cap;
  return 0;
}

static uint64_t splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* The token with the largest logit (the lowest id on a tie), and the
 * runner-up in *alt. */
static llama_token argmax2(const float *l, int n, llama_token *alt) {
  int best = 0, second = n > 1 ? 1 : 0;
  if (n > 1 && l[1] > l[0])
    best = 1, second = 0;
  for (int i = 2; i < n; i++) {
    if (l[i] > l[best])
      second = best, best = i;
    else if (l[i] > l[second])
      second = i;
  }
  if (alt != NULL)
    *alt = second;
  return best;
}

/* Greedy at temperature 0, else a draw from softmax(logits / temp) with the
 * sequence's own generator. */
static llama_token sample(gen_t *g, seq_t *s, const float *l,
                          llama_token *alt) {
  int n = g->target.n_vocab;
  llama_token best = argmax2(l, n, alt);
  if (g->o->temp <= 0)
    return best;
  double t = g->o->temp, z = 0;
  for (int i = 0; i < n; i++)
    z += exp(((double)l[i] - l[best]) / t);
  double u = (double)(splitmix(&s->rng) >> 11) * 0x1.0p-53 * z, c = 0;
  for (int i = 0; i < n; i++) {
    c += exp(((double)l[i] - l[best]) / t);
    if (u < c)
      return i;
  }
  return best;
}

static uint32_t decided(const gen_t *g, const seq_t *s) {
  return s->n - g->n_prompt + 1;
}

/* Writes the final tokens of a sequence not yet written, up to position
 * `upto` (exclusive) and the requested length. */
static void stream(gen_t *g, seq_t *s, uint32_t upto) {
  uint32_t end = g->n_prompt + g->o->n_predict;
  if (upto > end)
    upto = end;
  char buf[64];
  for (uint32_t p = g->n_prompt + s->printed; p < upto; p++, s->printed++) {
    int k = lm_piece(&g->target, s->hist[p], buf, sizeof(buf));
    fwrite(buf, 1, (size_t)k, stdout);
  }
  fflush(stdout);
}

/* The sequence's next token, at position s->n, from logits l. */
static int choose(gen_t *g, seq_t *s, const float *l) {
  if (seq_reserve(s, s->n + 2) != 0)
    return fail("out of memory");
  s->hist[s->n] = sample(g, s, l, &s->alt[s->n]);
  if (llama_vocab_is_eog(g->target.vocab, s->hist[s->n]))
    s->done = true;
  if (g->stream)
    stream(g, s, s->n + 1);
  return 0;
}

/* ---- following evictd's answers -------------------------------------- */

static void drop(gen_t *g, lm_t *lm, seq_t *s, const char *why,
                 const evd_list_t *l) {
  lm_remove(lm, s->id, l->v, l->n);
  dump_remove(g->dump, lm->label, s->id, why, l->v, l->n);
}

/* Removes what an answer says is gone from the target's cache (and the
 * draft's, whose cache mirrors the target's committed window). */
static void follow(gen_t *g, seq_t *s, const evd_answer_t *a) {
  drop(g, &g->target, s, "dropped", &a->dropped);
  drop(g, &g->target, s, "victims", &a->victims);
  drop(g, &g->target, s, "removed", &a->removed);
  if (g->has_draft) {
    drop(g, &g->draft, s, "victims", &a->victims);
    drop(g, &g->draft, s, "removed", &a->removed);
  }
}

static int send_step(gen_t *g, seq_t *s, const uint32_t *pos, size_t n,
                     bool tentative, bool commit, uint32_t commit_at,
                     evd_answer_t *a) {
  evd_step_t st = {.session = s->session, .positions = pos,
                   .n_positions = n, .tentative = tentative,
                   .has_commit = commit, .commit = commit_at};
  dump_step(g->dump, s->id, pos, n, tentative,
            commit ? (int64_t)commit_at : -1);
  if (evd_client_step(g->ev, &st, a) != 0)
    return evd_fail(g, "the step", s->session);
  return 0;
}

/* ---- the phases ------------------------------------------------------- */

/* The prompt, in chunks of `lookahead` positions: one evictd step and one
 * llama.cpp pass (of the target, and of the draft) per chunk, the chunk's
 * victims removed after it. Position 0 (BOS) is held by a new session from
 * the start, so the first pass computes it without a step. */
static int prefill(gen_t *g) {
  seq_t *s = &g->seqs[0];
  bool all = g->dump != NULL;
  for (uint32_t p = 0; p < g->n_prompt;) {
    uint32_t first = p == 0 ? 1 : p;
    uint32_t end = first + g->lookahead;
    if (end > g->n_prompt)
      end = g->n_prompt;
    uint32_t n = end > first ? end - first : 0;
    for (uint32_t i = 0; i < n; i++)
      g->pos[i] = first + i;
    evd_answer_t a;
    memset(&a, 0, sizeof(a));
    if (n > 0 && send_step(g, s, g->pos, n, false, false, 0, &a) != 0)
      return 1;
    lm_t *lms[2] = {&g->target, g->has_draft ? &g->draft : NULL};
    for (int m = 0; m < 2 && lms[m] != NULL; m++) {
      char err[256];
      lm_clear(lms[m]);
      for (uint32_t q = p; q < end; q++)
        lm_add(lms[m], s->hist[q], (int32_t)q, s->id,
               all || q + 1 == g->n_prompt);
      if (lm_decode(lms[m], err, sizeof(err)) != 0)
        return fail("%s", err);
      dump_pass(g->dump, lms[m]);
    }
    follow(g, s, &a);
    p = end;
  }
  s->n = g->n_prompt;
  if (g->has_draft)
    g->draft_next = g->n_prompt;
  return 0;
}

/* After the prompt: forks sequence 0 into the other samples (evictd fork,
 * llama_memory_seq_cp sharing the cells), then every sample draws its first
 * token from the prompt's last logits. */
static int fork_and_start(gen_t *g) {
  seq_t *s0 = &g->seqs[0];
  for (uint32_t i = 1; i < g->n_seqs; i++) {
    seq_t *s = &g->seqs[i];
    evd_view_t v;
    if (evd_client_fork(g->ev, s0->session, s->session, &v) != 0)
      return evd_fail(g, "the fork", s0->session);
    s->created = v.created;
    if (!v.created)
      return fail("session %s exists already (in the prompt's state); "
                  "delete it or pick another --session", s->session);
    llama_memory_seq_cp(g->target.mem, s0->id, s->id, -1, -1);
    dump_fork(g->dump, s0->id, s->id);
    if (seq_reserve(s, g->n_prompt + 2) != 0)
      return fail("out of memory");
    memcpy(s->hist, s0->hist, g->n_prompt * sizeof(*s->hist));
    s->n = g->n_prompt;
  }
  const float *l = lm_logits(&g->target, g->target.batch.n_tokens - 1);
  for (uint32_t i = 0; i < g->n_seqs; i++)
    if (choose(g, &g->seqs[i], l) != 0)
      return 1;
  return 0;
}

/* One decode iteration of every sequence still generating: one evictd
 * request (a step for one sequence, a batch for several), one pass, the
 * victims removed, the next tokens drawn. Sets *more to false when no
 * sequence needs another. */
static int iterate(gen_t *g, bool *more) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < g->n_seqs; i++) {
    seq_t *s = &g->seqs[i];
    if (s->done || decided(g, s) >= g->o->n_predict)
      continue;
    g->pos[k] = s->n;
    g->idx[k] = i;
    g->steps[k] = (evd_step_t){.session = s->session, .positions = &g->pos[k],
                               .n_positions = 1};
    dump_step(g->dump, s->id, &g->pos[k], 1, false, -1);
    k++;
  }
  *more = k > 0;
  if (k == 0)
    return 0;
  double t0 = now();
  evd_answer_t one;
  if (g->n_seqs == 1) {
    if (evd_client_step(g->ev, &g->steps[0], &one) != 0)
      return evd_fail(g, "the step", g->steps[0].session);
  } else {
    if (evd_client_batch(g->ev, g->steps, k, g->results) != 0)
      return evd_fail(g, "the batch", g->steps[0].session);
    for (uint32_t j = 0; j < k; j++)
      if (g->results[j].rc != 0) {
        const evd_client_err_t *e = &g->results[j].error;
        return fail("evictd refused the step of session %s: %d %s: %s",
                    g->steps[j].session, e->status, e->code, e->message);
      }
  }
  double t1 = now();
  char err[256];
  lm_clear(&g->target);
  for (uint32_t j = 0; j < k; j++) {
    seq_t *s = &g->seqs[g->idx[j]];
    lm_add(&g->target, s->hist[s->n], (int32_t)s->n, s->id, true);
  }
  if (lm_decode(&g->target, err, sizeof(err)) != 0)
    return fail("%s", err);
  dump_pass(g->dump, &g->target);
  double t2 = now();
  for (uint32_t j = 0; j < k; j++)
    follow(g, &g->seqs[g->idx[j]],
           g->n_seqs == 1 ? &one : &g->results[j].answer);
  double t3 = now();
  for (uint32_t j = 0; j < k; j++) {
    seq_t *s = &g->seqs[g->idx[j]];
    s->n++;
    if (decided(g, s) <= g->o->n_predict &&
        choose(g, s, lm_logits(&g->target, (int32_t)j)) != 0)
      return 1;
  }
  if (times_add(&g->times, now() - t0, t1 - t0, t2 - t1, t3 - t2) != 0)
    return fail("out of memory");
  return 0;
}

/* --rewind AT:K: takes the last K decided tokens back (an engine rejecting
 * a continuation): evictd truncates from the first of them, the cache
 * loses what evictd says it removed, and the first one is redrawn as the
 * runner-up of its logits, so the continuation really differs. */
static int rewind_seq(gen_t *g, seq_t *s) {
  uint32_t from = s->n + 1 - g->o->rewind_k;
  if (g->o->rewind_k == 0 || from < g->n_prompt)
    return fail("--rewind %u:%u reaches into the prompt", g->o->rewind_at,
                g->o->rewind_k);
  evd_answer_t a;
  dump_truncate(g->dump, s->id, from);
  if (evd_client_truncate(g->ev, s->session, from, &a) != 0)
    return evd_fail(g, "the truncate", s->session);
  follow(g, s, &a);
  s->hist[from] = s->alt[from];
  s->n = from;
  return 0;
}

/* One speculative iteration (one sequence, greedy): the draft model
 * proposes K tokens after the pending one; one evictd step sends the
 * pending token and the drafts as tentative positions, carrying the commit
 * of the previous iteration (so its dropped drafts and victims leave the
 * cache before this pass); the target computes all K + 1 in one pass and
 * keeps the drafts it would have chosen itself, plus its own next token. */
static int speculate(gen_t *g, bool *more) {
  seq_t *s = &g->seqs[0];
  uint32_t done = decided(g, s);
  uint32_t left = done < g->o->n_predict ? g->o->n_predict - done : 0;
  *more = left > 0 && !s->done;
  if (!*more)
    return 0;
  uint32_t K = g->o->draft_n < left ? g->o->draft_n : left;
  uint32_t n = s->n;
  bool all = g->dump != NULL;
  char err[256];
  double t0 = now(), t_dec = 0;
  if (seq_reserve(s, n + K + 2) != 0)
    return fail("out of memory");

  /* The draft catches up to the pending token, then proposes K. */
  for (uint32_t i = 0; i < K; i++) {
    double d0 = now();
    lm_clear(&g->draft);
    uint32_t from = i == 0 ? g->draft_next : n + i;
    for (uint32_t q = from; q <= n + i; q++)
      lm_add(&g->draft, s->hist[q], (int32_t)q, s->id, all || q == n + i);
    if (lm_decode(&g->draft, err, sizeof(err)) != 0)
      return fail("%s", err);
    dump_pass(g->dump, &g->draft);
    s->hist[n + i + 1] = argmax2(lm_logits(&g->draft, g->draft.batch.n_tokens
                                                          - 1),
                                 g->draft.n_vocab, NULL);
    t_dec += now() - d0;
  }
  g->draft_next = n + K;

  for (uint32_t i = 0; i <= K; i++)
    g->pos[i] = n + i;
  evd_answer_t a;
  double e0 = now();
  if (send_step(g, s, g->pos, K + 1, true, g->commit_due, g->commit_at,
                &a) != 0)
    return 1;
  double e1 = now();
  if (g->commit_due) {
    /* What the commit dropped must be the drafts the target rejected. */
    size_t want = g->drop_to >= g->drop_from ? g->drop_to - g->drop_from + 1
                                             : 0;
    bool same = a.dropped.n == want;
    for (size_t i = 0; same && i < want; i++)
      same = a.dropped.v[i] == g->drop_from + i;
    if (!same)
      return fail("evictd dropped %zu drafts, the engine rejected %zu "
                  "(positions %u..%u)", a.dropped.n, want, g->drop_from,
                  g->drop_to);
  }
  follow(g, s, &a);
  double r1 = now();

  lm_clear(&g->target);
  for (uint32_t i = 0; i <= K; i++)
    lm_add(&g->target, s->hist[n + i], (int32_t)(n + i), s->id, true);
  if (lm_decode(&g->target, err, sizeof(err)) != 0)
    return fail("%s", err);
  dump_pass(g->dump, &g->target);
  double d1 = now();
  t_dec += d1 - r1;

  uint32_t acc = 0;
  llama_token next = 0, alt = 0;
  for (;;) {
    next = argmax2(lm_logits(&g->target, (int32_t)acc), g->target.n_vocab,
                   &alt);
    if (acc == K || next != s->hist[n + acc + 1])
      break;
    acc++;
  }
  g->accepted += acc;
  g->drafted += K;
  /* The draft forgets its rejected drafts now (its cache is the engine's
   * own business); the target's go with the next commit. */
  if (acc + 1 < K) {
    llama_memory_seq_rm(g->draft.mem, s->id, (llama_pos)(n + acc + 1), -1);
    if (g->dump != NULL) {
      uint32_t rej[256];
      size_t m = 0;
      for (uint32_t q = n + acc + 1; q < n + K && m < 256; q++)
        rej[m++] = q;
      dump_remove(g->dump, "draft", s->id, "rejected", rej, m);
    }
    g->draft_next = n + acc + 1;
  }
  g->commit_due = true;
  g->commit_at = n + acc;
  g->drop_from = n + acc + 1;
  g->drop_to = n + K;
  s->n = n + acc + 1;
  s->hist[s->n] = next;
  s->alt[s->n] = alt;
  if (g->stream)
    stream(g, s, s->n + 1);
  if (times_add(&g->times, now() - t0, e1 - e0, t_dec, r1 - e1) != 0)
    return fail("out of memory");
  return 0;
}

/* The last commit of a speculative run, so that the session and the cache
 * end with only accepted positions. */
static int settle(gen_t *g) {
  seq_t *s = &g->seqs[0];
  if (!g->commit_due)
    return 0;
  evd_answer_t a;
  dump_commit(g->dump, s->id, g->commit_at);
  if (evd_client_commit(g->ev, s->session, g->commit_at, &a) != 0)
    return evd_fail(g, "the commit", s->session);
  follow(g, s, &a);
  g->commit_due = false;
  return 0;
}

/* ---- set-up and the whole run ----------------------------------------- */

static int open_session(gen_t *g) {
  const gen_opts_t *o = g->o;
  evd_session_cfg_t cfg = {o->budget, o->sinks, o->lookahead, -1};
  evd_view_t v;
  if (evd_client_create(g->ev, g->seqs[0].session, &cfg, &v) != 0)
    return evd_fail(g, "the create", g->seqs[0].session);
  g->seqs[0].created = v.created;
  if (!v.created && (v.size != 1 || v.newest != 0))
    return fail("session %s exists and has moved past position 0; delete "
                "it or pick another --session", g->seqs[0].session);
  g->budget = v.budget;
  g->sinks = v.sinks;
  g->lookahead = v.lookahead;
  if (g->has_draft && g->lookahead < o->draft_n + 1)
    return fail("speculative decoding with %u drafts needs a session "
                "lookahead of at least %u (the pending token and the "
                "drafts are tentative together); session %s has %u",
                o->draft_n, o->draft_n + 1, g->seqs[0].session, g->lookahead);
  return 0;
}

static int setup(gen_t *g) {
  const gen_opts_t *o = g->o;
  char err[512];
  evd_client_opts_t co = {.url = o->url, .timeout_ms = o->timeout_ms,
                          .reconnect_ms = o->reconnect_ms,
                          .token_file = o->token_file, .cafile = o->cafile};
  if (evd_client_new(&g->ev, &co, err, sizeof(err)) != 0)
    return fail("%s", err);

  g->n_seqs = o->parallel ? o->parallel : 1;
  g->seqs = calloc(g->n_seqs, sizeof(*g->seqs));
  g->steps = calloc(g->n_seqs, sizeof(*g->steps));
  g->results = calloc(g->n_seqs, sizeof(*g->results));
  g->idx = calloc(g->n_seqs, sizeof(*g->idx));
  if (!g->seqs || !g->steps || !g->results || !g->idx)
    return fail("out of memory");
  char base[128];
  if (o->session != NULL)
    snprintf(base, sizeof(base), "%s", o->session);
  else
    snprintf(base, sizeof(base), "evictd-llama-%ld", (long)getpid());
  for (uint32_t i = 0; i < g->n_seqs; i++) {
    seq_t *s = &g->seqs[i];
    s->id = (int32_t)i;
    s->rng = o->seed + i;
    if (g->n_seqs == 1)
      snprintf(s->session, sizeof(s->session), "%s", base);
    else
      snprintf(s->session, sizeof(s->session), "%s.%u", base, i);
  }
  g->has_draft = o->draft != NULL;
  if (open_session(g) != 0)
    return 1;
  g->pos = calloc(g->lookahead + g->n_seqs + 2, sizeof(*g->pos));
  if (g->pos == NULL)
    return fail("out of memory");
  return 0;
}

static int load_models(gen_t *g) {
  const gen_opts_t *o = g->o;
  char err[512];
  /* No sequence ever holds more than budget + lookahead positions, nor
   * more than it has. */
  uint64_t per = (uint64_t)g->budget + g->lookahead;
  /* The prompt is not tokenized yet (that needs the model): a byte's
   * worth of tokens per byte and the BOS bound it. */
  uint64_t longest = (uint64_t)o->prompt_len + 2 + o->n_predict +
                     g->lookahead;
  if (per > longest)
    per = longest;
  /* Per sequence, a multiple of 256 (llama.cpp would round it anyway). */
  uint64_t cells = o->n_ctx ? o->n_ctx : (per + 255) / 256 * 256;
  if (cells * g->n_seqs > INT32_MAX)
    return fail("budget %u needs more KV cells than llama.cpp allows; give "
                "--n-ctx", g->budget);
  uint32_t batch = g->lookahead + 1;
  if (batch < g->n_seqs)
    batch = g->n_seqs;
  if (g->has_draft && batch < o->draft_n + 2)
    batch = o->draft_n + 2;
  lm_opts_t lo = {.n_ctx = (uint32_t)cells, .n_batch = batch,
                  .n_seq = g->n_seqs, .threads = o->threads, .exact = true};
  if (lm_open(&g->target, "target", o->model, &lo, err, sizeof(err)) != 0)
    return fail("%s", err);
  if (g->has_draft) {
    /* The draft's cache lags the target's by one commit's victims. */
    lo.n_ctx = (uint32_t)((per + g->lookahead + 255) / 256 * 256);
    if (lm_open(&g->draft, "draft", o->draft, &lo, err, sizeof(err)) != 0)
      return fail("%s", err);
    if (g->draft.n_vocab != g->target.n_vocab)
      return fail("the draft model's vocabulary (%d) is not the target's "
                  "(%d)", g->draft.n_vocab, g->target.n_vocab);
  }
  return 0;
}

static void print_stats(gen_t *g) {
  times_t *t = &g->times;
  double tot = sum(t->total, t->n), evd = sum(t->evictd, t->n);
  fprintf(stderr,
          "evictd-llama: %zu decode iterations of %u sequence(s): per "
          "iteration median %.1f us in all, %.1f us evictd, %.1f us "
          "llama_decode, %.1f us removing; evictd %.2f%% of the "
          "iterations' time\n",
          t->n, g->n_seqs, median(t->total, t->n) * 1e6,
          median(t->evictd, t->n) * 1e6, median(t->decode, t->n) * 1e6,
          median(t->remove, t->n) * 1e6, tot > 0 ? 100.0 * evd / tot : 0.0);
  evd_client_stats_t cs;
  evd_client_stats(g->ev, &cs);
  fprintf(stderr, "evictd-llama: evictd: %llu requests, %llu resends, "
          "%llu replayed, %llu connections\n",
          (unsigned long long)cs.requests, (unsigned long long)cs.resends,
          (unsigned long long)cs.replayed,
          (unsigned long long)cs.connections);
  if (g->has_draft)
    fprintf(stderr, "evictd-llama: drafts accepted %llu of %llu\n",
            (unsigned long long)g->accepted, (unsigned long long)g->drafted);
}

static void release(gen_t *g) {
  for (uint32_t i = 0; g->seqs != NULL && i < g->n_seqs; i++) {
    free(g->seqs[i].hist);
    free(g->seqs[i].alt);
  }
  free(g->seqs);
  free(g->steps);
  free(g->results);
  free(g->idx);
  free(g->pos);
  free(g->times.total);
  free(g->times.evictd);
  free(g->times.decode);
  free(g->times.remove);
  if (g->has_draft)
    lm_close(&g->draft);
  lm_close(&g->target);
  evd_client_free(g->ev);
}

static int run(gen_t *g) {
  const gen_opts_t *o = g->o;
  if (setup(g) != 0 || load_models(g) != 0)
    return 1;
  seq_t *s0 = &g->seqs[0];
  llama_token *toks;
  int n = lm_tokenize(&g->target, o->prompt, o->prompt_len, &toks);
  if (n <= 0)
    return fail(n == 0 ? "the prompt is empty (and the model adds no BOS)"
                       : "cannot tokenize the prompt");
  if (seq_reserve(s0, (uint32_t)n + 2) != 0) {
    free(toks);
    return fail("out of memory");
  }
  memcpy(s0->hist, toks, (size_t)n * sizeof(*toks));
  free(toks);
  g->n_prompt = (uint32_t)n;
  g->stream = g->n_seqs == 1 && o->rewind_at == 0;
  dump_start(g->dump, o->model, g->target.n_vocab, g->budget, g->sinks,
             g->lookahead, g->n_seqs, g->has_draft ? o->draft_n : 0);
  if (o->n_predict == 0)
    return 0;
  if (prefill(g) != 0 || fork_and_start(g) != 0)
    return 1;
  bool more = true, rewound = false;
  while (more) {
    if (g->has_draft ? speculate(g, &more) : iterate(g, &more))
      return 1;
    seq_t *s = &g->seqs[0];
    if (!rewound && o->rewind_at && decided(g, s) == o->rewind_at) {
      rewound = true;
      if (rewind_seq(g, s) != 0)
        return 1;
      more = true;
    }
  }
  if (g->has_draft && settle(g) != 0)
    return 1;
  for (uint32_t i = 0; i < g->n_seqs; i++) {
    seq_t *s = &g->seqs[i];
    if (!g->stream) {
      if (g->n_seqs > 1)
        printf("%s--- sample %u\n", i ? "\n" : "", i);
      stream(g, s, s->n + 1);
    }
    if (!o->keep_session &&
        evd_client_delete(g->ev, s->session, false) != 0)
      return evd_fail(g, "the delete", s->session);
  }
  putchar('\n');
  fflush(stdout);
  if (o->stats)
    print_stats(g);
  return 0;
}

int gen_run(const gen_opts_t *o) {
  gen_t g;
  memset(&g, 0, sizeof(g));
  g.o = o;
  lm_init(o->debug);
  if (o->dump != NULL) {
    if (dump_open(&g.dumpf, o->dump) != 0)
      return fail("cannot write %s.jsonl / .f32: %s", o->dump,
                  strerror(errno));
    g.dump = &g.dumpf;
  }
  int rc = run(&g);
  for (uint32_t i = 0; rc != 0 && !o->keep_session && g.seqs && i < g.n_seqs;
       i++)
    if (g.seqs[i].created) /* best effort: leave nothing behind */
      evd_client_delete(g.ev, g.seqs[i].session, true);
  if (g.dump != NULL && dump_close(g.dump) != 0 && rc == 0)
    rc = fail("writing the dump %s failed", o->dump);
  release(&g);
  return rc;
}
