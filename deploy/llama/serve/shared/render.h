/* A chat request as the model's prompt, through llama.cpp's own chat
 * templates (render.c over upstream/templates.h): the rendered text, what
 * the format asks of the sampler, how to read the answer back. */
#ifndef EVICTD_LLAMA_SERVE_RENDER_H
#define EVICTD_LLAMA_SERVE_RENDER_H

#include <jansson.h>
#include <stddef.h>

#include "buf.h"
#include "serve/queue/tasks.h"
#include "serve/shared/fields.h"
#include "serve/shared/site.h"

/* A chat request (its messages, tools, tool_choice, response_format, ...)
 * through the templates (upstream/templates.h's up_chat_apply): *out its
 * answer, the prompt's text, what the sampler needs, how to read the text
 * back (a new reference). 0, or -1 with f's why set (a 400). */
int render_apply(fields_t *f, const site_t *site, json_t *body, json_t **out);

/* The same, messages taken from min of them (Anthropic's route takes
 * none, as llama-server's: the template's generation prompt alone). */
int render_apply_min(fields_t *f, const site_t *site, json_t *body, size_t min,
                     json_t **out);

/* How many tokens a render_apply answer's prompt makes, tokenized as a
 * request's is (the BOS, the template's special tokens as themselves):
 * the count, or -1 with f's why set ("messages"), or -1 alone when out of
 * memory. */
int render_count_tokens(fields_t *f, const site_t *site, json_t *applied);

/* Messages alone through the templates, ending where the assistant's
 * answer begins, into out. 0, or -1 with f's why set. */
int render_prompt(fields_t *f, const site_t *site, json_t *messages,
                  evd_buf_t *out);


/* A chat request (body, OpenAI's, of at least min messages) rendered into
 * t's prompt, tokenized as a request's is (the template's special tokens
 * as themselves), with the format's stop strings after t's own; *fmt the
 * template's answer (the sampler's part of it: chain_params), *parser
 * the format's parser as JSON text (malloc'd; NULL when it has none). 0,
 * or -1 with f's why set (bad NULL: out of memory). */
int render_task(fields_t *f, const site_t *site, json_t *body, size_t min,
                task_t *t, json_t **fmt, char **parser);

/* The chat format's extra stop strings (up_chat_apply's
 * "additional_stops": a list of strings, or NULL) added to t's own: they
 * end the text as the request's do. 0, or -1 when out of memory. */
int render_stops(json_t *extra, task_t *t);

#endif
