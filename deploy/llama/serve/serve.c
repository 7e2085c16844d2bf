/* evictd-llama serve: the command line (serve's options here, llama-server's
 * in flags.c, the rules between them here), the listening socket and the life
 * of the process. Threads: libmicrohttpd's listening thread and a thread
 * per connection (http.c), the engine thread (engine.c), and this main
 * thread, which waits for SIGTERM/SIGINT (blocked in every thread, taken
 * with sigwait) and then stops them in order. */
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
#include "serve/engine.h"
#include "serve/http.h"
#include "serve/tokcache.h"
#include "serve/upstream.h"

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

#define OPT(f) offsetof(serve_opts_t, f)
#define LS(f) offsetof(serve_opts_t, ls.f)
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
     "/health (401 without)"},
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
     "write saved sequences to DIR too, and find them there again after a "
     "restart (evictd keeps their windows)"},
};

#define fail(...) cli_say(1, WHO, NULL, __VA_ARGS__)
#define bad(...) cli_say(2, WHO, WHO " --help", __VA_ARGS__)

/* ---- llama-server's flags' rules (their rows: flags.c) ------------------ */

/* The prefill chunk llama-server's -b and -ub say: the smaller of its
 * logical and physical batches (defaults 2048 and 512), or -1 when neither
 * is given. */
static int64_t chunk_of(const serve_llama_t *l) {
  if (l->batch < 0 && l->ubatch < 0)
    return -1;
  int64_t b = l->batch > 0 ? l->batch : 2048;
  int64_t ub = l->ubatch > 0 ? l->ubatch : 512;
  return b < ub ? b : ub;
}

/* --budget from a sequence's cells: they hold its window's budget and
 * its prefill chunk. `from` says where the cells came from. */
static int budget_of(serve_opts_t *o, int64_t cells, const char *from) {
  int64_t look = o->cfg.lookahead >= 0 ? o->cfg.lookahead : 512;
  if (o->cfg.budget >= 0) {
    if (o->cfg.budget + look != cells)
      return bad("%s is %lld cells a sequence, not --budget %lld + "
                 "lookahead %lld: give one of them, or make them agree",
                 from, (long long)cells, (long long)o->cfg.budget,
                 (long long)look);
    return 0;
  }
  if (cells <= look || (o->cfg.sinks >= 0 && cells - look <= o->cfg.sinks))
    return bad("%s is %lld cells a sequence, which the prefill chunk "
               "(lookahead %lld)%s fills: give more cells, fewer -np, a "
               "smaller -ub or --lookahead, or --budget", from,
               (long long)cells, (long long)look,
               o->cfg.sinks >= 0 ? " and the sinks" : "");
  o->cfg.budget = cells - look;
  return 0;
}

/* -c N over -np P: N/P cells a sequence. */
static int ctx_budget(serve_opts_t *o, int64_t n, bool trained) {
  char from[96];
  snprintf(from, sizeof(from), "-c %lld%s over -np %u", (long long)n,
           trained ? " (the model's training context)" : "", o->parallel);
  return budget_of(o, n / o->parallel, from);
}

/* The rules of llama-server's flags that need no model: the prefill chunk
 * (-b, -ub) as --lookahead, a sequence's cells (-c, --kv-unified-per-slot)
 * as --budget, -n as o->n_predict, --no-cache-idle-slots, the chat
 * template file read. 0, or 2 having said why. *held: what it allocated
 * (the caller frees it). */
static int flags_check(serve_opts_t *o, char **held) {
  serve_llama_t *l = &o->ls;
  int64_t chunk = chunk_of(l);
  *held = NULL;
  if (chunk >= 0) {
    if (o->cfg.lookahead >= 0 && o->cfg.lookahead != chunk)
      return bad("--lookahead %lld and -b/-ub (a prefill chunk of %lld) "
                 "disagree: give one of them", (long long)o->cfg.lookahead,
                 (long long)chunk);
    o->cfg.lookahead = chunk;
  }
  if (l->ctx >= 0 && l->ctx_slot >= 0)
    return bad("give -c or --kv-unified-per-slot, not both");
  if (l->ctx > 0 && ctx_budget(o, l->ctx, false) != 0)
    return 2;
  if (l->ctx_slot > 0) {
    char from[64];
    snprintf(from, sizeof(from), "--kv-unified-per-slot %lld",
             (long long)l->ctx_slot);
    if (budget_of(o, l->ctx_slot, from) != 0)
      return 2;
  }
  if (l->n_predict > (int64_t)o->n_predict_max)
    return bad("-n %lld is more than --n-predict-max %u",
               (long long)l->n_predict, o->n_predict_max);
  o->n_predict = l->n_predict < 0 ? o->n_predict_max
                                  : (uint32_t)l->n_predict;
  if (l->no_cache_idle)
    o->cache_ram = 0;
  if (l->chat_template != NULL && l->chat_template_file != NULL)
    return bad("give --chat-template or --chat-template-file, not both");
  if (l->chat_template_file != NULL) {
    size_t len;
    if ((*held = cli_read_file(l->chat_template_file, &len)) == NULL)
      return bad("cannot read --chat-template-file %s: %s",
                 l->chat_template_file, strerror(errno));
    l->chat_template = *held;
  }
  return 0;
}

