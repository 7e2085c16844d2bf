/* evictd's C client: what an inference engine links to ask the daemon which
 * KV-cache positions to evict. One evd_client_t is one keep-alive connection
 * to one daemon (http://, https:// or unix:), used by one thread at a time.
 * Answers live in memory the client owns, valid until the next call on the
 * same client, so an engine that follows them within its iteration copies
 * and frees nothing.
 *
 * Link with `pkg-config --cflags --libs evictd-client`.
 *
 * ABI: the structs below grow as the contract does (evd_answer_t gained
 * pages_transient, evd_client_opts_t resend_timeouts, evd_step_t the
 * expect_newest precondition). Callers allocate them and the library reads
 * or fills them, arrays included, so a program built against an older
 * copy of this header must be rebuilt, not just relinked, whenever a
 * struct grew. The library has not been released: the soname stays
 * libevictd-client.so.0 and EVD_CLIENT_VERSION 0.1.0 until it is. */
#ifndef EVICTD_CLIENT_H
#define EVICTD_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EVD_CLIENT_VERSION "0.1.0"

/* Return codes: 0 or one of these. */
enum {
  EVD_CLIENT_OK = 0,
  EVD_CLIENT_EAPI = -1,      /* the daemon answered with an error (4xx/5xx):
                                evd_client_error() has its code and status */
  EVD_CLIENT_ECONNECT = -2,  /* no connection, or it died and the request
                                could not be resent (or resending gave up) */
  EVD_CLIENT_ETIMEOUT = -3,  /* no whole answer within the timeout; the
                                request may have been applied (resend it:
                                a step, commit or truncate is replayed;
                                or let opts.resend_timeouts do it) */
  EVD_CLIENT_EPROTO = -4,    /* an answer that is not the contract's:
                                not its JSON or shape, or breaking what
                                it promises (lists in order, one slot
                                per position stepped, ...) */
  EVD_CLIENT_EINVAL = -5,    /* a bad argument, refused before sending */
  EVD_CLIENT_ENOMEM = -6     /* the client could not allocate */
};

/* A static name for an EVD_CLIENT_* code (never NULL). */
const char *evd_client_strerror(int rc);

/* The options of evd_client_new. Zero-initialise, then set what you need;
 * every zero means the default given. */
typedef struct evd_client_opts_s {
  const char *url;            /* "http://host:port[/prefix]", "https://...",
                                 "host:port" or "unix:/path"; NULL or "":
                                 $EVICTD_URL, else http://127.0.0.1:8090.
                                 Session ids go into paths percent-escaped
                                 where they are not ids' bytes, so the
                                 daemon answers invalid_session_id */
  unsigned timeout_ms;        /* one attempt of a request, answer
                                 included: 10000 */
  unsigned connect_timeout_ms; /* opening a connection: timeout_ms */
  unsigned reconnect_ms;      /* how long a request whose connection failed
                                 (refused, reset, answer lost) keeps being
                                 resent, with backoff, while a daemon
                                 restarts: 0 = resend once at most */
  const char *token;          /* bearer token, or NULL */
  const char *token_file;     /* a file whose first line is the token, read
                                 by evd_client_new (when token is NULL) */
  const char *cafile;         /* https: the CA (or self-signed certificate)
                                 of the daemon; NULL: the system's store */
  bool insecure;              /* https: do not verify the certificate */
  bool resend_timeouts;       /* a request with no whole answer within
                                 timeout_ms is sent again, like one whose
                                 connection failed, when it may be repeated
                                 (a step, commit or truncate, which the
                                 daemon answers from its replay record; a
                                 batch naming no session twice; create,
                                 get, delete, fork), on a new connection,
                                 with the same backoff, within the same
                                 reconnect_ms. An evict is never sent
                                 again. false: EVD_CLIENT_ETIMEOUT at once */
} evd_client_opts_t;

typedef struct evd_client_s evd_client_t;

/* Creates a client; it connects lazily, on the first request. Returns 0
 * and sets *out, or EVD_CLIENT_EINVAL (a URL it cannot use, an unreadable
 * token_file) or EVD_CLIENT_ENOMEM, with a sentence in errbuf (errlen
 * bytes, NUL-terminated; errbuf may be NULL). The caller frees the client
 * with evd_client_free. opts may be NULL (all defaults); its strings are
 * copied. */
int evd_client_new(evd_client_t **out, const evd_client_opts_t *opts,
                   char *errbuf, size_t errlen);

