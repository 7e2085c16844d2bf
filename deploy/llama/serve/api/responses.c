/* OpenAI's Responses API (responses.h): POST /v1/responses (input as a
 * string or messages, instructions, max_output_tokens, temperature, top_p,
 * stream with its typed events, store), GET and DELETE /v1/responses/{id},
 * and previous_response_id: the stateful form of a conversation, which
 * continues the conversation the named response left parked (the engine's
 * conversations) with the new input's tokens alone: the history is
 * neither sent again nor decoded again. The new input goes through the
 * chat template as the turn that follows the previous answer: the
 * template is rendered for that answer (a marker in its place) and the
 * new messages, and what follows the marker is the turn's text.
 *
 * A stored response is its answer (for GET) and where its conversation
 * lives (its evictd session and the positions it computed): rstore.h. */
#include "serve/api/responses.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/api/rstore.h"
#include "serve/shared/answer.h"
#include "serve/shared/chain.h"
#include "serve/shared/fields.h"
#include "serve/shared/render.h"
#include "serve/shared/timings.h"
#include "serve/upstream/sampler.h"

/* Responses' ids: letters and digits. */
#define RESP_ID_CHARS "abcdefghijklmnopqrstuvwxyz0123456789"

/* ---- a request's state ---------------------------------------------------- */

typedef struct resp_s {
  answer_t a;             /* first: answer.h's */
  char id[48];            /* resp_... */
  char msg_id[48];        /* msg_...: the output message */
  json_t *echo;           /* the request's fields an answer repeats */
  uint64_t seq;           /* the next event's sequence_number */
  bool started;           /* the message item was added */
  bool timings;           /* llama-server's timings_per_token */
  long long created;
  uint64_t tokens;        /* generated, for usage */
  evd_buf_t text;         /* the answer so far */
  finish_t finish;
  bool store;
} resp_t;

static void resp_free(answer_t *a) {
  resp_t *r = (resp_t *)a;
  json_decref(r->echo);
  evd_buf_free(&r->text);
}

/* ---- answers ---------------------------------------------------------------- */

static json_t *usage(resp_t *r) {
  uint64_t p = r->a.task->n_prompt, o = r->tokens;
  return json_pack("{s:I,s:{s:I},s:I,s:{s:I},s:I}", "input_tokens",
                   (json_int_t)p, "input_tokens_details", "cached_tokens",
                   (json_int_t)r->a.task->cached, "output_tokens",
                   (json_int_t)o,
                   "output_tokens_details", "reasoning_tokens", (json_int_t)0,
                   "total_tokens", (json_int_t)(p + o));
}

static json_t *message(resp_t *r, const char *status) {
  json_t *content = json_array();
  if (strcmp(status, "in_progress") != 0)
    json_array_append_new(content, json_pack(
        "{s:s,s:s%,s:[],s:[]}", "type", "output_text", "text",
        r->text.data ? r->text.data : "", r->text.len, "annotations",
        "logprobs"));
  return json_pack("{s:s,s:s,s:s,s:s,s:o}", "type", "message", "id",
                   r->msg_id, "status", status, "role", "assistant",
                   "content", content);
}

/* The response object: in_progress (no output yet) or as it ended. */
static json_t *response(resp_t *r, bool done) {
  bool incomplete = done && r->finish == FIN_LIMIT;
  json_t *j = json_pack(
      "{s:s,s:s,s:I,s:s,s:s,s:o,s:o,s:n}", "id", r->id, "object",
      "response", "created_at", (json_int_t)r->created, "status",
      !done ? "in_progress" : incomplete ? "incomplete" : "completed",
      "model", r->a.site->model, "output",
      done ? json_pack("[o]", message(r, incomplete ? "incomplete"
                                                    : "completed"))
           : json_array(),
      "incomplete_details", incomplete
          ? json_pack("{s:s}", "reason", "max_output_tokens")
          : json_null(), "error");
  if (j == NULL)
    return NULL;
  json_object_update(j, r->echo);
  json_object_set_new(j, "usage", done ? usage(r) : json_null());
  if (done)
    json_object_set_new(j, "completed_at", json_integer(time(NULL)));
  return j;
}

