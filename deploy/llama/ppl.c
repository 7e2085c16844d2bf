/* evictd-llama perplexity: a text decoded token by token as parallel
 * llama.cpp sequences, one per policy (full attention, and the window and
 * sinks policies at each budget), one llama.cpp pass and one evictd batch
 * request per token; each token's negative log-likelihood is kept. */
#include "cli.h"
#include "ppl.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "evictd/client.h"
#include "lm.h"

static const char usage[] =
    "usage: evictd-llama perplexity -m MODEL.gguf [options] FILE\n"
    "\n"
    "The perplexity of the text in FILE ('-': stdin) decoded token by token\n"
    "with full attention, and with evictd's window (sinks 0) and sinks\n"
    "policies at each budget: every policy is a llama.cpp sequence of one\n"
    "batch, one pass and one evictd batch request per token, the cache\n"
    "losing exactly the positions evictd names after each pass. Prints a\n"
    "table: per budget and policy the perplexity, and the first position\n"
    "where the trailing perplexity (over the last --trail tokens) is more\n"
    "than twice full attention's over the same tokens.\n"
    "\n"
    "  -m, --model FILE       the model (GGUF)\n"
    "      --budgets LIST     comma-separated budgets (default 64,128,256)\n"
    "      --sinks N          the sinks policy's pinned positions (default 4;\n"
    "                         each budget must be larger)\n"
    "      --positions MODE   RoPE positions: original (absolute, the\n"
    "                         default) or cache (index in the kept cache,\n"
    "                         keys shifted as streaming-llm does)\n"
    "  -n N                   score at most N tokens (default: all)\n"
    "      --trail W          the trailing window of the running\n"
    "                         perplexity (default 256)\n"
    "      --json             JSON on stdout instead of the table: each\n"
    "                         policy's summary and per-token NLL\n"
    "      --svg FILE         trailing perplexity against position, every\n"
    "                         policy at one budget (an SVG file)\n"
    "      --svg-budget B     that budget (default: the smallest)\n"
    "      --evictd URL       the daemon (default $EVICTD_URL, else\n"
    "                         http://127.0.0.1:8090)\n"
    "      --reconnect-ms MS  keep resending while evictd restarts or\n"
    "                         answers late (default 30000)\n"
    "      --threads N        llama.cpp threads (default 1)\n"
    "      --debug            llama.cpp's whole log\n"
    "  -h, --help             this text\n";

enum { O_BUDGETS = 256, O_SINKS, O_POSITIONS, O_TRAIL, O_JSON, O_SVG,
       O_SVG_BUDGET, O_EVICTD, O_RECONNECT, O_THREADS, O_DEBUG };

static const struct option longopts[] = {
    {"model", required_argument, NULL, 'm'},
    {"budgets", required_argument, NULL, O_BUDGETS},
    {"sinks", required_argument, NULL, O_SINKS},
    {"positions", required_argument, NULL, O_POSITIONS},
    {"trail", required_argument, NULL, O_TRAIL},
    {"json", no_argument, NULL, O_JSON},
    {"svg", required_argument, NULL, O_SVG},
    {"svg-budget", required_argument, NULL, O_SVG_BUDGET},
    {"evictd", required_argument, NULL, O_EVICTD},
    {"reconnect-ms", required_argument, NULL, O_RECONNECT},
    {"threads", required_argument, NULL, O_THREADS},
    {"debug", no_argument, NULL, O_DEBUG},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0}};

typedef struct opts_s {
  const char *model, *file, *url, *svg;
  uint32_t n_max, svg_budget, trail, sinks;
  unsigned reconnect_ms;
  int threads;
  bool json, debug;
} opts_t;

/* One policy's sequence while it runs. */
typedef struct seq_s {
  char session[64];
  posmap_t map;
  uint32_t held;        /* positions evictd holds */
  bool created;
} seq_t;

#define fail(...) cli_say(1, "evictd-llama perplexity", NULL, __VA_ARGS__)

#define bad(...)                                                          \
  cli_say(2, "evictd-llama perplexity", "evictd-llama perplexity --help",    \
          __VA_ARGS__)

