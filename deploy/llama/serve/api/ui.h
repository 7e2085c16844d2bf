/* llama.cpp's web UI, the page llama-server answers `/` with (ui.c): the
 * bundle built into serve (deploy/llama/ui-build.sh), or with --path DIR
 * that folder's files, each answered as llama-server answers it (gzip,
 * ETag and 304, its caching, COEP and COOP on the page), without the API
 * key. */
#ifndef EVICTD_LLAMA_SERVE_API_UI_H
#define EVICTD_LLAMA_SERVE_API_UI_H

#include <stdbool.h>
#include <stddef.h>

#include "serve/http/http.h"

typedef struct ui_s ui_t;

/* Whether this build carries the UI (make UI=0 builds it without). */
bool ui_built_in(void);

/* The UI's routes: with path (--path DIR) that folder's files, else the
 * bundle built in. 0 and *out (NULL when there is nothing to serve: no
 * bundle built in and no path); or -1 with a sentence in err (a path that
 * is no folder, a bundle that does not read). */
int ui_open(ui_t **out, const char *path, char *err, size_t errlen);

/* Its table of routes, for the transport (ended by a NULL path). */
const http_route_t *ui_routes(const ui_t *u);

/* How many files it serves (the bundle's; 0 for a folder's). */
size_t ui_count(const ui_t *u);

void ui_close(ui_t *u);

#endif
