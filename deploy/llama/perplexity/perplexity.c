/* evictd-llama perplexity: a text decoded token by token as parallel
 * llama.cpp sequences, one per policy (full attention, and the window and
 * sinks policies at each budget), one llama.cpp pass and one evictd batch
 * request per token; each token's negative log-likelihood is kept. */
#include "perplexity/perplexity.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cli.h"
#include "common/clock.h"
#include "common/lanes.h"
#include "common/link.h"
#include "common/lm.h"
#include "common/seq.h"

#define WHO "evictd-llama perplexity"

static const char synopsis[] =
    "usage: evictd-llama perplexity -m MODEL.gguf [options] FILE\n"
    "\n"
    "The perplexity of the text in FILE ('-': stdin) decoded token by token\n"
    "with full attention, and with evictd's window (sinks 0) and sinks\n"
    "policies at each budget: every policy is a llama.cpp sequence of one\n"
    "batch, one pass and one evictd batch request per token, the cache\n"
    "losing exactly the positions evictd names after each pass. Prints a\n"
    "table: per budget and policy the perplexity, and the first position\n"
    "where the trailing perplexity (over the last --trail tokens) is more\n"
    "than twice full attention's over the same tokens.\n";

typedef struct opts_s {
  lm_settings_t lm;
  link_opts_t link;
  const char *budgets, *svg;
  uint32_t n_max, svg_budget, trail, sinks;
  pos_mode_t positions;
  bool json;
} opts_t;

#define OPT(f) offsetof(opts_t, f)

static const cli_opt_t options[] = {
    {"budgets", NULL, "LIST", CLI_STR, OPT(budgets), 0, 0, {NULL},
     "comma-separated budgets"},
    {"sinks", NULL, "N", CLI_U32, OPT(sinks), 0, 1u << 24, {NULL},
     "the sinks policy's pinned positions (each budget must be larger)"},
    {"positions", NULL, "MODE", CLI_CALL, OPT(positions), 0, 0,
     {cli_parse_positions},
     "RoPE positions: original (absolute, the default) or cache (index in "
     "the kept cache, keys shifted as streaming-llm does)"},
    {"tokens", "n", "N", CLI_U32, OPT(n_max), 1, 1u << 30, {NULL},
     "score at most N tokens (default: all)"},
    {"trail", NULL, "W", CLI_U32, OPT(trail), 1, 1u << 30, {NULL},
     "the trailing window of the running perplexity"},
    {"json", NULL, NULL, CLI_FLAG, OPT(json), 0, 0, {NULL},
     "JSON on stdout instead of the table: each policy's summary and "
     "per-token NLL"},
    {"svg", NULL, "FILE", CLI_STR, OPT(svg), 0, 0, {NULL},
     "trailing perplexity against position, every policy at one budget (an "
     "SVG file)"},
    {"svg-budget", NULL, "B", CLI_U32, OPT(svg_budget), 1, 1u << 24, {NULL},
     "that budget (default: the smallest)"},
};

#define fail(...) cli_say(1, WHO, NULL, __VA_ARGS__)
#define bad(...) cli_say(2, WHO, WHO " --help", __VA_ARGS__)

/* "64,128,256": ascending or not, no repeats, each 1..2^24. */
static int parse_budgets(const char *s, ppl_run_t *r) {
  const char *p = s;
  r->n_budgets = 0;
  for (;;) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (*p < '0' || *p > '9' || end == p || errno != 0 || v < 1 ||
        v > (1u << 24) || (*end != ',' && *end != '\0'))
      return bad("--budgets wants whole numbers from 1 to %u separated by "
                 "commas (64,128,256), not '%s'", 1u << 24, s);
    for (uint32_t i = 0; i < r->n_budgets; i++)
      if (r->budgets[i] == v)
        return bad("--budgets names %llu twice", v);
    if (r->n_budgets == PPL_MAX_BUDGETS)
      return bad("--budgets: at most %d budgets", PPL_MAX_BUDGETS);
    r->budgets[r->n_budgets++] = (uint32_t)v;
    if (*end == '\0')
      return 0;
    p = end + 1;
  }
}

