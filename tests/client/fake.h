/* Stand-ins for the C client's tests, where the real daemon cannot be made
 * to misbehave on cue: a fake daemon on loopback that answers each request
 * as a script says (canned answers, a connection closed after the request
 * was read, half an answer, no answer), and a relay on a unix socket in
 * front of the real daemon that can lose one answer. Each runs in a thread
 * of the test process. */
#ifndef EVICTD_TESTS_CLIENT_FAKE_H
#define EVICTD_TESTS_CLIENT_FAKE_H

#include <stddef.h>

typedef enum {
  FK_ANSWER,     /* answer `status` with `body`, keep the connection */
  FK_CLOSE,      /* read the whole request, then close without a byte */
  FK_PARTIAL,    /* the head and half the body, then close */
  FK_SILENT      /* read the request and never answer */
} fk_action_t;

typedef struct {
  fk_action_t action;
  int status;
  const char *body;
} fk_rule_t;

typedef struct fake_s fake_t;

/* Starts a fake daemon on 127.0.0.1 (an ephemeral port). Request k (over
 * all connections, from 0) is treated as rules[k]; requests past the last
 * rule as the last one. The rules are borrowed until fake_stop. NULL when
 * it cannot listen. */
fake_t *fake_start(const fk_rule_t *rules, size_t n);

/* "http://127.0.0.1:PORT". */
const char *fake_url(const fake_t *f);

/* Requests read so far whose request line contains `needle` (NULL: all). */
int fake_requests(fake_t *f, const char *needle);

/* The body of request k (from 0), NUL-terminated, owned by the fake until
 * fake_stop; NULL when there is no request k. */
const char *fake_body(fake_t *f, int k);

/* Connections accepted so far. */
int fake_connections(fake_t *f);

/* Stops the thread and frees everything. */
void fake_stop(fake_t *f);

typedef struct relay_s relay_t;

/* Listens on unix socket `path` and forwards each connection to the unix
 * socket `daemon_path`. NULL on failure. */
relay_t *relay_start(const char *path, const char *daemon_path);

/* The next answer that comes from the daemon is kept, not forwarded: the
 * relay calls lost(arg) (while the client still waits), then closes the
 * client's connection, so the client sees its connection die after the
 * daemon applied the request. */
void relay_lose_next(relay_t *r, void (*lost)(void *arg), void *arg);

/* The next answer that comes from the daemon is kept, not forwarded, and
 * the client's connection stays open and silent until the client closes
 * it: the client times out after the daemon applied the request. */
void relay_hold_next(relay_t *r);

/* The body of the answer the relay lost (NUL-terminated), or NULL. */
const char *relay_lost_body(relay_t *r);

void relay_stop(relay_t *r);

#endif