/* Closes the connection and frees the client and every answer it holds.
 * NULL is fine. */
void evd_client_free(evd_client_t *c);

/* What went wrong in the last call that did not return 0. Owned by the
 * client; it stays until another call fails. For EVD_CLIENT_EAPI, `code`
 * is the contract's error code ("stale_position", "unknown_session",
 * "diverged", ...) and `status` the HTTP status ("diverged", 409: the
 * daemon's newest, in `newest`, is not the change's expect_newest); for
 * the others `code` names the kind
 * ("connection_failed", "timeout", "protocol_error", "invalid_argument",
 * "out_of_memory") and status is the HTTP status if one came, else 0 (an
 * EVD_CLIENT_EPROTO answer that is not the contract's JSON, such as the
 * HTML page libmicrohttpd answers a 10 KB request line with, keeps its
 * status). The message says what and, for EVD_CLIENT_EPROTO, where. */
typedef struct evd_client_err_s {
  int rc;              /* EVD_CLIENT_E* */
  int status;          /* HTTP status, or 0 */
  const char *code;    /* never NULL */
  const char *message; /* a sentence for people, never NULL */
  int64_t newest;      /* stale_position and diverged: the session's
                          newest in the daemon; else -1 */
} evd_client_err_t;

const evd_client_err_t *evd_client_error(const evd_client_t *c);

/* A list of positions, slots or pages, oldest / first first. v is NULL
 * when n is 0. */
typedef struct evd_list_s {
  const uint32_t *v;
  size_t n;
} evd_list_t;

/* A session's configuration for create, and for a step that may create its
 * session. A field < 0 is left out of the request: the daemon's default
 * (--budget, --sinks, --lookahead, --page-size). EVD_SESSION_CFG_DEFAULT
 * initialises all four that way. */
typedef struct evd_session_cfg_s {
  int64_t budget;
  int64_t sinks;
  int64_t lookahead;
  int64_t page_size;
} evd_session_cfg_t;

#define EVD_SESSION_CFG_DEFAULT {-1, -1, -1, -1}

/* GET /session/{id} and the answers of create and fork. */
typedef struct evd_view_s {
  const char *id;
  uint32_t budget, sinks, lookahead, page_size;
  uint32_t size;       /* positions held */
  uint32_t newest;     /* the newest position held or truncated to */
  evd_list_t kept;     /* positions held, ascending */
  evd_list_t slots;    /* slot of each kept position */
  evd_list_t tentative; /* pending drafts, ascending */
  evd_list_t pages;    /* with page_size > 0: pages holding a position */
  bool created;        /* create/fork: 201 (true) or an identical one
                          existed, 200 (false; also when the request was
                          sent again and its first attempt created it) */
} evd_view_t;

/* The answer of step, commit, truncate and evict: the lists an answer does
 * not carry are empty (so are the pages lists of a daemon older than a
 * field: it sends none).
 *
 * Pages (page_size > 0; page = position / page_size), ascending, the three
 * lists disjoint: an engine with a block per page allocates pages_new and
 * pages_transient before the request's pass and frees pages_freed and
 * pages_transient after it. pages_transient are pages that held positions
 * only within the request, neither before nor after it: a step of more
 * positions than the budget writes pages it also evicts (budget 3, page
 * size 2, positions 1..7 stepped on a new session: pages_new [2,3],
 * pages_transient [0,1]). Evict answers carry none. */
typedef struct evd_answer_s {
  evd_list_t victims;     /* evicted, oldest first (step, commit, evict) */
  evd_list_t slots;       /* step: the ring slot of each stepped position */
  evd_list_t dropped;     /* commit, or a step with commit: drafts dropped */
  evd_list_t removed;     /* truncate: positions removed */
  evd_list_t pages_new;   /* page_size > 0: pages that became used */
  evd_list_t pages_freed; /* page_size > 0: pages left holding nothing */
  evd_list_t pages_transient; /* page_size > 0: pages held only during the
                                 request (written, then emptied by it) */
  uint32_t size;          /* positions held afterwards */
  uint32_t newest;        /* step, commit, truncate: the newest afterwards */
  bool replayed;          /* this is the answer of an earlier, identical
                             request (a resend), nothing was changed now */
} evd_answer_t;

