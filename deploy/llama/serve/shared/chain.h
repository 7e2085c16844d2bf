/* A request's sampler chain, llama-server's (chain.c over
 * upstream/sampler.h). */
#ifndef EVICTD_LLAMA_SERVE_CHAIN_H
#define EVICTD_LLAMA_SERVE_CHAIN_H

#include <jansson.h>

#include "serve/queue/tasks.h"
#include "serve/shared/fields.h"
#include "serve/shared/site.h"

/* A request's sampler parameters (a new object): format's (a chat
 * template's answer, or NULL), then body's fields under llama-server's
 * names, then the server's defaults, each only where the one before says
 * nothing. */
json_t *chain_params(const site_t *site, json_t *format, json_t *body);

/* Makes t's samplers (want.n, choice i seeded seed + i; the seed of
 * params, else want.seed), want.n_probs and want.preserved from params.
 * 0, or -1 with f's bad and why set (the shim's sentence names the
 * field). */
int chain_make(fields_t *f, const site_t *site, json_t *params,
               task_t *t);

#endif
