/* A request's sampler chain (chain.h), llama-server's
 * (upstream/sampler.h: llama.cpp's own common_sampler): its parameters are
 * the request's fields under llama-server's names, over what the chat
 * format asks (a grammar, its triggers) and the server's defaults (--temp,
 * --top-k, ...); one sampler per choice, choice i seeded with seed + i.
 * Made here, on the HTTP side, so that a bad value is a 400 naming it
 * before the request queues. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/shared/chain.h"

#include "serve/upstream/sampler.h"

/* The request's fields that are no sampler's: left out of the
 * parameters, so that a name the shim also reads (logprobs, as a count)
 * is not taken for another meaning. */
static const char *const not_sampling[] = {
    "messages", "prompt", "input", "tools", "tool_choice", "stream",
    "stream_options", "model", "n", "stop", "max_tokens",
    "max_completion_tokens", "max_output_tokens", "n_predict",
    "logprobs", "top_logprobs", "response_format", "cache_prompt",
    "parallel_tool_calls", "user", "metadata", "store", "instructions",
    "previous_response_id", "text", "truncation", NULL};

json_t *chain_params(const site_t *site, json_t *format, json_t *body) {
  json_t *p = format != NULL ? json_deep_copy(format) : json_object();
  if (p == NULL)
    return NULL;
  /* What the chat format made is not for the sampler (the prompt, how to
   * read the text back), or not a field of it. */
  static const char *const format_only[] = {
      "prompt", "parser", "chat_format", "additional_stops",
      "parse_tool_calls", NULL};
  for (size_t i = 0; format_only[i] != NULL; i++)
    json_object_del(p, format_only[i]);
  const char *key;
  json_t *v;
  json_object_foreach(body, key, v) {
    bool skip = false;
    for (size_t i = 0; not_sampling[i] != NULL && !skip; i++)
      skip = strcmp(key, not_sampling[i]) == 0;
    /* A chat's grammar holds the schema already; the request's own
     * grammar comes second (as llama-server merges them). */
    if (!skip && json_object_get(p, key) == NULL && !json_is_null(v))
      json_object_set(p, key, v);
  }
  /* A request's json_schema is its grammar: the server's default grammar
   * (--grammar) gives way to it, as in llama-server. */
  bool schema = json_object_get(p, "json_schema") != NULL;
  json_object_update_missing(p, site->defaults);
  json_t *g = json_object_get(site->defaults, "grammar");
  if (schema && g != NULL && json_object_get(p, "grammar") == g)
    json_object_del(p, "grammar");
  return p;
}

/* The preserved tokens (strings: tool-call markers) as token ids; those
 * that are not one token each are left out. 0, or -1 (out of memory). */
static int preserved(const site_t *site, json_t *list, task_t *t) {
  size_t n = json_array_size(list);
  if (n == 0)
    return 0;
  if ((t->want.preserved = calloc(n, sizeof(*t->want.preserved))) == NULL)
    return -1;
  for (size_t i = 0; i < n; i++) {
    json_t *s = json_array_get(list, i);
    llama_token *toks = NULL;
    int k = json_is_string(s)
                ? lm_tokenize_more(site->lm, json_string_value(s),
                                   json_string_length(s), true, &toks)
                : 0;
    if (k == 1)
      t->want.preserved[t->want.n_preserved++] = toks[0];
    free(toks);
  }
  return 0;
}

int chain_make(fields_t *f, const site_t *site, json_t *params,
               task_t *t) {
  char err[400];
  uint32_t n = t->want.n;
  /* llama-server's extra answers (progress events during the prompt,
   * timings in every chunk): the routes that send them took them out
   * (field_extras); the others refuse them, not ignore them. */
  static const char *const unsent[] = {"return_progress",
                                       "timings_per_token", NULL};
  for (size_t i = 0; unsent[i] != NULL; i++) {
    json_t *v = json_object_get(params, unsent[i]);
    if (v != NULL && !json_is_false(v) && !json_is_null(v)) {
      f->bad = unsent[i];
      snprintf(f->why, sizeof(f->why), "\"%s\" is not supported: this "
               "route sends no such events (false or leave it out)",
               unsent[i]);
      return -1;
    }
  }
  json_t *np = json_object_get(params, "n_probs");
  if (json_is_integer(np) && (json_integer_value(np) < 0 ||
                              json_integer_value(np) > SERVE_PROBS_MAX)) {
    f->bad = "n_probs";
    snprintf(f->why, sizeof(f->why), "\"n_probs\" must be a whole number "
             "from 0 to %d", SERVE_PROBS_MAX);
    return -1;
  }
  if (json_is_integer(np))
    t->want.n_probs = (uint32_t)json_integer_value(np);
  json_t *seed = json_object_get(params, "seed");
  /* Checked here: each choice's seed replaces it below, so the sampler
   * never sees the request's. */
  if (seed != NULL && !json_is_null(seed) && !json_is_integer(seed)) {
    f->bad = "seed";
    snprintf(f->why, sizeof(f->why), "\"seed\" must be an integer (-1: "
             "a random one)");
    return -1;
  }
  bool given = json_is_integer(seed) && json_integer_value(seed) != -1;
  uint64_t base = given ? (uint64_t)json_integer_value(seed) : t->want.seed;
  if ((t->want.samplers = calloc(n, sizeof(*t->want.samplers))) == NULL ||
      preserved(site, json_object_get(params, "preserved_tokens"), t) != 0) {
    f->bad = NULL;
    return -1;
  }
  for (uint32_t i = 0; i < n; i++) {
    json_object_set_new(params, "seed",
                        json_integer((json_int_t)((base + i) & 0xffffffffu)));
    char *text = json_dumps(params, JSON_COMPACT);
    int rc = text != NULL ? up_sampler_new(&t->want.samplers[i],
                                           site->lm->model, text, err,
                                           sizeof(err))
                          : -1;
    free(text);
    if (rc != 0) {
      /* The sentence names the field; the param is the first name in it. */
      f->bad = "sampling";
      const char *q = strchr(err, '"'), *e = q ? strchr(q + 1, '"') : NULL;
      static __thread char name[64];
      if (q != NULL && e != NULL && (size_t)(e - q - 1) < sizeof(name)) {
        memcpy(name, q + 1, (size_t)(e - q - 1));
        name[e - q - 1] = '\0';
        f->bad = name;
      }
      snprintf(f->why, sizeof(f->why), "%s", text != NULL ? err
                                                          : "out of memory");
      return -1;
    }
  }
  return 0;
}
