/* Anthropic's Messages API (anthropic.c, with anthropic_in.c): POST
 * /v1/messages and POST /v1/messages/count_tokens, every answer of both
 * in Anthropic's shapes. */
#ifndef EVICTD_LLAMA_SERVE_API_ANTHROPIC_H
#define EVICTD_LLAMA_SERVE_API_ANTHROPIC_H

#include "serve/http/http.h"

/* The routes, for the transport (serve.c registers them). */
extern const http_route_t anthropic_routes[];

#endif
