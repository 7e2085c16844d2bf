/* evictd-llama generate: the whole run. Loads the models, tokenizes the
 * prompt, opens the evictd session, sizes llama.cpp's contexts from it,
 * runs the decode phases of loop.c, prints the text and cleans up. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gen_int.h"

/* evictd's longest session id. */
#define SESSION_MAX 128


int gen_evd_fail(gen_t *g, const char *what, const char *session) {
  const evd_client_err_t *e = evd_client_error(g->ev);
  char who[200] = "";
  if (session != NULL)
    snprintf(who, sizeof(who), " of session %s", session);
  if (e->rc == EVD_CLIENT_EAPI)
    return gen_fail("evictd refused %s%s: %d %s: %s", what, who, e->status,
                    e->code, e->message);
  return gen_fail("%s%s failed: %s: %s", what, who, e->code, e->message);
}

double gen_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int gen_seq_reserve(seq_t *s, uint32_t need) {
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

uint32_t gen_decided(const gen_t *g, const seq_t *s) {
  return s->n - g->n_prompt + 1;
}

void gen_stream(gen_t *g, seq_t *s, uint32_t upto) {
  uint32_t end = g->n_prompt + g->o->n_predict;
  if (upto > end)
    upto = end;
  for (uint32_t p = g->n_prompt + s->printed; p < upto; p++, s->printed++)
    lm_write_piece(&g->target, s->hist[p], stdout);
  fflush(stdout);
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

/* ---- set-up ------------------------------------------------------------ */

static int setup(gen_t *g) {
  const gen_opts_t *o = g->o;
  char err[512];
  evd_client_opts_t co = {.url = o->url, .timeout_ms = o->timeout_ms,
                          .reconnect_ms = o->reconnect_ms,
                          .token_file = o->token_file, .cafile = o->cafile};
  if (evd_client_new(&g->ev, &co, err, sizeof(err)) != 0)
    return gen_fail("%s", err);

  g->n_seqs = o->parallel ? o->parallel : 1;
  g->seqs = calloc(g->n_seqs, sizeof(*g->seqs));
  g->steps = calloc(g->n_seqs, sizeof(*g->steps));
  g->results = calloc(g->n_seqs, sizeof(*g->results));
  g->idx = calloc(g->n_seqs, sizeof(*g->idx));
  if (!g->seqs || !g->steps || !g->results || !g->idx)
    return gen_fail("out of memory");
  char base[SESSION_MAX + 1];
  if (o->session != NULL) {
    /* The samples' ids add ".N" (sample numbers below 256: 4 bytes). */
    size_t room = SESSION_MAX - (g->n_seqs > 1 ? 4 : 0);
    if (strlen(o->session) > room)
      return gen_fail("--session is %zu bytes; evictd's ids are at most %d%s",
                      strlen(o->session), SESSION_MAX,
                      g->n_seqs > 1 ? ", with the samples' \".N\"" : "");
    snprintf(base, sizeof(base), "%s", o->session);
  } else {
    snprintf(base, sizeof(base), "evictd-llama-%ld", (long)getpid());
  }
  for (uint32_t i = 0; i < g->n_seqs; i++) {
    seq_t *s = &g->seqs[i];
    s->id = (int32_t)i;
    s->rng = o->seed + i;
    snprintf(s->session, sizeof(s->session), g->n_seqs == 1 ? "%s" : "%s.%u",
             base, i);
    if (posmap_init(&s->map, o->positions, 64) != 0 ||
        posmap_init(&s->dmap, o->positions, 64) != 0)
      return gen_fail("out of memory");
  }
  g->has_draft = o->draft != NULL;
  return 0;
}

static int load_models(gen_t *g) {
  const gen_opts_t *o = g->o;
  char err[512];
  if (lm_load(&g->target, "target", o->model, err, sizeof(err)) != 0)
    return gen_fail("%s", err);
  if (g->has_draft) {
    if (lm_load(&g->draft, "draft", o->draft, err, sizeof(err)) != 0)
      return gen_fail("%s", err);
    if (g->draft.n_vocab != g->target.n_vocab)
      return gen_fail("the draft model's vocabulary (%d) is not the "
                      "target's (%d)", g->draft.n_vocab, g->target.n_vocab);
  }
  seq_t *s0 = &g->seqs[0];
  llama_token *toks;
  int n = lm_tokenize(&g->target, o->prompt, o->prompt_len, &toks);
  if (n <= 0)
    return gen_fail(n == 0 ? "the prompt is empty (and the model adds no "
                             "BOS)" : "cannot tokenize the prompt");
  if (gen_seq_reserve(s0, (uint32_t)n + 2) != 0) {
    free(toks);
    return gen_fail("out of memory");
  }
  memcpy(s0->hist, toks, (size_t)n * sizeof(*toks));
  free(toks);
  g->n_prompt = (uint32_t)n;
  return 0;
}

static int open_session(gen_t *g) {
  const gen_opts_t *o = g->o;
  evd_session_cfg_t cfg = {o->budget, o->sinks, o->lookahead, -1};
  evd_view_t v;
  if (evd_client_create(g->ev, g->seqs[0].session, &cfg, &v) != 0)
    return gen_evd_fail(g, "the create", g->seqs[0].session);
  /* A session this run did not create is used only if it is fresh. */
  g->seqs[0].created = v.created;
  if (!v.created && (v.size != 1 || v.newest != 0))
    return gen_fail("session %s exists and has moved past position 0; "
                    "delete it or pick another --session",
                    g->seqs[0].session);
  g->budget = v.budget;
  g->sinks = v.sinks;
  g->lookahead = v.lookahead;
  if (g->has_draft && g->lookahead < o->draft_n + 1)
    return gen_fail("speculative decoding with %u drafts needs a session "
                    "lookahead of at least %u (the pending token and the "
                    "drafts are tentative together); session %s has %u",
                    o->draft_n, o->draft_n + 1, g->seqs[0].session,
                    g->lookahead);
  /* llama.cpp continues a sequence only from its newest position, so the
   * one before the rewound tokens must still be held. (With cache
   * positions the newest is always the count held, below the next.) */
  if (o->positions == POS_ORIGINAL && o->rewind_k > g->budget - g->sinks)
    return gen_fail("--rewind %u:%u takes back more tokens than the window "
                    "keeps beside its sinks (budget %u - sinks %u): the "
                    "position before them would be gone, and llama.cpp "
                    "cannot continue a sequence below its newest position",
                    o->rewind_at, o->rewind_k, g->budget, g->sinks);
  return 0;
}

/* llama.cpp's contexts, sized from the session: no sequence ever holds
 * more than budget + lookahead positions, nor more than it has. */
static int make_contexts(gen_t *g) {
  const gen_opts_t *o = g->o;
  char err[512];
  uint64_t per = (uint64_t)g->budget + g->lookahead;
  uint64_t longest = (uint64_t)g->n_prompt + o->n_predict + g->lookahead;
  if (per > longest)
    per = longest;
  if (o->n_ctx != 0 && o->n_ctx < per)
    return gen_fail("--n-ctx %u is below what a sequence can hold: %llu "
                    "(budget %u + lookahead %u, or the whole sequence)",
                    o->n_ctx, (unsigned long long)per, g->budget,
                    g->lookahead);
  /* Per sequence, a multiple of 256 (llama.cpp would round it anyway). */
  uint64_t cells = o->n_ctx ? o->n_ctx : (per + 255) / 256 * 256;
  /* The draft's cache lags the target's by one commit's victims. */
  uint64_t draft_cells = (cells + g->lookahead + 255) / 256 * 256;
  if (draft_cells * g->n_seqs > INT32_MAX)
    return gen_fail("budget %u needs more KV cells than llama.cpp allows",
                    g->budget);
  uint32_t batch = g->lookahead + 1;
  if (batch < g->n_seqs)
    batch = g->n_seqs;
  lm_opts_t lo = {.n_ctx = (uint32_t)cells, .n_batch = batch,
                  .n_seq = g->n_seqs, .threads = o->threads, .exact = true};
  if (lm_context(&g->target, &lo, err, sizeof(err)) != 0)
    return gen_fail("%s", err);
  lo.n_ctx = (uint32_t)draft_cells;
  if (g->has_draft && lm_context(&g->draft, &lo, err, sizeof(err)) != 0)
    return gen_fail("%s", err);
  /* Cache positions move keys, which llama.cpp does by re-rotating them
   * (K-shift); a cache that cannot would keep them at stale positions. */
  lm_t *lms[2] = {&g->target, g->has_draft ? &g->draft : NULL};
  for (int m = 0; m < 2 && lms[m] != NULL; m++)
    if (o->positions == POS_CACHE && !llama_memory_can_shift(lms[m]->mem))
      return gen_fail("--positions cache moves keys down the cache, and "
                      "llama.cpp cannot shift the %s model's cache "
                      "(llama_memory_can_shift): use --positions original",
                      lms[m]->label);
  for (int m = 0; m < 2; m++)
    if ((g->abs[m] = calloc(batch, sizeof(*g->abs[m]))) == NULL)
      return gen_fail("out of memory");
  g->pos = calloc(g->lookahead + g->n_seqs + 2, sizeof(*g->pos));
  return g->pos == NULL ? gen_fail("out of memory") : 0;
}

/* ---- the run ------------------------------------------------------------ */

static void print_stats(gen_t *g) {
  times_t *t = &g->times;
  double tot = sum(t->total, t->n), evd = sum(t->evictd, t->n);
  fprintf(stderr,
          "evictd-llama: %zu decode iterations of %u sequence(s): per "
          "iteration median %.1f us in all, %.1f us evictd, %.1f us "
          "llama_decode, %.1f us removing; evictd %.2f%% of the "
          "iterations' time; %s positions\n",
          t->n, g->n_seqs, median(t->total, t->n) * 1e6,
          median(t->evictd, t->n) * 1e6, median(t->decode, t->n) * 1e6,
          median(t->remove, t->n) * 1e6, tot > 0 ? 100.0 * evd / tot : 0.0,
          posmap_name(g->o->positions));
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

static int run(gen_t *g) {
  const gen_opts_t *o = g->o;
  if (setup(g) != 0 || load_models(g) != 0 || open_session(g) != 0 ||
      make_contexts(g) != 0)
    return 1;
  g->stream = g->n_seqs == 1 && o->rewind_at == 0;
  dump_start(g->dump, o->model, g->target.n_vocab, g->budget, g->sinks,
             g->lookahead, g->n_seqs, g->has_draft ? o->draft_n : 0,
             posmap_name(o->positions));
  if (o->n_predict > 0) {
    if (gen_prefill(g) != 0 || gen_fork_and_start(g) != 0)
      return 1;
    bool more = true, rewound = false;
    while (more) {
      if (g->has_draft ? gen_speculate(g, &more) : gen_iterate(g, &more))
        return 1;
      seq_t *s = &g->seqs[0];
      if (!rewound && o->rewind_at && gen_decided(g, s) == o->rewind_at) {
        rewound = true;
        if (gen_rewind(g, s) != 0)
          return 1;
        more = true;
      }
    }
    if (g->has_draft && gen_settle(g) != 0)
      return 1;
  }
  for (uint32_t i = 0; i < g->n_seqs; i++) {
    seq_t *s = &g->seqs[i];
    if (!g->stream && o->n_predict > 0) {
      if (g->n_seqs > 1)
        printf("%s--- sample %u\n", i ? "\n" : "", i);
      gen_stream(g, s, s->n + 1);
    }
    /* missing_ok: a resent delete whose first answer was lost meets 404. */
    if (!o->keep_session && (i == 0 || o->n_predict > 0) &&
        evd_client_delete(g->ev, s->session, true) != 0)
      return gen_evd_fail(g, "the delete", s->session);
    s->created = false;
  }
  putchar('\n');
  fflush(stdout);
  if (o->stats)
    print_stats(g);
  return 0;
}

/* After a failure, the sessions this run created are deleted, best effort:
 * with a client of its own that waits a second at most and never resends,
 * and not at all once the daemon cannot be reached. */
static void clean_up(gen_t *g) {
  evd_client_opts_t co = {.url = g->o->url, .timeout_ms = 1000,
                          .token_file = g->o->token_file,
                          .cafile = g->o->cafile};
  evd_client_t *ev = NULL;
  if (g->seqs == NULL || evd_client_new(&ev, &co, NULL, 0) != 0)
    return;
  for (uint32_t i = 0; i < g->n_seqs; i++) {
    if (!g->seqs[i].created)
      continue;
    int rc = evd_client_delete(ev, g->seqs[i].session, true);
    if (rc == EVD_CLIENT_ECONNECT || rc == EVD_CLIENT_ETIMEOUT)
      break;
  }
  evd_client_free(ev);
}

static void release(gen_t *g) {
  for (uint32_t i = 0; g->seqs != NULL && i < g->n_seqs; i++) {
    free(g->seqs[i].hist);
    free(g->seqs[i].alt);
    posmap_free(&g->seqs[i].map);
    posmap_free(&g->seqs[i].dmap);
  }
  free(g->seqs);
  free(g->steps);
  free(g->results);
  free(g->idx);
  free(g->pos);
  free(g->abs[0]);
  free(g->abs[1]);
  free(g->times.total);
  free(g->times.evictd);
  free(g->times.decode);
  free(g->times.remove);
  lm_close(&g->draft);
  lm_close(&g->target);
  evd_client_free(g->ev);
}

int gen_run(const gen_opts_t *o) {
  gen_t g;
  memset(&g, 0, sizeof(g));
  g.o = o;
  lm_init(o->debug);
  if (o->dump != NULL) {
    if (dump_open(&g.dumpf, o->dump) != 0)
      return gen_fail("cannot write %s.jsonl / .f32: %s", o->dump,
                      strerror(errno));
    g.dump = &g.dumpf;
  }
  int rc = run(&g);
  if (rc != 0 && !o->keep_session)
    clean_up(&g);
  if (g.dump != NULL && dump_close(g.dump) != 0 && rc == 0)
    rc = gen_fail("writing the dump %s failed", o->dump);
  release(&g);
  return rc;
}
