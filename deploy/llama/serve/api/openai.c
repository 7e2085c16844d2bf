/* OpenAI's API (openai.h): GET /v1/models, POST /v1/completions and POST
 * /v1/chat/completions, answered whole or streamed in OpenAI's chunk
 * shapes (text_completion, chat.completion.chunk with a delta) ending
 * with "data: [DONE]". n choices share one decoded prompt (the engine
 * forks it); usage counts every choice. Chat requests go through
 * llama.cpp's own templates (tools, tool_choice, response_format) and
 * their answers through its parsers (tool_calls, in whole messages and
 * streamed deltas); every request draws with llama-server's sampler chain
 * (logit_bias, penalties, grammars, json_schema, logprobs). The fields
 * serve uses are checked (a wrong type or value: 400 with the field as
 * param); of the others, those that would change the answer and that
 * serve cannot honour are refused, and the rest are ignored. */
#include "serve/api/openai.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "serve/shared/answer.h"
#include "serve/shared/chain.h"
#include "serve/shared/fields.h"
#include "serve/shared/parse.h"
#include "serve/shared/probs.h"
#include "serve/shared/render.h"
#include "serve/shared/timings.h"

/* A choice's state while its answer is made (streamed or whole): the
 * parser of its text (chat), the tool calls it made, its logprobs not yet
 * sent, the legacy offset. */
typedef struct oa_choice_s {
  up_parser_t *parser;
  bool seen;              /* a stream's first chunk of it was sent */
  bool tool_calls;
  json_t *lp;             /* chat: entries since the last chunk; legacy:
                             its lists */
  size_t offset;
} oa_choice_t;

typedef struct oa_s {
  answer_t a;             /* first: answer.h's */
  bool chat;              /* /v1/chat/completions, not /v1/completions */
  bool usage;             /* stream_options.include_usage */
  bool timings;           /* llama-server's timings_per_token: a stream's
                             chunks carry the timings so far */
  bool verbose;           /* "__verbose" in the answer (llama-server's) */
  bool want_logprobs;
  uint32_t logprobs;      /* candidates shown per token (0: logprobs
                             off) */
  char id[80];            /* the answer's and its chunks' */
  long long created;
  uint64_t tokens;        /* the choices' tokens, for usage */
  char *parser_json;      /* the chat format's, or NULL */
  oa_choice_t *ch;
  uint32_t n;
} oa_t;

static void oa_free(answer_t *a) {
  oa_t *o = (oa_t *)a;
  for (uint32_t i = 0; o->ch != NULL && i < o->n; i++) {
    up_parser_free(o->ch[i].parser);
    json_decref(o->ch[i].lp);
  }
  free(o->ch);
  free(o->parser_json);
}

static const char *finish_reason(finish_t f, bool tools) {
  return tools ? "tool_calls" : f == FIN_LIMIT ? "length" : "stop";
}

/* The id of an answer and of its chunks: cmpl-TASK or chatcmpl-TASK. */
static const char *answer_id(oa_t *o) {
  if (o->id[0] == '\0')
    snprintf(o->id, sizeof(o->id), "%s-%s", o->chat ? "chatcmpl" : "cmpl",
             o->a.task->id);
  return o->id;
}

static json_t *usage(oa_t *o) {
  uint64_t p = o->a.task->n_prompt;
  return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)p,
                   "completion_tokens", (json_int_t)o->tokens,
                   "total_tokens", (json_int_t)(p + o->tokens),
                   "prompt_tokens_details", "cached_tokens",
                   (json_int_t)o->a.task->cached);
}

/* An answer or chunk around its choices (taken). */
static json_t *envelope(oa_t *o, const char *object, json_t *choices) {
  return json_pack("{s:s,s:s,s:I,s:s,s:s,s:o}", "id", answer_id(o),
                   "object", object, "created", (json_int_t)o->created,
                   "model", o->a.site->model, "system_fingerprint",
                   SERVE_FINGERPRINT, "choices", choices);
}

/* A chunk of a choice; with stream_options.include_usage it says "usage":
 * null, as OpenAI's do, until the last chunk's counts. */
