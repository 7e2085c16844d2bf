/* evictd-llama serve: a completion server whose requests keep their KV
 * cache through evictd. Its parts: the queue (tasks.c), the engine thread
 * (engine.c), the HTTP side (http.c with reply.c, native.c, status.c),
 * and this command (serve.c: options, the listening socket, the life of
 * the process). */
#ifndef EVICTD_LLAMA_SERVE_H
#define EVICTD_LLAMA_SERVE_H

#include <stdint.h>

#include "common/link.h"
#include "evictd/client.h"
#include "common/lm.h"

typedef struct serve_opts_s {
  lm_settings_t lm;
  link_opts_t link;
  const char *listen;        /* HOST:PORT or unix:/path */
  const char *host;          /* --host and --port: llama-server's spelling */
  uint32_t port;             /* of --listen HOST:PORT (0: not given) */
  const char *alias;         /* the model's name in answers */
  const char *api_key;       /* --api-key, or read from --api-key-file */
  const char *api_key_file;
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
  /* Conversations (serve/convs.c): a request's sequence stays parked when
   * it ends, and a request whose tokens extend it continues it. */
  bool no_cache_prompt;      /* --no-cache-prompt: nothing kept, nothing
                                continued (cache_prompt false for all) */
  bool cache_prompt;         /* --cache-prompt: the default, said again */
  int64_t cache_ram;         /* --cache-ram MiB: parked sequences saved
                                to host memory when their slot is needed,
                                up to this (-1: no limit, 0: none saved) */
  const char *cache_dir;     /* --cache-dir: saved ones also on disk,
                                found again after a restart */
  const char *dump;          /* --dump PREFIX: the run record (tests) */
} serve_opts_t;

/* evictd-llama serve's command line; the process exit status. */
int serve_main(int argc, char **argv);

#endif
