/* evictd-llama serve (serve.h): its own options (llama-server's are
 * flags.c's, the rules between them options.c's), the listening socket,
 * the parts started from the bottom (the queue and the board, the engine,
 * the site every request reads, the transport with every API's routes)
 * and the life of the process. Threads: libmicrohttpd's listening thread
 * and a thread per connection (http/), the engine thread (engine/), and
 * this main thread, which waits for SIGTERM/SIGINT (blocked in every
 * thread, taken with sigwait) and then stops them in order. */
#include "serve/serve.h"

#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/cli.h"
#include "error.h"
#include "listen.h"
#include "serve/api/anthropic.h"
#include "serve/api/native.h"
#include "serve/api/openai.h"
#include "serve/api/props.h"
#include "serve/api/responses.h"
#include "serve/api/rstore.h"
#include "serve/api/status.h"
#include "serve/api/tokenize.h"
#include "serve/api/ui.h"
#include "serve/engine/engine.h"
#include "serve/flags.h"
#include "serve/http/http.h"
#include "serve/options.h"
#include "serve/shared/site.h"
#include "serve/shared/rcache.h"
#include "serve/shared/tokcache.h"
#include "serve/upstream/templates.h"
#include "serve/upstream/upstream.h"

#define WHO SERVE_WHO

/* The stored responses kept (GET /v1/responses/{id}, previous_response_id):
 * the newest of them. */
#define RESPONSES_MAX 1024
/* Prompts whose tokens are kept for the next prompt that begins like one
 * of them (a conversation resent whole at every turn): two a sequence and
 * some, at most 32 MiB of text and tokens in all. */
#define TOKCACHE_TEXTS(parallel) (2 * (parallel) + 8)
#define TOKCACHE_BYTES ((size_t)32 << 20)

static const char synopsis[] =
    "usage: evictd-llama serve -m MODEL.gguf [options]\n"
    "\n"
    "An HTTP completion server, each request's KV cache kept by evictd (a\n"
    "session per choice, deleted when it ends or its client goes away; all\n"
    "requests decoding at once are one llama.cpp pass and one evictd batch\n"
    "per iteration). Its routes, llama-server's (deploy/llama/README.md):\n"
    "  OpenAI's   POST /v1/chat/completions (/chat/completions),\n"
    "             POST /v1/completions, POST /v1/responses (/responses),\n"
    "             GET and DELETE /v1/responses/{id}, GET /v1/models\n"
    "             (/models)\n"
    "  llama.cpp  POST /completion (/completions): {\"prompt\":\"...\",\n"
    "             \"n_predict\":N,\"stream\":false,\"temperature\":0,\n"
    "             \"seed\":0,\"stop\":[...]}; POST /tokenize, POST\n"
    "             /detokenize, POST /apply-template, GET /props, GET /slots\n"
    "  probes     GET /health (/v1/health; no API key asked), GET /metrics\n"
    "  CORS       OPTIONS on any path (a browser's preflight)\n"
    "Without all of --budget, --sinks and --lookahead, a probe session reads\n"
    "the daemon's defaults at start. The defaults are llama.cpp's fast\n"
    "settings; --exact gives the logits a float64 reference computes. A\n"
    "drop-in for llama-server: each of its flags means the same here, or\n"
    "changes nothing (said below), or is refused with its reason.\n";

/* A row's first long spelling, for messages. */
#define NAME(o) (int)strcspn((o)->name, "|"), (o)->name

/* --cache-ram MIB: -1 (no limit, llama-server's spelling), or 0 to 2^30. */
static int parse_cache_ram(const char *who, const char *arg, void *field) {
  char *end;
  errno = 0;
  long long v = strtoll(arg, &end, 10);
  if (end == arg || *end != '\0' || errno != 0 || v < -1 || v > 1 << 30) {
    fprintf(stderr, "%s: --cache-ram wants -1 (no limit) or a number of "
            "MiB from 0 to %d, not '%s'\n", who, 1 << 30, arg);
    return -1;
  }
  *(int64_t *)field = v;
  return 0;
}

