/* A chat request as the model's prompt (render.h), through llama.cpp's
 * own chat templates (upstream/templates.h: common's, Jinja as
 * llama-server renders them, with tools, tool_choice and response
 * formats; the GGUF's template, or ChatML for a model without one, as
 * llama-server falls back to), and what the format asks of the sampler (a
 * grammar, its triggers) and of the text that comes back (how to read
 * tool calls out of it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/shared/render.h"

#include "serve/shared/rcache.h"

#include "serve/upstream/templates.h"

/* The request with the server's chat defaults (serve --reasoning-format,
 * --reasoning-budget, --reasoning-budget-message, --chat-template-kwargs,
 * -rea, --reasoning-effort, ...) where it says nothing, as llama-server
 * fills them in: its chat_template_kwargs over the server's key by key,
 * its reasoning budget where it gives none or -1. A new reference, or
 * NULL when out of memory. */
static json_t *with_defaults(const site_t *site, json_t *body) {
  json_t *req = json_copy(body), *d = site->defaults, *v;
  if (req == NULL || d == NULL)
    return req;
  static const char *const keys[] = {"reasoning_format",
                                     "reasoning_budget_message", NULL};
  for (size_t i = 0; keys[i] != NULL; i++)
    if (json_object_get(req, keys[i]) == NULL &&
        (v = json_object_get(d, keys[i])) != NULL)
      json_object_set(req, keys[i], v);
  json_t *own = json_object_get(req, "reasoning_budget_tokens");
  if (own == NULL)
    own = json_object_get(req, "thinking_budget_tokens");
  if ((own == NULL || (json_is_integer(own) &&
                       json_integer_value(own) == -1)) &&
      (v = json_object_get(d, "reasoning_budget_tokens")) != NULL)
    json_object_set(req, "reasoning_budget_tokens", v);
  json_t *kw = json_object_get(d, "chat_template_kwargs");
  own = json_object_get(req, "chat_template_kwargs");
  if (kw != NULL && (own == NULL || json_is_object(own))) {
    json_t *m = json_copy(kw);
    if (m == NULL || (own != NULL && json_object_update(m, own) != 0) ||
        json_object_set_new(req, "chat_template_kwargs", m) != 0) {
      json_decref(req);
      return NULL;
    }
  }
  return req;
}

int render_apply(fields_t *f, const site_t *site, json_t *body, json_t **out) {
  return render_apply_min(f, site, body, 1, out);
}

int render_apply_min(fields_t *f, const site_t *site, json_t *body, size_t min,
                     json_t **out) {
  static const char *const roles[] = {"system", "developer", "user",
                                      "assistant", "tool", NULL};
  json_t *messages = json_object_get(body, "messages");
  size_t n = json_array_size(messages);
  *out = NULL;
  if (!json_is_array(messages) || n < min || n > 4096) {
    f->bad = "messages";
    snprintf(f->why, sizeof(f->why), "\"messages\" must be a list of %zu "
             "to 4096 messages", min);
    return -1;
  }
  /* The roles serve's contract names; common checks the rest. */
  for (size_t i = 0; i < n; i++) {
    json_t *role = json_object_get(json_array_get(messages, i), "role");
    const char *r = json_is_string(role) ? json_string_value(role) : "";
    int k = 0;
    while (roles[k] != NULL && strcmp(roles[k], r) != 0)
      k++;
    if (roles[k] == NULL) {
      f->bad = "messages";
      snprintf(f->why, sizeof(f->why), "message %zu needs a \"role\" "
               "(system, developer, user, assistant or tool) and a "
               "\"content\" (a string, or a list of text parts)", i);
      return -1;
    }
  }
  json_t *full = with_defaults(site, body);
  char err[480] = "out of memory";
  if (full != NULL)
    rcache_apply(site->renders, site->chat, full, out, err, sizeof(err));
  json_decref(full);
  if (*out == NULL) {
    f->bad = "messages";
    snprintf(f->why, sizeof(f->why), "%.*s", (int)sizeof(f->why) - 1, err);
    return -1;
  }
  return 0;
}

int render_prompt(fields_t *f, const site_t *site, json_t *messages,
                  evd_buf_t *out) {
  json_t *body = json_pack("{s:O}", "messages", messages), *ans;
  if (body == NULL || render_apply(f, site, body, &ans) != 0) {
    json_decref(body);
    return -1;
  }
  json_t *p = json_object_get(ans, "prompt");
  evd_buf_add(out, json_string_value(p) ? json_string_value(p) : "",
              json_string_length(p));
  json_decref(body);
  json_decref(ans);
  return out->oom ? -1 : 0;
}

int render_count_tokens(fields_t *f, const site_t *site, json_t *applied) {
  json_t *p = json_object_get(applied, "prompt");
  llama_token *toks = NULL;
  int n = lm_tokenize(site->lm, json_string_value(p) ? json_string_value(p)
                      : "", json_string_length(p), true, &toks);
  free(toks);
  if (n < 0) {
    f->bad = "messages";
    snprintf(f->why, sizeof(f->why), "cannot tokenize the prompt");
  }
  return n;
}

int render_stops(json_t *extra, task_t *t) {
  size_t n = json_array_size(extra);
  if (n == 0)
    return 0;
  char **s = realloc(t->want.stop, (t->want.n_stop + n) * sizeof(*s));
  if (s == NULL)
    return -1;
  t->want.stop = s;
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(extra, i);
    if (json_is_string(v) && json_string_length(v) > 0 &&
        (s[t->want.n_stop] = strdup(json_string_value(v))) != NULL)
      t->want.n_stop++;
  }
  return 0;
}

int render_task(fields_t *f, const site_t *site, json_t *body, size_t min,
                task_t *t, json_t **fmt, char **parser) {
  if (render_apply_min(f, site, body, min, fmt) != 0)
    return -1;
  json_t *p = json_object_get(*fmt, "prompt");
  json_t *ps = json_object_get(*fmt, "parser");
  *parser = ps != NULL ? json_dumps(ps, JSON_COMPACT) : NULL;
  if (render_stops(json_object_get(*fmt, "additional_stops"), t) != 0)
    return f->bad = NULL, -1;
  return field_prompt(f, site, "messages",
                      json_string_value(p) ? json_string_value(p) : "",
                      json_string_length(p), true, t);
}
