/* evictd-llama generate: the command line and the whole run. Loads the
 * models, tokenizes the prompt, opens the evictd session, sizes llama.cpp's
 * contexts from it, runs the decode phases (decode.c, speculate.c),
 * prints the text and closes the sessions. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cli.h"
#include "generate/decode.h"
#include "generate/generate.h"
#include "generate/speculate.h"

#define WHO "evictd-llama generate"

/* --rewind AT:K, both decimal, 1 <= K <= AT, into rewind_at, rewind_k. */
static int parse_rewind(const char *who, const char *arg, void *field) {
  uint32_t *v = field;
  const char *colon = strchr(arg, ':');
  unsigned long long at = 0, k = 0;
  char head[32];
  if (colon == NULL || (size_t)(colon - arg) >= sizeof(head))
    return cli_say(-1, who, NULL, "--rewind wants AT:K, not '%s'", arg);
  memcpy(head, arg, (size_t)(colon - arg));
  head[colon - arg] = '\0';
  if (cli_number(who, "rewind (AT)", head, 1, 1u << 30, &at) != 0 ||
      cli_number(who, "rewind (K)", colon + 1, 1, 1u << 30, &k) != 0)
    return -1;
  if (k > at)
    return cli_say(-1, who, NULL, "--rewind %s takes back more tokens than "
                   "were generated (K <= AT)", arg);
  v[0] = (uint32_t)at;
  v[1] = (uint32_t)k;
  return 0;
}

#define GEN(f) offsetof(gen_opts_t, f)

static const cli_opt_t options[] = {
    {"prompt", "p", "TEXT", CLI_STR, GEN(prompt), 0, 0, {NULL},
     "the prompt (default: empty, the BOS alone)"},
    {"file", "f", "FILE", CLI_STR, GEN(file), 0, 0, {NULL},
     "the prompt from a file ('-': stdin)"},
    {"n-predict", "n", "N", CLI_U32, GEN(n_predict), 0, 1u << 30, {NULL},
     "tokens to generate per sequence"},
    {"session", NULL, "ID", CLI_STR, GEN(session), 0, 0, {NULL},
     "the evictd session (default evictd-llama-PID; samples are ID~0, "
     "ID~1, ...: in a pool they live on ID's instance)"},
    {"draft", NULL, "FILE", CLI_STR, GEN(draft), 0, 0, {NULL},
     "speculative decoding with this draft model (greedy, one sequence)"},
    {"draft-n", NULL, "K", CLI_U32, GEN(draft_n), 1, 64, {NULL},
     "drafts per iteration"},
    {"parallel", NULL, "N", CLI_U32, GEN(parallel), 1, 256, {NULL},
     "N samples of one prompt: evictd fork and llama_memory_seq_cp, one "
     "batch per iteration (default 1)"},
    {"temp", NULL, "T", CLI_DOUBLE, GEN(temp), 0, 100, {NULL},
     "sampling temperature (default 0: greedy)"},
    {"seed", NULL, "S", CLI_U64, GEN(seed), 0, UINT64_MAX, {NULL},
     "sampling seed (sample i uses S + i)"},
    {"rewind", NULL, "AT:K", CLI_CALL, GEN(rewind_at), 0, 0, {parse_rewind},
     "once AT tokens are generated, take the last K back (evictd truncate; "
     "K <= budget - sinks with original positions) and continue with the "
     "runner-up token"},
    {"positions", NULL, "MODE", CLI_CALL, GEN(positions), 0, 0,
     {cli_parse_positions},
     "RoPE positions: original (each token its absolute position, the "
     "default) or cache (streaming-llm: its index in the kept cache; keys "
     "above an evicted gap move down with llama_memory_seq_add)"},
    {"n-ctx", NULL, "N", CLI_U32, GEN(n_ctx), 1, INT32_MAX, {NULL},
     "KV cells per sequence (default: budget + lookahead, rounded up to "
     "256)"},
    {"keep-session", NULL, NULL, CLI_FLAG, GEN(keep_session), 0, 0, {NULL},
     "leave the sessions in evictd at the end"},
    {"dump", NULL, "PREFIX", CLI_STR, GEN(dump), 0, 0, {NULL},
     "record every request, removal and logit (PREFIX.jsonl, PREFIX.f32; "
     "see README.md)"},
    {"stats", NULL, NULL, CLI_FLAG, GEN(stats), 0, 0, {NULL},
     "time per iteration, and evictd's share, on stderr"},
};