/* -log softmax(l)[tok], in double. */
static double nll_of(const float *l, int32_t n_vocab, llama_token tok) {
  double mx = l[0];
  for (int32_t i = 1; i < n_vocab; i++)
    if (l[i] > mx)
      mx = l[i];
  double s = 0;
  for (int32_t i = 0; i < n_vocab; i++)
    s += exp((double)l[i] - mx);
  return mx + log(s) - (double)l[tok];
}

typedef struct state_s {
  const opts_t *o;
  ppl_run_t *r;
  lm_t lm;
  lanes_t *lanes;       /* evictd: one instance, or a pool's lanes */
  seq_t *seqs;          /* [0] full attention (no session), then policies */
  seq_t **sq;           /* the sequence of each step */
  evd_step_t *steps;
  evd_batch_result_t *res;
  uint32_t *pos;
} state_t;

/* The engine's own link to the instance s's session lives on
 * (common/lanes.h); NULL with f set when out of memory. */
static link_t *link_of(state_t *st, const seq_t *s, fault_t *f) {
  return lanes_direct(st->lanes, lanes_route(st->lanes, s->session,
                                             (uint32_t)s->id), f);
}

/* Opens the evictd session of every windowed policy (lookahead 1: one
 * position per step). */
static int open_sessions(state_t *st) {
  ppl_run_t *r = st->r;
  fault_t f;
  for (uint32_t i = 1; i < r->n_pol; i++) {
    evd_session_cfg_t cfg = {r->pol[i].budget, r->pol[i].sinks, 1, -1};
    evd_view_t v;
    link_t *l = link_of(st, &st->seqs[i], &f);
    if (l == NULL || seq_open(l, &st->seqs[i], &cfg, &v, &f) != 0)
      return fail("%s", f.msg);
  }
  return 0;
}

/* The step of position p for every windowed policy, one batch request,
 * each item's outcome checked. */
static int step_all(state_t *st, uint32_t p) {
  uint32_t n = st->r->n_pol - 1;
  fault_t f;
  for (uint32_t i = 0; i < n; i++) {
    st->pos[i] = p;
    st->steps[i] = (evd_step_t){.session = st->seqs[i + 1].session,
                                .positions = &st->pos[i], .n_positions = 1};
    st->sq[i] = &st->seqs[i + 1];
  }
  /* Each instance's part at once (lanes), every answer waited for. */
  if (lanes_batch(st->lanes, st->sq, st->steps, n, st->res, &f) != 0)
    return fail("%s", f.msg);
  for (uint32_t i = 0; i < n; i++)
    if (link_item(&st->res[i], st->steps[i].session, &f) != 0)
      return fail("%s", f.msg);
  return 0;
}

/* The run: position 0 (BOS) is held by every new session, so the first
 * pass computes it without a step; each later position p is one evictd
 * batch step, one pass of every sequence, each token's NLL, then the
 * answers are followed: the victims leave the caches (a token attends to
 * the window it was stepped into and the positions that step evicts, as in
 * evictd-llama generate). */
static int run(state_t *st, const llama_token *toks, uint32_t t) {
  ppl_run_t *r = st->r;
  fault_t f;
  for (uint32_t p = 0; p + 1 < t; p++) {
    if (p > 0 && r->n_pol > 1 && step_all(st, p) != 0)
      return 1;
    lm_clear(&st->lm);
    for (uint32_t i = 0; i < r->n_pol; i++)
      if (seq_put(&st->seqs[i], &st->lm, toks[p], p, true, &f) != 0)
        return fail("%s", f.msg);
    char err[256];
    if (lm_decode(&st->lm, err, sizeof(err)) != 0)
      return fail("%s", err);
    for (uint32_t i = 0; i < r->n_pol; i++)
      r->pol[i].nll[p] = nll_of(lm_logits(&st->lm, (int32_t)i),
                                st->lm.n_vocab, toks[p + 1]);
    for (uint32_t i = 1; p > 0 && i < r->n_pol; i++)
      if (seq_follow(&st->seqs[i], &st->lm, &st->res[i - 1].answer, 1, NULL,
                     &f) != 0)
        return fail("%s", f.msg);
  }
  return 0;
}

