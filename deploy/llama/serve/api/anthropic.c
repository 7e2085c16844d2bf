/* Anthropic's Messages API, as llama-server has it: POST /v1/messages
 * (system, messages of text, thinking, tool_use and tool_result blocks,
 * tools and tool_choice, thinking, stop_sequences, temperature, top_p,
 * top_k), answered whole or streamed as Anthropic's typed events, and POST
 * /v1/messages/count_tokens. A request becomes the OpenAI chat request
 * (anthropic_in.c) that render.c renders through llama.cpp's templates and
 * chain.c draws with llama-server's sampler chain; the text that comes
 * back is read by the chat format's parser (shared/parse.h) into thinking,
 * text and tool_use blocks.
 * Every error of these two routes is in Anthropic's shape
 * (anthropic_error_json). */
#include "serve/api/anthropic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "serve/api/anthropic_in.h"
#include "serve/shared/answer.h"
#include "serve/shared/chain.h"
#include "serve/shared/fields.h"
#include "serve/shared/parse.h"
#include "serve/shared/probs.h"
#include "serve/shared/render.h"

/* ---- errors ---------------------------------------------------------------- */

/* Anthropic's error type of a status. */
static const char *error_type(unsigned status) {
  switch (status) {
  case 401: return "authentication_error";
  case 403: return "permission_error";
  case 404: return "not_found_error";
  case 413: return "request_too_large";
  case 429: return "rate_limit_error";
  case 503: return "overloaded_error";
  case 504: return "timeout_error";
  default: return status < 500 ? "invalid_request_error" : "api_error";
  }
}

/* Anthropic's error shape, {"type": "error", "error": {"type",
 * "message"}}, the type from the status (invalid_request_error,
 * authentication_error, not_found_error, request_too_large,
 * overloaded_error, api_error, ...); code and param are not shown. The
 * routes' http_errors_t. */
static json_t *error_json(unsigned status, const char *code,
                          const char *param, const char *message) {
  /* OpenAI's error first: its message is made valid UTF-8 (send.c). */
  json_t *oa = http_error_json(status, code, param, message);
  json_t *msg = json_object_get(json_object_get(oa, "error"), "message");
  json_t *j = json_pack("{s:s,s:{s:s,s:o}}", "type", "error", "error",
                        "type", error_type(status), "message",
                        msg ? json_incref(msg) : json_string("out of memory"));
  json_decref(oa);
  return j;
}

/* ---- a request's state ------------------------------------------------------ */

/* Anthropic's ids are base62. */
#define ANTHROPIC_ID_CHARS \
  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

enum { BLOCK_NONE, BLOCK_TEXT, BLOCK_TOOL, BLOCK_THINKING };

typedef struct an_s {
  answer_t a;             /* first: answer.h's */
  char id[48];            /* msg_... */
  char *parser_json;      /* the chat format's (how to read tool calls) */
  up_parser_t *parser;    /* a stream's */
  uint32_t n_stops;       /* the request's stop_sequences: the task's
                             stop[0..n_stops); the format's follow */
  evd_buf_t raw;          /* with stop_sequences: the drawn tokens' text,
                             stop strings included (which one ended it) */
  bool started;           /* a stream's message_start was sent */
  int open;               /* the block a stream has open (BLOCK_*) */
  uint32_t index;         /* its index */
  uint32_t blocks;        /* blocks started */
  json_int_t tool;        /* an open tool_use block's call (its index in
                             the parser's message) */
  bool tools;             /* a tool call was made */
  finish_t finish;
  uint32_t tokens;
} an_t;

static void an_free(answer_t *x) {
  an_t *a = (an_t *)x;
  up_parser_free(a->parser);
  free(a->parser_json);
  evd_buf_free(&a->raw);
}

/* ---- answers --------------------------------------------------------------- */