static int number(const char *name, const char *arg, unsigned long long lo,
                  unsigned long long hi, uint32_t *out) {
  unsigned long long v;
  if (cli_number("evictd-llama perplexity", name, arg, lo, hi, &v) != 0)
    return 2;
  *out = (uint32_t)v;
  return 0;
}

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

static char *slurp(const char *path, size_t *len) {
  FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
  if (f == NULL)
    return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap + 1);
  while (buf != NULL) {
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap)
      break;
    char *b = realloc(buf, (cap *= 2) + 1);
    if (b == NULL)
      free(buf);
    buf = b;
  }
  int err = ferror(f);
  if (f != stdin)
    fclose(f);
  if (err || buf == NULL) {
    free(buf);
    return NULL;
  }
  buf[n] = '\0';
  *len = n;
  return buf;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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
  evd_client_t *ev;
  seq_t *seqs;
  evd_step_t *steps;
  evd_batch_result_t *res;
  uint32_t *pos;
} state_t;

static int evd_fail(state_t *st, const char *what, const char *session,
                    const evd_client_err_t *e) {
  if (e == NULL)
    e = evd_client_error(st->ev);
  if (e->rc == EVD_CLIENT_EAPI)
    return fail("evictd refused %s of session %s: %d %s: %s", what, session,
                e->status, e->code, e->message);
  return fail("%s of session %s failed: %s: %s", what, session, e->code,
              e->message);
}

/* Creates the evictd session of every windowed policy (lookahead 1: one
 * position per step); a session this run did not create is used only if
 * it is fresh (holds position 0 alone). */
static int create_sessions(state_t *st) {
  ppl_run_t *r = st->r;
  for (uint32_t i = 1; i < r->n_pol; i++) {
    seq_t *s = &st->seqs[i];
    ppl_policy_t *p = &r->pol[i];
    snprintf(s->session, sizeof(s->session), "ppl-%ld.%u.%s", (long)getpid(),
             p->budget, p->name);
    evd_session_cfg_t cfg = {p->budget, p->sinks, 1, -1};
    evd_view_t v;
    if (evd_client_create(st->ev, s->session, &cfg, &v) != 0)
      return evd_fail(st, "the create", s->session, NULL);
    s->created = v.created;
    if (!v.created && (v.size != 1 || v.newest != 0))
      return fail("session %s exists already and is not fresh; delete it",
                  s->session);
    s->held = 1;
  }
  return 0;
}

static void delete_sessions(state_t *st) {
  for (uint32_t i = 1; i < st->r->n_pol; i++)
    if (st->seqs[i].created)
      evd_client_delete(st->ev, st->seqs[i].session, true);
}

/* The step of position p for every windowed policy, one batch request; a
 * request that timed out is sent again (evictd replays a resent step). */
static int step_all(state_t *st, uint32_t p) {
  uint32_t n = st->r->n_pol - 1;
  for (uint32_t i = 0; i < n; i++) {
    st->pos[i] = p;
    st->steps[i] = (evd_step_t){.session = st->seqs[i + 1].session,
                                .positions = &st->pos[i], .n_positions = 1};
  }
  double t0 = now();
  int rc;
  do
    rc = evd_client_batch(st->ev, st->steps, n, st->res);
  while (rc == EVD_CLIENT_ETIMEOUT &&
         now() - t0 < st->o->reconnect_ms / 1000.0);
  if (rc != 0)
    return evd_fail(st, "the batch step", st->seqs[1].session, NULL);
  for (uint32_t i = 0; i < n; i++) {
    seq_t *s = &st->seqs[i + 1];
    const evd_batch_result_t *b = &st->res[i];
    if (b->rc != 0)
      return evd_fail(st, "the step", s->session, &b->error);
    /* The answer's size against the engine's own count: a session the
     * daemon lost and recreated would describe another window. */
    uint64_t held = (uint64_t)s->held + 1;
    if (b->answer.victims.n > held ||
        held - b->answer.victims.n != b->answer.size)
      return fail("evictd says session %s holds %u positions, the engine "
                  "counts %llu: the daemon lost the session", s->session,
                  b->answer.size,
                  (unsigned long long)(held - b->answer.victims.n));
    s->held = b->answer.size;
  }
  return 0;
}

