/* evictd-llama's decode phases. Every sequence is an evictd session and a
 * llama.cpp sequence id; each iteration sends one request for all
 * sequences (a step, or a batch), runs one llama.cpp pass, and removes
 * from the cache exactly the positions evictd named: the victims of a step
 * after the pass that computed it (the new token attends to the window the
 * step found, as the policy says), the drafts a commit dropped and its
 * victims before the next pass, the positions a truncation removed at
 * once. llama.cpp picks the cells; positions are all it is told: with
 * --positions original a token's absolute position, with cache its index
 * among the positions the cache holds (posmap.h; see put and drop). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_int.h"

/* ---- sampling ------------------------------------------------------------ */

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

static bool is_end(gen_t *g, llama_token t) {
  return llama_vocab_is_eog(g->target.vocab, t);
}

/* The sequence's next token, at position s->n, from logits l. */
static int choose(gen_t *g, seq_t *s, const float *l) {
  if (gen_seq_reserve(s, s->n + 2) != 0)
    return gen_fail("out of memory");
  s->hist[s->n] = sample(g, s, l, &s->alt[s->n]);
  s->done = is_end(g, s->hist[s->n]);
  if (g->stream)
    gen_stream(g, s, s->n + 1);
  return 0;
}

/* ---- requests and answers ------------------------------------------------ */

/* Whether a request that timed out is sent again: evictd answers a resent
 * step, commit or truncate with its first answer if the first had been
 * applied, so only how long to keep trying is a question. */
static bool again(gen_t *g, int rc, double t0) {
  return rc == EVD_CLIENT_ETIMEOUT &&
         gen_now() - t0 < g->o->reconnect_ms / 1000.0;
}

static posmap_t *map_of(gen_t *g, lm_t *lm, seq_t *s) {
  return lm == &g->target ? &s->map : &s->dmap;
}

/* Adds absolute position p of sequence s to lm's batch, at the position
 * the mode gives it: p, or in cache mode the count the cache holds (every
 * held position is below p, so the held ones and p sit at 0..count). */
static int put(gen_t *g, lm_t *lm, seq_t *s, uint32_t p, bool output) {
  int32_t at = posmap_add(map_of(g, lm, s), p);
  if (at < 0)
    return gen_fail("position %u of sequence %d is not above what the %s "
                    "model's cache holds, or out of memory", p, s->id,
                    lm->label);
  g->abs[lm == &g->target ? 0 : 1][lm->batch.n_tokens] = p;
  lm_add(lm, s->hist[p], at, s->id, output);
  return 0;
}

/* Removes absolute positions v[0..n) from lm's cache of sequence s: in
 * cache mode the cells above each gap move down with
 * llama_memory_seq_add, and llama.cpp re-rotates their keys (K-shift) as
 * its next llama_decode begins. */
static int drop_list(gen_t *g, lm_t *lm, seq_t *s, const char *why,
                     const uint32_t *v, size_t n) {
  dump_remove(g->dump, lm->label, s->id, why, v, n);
  if (posmap_remove(map_of(g, lm, s), lm, s->id, v, n) != 0)
    return gen_fail("llama.cpp refused to remove positions of sequence %d "
                    "from the %s model's cache (or it does not hold them)",
                    s->id, lm->label);
  return 0;
}

static int drop(gen_t *g, lm_t *lm, seq_t *s, const char *why,
                const evd_list_t *l) {
  return drop_list(g, lm, s, why, l->v, l->n);
}

/* Removes what an answer says is gone from the target's cache (and the
 * draft's, whose cache mirrors the target's committed window), after
 * checking that evictd holds what the engine thinks it holds: `added`
 * positions came with the request. A session evictd lost (a restart
 * without --state-dir, a reap) and recreated by autocreate shows up here,
 * as another size, before the cache follows it anywhere. */
static int follow(gen_t *g, seq_t *s, const evd_answer_t *a, size_t added) {
  uint64_t held = (uint64_t)s->held + added;
  size_t gone = a->dropped.n + a->victims.n + a->removed.n;
  if (gone > held || held - gone != a->size)
    return gen_fail("evictd says session %s holds %u positions, the engine "
                    "counts %llu: the daemon lost the session (restarted "
                    "without --state-dir, or reaped by --idle-ttl?), so its "
                    "answers no longer describe this cache", s->session,
                    a->size, (unsigned long long)(held - gone));
  s->held = a->size;
  if (drop(g, &g->target, s, "dropped", &a->dropped) ||
      drop(g, &g->target, s, "victims", &a->victims) ||
      drop(g, &g->target, s, "removed", &a->removed))
    return 1;
  if (g->has_draft && (drop(g, &g->draft, s, "victims", &a->victims) ||
                       drop(g, &g->draft, s, "removed", &a->removed)))
    return 1;
  return 0;
}