/* One step: POST /session/{id}/step, or one item of a batch. */
typedef struct evd_step_s {
  const char *session;        /* 1..128 of A-Z a-z 0-9 . _ ~ - */
  const uint32_t *positions;  /* strictly increasing, above the newest */
  size_t n_positions;         /* 0 only with has_commit (a commit alone) */
  bool tentative;             /* drafts: appended, nothing evicted */
  bool has_commit;            /* commit the pending drafts up to `commit`
                                 (dropping the others) before stepping */
  uint32_t commit;
  const evd_session_cfg_t *create; /* sent when not NULL: the session's
                                      configuration if this step creates it
                                      (a different existing one: 409) */
  bool has_expect;            /* send expect_newest: the precondition */
  uint32_t expect_newest;     /* what the engine believes the session's
                                 newest position is before this step: when
                                 the daemon's differs it changes nothing
                                 and answers 409 "diverged" with its newest
                                 (evd_client_error, or the batch item's
                                 error); a session it does not hold is 404
                                 unknown_session unless this is 0 (then it
                                 may be created as without it). A resent
                                 step is replayed whatever this says. */
} evd_step_t;

/* Every call below returns 0 or an EVD_CLIENT_* code (see
 * evd_client_error()). Answers written to *out (out may be NULL) point
 * into the client's memory, valid until its next call: copy what you keep,
 * free nothing. That memory only grows, so a client in steady state
 * allocates nothing of its own (libcurl still does, per request).
 *
 * Resending mirrors the Python client. A request whose connection fails
 * before the whole answer arrives is sent again on a new connection: once
 * (reconnect_ms 0), or with a backoff of 10 ms doubling to 500 ms for up
 * to opts.reconnect_ms after the first failure, which carries an engine
 * across a daemon restarted with --state-dir. A request that never went
 * out whole (no connection, refused, TLS handshake failed) may always be
 * sent again. One that went out and lost its answer may have been
 * applied: a step, commit or truncate identical to the session's last one
 * is answered by the daemon with the first answer and `replayed` set, so
 * a resend never applies a change twice; create, get, delete and fork are
 * idempotent (a resent create or fork may say created = false, a resent
 * delete unknown_session: use missing_ok). Never sent again: an evict
 * once it may have been delivered (a second evict would evict nothing and
 * the victims would be lost: read the session with evd_client_get), a
 * batch naming a session twice (only a session's last step is replayed),
 * and, unless opts.resend_timeouts is set, a request that timed out
 * (EVD_CLIENT_ETIMEOUT). With resend_timeouts a timeout is one more kind
 * of failure under the same rules and the same clock: the request is sent
 * again when it may be repeated (a step, commit or truncate comes back
 * with `replayed` if its first attempt had been applied) until
 * reconnect_ms after the first failure has passed (so a call returns
 * within about reconnect_ms + timeout_ms), once when reconnect_ms is 0;
 * the call then fails with the last attempt's error (EVD_CLIENT_ETIMEOUT
 * or _ECONNECT). An evict that timed out is never sent again. libcurl's
 * own resend of a request on a reused keep-alive connection that died is
 * held to the same rules (deploy/clients/c/transport.c). TLS verification
 * failures are not retried. */

/* GET /healthz: 0 when the daemon answers 200. */
int evd_client_health(evd_client_t *c);

/* PUT /session/{id}: creates (cfg NULL: all defaults). out may be NULL. */
int evd_client_create(evd_client_t *c, const char *session,
                      const evd_session_cfg_t *cfg, evd_view_t *out);

/* POST /session/{id}/step. */
int evd_client_step(evd_client_t *c, const evd_step_t *step,
                    evd_answer_t *out);

/* POST /session/{id}/commit {"newest":newest}. */
int evd_client_commit(evd_client_t *c, const char *session, uint32_t newest,
                      evd_answer_t *out);

/* POST /session/{id}/truncate {"from":from}. */
int evd_client_truncate(evd_client_t *c, const char *session, uint32_t from,
                        evd_answer_t *out);

/* POST /session/{id}/fork {"into":into}: the child's view. */
int evd_client_fork(evd_client_t *c, const char *session, const char *into,
                    evd_view_t *out);

/* POST /session/{id}/evict, down to budget (< 0: the session's own). */
int evd_client_evict(evd_client_t *c, const char *session, int64_t budget,
                     evd_answer_t *out);

