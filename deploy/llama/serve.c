/* evictd-llama serve: a completion server whose requests keep their KV
 * cache through evictd. The command line, the listening socket and the
 * shutdown; the HTTP side is serve_http.c, the decode loop engine.c.
 *
 * Threads: libmicrohttpd's listening thread and a thread per connection
 * (serve_http.c), one engine thread that alone touches llama.cpp's context
 * and the evictd client (engine.c), and this main thread, which waits for
 * SIGTERM/SIGINT (blocked in every thread, taken with sigwait). */
#include <errno.h>
#include <getopt.h>
#include <microhttpd.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "cli.h"
#include "serve.h"

static const char usage[] =
    "usage: evictd-llama serve -m MODEL.gguf [options]\n"
    "\n"
    "An HTTP completion server: POST /completion {\"prompt\":\"...\",\n"
    "\"n_predict\":N,\"stream\":false,\"temperature\":0,\"seed\":0},\n"
    "GET /health, GET /metrics. Each request is an evictd session (deleted\n"
    "when it ends or its client goes away); all requests decoding at once\n"
    "are one llama.cpp pass and one evictd batch per iteration.\n"
    "\n"
    "  -m, --model FILE       the model (GGUF)\n"
    "      --listen ADDR      HOST:PORT or unix:/path (default $EVICTD_LLAMA_"
    "LISTEN,\n"
    "                         else 127.0.0.1:8080; port 0: any, the address\n"
    "                         is printed on stderr)\n"
    "      --evictd URL       the daemon: http://, https://, unix:/path\n"
    "                         (default $EVICTD_URL, else\n"
    "                         unix:/run/evictd/evictd.sock)\n"
    "      --budget N         each session's budget (default: the daemon's)\n"
    "      --sinks N          positions pinned at the start (default: the\n"
    "                         daemon's)\n"
    "      --lookahead N      prompt chunk per iteration (default: the\n"
    "                         daemon's); without all three, a probe session\n"
    "                         reads the daemon's defaults at start\n"
    "      --parallel N       requests decoding at once (default 8); more\n"
    "                         wait in a queue of --queue, beyond it 503\n"
    "      --queue N          requests waiting (default 64)\n"
    "      --n-predict-max N  the largest n_predict (default 4096; the\n"
    "                         default n_predict is 128)\n"
    "      --threads N        llama.cpp threads (default 1)\n"
    "      --timeout-ms MS    per evictd request (default 10000)\n"
    "      --reconnect-ms MS  keep resending a step while evictd restarts\n"
    "                         or answers too late (default 30000)\n"
    "      --token-file FILE  evictd's bearer token\n"
    "      --cafile FILE      the CA of an https:// evictd\n"
    "      --debug            llama.cpp's whole log\n"
    "  -h, --help             this text\n";

enum {
  O_LISTEN = 256, O_EVICTD, O_BUDGET, O_SINKS, O_LOOKAHEAD, O_PARALLEL,
  O_QUEUE, O_NPMAX, O_THREADS, O_TIMEOUT, O_RECONNECT, O_TOKEN_FILE,
  O_CAFILE, O_DEBUG
};

static const struct option longopts[] = {
    {"model", required_argument, NULL, 'm'},
    {"listen", required_argument, NULL, O_LISTEN},
    {"evictd", required_argument, NULL, O_EVICTD},
    {"budget", required_argument, NULL, O_BUDGET},
    {"sinks", required_argument, NULL, O_SINKS},
    {"lookahead", required_argument, NULL, O_LOOKAHEAD},
    {"parallel", required_argument, NULL, O_PARALLEL},
    {"queue", required_argument, NULL, O_QUEUE},
    {"n-predict-max", required_argument, NULL, O_NPMAX},
    {"threads", required_argument, NULL, O_THREADS},
    {"timeout-ms", required_argument, NULL, O_TIMEOUT},
    {"reconnect-ms", required_argument, NULL, O_RECONNECT},
    {"token-file", required_argument, NULL, O_TOKEN_FILE},
    {"cafile", required_argument, NULL, O_CAFILE},
    {"debug", no_argument, NULL, O_DEBUG},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0}};

