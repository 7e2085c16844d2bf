/* The HTTP/JSON API without the HTTP: one function takes a method, a path
 * and a body and produces a status and a JSON body. The transport (http.c)
 * and the fuzz harness both drive it; it owns the session table. */
#ifndef EVICTD_API_H
#define EVICTD_API_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "session.h"

/* Everything a flag or environment variable can set (see main.c). */
typedef struct evd_config_s {
  const char *listen;     /* host:port, [v6]:port or unix:/path */
  uint32_t budget;        /* default budget of new sessions */
  uint32_t sinks;         /* default sinks of new sessions */
  uint32_t max_budget;    /* largest budget a session may ask for */
  uint32_t lookahead;     /* default lookahead of new sessions */
  uint32_t max_lookahead; /* largest lookahead a session may ask for */
  uint32_t page_size;     /* default page size of new sessions (0: off) */
  uint32_t max_sessions;  /* live sessions at most */
  uint32_t max_positions; /* positions per step request (or batch item) */
  uint32_t max_batch;     /* items per batch request */
  uint32_t max_depth;     /* JSON nesting depth of a request body */
  size_t max_body;        /* request body bytes */
  uint32_t idle_ttl;      /* seconds before an unused session is reaped */
  const char *state_dir;  /* persistence: journal and snapshot, or NULL */
  int fsync;              /* evd_fsync_t */
  size_t compact_after;   /* journal bytes that trigger a snapshot */
  size_t replay_pool;     /* bytes of replay records kept on the heap */
  uint32_t max_conns;     /* concurrent connections */
  uint32_t conn_timeout;  /* seconds a connection gets per request */
  uint32_t journal_wait;  /* seconds an answer waits for its journal record
                             while the journal is failing, then 503 */
  const char *token;      /* bearer token required, or NULL */
  const char *tls_cert;   /* --tls-cert: the file, or NULL */
  const char *tls_key;    /* --tls-key: the file, or NULL */
  char *tls_cert_pem;     /* their contents (read at start-up) */
  char *tls_key_pem;
  int autocreate;         /* step creates unknown sessions */
  int log_level;          /* EVD_LOG_* */
} evd_config_t;

/* Fills in the documented defaults. */
void evd_config_defaults(evd_config_t *c);

enum {
  EVD_M_GET = 1,
  EVD_M_HEAD = 2,
  EVD_M_PUT = 4,
  EVD_M_POST = 8,
  EVD_M_DELETE = 16,
  EVD_M_OTHER = 32
};

/* The EVD_M_* bit of an HTTP method name (EVD_M_OTHER when unknown). */
int evd_method_parse(const char *method);

/* The routes, for metrics and logs. */
typedef enum evd_route_e {
  EVD_R_NONE,      /* no route matched */
  EVD_R_HEALTHZ,
  EVD_R_METRICS,
  EVD_R_BATCH,     /* POST /step */
  EVD_R_SESSION,   /* /session/{id} */
  EVD_R_STEP,      /* /session/{id}/step */
  EVD_R_EVICT,     /* /session/{id}/evict */
  EVD_R_COMMIT,    /* /session/{id}/commit */
  EVD_R_TRUNCATE,  /* /session/{id}/truncate */
  EVD_R_FORK,      /* /session/{id}/fork */
  EVD_R_ADOPT,     /* /session/{id}/adopt */
  EVD_R_COUNT
} evd_route_t;

/* A request, borrowed for the duration of evd_api_handle. */
typedef struct evd_request_s {
  int method;           /* EVD_M_* */
  const char *path;     /* not percent-decoded; no query string */
  size_t path_len;
  const char *body;     /* may be NULL when body_len is 0 */
  size_t body_len;
  const char *authorization; /* the Authorization header, or NULL */
} evd_request_t;

/* What to answer besides the body. */
typedef struct evd_reply_s {
  int status;
  evd_route_t route;
  const char *allow;    /* value of an Allow header (static), or NULL */
  const char *content_type; /* static; NULL means application/json */
  const char *www_authenticate; /* static challenge with a 401, or NULL */
  uint64_t wait_lsn; /* with --fsync always: answer once this is durable */
} evd_reply_t;

typedef struct evd_api_s evd_api_t;

/* Makes the API state with an empty session table. The config is copied.
 * Returns 0, or EVD_ENOMEM. */
int evd_api_new(evd_api_t **out, const evd_config_t *cfg);

/* Frees the API state and all sessions. NULL is accepted. */
void evd_api_free(evd_api_t *api);

/* Handles one request: resets `out` and writes the response body into it,
 * fills *reply. Never fails: every problem becomes an error response. A
 * request answered with an error changes nothing. */
void evd_api_handle(evd_api_t *api, const evd_request_t *req, evd_buf_t *out,
                    evd_reply_t *reply);

/* Tells the API the loop's clock (milliseconds, monotonic). */
void evd_api_set_clock(evd_api_t *api, uint64_t now_ms);

/* Marks every session used now (after loading saved state, whose sessions
 * start their idle time afresh). */
void evd_api_touch_all(evd_api_t *api);

/* Removes the sessions idle for longer than the configured TTL, oldest
 * first, and returns how many; the cost is proportional to that number. */
uint32_t evd_api_reap(evd_api_t *api);

/* The session table, for statistics and tests. */
evd_table_t *evd_api_table(evd_api_t *api);

struct evd_journal_s;
struct evd_op_s;

/* Journals every state change from now on (NULL: none). Borrowed. */
void evd_api_set_journal(evd_api_t *api, struct evd_journal_s *j);

/* Applies one op read back from the journal, exactly as the request that
 * wrote it did. Returns 0, or EVD_ECORRUPT when the op cannot apply to the
 * current state (the journal does not belong to it), or EVD_ENOMEM. Fits
 * evd_apply_fn with the api as context. */
int evd_api_apply(void *api, const struct evd_op_s *op);

/* The counters behind GET /metrics, which the transport updates too. */
struct evd_metrics_s *evd_api_metrics(evd_api_t *api);

#endif