/* Keeps the finished response (store), with where its conversation is. */
static void keep(resp_t *r, json_t *answer) {
  if (!r->store || answer == NULL)
    return;
  char *s = json_dumps(answer, JSON_COMPACT);
  const task_t *t = r->a.task;
  rconv_t conv = {.n = t->conv_n, .gen = t->conv_gen, .last = t->conv_next};
  snprintf(conv.session, sizeof(conv.session), "%s", t->conv);
  if (s != NULL)
    rstore_put(r->a.site->responses, r->id, &conv, s);
}

/* An event of the stream: type, its sequence_number, and fields (taken). */
static json_t *event(resp_t *r, const char *type, json_t *fields) {
  json_t *e = json_pack("{s:s,s:I}", "type", type, "sequence_number",
                        (json_int_t)r->seq++);
  if (e != NULL && fields != NULL)
    json_object_update(e, fields);
  json_decref(fields);
  return e;
}

/* The stream's first events, once: the response created and in progress,
 * its message item and content part added. */
static void begin(resp_t *r, json_t *out) {
  if (!r->started) {
    r->started = true;
    json_array_append_new(out, event(r, "response.created", json_pack(
        "{s:o}", "response", response(r, false))));
    json_array_append_new(out, event(r, "response.in_progress", json_pack(
        "{s:o}", "response", response(r, false))));
    json_array_append_new(out, event(r, "response.output_item.added",
        json_pack("{s:i,s:o}", "output_index", 0, "item",
                  message(r, "in_progress"))));
    json_array_append_new(out, event(r, "response.content_part.added",
        json_pack("{s:s,s:i,s:i,s:{s:s,s:s,s:[]}}", "item_id", r->msg_id,
                  "output_index", 0, "content_index", 0, "part", "type",
                  "output_text", "text", "", "annotations")));
  }
}

static json_t *chunk(answer_t *a, const event_t *e, const char *text) {
  resp_t *r = (resp_t *)a;
  json_t *out = json_array();
  /* return_progress: llama-server's response.in_progress again, with
   * prompt_progress (and the timings so far with timings_per_token). */
  if (e->kind == EV_PROGRESS) {
    begin(r, out);
    json_t *ev = event(r, "response.in_progress", json_pack(
        "{s:o,s:o}", "response", response(r, false), "prompt_progress",
        timings_progress(r->a.task, e)));
    if (ev != NULL && r->timings)
      json_object_set_new(ev, "timings", timings_now(r->a.task, e));
    json_array_append_new(out, ev);
    return out;
  }
  if (e->kind == EV_END) {
    r->tokens += e->tokens;
    r->finish = e->finish;
    return out;
  }
  if (e->kind == EV_TOKEN)
    return out;
  begin(r, out);
  evd_buf_add(&r->text, text, e->len);
  json_t *ev = event(r, "response.output_text.delta",
      json_pack("{s:s,s:i,s:i,s:s%,s:[]}", "item_id", r->msg_id,
                "output_index", 0, "content_index", 0, "delta", text,
                e->len, "logprobs"));
  if (ev != NULL && r->timings)
    json_object_set_new(ev, "timings", timings_now(r->a.task, e));
  json_array_append_new(out, ev);
  return out;
}

/* The stream's end: the done events, then response.completed (or
 * .incomplete, at max_output_tokens). */
