/* What every request of serve may read (the server's, made at start and
 * read-only while it serves; the queue, the board and the stores lock
 * themselves), and what every answer says it was made by. The layer
 * beneath the APIs (this folder: answers from tasks, fields, templates,
 * sampling, probabilities, timings) takes it from the transport's call
 * (call_t's ctx). */
#ifndef EVICTD_LLAMA_SERVE_SITE_H
#define EVICTD_LLAMA_SERVE_SITE_H

#include <jansson.h>
#include <stdbool.h>

#include "common/lm.h"
#include "serve/opts.h"
#include "serve/queue/stats.h"
#include "serve/queue/tasks.h"

typedef struct site_s {
  const serve_opts_t *o;
  const lm_t *lm;         /* tokenizing only: the vocabulary is read-only */
  tq_t *q;                /* the tasks */
  board_t *board;         /* the engine's figures (GET /metrics, /slots) */
  const char *model;      /* the model's name in answers (--alias) */
  json_t *aliases, *tags; /* -a's names and --tags, sorted, each once (GET
                             /v1/models) */
  long long created;      /* when serve started (GET /v1/models) */
  struct up_chat_s *chat; /* the chat templates (llama.cpp's common) */
  json_t *defaults;       /* the request defaults the command line set,
                             under llama-server's names: the sampler's
                             (--temp, ...) and a chat's (render.c:
                             --reasoning-format, --chat-template-kwargs) */
  bool ui;                /* the web UI answers / (GET /props's ui) */
  json_t *ui_settings;    /* --ui-config's, or NULL (GET /props) */
  struct rstore_s *responses; /* stored responses (api/rstore.c) */
  struct tokcache_s *tokens;  /* prompts' tokens kept for the next that
                                 begins like them (tokcache.h) */
  struct rcache_s *renders;   /* chats' renders kept for the next that
                                 extends them (rcache.h) */
} site_t;

/* What every OpenAI answer says it was made by (system_fingerprint) and
 * /props's build_info: llama-server's "b<build>-<commit>" of the llama.cpp
 * linked (llama.mk's EVD_LLAMA_CPP_COMMIT; the build number is 0, what
 * llama.cpp's own build gives a tree without its git history, as the
 * pinned npm bundle is), then serve's own name and version. Clients and
 * llama.cpp's tests read the leading "b". */
#define SERVE_FINGERPRINT \
  "b0-" EVD_LLAMA_CPP_COMMIT "-evictd-llama-" EVD_CLIENT_VERSION

#endif