/* The row that sets a request field, for a message about its value. */
static const cli_opt_t *row_of(const char *key) {
  for (size_t i = 0; i < serve_llama_flags_n; i++) {
    const cli_opt_t *o = &serve_llama_flags[i];
    if (o->kind == CLI_ROW && o->off == LS(defaults) &&
        o->with.row.key != NULL && strcmp(o->with.row.key, key) == 0)
      return o;
  }
  return NULL;
}

/* Those that need the model (loaded): -c 0 (its training context),
 * --keep (its BOS), the device flags (whether llama.cpp has a GPU), and
 * the request defaults, checked by making a sampler of them, as a request
 * would. 0, or 2 having said why. */
static int flags_model(serve_opts_t *o, const lm_t *lm) {
  serve_llama_t *l = &o->ls;
  if (l->device != NULL && llama_supports_gpu_offload())
    return bad("--%.*s: llama.cpp has a GPU here, and serve keeps every "
               "layer and the cache on the CPU: leave it out",
               NAME(l->device));
  if (l->ctx == 0) {
    int32_t n = llama_model_n_ctx_train(lm->model);
    if (ctx_budget(o, n > 0 ? n : 0, true) != 0)
      return 2;
  }
  if (l->keep >= 0) {
    int64_t sinks = l->keep + (llama_vocab_get_add_bos(lm->vocab) ? 1 : 0);
    if (o->cfg.sinks >= 0 && o->cfg.sinks != sinks)
      return bad("--keep %lld is %lld sinks with this model, not --sinks "
                 "%lld: give one of them", (long long)l->keep,
                 (long long)sinks, (long long)o->cfg.sinks);
    if (o->cfg.budget >= 0 && sinks >= o->cfg.budget)
      return bad("--keep %lld (%lld sinks) leaves nothing of --budget "
                 "%lld to slide", (long long)l->keep, (long long)sinks,
                 (long long)o->cfg.budget);
    o->cfg.sinks = sinks;
  }
  if (l->defaults == NULL)
    return 0;
  /* The defaults as a request of nothing else would give them: a sampler
   * that refuses them names the field, which names the flag. */
  char err[400], *text = json_dumps(l->defaults, JSON_COMPACT);
  up_sampler_t *s = NULL;
  int rc = text != NULL ? up_sampler_new(&s, lm->model, text, err,
                                         sizeof(err))
                        : (snprintf(err, sizeof(err), "out of memory"), -1);
  free(text);
  up_sampler_free(s);
  if (rc == 0)
    return 0;
  const char *q = strchr(err, '"'), *e = q ? strchr(q + 1, '"') : NULL;
  char key[64] = "";
  if (e != NULL && (size_t)(e - q) < sizeof(key))
    snprintf(key, sizeof(key), "%.*s", (int)(e - q - 1), q + 1);
  const cli_opt_t *row = row_of(key);
  if (row != NULL)
    return bad("--%.*s: %s", NAME(row), err);
  return bad("the request defaults of the flags: %s", err);
}

/* What check() allocates for the options, freed as serve ends. */
typedef struct held_s {
  char listen[4200];     /* HOST:PORT, or unix:PATH of --host X.sock */
  char *keys_arg;        /* --api-key's copy and --api-key-file's text, */
  char *keys_file;       /* cut into the keys of o->api_keys */
  char *alias;           /* the name -a's list gives */
  char *template;        /* --chat-template-file's text */
} held_t;

static void held_free(held_t *h, serve_opts_t *o) {
  free(o->api_keys);
  free(h->keys_arg);
  free(h->keys_file);
  free(h->alias);
  free(h->template);
  json_decref(o->ls.defaults);
}

/* An API key: printable ASCII without blanks, as the daemon's token. */
static bool key_ok(const char *k) {
  for (const char *p = k; *p; p++)
    if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e)
      return false;
  return *k != '\0';
}

/* Cuts text into keys at each of `seps` (blanks around a key and empty
 * pieces left out; with comments, a piece starting with # too) and adds
 * them to o->api_keys. 0, or 2 having said why. */
