/* llama-server's routes beside the completions: POST /tokenize, POST
 * /detokenize and POST /apply-template (the model's vocabulary and chat
 * templates, read-only, on the connection's thread), GET /props (what
 * llama.cpp's web UI reads of a server) and GET /slots (what each slot
 * holds, from the copy the engine publishes under the queue's lock). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "serve/http.h"
#include "serve/upstream.h"

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

/* A token's text, as llama-server's common_token_to_piece gives it (a
 * control token's own text included), into *buf (grown as needed: the
 * caller frees it); its length, or -1. */
static int piece(const site_t *site, llama_token tok, char **buf,
                 size_t *cap) {
  if (*cap < 64 && grow(buf, cap, 64, 1) != 0)
    return -1;
  int n = lm_piece_special(site->lm, tok, *buf, *cap);
  if (n < 0) { /* -n bytes are needed */
    if (grow(buf, cap, (size_t)-n, 1) != 0)
      return -1;
    n = lm_piece_special(site->lm, tok, *buf, *cap);
  }
  return n;
}

/* Whether s[0..n) is UTF-8 throughout. */
static bool utf8_whole(const char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    size_t k = evd_utf8_len((const unsigned char *)s + i, n - i);
    if (k == 0)
      return false;
    i += k;
  }
  return true;
}

/* s[0..n) as a JSON string, each byte that begins no UTF-8 character as
 * U+FFFD (what llama-server's JSON writer makes of it). */
static json_t *utf8_string(const char *s, size_t n) {
  evd_buf_t b;
  evd_buf_init(&b);
  for (size_t i = 0; i < n;) {
    size_t k = evd_utf8_len((const unsigned char *)s + i, n - i);
    if (k == 0) {
      evd_buf_add(&b, "\xef\xbf\xbd", 3);
      k = 1;
    } else {
      evd_buf_add(&b, s + i, k);
    }
    i += k;
  }
  json_t *j = b.oom ? NULL : json_stringn(b.data ? b.data : "", b.len);
  evd_buf_free(&b);
  return j;
}

/* POST /tokenize {"content", "add_special" (false), "parse_special"
 * (true), "with_pieces" (false)}: {"tokens": [ids]}, or with_pieces
 * [{"id", "piece"}], a piece a string when it is UTF-8, else its bytes as
 * a list of numbers. No content: no tokens. */
