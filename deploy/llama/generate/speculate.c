/* evictd-llama generate --draft: speculative decoding of one sequence,
 * greedy, with the drafts sent to evictd as tentative positions and
 * committed with the next step. */
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "generate/speculate.h"

/* One speculative iteration: the draft model proposes K tokens after the
 * pending one; one evictd step sends the pending token and the drafts as
 * tentative positions, carrying the commit of the previous iteration (so
 * its dropped drafts and victims leave the cache before this pass); the
 * target computes all K + 1 in one pass and keeps the drafts it would
 * have chosen itself, plus its own next token. K stops one short of the
 * length asked for, so the target computes no more positions than plain
 * decoding would. */
int gen_speculate(gen_t *g, bool *more) {
  sample_t *s = &g->samples[0];
  uint32_t done = gen_decided(g, s);
  uint32_t left = done < g->o->n_predict ? g->o->n_predict - done : 0;
  *more = left > 0 && !s->done;
  if (!*more)
    return 0;
  uint32_t K = g->o->draft_n < left - 1 ? g->o->draft_n : left - 1;
  uint32_t n = s->n;
  bool all = g->dump != NULL;
  double t0 = clock_now(), t_dec = 0;
  if (gen_reserve(s, n + K + 2) != 0)
    return gen_fail("out of memory");

  /* The draft catches up to the pending token, then proposes K. */
  for (uint32_t i = 0; i < K; i++) {
    double d0 = clock_now();
    lm_clear(&g->draft);
    uint32_t from = i == 0 ? g->draft_next : n + i;
    for (uint32_t q = from; q <= n + i; q++)
      if (gen_put(g, &g->draft, s, q, all || q == n + i) != 0)
        return 1;
    if (gen_pass(g, &g->draft) != 0)
      return 1;
    s->hist[n + i + 1] = sampler_argmax(
        lm_logits(&g->draft, g->draft.batch.n_tokens - 1), g->draft.n_vocab,
        NULL);
    g->draft_next = n + i + 1;
    t_dec += clock_now() - d0;
  }

  for (uint32_t i = 0; i <= K; i++)
    g->pos[i] = n + i;
  evd_answer_t a;
  double e0 = clock_now();
  if (gen_step(g, s, g->pos, K + 1, true, g->commit_due, g->commit_at,
               &a) != 0)
    return 1;
  double e1 = clock_now();
  if (g->commit_due) {
    /* What the commit dropped must be the drafts the target rejected:
     * every position sent above the one committed. */
    uint32_t want = g->drafts_to - g->commit_at;
    bool same = a.dropped.n == want;
    for (size_t i = 0; same && i < a.dropped.n; i++)
      same = a.dropped.v[i] == g->commit_at + 1 + i;
    if (!same)
      return gen_fail("evictd dropped %zu drafts of session %s, the engine "
                      "rejected %u", a.dropped.n, s->s.session, want);
  }
  if (gen_follow(g, s, &a, K + 1) != 0)
    return 1;
  g->drafts_to = n + K;
  double r1 = clock_now();

  lm_clear(&g->target);
  for (uint32_t i = 0; i <= K; i++)
    if (gen_put(g, &g->target, s, n + i, true) != 0)
      return 1;
  if (gen_pass(g, &g->target) != 0)
    return 1;
  double d1 = clock_now();
  t_dec += d1 - r1;

  /* Keep the drafts the target would have chosen; an end token among them
   * ends the sequence there, decided but (as in plain decoding) not
   * computed, so it is not committed. */
  uint32_t acc = 0;
  llama_token next = 0, alt = 0;
  bool ended = false;
  for (;;) {
    next = sampler_argmax(lm_logits(&g->target, (int32_t)acc),
                          g->target.n_vocab, &alt);
    if (acc == K || next != s->hist[n + acc + 1])
      break;
    acc++;
    if (lm_is_end(&g->target, s->hist[n + acc])) {
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
    s->done = lm_is_end(&g->target, next);
  }
  g->commit_due = true;
  g->commit_at = s->n - 1;
  /* The draft forgets its rejected drafts now (its cache is the engine's
   * own business); the target's go with the next commit. */
  if (g->draft_next > s->n) {
    /* g->pos (sent above) has room: at most K drafts are rejected. */
    size_t m = 0;
    fault_t f;
    for (uint32_t q = s->n; q < g->draft_next; q++)
      g->pos[m++] = q;
    if (seq_remove(&s->s, &s->dmap, &g->draft, "rejected", g->pos, m,
                   g->dump != NULL ? &g->trace : NULL, &f) != 0)
      return gen_fault(&f);
    g->draft_next = s->n;
  }
  if (g->stream)
    gen_stream(g, s, s->n + 1);
  return gen_times(g, clock_now() - t0, e1 - e0, t_dec, r1 - e1);
}

/* The last commit of a speculative run, so that the session and the cache
 * end with only accepted positions. */
int gen_settle(gen_t *g) {
  sample_t *s = &g->samples[0];
  if (!g->commit_due)
    return 0;
  evd_answer_t a;
  fault_t f;
  dump_commit(g->dump, s->s.id, g->commit_at);
  link_t *l = gen_link(g, s);
  if (l == NULL)
    return 1;
  if (seq_change(l, &s->s, &(link_req_t){.op = LINK_COMMIT,
                 .session = s->s.session, .at = g->commit_at, .answer = &a},
                 &f) != 0)
    return gen_fault(&f);
  if (gen_follow(g, s, &a, 0) != 0)
    return 1;
  g->commit_due = false;
  return 0;
}
