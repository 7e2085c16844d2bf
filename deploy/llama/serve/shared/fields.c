/* Reading a request body's fields for a task: numbers in their ranges,
 * booleans, stop strings, the prompt's tokens; every refusal names the
 * field, for a 400 (fields.h). A field that would change the
 * answer and that serve does not honour is refused (field_unhonoured);
 * only fields that change nothing are ignored. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/shared/fields.h"

#include "serve/shared/tokcache.h"

int field_bad(fields_t *f, const char *name, const char *fmt, ...) {
  va_list ap;
  f->bad = name;
  va_start(ap, fmt);
  vsnprintf(f->why, sizeof(f->why), fmt, ap);
  va_end(ap);
  return -1;
}

/* The field, or NULL when it is missing or null. */
static json_t *get(fields_t *f, const char *name) {
  json_t *v = json_object_get(f->body, name);
  return v == NULL || json_is_null(v) ? NULL : v;
}

int field_int(fields_t *f, const char *name, long long lo, long long hi,
              long long def, long long *out) {
  json_t *v = get(f, name);
  *out = def;
  if (v == NULL)
    return 0;
  if (!json_is_integer(v) || json_integer_value(v) < lo ||
      json_integer_value(v) > hi)
    return field_bad(f, name, "\"%s\" must be a whole number from %lld to %lld",
                     name, lo, hi);
  *out = json_integer_value(v);
  return 0;
}

int field_n_predict(fields_t *f, long long max, long long def,
                    long long *out) {
  static const char *const names[] = {"n_predict", "max_completion_tokens",
                                      "max_tokens"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    json_t *v = get(f, names[i]);
    if (v == NULL)
      continue;
    if (json_is_integer(v) && json_integer_value(v) == -1) {
      *out = max;
      return 0;
    }
    return field_int(f, names[i], 1, max, def, out);
  }
  *out = def;
  return 0;
}

int field_num(fields_t *f, const char *name, double lo, double hi,
              double def, double *out) {
  json_t *v = get(f, name);
  *out = def;
  if (v == NULL)
    return 0;
  if (!json_is_number(v) || !(json_number_value(v) >= lo) ||
      !(json_number_value(v) <= hi))
    return field_bad(f, name, "\"%s\" must be a number from %g to %g", name, lo,
                     hi);
  *out = json_number_value(v);
  return 0;
}

int field_bool(fields_t *f, const char *name, bool def, bool *out) {
  json_t *v = get(f, name);
  *out = def;
  if (v == NULL)
    return 0;
  if (!json_is_boolean(v))
    return field_bad(f, name, "\"%s\" must be true or false", name);
  *out = json_is_true(v);
  return 0;
}

int field_stop(fields_t *f, const char *name, uint32_t max, want_t *w) {
  json_t *v = get(f, name);
  size_t n = v == NULL ? 0 : json_is_string(v) ? 1 : json_array_size(v);
  if (v != NULL && !json_is_string(v) && !json_is_array(v))
    return field_bad(f, name, "\"%s\" must be a string or a list of strings",
                     name);
  if (n > max)
    return field_bad(f, name, "\"%s\" has %zu strings: at most %u", name, n,
                     max);
  if (n > 0 && (w->stop = calloc(n, sizeof(*w->stop))) == NULL)
    return field_bad(f, name, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *s = json_is_string(v) ? v : json_array_get(v, i);
    if (!json_is_string(s) || json_string_length(s) == 0 ||
        json_string_length(s) > 256)
      return field_bad(f, name, "\"%s\" must hold strings of 1 to 256 bytes",
                       name);
    if ((w->stop[i] = strdup(json_string_value(s))) == NULL)
      return field_bad(f, name, "out of memory");
    w->n_stop = (uint32_t)i + 1;
  }
  return 0;
}

