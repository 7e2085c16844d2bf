/* Helpers of the C client's tests (common.h). */
#include "common.h"

#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

ht_daemon_t tc_daemon;
char tc_url[512];

void tc_start(const char *const *args) {
  int rc = ht_daemon_start(&tc_daemon, args, NULL);

  if (rc != 0) {
    char *log = ht_daemon_log(&tc_daemon);
    ck_abort_msg("the daemon did not start: %s", log);
    free(log);
  }
  if (strncmp(tc_daemon.addr, "unix:", 5) == 0)
    snprintf(tc_url, sizeof tc_url, "%s", tc_daemon.addr);
  else
    snprintf(tc_url, sizeof tc_url, "http://%s", tc_daemon.addr);
}

void tc_stop(void) {
  ht_daemon_stop(&tc_daemon, SIGTERM);
  ht_daemon_free(&tc_daemon);
}

evd_client_t *tc_client(const char *url, unsigned reconnect_ms) {
  const char *slow = getenv("EVICTD_TEST_SLOW");
  int k = slow != NULL ? atoi(slow) : 1;
  evd_client_opts_t o = {0};
  evd_client_t *c = NULL;
  char err[256];
  int rc;

  o.url = url != NULL ? url : tc_url;
  o.timeout_ms = 10000u * (unsigned)(k >= 1 && k <= 100 ? k : 1);
  o.reconnect_ms = reconnect_ms;
  rc = evd_client_new(&c, &o, err, sizeof err);
  ck_assert_msg(rc == 0, "evd_client_new(%s): %d %s", o.url, rc, err);
  return c;
}

evd_client_t *tc_client_with(const char *url, unsigned timeout_ms,
                             unsigned reconnect_ms, bool resend_timeouts) {
  evd_client_opts_t o = {0};
  evd_client_t *c = NULL;
  char err[256];

  o.url = url;
  o.timeout_ms = timeout_ms;
  o.reconnect_ms = reconnect_ms;
  o.resend_timeouts = resend_timeouts;
  ck_assert_msg(evd_client_new(&c, &o, err, sizeof err) == 0,
                "evd_client_new(%s): %s", url, err);
  return c;
}

void tc_expect_err(evd_client_t *c, int rc, int want_rc, const char *code,
                   int status) {
  const evd_client_err_t *e = evd_client_error(c);

  ck_assert_msg(rc == want_rc, "rc %d (%s: %s), want %d", rc, e->code,
                e->message, want_rc);
  ck_assert_int_eq(e->rc, want_rc);
  if (code != NULL)
    ck_assert_msg(strcmp(e->code, code) == 0, "code %s (%s), want %s",
                  e->code, e->message, code);
  ck_assert_msg(e->status == status, "status %d (%s: %s), want %d",
                e->status, e->code, e->message, status);
  ck_assert_msg(e->message[0] != '\0', "an error without a message");
}

void tc_expect_list(evd_list_t l, const uint32_t *want, size_t n,
                    const char *what) {
  size_t i;

  ck_assert_msg(l.n == n, "%s: %zu entries, want %zu", what, l.n, n);
  ck_assert_msg((l.v == NULL) == (n == 0), "%s: v is %p with n %zu", what,
                (const void *)l.v, n);
  for (i = 0; i < n; i++)
    ck_assert_msg(l.v[i] == want[i], "%s[%zu] is %u, want %u", what, i,
                  l.v[i], want[i]);
}

void tc_tmpdir(char *out, size_t cap) {
  snprintf(out, cap, "/tmp/evictd-client-XXXXXX");
  ck_assert_msg(mkdtemp(out) != NULL, "mkdtemp");
}

static int rm_one(const char *path, const struct stat *st, int flag,
                  struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

void tc_rmdir(const char *dir) {
  nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

long tc_now_ms(void) {
  struct timespec t;

  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}
