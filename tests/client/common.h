/* Shared by the C client's test files: the real daemon of a test (started
 * through tests/http/daemon.c), clients with the tests' options, and
 * assertions about errors and lists. */
#ifndef EVICTD_TESTS_CLIENT_COMMON_H
#define EVICTD_TESTS_CLIENT_COMMON_H

#include <check.h>

#include "../http/daemon.h"
#include "evictd/client.h"

/* The test's daemon and the URL the client uses for it ("http://ADDR", or
 * the "unix:/path" address as the daemon printed it). */
extern ht_daemon_t tc_daemon;
extern char tc_url[512];

/* Starts the daemon with args (NULL-terminated, may be NULL) and fills
 * tc_url; fails the test if it does not start. */
void tc_start(const char *const *args);

/* SIGTERM, reap, close the log. */
void tc_stop(void);

/* A client for url (NULL: tc_url) with a 10 s timeout (times
 * $EVICTD_TEST_SLOW) and the given reconnect_ms; fails the test if
 * evd_client_new does. */
evd_client_t *tc_client(const char *url, unsigned reconnect_ms);

/* A client for url with exactly these options (no $EVICTD_TEST_SLOW:
 * tests that time out on purpose); fails the test if evd_client_new
 * does. */
evd_client_t *tc_client_with(const char *url, unsigned timeout_ms,
                             unsigned reconnect_ms, bool resend_timeouts);

/* Asserts that rc is want_rc and the client's error has this code and
 * status (code NULL: any). */
void tc_expect_err(evd_client_t *c, int rc, int want_rc, const char *code,
                   int status);

/* Asserts that l holds exactly want[0..n). */
void tc_expect_list(evd_list_t l, const uint32_t *want, size_t n,
                    const char *what);

/* A new temporary directory (mkdtemp); tc_rmdir removes it and all in it. */
void tc_tmpdir(char *out, size_t cap);
void tc_rmdir(const char *dir);

/* Milliseconds on the monotonic clock. */
long tc_now_ms(void);

/* A step of session over pos[0..n), every other field zero. Inline: the
 * tests fill pos after making the step, which gcc takes for a read of
 * uninitialized memory when it cannot see that only the pointer is kept. */
static inline evd_step_t tc_step(const char *session, const uint32_t *pos,
                                 size_t n) {
  evd_step_t s = {0};
  s.session = session;
  s.positions = pos;
  s.n_positions = n;
  return s;
}

/* Asserts that list l holds exactly the given positions (EXPECT) or none
 * (EMPTY). */
#define LIST(...) ((const uint32_t[]){__VA_ARGS__})
#define N(...) (sizeof((const uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t))
#define EXPECT(l, ...) tc_expect_list((l), LIST(__VA_ARGS__), N(__VA_ARGS__), #l)
#define EMPTY(l) tc_expect_list((l), NULL, 0, #l)

/* The daemon on a unix socket, a relay (fake.h) in front of it, and in *c
 * a client of the relay with a 500 ms timeout that sends timed-out
 * requests again (resend_timeouts, reconnect_ms 10 s); tc_relayed_stop
 * frees them all (resend.c). */
typedef struct relay_s relay_t;
relay_t *tc_relayed(evd_client_t **c);
void tc_relayed_stop(evd_client_t *c, relay_t *r);

/* The "client" suite's "daemon" case is test_client.c's operations, then
 * these files' tests, each in its file's order. */
void tc_add_pages_tests(TCase *tc);
void tc_add_refusal_tests(TCase *tc);
void tc_add_transport_tests(TCase *tc);
void tc_add_resend_tests(TCase *tc);

Suite *vectors_suite(void);
Suite *faults_suite(void);
Suite *restart_suite(void);
Suite *reader_suite(void);
Suite *adopt_suite(void);
Suite *async_suite(void);
void tc_add_rehome_tests(Suite *s);

#endif