/* The policies: full attention, then window and sinks of each budget,
 * each a sequence (sessions named after the process and the policy). */
static int policies(state_t *st, uint32_t t) {
  ppl_run_t *r = st->r;
  r->n_pol = 1 + 2 * r->n_budgets;
  r->pol = calloc(r->n_pol, sizeof(*r->pol));
  st->seqs = calloc(r->n_pol, sizeof(*st->seqs));
  st->steps = calloc(r->n_pol, sizeof(*st->steps));
  st->res = calloc(r->n_pol, sizeof(*st->res));
  st->pos = calloc(r->n_pol, sizeof(*st->pos));
  st->sq = calloc(r->n_pol, sizeof(*st->sq));
  if (!r->pol || !st->seqs || !st->steps || !st->res || !st->pos || !st->sq)
    return fail("out of memory");
  snprintf(r->pol[0].name, sizeof(r->pol[0].name), "full");
  for (uint32_t b = 0; b < r->n_budgets; b++)
    for (uint32_t k = 0; k < 2; k++) {
      ppl_policy_t *p = &r->pol[1 + 2 * b + k];
      snprintf(p->name, sizeof(p->name), k ? "sinks" : "window");
      p->budget = r->budgets[b];
      p->sinks = k ? st->o->sinks : 0;
    }
  for (uint32_t i = 0; i < r->n_pol; i++) {
    char id[64] = "";
    if (i > 0)
      snprintf(id, sizeof(id), "ppl-%ld.%u.%s", (long)getpid(),
               r->pol[i].budget, r->pol[i].name);
    r->pol[i].nll = calloc(t, sizeof(double));
    r->pol[i].trail = calloc(t, sizeof(double));
    if (!r->pol[i].nll || !r->pol[i].trail ||
        seq_init(&st->seqs[i], (int32_t)i, id, r->positions) != 0)
      return fail("out of memory");
  }
  return 0;
}

static int perplexity(const opts_t *o, ppl_run_t *r, const char *file) {
  state_t st = {.o = o, .r = r};
  char err[512];
  size_t len = 0;
  char *text = cli_read_file(file, &len);
  if (text == NULL)
    return fail("cannot read %s: %s", file, strerror(errno));
  int rc = 1;
  llama_token *toks = NULL;
  lm_init(o->lm.debug);
  if (lm_load(&st.lm, "target", o->lm.model, err, sizeof(err)) != 0) {
    fail("%s", err);
    goto out_text;
  }
  r->n_ctx_train = llama_model_n_ctx_train(st.lm.model);
  int nt = lm_tokenize(&st.lm, text, len, false, &toks);
  if (nt < 0) {
    fail("cannot tokenize %s", file);
    goto out_model;
  }
  uint32_t t = (uint32_t)nt;
  if (o->n_max > 0 && t > o->n_max + 1)
    t = o->n_max + 1;
  if (t < 2) {
    fail("%s has no tokens to score (it is empty)", file);
    goto out_model;
  }
  r->n_tokens = t - 1;
  if (policies(&st, t) != 0)
    goto out_mem;
  /* Full attention holds the whole text; a window budget + 1 cells. */
  lm_opts_t lo = {.n_ctx = (t + 255) / 256 * 256, .n_batch = r->n_pol,
                  .n_seq = r->n_pol};
  if (lm_context(&st.lm, &lo, &o->lm, err, sizeof(err)) != 0 ||
      seq_positions_ok(&st.lm, r->positions, err, sizeof(err)) != 0) {
    fail("%s", err);
    goto out_mem;
  }
  fault_t f;
  if (r->n_pol > 1 && lanes_new(&st.lanes, &o->link, r->n_pol, &f) != 0) {
    fail("%s", f.msg);
    goto out_mem;
  }
  double t0 = clock_now();
  if ((r->n_pol > 1 && open_sessions(&st) != 0) || run(&st, toks, t) != 0)
    goto out_sessions;
  r->seconds = clock_now() - t0;
  rc = 0;
out_sessions:
  /* After a failure, best effort: never a long wait on a dead daemon. */
  for (uint32_t i = 1; i < r->n_pol; i++) {
    link_t *l = link_of(&st, &st.seqs[i], &f);
    if (l != NULL)
      seq_close(l, &st.seqs[i], rc != 0, NULL);
  }
  lanes_free(st.lanes);
out_mem:
  for (uint32_t i = 0; st.seqs != NULL && i < r->n_pol; i++)
    seq_free(&st.seqs[i]);
  free(st.seqs);
  free(st.steps);
  free(st.res);
  free(st.pos);
  free(st.sq);
out_model:
  free(toks);
  lm_close(&st.lm);
out_text:
  free(text);
  return rc;
}