static json_t *last(answer_t *a) {
  resp_t *r = (resp_t *)a;
  json_t *out = json_array();
  begin(r, out); /* when nothing was written, the item still shows */
  const char *t = r->text.data ? r->text.data : "";
  json_array_append_new(out, event(r, "response.output_text.done",
      json_pack("{s:s,s:i,s:i,s:s%,s:[]}", "item_id", r->msg_id,
                "output_index", 0, "content_index", 0, "text", t,
                r->text.len, "logprobs")));
  json_array_append_new(out, event(r, "response.content_part.done",
      json_pack("{s:s,s:i,s:i,s:{s:s,s:s%,s:[]}}", "item_id", r->msg_id,
                "output_index", 0, "content_index", 0, "part", "type",
                "output_text", "text", t, r->text.len, "annotations")));
  json_array_append_new(out, event(r, "response.output_item.done",
      json_pack("{s:i,s:o}", "output_index", 0, "item",
                message(r, r->finish == FIN_LIMIT ? "incomplete"
                                                  : "completed"))));
  json_t *resp = response(r, true);
  keep(r, resp);
  json_t *ev = event(r, r->finish == FIN_LIMIT ? "response.incomplete"
                                               : "response.completed",
                     json_pack("{s:o}", "response", resp));
  /* timings_per_token: the last event has the whole answer's, as
   * llama-server's. */
  if (ev != NULL && r->timings)
    json_object_set_new(ev, "timings", timings_json(r->a.task, r->tokens));
  json_array_append_new(out, ev);
  return out;
}

static json_t *failed(answer_t *a, const fault_t *f) {
  resp_t *r = (resp_t *)a;
  return json_pack("[o]", event(r, "error", json_pack(
      "{s:s,s:s,s:n}", "code", f->code, "message", f->msg, "param")));
}

static json_t *whole(answer_t *a, const choice_out_t *out, uint32_t n) {
  resp_t *r = (resp_t *)a;
  (void)n;
  r->tokens += out[0].tokens;
  r->finish = out[0].finish;
  evd_buf_add(&r->text, out[0].text.data ? out[0].text.data : "",
              out[0].text.len);
  json_t *resp = response(r, true);
  keep(r, resp);
  return resp;
}

static const api_t responses_api = {.chunk = chunk, .whole = whole,
                                    .last = last, .failed = failed,
                                    .free = resp_free, .typed = true};

/* ---- requests ------------------------------------------------------------ */

/* The text of a message's content: a string, or a list of parts whose
 * input_text / output_text / text ones count, joined into buf; NULL when
 * neither. */
static const char *content_text(json_t *content, evd_buf_t *buf) {
  if (json_is_string(content))
    return json_string_value(content);
  if (!json_is_array(content))
    return NULL;
  size_t i;
  json_t *part;
  json_array_foreach(content, i, part) {
    json_t *type = json_object_get(part, "type"),
           *text = json_object_get(part, "text");
    const char *ty = json_is_string(type) ? json_string_value(type) : "";
    if ((strcmp(ty, "input_text") != 0 && strcmp(ty, "output_text") != 0 &&
         strcmp(ty, "text") != 0) || !json_is_string(text))
      return NULL;
    evd_buf_add(buf, json_string_value(text), json_string_length(text));
  }
  evd_buf_chr(buf, '\0');
  return buf->oom ? NULL : buf->data;
}

/* The request's input (and instructions) as chat messages appended to
 * msgs. 0, or -1 with f's why set. */
static int to_messages(fields_t *f, json_t *body, json_t *msgs) {
  json_t *instr = json_object_get(body, "instructions");
  json_t *input = json_object_get(body, "input");
  if (instr != NULL && !json_is_null(instr)) {
    if (!json_is_string(instr)) {
      f->bad = "instructions";
      snprintf(f->why, sizeof(f->why), "\"instructions\" must be a string");
      return -1;
    }
    json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system",
                                          "content", instr));
  }
  if (json_is_string(input)) {
    json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user",
                                          "content", input));
    return 0;
  }
  size_t n = json_array_size(input);
  if (!json_is_array(input) || n == 0 || n > 4096) {
    f->bad = "input";
    snprintf(f->why, sizeof(f->why), "\"input\" is required: a string, or "
             "a list of 1 to 4096 messages");
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    json_t *item = json_array_get(input, i);
    json_t *type = json_object_get(item, "type");
    json_t *role = json_object_get(item, "role");
    evd_buf_t buf;
    evd_buf_init(&buf);
    const char *text = content_text(json_object_get(item, "content"), &buf);
    bool ok = json_is_object(item) && json_is_string(role) && text != NULL &&
              (type == NULL || (json_is_string(type) &&
                                strcmp(json_string_value(type),
                                       "message") == 0));
    if (ok)
      json_array_append_new(msgs, json_pack("{s:O,s:s}", "role", role,
                                            "content", text));
    evd_buf_free(&buf);
    if (!ok) {
      f->bad = "input";
      snprintf(f->why, sizeof(f->why), "input item %zu must be a message: "
               "{\"role\", \"content\": a string or a list of input_text "
               "parts} (other items, such as function calls and images, "
               "are not supported)", i);
      return -1;
    }
  }
  return 0;
}