static json_t *choice_chunk(oa_t *o, const char *object, json_t *choice) {
  json_t *j = envelope(o, object, json_pack("[o]", choice));
  if (j != NULL && o->usage)
    json_object_set_new(j, "usage", json_null());
  return j;
}

/* ---- logprobs ------------------------------------------------------------ */

/* Takes one drawn token of choice i into its logprobs. */
static void take_token(answer_t *a, uint32_t i, const char *bytes,
                       size_t len) {
  oa_t *o = (oa_t *)a;
  token_ev_t *t = o->want_logprobs ? probs_read(bytes, len) : NULL;
  if (t == NULL)
    return;
  oa_choice_t *ch = &o->ch[i];
  if (o->chat) {
    if (ch->lp == NULL)
      ch->lp = json_array();
    json_array_append_new(ch->lp, probs_openai(a->site, t, o->logprobs));
  } else {
    if (ch->lp == NULL)
      ch->lp = probs_legacy_new();
    probs_legacy(a->site, t, ch->lp, &ch->offset);
  }
  free(t);
}

/* The choice's logprobs so far (taken: the next chunk starts anew), or
 * null when off. */
static json_t *logprobs_of(oa_t *o, uint32_t i) {
  if (!o->want_logprobs)
    return json_null();
  json_t *lp = o->ch[i].lp;
  o->ch[i].lp = NULL;
  if (o->chat)
    return json_pack("{s:o}", "content", lp ? lp : json_array());
  return lp ? lp : probs_legacy_new();
}

/* ---- streamed chunks ---------------------------------------------------- */

/* A chat delta of choice i as its chunk. */
static json_t *delta_chunk(oa_t *o, uint32_t i, json_t *delta,
                           const char *why) {
  return choice_chunk(o, "chat.completion.chunk", json_pack(
      "{s:i,s:o,s:o,s:s?}", "index", (int)i, "delta", delta, "logprobs",
      logprobs_of(o, i), "finish_reason", why));
}

/* The deltas of choice i's next text (whole characters; at the end, len
 * 0 and partial false), each a chunk, into out. */
static void chat_deltas(oa_t *o, uint32_t i, const char *text, size_t len,
                        bool partial, json_t *out) {
  oa_choice_t *ch = &o->ch[i];
  json_t *deltas = parse_deltas(&ch->parser, o->parser_json, text, len,
                                partial);
  size_t k;
  json_t *delta;
  json_array_foreach(deltas, k, delta) {
    if (json_object_get(delta, "tool_calls") != NULL)
      ch->tool_calls = true;
    json_array_append_new(out, delta_chunk(o, i, json_incref(delta), NULL));
  }
  json_decref(deltas);
}

/* A progress event (return_progress) as a chunk: llama-server's, a chat's
 * role delta or an empty text, with prompt_progress. */
static json_t *progress_chunk(oa_t *o, const event_t *e) {
  json_t *j = o->chat
      ? choice_chunk(o, "chat.completion.chunk", json_pack(
            "{s:i,s:{s:s,s:n},s:n,s:n}", "index", 0, "delta", "role",
            "assistant", "content", "logprobs", "finish_reason"))
      : choice_chunk(o, "text_completion", json_pack(
            "{s:s,s:i,s:n,s:n}", "text", "", "index", 0, "logprobs",
            "finish_reason"));
  if (j != NULL && o->timings)
    json_object_set_new(j, "timings", timings_now(o->a.task, e));
  if (j != NULL)
    json_object_set_new(j, "prompt_progress",
                        timings_progress(o->a.task, e));
  return j;
}

/* A choice's "__verbose" at its end (a stream's: its chunks had the
 * text). */
static json_t *verbose_end(oa_t *o, const event_t *e) {
  return timings_verbose(o->a.site, o->a.task, e->choice, "", 0, e->finish,
                         e->tokens, e->stop);
}

