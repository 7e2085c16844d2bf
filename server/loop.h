/* The daemon's life: one libuv loop that drives libmicrohttpd, reaps idle
 * sessions and turns SIGINT/SIGTERM into a graceful exit. */
#ifndef EVICTD_LOOP_H
#define EVICTD_LOOP_H

#include "api.h"

/* Runs the daemon with `cfg` until SIGINT or SIGTERM. Prints one line
 * naming the bound address when ready. Returns the process exit status: 0
 * after a graceful stop, 2 for a malformed --listen, 1 when it could not
 * start otherwise. */
int evd_server_run(const evd_config_t *cfg);

#endif
