/* Anthropic's Messages API, as llama-server has it: POST /v1/messages
 * (system, messages of text, thinking, tool_use and tool_result blocks,
 * tools and tool_choice, thinking, stop_sequences, temperature, top_p,
 * top_k), answered whole or streamed as Anthropic's typed events, and POST
 * /v1/messages/count_tokens. A request becomes the OpenAI chat request
 * (anthropic_in.c) that chat.c renders through llama.cpp's templates and
 * sampling.c draws with llama-server's sampler chain; the text that comes
 * back is read by the chat format's parser into thinking, text and
 * tool_use blocks.
 * Every error of these two routes is in Anthropic's shape
 * (anthropic_error_json). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "serve/http.h"
#include "serve/upstream.h"

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

json_t *anthropic_error_json(unsigned status, const char *code,
                             const char *param, const char *message) {
  /* OpenAI's error first: its message is made valid UTF-8 (reply.c). */
  json_t *oa = reply_error_json(status, code, param, message);
  json_t *msg = json_object_get(json_object_get(oa, "error"), "message");
  json_t *j = json_pack("{s:s,s:{s:s,s:o}}", "type", "error", "error",
                        "type", error_type(status), "message",
                        msg ? json_incref(msg) : json_string("out of memory"));
  json_decref(oa);
  return j;
}

/* ---- a request's state ------------------------------------------------------ */

enum { BLOCK_NONE, BLOCK_TEXT, BLOCK_TOOL, BLOCK_THINKING };