/* Takes one drawn token (an EV_TOKEN event's bytes) into the raw text. */
static void take_token(answer_t *x, uint32_t i, const char *bytes,
                       size_t len) {
  an_t *a = (an_t *)x;
  (void)i;
  token_ev_t *ev = probs_read(bytes, len);
  if (ev == NULL)
    return;
  const task_t *t = a->a.task;
  bool special = false;
  for (uint32_t i = 0; i < t->want.n_preserved && !special; i++)
    special = t->want.preserved[i] == ev->id;
  /* As the engine shows it: the stop strings are looked for in the same
   * bytes. */
  char piece[256];
  int n = special ? lm_piece_special(a->a.site->lm, ev->id, piece,
                                     sizeof(piece))
                  : lm_piece(a->a.site->lm, ev->id, piece, sizeof(piece));
  if (n > 0)
    evd_buf_add(&a->raw, piece, (size_t)n);
  free(ev);
}

/* The request's stop sequence that ended the text, or NULL (another
 * reason, or one of the chat format's own stops: the turn's end). The
 * engine ends at the earliest stop string in the text, the first listed
 * where two begin at the same byte (engine/text.c); the raw text has them
 * all. */
static const char *stopped_by(an_t *a) {
  const want_t *w = &a->a.task->want;
  if (a->finish != FIN_STOP || a->n_stops == 0)
    return NULL;
  size_t at = a->raw.len;
  uint32_t which = w->n_stop;
  for (uint32_t i = 0; i < w->n_stop; i++) {
    size_t sl = strlen(w->stop[i]);
    for (size_t p = 0; sl > 0 && p + sl <= a->raw.len && p < at; p++)
      if (memcmp(a->raw.data + p, w->stop[i], sl) == 0) {
        at = p;
        which = i;
        break;
      }
  }
  return which < a->n_stops ? w->stop[which] : NULL;
}

static const char *stop_reason(an_t *a, const char **seq) {
  *seq = NULL;
  if (a->finish == FIN_LIMIT)
    return "max_tokens";
  if (a->tools)
    return "tool_use";
  return (*seq = stopped_by(a)) != NULL ? "stop_sequence" : "end_turn";
}

/* usage: input_tokens counts the prompt's tokens that were decoded, and
 * cache_read_input_tokens those a parked conversation held already, as
 * llama-server and Anthropic count them. */
static json_t *usage(an_t *a, uint32_t output) {
  uint32_t p = a->a.task->n_prompt, k = a->a.task->cached;
  return json_pack("{s:I,s:I,s:I}", "input_tokens",
                   (json_int_t)(p > k ? p - k : 0), "cache_read_input_tokens",
                   (json_int_t)k, "output_tokens", (json_int_t)output);
}

/* The message object around its content (taken). */
static json_t *message(an_t *a, json_t *content, const char *reason,
                       const char *seq, uint32_t output) {
  return json_pack("{s:s,s:s,s:s,s:s,s:o,s:s?,s:s?,s:o}", "id", a->id,
                   "type", "message", "role", "assistant", "model",
                   a->a.site->model, "content", content, "stop_reason",
                   reason, "stop_sequence", seq, "usage",
                   usage(a, output));
}

/* A tool call of the parser's message as a tool_use block (its input the
 * arguments parsed; {} when they are not an object, as llama-server). */
static json_t *tool_block(json_t *call) {
  json_t *fn = json_object_get(call, "function");
  json_t *args = json_object_get(fn, "arguments");
  json_t *input = json_is_string(args) ? json_loads(json_string_value(args),
                                                    JSON_DECODE_ANY, NULL)
                                       : NULL;
  if (!json_is_object(input)) {
    json_decref(input);
    input = json_object();
  }
  json_t *id = json_object_get(call, "id"), *name = json_object_get(fn,
                                                                    "name");
  return json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id",
                   json_is_string(id) ? json_string_value(id) : "", "name",
                   json_is_string(name) ? json_string_value(name) : "",
                   "input", input);
}

/* The assistant message the chat format reads in the whole text (content,
 * tool_calls), or NULL when it reads none. A message that continues a
 * prefill (a trailing assistant message) is what follows it: the parser
 * starts from the prefill's message, which its first read gives. */
