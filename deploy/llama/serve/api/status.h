/* serve's probes (status.c): GET /health (and /v1/health; no API key
 * asked) and GET /metrics (Prometheus's text: serve's own families and
 * llama-server's llamacpp: ones). */
#ifndef EVICTD_LLAMA_SERVE_API_STATUS_H
#define EVICTD_LLAMA_SERVE_API_STATUS_H

#include "serve/http/http.h"

/* The routes, for the transport (serve.c registers them). */
extern const http_route_t status_routes[];

#endif