int field_prompt(fields_t *f, const site_t *site, const char *name,
                 const char *text, size_t len, bool special, task_t *t) {
  /* The vocabulary is only read: tokenizing here is safe beside the
   * engine's decoding. */
  int n = site->tokens != NULL
              ? tokcache_tokenize(site->tokens, text, len, special,
                                  &t->prompt, NULL)
              : lm_tokenize(site->lm, text, len, special, &t->prompt);
  if (n <= 0)
    return field_bad(f, name, n == 0 ? "the prompt has no tokens (and the "
                     "model adds no BOS)" : "cannot tokenize the prompt");
  t->n_prompt = (uint32_t)n;
  return 0;
}

/* Whether v is a value of a field that asks for nothing: null, false, 0,
 * an empty string, list or object, or the kind's own neutral value. */
static bool neutral(const unhonoured_t *u, json_t *v) {
  if (v == NULL || json_is_null(v) || json_is_false(v))
    return true;
  if (json_is_number(v))
    return json_number_value(v) == u->same;
  if (json_is_string(v))
    return json_string_length(v) == 0 ||
           (u->text != NULL && strcmp(json_string_value(v), u->text) == 0);
  if (json_is_array(v))
    return json_array_size(v) == 0;
  if (json_is_object(v)) {
    json_t *type = json_object_get(v, "type");
    return json_object_size(v) == 0 ||
           (u->text != NULL && json_object_size(v) == 1 &&
            json_is_string(type) &&
            strcmp(json_string_value(type), u->text) == 0);
  }
  return false;
}

int field_unhonoured(fields_t *f, const unhonoured_t *list) {
  for (const unhonoured_t *u = list; u->name != NULL; u++)
    if (!neutral(u, json_object_get(f->body, u->name)))
      return field_bad(f, u->name, "\"%s\" is not supported by this server: it "
                       "would change the answer, so it is refused rather than "
                       "ignored (leave it out%s%s%s)", u->name,
                       u->text ? ", or send \"" : "", u->text ? u->text : "",
                       u->text ? "\"" : "");
  return 0;
}

int field_prompt_any(fields_t *f, const site_t *site, const char *name,
                     task_t *t) {
  json_t *p = json_object_get(f->body, name);
  /* A list of one prompt (a string, or a list of ids). */
  if (json_is_array(p) && json_array_size(p) == 1 &&
      (json_is_string(json_array_get(p, 0)) ||
       json_is_array(json_array_get(p, 0))))
    p = json_array_get(p, 0);
  if (json_is_string(p))
    return field_prompt(f, site, name, json_string_value(p),
                        json_string_length(p), false, t);
  size_t n = json_array_size(p);
  if (!json_is_array(p) || n == 0)
    return field_bad(f, name, "\"%s\" is required: a string, or a list of "
                     "token ids (or a list of one of either: one prompt per "
                     "request)", name);
  /* Token ids, as given: the BOS is the client's to put. */
  if ((t->prompt = malloc(n * sizeof(*t->prompt))) == NULL)
    return field_bad(f, name, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(p, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) >= site->lm->n_vocab)
      return field_bad(f, name, "\"%s\" as token ids: item %zu is not an id "
                       "of the vocabulary (0 to %d)", name, i,
                       site->lm->n_vocab - 1);
    t->prompt[i] = (llama_token)json_integer_value(v);
  }
  t->n_prompt = (uint32_t)n;
  return 0;
}

bool field_prompt_list(json_t *p) {
  size_t i;
  json_t *v;
  if (!json_is_array(p) || json_array_size(p) == 0)
    return false;
  json_array_foreach(p, i, v) {
    if (json_is_integer(v))
      return false;
  }
  return true;
}

/* Appends text's tokens (the BOS before them when bos) to t's prompt of
 * *cap; -1 when it cannot be tokenized or memory runs out. */
static int add_text(const site_t *site, json_t *s, bool bos, task_t *t,
                    size_t *cap) {
  llama_token *toks = NULL;
  int n = (bos ? lm_tokenize : lm_tokenize_more)(
      site->lm, json_string_value(s), json_string_length(s), false, &toks);
  if (n < 0)
    return -1;
  if (t->n_prompt + (size_t)n > *cap) {
    size_t want = (*cap ? *cap * 2 : 64) + (size_t)n;
    llama_token *p = realloc(t->prompt, want * sizeof(*p));
    if (p == NULL) {
      free(toks);
      return -1;
    }
    t->prompt = p;
    *cap = want;
  }
  if (n > 0)
    memcpy(t->prompt + t->n_prompt, toks, (size_t)n * sizeof(*toks));
  t->n_prompt += (uint32_t)n;
  free(toks);
  return 0;
}

