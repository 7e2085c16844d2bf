/* evictd-llama generate's decode phases. Every sample is an evictd session
 * and a llama.cpp sequence id (common/seq.h); each iteration sends one
 * request for all samples (a step, or a batch), runs one llama.cpp pass,
 * and removes from the cache exactly the positions evictd named: the
 * victims of a step after the pass that computed it (the new token attends
 * to the window the step found, as the policy says), the drafts a commit
 * dropped and its victims before the next pass, the positions a truncation
 * removed at once. llama.cpp picks the cells; positions are all it is
 * told: with --positions original a token's absolute position, with cache
 * its index among the positions the cache holds (posmap.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/clock.h"
#include "common/grow.h"
#include "generate/decode.h"

/* ---- helpers ------------------------------------------------------------ */

int gen_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("evictd-llama: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

int gen_fault(const fault_t *f) { return gen_fail("%s", f->msg); }

link_t *gen_link(gen_t *g, const sample_t *s) {
  fault_t f;
  link_t *l = lanes_direct(g->lanes, lanes_route(g->lanes, s->s.session,
                                                 (uint32_t)s->s.id), &f);
  if (l == NULL)
    gen_fault(&f);
  return l;
}

int gen_reserve(sample_t *s, uint32_t need) {
  return grow(&s->hist, &s->cap, need, sizeof(*s->hist)) ||
         grow(&s->alt, &s->alt_cap, need, sizeof(*s->alt)) ? -1 : 0;
}

uint32_t gen_decided(const gen_t *g, const sample_t *s) {
  return s->n - g->n_prompt + 1;
}

void gen_stream(gen_t *g, sample_t *s, uint32_t upto) {
  uint32_t end = g->n_prompt + g->o->n_predict;
  if (upto > end)
    upto = end;
  for (uint32_t p = g->n_prompt + s->printed; p < upto; p++, s->printed++)
    lm_write_piece(&g->target, s->hist[p], stdout);
  fflush(stdout);
}

/* The sample's next token, at position s->n, from logits l. */
static int choose(gen_t *g, sample_t *s, const float *l) {
  if (gen_reserve(s, s->n + 2) != 0)
    return gen_fail("out of memory");
  s->hist[s->n] = sampler_draw(&s->smp, l, g->target.n_vocab,
                               &s->alt[s->n]);
  s->done = lm_is_end(&g->target, s->hist[s->n]);
  if (g->stream)
    gen_stream(g, s, s->n + 1);
  return 0;
}

int gen_put(gen_t *g, lm_t *lm, sample_t *s, uint32_t p, bool output) {
  fault_t f;
  bool target = lm == &g->target;
  g->abs[target ? 0 : 1][lm->batch.n_tokens] = p;
  if (target)
    return seq_put(&s->s, lm, s->hist[p], p, output, &f) ? gen_fault(&f) : 0;
  /* The draft's cache has a map of its own (it lags the target's by one
   * commit's victims), under the same sequence id. */
  int32_t at = posmap_add(&s->dmap, p);
  if (at < 0)
    return gen_fail("position %u of sequence %d is not above what the "
                    "draft model's cache holds, or out of memory", p,
                    s->s.id);
  lm_add(lm, s->hist[p], at, s->s.id, output);
  return 0;
}

int gen_follow(gen_t *g, sample_t *s, const evd_answer_t *a, size_t added) {
  fault_t f;
  const seq_trace_t *t = g->dump != NULL ? &g->trace : NULL;
  if (seq_follow(&s->s, &g->target, a, added, t, &f) != 0)
    return gen_fault(&f);
  /* The draft's cache mirrors the target's committed window. */
  if (g->has_draft &&
      (seq_remove(&s->s, &s->dmap, &g->draft, "victims", a->victims.v,
                  a->victims.n, t, &f) != 0 ||
       seq_remove(&s->s, &s->dmap, &g->draft, "removed", a->removed.v,
                  a->removed.n, t, &f) != 0))
    return gen_fault(&f);
  return 0;
}

int gen_step(gen_t *g, sample_t *s, const uint32_t *pos, size_t n,
             bool tentative, bool commit, uint32_t commit_at,
             evd_answer_t *a) {
  evd_step_t st = {.session = s->s.session, .positions = pos,
                   .n_positions = n, .tentative = tentative,
                   .has_commit = commit, .commit = commit_at};
  fault_t f;
  dump_step(g->dump, s->s.id, pos, n, tentative,
            commit ? (int64_t)commit_at : -1);
  link_t *l = gen_link(g, s);
  if (l == NULL || seq_change(l, &s->s, &(link_req_t){.op = LINK_STEP,
                              .steps = &st, .answer = a}, &f) != 0)
    return l == NULL ? 1 : gen_fault(&f);
  return 0;
}

/* One pass: llama_decode of the batch built in lm, recorded with what each
 * sequence's cache holds just before it (llama.cpp's own pos_min/max). */
int gen_pass(gen_t *g, lm_t *lm) {
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

int gen_times(gen_t *g, double total, double evd, double dec, double rm) {
  times_t *t = &g->times;
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 256;
    double **a[4] = {&t->total, &t->evictd, &t->decode, &t->remove};
    for (int i = 0; i < 4; i++) {
      double *p = realloc(*a[i], cap * sizeof(double));
      if (p == NULL)
        return gen_fail("out of memory");
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

/* ---- the phases --------------------------------------------------------- */

/* The prompt, in chunks of `lookahead` positions: one evictd step and one
 * llama.cpp pass (of the target, and of the draft) per chunk, the chunk's
 * victims removed after it. Position 0 (BOS) is held by a new session from
 * the start, so the first pass computes it without a step. */
int gen_prefill(gen_t *g) {
  sample_t *s = &g->samples[0];
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
    a.size = s->s.held;
    if (n > 0 && gen_step(g, s, g->pos, n, false, false, 0, &a) != 0)
      return 1;
    lm_t *lms[2] = {&g->target, g->has_draft ? &g->draft : NULL};
    for (int m = 0; m < 2 && lms[m] != NULL; m++) {
      lm_clear(lms[m]);
      for (uint32_t q = p; q < end; q++)
        if (gen_put(g, lms[m], s, q, all || q + 1 == g->n_prompt) != 0)
          return 1;
      if (gen_pass(g, lms[m]) != 0)
        return 1;
    }
    if (gen_follow(g, s, &a, n) != 0)
      return 1;
    p = end;
  }
  s->n = g->n_prompt;
  g->draft_next = g->n_prompt;
  return 0;
}

/* After the prompt: forks sample 0 into the others (evictd fork,
 * llama_memory_seq_cp), then every sample draws its first token from the
 * prompt's last logits. */
int gen_fork_and_start(gen_t *g) {
  sample_t *s0 = &g->samples[0];
  fault_t f;
  for (uint32_t i = 1; i < g->n_samples; i++) {
    sample_t *s = &g->samples[i];
    link_t *l = gen_link(g, s0);
    if (l == NULL)
      return 1;
    if (seq_fork(l, &s0->s, &s->s, &g->target, g->n_prompt - 1, &f) != 0)
      return gen_fault(&f);
    dump_fork(g->dump, s0->s.id, s->s.id);
    if (gen_reserve(s, g->n_prompt + 2) != 0)
      return gen_fail("out of memory");
    memcpy(s->hist, s0->hist, g->n_prompt * sizeof(*s->hist));
    s->n = g->n_prompt;
  }
  const float *l = lm_logits(&g->target, g->target.batch.n_tokens - 1);
  for (uint32_t i = 0; i < g->n_samples; i++)
    if (choose(g, &g->samples[i], l) != 0)
      return 1;
  return 0;
}

/* The step of every sample in steps[0..k): one request (a step for one
 * sample, a batch for several), each item's outcome checked; the answers
 * in *one or g->results. */
static int send_all(gen_t *g, uint32_t k, evd_answer_t *one) {
  fault_t f;
  if (g->n_samples == 1) {
    link_t *l = gen_link(g, &g->samples[0]);
    if (l == NULL)
      return 1;
    return seq_change(l, &g->samples[0].s, &(link_req_t){
                      .op = LINK_STEP, .steps = g->steps, .answer = one},
                      &f) ? gen_fault(&f) : 0;
  }
  /* Each instance's part at once (lanes), every answer waited for. */
  if (lanes_batch(g->lanes, g->sq, g->steps, k, g->results, &f) != 0)
    return gen_fault(&f);
  for (uint32_t j = 0; j < k; j++)
    if (link_item(&g->results[j], g->steps[j].session, &f) != 0)
      return gen_fault(&f);
  return 0;
}

/* One decode iteration of every sample still generating: one evictd
 * request, one pass, the victims removed, the next tokens drawn. Sets
 * *more to false when no sample needs another. */
int gen_iterate(gen_t *g, bool *more) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < g->n_samples; i++) {
    sample_t *s = &g->samples[i];
    if (s->done || gen_decided(g, s) >= g->o->n_predict)
      continue;
    g->pos[k] = s->n;
    g->idx[k] = i;
    g->sq[k] = &s->s;
    g->steps[k] = (evd_step_t){.session = s->s.session,
                               .positions = &g->pos[k], .n_positions = 1};
    dump_step(g->dump, s->s.id, &g->pos[k], 1, false, -1);
    k++;
  }
  *more = k > 0;
  if (k == 0)
    return 0;
  double t0 = clock_now();
  evd_answer_t one;
  if (send_all(g, k, &one) != 0)
    return 1;
  double t1 = clock_now();
  lm_clear(&g->target);
  for (uint32_t j = 0; j < k; j++) {
    sample_t *s = &g->samples[g->idx[j]];
    if (gen_put(g, &g->target, s, s->n, true) != 0)
      return 1;
  }
  if (gen_pass(g, &g->target) != 0)
    return 1;
  double t2 = clock_now();
  for (uint32_t j = 0; j < k; j++)
    if (gen_follow(g, &g->samples[g->idx[j]],
                   g->n_samples == 1 ? &one : &g->results[j].answer, 1) != 0)
      return 1;
  double t3 = clock_now();
  for (uint32_t j = 0; j < k; j++) {
    sample_t *s = &g->samples[g->idx[j]];
    s->n++;
    if (choose(g, s, lm_logits(&g->target, (int32_t)j)) != 0)
      return 1;
  }
  return gen_times(g, clock_now() - t0, t1 - t0, t2 - t1, t3 - t2);
}

/* --rewind AT:K: takes the last K decided tokens back (an engine rejecting
 * a continuation): evictd truncates from the first of them, the cache
 * loses what evictd says it removed, and the first one is redrawn as the
 * runner-up of its logits, so the continuation really differs. (generate.c
 * checked that K <= budget - sinks, so that the position before it is
 * still held: llama.cpp continues a sequence only from its newest.) */
int gen_rewind(gen_t *g, sample_t *s) {
  uint32_t from = s->n + 1 - g->o->rewind_k;
  evd_answer_t a;
  fault_t f;
  dump_truncate(g->dump, s->s.id, from);
  link_t *l = gen_link(g, s);
  if (l == NULL)
    return 1;
  if (seq_change(l, &s->s, &(link_req_t){.op = LINK_TRUNCATE,
                 .session = s->s.session, .at = from, .answer = &a}, &f) != 0)
    return gen_fault(&f);
  if (gen_follow(g, s, &a, 0) != 0)
    return 1;
  s->hist[from] = s->alt[from];
  s->done = lm_is_end(&g->target, s->hist[from]);
  s->n = from;
  return 0;
}