typedef struct an_s {
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

void anthropic_call_free(call_t *c) {
  an_t *a = c->an;
  if (a == NULL)
    return;
  up_parser_free(a->parser);
  free(a->parser_json);
  evd_buf_free(&a->raw);
  free(a);
  c->an = NULL;
}

/* 24 random letters and digits after prefix (Anthropic's ids are
 * base62). */
static void random_id(char *out, size_t len, const char *prefix) {
  static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                            "0123456789";
  unsigned char b[24];
  if (getrandom(b, sizeof(b), 0) != sizeof(b))
    for (size_t i = 0; i < sizeof(b); i++)
      b[i] = (unsigned char)rand();
  char s[25];
  for (size_t i = 0; i < 24; i++)
    s[i] = abc[b[i] % 62];
  s[24] = '\0';
  snprintf(out, len, "%s%s", prefix, s);
}

/* ---- answers --------------------------------------------------------------- */

/* Takes one drawn token (an EV_TOKEN event's bytes) into the raw text. */
static void take_token(call_t *c, const char *bytes, size_t len) {
  an_t *a = c->an;
  token_ev_t *ev = probs_read(bytes, len);
  if (ev == NULL)
    return;
  const task_t *t = c->task;
  bool special = false;
  for (uint32_t i = 0; i < t->want.n_preserved && !special; i++)
    special = t->want.preserved[i] == ev->id;
  /* As the engine shows it: the stop strings are looked for in the same
   * bytes. */
  char piece[256];
  int n = special ? lm_piece_special(c->site->lm, ev->id, piece,
                                     sizeof(piece))
                  : lm_piece(c->site->lm, ev->id, piece, sizeof(piece));
  if (n > 0)
    evd_buf_add(&a->raw, piece, (size_t)n);
  free(ev);
}

/* The request's stop sequence that ended the text, or NULL (another
 * reason, or one of the chat format's own stops: the turn's end). The
 * engine ends at the earliest stop string in the text, the first listed
 * where two begin at the same byte (text.c); the raw text has them all. */
static const char *stopped_by(call_t *c) {
  an_t *a = c->an;
  const want_t *w = &c->task->want;
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

static const char *stop_reason(call_t *c, const char **seq) {
  an_t *a = c->an;
  *seq = NULL;
  if (a->finish == FIN_LIMIT)
    return "max_tokens";
  if (a->tools)
    return "tool_use";
  return (*seq = stopped_by(c)) != NULL ? "stop_sequence" : "end_turn";
}

/* usage: input_tokens counts the prompt's tokens that were decoded, and
 * cache_read_input_tokens those a parked conversation held already, as
 * llama-server and Anthropic count them. */
static json_t *usage(call_t *c, uint32_t output) {
  uint32_t p = c->task->n_prompt, k = c->task->cached;
  return json_pack("{s:I,s:I,s:I}", "input_tokens",
                   (json_int_t)(p > k ? p - k : 0), "cache_read_input_tokens",
                   (json_int_t)k, "output_tokens", (json_int_t)output);
}

/* The message object around its content (taken). */
static json_t *message(call_t *c, json_t *content, const char *reason,
                       const char *seq, uint32_t output) {
  return json_pack("{s:s,s:s,s:s,s:s,s:o,s:s?,s:s?,s:o}", "id", c->an->id,
                   "type", "message", "role", "assistant", "model",
                   c->site->model, "content", content, "stop_reason", reason,
                   "stop_sequence", seq, "usage", usage(c, output));
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
  up_parser_t *p = NULL;
  char *m0 = NULL, *m1 = NULL, err[256];
  json_t *msg = NULL, *pre = NULL;
  if (a->parser_json != NULL &&
      up_parser_new(&p, a->parser_json, err, sizeof(err)) == 0 &&
      up_parser_feed(p, "", 0, true, &m0, NULL, err, sizeof(err)) == 0 &&
      up_parser_feed(p, text, len, false, &m1, NULL, err, sizeof(err)) == 0) {
    msg = json_loads(m1, 0, NULL);
    pre = json_loads(m0, 0, NULL);
  }
  up_parser_free(p);
  free(m0);
  free(m1);
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

static json_t *whole(call_t *c, const choice_out_t *out, uint32_t n) {
  an_t *a = c->an;
  (void)n;
  for (size_t at = 0; at + sizeof(size_t) <= out->drawn.len;) {
    size_t len;
    memcpy(&len, out->drawn.data + at, sizeof(len));
    take_token(c, out->drawn.data + at + sizeof(len), len);
    at += sizeof(len) + len;
  }
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
  const char *seq, *reason = stop_reason(c, &seq);
  return message(c, content, reason, seq, a->tokens);
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
static void text_in(call_t *c, const char *text, size_t len, bool partial,
                    json_t *out) {
  an_t *a = c->an;
  char *d = NULL, err[256];
  if (a->parser == NULL && a->parser_json != NULL)
    up_parser_new(&a->parser, a->parser_json, err, sizeof(err));
  json_t *deltas = NULL;
  if (a->parser != NULL &&
      up_parser_feed(a->parser, text, len, partial, NULL, &d, err,
                     sizeof(err)) == 0)
    deltas = json_loads(d, 0, NULL);
  free(d);
  if (deltas == NULL) { /* no format, or a text it cannot read: as it is */
    text_events(a, text, len, out);
    return;
  }
  size_t i;
  json_t *delta;
  json_array_foreach(deltas, i, delta) delta_events(a, delta, out);
  json_decref(deltas);
}

static json_t *chunk(call_t *c, const event_t *e, const char *text) {
  an_t *a = c->an;
  if (e->kind == EV_TOKEN) {
    take_token(c, text, e->len);
    return NULL;
  }
  json_t *out = json_array();
  if (!a->started) {
    a->started = true;
    json_array_append_new(out, json_pack(
        "{s:s,s:o}", "type", "message_start", "message",
        message(c, json_array(), NULL, NULL, 0)));
  }
  if (e->kind == EV_TEXT) {
    text_in(c, text, e->len, true, out);
  } else if (e->kind == EV_END) {
    a->finish = e->finish;
    a->tokens = e->tokens;
    text_in(c, "", 0, false, out);
    close_block(a, out);
  }
  return out;
}

/* The stream's end: the stop reason and the counts, then message_stop. */
static json_t *last(call_t *c) {
  const char *seq, *reason = stop_reason(c, &seq);
  return json_pack("[{s:s,s:{s:s,s:s?},s:o},{s:s}]", "type", "message_delta",
                   "delta", "stop_reason", reason, "stop_sequence", seq,
                   "usage", usage(c, c->an->tokens), "type", "message_stop");
}

/* A failure after the stream began: Anthropic's error event. */
static json_t *failed(call_t *c, const fault_t *f) {
  (void)c;
  return json_pack("[o]", anthropic_error_json((unsigned)f->status, f->code,
                                               NULL, f->msg));
}

static const api_t anthropic = {.chunk = chunk, .whole = whole, .last = last,
                                .typed = true, .failed = failed};

/* ---- requests ------------------------------------------------------------ */

/* The chat format's extra stop strings after the request's. */
static int add_stops(json_t *extra, task_t *t) {
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

/* The body's fields serve reads itself (not the sampler's), into t and c. */
static int own_fields(call_t *c, fields_t *f, task_t *t) {
  const serve_opts_t *o = c->site->o;
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
      field_bool(f, "stream", false, &c->stream))
    return -1;
  t->want.n_predict = (uint32_t)max_tokens;
  return 0;
}

/* The request's sampler fields (Anthropic's names are llama-server's)
 * into the chat request, where sampling_params finds them. */
static void sampler_fields(json_t *body, json_t *chat) {
  static const char *const names[] = {"temperature", "top_p", "top_k", NULL};
  for (size_t i = 0; names[i] != NULL; i++) {
    json_t *v = json_object_get(body, names[i]);
    if (v != NULL && !json_is_null(v))
      json_object_set(chat, names[i], v);
  }
}

enum MHD_Result anthropic_messages(call_t *c) {
  json_t *body, *chat = NULL, *fmt = NULL, *params = NULL;
  enum MHD_Result sent;
  if (http_body(c, &body, &sent) != 0)
    return sent;
  fields_t f = {.body = body};
  task_t *t = task_new();
  an_t *a = calloc(1, sizeof(*a));
  c->an = a;
  int bad = t == NULL || a == NULL ? -1 : 0;
  if (bad == 0)
    bad = anthropic_convert(&f, &chat) || own_fields(c, &f, t);
  if (bad == 0 && (bad = chat_apply_min(&f, c->site, chat, 0, &fmt)) == 0) {
    json_t *p = json_object_get(fmt, "prompt");
    json_t *parser = json_object_get(fmt, "parser");
    a->parser_json = parser ? json_dumps(parser, JSON_COMPACT) : NULL;
    a->n_stops = t->want.n_stop;
    bad = add_stops(json_object_get(fmt, "additional_stops"), t) ||
          field_prompt(&f, c->site, "messages", json_string_value(p)
                       ? json_string_value(p) : "", json_string_length(p),
                       true, t);
  }
  if (bad == 0) {
    sampler_fields(body, chat);
    if ((params = sampling_params(c->site, fmt, chat)) == NULL)
      bad = -1;
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
    bad = sampling_make(&f, c->site, params, t);
    random_id(a->id, sizeof(a->id), "msg_");
  }
  json_decref(params);
  json_decref(fmt);
  json_decref(chat);
  json_decref(body);
  if (t == NULL || a == NULL) {
    if (t != NULL)
      tq_release(c->site->q, t);
    return reply_error(c, 500, "out_of_memory", NULL, "out of memory");
  }
  if (bad != 0) {
    tq_release(c->site->q, t);
    return reply_error(c, 400, "invalid_request", f.bad, "%s",
                       f.bad ? f.why : "out of memory");
  }
  return reply_task(c, t, &anthropic, c->stream);
}

enum MHD_Result anthropic_count_tokens(call_t *c) {
  json_t *body, *chat = NULL, *fmt = NULL;
  enum MHD_Result sent;
  if (http_body(c, &body, &sent) != 0)
    return sent;
  fields_t f = {.body = body};
  int n = -1;
  if (anthropic_convert(&f, &chat) == 0 &&
      chat_apply_min(&f, c->site, chat, 0, &fmt) == 0)
    n = chat_count_tokens(&f, c->site, fmt);
  json_decref(fmt);
  json_decref(chat);
  json_decref(body);
  if (n < 0)
    return reply_error(c, 400, "invalid_request", f.bad, "%s",
                       f.bad ? f.why : "out of memory");
  return reply_json(c, 200, json_pack("{s:i}", "input_tokens", n));
}
