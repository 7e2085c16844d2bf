/* evictd-llama serve: the command line, the listening socket and the life
 * of the process. Threads: libmicrohttpd's listening thread and a thread
 * per connection (http.c), the engine thread (engine.c), and this main
 * thread, which waits for SIGTERM/SIGINT (blocked in every thread, taken
 * with sigwait) and then stops them in order. */
#include "serve/serve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/cli.h"
#include "serve/engine.h"
#include "serve/http.h"

#define WHO "evictd-llama serve"

static const char synopsis[] =
    "usage: evictd-llama serve -m MODEL.gguf [options]\n"
    "\n"
    "An HTTP completion server: POST /completion {\"prompt\":\"...\",\n"
    "\"n_predict\":N,\"stream\":false,\"temperature\":0,\"seed\":0,\n"
    "\"stop\":[...]}, GET /health, GET /metrics. Each request is an evictd\n"
    "session (deleted when it ends or its client goes away); all requests\n"
    "decoding at once are one llama.cpp pass and one evictd batch per\n"
    "iteration. Without all of --budget, --sinks and --lookahead, a probe\n"
    "session reads the daemon's defaults at start.\n";

#define OPT(f) offsetof(serve_opts_t, f)

static const cli_opt_t options[] = {
    {"listen", NULL, "ADDR", CLI_STR, OPT(listen), 0, 0, NULL,
     "HOST:PORT or unix:/path (default $EVICTD_LLAMA_LISTEN, else "
     "127.0.0.1:8080; port 0: any, the address is printed on stderr)"},
    {"parallel", NULL, "N", CLI_U32, OPT(parallel), 1, 256, NULL,
     "requests decoding at once; more wait in a queue of --queue, beyond "
     "it 503"},
    {"queue", NULL, "N", CLI_U32, OPT(queue), 0, 1u << 20, NULL,
     "requests waiting"},
    {"n-predict-max", NULL, "N", CLI_U32, OPT(n_predict_max), 1, 1u << 30,
     NULL, "the largest n_predict a request may ask for (one that asks "
     "for none gets 128, or this when smaller)"},
};

#define fail(...) cli_say(1, WHO, NULL, __VA_ARGS__)

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
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  if (ss.ss_family == AF_INET) {
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    inet_ntop(AF_INET, &in->sin_addr, h, sizeof(h));
    snprintf(bound, blen, "%s:%d", h, ntohs(in->sin_port));
  } else {
    struct sockaddr_in6 *in = (struct sockaddr_in6 *)&ss;
    inet_ntop(AF_INET6, &in->sin6_addr, h, sizeof(h));
    snprintf(bound, blen, "[%s]:%d", h, ntohs(in->sin6_port));
  }
  return fd;
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
  if (lm_load(&lm, "served", o->lm.model, err, sizeof(err)) != 0)
    return fail("%s", err);
  int fd = listen_on(o->listen, bound, sizeof(bound));
  if (fd < 0) {
    lm_close(&lm);
    return 1;
  }
  tq_init(&q, o->queue);
  if (engine_start(&e, o, &lm, &q, err, sizeof(err)) != 0) {
    close(fd);
    lm_close(&lm);
    tq_destroy(&q);
    return fail("%s", err);
  }
  site_t site = {.o = o, .lm = &lm, .q = &q};
  struct MHD_Daemon *d = http_start(&site, fd);
  if (d == NULL) {
    engine_stop(e);
    close(fd);
    lm_close(&lm);
    tq_destroy(&q);
    return fail("libmicrohttpd did not start on %s", bound);
  }
  uint32_t budget, sinks, lookahead;
  engine_settings(e, &budget, &sinks, &lookahead);
  fprintf(stderr, "evictd-llama serve: listening on %s (evictd %s; budget "
          "%u, sinks %u, lookahead %u, parallel %u)\n", bound,
          o->link.url ? o->link.url : "default", budget, sinks, lookahead,
          o->parallel);
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
  if (strncmp(o->listen, "unix:", 5) == 0)
    unlink(o->listen + 5);
  tq_destroy(&q);
  lm_close(&lm);
  return 0;
}

int serve_main(int argc, char **argv) {
  const char *env_listen = getenv("EVICTD_LLAMA_LISTEN");
  serve_opts_t o = {
      .lm = {.threads = 1}, .link = LINK_OPTS_DEFAULT,
      .listen = env_listen && *env_listen ? env_listen : "127.0.0.1:8080",
      .cfg = EVD_SESSION_CFG_DEFAULT, .parallel = 8,
      .queue = 64, .n_predict_max = 32768};
  cli_cmd_t c = CLI_CMD(WHO, synopsis, options, o);
  int rc = cli_command(&c, argc, argv);
  if (rc != CLI_RUN)
    return rc;

  /* Signals go to sigwait, in no other thread (set before any starts). */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN);
  return run(&o, &sigs);
}
