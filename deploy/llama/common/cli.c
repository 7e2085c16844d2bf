/* The command-line parser of evictd-llama's commands (one loop over the
 * commands' option tables), the help written from the same tables, and
 * the option blocks every command shares. */
#include "common/cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/link.h"
#include "common/lm.h"
#include "evictd/client.h"
#include "common/posmap.h"

int cli_number(const char *who, const char *name, const char *arg,
               unsigned long long lo, unsigned long long hi,
               unsigned long long *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(arg, &end, 10);
  if (arg[0] < '0' || arg[0] > '9' || *end != '\0' || errno != 0 ||
      v < lo || v > hi) {
    fprintf(stderr, "%s: --%s wants a whole number from %llu to %llu, not "
            "'%s'\n", who, name, lo, hi, arg);
    return -1;
  }
  *out = v;
  return 0;
}

bool cli_listed(const char *list, const char *name, size_t n) {
  for (const char *p = list;; p++) {
    if (strncmp(p, name, n) == 0 && (p[n] == '\0' || p[n] == '|'))
      return true;
    if ((p = strchr(p, '|')) == NULL)
      return false;
  }
}

/* The length of a list's first spelling ("temp" of "temp|temperature"):
 * the one messages name. */
static int first(const char *list) { return (int)strcspn(list, "|"); }

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

char *cli_read_file(const char *path, size_t *len) {
  FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
  if (f == NULL)
    return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap + 1);
  while (buf != NULL) {
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap)
      break;
    char *b = realloc(buf, (cap *= 2) + 1);
    if (b == NULL)
      free(buf);
    buf = b;
  }
  int err = ferror(f) ? EIO : buf == NULL ? ENOMEM : 0;
  if (f != stdin)
    fclose(f);
  if (err != 0) {
    free(buf);
    errno = err;
    return NULL;
  }
  buf[n] = '\0';
  *len = n;
  return buf;
}

void cli_version(void) {
  printf("evictd-llama %s (llama.cpp %s)\n", EVD_CLIENT_VERSION,
         EVD_LLAMA_CPP_VERSION);
}

/* ---- parsing ------------------------------------------------------------ */

/* Options whose values go into one struct. */
typedef struct cli_group_s {
  const cli_opt_t *opts;
  size_t n;
  void *base;
  const char *title;  /* the help's heading, or NULL */
} cli_group_t;

/* A command line's tables. */
typedef struct cli_s {
  const char *who, *synopsis;
  const cli_group_t *groups;
  size_t n_groups;
  const char **rest;
  size_t max_rest;
  size_t *n_rest;
} cli_t;

static void help(const cli_t *c);

/* The row named by `word` ("--name" or "-alias", `=VALUE` cut off by the
 * caller), and its group's base. A long name's underscores are dashes, as
 * llama.cpp's own parser reads them (--backend_sampling). */
static const cli_opt_t *find(const cli_t *c, const char *word, size_t len,
                             void **base) {
  bool lng = len > 2 && word[1] == '-';
  const char *name = word + (lng ? 2 : 1);
  size_t n = len - (lng ? 2 : 1);
  char dashed[128];
  if (lng && memchr(name, '_', n) != NULL) {
    if (n >= sizeof(dashed))
      return NULL;
    for (size_t k = 0; k < n; k++)
      dashed[k] = name[k] == '_' ? '-' : name[k];
    dashed[n] = '\0';
    name = dashed;
  }
  for (size_t g = 0; g < c->n_groups; g++)
    for (size_t i = 0; i < c->groups[g].n; i++) {
      const cli_opt_t *o = &c->groups[g].opts[i];
      const char *key = lng ? o->name : o->alias;
      if (key != NULL && cli_listed(key, name, n)) {
        *base = c->groups[g].base;
        return o;
      }
    }
  return NULL;
}