static json_t *parse_whole(const an_t *a, const char *text, size_t len) {
  json_t *pre = NULL;
  json_t *msg = parse_message(a->parser_json, text, len, &pre);
  json_t *ct = json_object_get(msg, "content");
  json_t *pt = json_object_get(pre, "content");
  size_t k = json_string_length(pt);
  if (k > 0 && json_string_length(ct) >= k &&
      memcmp(json_string_value(ct), json_string_value(pt), k) == 0)
    json_object_set_new(msg, "content", json_stringn(
        json_string_value(ct) + k, json_string_length(ct) - k));
  json_decref(pre);
  return msg;
}

static json_t *whole(answer_t *x, const choice_out_t *out, uint32_t n) {
  an_t *a = (an_t *)x;
  (void)n;
  answer_drawn(x, 0, out, take_token);
  a->finish = out->finish;
  a->tokens = out->tokens;
  const char *text = out->text.data ? out->text.data : "";
  json_t *msg = parse_whole(a, text, out->text.len);
  /* A text the format cannot read is shown as it is (as openai.c does). */
  if (msg == NULL)
    msg = json_pack("{s:s%}", "content", text, out->text.len);
  json_t *content = json_array();
  json_t *ct = json_object_get(msg, "content");
  /* What the model thought (thinking asked for) comes first, as
   * llama-server's; serve signs nothing, so its signature is empty. */
  json_t *rc = json_object_get(msg, "reasoning_content");
  if (json_string_length(rc) > 0)
    json_array_append_new(content, json_pack(
        "{s:s,s:O,s:s}", "type", "thinking", "thinking", rc, "signature",
        ""));
  if (json_string_length(ct) > 0)
    json_array_append_new(content, json_pack("{s:s,s:O}", "type", "text",
                                             "text", ct));
  size_t i;
  json_t *call;
  json_array_foreach(json_object_get(msg, "tool_calls"), i, call) {
    json_array_append_new(content, tool_block(call));
    a->tools = true;
  }
  json_decref(msg);
  const char *seq, *reason = stop_reason(a, &seq);
  return message(a, content, reason, seq, a->tokens);
}

/* ---- streams ------------------------------------------------------------- */

static void close_block(an_t *a, json_t *out) {
  if (a->open == BLOCK_NONE)
    return;
  /* Anthropic's clients want a thinking block's signature before it ends
   * (llama-server sends this one, empty: nothing is signed). */
  if (a->open == BLOCK_THINKING)
    json_array_append_new(out, json_pack(
        "{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index",
        (int)a->index, "delta", "type", "signature_delta", "signature", ""));
  json_array_append_new(out, json_pack("{s:s,s:i}", "type",
                                       "content_block_stop", "index",
                                       (int)a->index));
  a->open = BLOCK_NONE;
}

/* Closes the open block and starts `block` (taken), of kind `kind`. */
static void open_block(an_t *a, json_t *out, int kind, json_t *block) {
  close_block(a, out);
  a->index = a->blocks++;
  a->open = kind;
  json_array_append_new(out, json_pack("{s:s,s:i,s:o}", "type",
                                       "content_block_start", "index",
                                       (int)a->index, "content_block",
                                       block));
}

static json_t *block_delta(an_t *a, json_t *delta) {
  return json_pack("{s:s,s:i,s:o}", "type", "content_block_delta", "index",
                   (int)a->index, "delta", delta);
}

/* Text as a text_delta, in the open text block or a new one. */
static void text_events(an_t *a, const char *text, size_t len, json_t *out) {
  if (len == 0)
    return;
  if (a->open != BLOCK_TEXT)
    open_block(a, out, BLOCK_TEXT, json_pack("{s:s,s:s}", "type", "text",
                                             "text", ""));
  json_array_append_new(out, block_delta(a, json_pack(
      "{s:s,s:s%}", "type", "text_delta", "text", text, len)));
}

/* One OpenAI chat delta of the parser's (reasoning_content, content,
 * tool_calls) as Anthropic's events: one block open at a time, thinking
 * as thinking_delta, a tool call's block started with its id and name,
 * its arguments as input_json_delta. */