/* Fields that would change the answer and that serve does not honour. */
static const unhonoured_t unhonoured[] = {
    {"tools", 0, NULL},        {"top_logprobs", 0, NULL},
    {"include", 0, NULL},      {"background", 0, NULL},
    {"conversation", 0, NULL}, {"prompt", 0, NULL},
    {"reasoning", 0, NULL},    {NULL, 0, NULL}};

/* The turn that follows the previous answer, as the template writes it:
 * the template rendered for a stand-in of that answer and msgs, the text
 * after the stand-in. */
#define MARK "\x1f" "evictd-previous-answer" "\x1f"

static int next_turn(fields_t *f, const site_t *site, json_t *msgs,
                     evd_buf_t *out) {
  json_t *all = json_pack("[{s:s,s:s}]", "role", "assistant", "content",
                          MARK);
  json_array_extend(all, msgs);
  evd_buf_t text;
  evd_buf_init(&text);
  int rc = render_prompt(f, site, all, &text);
  json_decref(all);
  const char *at = rc == 0 && text.data ? strstr(text.data, MARK) : NULL;
  if (rc == 0 && at == NULL) {
    f->bad = "previous_response_id";
    snprintf(f->why, sizeof(f->why), "the chat template does not show the "
             "previous answer where a turn follows it: send the whole "
             "history instead");
    rc = -1;
  }
  if (rc == 0) {
    at += strlen(MARK);
    evd_buf_add(out, at, text.len - (size_t)(at - text.data));
  }
  evd_buf_free(&text);
  return rc;
}

/* previous_response_id, when given: *prev the conversation it left (its
 * session "" when none). 0; -1 with f's why set (a 400); 1 when no such
 * response is kept (a 404). */
static int previous(resp_t *r, fields_t *f, rconv_t *prev) {
  json_t *pid = json_object_get(f->body, "previous_response_id");
  prev->session[0] = '\0';
  if (pid == NULL || json_is_null(pid))
    return 0;
  if (!json_is_string(pid))
    return field_bad(f, "previous_response_id", "\"previous_response_id\" "
                     "must be a string");
  const char *id = json_string_value(pid);
  if (rstore_conv(r->a.site->responses, id, prev) != 0)
    return 1;
  if (prev->session[0] == '\0')
    return field_bad(f, "previous_response_id", "the conversation of "
                     "response %s was not kept (cache_prompt off, or it "
                     "failed): send the whole history", id);
  return 0;
}

/* metadata: an object of strings, or nothing; text.format: text alone.
 * 0, or -1 with f's why set. */
static int echoed_fields(fields_t *f) {
  json_t *meta = json_object_get(f->body, "metadata");
  const char *mk;
  json_t *mv;
  if (meta != NULL && !json_is_null(meta) && !json_is_object(meta))
    return field_bad(f, "metadata", "\"metadata\" must be an object of "
                     "strings");
  json_object_foreach(json_is_object(meta) ? meta : NULL, mk, mv)
    if (!json_is_string(mv))
      return field_bad(f, "metadata", "\"metadata\" must be an object of "
                       "strings");
  json_t *fmt = json_object_get(json_object_get(f->body, "text"), "format");
  json_t *ftype = json_object_get(fmt, "type");
  if (fmt != NULL && !json_is_null(fmt) &&
      (!json_is_string(ftype) ||
       strcmp(json_string_value(ftype), "text") != 0))
    return field_bad(f, "text", "\"text.format\" other than text is not "
                     "supported by this server: it would change the "
                     "answer, so it is refused rather than ignored");
  return 0;
}

