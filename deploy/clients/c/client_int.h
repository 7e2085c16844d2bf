/* What the C client's files share: the client itself, its grow-only
 * buffers and pools, and the answer parser's entry points. Not installed:
 * include/evictd/client.h is the whole public interface. */
#ifndef EVICTD_CLIENT_INT_H
#define EVICTD_CLIENT_INT_H

#include "evictd/client.h"

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
  struct curl_slist *headers; /* Content-Type, Accept, Expect:, token */
  char *base;                 /* "http://host:port/prefix", unix: localhost */
  size_t base_len;
  char *unix_path, *cafile;
  unsigned timeout_ms, connect_timeout_ms, reconnect_ms;
  bool insecure, resend_timeouts;

  evd__cbuf_t url, body, ans; /* this request's URL, body and answer */
  evd__method_t method;       /* what the easy handle is set up for */
  /* The answer's lists and strings: sized from the answer's length before
   * it is parsed (no list can hold more than len / 2 numbers, no string
   * more than its quoted bytes), so parsing never reallocates them and the
   * pointers handed out stay put. */
  uint32_t *u32;
  size_t u32_len, u32_cap;
  char *chars;
  size_t chars_len, chars_cap;

  /* The request in flight (see transport.c). */
  bool may_repeat;   /* a lost answer may be asked for again */
  const evd_step_t *batch_steps; /* a batch in flight: may_repeat is */
  size_t batch_n;                /* decided only if a connection fails */
  bool batch_checked;
  unsigned prereqs;  /* attempts libcurl began inside one perform */
  unsigned refused;  /* of those, resends on_attempt did not let out */
  bool write_failed; /* the answer did not fit in memory */
  long status;       /* the HTTP status of the answer */

  evd_client_err_t err; /* the last failure; strings in the arrays below */
  char err_code[48];
  char err_msg[1024];
  char parse_msg[256]; /* what the parser found wrong, and where */
  char curl_msg[CURL_ERROR_SIZE];
  evd_client_stats_t stats;
};

/* "GET", "POST", ... */
const char *evd__method_name(evd__method_t m);

/* Buffers (client.c). Each returns 0 or -1 when memory ran out. */
int evd__cbuf_reserve(evd__cbuf_t *b, size_t extra);

/* Records a failure of the client's own (not an answer's): rc, code and a
 * formatted sentence; returns rc. */
int evd__client_fail(evd_client_t *c, int rc, const char *code,
                     const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Sends the request in c->url / c->body with `method` and waits for the
 * whole answer (c->ans, c->status), opening connections and sending again
 * as the header describes (transport.c). Returns 0 when an answer of any
 * status arrived, else EVD_CLIENT_ECONNECT, _ETIMEOUT, _ENOMEM or _EPROTO
 * with c->err set. */
int evd__client_send(evd_client_t *c, evd__method_t method, bool may_repeat);

/* Whether a batch may be sent again: it names no session twice. */
bool evd__batch_repeatable(const evd_step_t *steps, size_t n);

/* The transport's share of evd_client_new and evd_client_free: the easy
 * handle with every option that does not change per request. */
int evd__client_transport_init(evd_client_t *c, char *errbuf, size_t errlen);
void evd__client_transport_close(evd_client_t *c);

/* The answer parser (answer.c): each reads c->ans whole, writes lists and
 * strings into c's pools (which evd__client_pools sized first) and returns
 * 0, or -1 with a sentence in c->parse_msg saying what is not the
 * contract, and where (the caller makes that EVD_CLIENT_EPROTO). */
enum {
  EVD__F_VICTIMS = 1 << 0,
  EVD__F_SLOTS = 1 << 1,
  EVD__F_DROPPED = 1 << 2,
  EVD__F_REMOVED = 1 << 3,
  EVD__F_SIZE = 1 << 4,
  EVD__F_NEWEST = 1 << 5
};
int evd__client_pools(evd_client_t *c);
int evd__parse_answer(evd_client_t *c, unsigned required, evd_answer_t *out);
int evd__parse_view(evd_client_t *c, evd_view_t *out);
int evd__parse_batch(evd_client_t *c, evd_batch_result_t *out, size_t n);
/* An error answer {"error":{...}}: code and message into err (strings in
 * the pools), newest or -1. */
int evd__parse_error(evd_client_t *c, evd_client_err_t *err);

#endif