static int add_keys(serve_opts_t *o, char *text, const char *seps,
                    bool comments, const char *from) {
  size_t n = 0;
  while (o->api_keys != NULL && o->api_keys[n] != NULL)
    n++;
  for (char *p = text; *p != '\0';) {
    size_t len = strcspn(p, seps);
    char *next = p + len + (p[len] != '\0');
    p[len] = '\0';
    p += strspn(p, " \t\r");
    for (char *e = p + strlen(p); e > p && strchr(" \t\r", e[-1]); )
      *--e = '\0';
    if (*p != '\0' && !(comments && *p == '#')) {
      if (!key_ok(p))
        return bad("the API key must be printable ASCII without blanks "
                   "(%s)", from);
      char **k = realloc(o->api_keys, (n + 2) * sizeof(*k));
      if (k == NULL)
        return fail("out of memory");
      k[n++] = p;
      k[n] = NULL;
      o->api_keys = k;
    }
    p = next;
  }
  return 0;
}

/* Rules between options: where to listen, the API keys, the model's
 * name, then llama-server's flags' (flags.c). */
static int check(serve_opts_t *o, held_t *h) {
  if (o->listen != NULL && (o->host != NULL || o->port >= 0))
    return bad("give --listen or --host/--port, not both");
  const char *host = o->host ? o->host : "127.0.0.1";
  size_t hl = strlen(host);
  if (hl > 5 && strcmp(host + hl - 5, ".sock") == 0) {
    /* llama-server's: a host ending in .sock is a Unix socket. */
    if (hl + 6 > sizeof(h->listen))
      return bad("--host %s: the socket's path is too long", host);
    snprintf(h->listen, sizeof(h->listen), "unix:%s", host);
    o->listen = h->listen;
  } else if (o->host != NULL || o->port >= 0) {
    if (hl > 256)
      return bad("--host %.40s...: too long for a host", host);
    snprintf(h->listen, sizeof(h->listen),
             strchr(host, ':') ? "[%s]:%u" : "%s:%u", host,
             o->port >= 0 ? (unsigned)o->port : 8080u);
    o->listen = h->listen;
  } else if (o->listen == NULL) {
    const char *env = getenv("EVICTD_LLAMA_LISTEN");
    o->listen = env && *env ? env : "127.0.0.1:8080";
  }
  if (o->cache_prompt && o->no_cache_prompt)
    return bad("give --cache-prompt or --no-cache-prompt, not both");
  if (o->api_key != NULL) {
    if ((h->keys_arg = strdup(o->api_key)) == NULL)
      return fail("out of memory");
    int rc = add_keys(o, h->keys_arg, ",", false, "--api-key");
    if (rc != 0)
      return rc;
  }
  if (o->api_key_file != NULL) {
    size_t len;
    if ((h->keys_file = cli_read_file(o->api_key_file, &len)) == NULL)
      return bad("cannot read --api-key-file %s: %s", o->api_key_file,
                 strerror(errno));
    int rc = add_keys(o, h->keys_file, "\n", true, "on each line of the "
                      "--api-key-file");
    if (rc != 0)
      return rc;
  }
  if ((o->api_key != NULL || o->api_key_file != NULL) && o->api_keys == NULL)
    return bad("%s holds no key: serve would ask for none",
               o->api_key_file ? "--api-key-file" : "--api-key");
  if (o->alias != NULL) {
    /* llama-server keeps its aliases sorted, and answers with the first. */
    json_t *names = flags_names(o->alias);
    if (names == NULL)
      return fail("out of memory");
    const char *first = json_string_value(json_array_get(names, 0));
    h->alias = first != NULL ? strdup(first) : NULL;
    json_decref(names);
    if (first == NULL)
      return bad("-a/--alias names no model");
    if (h->alias == NULL)
      return fail("out of memory");
    o->aliases = o->alias;
    o->alias = h->alias;
  }
  return flags_check(o, &h->template);
}

/* Runs until SIGTERM or SIGINT, then stops: no new connections, the
 * engine ends its tasks (their connections are answered), then the
 * connections' threads go. */
