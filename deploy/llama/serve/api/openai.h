/* OpenAI's API (openai.c): POST /v1/chat/completions, POST
 * /v1/completions, POST /v1/chat/completions/input_tokens, GET /v1/models,
 * and llama-server's paths without /v1. */
#ifndef EVICTD_LLAMA_SERVE_API_OPENAI_H
#define EVICTD_LLAMA_SERVE_API_OPENAI_H

#include "serve/http/http.h"

/* The routes, for the transport (serve.c registers them). */
extern const http_route_t openai_routes[];

#endif
