/* Runs the daemon under test as a child process: environment, arguments,
 * a log file per daemon, the address from its start-up line, and reaping
 * with a deadline so that a hung daemon fails a test instead of hanging it.
 * Log files are unlinked as soon as they are made and read through their
 * descriptor, so that a test that dies halfway leaves no file behind. */
#include "daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define WAIT_MS 20000
#define MAX_LIVE 16

/* How long to wait for a daemon to start or stop: 20 s, times
 * $EVICTD_TEST_SLOW when set (1..100), for a daemon run under valgrind or
 * on a crowded machine. */
static int wait_ms(void) {
  const char *s = getenv("EVICTD_TEST_SLOW");
  int k = s != NULL ? atoi(s) : 1;

  return WAIT_MS * (k >= 1 && k <= 100 ? k : 1);
}

/* Every daemon not yet reaped, for the exit handler. Copies, not pointers:
 * a test's ht_daemon_t may live on a stack that is gone by then. */
static pid_t live[MAX_LIVE];

static void kill_leftovers(void) {
  int i;

  for (i = 0; i < MAX_LIVE; i++) {
    if (live[i] > 0) {
      kill(live[i], SIGKILL);
      waitpid(live[i], NULL, 0);
      live[i] = 0;
    }
  }
}

static void remember(pid_t pid) {
  static int registered;
  int i;

  if (!registered) {
    atexit(kill_leftovers);
    registered = 1;
  }
  for (i = 0; i < MAX_LIVE; i++) {
    if (live[i] == 0) {
      live[i] = pid;
      return;
    }
  }
}

static void forget(pid_t pid) {
  int i;

  for (i = 0; i < MAX_LIVE; i++)
    if (live[i] == pid)
      live[i] = 0;
}

