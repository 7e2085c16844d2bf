/* The C client's transport: one libcurl easy handle (one keep-alive
 * connection), and the rules for sending a request again when its
 * connection fails, which mirror the Python client's.
 *
 * A failed attempt is one of three kinds:
 *  - not delivered: no connection (refused, unreachable, the TLS handshake
 *    failed) or the request could not be written whole. The daemon cannot
 *    have applied it: any request is sent again.
 *  - answer lost: the request went out and the connection died before the
 *    whole answer came back. It may have been applied: it is sent again
 *    only when that is safe (the daemon replays an identical step, commit
 *    or truncate; PUT, GET, DELETE and fork are idempotent), never an
 *    evict, nor a batch that names a session twice.
 *  - a timeout: the request may have been applied, or may still be
 *    running. Returned as EVD_CLIENT_ETIMEOUT, unless the client was made
 *    with resend_timeouts: then it is sent again as an answer lost is
 *    (only when that is safe), or as one not delivered when no attempt
 *    began (connecting took the time).
 * Sending again happens on a new connection, once (reconnect_ms 0), or
 * with a backoff of 10 ms doubling to 500 ms for up to reconnect_ms after
 * the first failure of any kind (one clock for the whole call), which is
 * what carries an engine across a daemon restart or a stall.
 *
 * libcurl resends on its own too: when a request on a reused keep-alive
 * connection gets no byte of answer, it sends it again on a new connection
 * (Curl_retry_request, lib/transfer.c), even when the request had gone out
 * whole and may have been applied. Every attempt passes through the
 * pre-request callback (CURLOPT_PREREQFUNCTION, libcurl >= 7.80), so the
 * client counts attempts there and refuses the second one of a request
 * that must not be repeated: libcurl then fails the transfer with
 * CURLE_ABORTED_BY_CALLBACK instead of sending an evict twice. Keep-alive
 * stays on for every request, evict included. */
#include "client_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BACKOFF_FIRST_MS 10u
#define BACKOFF_MAX_MS 500u

