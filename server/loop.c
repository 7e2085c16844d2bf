/* The libuv loop. libmicrohttpd watches its sockets with its own epoll set
 * (edge-triggered), so the loop polls that set's descriptor and also keeps a
 * timer armed from MHD_get_timeout after every run: the timer is what makes
 * MHD come back to work it left pending. */
#include "loop.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

#include "http.h"
#include "journal.h"
#include "listen.h"
#include "log.h"
#include "metrics.h"

/* How often idle sessions are looked for, and how long a graceful stop
 * waits for requests in flight. */
#define REAP_EVERY_MS 500
#define GRACE_MS 10000
/* How often connections past --conn-timeout are looked for. */
#define SWEEP_EVERY_MS 250

typedef struct {
  uv_loop_t loop;
  uv_poll_t poll;
  uv_timer_t mhd_timer, reap_timer, grace_timer, sweep_timer;
  uv_signal_t sigint, sigterm, sigchld, sighup;
  evd_api_t *api;
  evd_http_t *http;
  evd_journal_t *journal;
  int stopping, finished;
} server_t;

static void finish(server_t *s);

static void on_mhd_timer(uv_timer_t *t);

/* Runs MHD, then re-arms the timer from what it says it still needs. */
static void drive(server_t *s) {
  uint64_t ms;

  if (s->finished)
    return;
  evd_api_set_clock(s->api, uv_now(&s->loop));
  evd_http_run(s->http, uv_now(&s->loop));
  if (s->stopping && evd_http_busy(s->http) == 0) {
    finish(s);
    return;
  }
  if (evd_http_timeout(s->http, &ms))
    uv_timer_start(&s->mhd_timer, on_mhd_timer, ms, 0);
  else
    uv_timer_stop(&s->mhd_timer);
}

static void on_poll(uv_poll_t *p, int status, int events) {
  (void)status;
  (void)events;
  drive(p->data);
}

static void on_mhd_timer(uv_timer_t *t) {
  drive(t->data);
}

static void on_reap_timer(uv_timer_t *t) {
  server_t *s = t->data;
  uint32_t n;

  evd_api_set_clock(s->api, uv_now(&s->loop));
  n = evd_api_reap(s->api);
  if (n > 0)
    evd_log(EVD_LOG_INFO, "reaped %u idle session%s", n, n == 1 ? "" : "s");
}

static void on_sweep_timer(uv_timer_t *t) {
  server_t *s = t->data;
  unsigned expired = evd_http_expire_waits(s->http, uv_now(&s->loop), 0);
  unsigned n = evd_http_sweep(s->http, uv_now(&s->loop));

  if (n > 0)
    evd_log(EVD_LOG_DEBUG, "cut off %u connections past --conn-timeout", n);
  if (n > 0 || expired > 0)
    drive(s); /* let libmicrohttpd close them, or answer them, now */
}

static void on_grace_timer(uv_timer_t *t) {
  server_t *s = t->data;
  unsigned busy = evd_http_busy(s->http);

  evd_log(EVD_LOG_WARN, "%u request%s still in flight after %d ms; closing",
          busy, busy == 1 ? "" : "s", GRACE_MS);
  /* Answers held for a failing journal get their 503 before the end. */
  if (evd_http_expire_waits(s->http, uv_now(&s->loop), 1) > 0) {
    drive(s);
    drive(s);
  }
  finish(s);
}

static void on_signal(uv_signal_t *sig, int signum) {
  server_t *s = sig->data;
  unsigned busy;

  if (s->stopping) { /* a second signal: stop waiting */
    finish(s);
    return;
  }
  busy = evd_http_busy(s->http);
  evd_log(EVD_LOG_INFO, "%s: no longer accepting; finishing %u request%s",
          strsignal(signum), busy, busy == 1 ? "" : "s");
  s->stopping = 1;
  evd_http_quiesce(s->http);
  uv_timer_start(&s->grace_timer, on_grace_timer, GRACE_MS, 0);
  drive(s);
}

