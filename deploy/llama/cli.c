/* The command-line helpers the commands of evictd-llama share. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int cli_number(const char *who, const char *name, const char *arg,
               unsigned long long lo, unsigned long long hi,
               unsigned long long *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(arg, &end, 10);
  if (arg[0] == '-' || arg[0] == '\0' || *end != '\0' || errno != 0 ||
      v < lo || v > hi) {
    fprintf(stderr, "%s: --%s wants a whole number from %llu to %llu, not "
            "'%s'\n", who, name, lo, hi, arg);
    return -1;
  }
  *out = v;
  return 0;
}
