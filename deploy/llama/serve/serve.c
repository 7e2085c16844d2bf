/* evictd-llama serve: the command line, the listening socket and the life
 * of the process. Threads: libmicrohttpd's listening thread and a thread
 * per connection (http.c), the engine thread (engine.c), and this main
 * thread, which waits for SIGTERM/SIGINT (blocked in every thread, taken
 * with sigwait) and then stops them in order. */
#include "serve/serve.h"

#include <errno.h>
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
#include "serve/upstream.h"

#define WHO "evictd-llama serve"

/* The stored responses kept (GET /v1/responses/{id}, previous_response_id):
 * the newest of them. */
#define RESPONSES_MAX 1024

static const char synopsis[] =
    "usage: evictd-llama serve -m MODEL.gguf [options]\n"
    "\n"
    "An HTTP completion server, each request's KV cache kept by evictd (a\n"
    "session per choice, deleted when it ends or its client goes away; all\n"
    "requests decoding at once are one llama.cpp pass and one evictd batch\n"
    "per iteration): OpenAI's GET /v1/models, POST /v1/completions and\n"
    "POST /v1/chat/completions; llama.cpp's POST /completion\n"
    "{\"prompt\":\"...\",\"n_predict\":N,\"stream\":false,\"temperature\":0,\n"
    "\"seed\":0,\"stop\":[...]}; GET /health, GET /metrics. Without all of\n"
    "--budget, --sinks and --lookahead, a probe session reads the daemon's\n"
    "defaults at start. The defaults are llama.cpp's fast settings; --exact\n"
    "gives the logits a float64 reference computes.\n";

#define OPT(f) offsetof(serve_opts_t, f)

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

static const cli_opt_t options[] = {
    {"listen", NULL, "ADDR", CLI_STR, OPT(listen), 0, 0, {NULL},
     "HOST:PORT or unix:/path (default $EVICTD_LLAMA_LISTEN, else "
     "127.0.0.1:8080; port 0: any, the address is printed on stderr; a Unix "
     "socket another server listens on is refused, a stale one replaced)"},
    {"host", NULL, "HOST", CLI_STR, OPT(host), 0, 0, {NULL},
     "with --port, instead of --listen: llama-server's spelling (default "
     "127.0.0.1)"},
    {"port", NULL, "PORT", CLI_U32, OPT(port), 0, 65535, {NULL},
     "with --host (default 8080)"},
    {"parallel", "np", "N", CLI_U32, OPT(parallel), 1, 256, {NULL},
     "sequences decoding at once (a request of n choices takes n); more "
     "requests wait in a queue of --queue, beyond it 503"},
    {"queue", NULL, "N", CLI_U32, OPT(queue), 0, 1u << 20, {NULL},
     "requests waiting"},
    {"n-predict-max", NULL, "N", CLI_U32, OPT(n_predict_max), 1, 1u << 30,
     {NULL}, "the most tokens a choice may ask for (n_predict, max_tokens): "
     "the one limit of a generation, which the window lets run past the "
     "model's context"},
    {"alias", "a", "NAME", CLI_STR, OPT(alias), 0, 0, {NULL},
     "the model's name in answers and GET /v1/models (default: the GGUF's "
     "file name)"},
    {"api-key", NULL, "KEY", CLI_STR, OPT(api_key), 0, 0, {NULL},
     "require 'Authorization: Bearer KEY' on every route but /health (401 "
     "without)"},
    {"api-key-file", NULL, "FILE", CLI_STR, OPT(api_key_file), 0, 0, {NULL},
     "the same, the key the file's first line"},
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
     "afresh"},
    {"cache-ram", "cram", "MIB", CLI_CALL, OPT(cache_ram), 0, 0,
     {.parse = parse_cache_ram}, "parked sequences whose slot another request needs are saved "
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

/* An API key: printable ASCII without blanks, as the daemon's token. */
static bool key_ok(const char *k) {
  for (const char *p = k; *p; p++)
    if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e)
      return false;
  return *k != '\0';
}