static void on_durable(void *arg, uint64_t lsn) {
  server_t *s = arg;

  if (s->http == NULL)
    return;
  evd_http_durable(s->http, lsn);
  /* Resuming does not wake libmicrohttpd in external polling mode (its
   * inter-thread channel is off there): run it now. */
  drive(s);
}

/* SIGHUP's default action would kill the daemon and every session with it
 * (exit 129, nothing logged), as a closing terminal or a careless
 * "reload" does. There is nothing to reload: flags are read once, and the
 * log is standard error, which a supervisor owns. */
static void on_sighup(uv_signal_t *sig, int signum) {
  (void)sig;
  (void)signum;
  evd_log(EVD_LOG_WARN, "SIGHUP ignored: evictd reads its flags only at "
                        "start and logs to standard error (nothing to "
                        "reopen); restart it to change them");
}

static void on_sigchld(uv_signal_t *sig, int signum) {
  server_t *s = sig->data;

  (void)signum;
  if (s->journal != NULL)
    evd_journal_reap_child(s->journal);
}

/* Stops everything; the loop then runs out of handles and returns (after a
 * journal write in the thread pool, if one is under way). */
static void finish(server_t *s) {
  if (s->finished)
    return;
  s->finished = 1;
  if (s->journal != NULL)
    evd_journal_stop(s->journal);
  uv_close((uv_handle_t *)&s->sigchld, NULL);
  /* The poll handle watches MHD's epoll descriptor: close it first, then
   * let MHD close its connections and that descriptor. */
  uv_close((uv_handle_t *)&s->poll, NULL);
  evd_http_stop(s->http);
  s->http = NULL;
  uv_close((uv_handle_t *)&s->mhd_timer, NULL);
  uv_close((uv_handle_t *)&s->reap_timer, NULL);
  uv_close((uv_handle_t *)&s->grace_timer, NULL);
  uv_close((uv_handle_t *)&s->sweep_timer, NULL);
  uv_close((uv_handle_t *)&s->sigint, NULL);
  uv_close((uv_handle_t *)&s->sigterm, NULL);
  uv_close((uv_handle_t *)&s->sighup, NULL);
  /* Closing the handle restored the default action: keep ignoring it
   * while the final snapshot is written. */
  signal(SIGHUP, SIG_IGN);
}

/* Lifts the descriptor limit as far as allowed and keeps the connection
 * limit below it, so that accept() failing is never how a limit shows. */
static void fit_descriptors(evd_config_t *cfg) {
  struct rlimit rl;
  rlim_t need = (rlim_t)cfg->max_conns + 64;

  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return;
  if (rl.rlim_cur < need && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max < need ? rl.rlim_max : need;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur < need) {
    uint32_t fit = rl.rlim_cur > 128 ? (uint32_t)(rl.rlim_cur - 64) : 64;
    evd_log(EVD_LOG_WARN,
            "descriptor limit %llu: serving at most %u connections",
            (unsigned long long)rl.rlim_cur, fit);
    cfg->max_conns = fit;
  }
}

