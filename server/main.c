/* evictd's entry point: flags and environment variables into a config,
 * checked as a whole, then the server runs until it is told to stop. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api.h"
#include "journal.h"
#include "log.h"
#include "loop.h"
#include <gnutls/gnutls.h>

#include "probe.h"
#include "fault.h"

enum kind {
  K_STR, K_U32, K_SIZE, K_FLAG, K_LEVEL, K_FORMAT, K_TOKEN, K_FSYNC, K_ACTION
};

/* One row per option: the flag, its environment variable, how to read it
 * and where it goes. `max` bounds numbers. */
typedef struct {
  const char *flag, *env, *arg, *help;
  enum kind kind;
  size_t offset; /* into evd_config_t */
  unsigned long long min, max;
} option_t;

#define CFG(field) offsetof(evd_config_t, field)

static int log_format = EVD_LOG_TEXT;
/* Whether --fsync or EVICTD_FSYNC was given (it only matters with a
 * --state-dir). */
static int fsync_given;

static const option_t options[] = {
    {"listen", "EVICTD_LISTEN", "ADDR",
     "host:port, [v6]:port (port 0 = any free port) or unix:/path",
     K_STR, CFG(listen), 0, 0},
    {"budget", "EVICTD_BUDGET", "N", "default budget of new sessions",
     K_U32, CFG(budget), 1, 4294967294u},
    {"sinks", "EVICTD_SINKS", "N",
     "default attention sinks of new sessions (4 = streaming-llm)",
     K_U32, CFG(sinks), 0, 4294967293u},
    {"max-budget", "EVICTD_MAX_BUDGET", "N", "largest budget a session may use",
     K_U32, CFG(max_budget), 1, 4294967294u},
    {"lookahead", "EVICTD_LOOKAHEAD", "N",
     "default lookahead of new sessions: slots beyond the budget, the most "
     "positions a sub-step or the pending drafts hold", K_U32,
     CFG(lookahead), 1, 16777216},
    {"max-lookahead", "EVICTD_MAX_LOOKAHEAD", "N",
     "largest lookahead a session may use", K_U32, CFG(max_lookahead), 1,
     16777216},
    {"page-size", "EVICTD_PAGE_SIZE", "N",
     "default page size of new sessions: positions per logical page of "
     "page-granular answers (0 = off)", K_U32, CFG(page_size), 0,
     EVD_MAX_PAGE_SIZE},
    {"max-sessions", "EVICTD_MAX_SESSIONS", "N", "live sessions at most",
     K_U32, CFG(max_sessions), 1, 4294967295u},
    {"max-body", "EVICTD_MAX_BODY", "BYTES", "largest request body",
     K_SIZE, CFG(max_body), 16, 1u << 30},
    {"max-positions", "EVICTD_MAX_POSITIONS", "N",
     "positions per step request or batch item", K_U32, CFG(max_positions), 1,
     4294967295u},
    {"max-batch", "EVICTD_MAX_BATCH", "N", "items per batch request", K_U32,
     CFG(max_batch), 1, 4294967295u},
    {"max-conns", "EVICTD_MAX_CONNS", "N", "concurrent connections", K_U32,
     CFG(max_conns), 1, 1000000},
    {"conn-timeout", "EVICTD_CONN_TIMEOUT", "SECONDS",
     "close a connection that has not completed a request for this long "
     "(idle or trickling)", K_U32, CFG(conn_timeout), 1, 86400},
    {"tls-cert", "EVICTD_TLS_CERT", "FILE",
     "serve HTTPS (TLS, by libmicrohttpd and GnuTLS) with this PEM "
     "certificate (chain) and --tls-key", K_STR, CFG(tls_cert), 0, 0},
    {"tls-key", "EVICTD_TLS_KEY", "FILE",
     "the PEM private key of --tls-cert", K_STR, CFG(tls_key), 0, 0},
    {"replay-pool", "EVICTD_REPLAY_POOL", "BYTES",
     "memory for the answers of last requests that are not runs (a decode "
     "or prefill answer takes none); beyond it the oldest are let go and "
     "their resend is answered 409 replay_unavailable", K_SIZE,
     CFG(replay_pool), 0, 1ull << 40},
    {"token-file", "EVICTD_TOKEN_FILE", "FILE",
     "require 'Authorization: Bearer <token>' (the file's first line) on "
     "every endpoint but /healthz", K_TOKEN, CFG(token), 0, 0},
    {"idle-ttl", "EVICTD_IDLE_TTL", "SECONDS",
     "reap sessions unused this long (0 = never)", K_U32, CFG(idle_ttl), 0,
     31536000},
    {"state-dir", "EVICTD_STATE_DIR", "DIR",
     "keep sessions across restarts: journal and snapshot in DIR (default: "
     "none, sessions live in memory only)", K_STR, CFG(state_dir), 0, 0},
    {"journal-wait", "EVICTD_JOURNAL_WAIT", "SECONDS",
     "with --state-dir: how long an answer waits for its journal record "
     "while the journal is failing; then it is 503 journal_failed (the "
     "change is applied in memory, and a resend once the journal works "
     "again gets its answer)", K_U32, CFG(journal_wait), 1, 86400},
    {"fsync", "EVICTD_FSYNC", "MODE",
     "with --state-dir: always (answer after the change is on disk), "
     "everysec or no", K_FSYNC, CFG(fsync), 0, 0},
    {"compact-after", "EVICTD_COMPACT_AFTER", "BYTES",
     "with --state-dir: snapshot when the journal grows past this",
     K_SIZE, CFG(compact_after), 4096, 1ull << 40},
    {"no-autocreate", "EVICTD_NO_AUTOCREATE", NULL,
     "a step to an unknown session is 404 instead of creating it", K_FLAG,
     CFG(autocreate), 0, 0},
    {"log-level", "EVICTD_LOG_LEVEL", "LEVEL", "error, warn, info or debug",
     K_LEVEL, CFG(log_level), 0, 0},
    {"log-format", "EVICTD_LOG_FORMAT", "FORMAT", "text or json", K_FORMAT, 0,
     0, 0},
    {"probe", NULL, "URL",
     "check a running daemon: exit 0 when GET URL (http://host:port/healthz,"
     " https://... or unix:/path) answers 200 within 5 s, else 1 (2 if URL "
     "is not a URL); like "
     "Kubernetes' HTTPS probes it does not verify the certificate",
     K_ACTION, 0, 0, 0},
    {"version", NULL, NULL, "print the version and exit", K_ACTION, 0, 0, 0},
    {"help", NULL, NULL, "print this help and exit", K_ACTION, 0, 0, 0},
};
#define NOPTIONS (sizeof options / sizeof options[0])