/* Rules between options: where to listen, the API key. *key_mem holds a
 * key read from a file (the caller frees it). */
static int check(serve_opts_t *o, char listen[320], char **key_mem) {
  if (o->listen != NULL && (o->host != NULL || o->port != 0))
    return bad("give --listen or --host/--port, not both");
  if (o->host != NULL || o->port != 0) {
    const char *h = o->host ? o->host : "127.0.0.1";
    snprintf(listen, 320, strchr(h, ':') ? "[%s]:%u" : "%s:%u", h,
             o->port ? o->port : 8080);
    o->listen = listen;
  } else if (o->listen == NULL) {
    const char *env = getenv("EVICTD_LLAMA_LISTEN");
    o->listen = env && *env ? env : "127.0.0.1:8080";
  }
  if (o->cache_prompt && o->no_cache_prompt)
    return bad("give --cache-prompt or --no-cache-prompt, not both");
  if (o->api_key != NULL && o->api_key_file != NULL)
    return bad("give --api-key or --api-key-file, not both");
  if (o->api_key_file != NULL) {
    size_t len;
    char *k = cli_read_file(o->api_key_file, &len);
    if (k == NULL)
      return bad("cannot read --api-key-file %s: %s", o->api_key_file,
                 strerror(errno));
    k[strcspn(k, "\r\n")] = '\0';
    char *start = k + strspn(k, " \t"), *end = start + strlen(start);
    while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
      *--end = '\0';
    memmove(k, start, strlen(start) + 1);
    *key_mem = k;
    o->api_key = k;
  }
  if (o->api_key != NULL && !key_ok(o->api_key))
    return bad("the API key must be printable ASCII without blanks%s",
               o->api_key_file ? " on the file's first line" : "");
  return 0;
}

/* Runs until SIGTERM or SIGINT, then stops: no new connections, the
 * engine ends its tasks (their connections are answered), then the
 * connections' threads go. */
static int run(const serve_opts_t *o, sigset_t *sigs) {
  char err[512], bound[300];
  lm_t lm;
  tq_t q;
  engine_t *e;
  lm_init(o->lm.debug);
  up_init(o->lm.debug);
  if (lm_load(&lm, "target", o->lm.model, err, sizeof(err)) != 0)
    return fail("%s", err);
  int fd, rc = evd_listen_open(o->listen, &fd, bound, sizeof(bound));
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
                 .defaults = json_object(),
                 .responses = responses_store_new(RESPONSES_MAX)};
  if (up_chat_new(&site.chat, lm.model, NULL, true, err, sizeof(err)) != 0) {
    engine_stop(e);
    close(fd);
    lm_close(&lm);
    tq_destroy(&q);
    responses_store_free(site.responses);
    json_decref(site.defaults);
    return fail("the chat template: %s", err);
  }
  char *info = NULL;
  if (up_chat_info(site.chat, &info, NULL, 0) == 0 && info != NULL &&
      strstr(info, "\"explicit\":false") != NULL)
    fprintf(stderr, "evictd-llama serve: the model has no chat template: "
            "/v1/chat/completions uses ChatML, as llama-server does\n");
  free(info);
  struct MHD_Daemon *d = site.responses && site.defaults
                             ? http_start(&site, fd) : NULL;
  if (d == NULL) {
    responses_store_free(site.responses);
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
      .cache_ram = 8192};
  cli_cmd_t c = CLI_CMD(WHO, synopsis, options, o);
  char listen[320], *key = NULL;
  int rc = cli_command(&c, argc, argv);
  if (rc != CLI_RUN)
    return rc;
  if (check(&o, listen, &key) != 0) {
    free(key);
    return 2;
  }

  /* Signals go to sigwait, in no other thread (set before any starts). */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN);
  rc = run(&o, &sigs);
  free(key);
  return rc;
}