/* The same four with the precondition expect_newest: what the engine
 * believes the session's newest position is before the change (for a
 * fork, the parent's), 0..4294967295, or EVD_NO_EXPECT (not sent: the
 * calls above). When the daemon's newest differs, nothing changes and the
 * call returns EVD_CLIENT_EAPI with code "diverged", status 409 and the
 * daemon's newest in evd_client_error()->newest; when the session is not
 * held and expect_newest > 0, "unknown_session" (404), never a fresh
 * session. A resent commit or truncate is answered from the replay record
 * whatever it expects. Re-homing a session after either answer: see
 * evd_client_adopt. */
#define EVD_NO_EXPECT (-1)
int evd_client_commit_if(evd_client_t *c, const char *session,
                         uint32_t newest, int64_t expect_newest,
                         evd_answer_t *out);
int evd_client_truncate_if(evd_client_t *c, const char *session,
                           uint32_t from, int64_t expect_newest,
                           evd_answer_t *out);
int evd_client_fork_if(evd_client_t *c, const char *session,
                       const char *into, int64_t expect_newest,
                       evd_view_t *out);
int evd_client_evict_if(evd_client_t *c, const char *session, int64_t budget,
                        int64_t expect_newest, evd_answer_t *out);

/* The state a session is adopted in: what the engine's cache holds. */
typedef struct evd_adopt_s {
  const evd_session_cfg_t *cfg; /* NULL: the daemon's defaults, as create */
  const uint32_t *kept;   /* the positions held, strictly ascending, at
                             least one; no drafts (commit or drop them) */
  size_t n_kept;
  uint32_t newest;        /* the newest position (>= the last kept: more
                             after a truncate) */
  const uint32_t *slots;  /* NULL: the canonical layout (where stepping one
                             position at a time puts them); else n_kept
                             slots, a layout the ring can be in */
  const uint32_t *pages;  /* NULL: not sent; else n_pages pages, which must
                             be the pages of kept (paged sessions) */
  size_t n_pages;
  bool replace;           /* replace a session in another state (after
                             "diverged"); false: that is 409
                             session_exists */
} evd_adopt_t;

/* POST /session/{id}/adopt: creates the session in the given state and
 * answers its view (created: 201; false when the session already was in
 * exactly this state, a resent adopt, or was replaced). A state the policy
 * cannot be in is EVD_CLIENT_EAPI "invalid_state" (400) whose message
 * names the rule broken; nothing is created. Sent again like create (it is
 * idempotent).
 *
 * Re-homing: a session's window lives in one daemon, its cache in the
 * engine. When a change comes back "unknown_session" (the daemon lost the
 * session: restarted without state, or the pool changed size and routes it
 * elsewhere), adopt the state the engine holds, then send the change
 * again; when it comes back "diverged" (the daemon holds an older or other
 * window), adopt with replace = true, then send it again. With
 * expect_newest on every change, no change is ever answered from a window
 * the engine does not hold. The pool routes adopt as it routes the session
 * (evd_client_pool_adopt). */
int evd_client_adopt(evd_client_t *c, const char *session,
                     const evd_adopt_t *state, evd_view_t *out);

/* GET /session/{id}. */
int evd_client_get(evd_client_t *c, const char *session, evd_view_t *out);

/* DELETE /session/{id}. With missing_ok an unknown session is 0 too. */
int evd_client_delete(evd_client_t *c, const char *session, bool missing_ok);

/* One item's outcome in a batch. */
typedef struct evd_batch_result_s {
  int rc;             /* 0, or EVD_CLIENT_EAPI for this item alone */
  evd_answer_t answer; /* when rc is 0 (all empty otherwise) */
  evd_client_err_t error; /* when rc is EVD_CLIENT_EAPI: the item's code,
                             message, status and newest (strings in the
                             client's memory); code "" when rc is 0 */
} evd_batch_result_t;

/* POST /step: n steps in one request, one decode iteration of n sequences.
 * out[i] gets item i's outcome. Returns 0 when the daemon answered the
 * batch (items may still have failed: see out[i].rc), else the error of
 * the whole request. A batch naming a session twice is never resent (only
 * a session's last step is replayed). */
int evd_client_batch(evd_client_t *c, const evd_step_t *steps, size_t n,
                     evd_batch_result_t *out);

