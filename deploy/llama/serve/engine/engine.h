/* evictd-llama serve's engine: one thread that alone touches llama.cpp's
 * context and the evictd client (neither is shared between threads). It
 * admits tasks from the queue into free sequences and runs iterations:
 * ONE evictd batch with a step for every sequence (a prompt chunk while
 * prefilling, else the pending token), ONE llama_decode of all of them,
 * each answer followed into the cache (common/seq.c), then a token drawn
 * per sequence and emitted as events (bytes, a choice's end) into its
 * task. It formats nothing: the HTTP side turns events into answers. */
#ifndef EVICTD_LLAMA_ENGINE_H
#define EVICTD_LLAMA_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "common/lm.h"
#include "serve/opts.h"
#include "serve/queue/stats.h"
#include "serve/queue/tasks.h"

typedef struct engine_s engine_t;

/* Makes the engine: the evictd link, the sessions' settings (the options,
 * or for those not given the daemon's defaults, read from a probe session
 * created and deleted at once), llama.cpp's context for --parallel
 * sequences on lm (loaded); then starts its thread, which takes q's tasks
 * and writes its figures on board (both borrowed: they outlive it). 0 and
 * *out, or -1 with a sentence in err. */
int engine_start(engine_t **out, const serve_opts_t *o, lm_t *lm, tq_t *q,
                 board_t *board, char *err, size_t errlen);

/* The settings every session gets. */
void engine_settings(const engine_t *e, uint32_t *budget, uint32_t *sinks,
                     uint32_t *lookahead);

/* Stops: queued tasks are refused and running ones end (503
 * shutting_down), their sessions deleted best effort; joins the thread and
 * frees the engine. */
void engine_stop(engine_t *e);

#endif
