/* Starting and stopping the real daemon (the binary named by EVICTD_BIN)
 * for the HTTP tests. Each daemon's stderr goes to its own (unlinked)
 * temporary file, which is where its address is read from and what a
 * failing test prints.
 * Every daemon started is also recorded so that a test that fails halfway
 * still leaves no process behind (see ht_daemon_start). */
#ifndef EVICTD_TESTS_HTTP_DAEMON_H
#define EVICTD_TESTS_HTTP_DAEMON_H

#include <sys/types.h>

typedef struct {
  pid_t pid;      /* 0 once reaped */
  char addr[256]; /* the bound address from the "listening on" line */
  int log_fd;     /* the unlinked file holding the daemon's stderr */
  int exit_code;  /* once reaped: the exit code, or -1 when killed */
  int signal;     /* once reaped: the signal that killed it, or 0 */
} ht_daemon_t;

/* The daemon binary: $EVICTD_BIN, else build/evictd. */
const char *ht_daemon_bin(void);

/* Starts the daemon with `args` (NULL-terminated, may be NULL) and waits for
 * its "listening on ADDR" line, storing ADDR in d->addr. "--listen
 * 127.0.0.1:0" goes first unless `args` holds a --listen flag or `env` sets
 * EVICTD_LISTEN. The environment is ours without any EVICTD_* variable,
 * plus `env` ("NAME=value" strings, NULL-terminated, may be NULL).
 * The child gets SIGKILL if this process dies, and an exit handler kills
 * what is still running, so a failed assertion leaves no stray daemon.
 * Returns 0, or -1 when the daemon exited or never named its address within
 * 20 s (it is then killed and reaped; its log is still readable).
 * Release the log with ht_daemon_free once done. */
int ht_daemon_start(ht_daemon_t *d, const char *const *args,
                    const char *const *env);

/* Sends `sig` (0 = none) and waits up to 20 s for the daemon to exit, then
 * SIGKILLs it. Returns its exit code, or -1 when it died of a signal or had
 * to be killed. The log stays readable until ht_daemon_free. */
int ht_daemon_stop(ht_daemon_t *d, int sig);

/* The whole log so far, NUL-terminated; the caller frees it. Never NULL. */
char *ht_daemon_log(const ht_daemon_t *d);

/* Closes the log. The daemon must have been stopped. */
void ht_daemon_free(ht_daemon_t *d);

/* Runs the daemon to completion with `args` and `env` as above (nothing is
 * prepended), capturing stdout and stderr together into a malloc'd string
 * stored in *output. Returns the exit code, or -1 when it died of a signal
 * or ran over 20 s. */
int ht_daemon_run(const char *const *args, const char *const *env,
                  char **output);

#endif