enum MHD_Result extra_tokenize(call_t *c) {
  json_t *body;
  enum MHD_Result sent;
  if (http_body(c, &body, &sent) != 0)
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
             content_tokens(&f, c->site, content, add_special,
                            parse_special, &toks, &n));
  if (bad) {
    free(toks);
    enum MHD_Result rc = reply_error(c, 400, "invalid_request", f.bad, "%s",
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
      int len = piece(c->site, toks[i], &buf, &cap);
      json_t *p;
      if (len < 0) {
        p = NULL;
      } else if (utf8_whole(buf, (size_t)len)) {
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
    return reply_error(c, 500, "out_of_memory", NULL, "out of memory");
  }
  return reply_json(c, 200, json_pack("{s:o}", "tokens", list));
}

json_t *extra_text(const site_t *site, const llama_token *toks, size_t n) {
  evd_buf_t text;
  char *buf = NULL;
  size_t cap = 0;
  int bad = 0;
  evd_buf_init(&text);
  for (size_t i = 0; !bad && i < n; i++) {
    int len = piece(site, toks[i], &buf, &cap);
    if (len < 0)
      bad = 1;
    else
      evd_buf_add(&text, buf, (size_t)len);
  }
  free(buf);
  json_t *s = bad || text.oom ? NULL
                              : utf8_string(text.data ? text.data : "",
                                            text.len);
  evd_buf_free(&text);
  return s;
}

/* POST /detokenize {"tokens": [ids]}: {"content"}, every token's text
 * (control tokens' own included) one after the other. */
enum MHD_Result extra_detokenize(call_t *c) {
  json_t *body;
  enum MHD_Result sent;
  if (http_body(c, &body, &sent) != 0)
    return sent;
  json_t *tokens = json_object_get(body, "tokens");
  size_t i;
  json_t *v;
  if (tokens != NULL && !json_is_null(tokens) && !json_is_array(tokens)) {
    json_decref(body);
    return reply_error(c, 400, "invalid_request", "tokens", "\"tokens\" "
                       "must be a list of token ids");
  }
  json_array_foreach(tokens, i, v) {
    json_int_t id = json_integer_value(v);
    if (!json_is_integer(v) || id < 0 || id >= c->site->lm->n_vocab) {
      json_decref(body);
      return reply_error(c, 400, "invalid_request", "tokens", "\"tokens\" "
                         "item %zu is not a token id of the vocabulary (0 "
                         "to %d)", i, c->site->lm->n_vocab - 1);
    }
  }
  size_t n = json_array_size(tokens);
  llama_token *toks = malloc((n ? n : 1) * sizeof(*toks));
  json_array_foreach(tokens, i, v) {
    if (toks != NULL)
      toks[i] = (llama_token)json_integer_value(v);
  }
  json_decref(body);
  json_t *s = toks != NULL ? extra_text(c->site, toks, n) : NULL;
  free(toks);
  if (s == NULL)
    return reply_error(c, 500, "out_of_memory", NULL, "out of memory");
  return reply_json(c, 200, json_pack("{s:o}", "content", s));
}

/* POST /apply-template {"messages", ...}: {"prompt"}, the text a chat
 * request with this body would decode (its tools, response format,
 * chat_template_kwargs, add_generation_prompt ...: chat_apply's). */
enum MHD_Result extra_apply_template(call_t *c) {
  json_t *body, *ans;
  enum MHD_Result sent;
  if (http_body(c, &body, &sent) != 0)
    return sent;
  fields_t f = {.body = body};
  if (chat_apply(&f, c->site, body, &ans) != 0) {
    enum MHD_Result rc = reply_error(c, 400, "invalid_request", f.bad, "%s",
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
    return reply_error(c, 500, "out_of_memory", NULL, "out of memory");
  return reply_json(c, 200, j);
}

/* ---- the server ------------------------------------------------------------ */

/* A JSON object from upstream's text (taken), or NULL. */
static json_t *parsed(char *text) {
  json_t *j = text != NULL ? json_loads(text, 0, NULL) : NULL;
  free(text);
  return j;
}

/* GET /props, llama-server's: the generation's defaults (llama-server's
 * sampler's, with the command line's over them), the slots, the model,
 * its chat template, which routes answer; and the window each slot's
 * session keeps. */
enum MHD_Result extra_props(call_t *c) {
  const site_t *site = c->site;
  const serve_opts_t *o = site->o;
  char *text = NULL;
  up_sampler_settings(NULL, &text, NULL, 0);
  json_t *params = parsed(text);
  text = NULL;
  up_chat_info(site->chat, &text, NULL, 0);
  json_t *chat = parsed(text);
  if (params == NULL || chat == NULL) {
    json_decref(params);
    json_decref(chat);
    return reply_error(c, 500, "out_of_memory", NULL, "out of memory");
  }
  json_object_update(params, site->defaults);
  /* -n's default of every route; without it, a chat without max_tokens
   * generates up to --n-predict-max (until an end token), and
   * /completion's default is at most 128. */
  uint32_t n_predict = o->n_predict ? o->n_predict : o->n_predict_max;
  json_object_set_new(params, "n_predict", json_integer(n_predict));
  json_object_set_new(params, "max_tokens", json_integer(n_predict));
  json_object_set_new(params, "stream", json_false());
  json_object_set_new(params, "cache_prompt",
                      json_boolean(!o->no_cache_prompt));
  stats_t *s = malloc(sizeof(*s));
  if (s == NULL) {
    json_decref(params);
    json_decref(chat);
    return reply_error(c, 500, "out_of_memory", NULL, "out of memory");
  }
  tq_stats(site->q, s);
  json_t *j = json_pack(
      "{s:{s:i,s:o},s:i,s:s,s:s,s:{s:b,s:b,s:b},s:b,s:b,s:b,s:b,s:O,s:O,"
      "s:O,s:O,s:s,s:b,s:b,s:{s:i,s:i,s:i}}",
      "default_generation_settings", "n_ctx", (int)site->lm->n_ctx, "params",
      params, "total_slots", (int)o->parallel, "model_alias", site->model,
      "model_path", o->lm.model, "modalities", "vision", 0, "video", 0,
      "audio", 0, "endpoint_slots", o->ls.slots != 0, "endpoint_props", 0,
      "endpoint_metrics", 1, "ui", 0, "chat_template",
      json_object_get(chat, "chat_template"), "chat_template_caps",
      json_object_get(chat, "chat_template_caps"), "bos_token",
      json_object_get(chat, "bos_token"), "eos_token",
      json_object_get(chat, "eos_token"), "build_info", SERVE_FINGERPRINT,
      "is_sleeping", 0, "cors_proxy_enabled", 0, "window", "budget",
      (int)s->budget, "sinks", (int)s->sinks, "lookahead",
      (int)s->lookahead);
  json_t *tools = json_object_get(chat, "chat_template_tool_use");
  if (j != NULL && tools != NULL)
    json_object_set(j, "chat_template_tool_use", tools);
  free(s);
  json_decref(chat);
  if (j == NULL)
    return reply_error(c, 500, "out_of_memory", NULL, "out of memory");
  return reply_json(c, 200, j);
}

static const char *const uses[] = {
    [SLOT_FREE] = "idle", [SLOT_PROCESSING] = "processing",
    [SLOT_PARKED] = "parked", [SLOT_LEAVING] = "leaving"};

/* One slot as GET /slots shows it: llama-server's fields where they mean
 * the same (id, n_ctx, speculative, is_processing, n_prompt_tokens,
 * n_prompt_tokens_cache, next_token), then what evictd keeps of it. */
static json_t *slot_json(const site_t *site, uint32_t id,
                         const slot_state_t *st) {
  json_t *j = json_pack(
      "{s:i,s:i,s:b,s:b,s:s,s:{s:i,s:i,s:i}}", "id", (int)id, "n_ctx",
      (int)site->lm->n_ctx, "speculative", 0, "is_processing",
      st->use == SLOT_PROCESSING, "state", uses[st->use], "window", "budget",
      (int)st->budget, "sinks", (int)st->sinks, "lookahead",
      (int)st->lookahead);
  if (j == NULL || st->use == SLOT_FREE)
    return j;
  /* What it holds: a conversation's session, its positions. */
  json_object_set_new(j, "session", json_string(st->session));
  json_object_set_new(j, "n", json_integer(st->n));
  json_object_set_new(j, "held", json_integer(st->held));
  if (st->use != SLOT_PROCESSING)
    return j;
  uint32_t remain = st->n_predict > st->tokens ? st->n_predict - st->tokens
                                               : 0;
  json_object_set_new(j, "task", json_string(st->task));
  json_object_set_new(j, "choice", json_integer(st->choice));
  json_object_set_new(j, "n_prompt_tokens", json_integer(st->n_prompt));
  json_object_set_new(j, "n_prompt_tokens_cache", json_integer(st->cached));
  json_object_set_new(j, "next_token", json_pack(
      "[{s:b,s:i,s:i}]", "has_next_token", remain > 0, "n_remain",
      (int)remain, "n_decoded", (int)st->tokens));
  return j;
}

/* GET /slots: every slot, as the engine last published it (when a task
 * starts or ends, and at most ten times a second while they decode).
 * ?fail_on_no_slot (llama-server's): 503 when none is idle. With
 * --no-slots, 501, as llama-server answers. */
enum MHD_Result extra_slots(call_t *c) {
  if (!c->site->o->ls.slots)
    return reply_error(c, 501, "not_supported", NULL, "this server does not "
                       "support the slots endpoint (--no-slots)");
  stats_t *s = malloc(sizeof(*s));
  if (s == NULL)
    return reply_error(c, 500, "out_of_memory", NULL, "out of memory");
  tq_stats(c->site->q, s);
  json_t *list = json_array();
  uint32_t idle = 0;
  for (uint32_t i = 0; list != NULL && i < s->n_slots; i++) {
    idle += s->slots[i].use != SLOT_PROCESSING;
    if (json_array_append_new(list, slot_json(c->site, i, &s->slots[i])))
      json_decref(list), list = NULL;
  }
  free(s);
  if (list == NULL)
    return reply_error(c, 500, "out_of_memory", NULL, "out of memory");
  const char *fail = MHD_lookup_connection_value(
      c->conn, MHD_GET_ARGUMENT_KIND, "fail_on_no_slot");
  if (idle == 0 && fail != NULL && *fail != '\0') {
    json_decref(list);
    return reply_error(c, 503, "no_slot_available", NULL, "no slot "
                       "available: every one is processing a request");
  }
  return reply_json(c, 200, list);
}