static int send_step(gen_t *g, seq_t *s, const uint32_t *pos, size_t n,
                     bool tentative, bool commit, uint32_t commit_at,
                     evd_answer_t *a) {
  evd_step_t st = {.session = s->session, .positions = pos,
                   .n_positions = n, .tentative = tentative,
                   .has_commit = commit, .commit = commit_at};
  dump_step(g->dump, s->id, pos, n, tentative,
            commit ? (int64_t)commit_at : -1);
  double t0 = gen_now();
  int rc;
  do
    rc = evd_client_step(g->ev, &st, a);
  while (again(g, rc, t0));
  return rc != 0 ? gen_evd_fail(g, "the step", s->session) : 0;
}

/* One pass: llama_decode of the batch built in lm, recorded with what each
 * sequence's cache holds just before it (llama.cpp's own pos_min/max). */
static int pass(gen_t *g, lm_t *lm) {
  char err[256];
  if (g->dump != NULL) {
    int32_t last = -1;
    for (int32_t i = 0; i < lm->batch.n_tokens; i++) {
      int32_t seq = lm->batch.seq_id[i][0];
      if (seq != last)
        dump_cache(g->dump, lm->label, seq, lm_pos_min(lm, seq),
                   lm_pos_max(lm, seq));
      last = seq;
    }
  }
  if (lm_decode(lm, err, sizeof(err)) != 0)
    return gen_fail("%s", err);
  dump_pass_at(g->dump, lm, g->o->positions == POS_CACHE
                                ? g->abs[lm == &g->target ? 0 : 1] : NULL);
  return 0;
}

/* ---- the phases ------------------------------------------------------- */

/* The prompt, in chunks of `lookahead` positions: one evictd step and one
 * llama.cpp pass (of the target, and of the draft) per chunk, the chunk's
 * victims removed after it. Position 0 (BOS) is held by a new session from
 * the start, so the first pass computes it without a step. */
int gen_prefill(gen_t *g) {
  seq_t *s = &g->seqs[0];
  bool all = g->dump != NULL;
  s->held = 1;
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
    a.size = s->held;
    if (n > 0 && send_step(g, s, g->pos, n, false, false, 0, &a) != 0)
      return 1;
    lm_t *lms[2] = {&g->target, g->has_draft ? &g->draft : NULL};
    for (int m = 0; m < 2 && lms[m] != NULL; m++) {
      lm_clear(lms[m]);
      for (uint32_t q = p; q < end; q++)
        if (put(g, lms[m], s, q, all || q + 1 == g->n_prompt) != 0)
          return 1;
      if (pass(g, lms[m]) != 0)
        return 1;
    }
    if (follow(g, s, &a, n) != 0)
      return 1;
    p = end;
  }
  s->n = g->n_prompt;
  g->draft_next = g->n_prompt;
  return 0;
}

/* After the prompt: forks sequence 0 into the other samples (evictd fork,
 * llama_memory_seq_cp), then every sample draws its first token from the
 * prompt's last logits. */
int gen_fork_and_start(gen_t *g) {
  seq_t *s0 = &g->seqs[0];
  for (uint32_t i = 1; i < g->n_seqs; i++) {
    seq_t *s = &g->seqs[i];
    evd_view_t v;
    if (evd_client_fork(g->ev, s0->session, s->session, &v) != 0)
      return gen_evd_fail(g, "the fork", s0->session);
    /* An existing child is ours only in the prompt's exact state: the
     * answer to a resent fork whose first answer was lost. */
    if (!v.created && (v.size != s0->held || v.newest != g->n_prompt - 1))
      return gen_fail("session %s exists already; delete it or pick "
                      "another --session", s->session);
    s->created = true;
    llama_memory_seq_cp(g->target.mem, s0->id, s->id, -1, -1);
    if (posmap_copy(&s->map, &s0->map) != 0)
      return gen_fail("out of memory");
    dump_fork(g->dump, s0->id, s->id);
    if (gen_seq_reserve(s, g->n_prompt + 2) != 0)
      return gen_fail("out of memory");
    memcpy(s->hist, s0->hist, g->n_prompt * sizeof(*s->hist));
    s->n = g->n_prompt;
    s->held = s0->held;
  }
  const float *l = lm_logits(&g->target, g->target.batch.n_tokens - 1);
  for (uint32_t i = 0; i < g->n_seqs; i++)
    if (choose(g, &g->seqs[i], l) != 0)
      return 1;
  return 0;
}

