/* The command lines of evictd-llama: every command describes its options
 * in a table (a row per option: names, kind, where the value goes, help),
 * and one loop parses argv against the tables and writes --help from them,
 * as the daemon's server/main.c does. The option blocks every command
 * shares (the model and llama.cpp, the evictd client) are tables here. */
#ifndef EVICTD_LLAMA_CLI_H
#define EVICTD_LLAMA_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
  CLI_STR,     /* const char *: the argument itself (borrowed from argv) */
  CLI_U32,     /* uint32_t in [lo, hi] */
  CLI_I64,     /* int64_t in [lo, hi] (a default of -1 means "not given") */
  CLI_U64,     /* uint64_t in [lo, hi] */
  CLI_INT,     /* int in [lo, hi] */
  CLI_DOUBLE,  /* double in [lo, hi] */
  CLI_FLAG,    /* bool, set to true; takes no argument */
  CLI_CALL,    /* parse(who, arg, field): 0, or -1 having said why */
  CLI_CHOICE,  /* int: the index of the argument in names (a name may
                  list spellings: "on|enabled|true|1") */
  CLI_ROW,     /* row.fn(who, o, arg, field): CLI_CALL with the row
                  itself, for parsers that serve several rows (row.key) */
  CLI_NOOP,    /* accepted and changes nothing (help says why); takes a
                  value, stored nowhere, when arg is set */
  CLI_REFUSE,  /* refused, help the one-line reason; with names, those
                  values are accepted and change nothing */
  CLI_HELP,    /* prints the help, exit 0 */
  CLI_VERSION  /* prints the versions, exit 0 */
} cli_kind_t;

/* A row: an option. name and alias may each list several spellings,
 * "temp|temperature" (--temp, --temperature), "hf|hfr" (-hf, -hfr), as
 * llama.cpp's tools have them; messages name the first long one. */
typedef struct cli_opt_s {
  const char *name;       /* "model" for --model */
  const char *alias;      /* "m" for -m ("np" for -np), or NULL */
  const char *arg;        /* "FILE" in the help; NULL for flags */
  cli_kind_t kind;
  size_t off;             /* the field, at this offset in the group's base */
  unsigned long long lo, hi; /* the range of numbers */
  union {
    int (*parse)(const char *who, const char *arg, void *field); /* CALL */
    const char *const *names; /* CLI_CHOICE: the values, NULL-terminated;
                                 CLI_REFUSE: the values accepted */
    struct {                  /* CLI_ROW: fn(who, o, arg, field), 0 or -1
                                 having said why; key, what fn reads
                                 (serve: the request field the flag sets
                                 a default of) */
      int (*fn)(const char *who, const struct cli_opt_s *o, const char *arg,
                void *field);
      const char *key;
    } row;
  } with;
  const char *help;       /* one sentence or two, the default included */
} cli_opt_t;

struct lm_settings_s;
struct link_opts_s;
struct evd_session_cfg_s;

/* A command: its own options, and where the blocks every command takes
 * store theirs. */
typedef struct cli_cmd_s {
  const char *who;          /* "evictd-llama serve", for messages */
  const char *synopsis;     /* help: the usage lines and what it does */
  const cli_opt_t *opts;    /* the command's own table */
  size_t n;
  void *base;               /* its values' struct */
  const cli_opt_t *more;    /* a second table of its own, in the same
                               base, or NULL (serve: llama-server's flags) */
  size_t n_more;
  const char *more_title;   /* the help's heading of that table */
  struct lm_settings_s *lm; /* the model block's values */
  struct link_opts_s *link; /* the evictd block's values */
  struct evd_session_cfg_s *session; /* --budget, --sinks, --lookahead
                                        (-1: the daemon's), or NULL */
  const char **rest;        /* the operands (FILE), or NULL: none taken */
  size_t max_rest;
  size_t *n_rest;
} cli_cmd_t;

/* The cli_cmd_t of a command whose options struct `o` holds the shared
 * blocks' values as its fields lm, link and cfg, and whose own table is
 * the array `table`. */
#define CLI_CMD(who_, synopsis_, table_, o)                                  \
  {.who = (who_), .synopsis = (synopsis_), .opts = (table_),                \
   .n = sizeof(table_) / sizeof((table_)[0]), .base = &(o),                 \
   .lm = &(o).lm, .link = &(o).link, .session = &(o).cfg}

/* What cli_command returns when the command should run. */
#define CLI_RUN (-1)

/* Parses argv[1..argc) (argv[0] is the command's name) against the
 * command's tables and the shared blocks (the model and llama.cpp's
 * settings, the sessions' settings, the evictd client, --help,
 * --version): "--name VALUE", "--name=VALUE", "-alias VALUE", flags alone,
 * "--" ending the options; names are matched whole (no abbreviations).
 * Then a model must have been given, and the settings go together
 * (lm_settle). Returns CLI_RUN, or the exit status: 0 after --help or
 * --version (the help written from the tables, defaults included; the
 * refused options named at its end), 2 after a refusal (said on stderr
 * with the way to the help; a CLI_REFUSE row's in one line, "WHO: -x:
 * REASON", -x as it was given). */
int cli_command(const cli_cmd_t *cmd, int argc, char **argv);

/* The argument as a whole number in [lo, hi] into *out; else "WHO: --name
 * wants a whole number from LO to HI, not 'ARG'" on stderr and -1 (a
 * sign, a blank, trailing text or an overflow included). */
int cli_number(const char *who, const char *name, const char *arg,
               unsigned long long lo, unsigned long long hi,
               unsigned long long *out);

/* Prints "WHO: MESSAGE" on stderr, then, when `help` is not NULL, a line
 * saying that "HELP" lists the options, and returns rc: every command's
 * refusals (rc 2) and failures (rc 1) read alike. */
int cli_say(int rc, const char *who, const char *help, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The whole of a file ('-': stdin), NUL-terminated (the NUL not counted in
 * *len). Returns a malloc'd buffer the caller frees, or NULL with errno. */
char *cli_read_file(const char *path, size_t *len);

/* A CLI_CALL parser of --positions (original or cache) into a pos_mode_t. */
int cli_parse_positions(const char *who, const char *arg, void *field);

/* Whether name[0..n) is one of list's spellings ("a|b|c"). */
bool cli_listed(const char *list, const char *name, size_t n);

/* The versions line of --version. */
void cli_version(void);

#endif
