/* evictd-llama serve's settings: its own options and llama-server's flags
 * as the command line gave them (serve.c, options.c, flags.c), read by
 * every part of serve and written by none after start. */
#ifndef EVICTD_LLAMA_SERVE_OPTS_H
#define EVICTD_LLAMA_SERVE_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/cli.h"
#include "common/link.h"
#include "common/lm.h"
#include "evictd/client.h"

/* Who serve says it is in its messages. */
#define SERVE_WHO "evictd-llama serve"

struct json_t;

/* llama-server's flags as they were given (serve/flags.c), before
 * flags_check and flags_model settle them into serve's settings. */
typedef struct serve_llama_s {
  int64_t ctx;            /* -c N: every sequence's cells together (-1:
                             not given; 0: the model's training context) */
  int64_t ctx_slot;       /* --kv-unified-per-slot N: one's (-1: not
                             given) */
  int64_t batch, ubatch;  /* -b, -ub: the prefill chunk (-1: not given) */
  int64_t keep;           /* --keep N: the prompt's tokens kept after the
                             BOS (-1: not given) */
  int64_t n_predict;      /* -n N (0: not given; -1: until an end token) */
  int jinja;              /* --jinja 1 (the default), --no-jinja 0 */
  int warmup;             /* --warmup 1 (the default): two passes before
                             serving (lm_warmup); --no-warmup 0 */
  int slots;              /* --slots 1 (the default), --no-slots 0: GET
                             /slots answers, or 501 (api/props.c) */
  int ui;                 /* --ui 1 (the default), --no-ui 0: llama.cpp's
                             web UI at / (api/ui.c) */
  const char *path;       /* --path DIR: its files at / instead */
  const char *api_prefix; /* --api-prefix PREFIX: every route under it */
  const char *ui_config;  /* --ui-config JSON, or the text of
                             --ui-config-file: GET /props's ui_settings */
  const char *ui_config_file;
  const char *chat_template;      /* --chat-template NAME|JINJA, or the
                                     text of --chat-template-file */
  const char *chat_template_file;
  bool no_cache_idle;     /* --no-cache-idle-slots: as --cache-ram 0 */
  const cli_opt_t *device; /* the first device flag given (-ngl, ...):
                              accepted only where llama.cpp has no GPU */
  struct json_t *defaults; /* the request defaults the flags set, under
                              llama-server's field names (site_t's), or
                              NULL: none (owned: serve_main frees it) */
  struct json_t *ui_settings; /* ui_config parsed (owned, as defaults) */
} serve_llama_t;

typedef struct serve_opts_s {
  lm_settings_t lm;
  link_opts_t link;
  const char *listen;        /* HOST:PORT or unix:/path */
  const char *host;          /* --host and --port: llama-server's spelling */
  int64_t port;              /* of --listen HOST:PORT (0: any; -1: not
                                given) */
  const char *alias;         /* the model's name in answers (of -a's
                                comma-separated names, the first in
                                sorted order, as llama-server's) */
  const char *aliases;       /* -a's names as given (GET /v1/models) */
  const char *tags;          /* --tags A[,B]: GET /v1/models shows them */
  const char *api_key;       /* --api-key KEY[,KEY...] */
  const char *api_key_file;  /* --api-key-file: a key a line, '#'
                                lines comments */
  char **api_keys;           /* both's keys, NULL-terminated, or NULL:
                                none asked (http/http.c) */
  /* CORS, as llama-server's flags say it (NULL: its defaults, "*",
   * "GET, POST, DELETE, OPTIONS", "*"; credentials allowed). */
  const char *cors_origins;  /* "*", "localhost", an origin or a list */
  const char *cors_methods;  /* a preflight's Access-Control-Allow-Methods */
  const char *cors_headers;  /* its Access-Control-Allow-Headers */
  bool cors_credentials;     /* --cors-credentials: the default, said again */
  bool no_cors_credentials;  /* --no-cors-credentials */
  evd_session_cfg_t cfg;     /* budget, sinks, lookahead (< 0: the
                                daemon's defaults) */
  uint32_t parallel;         /* sequences decoding at once */
  uint32_t queue;            /* requests waiting beyond those */
  uint32_t n_predict_max;    /* the most tokens a choice may ask for */
  uint32_t n_predict;        /* -n: every route's default of max tokens
                                (0: each route's own) */
  /* Conversations (engine/park.c): a request's sequence stays parked when
   * it ends, and a request whose tokens extend it continues it. */
  bool verbose;              /* -v/--verbose: llama.cpp's whole log (as
                                --debug) and __verbose in answers */
  bool no_cache_prompt;      /* --no-cache-prompt: nothing kept, nothing
                                continued (cache_prompt false for all) */
  bool cache_prompt;         /* --cache-prompt: the default, said again */
  int64_t cache_ram;         /* --cache-ram MiB: parked sequences saved
                                to host memory when their slot is needed,
                                up to this (-1: no limit, 0: none saved) */
  const char *cache_dir;     /* --cache-dir: saved ones also on disk,
                                found again after a restart */
  uint32_t cache_write_ms;   /* --cache-write-ms: a parked conversation
                                is in --cache-dir within this of parking */
  uint32_t ctx_checkpoints;  /* --ctx-checkpoints N: a conversation's
                                state kept at its turns' boundaries, N
                                per slot (engine/park.c; 0: none) */
  const char *dump;          /* --dump PREFIX: the run record (tests) */
  serve_llama_t ls;          /* llama-server's flags */
} serve_opts_t;

/* An option's field, in serve_opts_t or its llama-server part (the
 * options' tables: serve.c's, flags.c's). */
#define OPT(f) offsetof(serve_opts_t, f)
#define LS(f) offsetof(serve_opts_t, ls.f)

#endif