static int times_add(times_t *t, double total, double evd, double dec,
                     double rm) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 256;
    double **a[4] = {&t->total, &t->evictd, &t->decode, &t->remove};
    for (int i = 0; i < 4; i++) {
      double *p = realloc(*a[i], cap * sizeof(double));
      if (p == NULL)
        return -1;
      *a[i] = p; /* stored at once: a later failure frees the right one */
    }
    t->cap = cap;
  }
  t->total[t->n] = total;
  t->evictd[t->n] = evd;
  t->decode[t->n] = dec;
  t->remove[t->n] = rm;
  t->n++;
  return 0;
}

/* One decode iteration of every sequence still generating: one evictd
 * request (a step for one sequence, a batch for several), one pass, the
 * victims removed, the next tokens drawn. Sets *more to false when no
 * sequence needs another. */
int gen_iterate(gen_t *g, bool *more) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < g->n_seqs; i++) {
    seq_t *s = &g->seqs[i];
    if (s->done || gen_decided(g, s) >= g->o->n_predict)
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
  double t0 = gen_now();
  evd_answer_t one;
  int rc;
  if (g->n_seqs == 1) {
    do
      rc = evd_client_step(g->ev, &g->steps[0], &one);
    while (again(g, rc, t0));
    if (rc != 0)
      return gen_evd_fail(g, "the step", g->steps[0].session);
  } else {
    do /* each session once: resending replays every item */
      rc = evd_client_batch(g->ev, g->steps, k, g->results);
    while (again(g, rc, t0));
    if (rc != 0)
      return gen_evd_fail(g, "the batch of every sample's step", NULL);
    for (uint32_t j = 0; j < k; j++)
      if (g->results[j].rc != 0) {
        const evd_client_err_t *e = &g->results[j].error;
        return gen_fail("evictd refused the step of session %s: %d %s: %s",
                        g->steps[j].session, e->status, e->code, e->message);
      }
  }
  double t1 = gen_now();
  lm_clear(&g->target);
  for (uint32_t j = 0; j < k; j++) {
    seq_t *s = &g->seqs[g->idx[j]];
    if (put(g, &g->target, s, s->n, true) != 0)
      return 1;
  }
  if (pass(g, &g->target) != 0)
    return 1;
  double t2 = gen_now();
  for (uint32_t j = 0; j < k; j++)
    if (follow(g, &g->seqs[g->idx[j]],
               g->n_seqs == 1 ? &one : &g->results[j].answer, 1) != 0)
      return 1;
  double t3 = gen_now();
  for (uint32_t j = 0; j < k; j++) {
    seq_t *s = &g->seqs[g->idx[j]];
    s->n++;
    if (choose(g, s, lm_logits(&g->target, (int32_t)j)) != 0)
      return 1;
  }
  if (times_add(&g->times, gen_now() - t0, t1 - t0, t2 - t1, t3 - t2) != 0)
    return gen_fail("out of memory");
  return 0;
}

/* --rewind AT:K: takes the last K decided tokens back (an engine rejecting
 * a continuation): evictd truncates from the first of them, the cache
 * loses what evictd says it removed, and the first one is redrawn as the
 * runner-up of its logits, so the continuation really differs. (gen.c
 * checked that K <= budget - sinks, so that the position before it is
 * still held: llama.cpp continues a sequence only from its newest.) */
int gen_rewind(gen_t *g, seq_t *s) {
  uint32_t from = s->n + 1 - g->o->rewind_k;
  evd_answer_t a;
  dump_truncate(g->dump, s->id, from);
  double t0 = gen_now();
  int rc;
  do
    rc = evd_client_truncate(g->ev, s->session, from, &a);
  while (again(g, rc, t0));
  if (rc != 0)
    return gen_evd_fail(g, "the truncate", s->session);
  if (follow(g, s, &a, 0) != 0)
    return 1;
  s->hist[from] = s->alt[from];
  s->done = is_end(g, s->hist[from]);
  s->n = from;
  return 0;
}

/* One speculative iteration (one sequence, greedy): the draft model
 * proposes K tokens after the pending one; one evictd step sends the
 * pending token and the drafts as tentative positions, carrying the commit
 * of the previous iteration (so its dropped drafts and victims leave the
 * cache before this pass); the target computes all K + 1 in one pass and
 * keeps the drafts it would have chosen itself, plus its own next token.
 * K stops one short of the length asked for, so the target computes no
 * more positions than plain decoding would. */