/* -np N: 1 to 256, or -1, llama-server's "auto": serve's default. */
static int parse_parallel(const char *who, const char *arg, void *field) {
  char *end;
  errno = 0;
  long long v = strtoll(arg, &end, 10);
  if (end == arg || *end != '\0' || errno != 0 ||
      (v != -1 && (v < 1 || v > 256))) {
    fprintf(stderr, "%s: --parallel wants a whole number from 1 to 256 (or "
            "-1: the default, 8), not '%s'\n", who, arg);
    return -1;
  }
  if (v > 0)
    *(uint32_t *)field = (uint32_t)v;
  return 0;
}

static const cli_opt_t options[] = {
    {"listen", NULL, "ADDR", CLI_STR, OPT(listen), 0, 0, {NULL},
     "HOST:PORT or unix:/path (default $EVICTD_LLAMA_LISTEN, else "
     "127.0.0.1:8080; port 0: any, the address is printed on stderr; a Unix "
     "socket another server listens on is refused, a stale one replaced)"},
    {"host", NULL, "HOST", CLI_STR, OPT(host), 0, 0, {NULL},
     "with --port, instead of --listen: llama-server's spelling (default "
     "127.0.0.1; a name ending in .sock: that Unix socket, as "
     "llama-server's)"},
    {"port", NULL, "PORT", CLI_I64, OPT(port), 0, 65535, {NULL},
     "with --host (default 8080; 0: any, printed as --listen's)"},
    {"parallel", "np", "N", CLI_CALL, OPT(parallel), 0, 0,
     {.parse = parse_parallel},
     "sequences decoding at once, 1 to 256 (a request of n choices takes "
     "n); more requests wait in a queue of --queue, beyond it 503 (default "
     "8, also for -1, llama-server's auto)"},
    {"queue", NULL, "N", CLI_U32, OPT(queue), 0, 1u << 20, {NULL},
     "requests waiting"},
    {"n-predict-max", NULL, "N", CLI_U32, OPT(n_predict_max), 1, 1u << 30,
     {NULL}, "the most tokens a choice may ask for (n_predict, max_tokens): "
     "the one limit of a generation, which the window lets run past the "
     "model's context"},
    {"alias", "a", "NAME[,NAME]", CLI_STR, OPT(alias), 0, 0, {NULL},
     "the model's name in answers and GET /v1/models: of several, the "
     "first in sorted order, as llama-server's (default: the GGUF's file "
     "name; a request may name any)"},
    {"tags", NULL, "TAG[,TAG]", CLI_STR, OPT(tags), 0, 0, {NULL},
     "informational tags of the model, shown by GET /v1/models as "
     "llama-server's"},
    {"api-key", NULL, "KEY[,KEY]", CLI_STR, OPT(api_key), 0, 0, {NULL},
     "require 'Authorization: Bearer KEY' (one of them) on every route but "
     "/health and the web UI's files (401 without)"},
    {"api-key-file", NULL, "FILE", CLI_STR, OPT(api_key_file), 0, 0, {NULL},
     "more keys: a key a line, lines starting with # left out"},
    {"cors-origins", NULL, "ORIGINS", CLI_STR, OPT(cors_origins), 0, 0,
     {NULL}, "the origins browsers may call from (default *: any; "
     "'localhost': an Origin whose host is localhost, 127.0.0.1 or ::1, "
     "any port; or an origin, or a comma-separated list of them): every "
     "answer says so in Access-Control-Allow-Origin, and a preflight "
     "(OPTIONS) is answered before the API key is asked for"},
    {"cors-methods", NULL, "METHODS", CLI_STR, OPT(cors_methods), 0, 0,
     {NULL}, "a preflight's Access-Control-Allow-Methods (default \"GET, "
     "POST, DELETE, OPTIONS\")"},
    {"cors-headers", NULL, "HEADERS", CLI_STR, OPT(cors_headers), 0, 0,
     {NULL}, "a preflight's Access-Control-Allow-Headers (default *)"},
    {"cors-credentials", NULL, NULL, CLI_FLAG, OPT(cors_credentials), 0, 0,
     {NULL}, "allow credentials (the default: with --cors-origins *, the "
     "request's Origin is sent back instead of *)"},
    {"no-cors-credentials", NULL, NULL, CLI_FLAG, OPT(no_cors_credentials),
     0, 0, {NULL}, "do not allow them (--cors-origins * then answers *)"},
    {"cache-prompt", NULL, NULL, CLI_FLAG, OPT(cache_prompt), 0, 0, {NULL},
     "keep each request's sequence parked when it ends (its cells, its "
     "evictd session, its tokens), and continue it for a request whose "
     "tokens extend it, decoding only the new ones (the default; a "
     "request's \"cache_prompt\": false asks neither)"},
    {"no-cache-prompt", NULL, NULL, CLI_FLAG, OPT(no_cache_prompt), 0, 0,
     {NULL}, "keep nothing between requests: every prompt is decoded "
     "afresh, and tokenized whole"},
    {"cache-ram", "cram", "MIB", CLI_CALL, OPT(cache_ram), 0, 0,
     {.parse = parse_cache_ram},
     "parked sequences whose slot another request needs are saved "
     "to host memory (their cells, their evictd session kept) up to MIB, "
     "least recently used first out (-1: no limit, 0: none saved; default "
     "8192, as llama-server's)"},
    {"dump", NULL, "PREFIX", CLI_STR, OPT(dump), 0, 0, {NULL},
     "write the run record the end-to-end check replays (every pass's "
     "tokens and logits, every step and removal: PREFIX.jsonl and "
     "PREFIX.f32, as generate's --dump): for tests, it costs a row of "
     "logits per token"},
    {"cache-dir", NULL, "DIR", CLI_STR, OPT(cache_dir), 0, 0, {NULL},
     "write saved and parked sequences to DIR too (whole, fsynced, by a "
     "thread of their own), and find them there again after a restart, "
     "a crash included (evictd keeps their windows, or adopts them)"},
    {"cache-write-ms", NULL, "MS", CLI_U32, OPT(cache_write_ms), 0,
     3600000, {NULL}, "with --cache-dir: a parked sequence is written "
     "within MS of parking, at most once per MS (default 1000; 0: as it "
     "parks); a crash loses at most that"},
};

