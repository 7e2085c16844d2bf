/* Anthropic's requests as OpenAI chat requests (anthropic_in.c), for
 * anthropic.c. */
#ifndef EVICTD_LLAMA_SERVE_API_ANTHROPIC_IN_H
#define EVICTD_LLAMA_SERVE_API_ANTHROPIC_IN_H

#include <jansson.h>

#include "serve/shared/fields.h"

/* The Anthropic request f->body as an OpenAI chat request
 * for render_apply and chain_params (*chat, a new reference): messages
 * (system first; a user's tool results as tool messages, an assistant's
 * tool_use blocks as its tool calls), tools, tool_choice,
 * parallel_tool_calls, chat_template_kwargs (enable_thinking false unless
 * given) and reasoning_format none. 0, or -1 with f's bad and why set
 * (bad NULL: out of memory). */
int anthropic_convert(fields_t *f, json_t **chat);

#endif
