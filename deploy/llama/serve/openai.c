/* OpenAI's API: GET /v1/models, POST /v1/completions and POST
 * /v1/chat/completions, answered whole or streamed in OpenAI's chunk
 * shapes (text_completion, chat.completion.chunk with a delta) ending
 * with "data: [DONE]". n choices share one decoded prompt (the engine
 * forks it); usage counts every choice. The fields serve uses are
 * checked (a wrong type or value: 400 with the field as param); of the
 * others, those that would change the answer are refused unless they ask
 * for nothing, and the rest are ignored. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "serve/http.h"

static const char *finish_reason(finish_t f) {
  return f == FIN_LIMIT ? "length" : "stop";
}

/* The id of an answer and of its chunks: cmpl-TASK or chatcmpl-TASK. */
static const char *answer_id(call_t *c) {
  if (c->id[0] == '\0')
    snprintf(c->id, sizeof(c->id), "%s-%s", c->chat ? "chatcmpl" : "cmpl",
             c->task->id);
  return c->id;
}

static json_t *usage(call_t *c) {
  uint64_t p = c->task->n_prompt;
  return json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)p,
                   "completion_tokens", (json_int_t)c->tokens,
                   "total_tokens", (json_int_t)(p + c->tokens));
}

/* An answer or chunk around its choices (taken). */
static json_t *envelope(call_t *c, const char *object, json_t *choices) {
  return json_pack("{s:s,s:s,s:I,s:s,s:o}", "id", answer_id(c), "object",
                   object, "created", (json_int_t)c->created, "model",
                   c->site->model, "choices", choices);
}

/* A chunk of a choice; with stream_options.include_usage it says "usage":
 * null, as OpenAI's do, until the last chunk's counts. */
static json_t *choice_chunk(call_t *c, const char *object, json_t *choice) {
  json_t *j = envelope(c, object, json_pack("[o]", choice));
  if (j != NULL && c->usage)
    json_object_set_new(j, "usage", json_null());
  return j;
}

/* ---- streamed chunks ---------------------------------------------------- */

static json_t *chunk(call_t *c, const event_t *e, const char *text) {
  json_t *ch;
  bool first = !c->seen[e->choice];
  c->seen[e->choice] = true;
  if (e->kind == EV_END)
    c->tokens += e->tokens;
  const char *why = e->kind == EV_END ? finish_reason(e->finish) : NULL;
  size_t len = e->kind == EV_TEXT ? e->len : 0;
  if (!c->chat) {
    ch = json_pack("{s:s%,s:i,s:n,s:s?}", "text", e->kind == EV_TEXT ? text
                   : "", len, "index", (int)e->choice, "logprobs",
                   "finish_reason", why);
    return choice_chunk(c, "text_completion", ch);
  }
  /* A choice's first delta says who speaks. */
  json_t *delta = json_object();
  if (first)
    json_object_set_new(delta, "role", json_string("assistant"));
  if (e->kind == EV_TEXT)
    json_object_set_new(delta, "content", json_stringn(text, len));
  ch = json_pack("{s:i,s:o,s:n,s:s?}", "index", (int)e->choice, "delta",
                 delta, "logprobs", "finish_reason", why);
  return choice_chunk(c, "chat.completion.chunk", ch);
}

/* With stream_options.include_usage, a last chunk of no choices. */
static json_t *last(call_t *c) {
  if (!c->usage)
    return NULL;
  json_t *j = envelope(c, c->chat ? "chat.completion.chunk"
                                  : "text_completion", json_array());
  if (j != NULL)
    json_object_set_new(j, "usage", usage(c));
  return j;
}

/* ---- whole answers ------------------------------------------------------ */

static json_t *whole(call_t *c, const choice_out_t *out, uint32_t n) {
  json_t *choices = json_array();
  for (uint32_t i = 0; i < n; i++) {
    const char *text = out[i].text.data ? out[i].text.data : "";
    size_t len = out[i].text.len;
    c->tokens += out[i].tokens;
    json_array_append_new(choices, c->chat
        ? json_pack("{s:i,s:{s:s,s:s%},s:n,s:s}", "index", (int)i,
                    "message", "role", "assistant", "content", text, len,
                    "logprobs", "finish_reason",
                    finish_reason(out[i].finish))
        : json_pack("{s:s%,s:i,s:n,s:s}", "text", text, len, "index", (int)i,
                    "logprobs", "finish_reason",
                    finish_reason(out[i].finish)));
  }
  json_t *j = envelope(c, c->chat ? "chat.completion" : "text_completion",
                       choices);
  if (j != NULL)
    json_object_set_new(j, "usage", usage(c));
  return j;
}

static const api_t openai = {.chunk = chunk, .whole = whole, .last = last,
                             .done = "[DONE]"};

/* ---- requests ----------------------------------------------------------- */

/* A seed for a request that gives none: every answer another draw. */
static uint64_t any_seed(void) {
  static uint64_t counter;
  double t = clock_now();
  return (uint64_t)(t * 1e9) ^ (__atomic_add_fetch(&counter, 1,
                                                   __ATOMIC_RELAXED) *
                                0x9e3779b97f4a7c15ULL);
}

/* Fields that would change the answer and that serve does not honour
 * (OpenAI's, and llama-server's that its clients send on these routes):
 * refused unless they ask for nothing. tool_choice and function_call need
 * no entry: without tools they choose nothing. */
