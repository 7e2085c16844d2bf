/* A request's fields, checked (fields.c): each reader takes one field of
 * the body, its default when it is missing or null, or refuses it with
 * the field's name and a sentence for the 400 that answers it; the prompt
 * in every form llama-server takes, tokenized into the task. */
#ifndef EVICTD_LLAMA_SERVE_FIELDS_H
#define EVICTD_LLAMA_SERVE_FIELDS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "serve/http/http.h"
#include "serve/queue/tasks.h"
#include "serve/shared/site.h"

/* Each reader takes the field `name` of body: 0 and the value (def when it
 * is missing or null), or -1 with `bad` (the field) and `why` (a sentence)
 * set, for a 400. */
typedef struct fields_s {
  json_t *body;
  const char *bad;
  char why[480];
} fields_t;

/* Refuses name: f's field and sentence set for a 400; -1. */
int field_bad(fields_t *f, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

int field_int(fields_t *f, const char *name, long long lo, long long hi,
              long long def, long long *out);
/* How many tokens to generate, under llama-server's names: the first of
 * "n_predict", "max_completion_tokens" and "max_tokens" that is there and
 * not null (llama-server's order), 1 to max, -1 meaning max (until an end
 * token or the cap); def when none is. */
int field_n_predict(fields_t *f, long long max, long long def,
                    long long *out);
int field_num(fields_t *f, const char *name, double lo, double hi,
              double def, double *out);
int field_bool(fields_t *f, const char *name, bool def, bool *out);
/* A string, or a list of up to `max` strings (none empty): into the
 * task's stop strings. */
int field_stop(fields_t *f, const char *name, uint32_t max, want_t *w);

/* A field serve does not honour, refused unless its value asks for
 * nothing: null, false, an empty string, list or object, the number
 * `same`, or the string `text` (also as {"type": text}, as OpenAI's
 * response_format says plain text). */
typedef struct unhonoured_s {
  const char *name;
  double same;
  const char *text;
} unhonoured_t;

/* llama-server's return_progress and timings_per_token (true or false),
 * from f's body: EV_PROGRESS events (t->want.progress) for a stream, the
 * timings in every chunk (*timings). Taken out of params (the sampler's),
 * where chain_make refuses them for the routes that read them not. */
int field_extras(fields_t *f, json_t *params, bool stream, bool *timings,
                 task_t *t);

/* Refuses (-1, why set) the first field of list (ended by a NULL name)
 * whose value asks for something. */
int field_unhonoured(fields_t *f, const unhonoured_t *list);

/* The prompt of a legacy completion into t's tokens: a string, a list of
 * one string, a list of token ids, or a list of one such list (as
 * llama-server takes them). 0, or -1 with why set. */
int field_prompt_any(fields_t *f, const site_t *site, const char *name,
                     task_t *t);

/* Whether /completion's prompt p is a list of several prompts, as
 * llama-server reads it: a non-empty list with no token id in it (one
 * with ids is a prompt of ids and strings). */
bool field_prompt_list(json_t *p);

/* One of /completion's prompts p into t's tokens, as llama-server's
 * tokenize_input_subprompt reads it: a string (the BOS first); token ids
 * as given; ids and strings mixed (each string tokenized in place, the
 * BOS before it when it comes first); an object {"prompt_string": one
 * of those} ("multimodal_data" refused: no images). item: its index among
 * several, which the refusal names, or -1. 0, or -1 with why set. */
int field_prompt_of(fields_t *f, const site_t *site, const char *name,
                    json_t *p, long item, task_t *t);

/* The prompt text into t's tokens (special: a chat template's text, whose
 * special tokens' text becomes those tokens); -1 with why set. */
int field_prompt(fields_t *f, const site_t *site, const char *name,
                 const char *text, size_t len, bool special, task_t *t);


/* The field "model", when given, must be a string (serve answers with
 * its own model whatever it names, as llama-server does): 0, or -1 with
 * why set. */
int field_model(fields_t *f);

/* A 400 naming f's field and sentence (f->bad NULL: a 500, out of memory):
 * the answer to a request whose fields f refused. */
enum MHD_Result fields_refuse(call_t *c, const fields_t *f);

#endif