/* Writes text from column `indent` on, broken between words so that no
 * line passes column 79. */
static void wrap(FILE *f, const char *text, int indent) {
  int col = indent;
  const char *p = text;

  while (*p != '\0') {
    size_t word = strcspn(p, " ");
    if (col > indent && col + 1 + (int)word > 79) {
      fprintf(f, "\n%*s", indent, "");
      col = indent;
    } else if (col > indent) {
      fputc(' ', f);
      col++;
    }
    fwrite(p, 1, word, f);
    col += (int)word;
    p += word;
    while (*p == ' ')
      p++;
  }
  fputc('\n', f);
}

static void usage(FILE *f) {
  evd_config_t d;
  size_t i;

  evd_config_defaults(&d);
  fprintf(f,
          "Usage: evictd [OPTION]...\n"
          "KV-cache eviction bookkeeping for LLM inference servers: one\n"
          "sliding window per session, over HTTP/JSON.\n\n");
  for (i = 0; i < NOPTIONS; i++) {
    const option_t *o = &options[i];
    char left[64], def[64] = "";
    snprintf(left, sizeof left, "--%s%s%s", o->flag, o->arg ? " " : "",
             o->arg ? o->arg : "");
    if (o->kind == K_STR && o->offset == CFG(listen))
      snprintf(def, sizeof def, " (default %s)", d.listen);
    else if (o->kind == K_FSYNC)
      snprintf(def, sizeof def, " (default everysec)");
    else if (o->kind == K_U32)
      snprintf(def, sizeof def, " (default %u)",
               *(uint32_t *)((char *)&d + o->offset));
    else if (o->kind == K_SIZE)
      snprintf(def, sizeof def, " (default %zu)",
               *(size_t *)((char *)&d + o->offset));
    else if (o->kind == K_LEVEL)
      snprintf(def, sizeof def, " (default info)");
    else if (o->kind == K_FORMAT)
      snprintf(def, sizeof def, " (default text)");
    {
      char text[1024];
      snprintf(text, sizeof text, "%s%s", o->help, def);
      fprintf(f, "  %-26s ", left);
      wrap(f, text, 29);
    }
    if (o->env != NULL)
      fprintf(f, "  %-26s   env %s\n", "", o->env);
  }
  fprintf(f, "\nFlags win over environment variables. SIGINT or SIGTERM "
             "stops the daemon\ngracefully; SIGHUP is ignored (logged). "
             "API: see proto/openapi.yaml.\n");
}