#define fail(...) cli_say(1, WHO, NULL, __VA_ARGS__)
#define bad(...) cli_say(2, WHO, WHO " --help", __VA_ARGS__)

/* What serve's routes answer with, made once: the site and its stores. */
typedef struct parts_s {
  tq_t q;
  board_t board;
  site_t site;
  http_opts_t http;
  ui_t *ui;               /* the web UI's routes, or NULL: none */
} parts_t;

/* The site every request reads (its stores and templates made); 0, or -1
 * having said why. */
static int site_open(parts_t *p, serve_opts_t *o, lm_t *lm) {
  const char *base = strrchr(o->lm.model, '/');
  char err[512];
  p->ui = NULL; /* --no-ui opens none */
  p->site = (site_t){
      .o = o, .lm = lm, .q = &p->q, .board = &p->board,
      .model = o->alias ? o->alias : base ? base + 1 : o->lm.model,
      .aliases = flags_names(o->aliases), .tags = flags_names(o->tags),
      .created = (long long)time(NULL),
      .defaults = o->ls.defaults ? json_incref(o->ls.defaults)
                                 : json_object(),
      .ui_settings = o->ls.ui_settings,
      .responses = rstore_new(RESPONSES_MAX),
      .tokens = tokcache_new(lm, o->no_cache_prompt
                                     ? 0 : TOKCACHE_TEXTS(o->parallel),
                             TOKCACHE_BYTES),
      .renders = rcache_new(o->no_cache_prompt ? 0
                                               : TOKCACHE_TEXTS(o->parallel))};
  if (p->site.aliases == NULL || p->site.tags == NULL ||
      p->site.defaults == NULL || p->site.responses == NULL ||
      p->site.tokens == NULL || p->site.renders == NULL)
    return fail("out of memory"), -1;
  if (up_chat_new(&p->site.chat, lm->model, o->ls.chat_template,
                  o->ls.jinja != 0, err, sizeof(err)) != 0)
    return fail("the chat template: %s", err), -1;
  if (o->ls.ui && ui_open(&p->ui, o->ls.path, err, sizeof(err)) != 0)
    return fail("%s", err), -1;
  p->site.ui = p->ui != NULL;
  char *info = NULL;
  if (up_chat_info(p->site.chat, &info, NULL, 0) == 0 && info != NULL &&
      strstr(info, "\"explicit\":false") != NULL)
    fprintf(stderr, "evictd-llama serve: the model has no chat template: "
            "/v1/chat/completions uses ChatML, as llama-server does\n");
  free(info);
  return 0;
}

