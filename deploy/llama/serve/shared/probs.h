/* A drawn token and its candidates (an EV_TOKEN event) as the APIs show
 * them (probs.c). */
#ifndef EVICTD_LLAMA_SERVE_PROBS_H
#define EVICTD_LLAMA_SERVE_PROBS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "serve/queue/tasks.h"
#include "serve/shared/site.h"

/* A copy of an EV_TOKEN event's bytes, aligned (the caller frees it), or
 * NULL (too short, out of memory). */
token_ev_t *probs_read(const char *bytes, size_t len);

/* OpenAI's chat logprobs entry of t: token, logprob, bytes, top_logprobs
 * (the first `top` candidates). */
json_t *probs_openai(const site_t *site, const token_ev_t *t, uint32_t top);

/* llama-server's completion_probabilities entry of t: logprob and
 * top_logprobs, or with post (post_sampling_probs) prob and top_probs. */
json_t *probs_native(const site_t *site, const token_ev_t *t, bool post);

/* The legacy completions' logprobs object (probs_legacy_new) and t added
 * to its lists; *offset is the text offset so far. */
json_t *probs_legacy_new(void);
void probs_legacy(const site_t *site, const token_ev_t *t, json_t *lp,
                  size_t *offset);

#endif
