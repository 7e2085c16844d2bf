/* The command-line helpers the commands of evictd-llama share. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
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

int cli_say(int rc, const char *who, const char *help, const char *fmt, ...) {
  va_list ap;

  va_start(ap, fmt);
  fprintf(stderr, "%s: ", who);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  if (help != NULL)
    fprintf(stderr, "(%s lists the options)\n", help);
  va_end(ap);
  return rc;
}