/* The run: position 0 (BOS) is held by every new session, so the first
 * pass computes it without a step; each later position p is one evictd
 * batch step, one pass of every sequence, each token's NLL, then the
 * victims leave the caches (a token attends to the window it was stepped
 * into and the positions that step evicts, as in evictd-llama generate). */
static int run(state_t *st, const llama_token *toks, uint32_t t) {
  ppl_run_t *r = st->r;
  for (uint32_t p = 0; p + 1 < t; p++) {
    if (p > 0 && r->n_pol > 1 && step_all(st, p) != 0)
      return 1;
    lm_clear(&st->lm);
    for (uint32_t i = 0; i < r->n_pol; i++) {
      int32_t at = posmap_add(&st->seqs[i].map, p);
      if (at < 0)
        return fail("out of memory");
      lm_add(&st->lm, toks[p], at, (int32_t)i, true);
    }
    char err[256];
    if (lm_decode(&st->lm, err, sizeof(err)) != 0)
      return fail("%s", err);
    for (uint32_t i = 0; i < r->n_pol; i++)
      r->pol[i].nll[p] = nll_of(lm_logits(&st->lm, (int32_t)i),
                                st->lm.n_vocab, toks[p + 1]);
    if (p == 0)
      continue;
    for (uint32_t i = 1; i < r->n_pol; i++) {
      const evd_list_t *v = &st->res[i - 1].answer.victims;
      if (posmap_remove(&st->seqs[i].map, &st->lm, (int32_t)i, v->v, v->n))
        return fail("llama.cpp refused to remove positions of sequence %u "
                    "(or it does not hold them)", i);
    }
  }
  return 0;
}