/* The legacy completion's chunk of an event. */
static json_t *text_chunk(oa_t *o, const event_t *e, const char *text) {
  size_t len = e->kind == EV_TEXT ? e->len : 0;
  const char *why = e->kind == EV_END ? finish_reason(e->finish, false)
                                      : NULL;
  json_t *ch = json_pack("{s:s%,s:i,s:o,s:s?}", "text",
                         e->kind == EV_TEXT ? text : "", len, "index",
                         (int)e->choice, "logprobs",
                         logprobs_of(o, e->choice), "finish_reason", why);
  json_t *j = choice_chunk(o, "text_completion", ch);
  if (j != NULL && e->kind == EV_END)
    json_object_set_new(j, "timings", timings_json(o->a.task, o->tokens));
  else if (j != NULL && o->timings)
    json_object_set_new(j, "timings", timings_now(o->a.task, e));
  if (j != NULL && e->kind == EV_END && o->verbose)
    json_object_set_new(j, "__verbose", verbose_end(o, e));
  return j;
}

static json_t *chunk(answer_t *a, const event_t *e, const char *text) {
  oa_t *o = (oa_t *)a;
  if (e->kind == EV_TOKEN) {
    take_token(a, e->choice, text, e->len);
    return NULL;
  }
  if (e->kind == EV_PROGRESS)
    return progress_chunk(o, e);
  if (e->kind == EV_END)
    o->tokens += e->tokens;
  if (!o->chat)
    return text_chunk(o, e, text);
  /* The chat's chunks: the parser's deltas of the text (tool calls
   * streamed as OpenAI's), the last with the finish reason. */
  size_t len = e->kind == EV_TEXT ? e->len : 0;
  oa_choice_t *ch = &o->ch[e->choice];
  json_t *out = json_array();
  /* A choice's first chunk says its role alone, content null, as
   * llama-server's and OpenAI's do (llama-server's test_chat_completion
   * asserts it); its logprobs stay for the text's chunks. */
  if (!ch->seen) {
    ch->seen = true;
    json_array_append_new(out, choice_chunk(o, "chat.completion.chunk",
        json_pack("{s:i,s:{s:s,s:n},s:n,s:n}", "index", (int)e->choice,
                  "delta", "role", "assistant", "content", "logprobs",
                  "finish_reason")));
  }
  size_t before = json_array_size(out);
  chat_deltas(o, e->choice, text, len, e->kind != EV_END, out);
  /* timings_per_token: the last of the text's chunks has them so far. */
  if (e->kind == EV_TEXT && o->timings && json_array_size(out) > before)
    json_object_set_new(json_array_get(out, json_array_size(out) - 1),
                        "timings", timings_now(a->task, e));
  if (e->kind == EV_END) {
    json_t *fin = delta_chunk(o, e->choice, json_object(),
                              finish_reason(e->finish, ch->tool_calls));
    if (fin != NULL)
      json_object_set_new(fin, "timings", timings_json(a->task, o->tokens));
    if (fin != NULL && o->verbose)
      json_object_set_new(fin, "__verbose", verbose_end(o, e));
    json_array_append_new(out, fin);
  }
  if (json_array_size(out) == 1) {
    json_t *one = json_incref(json_array_get(out, 0));
    json_decref(out);
    return one;
  }
  return out; /* several: answer.c frames each (api.multi) */
}

/* With stream_options.include_usage, a last chunk of no choices. */
static json_t *last(answer_t *a) {
  oa_t *o = (oa_t *)a;
  if (!o->usage)
    return NULL;
  json_t *j = envelope(o, o->chat ? "chat.completion.chunk"
                                  : "text_completion", json_array());
  if (j != NULL)
    json_object_set_new(j, "usage", usage(o));
  /* llama-server's last chunk has the timings. */
  if (j != NULL && o->timings)
    json_object_set_new(j, "timings", timings_json(a->task, o->tokens));
  return j;
}

/* ---- whole answers ------------------------------------------------------ */

/* The assistant message of choice i's whole text: the parser's (content,
 * tool_calls, reasoning_content), else the text as content. */
