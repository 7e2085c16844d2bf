/* The HTTP transport: libmicrohttpd in external-epoll mode, driven by the
 * libuv loop (loop.c), feeding requests to the API. */
#ifndef EVICTD_HTTP_H
#define EVICTD_HTTP_H

#include <stdint.h>

#include "api.h"

typedef struct evd_http_s evd_http_t;

/* Starts libmicrohttpd on the listening socket `listen_fd` (which it takes
 * over) without threads of its own. Returns 0, or EVD_EIO / EVD_ENOMEM; on
 * failure listen_fd is still the caller's to close. */
int evd_http_start(evd_http_t **out, evd_api_t *api, const evd_config_t *cfg,
                   int listen_fd);

/* The descriptor to poll for readability (libmicrohttpd's epoll fd). */
int evd_http_fd(const evd_http_t *h);

/* Processes whatever is ready: accepts, reads, answers, writes. `now_ms`
 * is the loop's monotonic clock. */
void evd_http_run(evd_http_t *h, uint64_t now_ms);

/* Cuts off connections that have not completed a request within
 * --conn-timeout of opening or of their previous response: idle ones and
 * ones that trickle a request in byte by byte alike. Cost proportional to
 * the connections cut. Returns how many. */
unsigned evd_http_sweep(evd_http_t *h, uint64_t now_ms);

/* When libmicrohttpd must run again even without socket activity: returns
 * 1 and the delay in *ms, or 0 when only activity matters. Must be asked
 * after every evd_http_run, because sockets are watched edge-triggered. */
int evd_http_timeout(evd_http_t *h, uint64_t *ms);

struct evd_journal_s;

/* With --fsync always, answers to changes wait for the journal: tell the
 * transport which journal (borrowed). */
void evd_http_set_journal(evd_http_t *h, struct evd_journal_s *j);

/* The journal made everything up to `lsn` durable (or failed): answers
 * waiting for it go out. */
void evd_http_durable(evd_http_t *h, uint64_t lsn);

/* Stops accepting connections and closes the listening socket; requests
 * already received are still answered. */
void evd_http_quiesce(evd_http_t *h);

/* Requests received and not yet completely answered. */
unsigned evd_http_busy(const evd_http_t *h);

/* While the journal is failing, answers 503 journal_failed to the requests
 * whose answer has waited for its record longer than --journal-wait (all
 * of them when `all`): their change is applied in memory, and a resend
 * after recovery gets the original answer. The loop calls it with each
 * sweep, and with `all` when stopping; libmicrohttpd must then be run
 * (resuming does not wake it). Returns how many. */
unsigned evd_http_expire_waits(evd_http_t *h, uint64_t now_ms, int all);

/* Closes every connection and frees the transport. NULL is accepted. */
void evd_http_stop(evd_http_t *h);

#endif
