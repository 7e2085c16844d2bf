/* A chat's messages as the model's prompt: through the GGUF's chat
 * template with llama.cpp's llama_chat_apply_template, or, for a model
 * without one that llama.cpp knows (stories260K has none), through ChatML,
 * as llama-server falls back to (serve says so when it starts). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "serve/http.h"

const char *chat_template(const lm_t *lm, bool *fallback) {
  const char *tmpl = llama_model_chat_template(lm->model, NULL);
  llama_chat_message probe = {"user", "x"};
  char buf[8];
  *fallback = tmpl == NULL ||
              llama_chat_apply_template(tmpl, &probe, 1, true, buf,
                                        sizeof(buf)) < 0;
  return *fallback ? "chatml" : tmpl;
}

/* The text of a message's content: a string, or a list of parts of which
 * the "text" ones count, joined; NULL (with why) when neither. */
static const char *content_of(json_t *content, evd_buf_t *parts) {
  if (json_is_string(content))
    return json_string_value(content);
  if (json_is_null(content))
    return "";
  if (!json_is_array(content))
    return NULL;
  size_t i;
  json_t *part;
  json_array_foreach(content, i, part) {
    json_t *type = json_object_get(part, "type"),
           *text = json_object_get(part, "text");
    if (!json_is_string(type) || strcmp(json_string_value(type), "text") ||
        !json_is_string(text))
      return NULL;
    evd_buf_add(parts, json_string_value(text), json_string_length(text));
  }
  evd_buf_chr(parts, '\0');
  return parts->oom ? NULL : parts->data;
}

int chat_prompt(fields_t *f, const site_t *site, json_t *messages,
                evd_buf_t *out) {
  static const char *const roles[] = {"system", "developer", "user",
                                      "assistant", "tool", NULL};
  size_t n = json_array_size(messages);
  if (!json_is_array(messages) || n == 0 || n > 4096) {
    f->bad = "messages";
    snprintf(f->why, sizeof(f->why), "\"messages\" must be a list of 1 to "
             "4096 messages");
    return -1;
  }
  llama_chat_message *m = calloc(n, sizeof(*m));
  evd_buf_t *parts = calloc(n, sizeof(*parts));
  int rc = m == NULL || parts == NULL ? -1 : 0;
  for (size_t i = 0; rc == 0 && i < n; i++) {
    json_t *msg = json_array_get(messages, i);
    json_t *role = json_object_get(msg, "role");
    const char *r = json_is_string(role) ? json_string_value(role) : "";
    int k = 0;
    while (roles[k] != NULL && strcmp(roles[k], r) != 0)
      k++;
    m[i].role = roles[k];
    m[i].content = content_of(json_object_get(msg, "content"), &parts[i]);
    if (m[i].role == NULL || m[i].content == NULL) {
      f->bad = "messages";
      snprintf(f->why, sizeof(f->why), "message %zu needs a \"role\" (system, "
               "developer, user, assistant or tool) and a \"content\" "
               "(a string, or a list of text parts)", i);
      rc = -1;
    }
  }
  /* The prompt ends where the assistant's answer begins (add_ass). */
  int32_t len = rc == 0 ? llama_chat_apply_template(site->tmpl, m, n, true,
                                                    NULL, 0) : -1;
  if (rc == 0 && (len < 0 || evd_buf_reserve(out, (size_t)len + 1) != 0)) {
    f->bad = "messages";
    snprintf(f->why, sizeof(f->why), "the chat template cannot be applied "
             "to these messages");
    rc = -1;
  }
  if (rc == 0) {
    llama_chat_apply_template(site->tmpl, m, n, true, out->data, len + 1);
    out->len = (size_t)len;
  }
  for (size_t i = 0; parts != NULL && i < n; i++)
    evd_buf_free(&parts[i]);
  free(parts);
  free(m);
  return rc;
}