typedef enum {
  NOT_DELIVERED, /* safe to send again */
  ANSWER_LOST,   /* may have been applied */
  TIMED_OUT,
  FATAL,         /* sending again would not help (TLS trust, a bad URL) */
  BAD_ANSWER,    /* something answered, not HTTP */
  NO_MEMORY
} outcome_t;

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void) {
  global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static size_t on_answer(char *data, size_t size, size_t nmemb, void *arg) {
  evd_client_t *c = arg;
  size_t n = size * nmemb;

  if (evd__cbuf_reserve(&c->ans, n)) {
    c->write_failed = true;
    return 0; /* libcurl fails the transfer: CURLE_WRITE_ERROR */
  }
  memcpy(c->ans.p + c->ans.len, data, n);
  c->ans.len += n;
  return n;
}

/* Whether a batch names no session twice (else it is never sent again:
 * only a session's last step is replayed). Asked only when a batch's
 * connection failed, so the sort's allocation is off the hot path. */
static int cmp_ids(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool batch_repeatable(const evd_step_t *steps, size_t n) {
  const char **ids;
  bool ok = true;
  size_t i;

  if (n < 2)
    return true;
  if ((ids = malloc(n * sizeof *ids)) == NULL)
    return false;
  for (i = 0; i < n; i++)
    ids[i] = steps[i].session;
  qsort(ids, n, sizeof *ids, cmp_ids);
  for (i = 1; i < n && ok; i++)
    ok = strcmp(ids[i - 1], ids[i]) != 0;
  free(ids);
  return ok;
}

/* Whether the request in flight may be sent again once it may have been
 * applied. A batch's answer is worked out only when asked, which is only
 * when its connection failed. */
static bool repeatable(evd_client_t *c) {
  if (c->batch_steps != NULL && !c->batch_checked) {
    c->may_repeat = batch_repeatable(c->batch_steps, c->batch_n);
    c->batch_checked = true;
  }
  return c->may_repeat;
}

/* Called by libcurl before each attempt of a transfer, on a new or reused
 * connection: the first is ours, any later one is libcurl resending. */
static int on_attempt(void *arg, char *remote_ip, char *local_ip,
                      int remote_port, int local_port) {
  evd_client_t *c = arg;

  (void)remote_ip, (void)local_ip, (void)remote_port, (void)local_port;
  if (c->prereqs++ > 0 && !repeatable(c)) {
    c->refused++;
    return CURL_PREREQFUNC_ABORT;
  }
  c->ans.len = 0;
  return CURL_PREREQFUNC_OK;
}

int evd__client_transport_init(evd_client_t *c, char *errbuf, size_t errlen) {
  CURL *h;
  CURLcode rc = CURLE_OK;

  pthread_once(&global_once, global_init);
  if (global_rc != CURLE_OK || (h = curl_easy_init()) == NULL) {
    if (errbuf != NULL && errlen > 0)
      snprintf(errbuf, errlen, "libcurl could not be initialised");
    return -1;
  }
  c->curl = h;
  c->method = EVD__GET;
  /* Transfers run in a multi handle of the client's own, so that a batch
   * can be sent now and its answer read later (evd_client_batch_send);
   * the keep-alive connection lives in its cache, shared by every call. */
  if ((c->multi = curl_multi_init()) == NULL ||
      curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, 1L) != CURLM_OK) {
    if (errbuf != NULL && errlen > 0)
      snprintf(errbuf, errlen, "libcurl could not make a multi handle");
    return -1;
  }
#define SET(opt, v)                                                            \
  do {                                                                         \
    if (rc == CURLE_OK)                                                        \
      rc = curl_easy_setopt(h, opt, v);                                        \
  } while (0)
  SET(CURLOPT_NOSIGNAL, 1L);
  SET(CURLOPT_TCP_NODELAY, 1L);
  SET(CURLOPT_ERRORBUFFER, c->curl_msg);
  SET(CURLOPT_WRITEFUNCTION, on_answer);
  SET(CURLOPT_WRITEDATA, c);
  SET(CURLOPT_PREREQFUNCTION, on_attempt);
  SET(CURLOPT_PREREQDATA, c);
  SET(CURLOPT_HTTPHEADER, c->headers);
  SET(CURLOPT_USERAGENT, "evictd-client-c/" EVD_CLIENT_VERSION);
  SET(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  SET(CURLOPT_TIMEOUT_MS, (long)c->timeout_ms);
  SET(CURLOPT_CONNECTTIMEOUT_MS, (long)c->connect_timeout_ms);
  /* One connection: a client is one thread's. */
  SET(CURLOPT_MAXCONNECTS, 1L);
  /* Session ids may be "." or "..": the path goes out as written, never
   * with its dot segments folded (which would turn /session/../step into
   * the batch route). */
  SET(CURLOPT_PATH_AS_IS, 1L);
  SET(CURLOPT_PROTOCOLS_STR, "http,https");
  if (c->unix_path != NULL)
    SET(CURLOPT_UNIX_SOCKET_PATH, c->unix_path);
  if (c->cafile != NULL)
    SET(CURLOPT_CAINFO, c->cafile);
  if (c->insecure) {
    SET(CURLOPT_SSL_VERIFYPEER, 0L);
    SET(CURLOPT_SSL_VERIFYHOST, 0L);
  }
#undef SET
  if (rc != CURLE_OK) {
    if (errbuf != NULL && errlen > 0)
      snprintf(errbuf, errlen, "libcurl refused an option: %s",
               curl_easy_strerror(rc));
    return -1;
  }
  return 0;
}

void evd__client_transport_close(evd_client_t *c) {
  if (c->multi != NULL && c->curl != NULL && c->attempt_on)
    curl_multi_remove_handle(c->multi, c->curl);
  if (c->multi != NULL)
    curl_multi_cleanup(c->multi);
  if (c->curl != NULL)
    curl_easy_cleanup(c->curl);
  c->multi = NULL;
  c->curl = NULL;
}

/* ---- one attempt: the easy handle driven through the client's multi ---- */

/* Begins an attempt: the handle joins the multi and one pass of
 * curl_multi_perform goes as far as it can without waiting (on a live
 * keep-alive connection, the whole request is written). */
static CURLcode attempt_start(evd_client_t *c) {
  int running;

  c->prereqs = c->refused = 0;
  c->write_failed = false;
  c->ans.len = 0;
  c->curl_msg[0] = '\0';
  if (curl_multi_add_handle(c->multi, c->curl) != CURLM_OK)
    return CURLE_OUT_OF_MEMORY;
  c->attempt_on = true;
  curl_multi_perform(c->multi, &running);
  return CURLE_OK;
}

/* Waits until the attempt is over (an answer, a failure or the timeout,
 * which libcurl keeps) and returns how it ended. */
static CURLcode attempt_finish(evd_client_t *c) {
  CURLcode rc = CURLE_OK;

  for (;;) {
    CURLMsg *m;
    CURLMcode mc;
    int left, running;

    while ((m = curl_multi_info_read(c->multi, &left)) != NULL) {
      if (m->msg == CURLMSG_DONE && m->easy_handle == c->curl) {
        rc = m->data.result;
        goto done;
      }
    }
    mc = curl_multi_poll(c->multi, NULL, 0, 1000, NULL);
    if (mc == CURLM_OK)
      mc = curl_multi_perform(c->multi, &running);
    if (mc != CURLM_OK) {
      rc = mc == CURLM_OUT_OF_MEMORY ? CURLE_OUT_OF_MEMORY : CURLE_FAILED_INIT;
      goto done;
    }
  }
done:
  curl_multi_remove_handle(c->multi, c->curl);
  c->attempt_on = false;
  return rc;
}

/* Drives the attempt until its request is written whole (or it is over),
 * without waiting for the answer: what evd_client_batch_send returns
 * after. libcurl's own timeout bounds it. */
static void attempt_push(evd_client_t *c) {
  for (;;) {
    curl_off_t up = 0;
    int running = 1;

    if (c->prereqs > 0 &&
        curl_easy_getinfo(c->curl, CURLINFO_SIZE_UPLOAD_T, &up) == CURLE_OK &&
        up >= (curl_off_t)c->body.len)
      return;
    if (curl_multi_poll(c->multi, NULL, 0, 1000, NULL) != CURLM_OK ||
        curl_multi_perform(c->multi, &running) != CURLM_OK || running == 0)
      return;
  }
}

static outcome_t classify(evd_client_t *c, CURLcode rc) {
  switch (rc) {
  case CURLE_OPERATION_TIMEDOUT:
    return TIMED_OUT;
  case CURLE_OUT_OF_MEMORY:
    return NO_MEMORY;
  case CURLE_WRITE_ERROR:
    return c->write_failed ? NO_MEMORY : FATAL;
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_CONNECT:
  case CURLE_SSL_CONNECT_ERROR: /* the handshake: before any request byte */
  case CURLE_SEND_ERROR:        /* not written whole: never applied */
    return NOT_DELIVERED;
  case CURLE_GOT_NOTHING:
  case CURLE_RECV_ERROR:
  case CURLE_PARTIAL_FILE:
  case CURLE_ABORTED_BY_CALLBACK: /* on_attempt refused libcurl's resend */
    return ANSWER_LOST;
  case CURLE_WEIRD_SERVER_REPLY:
    return BAD_ANSWER;
  default:
    return FATAL;
  }
}

static long ms_since(const struct timespec *t0) {
  struct timespec t;

  clock_gettime(CLOCK_MONOTONIC, &t);
  return (t.tv_sec - t0->tv_sec) * 1000L + (t.tv_nsec - t0->tv_nsec) / 1000000L;
}

static void sleep_ms(unsigned ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

/* Sets the easy handle up for this request: method, URL, body. */
static CURLcode prepare(evd_client_t *c, evd__method_t m) {
  CURLcode rc = curl_easy_setopt(c->curl, CURLOPT_URL, c->url.p);

  if (rc != CURLE_OK)
    return rc;
  switch (m) {
  case EVD__GET:
  case EVD__DELETE:
    if ((rc = curl_easy_setopt(c->curl, CURLOPT_HTTPGET, 1L)) != CURLE_OK)
      return rc;
    break;
  case EVD__POST:
  case EVD__PUT:
    if ((rc = curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE_LARGE,
                               (curl_off_t)c->body.len)) != CURLE_OK ||
        (rc = curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS,
                               c->body.len ? c->body.p : "")) != CURLE_OK)
      return rc;
    break;
  }
  if (m != c->method || m == EVD__PUT || m == EVD__DELETE)
    rc = curl_easy_setopt(c->curl, CURLOPT_CUSTOMREQUEST,
                          m == EVD__PUT      ? "PUT"
                          : m == EVD__DELETE ? "DELETE"
                                             : NULL);
  c->method = m;
  return rc;
}

/* What a failed call returns once sending again is over: the last
 * attempt's kind, a timeout or a failed connection. */
static int give_up(evd_client_t *c, bool timed_out, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int give_up(evd_client_t *c, bool timed_out, const char *fmt, ...) {
  char msg[sizeof c->err_msg];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return timed_out ? evd__client_fail(c, EVD_CLIENT_ETIMEOUT, "timeout", "%s",
                                      msg)
                   : evd__client_fail(c, EVD_CLIENT_ECONNECT,
                                      "connection_failed", "%s", msg);
}

int evd__client_begin(evd_client_t *c, evd__method_t m, bool may_repeat,
                      bool push) {
  CURLcode rc;

  if (c->inflight)
    return evd__einval(c, "A request is in flight (evd_client_batch_send): "
                          "read its answer first (evd_client_batch_recv).");
  c->status = 0;
  c->may_repeat = may_repeat;
  c->batch_checked = false;
  if ((rc = prepare(c, m)) != CURLE_OK)
    return evd__client_fail(c, EVD_CLIENT_ENOMEM, "out_of_memory",
                            "libcurl refused the request: %s",
                            curl_easy_strerror(rc));
  c->inflight = true;
  c->start_rc = attempt_start(c);
  if (push && c->start_rc == CURLE_OK)
    attempt_push(c);
  return 0;
}

/* The first attempt (begun by evd__client_begin), then as many more as the
 * rules above allow. */
static int finish(evd_client_t *c) {
  struct timespec first_failure;
  unsigned backoff = BACKOFF_FIRST_MS, resent = 0;
  bool applied_maybe = false, failing = false, begun = true;
  evd__method_t m = c->method;
  CURLcode rc;

  for (;;) {
    long conns = 0;
    outcome_t what;
    const char *why;
    bool timed_out = false;

    if (!begun)
      c->start_rc = attempt_start(c);
    begun = false;
    rc = c->start_rc != CURLE_OK ? c->start_rc : attempt_finish(c);
    if (curl_easy_getinfo(c->curl, CURLINFO_NUM_CONNECTS, &conns) ==
        CURLE_OK)
      c->stats.connections += (uint64_t)conns;
    if (c->prereqs > 1) {
      /* libcurl sent it again (or tried to): the first attempt had gone
       * out on a reused connection and may have been applied. */
      unsigned again = c->prereqs - 1 - c->refused;
      c->stats.resends += again;
      resent += again;
      applied_maybe = true;
    }
    if (rc == CURLE_OK) {
      curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &c->status);
      c->stats.requests++;
      return 0;
    }
    why = c->refused > 0
              ? "the reused connection died before any answer came"
          : c->curl_msg[0] != '\0' ? c->curl_msg
                                    : curl_easy_strerror(rc);
    what = classify(c, rc);
    switch (what) {
    case TIMED_OUT:
      /* Sent again only when asked to (resend_timeouts) and when that is
       * safe: the request never began (no attempt reached the
       * pre-request callback: connecting or the TLS handshake took the
       * time), or it may be repeated. */
      timed_out = true;
      if (c->prereqs > 0)
        applied_maybe = true;
      if (!c->resend_timeouts || (applied_maybe && !repeatable(c)))
        return evd__client_fail(
            c, EVD_CLIENT_ETIMEOUT, "timeout",
            "No whole answer to %s %s within %u ms (it may have been "
            "applied; %s): %s",
            evd__method_name(m), c->url.p, c->timeout_ms,
            !c->resend_timeouts
                ? "a step, commit or truncate can be sent again"
            : c->batch_steps != NULL
                ? "not sent again: a batch naming a session twice"
                : "not sent again: an evict; GET the session to see what "
                  "it holds",
            why);
      break;
    case NO_MEMORY:
      return evd__client_fail(c, EVD_CLIENT_ENOMEM, "out_of_memory",
                              "Out of memory during %s %s: %s",
                              evd__method_name(m), c->url.p, why);
    case BAD_ANSWER:
      return evd__client_fail(c, EVD_CLIENT_EPROTO, "protocol_error",
                              "%s %s: the answer is not HTTP: %s",
                              evd__method_name(m), c->url.p, why);
    case FATAL:
      return evd__client_fail(c, EVD_CLIENT_ECONNECT, "connection_failed",
                              "%s %s failed: %s", evd__method_name(m), c->url.p,
                              why);
    case ANSWER_LOST:
      applied_maybe = true;
      break;
    case NOT_DELIVERED:
      break;
    }
    if (applied_maybe && !repeatable(c))
      return evd__client_fail(
          c, EVD_CLIENT_ECONNECT, "connection_failed",
          "The connection failed after %s %s was sent (%s); it is not sent "
          "again, since it may have been applied (%s)",
          evd__method_name(m), c->url.p, why,
          c->batch_steps != NULL ? "a batch naming a session twice"
                                 : "an evict: GET the session to see what "
                                   "it holds");
    if (!failing)
      clock_gettime(CLOCK_MONOTONIC, &first_failure);
    failing = true;
    if (c->reconnect_ms == 0) {
      if (resent > 0)
        return give_up(c, timed_out, "%s %s failed, sent again too: %s",
                       evd__method_name(m), c->url.p, why);
    } else {
      long left = (long)c->reconnect_ms - ms_since(&first_failure);
      if (left <= 0)
        return give_up(c, timed_out,
                       "%s %s failed, and kept failing for %u ms "
                       "(reconnect_ms), sent %u times: %s",
                       evd__method_name(m), c->url.p, c->reconnect_ms,
                       resent + 1, why);
      sleep_ms(backoff < (unsigned long)left ? backoff : (unsigned)left);
      backoff = backoff * 2 < BACKOFF_MAX_MS ? backoff * 2 : BACKOFF_MAX_MS;
    }
    resent++;
    c->stats.resends++;
  }
}

int evd__client_end(evd_client_t *c) {
  int rc = finish(c);

  c->inflight = false;
  return rc;
}

int evd__client_send(evd_client_t *c, evd__method_t m, bool may_repeat) {
  int rc = evd__client_begin(c, m, may_repeat, false);

  return rc != 0 ? rc : evd__client_end(c);
}