int evd_server_run(const evd_config_t *config) {
  evd_config_t cfg = *config;
  server_t s;
  char name[320];
  int fd = -1, err, rc = 1;

  memset(&s, 0, sizeof s);
  signal(SIGPIPE, SIG_IGN);
  fit_descriptors(&cfg);
  err = evd_listen_open(cfg.listen, &fd, name, sizeof name);
  if (err == EVD_EINVAL) { /* a malformed flag value, like any other */
    evd_log(EVD_LOG_ERROR, "--listen %s: %s", cfg.listen, name);
    return 2;
  }
  if (err != 0) {
    evd_log(EVD_LOG_ERROR, "cannot listen on %s: %s", cfg.listen,
            strerror(errno));
    return 1;
  }
  if (uv_loop_init(&s.loop) != 0) {
    close(fd);
    evd_log(EVD_LOG_ERROR, "cannot start the event loop");
    return 1;
  }
  if (evd_api_new(&s.api, &cfg) != 0)
    goto fail_api;
  evd_api_set_clock(s.api, uv_now(&s.loop));
  if (cfg.state_dir != NULL) {
    char why[512];
    err = evd_journal_open(&s.journal, cfg.state_dir, (evd_fsync_t)cfg.fsync,
                           cfg.compact_after, cfg.max_budget,
                           evd_api_table(s.api), evd_api_apply, s.api, why,
                           sizeof why);
    if (err != 0) {
      evd_log(EVD_LOG_ERROR, "--state-dir %s: %s", cfg.state_dir, why);
      goto fail_journal;
    }
    evd_api_set_journal(s.api, s.journal);
    evd_api_touch_all(s.api);
  }
  if (evd_http_start(&s.http, s.api, &cfg, fd) != 0)
    goto fail_http;
  fd = -1; /* libmicrohttpd's now */
  uv_poll_init(&s.loop, &s.poll, evd_http_fd(s.http));
  uv_timer_init(&s.loop, &s.mhd_timer);
  uv_timer_init(&s.loop, &s.reap_timer);
  uv_timer_init(&s.loop, &s.grace_timer);
  uv_timer_init(&s.loop, &s.sweep_timer);
  uv_signal_init(&s.loop, &s.sigint);
  uv_signal_init(&s.loop, &s.sigterm);
  uv_signal_init(&s.loop, &s.sigchld);
  uv_signal_init(&s.loop, &s.sighup);
  s.poll.data = s.mhd_timer.data = s.reap_timer.data = s.grace_timer.data =
      s.sweep_timer.data = s.sigint.data = s.sigterm.data = s.sigchld.data =
          s.sighup.data = &s;
  uv_poll_start(&s.poll, UV_READABLE, on_poll);
  uv_signal_start(&s.sigint, on_signal, SIGINT);
  uv_signal_start(&s.sigterm, on_signal, SIGTERM);
  uv_signal_start(&s.sigchld, on_sigchld, SIGCHLD);
  uv_signal_start(&s.sighup, on_sighup, SIGHUP);
  if (s.journal != NULL) {
    evd_http_set_journal(s.http, s.journal);
    evd_journal_start(s.journal, &s.loop, on_durable, &s);
    evd_api_metrics(s.api)->journal = s.journal; /* its figures, pulled */
  }
  uv_timer_start(&s.sweep_timer, on_sweep_timer, SWEEP_EVERY_MS,
                 SWEEP_EVERY_MS);
  if (cfg.idle_ttl > 0)
    uv_timer_start(&s.reap_timer, on_reap_timer, REAP_EVERY_MS,
                   REAP_EVERY_MS);
  /* The grace timer must not keep the loop alive on its own account. */
  uv_unref((uv_handle_t *)&s.grace_timer);

  evd_log_always("listening on %s (evictd " EVD_VERSION "%s)", name,
                 cfg.tls_cert_pem != NULL ? ", TLS" : "");
  drive(&s);
  uv_run(&s.loop, UV_RUN_DEFAULT);
  if (!s.finished) /* the loop ran dry without a stop: should not happen */
    finish(&s);
  uv_run(&s.loop, UV_RUN_DEFAULT); /* run the close callbacks */
  rc = uv_loop_close(&s.loop) == 0 ? 0 : 1;
  /* The loop is idle now: the final snapshot may take its time. */
  evd_api_metrics(s.api)->journal = NULL; /* about to be freed */
  if (s.journal != NULL &&
      evd_journal_close(s.journal, evd_api_table(s.api)) != 0)
    rc = 1;
  {
    unsigned n = evd_table_count(evd_api_table(s.api));
    evd_log(EVD_LOG_INFO, "stopped with %u session%s", n, n == 1 ? "" : "s");
  }
  evd_api_free(s.api);
  evd_listen_cleanup(cfg.listen);
  return rc;

fail_http:
  evd_log(EVD_LOG_ERROR, "cannot start: out of memory or libmicrohttpd "
                         "refused the configuration");
  if (s.journal != NULL)
    evd_journal_close(s.journal, evd_api_table(s.api));
fail_journal:
  evd_api_free(s.api);
fail_api:
  if (fd >= 0)
    close(fd);
  uv_loop_close(&s.loop);
  evd_listen_cleanup(cfg.listen);
  return 1;
}
