/* llama-server's routes that say what the server is (props.c): GET /props
 * and GET /slots. */
#ifndef EVICTD_LLAMA_SERVE_API_PROPS_H
#define EVICTD_LLAMA_SERVE_API_PROPS_H

#include "serve/http/http.h"

/* The routes, for the transport (serve.c registers them). */
extern const http_route_t props_routes[];

#endif