/* Reads the bearer token: the first line of the file, without surrounding
 * blanks. Returns a heap copy (kept for the life of the process) or NULL,
 * having said why. The token itself is never printed. */
static char *read_token(const char *source, const char *path) {
  char line[4096], *start, *end;
  FILE *f = fopen(path, "r");
  size_t n;

  if (f == NULL) {
    fprintf(stderr, "evictd: %s: cannot read %s: %s\n", source, path,
            strerror(errno));
    return NULL;
  }
  n = fread(line, 1, sizeof line - 1, f);
  fclose(f);
  line[n] = '\0';
  line[strcspn(line, "\r\n")] = '\0';
  for (start = line; *start == ' ' || *start == '\t'; start++)
    ;
  end = start + strlen(start);
  while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
    *--end = '\0';
  if (end - start < 16) {
    fprintf(stderr, "evictd: %s: the token in %s must be at least 16 "
                    "characters on its first line\n", source, path);
    return NULL;
  }
  for (char *p = start; p < end; p++)
    if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e) {
      fprintf(stderr, "evictd: %s: the token in %s must be printable ASCII "
                      "without blanks\n", source, path);
      return NULL;
    }
  return strdup(start);
}

/* Reads `value` into the config as option o says. Returns 0, or prints why
 * not (naming `source`, the flag or the variable) and returns -1. */