static void delta_events(an_t *a, json_t *delta, json_t *out) {
  json_t *content = json_object_get(delta, "content");
  json_t *thought = json_object_get(delta, "reasoning_content");
  if (json_string_length(thought) > 0) {
    if (a->open != BLOCK_THINKING)
      open_block(a, out, BLOCK_THINKING, json_pack(
          "{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature",
          ""));
    json_array_append_new(out, block_delta(a, json_pack(
        "{s:s,s:O}", "type", "thinking_delta", "thinking", thought)));
  }
  if (json_is_string(content))
    text_events(a, json_string_value(content), json_string_length(content),
                out);
  size_t k;
  json_t *call;
  json_array_foreach(json_object_get(delta, "tool_calls"), k, call) {
    json_t *fn = json_object_get(call, "function");
    json_t *args = json_object_get(fn, "arguments");
    json_int_t i = json_integer_value(json_object_get(call, "index"));
    if (a->open != BLOCK_TOOL || a->tool != i) {
      json_t *id = json_object_get(call, "id"), *name = json_object_get(fn,
                                                                        "name");
      open_block(a, out, BLOCK_TOOL, json_pack(
          "{s:s,s:s,s:s,s:{}}", "type", "tool_use", "id",
          json_is_string(id) ? json_string_value(id) : "", "name",
          json_is_string(name) ? json_string_value(name) : "", "input"));
      a->tool = i;
      a->tools = true;
    }
    if (json_string_length(args) > 0)
      json_array_append_new(out, block_delta(a, json_pack(
          "{s:s,s:O}", "type", "input_json_delta", "partial_json", args)));
  }
}

/* The next text (at the end, len 0 and partial false) through the parser,
 * as events. */
static void text_in(an_t *a, const char *text, size_t len, bool partial,
                    json_t *out) {
  json_t *deltas = parse_deltas(&a->parser, a->parser_json, text, len,
                                partial);
  size_t i;
  json_t *delta;
  json_array_foreach(deltas, i, delta) delta_events(a, delta, out);
  json_decref(deltas);
}

static json_t *chunk(answer_t *x, const event_t *e, const char *text) {
  an_t *a = (an_t *)x;
  if (e->kind == EV_TOKEN) {
    take_token(x, 0, text, e->len);
    return NULL;
  }
  json_t *out = json_array();
  if (!a->started) {
    a->started = true;
    json_array_append_new(out, json_pack(
        "{s:s,s:o}", "type", "message_start", "message",
        message(a, json_array(), NULL, NULL, 0)));
  }
  if (e->kind == EV_TEXT) {
    text_in(a, text, e->len, true, out);
  } else if (e->kind == EV_END) {
    a->finish = e->finish;
    a->tokens = e->tokens;
    text_in(a, "", 0, false, out);
    close_block(a, out);
  }
  return out;
}

/* The stream's end: the stop reason and the counts, then message_stop. */
static json_t *last(answer_t *x) {
  an_t *a = (an_t *)x;
  const char *seq, *reason = stop_reason(a, &seq);
  return json_pack("[{s:s,s:{s:s,s:s?},s:o},{s:s}]", "type", "message_delta",
                   "delta", "stop_reason", reason, "stop_sequence", seq,
                   "usage", usage(a, a->tokens), "type", "message_stop");
}

/* A failure after the stream began: Anthropic's error event. */
static json_t *failed(answer_t *x, const fault_t *f) {
  (void)x;
  return json_pack("[o]", error_json((unsigned)f->status, f->code, NULL,
                                     f->msg));
}

static const api_t anthropic = {.chunk = chunk, .whole = whole, .last = last,
                                .failed = failed, .free = an_free,
                                .typed = true};

/* ---- requests ------------------------------------------------------------ */