/* The new turn's tokens only, after prev's conversation, into t: first the
 * previous answer's last token, which it shows and its conversation never
 * decoded (unless it was the end token: the turn's text then closes the
 * answer itself). 0, or -1 with f's why set. */
static int continued(resp_t *r, fields_t *f, json_t *msgs,
                     const rconv_t *prev, task_t *t) {
  evd_buf_t text;
  evd_buf_init(&text);
  llama_token *toks = NULL;
  uint32_t lead = prev->last >= 0 ? 1 : 0;
  int k = next_turn(f, r->a.site, msgs, &text) == 0
              ? lm_tokenize_more(r->a.site->lm, text.data ? text.data : "",
                                 text.len, true, &toks)
              : -2;
  int rc = 0;
  if (k == -2)
    rc = -1;
  else if (k <= 0)
    rc = field_bad(f, "input", "the input has no tokens");
  else if ((t->prompt = malloc((k + lead) * sizeof(*toks))) == NULL)
    rc = -1, f->bad = NULL;
  if (rc == 0) {
    if (lead)
      t->prompt[0] = prev->last;
    memcpy(t->prompt + lead, toks, (size_t)k * sizeof(*toks));
    t->base = prev->n;
    t->n_prompt = prev->n + lead + (uint32_t)k;
    t->cont_gen = prev->gen;
    snprintf(t->cont, sizeof(t->cont), "%s", prev->session);
  }
  free(toks);
  evd_buf_free(&text);
  return rc;
}

/* The whole input through the template into t's prompt. */
static int fresh(resp_t *r, fields_t *f, json_t *msgs, task_t *t) {
  evd_buf_t text;
  evd_buf_init(&text);
  int rc = render_prompt(f, r->a.site, msgs, &text) ||
           field_prompt(f, r->a.site, "input", text.data, text.len, true, t);
  evd_buf_free(&text);
  return rc;
}

/* llama-server's sampler chain, as chat's: the request's fields
 * (temperature, top_p, and llama-server's own) over the command line's
 * defaults; the answer repeats what it drew with. */
static int sampler(resp_t *r, fields_t *f, task_t *t) {
  json_t *params = chain_params(r->a.site, NULL, f->body), *set = NULL;
  int bad = params == NULL ||
            field_extras(f, params, r->a.stream, &r->timings, t) ||
            chain_make(f, r->a.site, params, t);
  json_decref(params);
  char *st = NULL;
  if (bad == 0 &&
      up_sampler_settings(t->want.samplers[0], &st, NULL, 0) == 0)
    set = json_loads(st, 0, NULL);
  free(st);
  if (set != NULL) {
    t->want.temp = json_number_value(json_object_get(set, "temperature"));
    t->want.top_p = json_number_value(json_object_get(set, "top_p"));
  }
  json_decref(set);
  return bad;
}

/* What the answer repeats of the request (echo); 0 or -1. */
static int echo(resp_t *r, json_t *body, const task_t *t) {
  r->echo = json_pack(
      "{s:O?,s:O?,s:O?,s:f,s:f,s:b,s:[],s:s,s:{s:{s:s}},s:s,s:b,"
      "s:O?}", "previous_response_id",
      json_object_get(body, "previous_response_id"), "instructions",
      json_object_get(body, "instructions"), "max_output_tokens",
      json_object_get(body, "max_output_tokens"), "temperature",
      t->want.temp, "top_p", t->want.top_p, "store", r->store, "tools",
      "tool_choice", "auto", "text", "format", "type", "text", "truncation",
      "disabled", "parallel_tool_calls", true, "metadata",
      json_object_get(body, "metadata"));
  if (r->echo == NULL)
    return -1;
  if (json_is_null(json_object_get(r->echo, "metadata")))
    json_object_set_new(r->echo, "metadata", json_object());
  return 0;
}