static int apply(const option_t *o, const char *source, const char *value,
                 evd_config_t *cfg) {
  unsigned long long n;
  char *end;

  switch (o->kind) {
  case K_STR:
    if (value[0] == '\0')
      break;
    *(const char **)((char *)cfg + o->offset) = value;
    return 0;
  case K_U32:
  case K_SIZE:
    errno = 0;
    n = strtoull(value, &end, 10);
    if (value[0] < '0' || value[0] > '9' || *end != '\0' || errno != 0 ||
        n < o->min || n > o->max) {
      fprintf(stderr, "evictd: %s: expected an integer from %llu to %llu, "
                      "got '%s'\n", source, o->min, o->max, value);
      return -1;
    }
    if (o->kind == K_U32)
      *(uint32_t *)((char *)cfg + o->offset) = (uint32_t)n;
    else
      *(size_t *)((char *)cfg + o->offset) = (size_t)n;
    return 0;
  case K_FLAG: /* --no-autocreate: value is "1" for the flag itself */
    if (strcmp(value, "1") == 0 || strcasecmp(value, "true") == 0 ||
        strcasecmp(value, "yes") == 0 || strcasecmp(value, "on") == 0) {
      cfg->autocreate = 0;
      return 0;
    }
    if (strcmp(value, "0") == 0 || strcasecmp(value, "false") == 0 ||
        strcasecmp(value, "no") == 0 || strcasecmp(value, "off") == 0 ||
        value[0] == '\0') {
      cfg->autocreate = 1;
      return 0;
    }
    fprintf(stderr, "evictd: %s: expected 1/true/yes/on or 0/false/no/off, "
                    "got '%s'\n", source, value);
    return -1;
  case K_LEVEL:
    if (evd_log_level_parse(value) < 0)
      break;
    cfg->log_level = evd_log_level_parse(value);
    return 0;
  case K_FORMAT:
    if (strcmp(value, "text") == 0)
      log_format = EVD_LOG_TEXT;
    else if (strcmp(value, "json") == 0)
      log_format = EVD_LOG_JSON;
    else
      break;
    return 0;
  case K_FSYNC:
    fsync_given = 1;
    if (strcmp(value, "always") == 0)
      cfg->fsync = EVD_FSYNC_ALWAYS;
    else if (strcmp(value, "everysec") == 0)
      cfg->fsync = EVD_FSYNC_EVERYSEC;
    else if (strcmp(value, "no") == 0)
      cfg->fsync = EVD_FSYNC_NO;
    else
      break;
    return 0;
  case K_TOKEN:
    if (value[0] == '\0')
      break;
    free((char *)cfg->token);
    cfg->token = read_token(source, value);
    return cfg->token != NULL ? 0 : -1;
  case K_ACTION:
    break;
  }
  fprintf(stderr, "evictd: %s: invalid value '%s' (see --help)\n", source,
          value);
  return -1;
}

/* Reads a whole PEM file (at most 1 MiB) into a heap string kept for the
 * life of the process. Returns it, or NULL having said why. */
static char *read_pem(const char *flag, const char *path) {
  FILE *f = fopen(path, "r");
  char *buf = NULL;
  size_t n = 0;

  if (f != NULL && (buf = malloc((1u << 20) + 1)) != NULL) {
    n = fread(buf, 1, 1u << 20, f);
    if (!feof(f) && n == (1u << 20)) {
      fprintf(stderr, "evictd: --%s: %s is over 1 MiB\n", flag, path);
      fclose(f);
      free(buf);
      return NULL;
    }
  }
  if (f == NULL || buf == NULL || ferror(f)) {
    fprintf(stderr, "evictd: --%s: cannot read %s: %s\n", flag, path,
            strerror(errno));
    if (f != NULL)
      fclose(f);
    free(buf);
    return NULL;
  }
  fclose(f);
  buf[n] = '\0';
  if (strstr(buf, "-----BEGIN ") == NULL) {
    fprintf(stderr, "evictd: --%s: %s is not a PEM file\n", flag, path);
    free(buf);
    return NULL;
  }
  return buf;
}