/* Stores `arg` as o says into its field. 0, or -1 having said why. */
static int apply(const cli_t *c, const cli_opt_t *o, void *field,
                 const char *arg) {
  unsigned long long v = 0;
  char name[64];
  snprintf(name, sizeof(name), "%.*s", first(o->name), o->name);
  bool number = o->kind == CLI_U32 || o->kind == CLI_I64 ||
                o->kind == CLI_U64 || o->kind == CLI_INT;
  if (number && cli_number(c->who, name, arg, o->lo, o->hi, &v) != 0)
    return -1;
  switch (o->kind) {
  case CLI_STR: *(const char **)field = arg; break;
  case CLI_U32: *(uint32_t *)field = (uint32_t)v; break;
  case CLI_I64: *(int64_t *)field = (int64_t)v; break;
  case CLI_U64: *(uint64_t *)field = (uint64_t)v; break;
  case CLI_INT: *(int *)field = (int)v; break;
  case CLI_DOUBLE: {
    char *end;
    double d = strtod(arg, &end);
    if (end == arg || *end != '\0' || !(d >= (double)o->lo) ||
        !(d <= (double)o->hi)) {
      fprintf(stderr, "%s: --%s wants a number from %llu to %llu, not "
              "'%s'\n", c->who, name, o->lo, o->hi, arg);
      return -1;
    }
    *(double *)field = d;
    break;
  }
  case CLI_FLAG: *(bool *)field = true; break;
  case CLI_CALL: return o->with.parse(c->who, arg, field);
  case CLI_ROW: return o->with.row.fn(c->who, o, arg, field);
  case CLI_CHOICE:
    for (int i = 0; o->with.names[i] != NULL; i++)
      if (cli_listed(o->with.names[i], arg, strlen(arg))) {
        *(int *)field = i;
        return 0;
      }
    fprintf(stderr, "%s: --%s is one of", c->who, name);
    for (int i = 0; o->with.names[i] != NULL; i++)
      fprintf(stderr, " %.*s", first(o->with.names[i]), o->with.names[i]);
    fprintf(stderr, ", not '%s'\n", arg);
    return -1;
  case CLI_NOOP:
  case CLI_REFUSE:
  case CLI_HELP:
  case CLI_VERSION: break;
  }
  return 0;
}

/* One walk over argv. The first (apply false) finds --help, --version and
 * unknown options before anything is stored, so that the help shows the
 * defaults; the second stores. */
static int walk(const cli_t *c, int argc, char **argv, bool store) {
  char way[96];
  snprintf(way, sizeof(way), "%s --help", c->who);
  if (c->n_rest != NULL)
    *c->n_rest = 0;
  bool options = true;
  for (int i = 1; i < argc; i++) {
    const char *w = argv[i];
    if (!options || w[0] != '-' || w[1] == '\0') {
      if (c->n_rest == NULL || *c->n_rest == c->max_rest)
        return cli_say(2, c->who, way, "unexpected argument '%s'", w);
      if (store)
        c->rest[*c->n_rest] = w;
      ++*c->n_rest;
      continue;
    }
    if (strcmp(w, "--") == 0) {
      options = false;
      continue;
    }
    const char *eq = w[1] == '-' ? strchr(w, '=') : NULL;
    void *base = NULL;
    const cli_opt_t *o = find(c, w, eq ? (size_t)(eq - w) : strlen(w), &base);
    if (o == NULL)
      return cli_say(2, c->who, way, "unknown option '%.*s'",
                     eq ? (int)(eq - w) : (int)strlen(w), w);
    if (o->kind == CLI_HELP || o->kind == CLI_VERSION) {
      if (o->kind == CLI_HELP)
        help(c);
      else
        cli_version();
      return 0;
    }
    const char *arg = "";
    int len = first(o->name), typed = eq ? (int)(eq - w) : (int)strlen(w);
    /* Refused, in one line naming the option as it was given; unless the
     * row accepts some values (they change nothing) and this is one. */
    if (o->kind == CLI_REFUSE && o->with.names == NULL)
      return cli_say(2, c->who, NULL, "%.*s: %s", typed, w, o->help);
    if (o->arg != NULL && eq != NULL)
      arg = eq + 1;
    else if (o->arg != NULL && i + 1 < argc)
      arg = argv[++i];
    else if (o->arg != NULL)
      return cli_say(2, c->who, way, "--%.*s wants %s", len, o->name,
                     o->arg);
    else if (eq != NULL)
      return cli_say(2, c->who, way, "--%.*s takes no value", len, o->name);
    if (o->kind == CLI_REFUSE) {
      bool fine = false;
      for (size_t k = 0; o->with.names[k] != NULL; k++)
        fine = fine || strcmp(arg, o->with.names[k]) == 0;
      if (!fine)
        return cli_say(2, c->who, NULL, "%.*s %s: %s", typed, w, arg,
                       o->help);
    }
    if (store && apply(c, o, (char *)base + o->off, arg) != 0) {
      fprintf(stderr, "(%s lists the options)\n", way);
      return 2;
    }
  }
  return CLI_RUN;
}