static json_t *message(oa_t *o, uint32_t i, const choice_out_t *out) {
  const char *text = out->text.data ? out->text.data : "";
  json_t *msg = parse_message(o->parser_json, text, out->text.len, NULL);
  if (msg == NULL)
    msg = json_pack("{s:s,s:s%}", "role", "assistant", "content", text,
                    out->text.len);
  if (json_array_size(json_object_get(msg, "tool_calls")) > 0)
    o->ch[i].tool_calls = true;
  else
    json_object_del(msg, "tool_calls");
  return msg;
}

static json_t *whole(answer_t *a, const choice_out_t *out, uint32_t n) {
  oa_t *o = (oa_t *)a;
  json_t *choices = json_array();
  for (uint32_t i = 0; i < n; i++) {
    const char *text = out[i].text.data ? out[i].text.data : "";
    size_t len = out[i].text.len;
    o->tokens += out[i].tokens;
    answer_drawn(a, i, &out[i], take_token);
    if (o->chat) {
      json_t *msg = message(o, i, &out[i]);
      json_array_append_new(choices, json_pack(
          "{s:i,s:o,s:o,s:s}", "index", (int)i, "message", msg, "logprobs",
          logprobs_of(o, i), "finish_reason",
          finish_reason(out[i].finish, o->ch[i].tool_calls)));
    } else {
      json_array_append_new(choices, json_pack(
          "{s:s%,s:i,s:o,s:s}", "text", text, len, "index", (int)i,
          "logprobs", logprobs_of(o, i), "finish_reason",
          finish_reason(out[i].finish, false)));
    }
  }
  json_t *j = envelope(o, o->chat ? "chat.completion" : "text_completion",
                       choices);
  if (j != NULL) {
    json_object_set_new(j, "usage", usage(o));
    json_object_set_new(j, "timings", timings_json(a->task, o->tokens));
    /* llama-server's shows the first choice's */
    if (o->verbose && n > 0)
      json_object_set_new(j, "__verbose", timings_verbose(
          a->site, a->task, 0, out[0].text.data ? out[0].text.data : "",
          out[0].text.len, out[0].finish, out[0].tokens, out[0].stop));
  }
  return j;
}

static const api_t openai = {.chunk = chunk, .whole = whole, .last = last,
                             .free = oa_free, .done = "[DONE]",
                             .multi = true};

/* ---- requests ----------------------------------------------------------- */

/* A seed for a request that gives none: every answer another draw. */
static uint64_t any_seed(void) {
  static uint64_t counter;
  double t = clock_now();
  return (uint64_t)(t * 1e9) ^ (__atomic_add_fetch(&counter, 1,
                                                   __ATOMIC_RELAXED) *
                                0x9e3779b97f4a7c15ULL);
}

/* Fields that would change the answer and that serve cannot honour:
 * refused unless they ask for nothing. */
static const unhonoured_t unhonoured[] = {
    {"functions", 0, NULL}, {"echo", 0, NULL}, {"best_of", 1, NULL},
    {"suffix", 0, NULL},    {"audio", 0, NULL},
    {"t_max_predict_ms", 0, NULL}, {"n_indent", 0, NULL},
    {"lora", 0, NULL},      {NULL, 0, NULL}};

/* logprobs: chat's a boolean (with top_logprobs, 0 to 20), the legacy
 * completions' a count (0 to 5). */
static int logprobs_fields(oa_t *oa, fields_t *f) {
  long long top = 0, legacy = 0;
  bool lp = false;
  json_t *lpv = json_object_get(f->body, "logprobs");
  if (oa->chat) {
    if (field_bool(f, "logprobs", false, &lp) ||
        field_int(f, "top_logprobs", 0, 20, 0, &top))
      return -1;
    if (top > 0 && !lp) {
      f->bad = "top_logprobs";
      snprintf(f->why, sizeof(f->why), "\"top_logprobs\" needs "
               "\"logprobs\": true");
      return -1;
    }
  } else if (lpv != NULL && !json_is_null(lpv)) {
    if (field_int(f, "logprobs", 0, 5, 0, &legacy))
      return -1;
    lp = true;
    top = legacy;
  }
  oa->want_logprobs = lp;
  oa->logprobs = (uint32_t)top;
  return 0;
}

