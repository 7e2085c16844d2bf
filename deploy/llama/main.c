/* evictd-llama: llama.cpp with its KV cache kept by evictd. The command
 * line; the decode loops are in gen.c. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "evictd/client.h"
#include "gen.h"
#include "ppl.h"
#include "serve.h"

static const char usage[] =
    "usage: evictd-llama generate -m MODEL.gguf [options]\n"
    "       evictd-llama serve -m MODEL.gguf [options] (serve --help)\n"
    "       evictd-llama perplexity -m MODEL.gguf [options] FILE\n"
    "         (the text's perplexity under full attention, the window and\n"
    "         sinks at each budget; evictd-llama perplexity --help)\n"
    "\n"
    "Decodes with llama.cpp, each sequence's KV cache kept by evictd: one\n"
    "evictd request per decode iteration, and the cache loses exactly the\n"
    "positions evictd names (no context shift of llama.cpp's own, so it\n"
    "runs past n_ctx). Text goes to stdout.\n"
    "\n"
    "  -m, --model FILE       the model (GGUF)\n"
    "  -p, --prompt TEXT      the prompt (default: empty, the BOS alone)\n"
    "  -f, --file FILE        the prompt from a file ('-': stdin)\n"
    "  -n, --n-predict N      tokens to generate per sequence (default 128)\n"
    "      --evictd URL       the daemon: http://host:port, https://...,\n"
    "                         unix:/path (default $EVICTD_URL, else\n"
    "                         http://127.0.0.1:8090)\n"
    "      --budget N         the session's budget (default: the daemon's)\n"
    "      --sinks N          positions pinned at the start (streaming-llm: 4)\n"
    "      --lookahead N      prompt chunk and most drafts pending (default:\n"
    "                         the daemon's; with --draft at least K + 1)\n"
    "      --session ID       the evictd session (default evictd-llama-PID;\n"
    "                         samples are ID.0, ID.1, ...)\n"
    "      --draft FILE       speculative decoding with this draft model\n"
    "                         (greedy, one sequence)\n"
    "      --draft-n K        drafts per iteration (default 4)\n"
    "      --parallel N       N samples of one prompt: evictd fork and\n"
    "                         llama_memory_seq_cp, one batch per iteration\n"
    "      --temp T           sampling temperature (default 0: greedy)\n"
    "      --seed S           sampling seed (sample i uses S + i)\n"
    "      --rewind AT:K      once AT tokens are generated, take the last K\n"
    "                         back (evictd truncate; K <= budget - sinks\n"
    "                         with original positions) and continue with\n"
    "                         the runner-up token\n"
    "      --positions MODE   RoPE positions: original (each token its\n"
    "                         absolute position, the default) or cache\n"
    "                         (streaming-llm: its index in the kept cache;\n"
    "                         keys above an evicted gap move down with\n"
    "                         llama_memory_seq_add)\n"
    "      --threads N        llama.cpp threads (default 1)\n"
    "      --n-ctx N          KV cells per sequence (default: budget +\n"
    "                         lookahead, rounded up to 256)\n"
    "      --timeout-ms MS    per evictd request (default 10000)\n"
    "      --reconnect-ms MS  keep resending a request while evictd\n"
    "                         restarts or answers too late (default 30000)\n"
    "      --token-file FILE  evictd's bearer token\n"
    "      --cafile FILE      the CA of an https:// evictd\n"
    "      --keep-session     leave the sessions in evictd at the end\n"
    "      --dump PREFIX      record every request, removal and logit\n"
    "                         (PREFIX.jsonl, PREFIX.f32; see README.md)\n"
    "      --stats            time per iteration, and evictd's share, on\n"
    "                         stderr\n"
    "      --debug            llama.cpp's whole log\n"
    "  -h, --help             this text\n"
    "      --version          the versions\n";

enum {
  O_EVICTD = 256, O_BUDGET, O_SINKS, O_LOOKAHEAD, O_SESSION, O_DRAFT,
  O_DRAFT_N, O_PARALLEL, O_TEMP, O_SEED, O_REWIND, O_THREADS, O_NCTX,
  O_TIMEOUT, O_RECONNECT, O_TOKEN_FILE, O_CAFILE, O_KEEP, O_DUMP, O_STATS,
  O_DEBUG, O_VERSION, O_POSITIONS
};

static const struct option longopts[] = {
    {"model", required_argument, NULL, 'm'},
    {"prompt", required_argument, NULL, 'p'},
    {"file", required_argument, NULL, 'f'},
    {"n-predict", required_argument, NULL, 'n'},
    {"evictd", required_argument, NULL, O_EVICTD},
    {"budget", required_argument, NULL, O_BUDGET},
    {"sinks", required_argument, NULL, O_SINKS},
    {"lookahead", required_argument, NULL, O_LOOKAHEAD},
    {"session", required_argument, NULL, O_SESSION},
    {"draft", required_argument, NULL, O_DRAFT},
    {"draft-n", required_argument, NULL, O_DRAFT_N},
    {"parallel", required_argument, NULL, O_PARALLEL},
    {"temp", required_argument, NULL, O_TEMP},
    {"seed", required_argument, NULL, O_SEED},
    {"rewind", required_argument, NULL, O_REWIND},
    {"positions", required_argument, NULL, O_POSITIONS},
    {"threads", required_argument, NULL, O_THREADS},
    {"n-ctx", required_argument, NULL, O_NCTX},
    {"timeout-ms", required_argument, NULL, O_TIMEOUT},
    {"reconnect-ms", required_argument, NULL, O_RECONNECT},
    {"token-file", required_argument, NULL, O_TOKEN_FILE},
    {"cafile", required_argument, NULL, O_CAFILE},
    {"keep-session", no_argument, NULL, O_KEEP},
    {"dump", required_argument, NULL, O_DUMP},
    {"stats", no_argument, NULL, O_STATS},
    {"debug", no_argument, NULL, O_DEBUG},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, O_VERSION},
    {NULL, 0, NULL, 0}};

#define bad(...) cli_say(2, "evictd-llama", "evictd-llama --help", __VA_ARGS__)

static int version(void) {
  printf("evictd-llama %s (llama.cpp %s)\n", EVD_CLIENT_VERSION,
         EVD_LLAMA_CPP_VERSION);
  return 0;
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
  if (f == NULL)
    return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  while (buf != NULL) {
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap)
      break;
    char *b = realloc(buf, cap *= 2);
    if (b == NULL)
      free(buf);
    buf = b;
  }
  int err = ferror(f);
  if (f != stdin)
    fclose(f);
  if (err) {
    free(buf);
    return NULL;
  }
  *len = n;
  return buf;
}

static int generate(int argc, char **argv) {
  gen_opts_t o = {.n_predict = 128, .budget = -1, .sinks = -1,
                  .lookahead = -1, .timeout_ms = 10000,
                  .reconnect_ms = 30000, .draft_n = 4, .threads = 1,
                  .prompt = ""};
  const char *file = NULL;
  char *text = NULL;
  unsigned long long v;
  int c;
  while ((c = getopt_long(argc, argv, "m:p:f:n:h", longopts, NULL)) != -1) {
    const char *name = NULL;
    for (const struct option *lo = longopts; lo->name; lo++)
      if (lo->val == c)
        name = lo->name;
    switch (c) {
    case 'm': o.model = optarg; break;
    case 'p': o.prompt = optarg; break;
    case 'f': file = optarg; break;
    case 'n':
      if (cli_number("evictd-llama", name, optarg, 0, 1u << 30, &v)) return 2;
      o.n_predict = (uint32_t)v;
      break;
    case O_EVICTD: o.url = optarg; break;
    case O_BUDGET:
      if (cli_number("evictd-llama", name, optarg, 1, UINT32_MAX, &v)) return 2;
      o.budget = (int64_t)v;
      break;
    case O_SINKS:
      if (cli_number("evictd-llama", name, optarg, 0, UINT32_MAX, &v)) return 2;
      o.sinks = (int64_t)v;
      break;
    case O_LOOKAHEAD:
      if (cli_number("evictd-llama", name, optarg, 1, 1u << 24, &v)) return 2;
      o.lookahead = (int64_t)v;
      break;
    case O_SESSION: o.session = optarg; break;
    case O_DRAFT: o.draft = optarg; break;
    case O_DRAFT_N:
      if (cli_number("evictd-llama", name, optarg, 1, 64, &v)) return 2;
      o.draft_n = (uint32_t)v;
      break;
    case O_PARALLEL:
      if (cli_number("evictd-llama", name, optarg, 1, 256, &v)) return 2;
      o.parallel = (uint32_t)v;
      break;
    case O_TEMP: {
      char *end;
      o.temp = strtod(optarg, &end);
      if (*end != '\0' || !(o.temp >= 0 && o.temp <= 100))
        return bad("--temp wants a number from 0 to 100, not '%s'", optarg);
      break;
    }
    case O_SEED:
      if (cli_number("evictd-llama", name, optarg, 0, UINT64_MAX, &v)) return 2;
      o.seed = v;
      break;
    case O_REWIND: {
      /* AT:K, both decimal, 1 <= K <= AT. */
      char *colon = strchr(optarg, ':');
      unsigned long long at = 0, k = 0;
      if (colon == NULL)
        return bad("--rewind wants AT:K, not '%s'", optarg);
      *colon = '\0';
      int ok = cli_number("evictd-llama", "rewind (AT)", optarg, 1, 1u << 30, &at) == 0 &&
               cli_number("evictd-llama", "rewind (K)", colon + 1, 1, 1u << 30, &k) == 0;
      *colon = ':';
      if (!ok)
        return 2;
      if (k > at)
        return bad("--rewind %s takes back more tokens than were generated "
                   "(K <= AT)", optarg);
      o.rewind_at = (uint32_t)at;
      o.rewind_k = (uint32_t)k;
      break;
    }
    case O_THREADS:
      if (cli_number("evictd-llama", name, optarg, 1, 256, &v)) return 2;
      o.threads = (int)v;
      break;
    case O_NCTX:
      if (cli_number("evictd-llama", name, optarg, 1, INT32_MAX, &v)) return 2;
      o.n_ctx = (uint32_t)v;
      break;
    case O_TIMEOUT:
      if (cli_number("evictd-llama", name, optarg, 1, 3600000, &v)) return 2;
      o.timeout_ms = (unsigned)v;
      break;
    case O_RECONNECT:
      if (cli_number("evictd-llama", name, optarg, 0, 3600000, &v)) return 2;
      o.reconnect_ms = (unsigned)v;
      break;
    case O_POSITIONS:
      if (posmap_parse(optarg, &o.positions) != 0)
        return bad("--positions is original or cache, not '%s'", optarg);
      break;
    case O_TOKEN_FILE: o.token_file = optarg; break;
    case O_CAFILE: o.cafile = optarg; break;
    case O_KEEP: o.keep_session = true; break;
    case O_DUMP: o.dump = optarg; break;
    case O_STATS: o.stats = true; break;
    case O_DEBUG: o.debug = true; break;
    case 'h': fputs(usage, stdout); return 0;
    case O_VERSION: return version();
    default: return bad("unknown option or missing argument");
    }
  }
  if (optind < argc)
    return bad("unexpected argument '%s'", argv[optind]);
  if (o.model == NULL)
    return bad("-m MODEL.gguf is required");
  if (file != NULL) {
    if (strcmp(o.prompt, "") != 0)
      return bad("give -p or -f, not both");
    text = read_file(file, &o.prompt_len);
    if (text == NULL)
      return bad("cannot read the prompt file %s: %s", file,
                 strerror(errno));
    o.prompt = text;
  } else {
    o.prompt_len = strlen(o.prompt);
  }
  if (o.draft != NULL && (o.parallel > 1 || o.temp > 0 || o.rewind_at)) {
    free(text);
    return bad("--draft decodes one sequence greedily: not with "
               "--parallel, --temp or --rewind");
  }
  if (o.rewind_at > o.n_predict) {
    free(text);
    return bad("--rewind %u:%u would never happen: only %u tokens are "
               "generated (-n)", o.rewind_at, o.rewind_k, o.n_predict);
  }
  if (o.rewind_at && o.parallel > 1) {
    free(text);
    return bad("--rewind works on one sequence, not --parallel");
  }
  if (o.draft != NULL && o.lookahead < 0)
    o.lookahead = o.draft_n + 1;
  int rc = gen_run(&o);
  free(text);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2)
    return bad("no command (generate, serve, perplexity)");
  if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
    fputs(usage, stdout);
    return 0;
  }
  if (strcmp(argv[1], "--version") == 0)
    return version();
  if (strcmp(argv[1], "generate") == 0)
    return generate(argc - 1, argv + 1);
  if (strcmp(argv[1], "serve") == 0)
    return serve_main(argc - 1, argv + 1);
  if (strcmp(argv[1], "perplexity") == 0)
    return ppl_main(argc - 1, argv + 1);
  return bad("unknown command '%s' (generate, serve, perplexity)", argv[1]);
}