/* ---- the help ----------------------------------------------------------- */

/* Prints text from the current column `col` on in lines ending before
 * column 80, broken at spaces; each next line starts at column `indent`. */
static void wrap(const char *text, int col, int indent) {
  size_t width = (size_t)(79 - col);
  while (strlen(text) > width) {
    const char *cut = text + width;
    while (cut > text && *cut != ' ')
      cut--;
    if (cut == text && (cut = strchr(text + width, ' ')) == NULL)
      break; /* one word longer than the line: it passes column 79 */
    printf("%.*s\n%*s", (int)(cut - text), text, indent, "");
    text = cut + 1;
    width = (size_t)(79 - indent);
  }
  puts(text);
}

static int parse_threads(const char *who, const cli_opt_t *o,
                         const char *arg, void *field);

/* " (default V)" for an option whose help does not name its default, from
 * the value the field holds before parsing. */
static void default_of(const cli_opt_t *o, const void *field, char *out,
                       size_t len) {
  out[0] = '\0';
  if (strstr(o->help, "default") != NULL)
    return;
  switch (o->kind) {
  case CLI_STR:
    if (*(const char *const *)field != NULL)
      snprintf(out, len, " (default %s)", *(const char *const *)field);
    break;
  case CLI_U32: snprintf(out, len, " (default %u)", *(const uint32_t *)field);
    break;
  case CLI_U64: snprintf(out, len, " (default %llu)",
                         (unsigned long long)*(const uint64_t *)field);
    break;
  case CLI_INT: snprintf(out, len, " (default %d)", *(const int *)field);
    break;
  case CLI_DOUBLE: snprintf(out, len, " (default %g)",
                            *(const double *)field);
    break;
  case CLI_CHOICE: snprintf(out, len, " (default %.*s)",
                            first(o->with.names[*(const int *)field]),
                            o->with.names[*(const int *)field]);
    break;
  case CLI_FLAG:
    if (*(const bool *)field)
      snprintf(out, len, " (the default)");
    break;
  case CLI_ROW:
    if (o->with.row.fn == parse_threads && *(const int *)field > 0)
      snprintf(out, len, " (default %d)", *(const int *)field);
    break;
  default: break;
  }
}

/* Appends a list's spellings to out, each after `dash`: "-hf, -hfr". */
static void spellings(char *out, size_t len, const char *dash,
                      const char *list) {
  for (const char *p = list;; p++) {
    size_t at = strlen(out);
    snprintf(out + at, len - at, "%s%s%.*s", at > 0 ? ", " : "", dash,
             first(p), p);
    if ((p = strchr(p, '|')) == NULL)
      return;
  }
}

static void help(const cli_t *c) {
  fputs(c->synopsis, stdout);
  putchar('\n');
  for (size_t g = 0; g < c->n_groups; g++) {
    if (c->groups[g].title != NULL && c->groups[g].n > 0) {
      putchar('\n');
      wrap(c->groups[g].title, 0, 0);
    }
    for (size_t i = 0; i < c->groups[g].n; i++) {
      const cli_opt_t *o = &c->groups[g].opts[i];
      char left[400], shorts[128] = "", longs[256] = "", def[160];
      char text[1024];
      if (o->kind == CLI_REFUSE)
        continue;
      if (o->alias != NULL)
        spellings(shorts, sizeof(shorts), "-", o->alias);
      spellings(longs, sizeof(longs), "--", o->name);
      snprintf(left, sizeof(left), "%s%s%s%s%s", shorts,
               shorts[0] ? ", " : "    ", longs, o->arg ? " " : "",
               o->arg ? o->arg : "");
      default_of(o, (const char *)c->groups[g].base + o->off, def,
                 sizeof(def));
      snprintf(text, sizeof(text), "%s%s", o->help, def);
      /* A name too long for its column gets a line of its own. */
      if (strlen(left) >= 24)
        printf("  %s\n%26s", left, "");
      else
        printf("  %-24s", left);
      wrap(text, 26, 26);
    }
  }
  /* The refused ones by name: each says why when it is given. */
  char line[8192] = "";
  for (size_t g = 0; g < c->n_groups; g++)
    for (size_t i = 0; i < c->groups[g].n; i++) {
      const cli_opt_t *o = &c->groups[g].opts[i];
      if (o->kind != CLI_REFUSE)
        continue;
      if (o->alias != NULL)
        spellings(line, sizeof(line), "-", o->alias);
      spellings(line, sizeof(line), "--", o->name);
      if (o->with.names != NULL) {
        size_t at = strlen(line);
        snprintf(line + at, sizeof(line) - at, " (but %s)", o->with.names[0]);
      }
    }
  if (line[0] != '\0') {
    printf("\nRefused, each saying why when given (llama-server's, which "
           "serve does not do):\n  ");
    wrap(line, 2, 2);
  }
}

