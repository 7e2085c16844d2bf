/* llama-server's routes of the vocabulary and the templates (tokenize.h):
 * POST /tokenize, POST /detokenize and POST /apply-template, read-only, on
 * the connection's thread. */
#include "serve/api/tokenize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "serve/shared/fields.h"
#include "serve/shared/pieces.h"
#include "serve/shared/render.h"

/* ---- tokens ---------------------------------------------------------------- */

/* Appends n tokens to *out (*len of *cap); 0 or -1. */
static int add_tokens(llama_token **out, size_t *len, size_t *cap,
                      const llama_token *t, size_t n) {
  if (n == 0) /* an empty text's: nothing, maybe nowhere */
    return 0;
  if (grow(out, cap, *len + n, sizeof(**out)) != 0)
    return -1;
  memcpy(*out + *len, t, n * sizeof(*t));
  *len += n;
  return 0;
}

/* A string's tokens appended: the model's BOS first when bos (and the
 * vocabulary adds one), special tokens' text parsed when special. */
static int add_text(const site_t *site, json_t *s, bool bos, bool special,
                    llama_token **out, size_t *len, size_t *cap) {
  llama_token *t = NULL;
  int n = bos ? lm_tokenize(site->lm, json_string_value(s),
                            json_string_length(s), special, &t)
              : lm_tokenize_more(site->lm, json_string_value(s),
                                 json_string_length(s), special, &t);
  int rc = n < 0 ? -1 : add_tokens(out, len, cap, t, (size_t)n);
  free(t);
  return rc;
}

/* "content" as llama-server's tokenize_mixed reads it: a string, or a list
 * of strings and token ids, the BOS (add_special) only before a first
 * item that is a string. 0, or -1 with f's why set. */
static int content_tokens(fields_t *f, const site_t *site, json_t *v,
                          bool add_special, bool parse_special,
                          llama_token **out, size_t *len) {
  size_t cap = 0;
  f->bad = "content";
  if (json_is_string(v)) {
    if (add_text(site, v, add_special, parse_special, out, len, &cap) == 0)
      return 0;
    snprintf(f->why, sizeof(f->why), "cannot tokenize \"content\"");
    return -1;
  }
  if (!json_is_array(v)) {
    snprintf(f->why, sizeof(f->why), "\"content\" must be a string, or a "
             "list of strings and token ids");
    return -1;
  }
  size_t i;
  json_t *item;
  json_array_foreach(v, i, item) {
    if (json_is_string(item)) {
      if (add_text(site, item, add_special && i == 0, parse_special, out,
                   len, &cap) != 0) {
        snprintf(f->why, sizeof(f->why), "cannot tokenize \"content\" "
                 "item %zu", i);
        return -1;
      }
      continue;
    }
    json_int_t id = json_integer_value(item);
    llama_token t = (llama_token)id;
    if (!json_is_integer(item) || id < 0 || id >= site->lm->n_vocab) {
      snprintf(f->why, sizeof(f->why), "\"content\" item %zu is neither a "
               "string nor a token id of the vocabulary (0 to %d)", i,
               site->lm->n_vocab - 1);
      return -1;
    }
    if (add_tokens(out, len, &cap, &t, 1) != 0) {
      snprintf(f->why, sizeof(f->why), "out of memory");
      return -1;
    }
  }
  return 0;
}

/* POST /tokenize {"content", "add_special" (false), "parse_special"
 * (true), "with_pieces" (false)}: {"tokens": [ids]}, or with_pieces
 * [{"id", "piece"}], a piece a string when it is UTF-8, else its bytes as
 * a list of numbers. No content: no tokens. */