#define fail(...) cli_say(1, "evictd-llama serve", NULL, __VA_ARGS__)

/* A listening socket on addr; its address as bound in `bound`. */
static int listen_on(const char *addr, char *bound, size_t blen) {
  if (strncmp(addr, "unix:", 5) == 0) {
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    const char *path = addr + 5;
    if (strlen(path) == 0 || strlen(path) >= sizeof(un.sun_path))
      return fail("--listen %s: the socket path is empty or too long", addr),
             -1;
    strcpy(un.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    unlink(path); /* a socket left by a previous run */
    if (fd < 0 || bind(fd, (struct sockaddr *)&un, sizeof(un)) != 0 ||
        listen(fd, 128) != 0)
      return fail("cannot listen on %s: %s", addr, strerror(errno)), -1;
    snprintf(bound, blen, "%s", addr);
    return fd;
  }
  const char *colon = strrchr(addr, ':');
  if (colon == NULL || colon == addr)
    return fail("--listen wants HOST:PORT or unix:/path, not '%s'", addr),
           -1;
  char host[256];
  size_t hl = (size_t)(colon - addr);
  if (addr[0] == '[' && hl >= 2 && addr[hl - 1] == ']')
    memcpy(host, addr + 1, hl - 2), host[hl - 2] = '\0';
  else if (hl < sizeof(host))
    memcpy(host, addr, hl), host[hl] = '\0';
  else
    return fail("--listen %s: the host is too long", addr), -1;
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                  *ai;
  int e = getaddrinfo(host, colon + 1, &hints, &ai);
  if (e != 0)
    return fail("--listen %s: %s", addr, gai_strerror(e)), -1;
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  if (fd >= 0)
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
      listen(fd, 128) != 0) {
    freeaddrinfo(ai);
    return fail("cannot listen on %s: %s", addr, strerror(errno)), -1;
  }
  freeaddrinfo(ai);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof(ss);
  char h[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  if (ss.ss_family == AF_INET) {
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    inet_ntop(AF_INET, &in->sin_addr, h, sizeof(h));
    port = ntohs(in->sin_port);
    snprintf(bound, blen, "%s:%d", h, port);
  } else {
    struct sockaddr_in6 *in = (struct sockaddr_in6 *)&ss;
    inet_ntop(AF_INET6, &in->sin6_addr, h, sizeof(h));
    port = ntohs(in->sin6_port);
    snprintf(bound, blen, "[%s]:%d", h, port);
  }
  return fd;
}

int serve_main(int argc, char **argv) {
  const char *env_listen = getenv("EVICTD_LLAMA_LISTEN"),
             *env_url = getenv("EVICTD_URL");
  serve_opts_t o = {
      .listen = env_listen && *env_listen ? env_listen : "127.0.0.1:8080",
      .url = env_url && *env_url ? env_url : "unix:/run/evictd/evictd.sock",
      .budget = -1, .sinks = -1, .lookahead = -1, .parallel = 8,
      .queue = 64, .n_predict_max = 4096, .threads = 1,
      .timeout_ms = 10000, .reconnect_ms = 30000};
  unsigned long long v;
  int c;
  while ((c = getopt_long(argc, argv, "m:h", longopts, NULL)) != -1) {
    const char *name = "";
    for (const struct option *lo = longopts; lo->name; lo++)
      if (lo->val == c)
        name = lo->name;
    switch (c) {
    case 'm': o.model = optarg; break;
    case O_LISTEN: o.listen = optarg; break;
    case O_EVICTD: o.url = optarg; break;
    case O_BUDGET:
      if (cli_number("evictd-llama serve", name, optarg, 1, UINT32_MAX, &v)) return 2;
      o.budget = (int64_t)v;
      break;
    case O_SINKS:
      if (cli_number("evictd-llama serve", name, optarg, 0, UINT32_MAX, &v)) return 2;
      o.sinks = (int64_t)v;
      break;
    case O_LOOKAHEAD:
      if (cli_number("evictd-llama serve", name, optarg, 1, 1u << 16, &v)) return 2;
      o.lookahead = (int64_t)v;
      break;
    case O_PARALLEL:
      if (cli_number("evictd-llama serve", name, optarg, 1, 256, &v)) return 2;
      o.parallel = (uint32_t)v;
      break;
    case O_QUEUE:
      if (cli_number("evictd-llama serve", name, optarg, 0, 1u << 20, &v)) return 2;
      o.queue = (uint32_t)v;
      break;
    case O_NPMAX:
      if (cli_number("evictd-llama serve", name, optarg, 1, 1u << 30, &v)) return 2;
      o.n_predict_max = (uint32_t)v;
      break;
    case O_THREADS:
      if (cli_number("evictd-llama serve", name, optarg, 1, 256, &v)) return 2;
      o.threads = (int)v;
      break;
    case O_TIMEOUT:
      if (cli_number("evictd-llama serve", name, optarg, 1, 3600000, &v)) return 2;
      o.timeout_ms = (unsigned)v;
      break;
    case O_RECONNECT:
      if (cli_number("evictd-llama serve", name, optarg, 0, 3600000, &v)) return 2;
      o.reconnect_ms = (unsigned)v;
      break;
    case O_TOKEN_FILE: o.token_file = optarg; break;
    case O_CAFILE: o.cafile = optarg; break;
    case O_DEBUG: o.debug = true; break;
    case 'h': fputs(usage, stdout); return 0;
    default:
      fputs("(evictd-llama serve --help lists the options)\n", stderr);
      return 2;
    }
  }
  if (optind < argc)
    return fail("unexpected argument '%s'", argv[optind]) + 1;
  if (o.model == NULL)
    return fail("-m MODEL.gguf is required") + 1;

  /* Signals go to sigwait below, in no other thread. */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN);

  serve_t sv;
  memset(&sv, 0, sizeof(sv));
  sv.o = &o;
  sv.pid = getpid();
  pthread_mutex_init(&sv.mu, NULL);
  pthread_cond_init(&sv.cv, NULL);
  char err[512], bound[300];
  lm_init(o.debug);
  if (lm_load(&sv.lm, "served", o.model, err, sizeof(err)) != 0)
    return fail("%s", err);
  int fd = listen_on(o.listen, bound, sizeof(bound));
  if (fd < 0) {
    lm_close(&sv.lm);
    return 1;
  }
  pthread_t engine;
  if (engine_start(&sv, &engine, err, sizeof(err)) != 0) {
    close(fd);
    lm_close(&sv.lm);
    return fail("%s", err);
  }
  struct MHD_Daemon *d = serve_http_start(&sv, fd);
  if (d == NULL) {
    close(fd);
    return fail("libmicrohttpd did not start on %s", bound);
  }
  fprintf(stderr, "evictd-llama serve: listening on %s (evictd %s; budget "
          "%u, sinks %u, lookahead %u, parallel %u)\n", bound, o.url,
          sv.budget, sv.sinks, sv.lookahead, o.parallel);
  int sig = 0;
  sigwait(&sigs, &sig);
  fprintf(stderr, "evictd-llama serve: %s: ending the requests in flight "
          "and deleting their sessions\n",
          sig == SIGINT ? "SIGINT" : "SIGTERM");
  /* Stop accepting, end the engine's requests (their connections are
   * answered), then stop the connections' threads. */
  MHD_socket ls = MHD_quiesce_daemon(d);
  pthread_mutex_lock(&sv.mu);
  sv.stopping = true;
  pthread_cond_broadcast(&sv.cv);
  pthread_mutex_unlock(&sv.mu);
  pthread_join(engine, NULL);
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
  if (strncmp(o.listen, "unix:", 5) == 0)
    unlink(o.listen + 5);
  lm_close(&sv.lm);
  return 0;
}