int cli_parse_positions(const char *who, const char *arg, void *field) {
  if (posmap_parse(arg, field) != 0)
    return cli_say(-1, who, NULL, "--positions is original or cache, not "
                   "'%s'", arg);
  return 0;
}

/* ---- the shared blocks -------------------------------------------------- */

#define LM(f) offsetof(lm_settings_t, f)
#define LINK(f) offsetof(link_opts_t, f)

/* -t and -tb: 1 to 1024, or -1, llama.cpp's "as many as there are":
 * every core. */
static int parse_threads(const char *who, const cli_opt_t *o,
                         const char *arg, void *field) {
  unsigned long long v;
  char name[32];
  snprintf(name, sizeof(name), "%.*s", first(o->name), o->name);
  if (strcmp(arg, "-1") == 0) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    *(int *)field = cores > 0 ? (int)cores : 1;
    return 0;
  }
  if (cli_number(who, name, arg, 1, 1024, &v) != 0)
    return -1;
  *(int *)field = (int)v;
  return 0;
}

/* -fa's values with llama.cpp's other spellings of them, in the order of
 * LM_FA_OFF, LM_FA_ON, LM_FA_AUTO. */
static const char *const fa_spellings[] = {
    "off|disabled|false|0", "on|enabled|true|1", "auto|-1", NULL};

static const cli_opt_t model_opts[] = {
    {"model", "m", "FILE", CLI_STR, LM(model), 0, 0, {NULL},
     "the model (GGUF)"},
    {"threads", "t", "N", CLI_ROW, LM(threads), 0, 0,
     {.row = {parse_threads, NULL}}, "llama.cpp threads (-1: every core)"},
    {"threads-batch", "tb", "N", CLI_ROW, LM(threads_batch), 0, 0,
     {.row = {parse_threads, NULL}}, "llama.cpp threads of a pass of several "
     "tokens (a prompt's chunk) (default: --threads; -1: every core)"},
    {"flash-attn", "fa", "WHEN", CLI_CHOICE, LM(flash_attn), 0, 0,
     {.names = fa_spellings}, "flash attention: off, on or auto (or "
     "llama.cpp's other spellings: disabled, false, 0, enabled, true, 1, "
     "-1)"},
    {"cache-type-k", "ctk", "TYPE", CLI_CHOICE, LM(type_k), 0, 0,
     {.names = lm_type_names}, "the K cache's type: f32, f16, q8_0, bf16, "
     "q4_0, q4_1, iq4_nl, q5_0 or q5_1, as llama.cpp's"},
    {"cache-type-v", "ctv", "TYPE", CLI_CHOICE, LM(type_v), 0, 0,
     {.names = lm_type_names},
     "the V cache's type, the same (a quantized one with flash "
     "attention)"},
    {"exact", NULL, NULL, CLI_FLAG, LM(exact), 0, 0, {NULL},
     "the settings whose logits match a float64 reference within about "
     "1e-6: F32 K and V, flash attention off, one thread (over -t, -fa, "
     "-ctk and -ctv)"},
    {"debug", NULL, NULL, CLI_FLAG, LM(debug), 0, 0, {NULL},
     "llama.cpp's whole log on stderr"},
    {"swa-full", NULL, NULL, CLI_FLAG, LM(swa_full), 0, 0, {NULL},
     "a model's sliding-window layers keep as many cells as its full ones "
     "(llama-server's flag; by default llama.cpp's window and a pass): "
     "more memory, the same answers"},
};
static const size_t model_n = sizeof(model_opts) / sizeof(model_opts[0]);

