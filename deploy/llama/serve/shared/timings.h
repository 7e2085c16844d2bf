/* llama-server's own fields, which every API's answers may carry beside
 * their own (timings.c): a task's "timings", a stream's timings so far
 * (timings_per_token) and prompt_progress (return_progress), and the
 * "__verbose" of an OpenAI answer (what /completion would answer). */
#ifndef EVICTD_LLAMA_SERVE_TIMINGS_H
#define EVICTD_LLAMA_SERVE_TIMINGS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "serve/queue/tasks.h"
#include "serve/shared/site.h"

/* llama-server's "timings" of a finished task that predicted tokens:
 * cache_n, prompt_n, prompt_ms, prompt_per_token_ms, prompt_per_second,
 * predicted_n, predicted_ms, predicted_per_token_ms,
 * predicted_per_second. */
json_t *timings_json(const task_t *t, uint32_t predicted);

/* A stream's timings so far at event e (timings_per_token): at an
 * EV_PROGRESS the prompt's positions computed and their time, at an
 * EV_TEXT the prompt's and the tokens' so far. */
json_t *timings_now(const task_t *t, const event_t *e);

/* llama-server's prompt_progress of an EV_PROGRESS event: {"total",
 * "cache", "processed", "time_ms"}. */
json_t *timings_progress(const task_t *t, const event_t *e);

/* /completion's stop_type of a finish: "eos", "word" or "limit". */
const char *timings_stop_type(finish_t f);

/* The stop string (of t's) that ended a choice, or "". */
const char *timings_stopping_word(const task_t *t, finish_t f,
                                  uint32_t stop);

/* The prompt as llama-server shows it: its tokens' text, BOS and control
 * tokens included (a new reference, NULL when out of memory). */
json_t *timings_prompt(const site_t *site, const task_t *t);

/* llama-server's "__verbose" of an OpenAI answer (its request's
 * "verbose", by default serve --verbose): what /completion would answer
 * for choice i of t, its "prompt" the text of the prompt's tokens as
 * decoded (the template's rendering, BOS included). text: the choice's
 * whole text ("" in a stream, whose chunks had it, as llama-server's).
 * A new reference, or NULL when out of memory. */
json_t *timings_verbose(const site_t *site, const task_t *t, uint32_t i,
                        const char *text, size_t len, finish_t fin,
                        uint32_t tokens, uint32_t stop);

#endif