static int perplexity(const opts_t *o, ppl_run_t *r) {
  state_t st = {.o = o, .r = r};
  char err[512];
  size_t len = 0;
  char *text = slurp(o->file, &len);
  if (text == NULL)
    return fail("cannot read %s: %s", o->file, strerror(errno));
  int rc = 1;
  llama_token *toks = NULL;
  lm_init(o->debug);
  if (lm_load(&st.lm, "target", o->model, err, sizeof(err)) != 0) {
    fail("%s", err);
    goto out_text;
  }
  r->n_ctx_train = llama_model_n_ctx_train(st.lm.model);
  int nt = lm_tokenize(&st.lm, text, len, &toks);
  if (nt < 0) {
    fail("cannot tokenize %s", o->file);
    goto out_model;
  }
  uint32_t t = (uint32_t)nt;
  if (o->n_max > 0 && t > o->n_max + 1)
    t = o->n_max + 1;
  if (t < 2) {
    fail("%s has no tokens to score (it is empty)", o->file);
    goto out_model;
  }
  r->n_tokens = t - 1;
  r->n_pol = 1 + 2 * r->n_budgets;
  r->pol = calloc(r->n_pol, sizeof(*r->pol));
  st.seqs = calloc(r->n_pol, sizeof(*st.seqs));
  st.steps = calloc(r->n_pol, sizeof(*st.steps));
  st.res = calloc(r->n_pol, sizeof(*st.res));
  st.pos = calloc(r->n_pol, sizeof(*st.pos));
  if (!r->pol || !st.seqs || !st.steps || !st.res || !st.pos) {
    fail("out of memory");
    goto out_mem;
  }
  snprintf(r->pol[0].name, sizeof(r->pol[0].name), "full");
  for (uint32_t b = 0; b < r->n_budgets; b++)
    for (uint32_t k = 0; k < 2; k++) {
      ppl_policy_t *p = &r->pol[1 + 2 * b + k];
      snprintf(p->name, sizeof(p->name), k ? "sinks" : "window");
      p->budget = r->budgets[b];
      p->sinks = k ? o->sinks : 0;
    }
  for (uint32_t i = 0; i < r->n_pol; i++) {
    r->pol[i].nll = calloc(t, sizeof(double));
    r->pol[i].trail = calloc(t, sizeof(double));
    if (!r->pol[i].nll || !r->pol[i].trail ||
        posmap_init(&st.seqs[i].map, r->positions, 64) != 0) {
      fail("out of memory");
      goto out_mem;
    }
  }
  /* Full attention holds the whole text; a window budget + 1 cells. */
  lm_opts_t lo = {.n_ctx = (t + 255) / 256 * 256, .n_batch = r->n_pol,
                  .n_seq = r->n_pol, .threads = o->threads, .exact = true};
  if (lm_context(&st.lm, &lo, err, sizeof(err)) != 0) {
    fail("%s", err);
    goto out_mem;
  }
  evd_client_opts_t co = {.url = o->url, .reconnect_ms = o->reconnect_ms};
  if (r->n_pol > 1 && evd_client_new(&st.ev, &co, err, sizeof(err)) != 0) {
    fail("%s", err);
    goto out_mem;
  }
  double t0 = now();
  if (r->n_pol > 1 && create_sessions(&st) != 0)
    goto out_sessions;
  if (run(&st, toks, t) != 0)
    goto out_sessions;
  r->seconds = now() - t0;
  rc = 0;
out_sessions:
  if (st.ev != NULL)
    delete_sessions(&st);
  evd_client_free(st.ev);
out_mem:
  for (uint32_t i = 0; st.seqs != NULL && i < r->n_pol; i++)
    posmap_free(&st.seqs[i].map);
  free(st.seqs);
  free(st.steps);
  free(st.res);
  free(st.pos);
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

int ppl_main(int argc, char **argv) {
  opts_t o = {.trail = 256, .sinks = 4, .reconnect_ms = 30000, .threads = 1};
  ppl_run_t r = {.positions = POS_ORIGINAL};
  const char *budgets = "64,128,256";
  uint32_t v;
  int c;
  while ((c = getopt_long(argc, argv, "m:n:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'm': o.model = optarg; break;
    case 'n':
      if (number("n", optarg, 1, 1u << 30, &o.n_max)) return 2;
      break;
    case O_BUDGETS: budgets = optarg; break;
    case O_SINKS:
      if (number("sinks", optarg, 0, 1u << 24, &o.sinks)) return 2;
      break;
    case O_POSITIONS:
      if (posmap_parse(optarg, &r.positions) != 0)
        return bad("--positions is original or cache, not '%s'", optarg);
      break;
    case O_TRAIL:
      if (number("trail", optarg, 1, 1u << 30, &o.trail)) return 2;
      break;
    case O_JSON: o.json = true; break;
    case O_SVG: o.svg = optarg; break;
    case O_SVG_BUDGET:
      if (number("svg-budget", optarg, 1, 1u << 24, &o.svg_budget)) return 2;
      break;
    case O_EVICTD: o.url = optarg; break;
    case O_RECONNECT:
      if (number("reconnect-ms", optarg, 0, 3600000, &v)) return 2;
      o.reconnect_ms = v;
      break;
    case O_THREADS:
      if (number("threads", optarg, 1, 256, &v)) return 2;
      o.threads = (int)v;
      break;
    case O_DEBUG: o.debug = true; break;
    case 'h': fputs(usage, stdout); return 0;
    default: return bad("unknown option or missing argument");
    }
  }
  if (optind >= argc)
    return bad("no FILE: the text to score");
  if (optind + 1 < argc)
    return bad("unexpected argument '%s'", argv[optind + 1]);
  o.file = argv[optind];
  if (o.model == NULL)
    return bad("-m MODEL.gguf is required");
  if (parse_budgets(budgets, &r) != 0)
    return 2;
  for (uint32_t i = 0; i < r.n_budgets; i++)
    if (r.budgets[i] <= o.sinks)
      return bad("budget %u leaves the sinks policy no window: --sinks %u "
                 "pins that many positions, so each budget must be larger",
                 r.budgets[i], o.sinks);
  if (o.svg_budget == 0) {
    o.svg_budget = r.budgets[0];
    for (uint32_t i = 1; i < r.n_budgets; i++)
      if (r.budgets[i] < o.svg_budget)
        o.svg_budget = r.budgets[i];
  } else {
    bool found = false;
    for (uint32_t i = 0; i < r.n_budgets; i++)
      found |= r.budgets[i] == o.svg_budget;
    if (!found)
      return bad("--svg-budget %u is not one of --budgets %s", o.svg_budget,
                 budgets);
  }
  r.model = o.model;
  r.file = o.file;
  r.trail_w = o.trail;
  r.sinks = o.sinks;
  int rc = perplexity(&o, &r);
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
