/* llama.cpp's own /completion (native.c), as llama-server answers it. */
#ifndef EVICTD_LLAMA_SERVE_API_NATIVE_H
#define EVICTD_LLAMA_SERVE_API_NATIVE_H

#include "serve/http/http.h"

/* The routes, for the transport (serve.c registers them). */
extern const http_route_t native_routes[];

#endif