int gen_speculate(gen_t *g, bool *more) {
  seq_t *s = &g->seqs[0];
  uint32_t done = gen_decided(g, s);
  uint32_t left = done < g->o->n_predict ? g->o->n_predict - done : 0;
  *more = left > 0 && !s->done;
  if (!*more)
    return 0;
  uint32_t K = g->o->draft_n < left - 1 ? g->o->draft_n : left - 1;
  uint32_t n = s->n;
  bool all = g->dump != NULL;
  double t0 = gen_now(), t_dec = 0;
  if (gen_seq_reserve(s, n + K + 2) != 0)
    return gen_fail("out of memory");

  /* The draft catches up to the pending token, then proposes K. */
  for (uint32_t i = 0; i < K; i++) {
    double d0 = gen_now();
    lm_clear(&g->draft);
    uint32_t from = i == 0 ? g->draft_next : n + i;
    for (uint32_t q = from; q <= n + i; q++)
      if (put(g, &g->draft, s, q, all || q == n + i) != 0)
        return 1;
    if (pass(g, &g->draft) != 0)
      return 1;
    s->hist[n + i + 1] = argmax2(
        lm_logits(&g->draft, g->draft.batch.n_tokens - 1), g->draft.n_vocab,
        NULL);
    g->draft_next = n + i + 1;
    t_dec += gen_now() - d0;
  }

  for (uint32_t i = 0; i <= K; i++)
    g->pos[i] = n + i;
  evd_answer_t a;
  double e0 = gen_now();
  if (send_step(g, s, g->pos, K + 1, true, g->commit_due, g->commit_at,
                &a) != 0)
    return 1;
  double e1 = gen_now();
  if (g->commit_due) {
    /* What the commit dropped must be the drafts the target rejected:
     * every position sent above the one committed. */
    uint32_t want = g->drafts_to - g->commit_at;
    bool same = a.dropped.n == want;
    for (size_t i = 0; same && i < a.dropped.n; i++)
      same = a.dropped.v[i] == g->commit_at + 1 + i;
    if (!same)
      return gen_fail("evictd dropped %zu drafts of session %s, the engine "
                      "rejected %u", a.dropped.n, s->session, want);
  }
  if (follow(g, s, &a, K + 1) != 0)
    return 1;
  g->drafts_to = n + K;
  double r1 = gen_now();

  lm_clear(&g->target);
  for (uint32_t i = 0; i <= K; i++)
    if (put(g, &g->target, s, n + i, true) != 0)
      return 1;
  if (pass(g, &g->target) != 0)
    return 1;
  double d1 = gen_now();
  t_dec += d1 - r1;

  /* Keep the drafts the target would have chosen; an end token among them
   * ends the sequence there, decided but (as in plain decoding) not
   * computed, so it is not committed. */
  uint32_t acc = 0;
  llama_token next = 0, alt = 0;
  bool ended = false;
  for (;;) {
    next = argmax2(lm_logits(&g->target, (int32_t)acc), g->target.n_vocab,
                   &alt);
    if (acc == K || next != s->hist[n + acc + 1])
      break;
    acc++;
    if (is_end(g, s->hist[n + acc])) {
      ended = true;
      break;
    }
  }
  g->accepted += acc;
  g->drafted += K;
  if (ended) {
    s->n = n + acc;
    s->done = true;
  } else {
    s->n = n + acc + 1;
    s->hist[s->n] = next;
    s->alt[s->n] = alt;
    s->done = is_end(g, next);
  }
  g->commit_due = true;
  g->commit_at = s->n - 1;
  /* The draft forgets its rejected drafts now (its cache is the engine's
   * own business); the target's go with the next commit. */
  if (g->draft_next > s->n) {
    /* g->pos (sent above) has room: at most K drafts are rejected. */
    size_t m = 0;
    for (uint32_t q = s->n; q < g->draft_next; q++)
      g->pos[m++] = q;
    if (drop_list(g, &g->draft, s, "rejected", g->pos, m) != 0)
      return 1;
    g->draft_next = s->n;
  }
  if (g->stream)
    gen_stream(g, s, s->n + 1);
  if (times_add(&g->times, gen_now() - t0, e1 - e0, t_dec, r1 - e1) != 0)
    return gen_fail("out of memory");
  return 0;
}

/* The last commit of a speculative run, so that the session and the cache
 * end with only accepted positions. */
int gen_settle(gen_t *g) {
  seq_t *s = &g->seqs[0];
  if (!g->commit_due)
    return 0;
  evd_answer_t a;
  dump_commit(g->dump, s->id, g->commit_at);
  double t0 = gen_now();
  int rc;
  do
    rc = evd_client_commit(g->ev, s->session, g->commit_at, &a);
  while (again(g, rc, t0));
  if (rc != 0)
    return gen_evd_fail(g, "the commit", s->session);
  if (follow(g, s, &a, 0) != 0)
    return 1;
  g->commit_due = false;
  return 0;
}