#define CFG(f) offsetof(evd_session_cfg_t, f)

static const cli_opt_t session_opts[] = {
    {"budget", NULL, "N", CLI_I64, CFG(budget), 1, UINT32_MAX, {NULL},
     "each session's budget (default: the daemon's; serve's is one less "
     "when the daemon's is a multiple of 256, so that a full window's "
     "pass fits llama.cpp's span of cells)"},
    {"sinks", NULL, "N", CLI_I64, CFG(sinks), 0, UINT32_MAX, {NULL},
     "positions pinned at the start (streaming-llm: 4; default: the "
     "daemon's)"},
    {"lookahead", NULL, "N", CLI_I64, CFG(lookahead), 1, 1u << 24, {NULL},
     "positions a step may add: the prompt's chunk (and with --draft the "
     "pending drafts) (default: the daemon's; serve's: 512)"},
};
static const size_t session_n = sizeof(session_opts) / sizeof(session_opts[0]);

static const cli_opt_t evictd_opts[] = {
    {"evictd", NULL, "URL", CLI_STR, LINK(url), 0, 0, {NULL},
     "the daemon: http://host:port, https://..., unix:/path (default "
     "$EVICTD_URL, else http://127.0.0.1:8090, the daemon's own default)"},
    {"token-file", NULL, "FILE", CLI_STR, LINK(token_file), 0, 0, {NULL},
     "evictd's bearer token (the file's first line)"},
    {"cafile", NULL, "FILE", CLI_STR, LINK(cafile), 0, 0, {NULL},
     "the CA (or self-signed certificate) of an https:// evictd"},
    {"timeout-ms", NULL, "MS", CLI_U32, LINK(timeout_ms), 1, 3600000, {NULL},
     "the longest wait for one answer of evictd"},
    {"reconnect-ms", NULL, "MS", CLI_U32, LINK(reconnect_ms), 0, 3600000,
     {NULL}, "how long a request is sent again while evictd restarts or "
     "answers too late"},
};
static const size_t evictd_n = sizeof(evictd_opts) / sizeof(evictd_opts[0]);

static const cli_opt_t info_opts[] = {
    {"help|usage", "h", NULL, CLI_HELP, 0, 0, 0, {NULL}, "this text"},
    {"version", NULL, NULL, CLI_VERSION, 0, 0, 0, {NULL}, "the versions"},
};
static const size_t info_n = sizeof(info_opts) / sizeof(info_opts[0]);

/* ---- a command's line ---------------------------------------------------- */

int cli_command(const cli_cmd_t *cmd, int argc, char **argv) {
  cli_group_t groups[] = {{model_opts, model_n, cmd->lm, NULL},
                          {session_opts, session_n, cmd->session, NULL},
                          {cmd->opts, cmd->n, cmd->base, NULL},
                          {cmd->more, cmd->n_more, cmd->base,
                           cmd->more_title},
                          {evictd_opts, evictd_n, cmd->link, NULL},
                          {info_opts, info_n, NULL, NULL}};
  cli_t c = {cmd->who, cmd->synopsis, groups,
             sizeof(groups) / sizeof(groups[0]), cmd->rest, cmd->max_rest,
             cmd->n_rest};
  if (cmd->session == NULL) /* its own --budgets and --sinks instead */
    groups[1].n = 0;
  char way[96];
  int rc = walk(&c, argc, argv, false);
  if (rc == CLI_RUN)
    rc = walk(&c, argc, argv, true);
  snprintf(way, sizeof(way), "%s --help", cmd->who);
  if (rc == CLI_RUN && cmd->lm->model == NULL)
    return cli_say(2, cmd->who, way, "-m MODEL.gguf is required");
  char err[256];
  if (rc == CLI_RUN && lm_settle(cmd->lm, err, sizeof(err)) != 0)
    return cli_say(2, cmd->who, way, "%s", err);
  return rc;
}