static void run_free(ppl_run_t *r) {
  for (uint32_t i = 0; r->pol != NULL && i < r->n_pol; i++) {
    free(r->pol[i].nll);
    free(r->pol[i].trail);
  }
  free(r->pol);
}

/* Rules between options; fills r from o. */
static int check(opts_t *o, ppl_run_t *r, size_t n_rest) {
  if (n_rest == 0)
    return bad("no FILE: the text to score");
  if (parse_budgets(o->budgets, r) != 0)
    return 2;
  for (uint32_t i = 0; i < r->n_budgets; i++)
    if (r->budgets[i] <= o->sinks)
      return bad("budget %u leaves the sinks policy no window: --sinks %u "
                 "pins that many positions, so each budget must be larger",
                 r->budgets[i], o->sinks);
  if (o->svg_budget == 0) {
    o->svg_budget = r->budgets[0];
    for (uint32_t i = 1; i < r->n_budgets; i++)
      if (r->budgets[i] < o->svg_budget)
        o->svg_budget = r->budgets[i];
  } else {
    bool found = false;
    for (uint32_t i = 0; i < r->n_budgets; i++)
      found |= r->budgets[i] == o->svg_budget;
    if (!found)
      return bad("--svg-budget %u is not one of --budgets %s", o->svg_budget,
                 o->budgets);
  }
  r->model = o->lm.model;
  r->positions = o->positions;
  r->trail_w = o->trail;
  r->sinks = o->sinks;
  return 0;
}

int perplexity_main(int argc, char **argv) {
  opts_t o = {.lm = {LM_EXACT}, .link = LINK_OPTS_DEFAULT,
              .budgets = "64,128,256", .trail = 256, .sinks = 4};
  ppl_run_t r = {.positions = POS_ORIGINAL};
  const char *file = NULL;
  size_t n_rest = 0;
  cli_cmd_t c = {.who = WHO, .synopsis = synopsis, .opts = options,
                 .n = sizeof(options) / sizeof(options[0]), .base = &o,
                 .lm = &o.lm, .link = &o.link, .rest = &file, .max_rest = 1,
                 .n_rest = &n_rest};
  int rc = cli_command(&c, argc, argv);
  if (rc != CLI_RUN)
    return rc;
  if (check(&o, &r, n_rest) != 0)
    return 2;
  r.file = file;
  rc = perplexity(&o, &r, file);
  if (rc == 0) {
    ppl_summarize(&r);
    if (o.json ? ppl_json(&r, stdout) : (ppl_table(&r, stdout), 0))
      rc = fail("cannot write the output: %s", strerror(errno));
  }
  if (rc == 0 && o.svg != NULL) {
    FILE *f = fopen(o.svg, "w");
    int bad_write = f == NULL || ppl_svg(&r, o.svg_budget, f) != 0;
    if ((f != NULL && fclose(f) != 0) || bad_write)
      rc = fail("cannot write %s: %s", o.svg, strerror(errno));
  }
  run_free(&r);
  return rc;
}