static enum MHD_Result tokenize(call_t *c) {
  const site_t *site = c->ctx;
  json_t *body;
  enum MHD_Result sent;
  if (http_json(c, &body, &sent) != 0)
    return sent;
  fields_t f = {.body = body};
  bool add_special, parse_special, with_pieces;
  llama_token *toks = NULL;
  size_t n = 0;
  json_t *content = json_object_get(body, "content");
  int bad = field_bool(&f, "add_special", false, &add_special) ||
            field_bool(&f, "parse_special", true, &parse_special) ||
            field_bool(&f, "with_pieces", false, &with_pieces) ||
            (content != NULL && !json_is_null(content) &&
             content_tokens(&f, site, content, add_special,
                            parse_special, &toks, &n));
  if (bad) {
    free(toks);
    enum MHD_Result rc = http_error(c, 400, "invalid_request", f.bad, "%s",
                                    f.why);
    json_decref(body);
    return rc;
  }
  json_decref(body);
  json_t *list = json_array();
  char *buf = NULL;
  size_t cap = 0;
  int oom = list == NULL;
  for (size_t i = 0; !oom && i < n; i++) {
    json_t *one = json_integer(toks[i]);
    if (with_pieces) {
      int len = pieces_piece(site, toks[i], &buf, &cap);
      json_t *p;
      if (len < 0) {
        p = NULL;
      } else if (pieces_utf8(buf, (size_t)len)) {
        p = json_stringn(buf, (size_t)len);
      } else {
        p = json_array();
        for (int k = 0; p != NULL && k < len; k++)
          json_array_append_new(p, json_integer((unsigned char)buf[k]));
      }
      one = p == NULL ? (json_decref(one), NULL)
                      : json_pack("{s:o,s:o}", "id", one, "piece", p);
    }
    oom = one == NULL || json_array_append_new(list, one) != 0;
  }
  free(buf);
  free(toks);
  if (oom) {
    json_decref(list);
    return http_error(c, 500, "out_of_memory", NULL, "out of memory");
  }
  return http_send_json(c, 200, json_pack("{s:o}", "tokens", list));
}

/* POST /detokenize {"tokens": [ids]}: {"content"}, every token's text
 * (control tokens' own included) one after the other. */
static enum MHD_Result detokenize(call_t *c) {
  const site_t *site = c->ctx;
  json_t *body;
  enum MHD_Result sent;
  if (http_json(c, &body, &sent) != 0)
    return sent;
  json_t *tokens = json_object_get(body, "tokens");
  size_t i;
  json_t *v;
  if (tokens != NULL && !json_is_null(tokens) && !json_is_array(tokens)) {
    json_decref(body);
    return http_error(c, 400, "invalid_request", "tokens", "\"tokens\" "
                      "must be a list of token ids");
  }
  json_array_foreach(tokens, i, v) {
    json_int_t id = json_integer_value(v);
    if (!json_is_integer(v) || id < 0 || id >= site->lm->n_vocab) {
      json_decref(body);
      return http_error(c, 400, "invalid_request", "tokens", "\"tokens\" "
                        "item %zu is not a token id of the vocabulary (0 "
                        "to %d)", i, site->lm->n_vocab - 1);
    }
  }
  size_t n = json_array_size(tokens);
  llama_token *toks = malloc((n ? n : 1) * sizeof(*toks));
  json_array_foreach(tokens, i, v) {
    if (toks != NULL)
      toks[i] = (llama_token)json_integer_value(v);
  }
  json_decref(body);
  json_t *s = toks != NULL ? pieces_json(site, toks, n) : NULL;
  free(toks);
  if (s == NULL)
    return http_error(c, 500, "out_of_memory", NULL, "out of memory");
  return http_send_json(c, 200, json_pack("{s:o}", "content", s));
}

/* POST /apply-template {"messages", ...}: {"prompt"}, the text a chat
 * request with this body would decode (its tools, response format,
 * chat_template_kwargs, add_generation_prompt ...: render_apply's). */
static enum MHD_Result apply_template(call_t *c) {
  const site_t *site = c->ctx;
  json_t *body, *ans;
  enum MHD_Result sent;
  if (http_json(c, &body, &sent) != 0)
    return sent;
  fields_t f = {.body = body};
  if (render_apply(&f, site, body, &ans) != 0) {
    enum MHD_Result rc = http_error(c, 400, "invalid_request", f.bad, "%s",
                                    f.why);
    json_decref(body);
    return rc;
  }
  json_decref(body);
  json_t *prompt = json_object_get(ans, "prompt");
  json_t *j = json_pack("{s:s%}", "prompt",
                        json_is_string(prompt) ? json_string_value(prompt)
                                               : "",
                        json_string_length(prompt));
  json_decref(ans);
  if (j == NULL)
    return http_error(c, 500, "out_of_memory", NULL, "out of memory");
  return http_send_json(c, 200, j);
}

const http_route_t tokenize_routes[] = {
    {"/tokenize", "POST", tokenize, 0, NULL, NULL},
    {"/detokenize", "POST", detokenize, 0, NULL, NULL},
    {"/apply-template", "POST", apply_template, 0, NULL, NULL},
    {NULL, NULL, NULL, 0, NULL, NULL}};