/* The body's fields serve reads itself (not the sampler's), into t and a. */
static int own_fields(an_t *a, fields_t *f, task_t *t) {
  const serve_opts_t *o = a->a.site->o;
  long long max_tokens, top_k;
  json_t *mt = json_object_get(f->body, "max_tokens");
  if (mt == NULL || json_is_null(mt)) {
    f->bad = "max_tokens";
    snprintf(f->why, sizeof(f->why), "\"max_tokens\" is required: a whole "
             "number from 1 to %u (--n-predict-max)", o->n_predict_max);
    return -1;
  }
  if (field_int(f, "max_tokens", 1, o->n_predict_max, 1, &max_tokens) ||
      field_num(f, "temperature", 0, 1, 1, &t->want.temp) ||
      field_num(f, "top_p", 0, 1, 1, &t->want.top_p) ||
      field_int(f, "top_k", 0, INT32_MAX, 0, &top_k) ||
      field_stop(f, "stop_sequences", 16, &t->want) ||
      field_bool(f, "stream", false, &a->a.stream))
    return -1;
  t->want.n_predict = (uint32_t)max_tokens;
  return 0;
}

/* The request's sampler fields (Anthropic's names are llama-server's)
 * into the chat request, where chain_params finds them. */
static void sampler_fields(json_t *body, json_t *chat) {
  static const char *const names[] = {"temperature", "top_p", "top_k", NULL};
  for (size_t i = 0; names[i] != NULL; i++) {
    json_t *v = json_object_get(body, names[i]);
    if (v != NULL && !json_is_null(v))
      json_object_set(chat, names[i], v);
  }
}

/* POST /v1/messages. */
static enum MHD_Result messages(call_t *c) {
  json_t *chat = NULL, *fmt = NULL, *params = NULL;
  fields_t f;
  task_t *t;
  enum MHD_Result sent;
  an_t *a = answer_begin(c, &anthropic, sizeof(*a), &f, &t, &sent);
  if (a == NULL)
    return sent;
  json_t *body = f.body;
  int bad = anthropic_convert(&f, &chat) || own_fields(a, &f, t);
  if (bad == 0) {
    /* The request's own stops first, the format's after them. */
    a->n_stops = t->want.n_stop;
    bad = render_task(&f, a->a.site, chat, 0, t, &fmt, &a->parser_json);
  }
  if (bad == 0) {
    sampler_fields(body, chat);
    if ((params = chain_params(a->a.site, fmt, chat)) == NULL)
      bad = -1, f.bad = NULL;
  }
  if (bad == 0) {
    uint64_t seed;
    if (getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
      seed = (uint64_t)rand();
    t->want.n = 1;
    t->want.seed = seed;
    t->want.cache_prompt = true;
    /* Each drawn token, with stop sequences: which one ended the text. */
    t->want.tokens = a->n_stops > 0;
    json_object_set_new(params, "n_probs", json_integer(0));
    bad = chain_make(&f, a->a.site, params, t);
    answer_random_id(a->id, sizeof(a->id), "msg_", ANTHROPIC_ID_CHARS);
  }
  json_decref(params);
  json_decref(fmt);
  json_decref(chat);
  json_decref(body);
  return answer_start(c, &a->a, t, bad, &f);
}

/* POST /v1/messages/count_tokens. */
static enum MHD_Result count_tokens(call_t *c) {
  json_t *body, *chat = NULL, *fmt = NULL;
  enum MHD_Result sent;
  if (http_json(c, &body, &sent) != 0)
    return sent;
  const site_t *site = c->ctx;
  fields_t f = {.body = body};
  int n = -1;
  if (anthropic_convert(&f, &chat) == 0 &&
      render_apply_min(&f, site, chat, 0, &fmt) == 0)
    n = render_count_tokens(&f, site, fmt);
  json_decref(fmt);
  json_decref(chat);
  json_decref(body);
  if (n < 0)
    return fields_refuse(c, &f);
  return http_send_json(c, 200, json_pack("{s:i}", "input_tokens", n));
}

/* Every answer of these routes in Anthropic's error shape, the 401 too. */
const http_route_t anthropic_routes[] = {
    {"/v1/messages", "POST", messages, 0, error_json, NULL},
    {"/v1/messages/count_tokens", "POST", count_tokens, 0, error_json, NULL},
    {NULL, NULL, NULL, 0, NULL, NULL}};