static void site_close(parts_t *p) {
  site_t *s = &p->site;
  ui_close(p->ui);
  json_decref(s->aliases);
  json_decref(s->tags);
  json_decref(s->defaults);
  rstore_free(s->responses);
  tokcache_free(s->tokens);
  rcache_free(s->renders);
  up_chat_free(s->chat);
}

/* The transport with every API's routes (each API file exports its
 * table, api/), answering on fd; NULL having said why. */
static http_t *http_open(parts_t *p, const serve_opts_t *o, int fd,
                         const char *bound) {
  static const http_route_t *const tables[] = {
      openai_routes, responses_routes, native_routes, tokenize_routes,
      props_routes, status_routes, anthropic_routes};
  p->http = (http_opts_t){.prefix = o->ls.api_prefix,
                          .api_keys = o->api_keys,
                          .cors_origins = o->cors_origins,
                          .cors_methods = o->cors_methods,
                          .cors_headers = o->cors_headers,
                          .no_cors_credentials = o->no_cors_credentials};
  http_t *h = http_new(&p->http, &p->site);
  /* The UI's files last: a route of the API's is never one of them. */
  for (size_t i = 0; h != NULL && i <= sizeof(tables) / sizeof(*tables);
       i++) {
    const http_route_t *t = i < sizeof(tables) / sizeof(*tables) ? tables[i]
                            : p->ui != NULL ? ui_routes(p->ui) : NULL;
    if (t != NULL && http_add(h, t) != 0) {
      http_stop(h);
      h = NULL;
    }
  }
  if (h == NULL || http_start(h, fd) != 0) {
    http_stop(h);
    fail("libmicrohttpd did not start on %s", bound);
    return NULL;
  }
  return h;
}

/* Runs until SIGTERM or SIGINT, then stops: no new connections, the
 * engine ends its tasks (their connections are answered), then the
 * connections' threads go. */