/* POST /v1/responses (and /responses). */
static enum MHD_Result create(call_t *c) {
  fields_t f;
  task_t *t;
  enum MHD_Result sent;
  resp_t *r = answer_begin(c, &responses_api, sizeof(*r), &f, &t, &sent);
  if (r == NULL)
    return sent;
  json_t *body = f.body, *msgs = json_array();
  const site_t *site = r->a.site;
  const serve_opts_t *o = site->o;
  long long max_tokens;
  rconv_t prev = {.session = ""};
  int bad = msgs == NULL ? (f.bad = NULL, -1) : 0, found = 0;
  if (bad == 0)
    bad = field_model(&f) || (found = previous(r, &f, &prev)) != 0;
  if (found == 1) {
    json_t *pid = json_object_get(body, "previous_response_id");
    enum MHD_Result rc = http_error(
        c, 404, "previous_response_not_found", "previous_response_id",
        "no stored response %s (never made, made with store false, or no "
        "longer among the newest kept)", json_string_value(pid));
    json_decref(body);
    json_decref(msgs);
    tq_release(site->q, t);
    return rc;
  }
  if (bad == 0)
    bad = field_int(&f, "max_output_tokens", 1, o->n_predict_max,
                    o->n_predict ? o->n_predict : o->n_predict_max,
                    &max_tokens) ||
          field_num(&f, "temperature", 0, 2, 1, &t->want.temp) ||
          field_num(&f, "top_p", 0, 1, 1, &t->want.top_p) ||
          field_bool(&f, "stream", false, &r->a.stream) ||
          field_bool(&f, "store", true, &r->store) ||
          field_unhonoured(&f, unhonoured) || to_messages(&f, body, msgs) ||
          echoed_fields(&f);
  if (bad == 0)
    bad = prev.session[0] != '\0' ? continued(r, &f, msgs, &prev, t)
                                  : fresh(r, &f, msgs, t);
  if (bad == 0) {
    t->want.n_predict = (uint32_t)max_tokens;
    t->want.n = 1;
    t->want.cache_prompt = true;
    t->want.seed = (uint64_t)time(NULL) ^ (uintptr_t)t;
    bad = sampler(r, &f, t);
    r->created = (long long)time(NULL);
  }
  if (bad == 0) {
    answer_random_id(r->id, sizeof(r->id), "resp_", RESP_ID_CHARS);
    answer_random_id(r->msg_id, sizeof(r->msg_id), "msg_", RESP_ID_CHARS);
    if (echo(r, body, t) != 0)
      bad = -1, f.bad = NULL;
  }
  json_decref(body);
  json_decref(msgs);
  return answer_start(c, &r->a, t, bad, &f);
}

/* GET /v1/responses/{id}: the stored answer. */
static enum MHD_Result get(call_t *c) {
  const site_t *site = c->ctx;
  bool found;
  char *answer = rstore_answer(site->responses, c->tail, &found);
  if (!found)
    return http_error(c, 404, "not_found", NULL, "no stored response %s",
                      c->tail);
  if (answer == NULL)
    return http_error(c, 500, "out_of_memory", NULL, "out of memory");
  return http_send(c, 200, "application/json", answer, strlen(answer));
}

/* DELETE /v1/responses/{id}. */
static enum MHD_Result delete(call_t *c) {
  const site_t *site = c->ctx;
  if (!rstore_delete(site->responses, c->tail))
    return http_error(c, 404, "not_found", NULL, "no stored response %s",
                      c->tail);
  return http_send_json(c, 200, json_pack("{s:s,s:s,s:b}", "id", c->tail,
                                          "object", "response", "deleted",
                                          1));
}

const http_route_t responses_routes[] = {
    {"/v1/responses", "POST", create, 0, NULL, NULL},
    {"/responses", "POST", create, 0, NULL, NULL},
    {"/v1/responses/{id}", "GET", get, 0, NULL, NULL},
    {"/v1/responses/{id}", "DELETE", delete, 0, NULL, NULL},
    {NULL, NULL, NULL, 0, NULL, NULL}};