/* The fields both kinds of completion take, into t and oa. */
static int common(oa_t *oa, fields_t *f, task_t *t, long long max_def) {
  const serve_opts_t *o = oa->a.site->o;
  long long max_tokens, n, seed;
  json_t *opts = json_object_get(f->body, "stream_options");
  /* max_completion_tokens is the newer name (chat), max_tokens the older,
   * and llama-server's n_predict goes before both, as there. */
  if (field_model(f) ||
      field_n_predict(f, o->n_predict_max, max_def, &max_tokens) ||
      field_num(f, "temperature", 0, 2, 1, &t->want.temp) ||
      field_num(f, "top_p", 0, 1, 1, &t->want.top_p) ||
      field_int(f, "n", 1, o->parallel, 1, &n) ||
      field_int(f, "seed", INT64_MIN, INT64_MAX, 0, &seed) ||
      field_stop(f, "stop", 4, &t->want) ||
      field_bool(f, "ignore_eos", false, &t->want.ignore_eos) ||
      field_bool(f, "cache_prompt", true, &t->want.cache_prompt) ||
      field_bool(f, "stream", false, &oa->a.stream) ||
      field_bool(f, "verbose", o->verbose, &oa->verbose) ||
      field_unhonoured(f, unhonoured) || logprobs_fields(oa, f))
    return -1;
  if (opts != NULL && !json_is_null(opts)) {
    fields_t g = {.body = opts};
    if (!json_is_object(opts) ||
        field_bool(&g, "include_usage", false, &oa->usage) != 0) {
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
  oa->created = (long long)time(NULL);
  oa->n = t->want.n;
  if ((oa->ch = calloc(t->want.n, sizeof(*oa->ch))) == NULL)
    return f->bad = NULL, -1;
  return 0;
}

/* response_format as llama-server's json_schema (the sampler's grammar
 * made of it): json_object's own "schema" (llama-server's extension),
 * else any object; json_schema's schema. A grammar of the request's own
 * beside it is refused, as llama-server refuses json_schema with
 * grammar, rather than one of the two ignored. */
static int completion_format(fields_t *f, json_t *params) {
  json_t *rf = json_object_get(f->body, "response_format");
  json_t *type = json_object_get(rf, "type");
  json_t *grammar = json_object_get(params, "grammar"), *schema = NULL;
  const char *ty = json_is_string(type) ? json_string_value(type) : "";
  if (rf == NULL || json_is_null(rf) || strcmp(ty, "text") == 0)
    return 0;
  if (strcmp(ty, "json_object") == 0) {
    schema = json_object_get(rf, "schema");
    if (schema == NULL || json_is_null(schema))
      schema = json_pack("{s:s}", "type", "object");
    else if (json_is_object(schema))
      json_incref(schema);
    else
      schema = NULL;
  } else if (strcmp(ty, "json_schema") == 0) {
    schema = json_object_get(json_object_get(rf, "json_schema"), "schema");
    schema = json_is_object(schema) ? json_incref(schema) : NULL;
  }
  f->bad = "response_format";
  if (schema == NULL) {
    snprintf(f->why, sizeof(f->why), "\"response_format\" must be "
             "{\"type\": \"text\"}, {\"type\": \"json_object\"} (its "
             "\"schema\" an object if given) or {\"type\": \"json_schema\", "
             "\"json_schema\": {\"schema\": {...}}}");
    return -1;
  }
  if (json_is_string(grammar) && json_string_length(grammar) > 0) {
    json_decref(schema);
    snprintf(f->why, sizeof(f->why), "Cannot use both response_format and "
             "grammar");
    return -1;
  }
  f->bad = NULL;
  return json_object_set_new(params, "json_schema", schema);
}

/* Reads a completion request of either kind into a task, then answers it
 * from the task's events. */
static enum MHD_Result completion(call_t *c, bool chat) {
  json_t *fmt = NULL, *params = NULL;
  fields_t f;
  task_t *t;
  enum MHD_Result sent;
  oa_t *oa = answer_begin(c, &openai, sizeof(*oa), &f, &t, &sent);
  if (oa == NULL)
    return sent;
  json_t *body = f.body;
  const serve_opts_t *o = oa->a.site->o;
  oa->chat = chat;
  int bad = common(oa, &f, t, o->n_predict ? o->n_predict
                              : chat ? o->n_predict_max : 16);
  if (bad == 0)
    bad = chat ? render_task(&f, oa->a.site, body, 1, t, &fmt,
                             &oa->parser_json)
               : field_prompt_any(&f, oa->a.site, "prompt", t);
  if (bad == 0 && (params = chain_params(oa->a.site, fmt, body)) == NULL)
    bad = -1, f.bad = NULL;
  /* A response_format the chat format did not turn into a grammar of its
   * own (a chat's grammar holds it; the generic formats leave an empty
   * schema, or json_object without one, to the sampler). */
  bool own = chat && json_object_get(fmt, "grammar") != NULL;
  if (bad == 0 && !own)
    bad = completion_format(&f, params);
  /* A grammar of the request's own schema, not the chat format's, holds
   * the generated text alone: the template's generation prompt, which
   * common would feed it first (and fail on), is not in it. */
  if (bad == 0 && chat && !own && json_object_get(params, "json_schema"))
    json_object_del(params, "generation_prompt");
  if (bad == 0) {
    json_object_set_new(params, "n_probs", json_integer(
        oa->want_logprobs ? (oa->logprobs > 0 ? oa->logprobs : 1) : 0));
    bad = field_extras(&f, params, oa->a.stream, &oa->timings, t) ||
          chain_make(&f, oa->a.site, params, t);
  }
  json_decref(params);
  json_decref(fmt);
  json_decref(body);
  return answer_start(c, &oa->a, t, bad, &f);
}

static enum MHD_Result completions(call_t *c) { return completion(c, false); }

static enum MHD_Result chat_completions(call_t *c) {
  return completion(c, true);
}

/* POST /v1/chat/completions/input_tokens (and without /v1),
 * llama-server's: a chat request's prompt counted, {"object":
 * "response.input_tokens", "input_tokens"}, nothing decoded. */
static enum MHD_Result input_tokens(call_t *c) {
  json_t *body, *fmt = NULL;
  enum MHD_Result sent;
  if (http_json(c, &body, &sent) != 0)
    return sent;
  const site_t *site = c->ctx;
  fields_t f = {.body = body};
  int n = -1;
  if (render_apply(&f, site, body, &fmt) == 0)
    n = render_count_tokens(&f, site, fmt);
  json_decref(fmt);
  json_decref(body);
  if (n < 0)
    return fields_refuse(c, &f);
  return http_send_json(c, 200, json_pack("{s:s,s:i}", "object",
                                          "response.input_tokens",
                                          "input_tokens", n));
}

/* GET /v1/models: the one model, its aliases and tags. */
static enum MHD_Result models(call_t *c) {
  const site_t *s = c->ctx;
  return http_send_json(c, 200, json_pack(
      "{s:s,s:[{s:s,s:O,s:O,s:s,s:I,s:s}]}", "object", "list", "data", "id",
      s->model, "aliases", s->aliases, "tags", s->tags, "object", "model",
      "created", (json_int_t)s->created, "owned_by", "evictd-llama"));
}

/* llama-server's paths, /v1 and not. */
const http_route_t openai_routes[] = {
    {"/v1/chat/completions", "POST", chat_completions, 0, NULL, NULL},
    {"/chat/completions", "POST", chat_completions, 0, NULL, NULL},
    {"/v1/chat/completions/input_tokens", "POST", input_tokens, 0, NULL, NULL},
    {"/chat/completions/input_tokens", "POST", input_tokens, 0, NULL, NULL},
    {"/v1/completions", "POST", completions, 0, NULL, NULL},
    {"/v1/models", "GET", models, 0, NULL, NULL},
    {"/models", "GET", models, 0, NULL, NULL},
    {NULL, NULL, NULL, 0, NULL, NULL}};
