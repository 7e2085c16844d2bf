/* What the C client's files share: the client itself, its grow-only
 * buffers, and each file's entry points, from the bottom up: base.c
 * (buffers, errors, names), body.c (request bodies and URLs), transport.c
 * (sending); client.c (the operations) uses them and the answer reader
 * (reader.h). Not installed: include/evictd/client.h is the whole public
 * interface. */
#ifndef EVICTD_CLIENT_INT_H
#define EVICTD_CLIENT_INT_H

#include "evictd/client.h"
#include "reader.h"

#include <curl/curl.h>

/* A grow-only byte buffer: cleared per request, freed with the client. */
typedef struct {
  char *p;
  size_t len, cap;
} evd__cbuf_t;

/* What a request is, for the transport: its method and whether it may be
 * sent again after its answer was lost (the daemon replays steps, commits
 * and truncates; PUT, GET, DELETE and fork are idempotent; evict is not). */
typedef enum { EVD__GET, EVD__POST, EVD__PUT, EVD__DELETE } evd__method_t;

struct evd_client_s {
  CURL *curl;
  CURLM *multi;               /* drives curl; its cache holds the connection */
  struct curl_slist *headers; /* Content-Type, Accept, Expect:, token */
  char *base;                 /* "http://host:port/prefix", unix: localhost */
  size_t base_len;
  char *unix_path, *cafile;
  unsigned timeout_ms, connect_timeout_ms, reconnect_ms;
  bool insecure, resend_timeouts;

  evd__cbuf_t url, body, ans; /* this request's URL, body and answer */
  evd__method_t method;       /* what the easy handle is set up for */
  evd__arena_t arena;         /* the answer's lists and strings */

  /* The request in flight (see transport.c). */
  bool may_repeat;   /* a lost answer may be asked for again */
  const evd_step_t *batch_steps; /* a batch in flight: may_repeat is */
  size_t batch_n;                /* decided only if a connection fails */
  bool batch_checked;
  unsigned prereqs;  /* attempts libcurl began inside one perform */
  unsigned refused;  /* of those, resends on_attempt did not let out */
  bool write_failed; /* the answer did not fit in memory */
  long status;       /* the HTTP status of the answer */
  bool attempt_on;   /* curl is in the multi: an attempt is under way */
  CURLcode start_rc; /* how beginning the current attempt went */
  bool inflight;     /* a request begun and not yet ended */
  bool batch_sent;   /* ... and it is evd_client_batch_send's */

  evd_client_err_t err; /* the last failure; strings in the arrays below */
  char err_code[48];
  char err_msg[1024];
  char curl_msg[CURL_ERROR_SIZE];
  evd_client_stats_t stats;
};

/* ---- base.c: buffers, errors, names ------------------------------------ */

/* "GET", "POST", ... */
const char *evd__method_name(evd__method_t m);

/* Makes room for `extra` more bytes: 0, or -1 when memory ran out. */
int evd__cbuf_reserve(evd__cbuf_t *b, size_t extra);

/* Records a failure of the client's own (not an answer's): rc, code and a
 * formatted sentence; returns rc. */
int evd__client_fail(evd_client_t *c, int rc, const char *code,
                     const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* EVD_CLIENT_EINVAL with the sentence `what`, EVD_CLIENT_ENOMEM. */
int evd__einval(evd_client_t *c, const char *what);
int evd__enomem(evd_client_t *c);

/* ---- body.c: requests --------------------------------------------------- */

/* Each writes c->url or c->body for one request (c->body emptied first,
 * but by evd__put_step, which appends) and returns 0, or EVD_CLIENT_EINVAL
 * / _ENOMEM with c->err set. */
int evd__put_url(evd_client_t *c, const char *path, const char *session,
                 const char *suffix);
int evd__session_url(evd_client_t *c, const char *session,
                     const char *suffix);
int evd__check_step(evd_client_t *c, const evd_step_t *s);
int evd__put_step(evd_client_t *c, const evd_step_t *s, bool item);
int evd__put_batch(evd_client_t *c, const evd_step_t *steps, size_t n);
int evd__put_create(evd_client_t *c, const evd_session_cfg_t *cfg);
/* expect: the precondition expect_newest, or EVD_NO_EXPECT (not sent);
 * anything else outside 0..4294967295 is EVD_CLIENT_EINVAL. */
int evd__put_fork(evd_client_t *c, const char *into, int64_t expect);
/* The body {"key":v}, or {} when v < 0, with expect_newest. */
int evd__put_int_body(evd_client_t *c, const char *key, int64_t v,
                      int64_t expect);
int evd__put_adopt(evd_client_t *c, const evd_adopt_t *state);

/* ---- transport.c: sending ----------------------------------------------- */

/* Sends the request in c->url / c->body with `method` and waits for the
 * whole answer (c->ans, c->status), opening connections and sending again
 * as the header describes. Returns 0 when an answer of any status arrived,
 * else EVD_CLIENT_ECONNECT, _ETIMEOUT, _ENOMEM or _EPROTO with c->err
 * set. It is evd__client_begin and evd__client_end. */
int evd__client_send(evd_client_t *c, evd__method_t method, bool may_repeat);

/* The two halves: begin starts the first attempt (with `push`, it returns
 * once the request is written whole, or the attempt is over) and returns
 * 0, or EVD_CLIENT_EINVAL while another request is in flight, or
 * EVD_CLIENT_ENOMEM; a failure of the attempt itself is end's to report.
 * end waits for the answer and sends again as evd__client_send does.
 * c->url and c->body stay the request's until end returns. */
int evd__client_begin(evd_client_t *c, evd__method_t method, bool may_repeat,
                      bool push);
int evd__client_end(evd_client_t *c);

/* The transport's share of evd_client_new and evd_client_free: the easy
 * handle with every option that does not change per request. */
int evd__client_transport_init(evd_client_t *c, char *errbuf, size_t errlen);
void evd__client_transport_close(evd_client_t *c);

#endif
