/* The one clock of evictd-llama: monotonic seconds, for the iteration
 * timings (--stats, serve's /metrics) and the resend deadline. */
#ifndef EVICTD_LLAMA_CLOCK_H
#define EVICTD_LLAMA_CLOCK_H

#include <time.h>

static inline double clock_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
