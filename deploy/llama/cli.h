/* What the commands of evictd-llama (generate, serve, perplexity) share on
 * their command lines. */
#ifndef EVICTD_LLAMA_CLI_H
#define EVICTD_LLAMA_CLI_H

/* The argument of --name as a whole number in [lo, hi] into *out; else
 * "WHO: --name wants a whole number from LO to HI, not 'ARG'" on stderr
 * and -1 (a sign, a blank, trailing text or an overflow included). */
int cli_number(const char *who, const char *name, const char *arg,
               unsigned long long lo, unsigned long long hi,
               unsigned long long *out);

/* Prints "WHO: MESSAGE" on stderr, then, when `help` is not NULL, a line
 * saying that "HELP" lists the options, and returns rc: every command's
 * refusals (rc 2) and failures (rc 1) read alike. */
int cli_say(int rc, const char *who, const char *help, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
