/* llama-server's routes of the vocabulary and the templates
 * (tokenize.c): POST /tokenize, POST /detokenize, POST /apply-template. */
#ifndef EVICTD_LLAMA_SERVE_API_TOKENIZE_H
#define EVICTD_LLAMA_SERVE_API_TOKENIZE_H

#include "serve/http/http.h"

/* The routes, for the transport (serve.c registers them). */
extern const http_route_t tokenize_routes[];

#endif
