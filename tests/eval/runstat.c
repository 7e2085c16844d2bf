/* Runs a command N times and prints "MEDIAN_SECONDS PEAK_RSS_KIB": the
 * median wall time and the largest peak resident set (wait4's ru_maxrss)
 * over the runs, stdout discarded. A small C parent on purpose: a child's
 * ru_maxrss includes what its parent's memory was when it forked, so a
 * Python or shell parent would inflate a small program's figure.
 * Usage: eval_runstat N CMD [ARG...] */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  double secs[101];
  long peak = 0;
  int n, i;

  n = argc > 2 ? atoi(argv[1]) : 0;
  if (n < 1 || n > 101) {
    fprintf(stderr, "usage: eval_runstat N(1..101) CMD [ARG...]\n");
    return 2;
  }
  for (i = 0; i < n; i++) {
    struct timespec a, b;
    struct rusage ru;
    int status;
    pid_t pid;

    clock_gettime(CLOCK_MONOTONIC, &a);
    pid = fork();
    if (pid < 0) {
      perror("eval_runstat: fork");
      return 1;
    }
    if (pid == 0) {
      int fd = open("/dev/null", O_WRONLY);
      if (fd < 0 || dup2(fd, 1) < 0)
        _exit(127);
      execvp(argv[2], argv + 2);
      perror("eval_runstat: exec");
      _exit(127);
    }
    if (wait4(pid, &status, 0, &ru) != pid) {
      perror("eval_runstat: wait4");
      return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "eval_runstat: %s failed (status %d)\n", argv[2],
              status);
      return 1;
    }
    secs[i] = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    if (ru.ru_maxrss > peak)
      peak = ru.ru_maxrss;
  }
  qsort(secs, (size_t)n, sizeof secs[0], cmp);
  printf("%.3f %ld\n", secs[n / 2], peak);
  return 0;
}
