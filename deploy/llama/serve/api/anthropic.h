/* Anthropic's Messages API (anthropic.c, with anthropic_in.c): POST
 * /v1/messages and POST /v1/messages/count_tokens, every answer of both
 * in Anthropic's shapes. */
#ifndef EVICTD_LLAMA_SERVE_API_ANTHROPIC_H
#define EVICTD_LLAMA_SERVE_API_ANTHROPIC_H

#include <jansson.h>

#include "serve/http/http.h"
#include "serve/shared/fields.h"

/* The routes, for the transport (serve.c registers them). */
extern const http_route_t anthropic_routes[];

/* ---- anthropic_in.c ---------------------------------------------------- */

/* The Anthropic request f->body as an OpenAI chat request
 * for chat_apply and sampling_params (*chat, a new reference): messages
 * (system first; a user's tool results as tool messages, an assistant's
 * tool_use blocks as its tool calls), tools, tool_choice,
 * parallel_tool_calls, chat_template_kwargs (enable_thinking false unless
 * given) and reasoning_format none. 0, or -1 with f's bad and why set
 * (bad NULL: out of memory). */
int anthropic_convert(fields_t *f, json_t **chat);

#endif
