/* llama-server's routes that say what the server is (props.h): GET
 * /props (what llama.cpp's web UI reads of a server), GET /slots (what
 * each slot holds, from the copy the engine publishes on the board), and
 * the UI's /tools and /cors-proxy, disabled. */
#include "serve/api/props.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/shared/site.h"
#include "serve/upstream/sampler.h"
#include "serve/upstream/templates.h"

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
static enum MHD_Result props(call_t *c) {
  const site_t *site = c->ctx;
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
    return http_error(c, 500, "out_of_memory", NULL, "out of memory");
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
    return http_error(c, 500, "out_of_memory", NULL, "out of memory");
  }
  board_copy(site->board, s);
  /* build_info, the one line of the server's own the web UI shows (its
   * model dialog): llama-server's, then the window a session keeps. */
  char build[256];
  snprintf(build, sizeof(build), "%s; window: budget %u, sinks %u "
           "(the oldest position evicted first)", SERVE_FINGERPRINT,
           (unsigned)s->budget, (unsigned)s->sinks);
  json_t *j = json_pack(
      "{s:{s:i,s:o},s:i,s:s,s:s,s:{s:b,s:b,s:b},s:b,s:b,s:b,s:b,s:O,s:O,"
      "s:O,s:O,s:s,s:b,s:b,s:{s:i,s:i,s:i}}",
      "default_generation_settings", "n_ctx", (int)site->lm->n_ctx, "params",
      params, "total_slots", (int)o->parallel, "model_alias", site->model,
      "model_path", o->lm.model, "modalities", "vision", 0, "video", 0,
      "audio", 0, "endpoint_slots", o->ls.slots != 0, "endpoint_props", 0,
      "endpoint_metrics", 1, "ui", site->ui, "chat_template",
      json_object_get(chat, "chat_template"), "chat_template_caps",
      json_object_get(chat, "chat_template_caps"), "bos_token",
      json_object_get(chat, "bos_token"), "eos_token",
      json_object_get(chat, "eos_token"), "build_info", build,
      "is_sleeping", 0, "cors_proxy_enabled", 0, "window", "budget",
      (int)s->budget, "sinks", (int)s->sinks, "lookahead",
      (int)s->lookahead);
  /* --ui-config's settings, as llama-server's ui_settings ({} without). */
  if (j != NULL)
    json_object_set_new(j, "ui_settings", site->ui_settings != NULL
                                              ? json_incref(site->ui_settings)
                                              : json_object());
  json_t *tools = json_object_get(chat, "chat_template_tool_use");
  if (j != NULL && tools != NULL)
    json_object_set(j, "chat_template_tool_use", tools);
  free(s);
  json_decref(chat);
  if (j == NULL)
    return http_error(c, 500, "out_of_memory", NULL, "out of memory");
  return http_send_json(c, 200, j);
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
  json_object_set_new(j, "evicted",
                      json_integer(st->n > st->held ? st->n - st->held : 0));
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
static enum MHD_Result slots(call_t *c) {
  const site_t *site = c->ctx;
  if (!site->o->ls.slots)
    return http_error(c, 501, "not_supported", NULL, "this server does not "
                      "support the slots endpoint (--no-slots)");
  stats_t *s = malloc(sizeof(*s));
  if (s == NULL)
    return http_error(c, 500, "out_of_memory", NULL, "out of memory");
  board_copy(site->board, s);
  json_t *list = json_array();
  uint32_t idle = 0;
  for (uint32_t i = 0; list != NULL && i < s->n_slots; i++) {
    idle += s->slots[i].use != SLOT_PROCESSING;
    if (json_array_append_new(list, slot_json(site, i, &s->slots[i])))
      json_decref(list), list = NULL;
  }
  free(s);
  if (list == NULL)
    return http_error(c, 500, "out_of_memory", NULL, "out of memory");
  const char *fail = http_arg(c, "fail_on_no_slot");
  if (idle == 0 && fail != NULL && *fail != '\0') {
    json_decref(list);
    return http_error(c, 503, "no_slot_available", NULL, "no slot "
                      "available: every one is processing a request");
  }
  return http_send_json(c, 200, list);
}

/* GET and POST /tools and /cors-proxy, which llama.cpp's web UI asks
 * for: 403, llama-server's answer without --tools, MCP servers or
 * --ui-mcp-proxy (serve has none of them); the page carries on without
 * its server tools. */
static enum MHD_Result disabled(call_t *c) {
  return http_error(c, 403, "feature_disabled", NULL,
                    "this feature is disabled");
}

const http_route_t props_routes[] = {
    {"/props", "GET", props, 0, NULL, NULL},
    {"/slots", "GET", slots, 0, NULL, NULL},
    {"/tools", "GET", disabled, 0, NULL, NULL},
    {"/tools", "POST", disabled, 0, NULL, NULL},
    {"/cors-proxy", "GET", disabled, 0, NULL, NULL},
    {"/cors-proxy", "POST", disabled, 0, NULL, NULL},
    {NULL, NULL, NULL, 0, NULL, NULL}};