/* evd_client_batch in two halves, so that the daemon works on the next
 * iteration's batch while the engine decodes this one: send writes the
 * request (on the client's keep-alive connection, opening one if needed)
 * and returns as soon as it is written whole, without waiting for the
 * answer; recv waits for the answer and reads it into out (n results, as
 * evd_client_batch does). Between the two the caller does its own work;
 * the answer waits in the socket.
 *
 * Everything else is evd_client_batch's: the same request, the same
 * answers (out[i] as from evd_client_batch, valid until the client's next
 * call), and the same resending, done by recv: a request whose connection
 * failed, before or after send returned, is sent again by recv under the
 * rules above (a batch naming no session twice is replayed), timeouts too
 * with opts.resend_timeouts. timeout_ms counts from send: the caller's
 * work between the two counts, so keep it well below timeout_ms.
 *
 * send returns 0 once the request is on its way, or EVD_CLIENT_EINVAL
 * (a bad step, or a batch already in flight) or _ENOMEM, with nothing in
 * flight; failures of the request itself come from recv, which returns
 * what evd_client_batch would. steps (and the strings they point to) are
 * borrowed until recv returns. While a batch is in flight the client
 * refuses every other call with EVD_CLIENT_EINVAL (it touches nothing of
 * the request); recv without a send is EVD_CLIENT_EINVAL. Freeing the
 * client with a batch in flight abandons it (the daemon may have applied
 * it). */
int evd_client_batch_send(evd_client_t *c, const evd_step_t *steps,
                          size_t n);
int evd_client_batch_recv(evd_client_t *c, evd_batch_result_t *out);

/* Counters, for logs and tests. */
typedef struct evd_client_stats_s {
  uint64_t requests;       /* requests answered (any HTTP status) */
  uint64_t connections;    /* connections opened (libcurl's included) */
  uint64_t resends;        /* requests sent again after a failure, by the
                              client or by libcurl on a reused connection */
  uint64_t replayed;       /* answers (batch items counted one by one)
                              that came back with replayed */
} evd_client_stats_t;

void evd_client_stats(const evd_client_t *c, evd_client_stats_t *out);

/* A pool of daemons routed as nginx's `hash $evictd_session consistent`
 * (deploy/nginx-shard.conf) routes them: nginx's ring (160 points per
 * instance from the crc32 of its upstream name "host:port"), keyed by the
 * session id up to its first '~'. A batch is split per instance and the
 * parts are sent at once: the caller sends one, a long-lived worker thread
 * per instance each other one, one client per instance.
 * No failover: an instance that fails fails its own items only. Like a
 * client, a pool is used by one thread at a time. */
typedef struct evd_client_pool_s evd_client_pool_t;

/* n instance URLs, in the order of nginx's upstream block; names[i] is
 * instance i's name there ("10.0.0.11:8090"), or names NULL: each URL's
 * host:port as written. opts (may be NULL) applies to every client; its
 * url is ignored. Returns 0 and *out, or EVD_CLIENT_EINVAL / _ENOMEM with
 * a sentence in errbuf. Free with evd_client_pool_free. */
int evd_client_pool_new(evd_client_pool_t **out, const char *const *urls,
                        const char *const *names, size_t n,
                        const evd_client_opts_t *opts, char *errbuf,
                        size_t errlen);
void evd_client_pool_free(evd_client_pool_t *p);

/* The index of the instance nginx sends session to, or -1 when it cannot
 * be routed (an empty key: an id starting with '~', which nginx sends
 * round-robin). */
int evd_client_pool_instance(const evd_client_pool_t *p, const char *session);

/* Instance i's client (for single-session calls) and ring name. */
evd_client_t *evd_client_pool_client(evd_client_pool_t *p, size_t i);
const char *evd_client_pool_name(const evd_client_pool_t *p, size_t i);

/* One iteration: evd_client_batch's items split per instance, all parts
 * in flight at once; out[i] is item i's outcome, in request order. An
 * instance whose part failed as a whole gives each of its items that
 * error's rc, code and status, with a message naming the instance; an
 * unroutable item gets EVD_CLIENT_EINVAL, code "unroutable_session".
 * Answers live in the instances' clients and the pool, valid until the
 * pool's next batch. Returns 0, or EVD_CLIENT_ENOMEM / _EINVAL for the
 * call as a whole (out then untouched). */
int evd_client_pool_batch(evd_client_pool_t *p, const evd_step_t *steps,
                          size_t n, evd_batch_result_t *out);

/* evd_client_adopt on the instance the session is routed to. The view
 * lives in that instance's client (until its next call). An unroutable
 * session is EVD_CLIENT_EINVAL with nothing sent (the error is in no
 * client: it is returned only). */
int evd_client_pool_adopt(evd_client_pool_t *p, const char *session,
                          const evd_adopt_t *state, evd_view_t *out);

#ifdef __cplusplus
}
#endif

#endif