static const unhonoured_t unhonoured[] = {
    {"logprobs", 0, NULL}, {"top_logprobs", 0, NULL},
    {"logit_bias", 0, NULL}, {"response_format", 0, "text"},
    {"tools", 0, NULL}, {"functions", 0, NULL},
    {"presence_penalty", 0, NULL}, {"frequency_penalty", 0, NULL},
    {"echo", 0, NULL}, {"best_of", 1, NULL}, {"suffix", 0, NULL},
    {"audio", 0, NULL}, {"grammar", 0, NULL}, {"json_schema", 0, NULL},
    {"top_k", 0, NULL}, {"min_p", 0, NULL}, {"typical_p", 1, NULL},
    {"repeat_penalty", 1, NULL}, {"mirostat", 0, NULL},
    {"n_probs", 0, NULL}, {"dry_multiplier", 0, NULL},
    {"xtc_probability", 0, NULL}, {"t_max_predict_ms", 0, NULL},
    {"n_indent", 0, NULL}, {"lora", 0, NULL}, {NULL, 0, NULL}};

/* The fields both kinds of completion take, into t; stream and
 * stream_options into c. */
static int common(call_t *c, fields_t *f, task_t *t, long long max_def) {
  const serve_opts_t *o = c->site->o;
  long long max_tokens, n, seed;
  json_t *model = json_object_get(f->body, "model");
  json_t *opts = json_object_get(f->body, "stream_options");
  if (model != NULL && !json_is_null(model) && !json_is_string(model)) {
    f->bad = "model";
    snprintf(f->why, sizeof(f->why), "\"model\" must be a string");
    return -1;
  }
  /* max_completion_tokens is the newer name (chat), max_tokens the older. */
  const char *mt = json_object_get(f->body, "max_completion_tokens")
                       ? "max_completion_tokens" : "max_tokens";
  if (field_int(f, mt, 1, o->n_predict_max, max_def, &max_tokens) ||
      field_num(f, "temperature", 0, 2, 1, &t->want.temp) ||
      field_num(f, "top_p", 0, 1, 1, &t->want.top_p) ||
      field_int(f, "n", 1, o->parallel, 1, &n) ||
      field_int(f, "seed", INT64_MIN, INT64_MAX, 0, &seed) ||
      field_stop(f, "stop", 4, &t->want) ||
      field_bool(f, "ignore_eos", false, &t->want.ignore_eos) ||
      field_bool(f, "cache_prompt", true, &t->want.cache_prompt) ||
      field_bool(f, "stream", false, &c->stream) ||
      field_unhonoured(f, unhonoured))
    return -1;
  if (opts != NULL && !json_is_null(opts)) {
    fields_t g = {.body = opts};
    if (!json_is_object(opts) ||
        field_bool(&g, "include_usage", false, &c->usage) != 0) {
      f->bad = "stream_options";
      snprintf(f->why, sizeof(f->why), "\"stream_options\" must be an "
               "object whose \"include_usage\" is true or false");
      return -1;
    }
  }
  json_t *s = json_object_get(f->body, "seed");
  t->want.n_predict = (uint32_t)max_tokens;
  t->want.n = (uint32_t)n;
  t->want.seed = s == NULL || json_is_null(s) ? any_seed() : (uint64_t)seed;
  c->created = (long long)time(NULL);
  return (c->seen = calloc(t->want.n, sizeof(*c->seen))) ? 0 : -1;
}

/* Reads a completion request of either kind into a task, then answers it
 * from the task's events. */
static enum MHD_Result completion(call_t *c, bool chat) {
  json_t *body;
  enum MHD_Result sent;
  if (http_body(c, &body, &sent) != 0)
    return sent;
  fields_t f = {.body = body};
  task_t *t = task_new();
  evd_buf_t text;
  evd_buf_init(&text);
  int bad = t == NULL ? -1 : 0;
  c->chat = chat;
  if (bad == 0 && chat) {
    bad = chat_prompt(&f, c->site, json_object_get(body, "messages"), &text);
  } else if (bad == 0) {
    json_t *p = json_object_get(body, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1)
      p = json_array_get(p, 0); /* a list of one prompt */
    if (!json_is_string(p)) {
      f.bad = "prompt";
      snprintf(f.why, sizeof(f.why), "\"prompt\" is required: a string (or "
               "a list of one: one prompt per request)");
      bad = -1;
    } else {
      evd_buf_add(&text, json_string_value(p), json_string_length(p));
    }
  }
  /* The chat's prompt carries the template's special tokens as text. */
  if (bad == 0)
    bad = common(c, &f, t, chat ? c->site->o->n_predict_max : 16) ||
          field_prompt(&f, c->site, chat ? "messages" : "prompt", text.data,
                       text.len, chat, t);
  json_decref(body);
  evd_buf_free(&text);
  if (t == NULL)
    return reply_error(c, 500, "out_of_memory", NULL, "out of memory");
  if (bad != 0) {
    tq_release(c->site->q, t);
    return reply_error(c, 400, "invalid_request", f.bad, "%s",
                       f.bad ? f.why : "out of memory");
  }
  return reply_task(c, t, &openai, c->stream);
}

enum MHD_Result openai_completions(call_t *c) { return completion(c, false); }

enum MHD_Result openai_chat(call_t *c) { return completion(c, true); }

enum MHD_Result openai_models(call_t *c) {
  const site_t *s = c->site;
  return reply_json(c, 200, json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}",
                                      "object", "list", "data", "id",
                                      s->model, "object", "model",
                                      "created", (json_int_t)s->created,
                                      "owned_by", "evictd-llama"));
}