static int run(serve_opts_t *o, sigset_t *sigs) {
  char err[512], bound[300];
  lm_t lm;
  tq_t q;
  engine_t *e;
  if (o->verbose)
    o->lm.debug = true;
  lm_init(o->lm.debug);
  up_init(o->lm.debug);
  if (lm_load(&lm, "target", o->lm.model, err, sizeof(err)) != 0)
    return fail("%s", err);
  int fd, rc = flags_model(o, &lm);
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
  unsigned run = 0;
  if (getrandom(&run, sizeof(run), 0) != sizeof(run))
    run = (unsigned)time(NULL) ^ (unsigned)getpid() * 2654435761u;
  snprintf(prefix, sizeof(prefix), "serve-%ld.%08x", (long)getpid(), run);
  tq_init(&q, o->queue, prefix);
  if (engine_start(&e, o, &lm, &q, err, sizeof(err)) != 0) {
    close(fd);
    lm_close(&lm);
    tq_destroy(&q);
    return fail("%s", err);
  }
  const char *base = strrchr(o->lm.model, '/');
  site_t site = {.o = o, .lm = &lm, .q = &q,
                 .model = o->alias ? o->alias : base ? base + 1 : o->lm.model,
                 .created = (long long)time(NULL),
                 .defaults = o->ls.defaults ? json_incref(o->ls.defaults)
                                            : json_object(),
                 .responses = responses_store_new(RESPONSES_MAX),
                 .tokens = tokcache_new(&lm, o->no_cache_prompt ? 0
                                        : TOKCACHE_TEXTS(o->parallel),
                                        TOKCACHE_BYTES)};
  if (up_chat_new(&site.chat, lm.model, o->ls.chat_template,
                  o->ls.jinja != 0, err, sizeof(err)) != 0) {
    engine_stop(e);
    close(fd);
    lm_close(&lm);
    tq_destroy(&q);
    responses_store_free(site.responses);
    tokcache_free(site.tokens);
    json_decref(site.defaults);
    return fail("the chat template: %s", err);
  }
  char *info = NULL;
  if (up_chat_info(site.chat, &info, NULL, 0) == 0 && info != NULL &&
      strstr(info, "\"explicit\":false") != NULL)
    fprintf(stderr, "evictd-llama serve: the model has no chat template: "
            "/v1/chat/completions uses ChatML, as llama-server does\n");
  free(info);
  struct MHD_Daemon *d = site.responses && site.defaults && site.tokens
                             ? http_start(&site, fd) : NULL;
  if (d == NULL) {
    responses_store_free(site.responses);
    tokcache_free(site.tokens);
    json_decref(site.defaults);
    up_chat_free(site.chat);
    engine_stop(e);
    close(fd);
    lm_close(&lm);
    tq_destroy(&q);
    return fail("libmicrohttpd did not start on %s", bound);
  }
  uint32_t budget, sinks, lookahead;
  engine_settings(e, &budget, &sinks, &lookahead);
  fprintf(stderr, "evictd-llama serve: listening on %s (evictd %s; budget "
          "%u, sinks %u, lookahead %u, parallel %u; sessions %s-K)\n",
          bound, o->link.url ? o->link.url : "default", budget, sinks,
          lookahead, o->parallel, prefix);
  int sig = 0;
  sigwait(sigs, &sig);
  fprintf(stderr, "evictd-llama serve: %s: ending the requests in flight "
          "and deleting their sessions\n",
          sig == SIGINT ? "SIGINT" : "SIGTERM");
  MHD_socket ls = MHD_quiesce_daemon(d);
  engine_stop(e);
  /* Let the connections send what the engine wrote last (a stream's
   * shutting_down event and its end) before they are closed: at most 2 s,
   * since an idle keep-alive connection would wait for its timeout. */
  for (int i = 0; i < 200; i++) {
    const union MHD_DaemonInfo *di =
        MHD_get_daemon_info(d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    if (di == NULL || di->num_connections == 0)
      break;
    usleep(10 * 1000);
  }
  MHD_stop_daemon(d);
  if (ls != MHD_INVALID_SOCKET)
    close(ls);
  evd_listen_cleanup(o->listen);
  responses_store_free(site.responses);
  tokcache_free(site.tokens);
  json_decref(site.defaults);
  up_chat_free(site.chat);
  tq_destroy(&q);
  lm_close(&lm);
  return 0;
}

int serve_main(int argc, char **argv) {
  /* llama.cpp's fast settings, every core: what a server runs with. */
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  serve_opts_t o = {
      .lm = {.threads = cores > 0 ? (int)cores : 1, .flash_attn = LM_FA_AUTO,
             .type_k = LM_F16, .type_v = LM_F16},
      .link = LINK_OPTS_DEFAULT, .cfg = EVD_SESSION_CFG_DEFAULT,
      .parallel = 8, .queue = 64, .n_predict_max = 32768,
      .cache_ram = 8192, .port = -1,
      .ls = {.ctx = -1, .ctx_slot = -1, .batch = -1, .ubatch = -1,
             .keep = -1, .jinja = 1, .slots = 1, .warmup = 1}};
  cli_cmd_t c = CLI_CMD(WHO, synopsis, options, o);
  c.more = serve_llama_flags;
  c.n_more = serve_llama_flags_n;
  c.more_title = "llama-server's flags, as it means them (flags.c):";
  static held_t held;
  int rc = cli_command(&c, argc, argv);
  if (rc == CLI_RUN)
    rc = check(&o, &held);
  else if (rc == 0)
    rc = -1; /* --help, --version: done */
  if (rc != 0) {
    held_free(&held, &o);
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
  held_free(&held, &o);
  return rc;
}
