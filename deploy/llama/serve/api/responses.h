/* OpenAI's Responses API (responses.c, its store rstore.c): POST
 * /v1/responses (and /responses), GET and DELETE /v1/responses/{id}. */
#ifndef EVICTD_LLAMA_SERVE_API_RESPONSES_H
#define EVICTD_LLAMA_SERVE_API_RESPONSES_H

#include "serve/http/http.h"

/* The routes, for the transport (serve.c registers them, and the store:
 * site_t's responses, rstore.h). */
extern const http_route_t responses_routes[];

#endif