/* Cross-option rules that no single option can check. */
static int check(evd_config_t *cfg) {
  if ((cfg->tls_cert == NULL) != (cfg->tls_key == NULL)) {
    fprintf(stderr, "evictd: --tls-cert and --tls-key go together\n");
    return -1;
  }
  if (cfg->tls_cert != NULL) {
    gnutls_certificate_credentials_t cred;
    gnutls_datum_t c, k;
    int r;
    if ((cfg->tls_cert_pem = read_pem("tls-cert", cfg->tls_cert)) == NULL ||
        (cfg->tls_key_pem = read_pem("tls-key", cfg->tls_key)) == NULL)
      return -1;
    /* Load the pair once here, for a clear word on what is wrong with it
     * (libmicrohttpd would only fail to start). */
    c = (gnutls_datum_t){(unsigned char *)cfg->tls_cert_pem,
                         (unsigned)strlen(cfg->tls_cert_pem)};
    k = (gnutls_datum_t){(unsigned char *)cfg->tls_key_pem,
                         (unsigned)strlen(cfg->tls_key_pem)};
    if (gnutls_certificate_allocate_credentials(&cred) < 0)
      return -1;
    r = gnutls_certificate_set_x509_key_mem(cred, &c, &k, GNUTLS_X509_FMT_PEM);
    gnutls_certificate_free_credentials(cred);
    if (r < 0) {
      fprintf(stderr, "evictd: --tls-cert %s with --tls-key %s: %s\n",
              cfg->tls_cert, cfg->tls_key, gnutls_strerror(r));
      return -1;
    }
  }
  if (cfg->budget > cfg->max_budget) {
    fprintf(stderr, "evictd: --budget %u is above --max-budget %u\n",
            cfg->budget, cfg->max_budget);
    return -1;
  }
  if (cfg->sinks >= cfg->budget) {
    fprintf(stderr, "evictd: --sinks %u must be below --budget %u\n",
            cfg->sinks, cfg->budget);
    return -1;
  }
  if (cfg->lookahead > cfg->max_lookahead) {
    fprintf(stderr, "evictd: --lookahead %u is above --max-lookahead %u\n",
            cfg->lookahead, cfg->max_lookahead);
    return -1;
  }
  if ((uint64_t)cfg->max_budget + cfg->max_lookahead > UINT32_MAX) {
    fprintf(stderr, "evictd: --max-budget %u plus --max-lookahead %u slots "
            "do not fit 32-bit slot numbers\n", cfg->max_budget,
            cfg->max_lookahead);
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  struct option longopts[NOPTIONS + 1];
  evd_config_t cfg;
  size_t i;
  int c, idx;

#ifdef EVD_FIU
  fiu_init(0); /* the fault tests' build: points are enabled by fiu-ctrl */
#endif
  evd_config_defaults(&cfg);
  for (i = 0; i < NOPTIONS; i++) {
    const char *v = options[i].env ? getenv(options[i].env) : NULL;
    if (v != NULL && apply(&options[i], options[i].env, v, &cfg) != 0)
      return 2;
  }
  for (i = 0; i < NOPTIONS; i++) {
    longopts[i].name = options[i].flag;
    longopts[i].has_arg = options[i].arg ? required_argument : no_argument;
    longopts[i].flag = NULL;
    longopts[i].val = 0;
  }
  memset(&longopts[NOPTIONS], 0, sizeof longopts[NOPTIONS]);
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":", longopts, &idx)) != -1) {
    char source[64];
    const option_t *o;
    if (c == '?' || c == ':') {
      fprintf(stderr, "evictd: %s '%s' (see --help)\n",
              c == ':' ? "missing value for" : "unknown option",
              argv[optind - 1]);
      return 2;
    }
    o = &options[idx];
    if (strcmp(o->flag, "help") == 0) {
      usage(stdout);
      return 0;
    }
    if (strcmp(o->flag, "probe") == 0)
      return evd_probe(optarg, 5000);
    if (strcmp(o->flag, "version") == 0) {
      printf("evictd %s\n", EVD_VERSION);
      return 0;
    }
    snprintf(source, sizeof source, "--%s", o->flag);
    if (apply(o, source, o->arg ? optarg : "1", &cfg) != 0)
      return 2;
  }
  if (optind < argc) {
    fprintf(stderr, "evictd: unexpected argument '%s' (see --help)\n",
            argv[optind]);
    return 2;
  }
  if (check(&cfg) != 0)
    return 2;
  evd_log_setup(cfg.log_level, log_format);
  if (fsync_given && cfg.state_dir == NULL)
    evd_log(EVD_LOG_WARN, "--fsync (or EVICTD_FSYNC) has no effect without "
                          "--state-dir: sessions live in memory only and are "
                          "lost when the daemon stops");
  c = evd_server_run(&cfg);
  free((char *)cfg.token);
  free(cfg.tls_cert_pem);
  free(cfg.tls_key_pem);
  return c;
}