int field_prompt_of(fields_t *f, const site_t *site, const char *name,
                    json_t *p, long item, task_t *t) {
  char at[48] = "";
  if (item >= 0)
    snprintf(at, sizeof(at), " item %ld", item);
  if (json_is_object(p)) {
    json_t *media = json_object_get(p, "multimodal_data");
    if (media != NULL && !json_is_null(media) &&
        !(json_is_array(media) && json_array_size(media) == 0))
      return field_bad(f, name, "\"%s\"%s: \"multimodal_data\" is not "
                       "supported: the model takes text alone", name, at);
    p = json_object_get(p, "prompt_string");
    if (!json_is_string(p) && !json_is_array(p))
      return field_bad(f, name, "\"%s\"%s: an object prompt needs "
                       "\"prompt_string\" (a string, or token ids and strings)",
                       name, at);
  } else if (field_prompt_list(p)) { /* in a list, or one of one */
    return field_bad(f, name, "\"%s\"%s: a list of strings is a list of "
                     "prompts, which cannot be one of several", name, at);
  }
  if (json_is_string(p))
    return field_prompt(f, site, name, json_string_value(p),
                        json_string_length(p), false, t);
  size_t n = json_array_size(p), cap = 0, i;
  json_t *v;
  if (!json_is_array(p) || n == 0)
    return field_bad(f, name, "\"%s\"%s must be a string, token ids "
                     "(strings among them tokenized), an object "
                     "{\"prompt_string\"}, or a list of such prompts", name,
                     at);
  /* Token ids as given (the BOS is the client's to put), each string
   * tokenized where it stands: the BOS before it when it comes first, as
   * llama-server's tokenize_mixed. */
  t->n_prompt = 0;
  json_array_foreach(p, i, v) {
    if (json_is_string(v)) {
      if (add_text(site, v, i == 0, t, &cap) != 0)
        return field_bad(f, name, "\"%s\"%s: cannot tokenize its string %zu",
                         name, at, i);
      continue;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) >= site->lm->n_vocab)
      return field_bad(f, name, "\"%s\"%s as token ids: item %zu is neither "
                       "an id of the vocabulary (0 to %d) nor a string", name,
                       at, i, site->lm->n_vocab - 1);
    if (t->n_prompt == cap) {
      size_t want = cap ? cap * 2 : n;
      llama_token *q = realloc(t->prompt, want * sizeof(*q));
      if (q == NULL)
        return field_bad(f, name, "out of memory");
      t->prompt = q;
      cap = want;
    }
    t->prompt[t->n_prompt++] = (llama_token)json_integer_value(v);
  }
  if (t->n_prompt == 0)
    return field_bad(f, name, "\"%s\"%s has no tokens", name, at);
  return 0;
}

int field_extras(fields_t *f, json_t *params, bool stream, bool *timings,
                 task_t *t) {
  bool progress;
  if (field_bool(f, "return_progress", false, &progress) != 0 ||
      field_bool(f, "timings_per_token", false, timings) != 0)
    return -1;
  /* As llama-server's: progress is sent in a stream alone. */
  t->want.progress = progress && stream;
  json_object_del(params, "return_progress");
  json_object_del(params, "timings_per_token");
  return 0;
}

int field_model(fields_t *f) {
  json_t *model = json_object_get(f->body, "model");
  if (model == NULL || json_is_null(model) || json_is_string(model))
    return 0;
  return field_bad(f, "model", "\"model\" must be a string");
}

enum MHD_Result fields_refuse(call_t *c, const fields_t *f) {
  if (f->bad == NULL)
    return http_error(c, 500, "out_of_memory", NULL, "out of memory");
  return http_error(c, 400, "invalid_request", f->bad, "%s", f->why);
}