static const char synopsis[] =
    "usage: evictd-llama generate -m MODEL.gguf [options]\n"
    "\n"
    "Decodes with llama.cpp, each sequence's KV cache kept by evictd: one\n"
    "evictd request per decode iteration, and the cache loses exactly the\n"
    "positions evictd names (no context shift of llama.cpp's own, so it\n"
    "runs past n_ctx). Text goes to stdout.\n";

#define bad(...) cli_say(2, WHO, WHO " --help", __VA_ARGS__)

/* ---- set-up ------------------------------------------------------------- */

static int setup(gen_t *g) {
  const gen_opts_t *o = g->o;
  fault_t f;
  g->n_samples = o->parallel ? o->parallel : 1;
  if (lanes_new(&g->lanes, &o->link, g->n_samples, &f) != 0)
    return gen_fault(&f);
  g->samples = calloc(g->n_samples, sizeof(*g->samples));
  g->steps = calloc(g->n_samples, sizeof(*g->steps));
  g->results = calloc(g->n_samples, sizeof(*g->results));
  g->idx = calloc(g->n_samples, sizeof(*g->idx));
  g->sq = calloc(g->n_samples, sizeof(*g->sq));
  if (!g->samples || !g->steps || !g->results || !g->idx || !g->sq)
    return gen_fail("out of memory");
  char base[SEQ_ID_MAX + 1];
  if (o->session != NULL) {
    /* The samples' ids add "~N" (sample numbers below 256: 4 bytes):
     * nginx's key, and a pool's, is an id up to its first '~', so in a
     * pool the samples live on their parent's instance, where the fork
     * makes them. */
    size_t room = SEQ_ID_MAX - (g->n_samples > 1 ? 4 : 0);
    if (strlen(o->session) > room)
      return gen_fail("--session is %zu bytes; evictd's ids are at most %d%s",
                      strlen(o->session), SEQ_ID_MAX,
                      g->n_samples > 1 ? ", with the samples' \"~N\"" : "");
    snprintf(base, sizeof(base), "%s", o->session);
  } else {
    snprintf(base, sizeof(base), "evictd-llama-%ld", (long)getpid());
  }
  for (uint32_t i = 0; i < g->n_samples; i++) {
    sample_t *s = &g->samples[i];
    char id[SEQ_ID_MAX + 8];
    snprintf(id, sizeof(id), g->n_samples == 1 ? "%s" : "%s~%u", base, i);
    s->smp = (sampler_t){.temp = o->temp, .top_p = 1, .state = o->seed + i};
    if (seq_init(&s->s, (int32_t)i, id, o->positions) != 0 ||
        posmap_init(&s->dmap, o->positions, 64) != 0)
      return gen_fail("out of memory");
  }
  g->has_draft = o->draft != NULL;
  return 0;
}