static void sleep_ms(long ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

const char *ht_daemon_bin(void) {
  const char *b = getenv("EVICTD_BIN");
  return b != NULL && b[0] != '\0' ? b : "build/evictd";
}

static size_t count(const char *const *v) {
  size_t n = 0;
  while (v != NULL && v[n] != NULL)
    n++;
  return n;
}

/* Builds argv and envp, forks, and execs the daemon with stdout and stderr
 * on the given descriptors. Returns the pid or -1. */
static pid_t spawn(const char *const *args, const char *const *env,
                   int prepend_listen, int out_fd, int err_fd) {
  size_t na = count(args), ne = count(env), nenv = count((const char *const *)environ);
  const char **argv = calloc(na + 4, sizeof *argv);
  const char **envp = calloc(nenv + ne + 1, sizeof *envp);
  size_t i, k = 0;
  pid_t parent = getpid(), pid;

  if (argv == NULL || envp == NULL) {
    free(argv);
    free(envp);
    return -1;
  }
  argv[k++] = ht_daemon_bin();
  if (prepend_listen) {
    argv[k++] = "--listen";
    argv[k++] = "127.0.0.1:0";
  }
  for (i = 0; i < na; i++)
    argv[k++] = args[i];
  k = 0;
  /* The daemon reads EVICTD_* variables: only the test's own may reach it. */
  for (i = 0; i < nenv; i++)
    if (strncmp(environ[i], "EVICTD_", 7) != 0)
      envp[k++] = environ[i];
  for (i = 0; i < ne; i++)
    envp[k++] = env[i];
  pid = fork();
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    /* Die with the test process, even when it dies of an assertion. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(127);
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    execve(argv[0], (char *const *)argv, (char *const *)envp);
    fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  free(argv);
  free(envp);
  return pid;
}

/* A new, already unlinked temporary file. Returns its descriptor or -1. */
static int make_log(void) {
  char path[] = "/tmp/evictd-http-XXXXXX";
  int fd = mkstemp(path);

  if (fd >= 0) {
    unlink(path);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  return fd;
}

/* Everything written to the file so far, NUL-terminated (never NULL). */
static char *slurp(int fd) {
  char *s = NULL;
  size_t len = 0, cap = 0;
  ssize_t n;

  for (;;) {
    if (cap - len < 4096) {
      char *p = realloc(s, cap = cap ? cap * 2 : 8192);
      if (p == NULL)
        break;
      s = p;
    }
    n = fd >= 0 ? pread(fd, s + len, cap - len - 1, (off_t)len) : 0;
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    len += (size_t)n;
  }
  if (s == NULL)
    return strdup("");
  s[len] = '\0';
  return s;
}

char *ht_daemon_log(const ht_daemon_t *d) {
  return slurp(d->log_fd);
}

void ht_daemon_free(ht_daemon_t *d) {
  if (d->log_fd >= 0)
    close(d->log_fd);
  d->log_fd = -1;
}

/* Reaps the daemon within `ms`, storing its exit code. Returns 1 when it
 * was reaped. */
static int reap(ht_daemon_t *d, int ms) {
  int st, waited;

  for (waited = 0; waited <= ms; waited += 5) {
    pid_t r = waitpid(d->pid, &st, WNOHANG);
    if (r == d->pid) {
      d->exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      d->signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
      forget(d->pid);
      d->pid = 0;
      return 1;
    }
    if (r < 0 && errno != EINTR)
      return 0;
    sleep_ms(5);
  }
  return 0;
}

static int has_listen(const char *const *args, const char *const *env) {
  size_t i;

  for (i = 0; args != NULL && args[i] != NULL; i++)
    if (strncmp(args[i], "--listen", 8) == 0)
      return 1;
  for (i = 0; env != NULL && env[i] != NULL; i++)
    if (strncmp(env[i], "EVICTD_LISTEN=", 14) == 0)
      return 1;
  return 0;
}

int ht_daemon_start(ht_daemon_t *d, const char *const *args,
                    const char *const *env) {
  regex_t re;
  regmatch_t m[2];
  int fd, null_fd, waited;

  memset(d, 0, sizeof *d);
  d->log_fd = fd = make_log();
  null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || null_fd < 0)
    goto fail_files;
  d->pid = spawn(args, env, !has_listen(args, env), null_fd, fd);
  close(null_fd);
  if (d->pid < 0) {
    d->pid = 0;
    return -1;
  }
  remember(d->pid);
  /* The address is taken only once whitespace follows it, so that a line
   * still being written is never read half. */
  if (regcomp(&re, "listening on ([^[:space:]]+)[[:space:]]", REG_EXTENDED))
    goto fail_started;
  for (waited = 0; waited < wait_ms(); waited += 5) {
    char *log = slurp(d->log_fd);
    int found = regexec(&re, log, 2, m, 0) == 0;
    if (found)
      snprintf(d->addr, sizeof d->addr, "%.*s", (int)(m[1].rm_eo - m[1].rm_so),
               log + m[1].rm_so);
    free(log);
    if (found) {
      regfree(&re);
      return 0;
    }
    if (reap(d, 0))
      break; /* it exited: the log says why */
    sleep_ms(5);
  }
  regfree(&re);
fail_started:
  if (d->pid > 0) {
    kill(d->pid, SIGKILL);
    reap(d, wait_ms());
  }
  return -1;
fail_files:
  if (null_fd >= 0)
    close(null_fd);
  return -1;
}

int ht_daemon_stop(ht_daemon_t *d, int sig) {
  if (d->pid <= 0)
    return d->exit_code;
  if (sig != 0)
    kill(d->pid, sig);
  if (!reap(d, wait_ms())) {
    kill(d->pid, SIGKILL);
    reap(d, wait_ms());
    d->exit_code = -1;
  }
  return d->exit_code;
}

int ht_daemon_run(const char *const *args, const char *const *env,
                  char **output) {
  ht_daemon_t d;
  int fd;

  memset(&d, 0, sizeof d);
  *output = NULL;
  d.log_fd = fd = make_log();
  if (fd < 0)
    return -1;
  d.pid = spawn(args, env, 0, fd, fd);
  if (d.pid < 0) {
    close(fd);
    return -1;
  }
  remember(d.pid);
  if (!reap(&d, wait_ms())) {
    kill(d.pid, SIGKILL);
    reap(&d, wait_ms());
    d.exit_code = -1;
  }
  *output = slurp(fd);
  close(fd);
  return d.exit_code;
}
