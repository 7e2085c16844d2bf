/* A chat request as the model's prompt, through llama.cpp's own chat
 * templates (upstream.h: common's, Jinja as llama-server renders them,
 * with tools, tool_choice and response formats; the GGUF's template, or
 * ChatML for a model without one, as llama-server falls back to), and
 * what the format asks of the sampler (a grammar, its triggers) and of
 * the text that comes back (how to read tool calls out of it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "serve/http.h"
#include "serve/upstream.h"

int chat_apply(fields_t *f, const site_t *site, json_t *body, json_t **out) {
  static const char *const roles[] = {"system", "developer", "user",
                                      "assistant", "tool", NULL};
  json_t *messages = json_object_get(body, "messages");
  size_t n = json_array_size(messages);
  *out = NULL;
  if (!json_is_array(messages) || n == 0 || n > 4096) {
    f->bad = "messages";
    snprintf(f->why, sizeof(f->why), "\"messages\" must be a list of 1 to "
             "4096 messages");
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
  char *req = json_dumps(body, JSON_COMPACT), *ans = NULL, err[480];
  int rc = req != NULL ? up_chat_apply(site->chat, req, &ans, err,
                                       sizeof(err))
                       : -1;
  free(req);
  json_error_t je;
  if (rc == 0 && (*out = json_loads(ans, 0, &je)) == NULL)
    snprintf(err, sizeof(err), "out of memory");
  free(ans);
  if (*out == NULL) {
    f->bad = "messages";
    snprintf(f->why, sizeof(f->why), "%.*s", (int)sizeof(f->why) - 1,
             req != NULL ? err : "out of memory");
    return -1;
  }
  return 0;
}

int chat_prompt(fields_t *f, const site_t *site, json_t *messages,
                evd_buf_t *out) {
  json_t *body = json_pack("{s:O}", "messages", messages), *ans;
  if (body == NULL || chat_apply(f, site, body, &ans) != 0) {
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