static int load_models(gen_t *g) {
  const gen_opts_t *o = g->o;
  char err[512];
  if (lm_load(&g->target, "target", o->lm.model, err, sizeof(err)) != 0)
    return gen_fail("%s", err);
  if (g->has_draft) {
    if (lm_load(&g->draft, "draft", o->draft, err, sizeof(err)) != 0)
      return gen_fail("%s", err);
    if (g->draft.n_vocab != g->target.n_vocab)
      return gen_fail("the draft model's vocabulary (%d) is not the "
                      "target's (%d)", g->draft.n_vocab, g->target.n_vocab);
  }
  sample_t *s0 = &g->samples[0];
  llama_token *toks;
  int n = lm_tokenize(&g->target, o->prompt, o->prompt_len, false, &toks);
  if (n <= 0)
    return gen_fail(n == 0 ? "the prompt is empty (and the model adds no "
                             "BOS)" : "cannot tokenize the prompt");
  if (gen_reserve(s0, (uint32_t)n + 2) != 0) {
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
  evd_view_t v;
  fault_t f;
  link_t *l = gen_link(g, &g->samples[0]);
  if (l == NULL)
    return 1;
  if (seq_open(l, &g->samples[0].s, &o->cfg, &v, &f) != 0)
    return gen_fault(&f);
  g->budget = v.budget;
  g->sinks = v.sinks;
  g->lookahead = v.lookahead;
  if (g->has_draft && g->lookahead < o->draft_n + 1)
    return gen_fail("speculative decoding with %u drafts needs a session "
                    "lookahead of at least %u (the pending token and the "
                    "drafts are tentative together); session %s has %u",
                    o->draft_n, o->draft_n + 1, g->samples[0].s.session,
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
  if (draft_cells * g->n_samples > INT32_MAX)
    return gen_fail("budget %u needs more KV cells than llama.cpp allows",
                    g->budget);
  uint32_t batch = g->lookahead + 1;
  if (batch < g->n_samples)
    batch = g->n_samples;
  lm_opts_t lo = {.n_ctx = (uint32_t)cells, .n_batch = batch,
                  .n_seq = g->n_samples};
  if (lm_context(&g->target, &lo, &o->lm, err, sizeof(err)) != 0)
    return gen_fail("%s", err);
  lo.n_ctx = (uint32_t)draft_cells;
  if (g->has_draft && lm_context(&g->draft, &lo, &o->lm, err, sizeof(err)))
    return gen_fail("%s", err);
  /* Drafts rejected and --rewind take positions back, which only a cache
   * of full attention can give. */
  for (int m = 0; m < 2; m++) {
    const lm_t *lm = m == 0 ? &g->target : g->has_draft ? &g->draft : NULL;
    if (lm != NULL && !lm->rewind && (g->has_draft || o->rewind_k > 0))
      return gen_fail("%s takes decoded positions back, and the %s model "
                      "keeps a state that cannot go back (%s layers)",
                      g->has_draft ? "--draft" : "--rewind", lm->label,
                      lm_mem_name(lm->kind));
  }
  lm_t *lms[2] = {&g->target, g->has_draft ? &g->draft : NULL};
  for (int m = 0; m < 2 && lms[m] != NULL; m++)
    if (seq_positions_ok(lms[m], o->positions, err, sizeof(err)) != 0)
      return gen_fail("%s", err);
  for (int m = 0; m < 2; m++)
    if ((g->abs[m] = calloc(batch, sizeof(*g->abs[m]))) == NULL)
      return gen_fail("out of memory");
  g->pos = calloc(g->lookahead + g->n_samples + 2, sizeof(*g->pos));
  return g->pos == NULL ? gen_fail("out of memory") : 0;
}

/* ---- the run ------------------------------------------------------------ */

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

static void print_stats(gen_t *g) {
  times_t *t = &g->times;
  double tot = sum(t->total, t->n), evd = sum(t->evictd, t->n);
  fprintf(stderr,
          "evictd-llama: %zu decode iterations of %u sequence(s): per "
          "iteration median %.1f us in all, %.1f us evictd, %.1f us "
          "llama_decode, %.1f us removing; evictd %.2f%% of the "
          "iterations' time; %s positions\n",
          t->n, g->n_samples, median(t->total, t->n) * 1e6,
          median(t->evictd, t->n) * 1e6, median(t->decode, t->n) * 1e6,
          median(t->remove, t->n) * 1e6, tot > 0 ? 100.0 * evd / tot : 0.0,
          posmap_name(g->o->positions));
  evd_client_stats_t cs;
  link_counts_t counts;
  lanes_counts(g->lanes, &counts, &cs);
  const link_counts_t *n = &counts;
  fprintf(stderr, "evictd-llama: evictd: %llu requests, %llu resends, "
          "%llu replayed, %llu connections, %llu re-homes (%llu lost, "
          "%llu diverged, %llu fresh)\n",
          (unsigned long long)cs.requests, (unsigned long long)cs.resends,
          (unsigned long long)cs.replayed,
          (unsigned long long)cs.connections,
          (unsigned long long)(n->rehomes[LINK_LOST] +
                               n->rehomes[LINK_DIVERGED] +
                               n->rehomes[LINK_FRESH]),
          (unsigned long long)n->rehomes[LINK_LOST],
          (unsigned long long)n->rehomes[LINK_DIVERGED],
          (unsigned long long)n->rehomes[LINK_FRESH]);
  if (g->has_draft)
    fprintf(stderr, "evictd-llama: drafts accepted %llu of %llu\n",
            (unsigned long long)g->accepted, (unsigned long long)g->drafted);
}

/* dump_remove as a seq_trace_t. */
static void trace_remove(void *ud, const lm_t *lm, const seq_t *s,
                         const char *why, const uint32_t *v, size_t n) {
  dump_remove(ud, lm->label, s->id, why, v, n);
}

static int run(gen_t *g) {
  const gen_opts_t *o = g->o;
  if (setup(g) != 0 || load_models(g) != 0 || open_session(g) != 0 ||
      make_contexts(g) != 0)
    return 1;
  g->stream = g->n_samples == 1 && o->rewind_at == 0;
  dump_start(g->dump, o->lm.model, g->target.n_vocab, g->budget, g->sinks,
             g->lookahead, g->n_samples, g->has_draft ? o->draft_n : 0,
             posmap_name(o->positions));
  if (o->n_predict > 0) {
    if (gen_prefill(g) != 0 || gen_fork_and_start(g) != 0)
      return 1;
    bool more = true, rewound = false;
    while (more) {
      if (g->has_draft ? gen_speculate(g, &more) : gen_iterate(g, &more))
        return 1;
      sample_t *s = &g->samples[0];
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
  for (uint32_t i = 0; i < g->n_samples; i++) {
    sample_t *s = &g->samples[i];
    fault_t f;
    if (!g->stream && o->n_predict > 0) {
      if (g->n_samples > 1)
        printf("%s--- sample %u\n", i ? "\n" : "", i);
      gen_stream(g, s, s->n + 1);
    }
    link_t *l = o->keep_session ? NULL : gen_link(g, s);
    if (!o->keep_session && (l == NULL || seq_close(l, &s->s, false, &f)))
      return l == NULL ? 1 : gen_fault(&f);
  }
  putchar('\n');
  fflush(stdout);
  if (o->stats)
    print_stats(g);
  return 0;
}

static void release(gen_t *g) {
  for (uint32_t i = 0; g->samples != NULL && i < g->n_samples; i++) {
    sample_t *s = &g->samples[i];
    /* After a failure the sessions this run created go, best effort. */
    link_t *l = g->lanes != NULL && !g->o->keep_session ? gen_link(g, s)
                                                         : NULL;
    if (l != NULL)
      seq_close(l, &s->s, true, NULL);
    free(s->hist);
    free(s->alt);
    seq_free(&s->s);
    posmap_free(&s->dmap);
  }
  free(g->samples);
  free(g->steps);
  free(g->results);
  free(g->idx);
  free(g->sq);
  free(g->pos);
  free(g->abs[0]);
  free(g->abs[1]);
  free(g->times.total);
  free(g->times.evictd);
  free(g->times.decode);
  free(g->times.remove);
  lm_close(&g->draft);
  lm_close(&g->target);
  lanes_free(g->lanes);
}

static int gen_run(const gen_opts_t *o) {
  gen_t g;
  memset(&g, 0, sizeof(g));
  g.o = o;
  lm_init(o->lm.debug);
  if (o->dump != NULL) {
    if (dump_open(&g.dumpf, o->dump) != 0)
      return gen_fail("cannot write %s.jsonl / .f32: %s", o->dump,
                      strerror(errno));
    g.dump = &g.dumpf;
    g.trace = (seq_trace_t){trace_remove, g.dump};
  }
  int rc = run(&g);
  if (g.dump != NULL && dump_close(g.dump) != 0 && rc == 0)
    rc = gen_fail("writing the dump %s failed", o->dump);
  release(&g);
  return rc;
}

/* Rules between options, which no single option can check. */
static int check(gen_opts_t *o) {
  if (o->prompt != NULL && o->file != NULL)
    return bad("give -p or -f, not both");
  if (o->draft != NULL && (o->parallel > 1 || o->temp > 0 || o->rewind_at))
    return bad("--draft decodes one sequence greedily: not with "
               "--parallel, --temp or --rewind");
  if (o->rewind_at > o->n_predict)
    return bad("--rewind %u:%u would never happen: only %u tokens are "
               "generated (-n)", o->rewind_at, o->rewind_k, o->n_predict);
  if (o->rewind_at && o->parallel > 1)
    return bad("--rewind works on one sequence, not --parallel");
  if (o->draft != NULL && o->cfg.lookahead < 0)
    o->cfg.lookahead = o->draft_n + 1; /* the pending token and the drafts */
  return 0;
}

int generate_main(int argc, char **argv) {
  gen_opts_t o = {.lm = {LM_EXACT}, .link = LINK_OPTS_DEFAULT,
                  .n_predict = 128, .cfg = EVD_SESSION_CFG_DEFAULT,
                  .draft_n = 4};
  cli_cmd_t c = CLI_CMD(WHO, synopsis, options, o);
  int rc = cli_command(&c, argc, argv);
  if (rc != CLI_RUN)
    return rc;
  if (check(&o) != 0)
    return 2;
  char *text = NULL;
  if (o.file != NULL) {
    text = cli_read_file(o.file, &o.prompt_len);
    if (text == NULL)
      return bad("cannot read the prompt file %s: %s", o.file,
                 strerror(errno));
    o.prompt = text;
  } else {
    o.prompt = o.prompt != NULL ? o.prompt : "";
    o.prompt_len = strlen(o.prompt);
  }
  rc = gen_run(&o);
  free(text);
  return rc;
}
