/* evictd-llama serve's board of the engine's figures (stats.h). */
#include "serve/queue/stats.h"

#include <string.h>

void board_init(board_t *b) {
  memset(b, 0, sizeof(*b));
  pthread_mutex_init(&b->mu, NULL);
}

void board_destroy(board_t *b) { pthread_mutex_destroy(&b->mu); }

void board_copy(board_t *b, stats_t *out) {
  pthread_mutex_lock(&b->mu);
  *out = b->stats;
  pthread_mutex_unlock(&b->mu);
}

void board_scrape(board_t *b, stats_t *out) {
  pthread_mutex_lock(&b->mu);
  *out = b->stats;
  memset(&b->stats.bucket, 0, sizeof(b->stats.bucket));
  pthread_mutex_unlock(&b->mu);
}

void board_sequences(board_t *b, uint32_t n) {
  pthread_mutex_lock(&b->mu);
  b->stats.sequences = n;
  pthread_mutex_unlock(&b->mu);
}

void board_lanes(board_t *b, const lane_state_t *st, size_t n,
                 const conv_counts_t *cc) {
  if (n > SERVE_LANES_MAX)
    n = SERVE_LANES_MAX;
  pthread_mutex_lock(&b->mu);
  memcpy(b->stats.lanes, st, n * sizeof(*st));
  b->stats.n_lanes = (uint32_t)n;
  b->stats.convs = *cc;
  pthread_mutex_unlock(&b->mu);
}

void board_count(board_t *b, uint64_t tokens, uint64_t steps, uint64_t ahead,
                 double evictd_s,
                 double decode_s, double total_s,
                 const evd_client_stats_t *cs, const link_counts_t *lc,
                 bool per_session) {
  pthread_mutex_lock(&b->mu);
  stats_t *s = &b->stats;
  s->iterations++;
  s->tokens += tokens;
  s->steps += steps;
  s->ahead += ahead;
  s->evictd_s += evictd_s;
  s->decode_s += decode_s;
  s->total_s += total_s;
  s->connections = cs->connections;
  s->resends = cs->resends;
  s->link = *lc;
  s->per_session = per_session;
  if (steps > 0)
    evd_histogram_observe(&s->evictd_rtt, evictd_s);
  pthread_mutex_unlock(&b->mu);
}

void board_tokens(board_t *b, uint64_t tokens) {
  pthread_mutex_lock(&b->mu);
  b->stats.tokens += tokens;
  pthread_mutex_unlock(&b->mu);
}

void board_slots(board_t *b, const slot_state_t *st, uint32_t n,
                 uint32_t budget, uint32_t sinks, uint32_t lookahead) {
  if (n > SERVE_SLOTS_MAX)
    n = SERVE_SLOTS_MAX;
  pthread_mutex_lock(&b->mu);
  memcpy(b->stats.slots, st, n * sizeof(*st));
  b->stats.n_slots = n;
  b->stats.budget = budget;
  b->stats.sinks = sinks;
  b->stats.lookahead = lookahead;
  pthread_mutex_unlock(&b->mu);
}

/* Adds p to *to; the longest sequence is a maximum. */
static void pass_add(pass_counts_t *to, const pass_counts_t *p) {
  to->prompt_tokens += p->prompt_tokens;
  to->prompt_s += p->prompt_s;
  to->gen_steps += p->gen_steps;
  to->gen_s += p->gen_s;
  to->busy += p->busy;
  if (p->n_max > to->n_max)
    to->n_max = p->n_max;
}

void board_pass(board_t *b, const pass_counts_t *p) {
  pthread_mutex_lock(&b->mu);
  pass_add(&b->stats.pass, p);
  pass_add(&b->stats.bucket, p);
  pthread_mutex_unlock(&b->mu);
}
