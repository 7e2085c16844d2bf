/* The rules between evictd-llama serve's options and llama-server's
 * flags (options.c), before and after the model is loaded. */
#ifndef EVICTD_LLAMA_SERVE_OPTIONS_H
#define EVICTD_LLAMA_SERVE_OPTIONS_H

#include "common/lm.h"
#include "serve/opts.h"

/* What options_check allocates for the options, freed as serve ends. */
typedef struct held_s {
  char listen[4200];     /* HOST:PORT, or unix:PATH of --host X.sock */
  char *keys_arg;        /* --api-key's copy and --api-key-file's text, */
  char *keys_file;       /* cut into the keys of o->api_keys */
  char *alias;           /* the name -a's list gives */
  char *template;        /* --chat-template-file's text */
  char *ui_config;       /* --ui-config-file's text */
} held_t;

/* Rules between options that need no model: where to listen, the API
 * keys, the model's name, then llama-server's flags' (the prefill chunk,
 * -b and -ub, as --lookahead; a sequence's cells, -c and
 * --kv-unified-per-slot, as --budget; -n; --no-cache-idle-slots; the chat
 * template file read). 0, or 2 having said why. */
int options_check(serve_opts_t *o, held_t *h);

/* Those that need the model (loaded): -c 0 (its training context),
 * --keep (its BOS), the device flags (whether llama.cpp has a GPU), and
 * the request defaults, checked by making a sampler of them, as a request
 * would. 0, or 2 having said why. */
int options_model(serve_opts_t *o, const lm_t *lm);

/* Frees what options_check held, and the flags' request defaults. */
void options_free(held_t *h, serve_opts_t *o);

#endif