static int run(serve_opts_t *o, sigset_t *sigs) {
  char err[512], bound[300];
  lm_t lm;
  parts_t p;
  engine_t *e = NULL;
  http_t *h = NULL;
  if (o->verbose)
    o->lm.debug = true;
  lm_init(o->lm.debug);
  up_init(o->lm.debug);
  if (lm_load(&lm, "target", o->lm.model, err, sizeof(err)) != 0)
    return fail("%s", err);
  int fd, rc = options_model(o, &lm);
  if (rc != 0) {
    lm_close(&lm);
    return rc;
  }
  rc = evd_listen_open(o->listen, &fd, bound, sizeof(bound));
  if (rc != 0) {
    lm_close(&lm);
    if (rc == EVD_EINVAL)
      return fail("--listen %s wants HOST:PORT or unix:/path: %s", o->listen,
                  bound);
    return fail("cannot listen on %s: %s", o->listen, strerror(errno));
  }
  /* Task and session ids: serve-PID.RUN-K, RUN random per start, so that
   * a restarted serve (PID 1 again in a container) never names a session
   * that a saved conversation, or one left behind, holds in evictd. */
  char prefix[48];
  unsigned nonce = 0;
  if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce))
    nonce = (unsigned)time(NULL) ^ (unsigned)getpid() * 2654435761u;
  snprintf(prefix, sizeof(prefix), "serve-%ld.%08x", (long)getpid(), nonce);
  tq_init(&p.q, o->queue, prefix);
  board_init(&p.board);
  rc = 1;
  if (engine_start(&e, o, &lm, &p.q, &p.board, err, sizeof(err)) != 0) {
    fail("%s", err);
    e = NULL;
    memset(&p.site, 0, sizeof(p.site));
  } else if (site_open(&p, o, &lm) == 0 &&
             (h = http_open(&p, o, fd, bound)) != NULL) {
    fd = -1; /* the transport's */
    uint32_t budget, sinks, lookahead;
    engine_settings(e, &budget, &sinks, &lookahead);
    if (p.ui != NULL)
      fprintf(stderr, "evictd-llama serve: the web UI at %s/ (%s)\n",
              o->ls.api_prefix ? o->ls.api_prefix : "",
              o->ls.path ? o->ls.path : "llama.cpp's, built in");
    else if (o->ls.ui && !ui_built_in())
      fprintf(stderr, "evictd-llama serve: this build has no web UI (make "
              "UI=0): / is a 404\n");
    if (!lm.rewind)
      fprintf(stderr, "evictd-llama serve: the model keeps %s state: "
              "evictd's window bounds its attention cells, and a "
              "conversation is continued by extension or from a checkpoint "
              "(--ctx-checkpoints), never by going back\n",
              lm_mem_name(lm.kind));
    fprintf(stderr, "evictd-llama serve: listening on %s (evictd %s; "
            "budget %u, sinks %u, lookahead %u, parallel %u; sessions "
            "%s-K)\n", bound, o->link.url ? o->link.url : "default", budget,
            sinks, lookahead, o->parallel, prefix);
    int sig = 0;
    sigwait(sigs, &sig);
    fprintf(stderr, "evictd-llama serve: %s: ending the requests in flight "
            "and deleting their sessions\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM");
    http_quiesce(h);
    rc = 0;
  }
  /* The engine ends its tasks first: their connections have answers to
   * send before the transport stops (2 s at most). */
  if (e != NULL)
    engine_stop(e);
  http_stop(h);
  if (fd >= 0)
    close(fd);
  if (rc == 0)
    evd_listen_cleanup(o->listen);
  site_close(&p);
  board_destroy(&p.board);
  tq_destroy(&p.q);
  lm_close(&lm);
  return rc;
}

int serve_main(int argc, char **argv) {
  /* llama.cpp's fast settings, every core: what a server runs with. */
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  serve_opts_t o = {
      .lm = {.threads = cores > 0 ? (int)cores : 1, .flash_attn = LM_FA_AUTO,
             .type_k = LM_F16, .type_v = LM_F16},
      .link = LINK_OPTS_DEFAULT, .cfg = EVD_SESSION_CFG_DEFAULT,
      .parallel = 8, .queue = 64, .n_predict_max = 32768,
      .cache_ram = 8192, .port = -1, .ctx_checkpoints = 32,
      .cache_write_ms = 1000,
      .ls = {.ctx = -1, .ctx_slot = -1, .batch = -1, .ubatch = -1,
             .keep = -1, .jinja = 1, .slots = 1, .warmup = 1, .ui = 1}};
  cli_cmd_t c = CLI_CMD(WHO, synopsis, options, o);
  c.more = serve_llama_flags;
  c.n_more = serve_llama_flags_n;
  c.more_title = "llama-server's flags, as it means them (flags.c):";
  static held_t held;
  int rc = cli_command(&c, argc, argv);
  if (rc == CLI_RUN)
    rc = options_check(&o, &held);
  else if (rc == 0)
    rc = -1; /* --help, --version: done */
  if (rc != 0) {
    options_free(&held, &o);
    return rc < 0 ? 0 : rc;
  }

  /* Signals go to sigwait, in no other thread (set before any starts). */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN);
  rc = run(&o, &sigs);
  options_free(&held, &o);
  return rc;
}
