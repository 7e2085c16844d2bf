/* OpenAI's Responses API: POST /v1/responses (input as a string or
 * messages, instructions, max_output_tokens, temperature, top_p, stream
 * with its typed events, store), GET and DELETE /v1/responses/{id}, and
 * previous_response_id: the stateful form of a conversation, which
 * continues the conversation the named response left parked (convs.c)
 * with the new input's tokens alone: the history is neither sent again nor
 * decoded again. The new input goes through the chat template as the
 * turn that follows the previous answer: the template is rendered for
 * that answer (a marker in its place) and the new messages, and what
 * follows the marker is the turn's text.
 *
 * A stored response is its answer (for GET) and where its conversation
 * lives (its evictd session and the positions it computed); the newest
 * RESPONSES_MAX are kept. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "serve/http.h"
#include "serve/upstream.h"

/* ---- the store ----------------------------------------------------------- */

typedef struct stored_s {
  struct stored_s *prev, *next; /* newest first */
  char id[48];
  char session[136];      /* the conversation it left ("" when none) */
  uint32_t n;             /* positions that conversation computed */
  uint64_t gen;           /* its generation then (a later change of it
                             by another request is told) */
  int32_t last;           /* the answer's last token, never decoded (-1:
                             none): the continuation decodes it first */
  char *answer;           /* the response object, as JSON text */
} stored_t;

typedef struct rstore_s {
  pthread_mutex_t mu;
  stored_t *head, *tail;
  uint32_t count, max;
} rstore_t;

rstore_t *responses_store_new(uint32_t max) {
  rstore_t *r = calloc(1, sizeof(*r));
  if (r == NULL)
    return NULL;
  pthread_mutex_init(&r->mu, NULL);
  r->max = max;
  return r;
}

static void unlink_stored(rstore_t *r, stored_t *s) {
  if (s->prev)
    s->prev->next = s->next;
  else
    r->head = s->next;
  if (s->next)
    s->next->prev = s->prev;
  else
    r->tail = s->prev;
  r->count--;
}

void responses_store_free(rstore_t *r) {
  if (r == NULL)
    return;
  for (stored_t *s = r->head, *next; s != NULL; s = next) {
    next = s->next;
    free(s->answer);
    free(s);
  }
  pthread_mutex_destroy(&r->mu);
  free(r);
}

/* Under the lock: the stored response id, or NULL. */
static stored_t *find(rstore_t *r, const char *id) {
  for (stored_t *s = r->head; s != NULL; s = s->next)
    if (strcmp(s->id, id) == 0)
      return s;
  return NULL;
}

/* Keeps a response (answer taken: malloc'd), the oldest let go beyond
 * max. */
static void put(rstore_t *r, const char *id, const task_t *t,
                char *answer) {
  stored_t *s = calloc(1, sizeof(*s));
  if (s == NULL) {
    free(answer);
    return;
  }
  snprintf(s->id, sizeof(s->id), "%s", id);
  snprintf(s->session, sizeof(s->session), "%s", t->conv);
  s->n = t->conv_n;
  s->gen = t->conv_gen;
  s->last = t->conv_next;
  s->answer = answer;
  pthread_mutex_lock(&r->mu);
  s->next = r->head;
  if (r->head)
    r->head->prev = s;
  r->head = s;
  if (r->tail == NULL)
    r->tail = s;
  r->count++;
  while (r->count > r->max) {
    stored_t *old = r->tail;
    unlink_stored(r, old);
    free(old->answer);
    free(old);
  }
  pthread_mutex_unlock(&r->mu);
}

/* ---- a request's state ---------------------------------------------------- */

typedef struct resp_s {
  char id[48];            /* resp_... */
  char msg_id[48];        /* msg_...: the output message */
  json_t *echo;           /* the request's fields an answer repeats */
  uint64_t seq;           /* the next event's sequence_number */
  bool started;           /* the message item was added */
  evd_buf_t text;         /* the answer so far */
  finish_t finish;
  bool store;
} resp_t;

void responses_call_free(call_t *c) {
  resp_t *r = c->resp;
  if (r == NULL)
    return;
  json_decref(r->echo);
  evd_buf_free(&r->text);
  free(r);
  c->resp = NULL;
}

/* 24 random letters and digits after prefix. */
static void random_id(char *out, size_t len, const char *prefix) {
  static const char abc[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  unsigned char b[24];
  if (getrandom(b, sizeof(b), 0) != sizeof(b))
    for (size_t i = 0; i < sizeof(b); i++)
      b[i] = (unsigned char)rand();
  char s[25];
  for (size_t i = 0; i < 24; i++)
    s[i] = abc[b[i] % 36];
  s[24] = '\0';
  snprintf(out, len, "%s%s", prefix, s);
}

/* ---- answers ---------------------------------------------------------------- */

static json_t *usage(call_t *c) {
  uint64_t p = c->task->n_prompt, o = c->tokens;
  return json_pack("{s:I,s:{s:I},s:I,s:{s:I},s:I}", "input_tokens",
                   (json_int_t)p, "input_tokens_details", "cached_tokens",
                   (json_int_t)c->task->cached, "output_tokens", (json_int_t)o,
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
static json_t *response(call_t *c, resp_t *r, bool done) {
  bool incomplete = done && r->finish == FIN_LIMIT;
  json_t *j = json_pack(
      "{s:s,s:s,s:I,s:s,s:s,s:o,s:o,s:n}", "id", r->id, "object",
      "response", "created_at", (json_int_t)c->created, "status",
      !done ? "in_progress" : incomplete ? "incomplete" : "completed",
      "model", c->site->model, "output",
      done ? json_pack("[o]", message(r, incomplete ? "incomplete"
                                                    : "completed"))
           : json_array(),
      "incomplete_details", incomplete
          ? json_pack("{s:s}", "reason", "max_output_tokens")
          : json_null(), "error");
  if (j == NULL)
    return NULL;
  json_object_update(j, r->echo);
  json_object_set_new(j, "usage", done ? usage(c) : json_null());
  if (done)
    json_object_set_new(j, "completed_at", json_integer(time(NULL)));
  return j;
}

/* Keeps the finished response (store), with where its conversation is. */
static void keep(call_t *c, resp_t *r, json_t *answer) {
  if (!r->store || answer == NULL)
    return;
  char *s = json_dumps(answer, JSON_COMPACT);
  if (s != NULL)
    put(c->site->responses, r->id, c->task, s);
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
static void begin(call_t *c, resp_t *r, json_t *out) {
  if (!r->started) {
    r->started = true;
    json_array_append_new(out, event(r, "response.created", json_pack(
        "{s:o}", "response", response(c, r, false))));
    json_array_append_new(out, event(r, "response.in_progress", json_pack(
        "{s:o}", "response", response(c, r, false))));
    json_array_append_new(out, event(r, "response.output_item.added",
        json_pack("{s:i,s:o}", "output_index", 0, "item",
                  message(r, "in_progress"))));
    json_array_append_new(out, event(r, "response.content_part.added",
        json_pack("{s:s,s:i,s:i,s:{s:s,s:s,s:[]}}", "item_id", r->msg_id,
                  "output_index", 0, "content_index", 0, "part", "type",
                  "output_text", "text", "", "annotations")));
  }
}

static json_t *chunk(call_t *c, const event_t *e, const char *text) {
  resp_t *r = c->resp;
  json_t *out = json_array();
  /* return_progress: llama-server's response.in_progress again, with
   * prompt_progress (and the timings so far with timings_per_token). */
  if (e->kind == EV_PROGRESS) {
    begin(c, r, out);
    json_t *ev = event(r, "response.in_progress", json_pack(
        "{s:o,s:o}", "response", response(c, r, false), "prompt_progress",
        native_progress(c->task, e)));
    if (ev != NULL && c->timings)
      json_object_set_new(ev, "timings", native_timings_now(c->task, e));
    json_array_append_new(out, ev);
    return out;
  }
  if (e->kind == EV_END) {
    c->tokens += e->tokens;
    r->finish = e->finish;
    return out;
  }
  if (e->kind == EV_TOKEN)
    return out;
  begin(c, r, out);
  evd_buf_add(&r->text, text, e->len);
  json_t *ev = event(r, "response.output_text.delta",
      json_pack("{s:s,s:i,s:i,s:s%,s:[]}", "item_id", r->msg_id,
                "output_index", 0, "content_index", 0, "delta", text,
                e->len, "logprobs"));
  if (ev != NULL && c->timings)
    json_object_set_new(ev, "timings", native_timings_now(c->task, e));
  json_array_append_new(out, ev);
  return out;
}

/* The stream's end: the done events, then response.completed (or
 * .incomplete, at max_output_tokens). */
static json_t *last(call_t *c) {
  resp_t *r = c->resp;
  json_t *out = json_array();
  begin(c, r, out); /* when nothing was written, the item still shows */
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
  json_t *resp = response(c, r, true);
  keep(c, r, resp);
  json_t *ev = event(r, r->finish == FIN_LIMIT ? "response.incomplete"
                                               : "response.completed",
                     json_pack("{s:o}", "response", resp));
  /* timings_per_token: the last event has the whole answer's, as
   * llama-server's. */
  if (ev != NULL && c->timings)
    json_object_set_new(ev, "timings", native_timings(c->task, c->tokens));
  json_array_append_new(out, ev);
  return out;
}

static json_t *failed(call_t *c, const fault_t *f) {
  resp_t *r = c->resp;
  return json_pack("[o]", event(r, "error", json_pack(
      "{s:s,s:s,s:n}", "code", f->code, "message", f->msg, "param")));
}

static json_t *whole(call_t *c, const choice_out_t *out, uint32_t n) {
  resp_t *r = c->resp;
  (void)n;
  c->tokens += out[0].tokens;
  r->finish = out[0].finish;
  evd_buf_add(&r->text, out[0].text.data ? out[0].text.data : "",
              out[0].text.len);
  json_t *resp = response(c, r, true);
  keep(c, r, resp);
  return resp;
}

static const api_t responses_api = {.chunk = chunk, .whole = whole,
                                    .last = last, .typed = true,
                                    .failed = failed};

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
  int rc = chat_prompt(f, site, all, &text);
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

enum MHD_Result responses_create(call_t *c) {
  json_t *body;
  enum MHD_Result sent;
  if (http_body(c, &body, &sent) != 0)
    return sent;
  const serve_opts_t *o = c->site->o;
  fields_t f = {.body = body};
  task_t *t = task_new();
  resp_t *r = calloc(1, sizeof(*r));
  json_t *msgs = json_array();
  evd_buf_t text;
  evd_buf_init(&text);
  long long max_tokens;
  int bad = t == NULL || r == NULL || msgs == NULL ? -1 : 0;
  c->resp = r;
  c->chat = true;
  const char *prev = NULL;
  char prev_id[64] = "";
  uint32_t prev_n = 0;
  uint64_t prev_gen = 0;
  int32_t prev_next = -1;
  char prev_session[136] = "";
  json_t *pid = json_object_get(body, "previous_response_id");
  json_t *model = json_object_get(body, "model");
  if (bad == 0 && model != NULL && !json_is_null(model) &&
      !json_is_string(model)) {
    f.bad = "model";
    snprintf(f.why, sizeof(f.why), "\"model\" must be a string");
    bad = -1;
  }
  if (bad == 0 && pid != NULL && !json_is_null(pid)) {
    if (!json_is_string(pid)) {
      f.bad = "previous_response_id";
      snprintf(f.why, sizeof(f.why), "\"previous_response_id\" must be a "
               "string");
      bad = -1;
    } else {
      /* A copy: the body goes before the answer is made. */
      snprintf(prev_id, sizeof(prev_id), "%s", json_string_value(pid));
      prev = prev_id;
      rstore_t *rs = c->site->responses;
      pthread_mutex_lock(&rs->mu);
      stored_t *s = find(rs, prev);
      if (s != NULL) {
        snprintf(prev_session, sizeof(prev_session), "%s", s->session);
        prev_n = s->n;
        prev_gen = s->gen;
        prev_next = s->last;
      }
      pthread_mutex_unlock(&rs->mu);
      if (s == NULL) {
        json_decref(body);
        json_decref(msgs);
        tq_release(c->site->q, t);
        return reply_error(c, 404, "previous_response_not_found",
                           "previous_response_id", "no stored response %s "
                           "(never made, made with store false, or no "
                           "longer among the newest kept)", prev);
      }
      if (prev_session[0] == '\0') {
        f.bad = "previous_response_id";
        snprintf(f.why, sizeof(f.why), "the conversation of response %s "
                 "was not kept (cache_prompt off, or it failed): send the "
                 "whole history", prev);
        bad = -1;
      }
    }
  }
  if (bad == 0)
    bad = field_int(&f, "max_output_tokens", 1, o->n_predict_max,
                    o->n_predict ? o->n_predict : o->n_predict_max,
                    &max_tokens) ||
          field_num(&f, "temperature", 0, 2, 1, &t->want.temp) ||
          field_num(&f, "top_p", 0, 1, 1, &t->want.top_p) ||
          field_bool(&f, "stream", false, &c->stream) ||
          field_bool(&f, "store", true, &r->store) ||
          field_unhonoured(&f, unhonoured) || to_messages(&f, body, msgs);
  json_t *meta = json_object_get(body, "metadata");
  if (bad == 0 && meta != NULL && !json_is_null(meta) &&
      !json_is_object(meta)) {
    f.bad = "metadata";
    snprintf(f.why, sizeof(f.why), "\"metadata\" must be an object of "
             "strings");
    bad = -1;
  }
  const char *mk;
  json_t *mv;
  json_object_foreach(json_is_object(meta) ? meta : NULL, mk, mv)
    if (bad == 0 && !json_is_string(mv)) {
      f.bad = "metadata";
      snprintf(f.why, sizeof(f.why), "\"metadata\" must be an object of "
               "strings");
      bad = -1;
    }
  json_t *fmt = json_object_get(json_object_get(body, "text"), "format");
  json_t *ftype = json_object_get(fmt, "type");
  if (bad == 0 && fmt != NULL && !json_is_null(fmt) &&
      (!json_is_string(ftype) ||
       strcmp(json_string_value(ftype), "text") != 0)) {
    f.bad = "text";
    snprintf(f.why, sizeof(f.why), "\"text.format\" other than text is not "
             "supported by this server: it would change the answer, so it "
             "is refused rather than ignored");
    bad = -1;
  }
  if (bad == 0 && prev != NULL) {
    /* The new turn's tokens only, after the conversation's: first the
     * previous answer's last token, which it shows and its conversation
     * never decoded (unless it was the end token: the turn's text then
     * closes the answer itself). */
    bad = next_turn(&f, c->site, msgs, &text);
    llama_token *toks = NULL;
    int k = bad == 0 ? lm_tokenize_more(c->site->lm, text.data ? text.data
                                        : "", text.len, true, &toks)
                     : -1;
    uint32_t lead = prev_next >= 0 ? 1 : 0;
    if (bad == 0 && k <= 0) {
      f.bad = "input";
      snprintf(f.why, sizeof(f.why), "the input has no tokens");
      bad = -1;
    } else if (bad == 0 &&
               (t->prompt = malloc((k + lead) * sizeof(*toks))) == NULL) {
      bad = -1;
    }
    if (bad == 0) {
      if (lead)
        t->prompt[0] = prev_next;
      memcpy(t->prompt + lead, toks, (size_t)k * sizeof(*toks));
      t->base = prev_n;
      t->n_prompt = prev_n + lead + (uint32_t)k;
      t->cont_gen = prev_gen;
      snprintf(t->cont, sizeof(t->cont), "%s", prev_session);
    }
    free(toks);
  } else if (bad == 0) {
    bad = chat_prompt(&f, c->site, msgs, &text) ||
          field_prompt(&f, c->site, "input", text.data, text.len, true, t);
  }
  if (bad == 0) {
    t->want.n_predict = (uint32_t)max_tokens;
    t->want.n = 1;
    t->want.cache_prompt = true;
    t->want.seed = (uint64_t)time(NULL) ^ (uintptr_t)t;
    /* llama-server's sampler chain, as chat's: the request's fields
     * (temperature, top_p, and llama-server's own) over the command
     * line's defaults; the answer repeats what it drew with. */
    json_t *params = sampling_params(c->site, NULL, body), *set = NULL;
    bad = params == NULL ||
          field_extras(&f, params, c->stream, &c->timings, t) ||
          sampling_make(&f, c->site, params, t);
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
    c->created = (long long)time(NULL);
  }
  if (bad == 0) {
    random_id(r->id, sizeof(r->id), "resp_");
    random_id(r->msg_id, sizeof(r->msg_id), "msg_");
    r->echo = json_pack(
        "{s:O?,s:O?,s:O?,s:f,s:f,s:b,s:[],s:s,s:{s:{s:s}},s:s,s:b,"
        "s:O?}", "previous_response_id", pid, "instructions",
        json_object_get(body, "instructions"), "max_output_tokens",
        json_object_get(body, "max_output_tokens"), "temperature",
        t->want.temp, "top_p", t->want.top_p, "store", r->store, "tools",
        "tool_choice", "auto", "text", "format", "type", "text", "truncation",
        "disabled", "parallel_tool_calls", true, "metadata",
        json_object_get(body, "metadata"));
    if (r->echo == NULL)
      bad = -1;
    else if (json_is_null(json_object_get(r->echo, "metadata")))
      json_object_set_new(r->echo, "metadata", json_object());
  }
  json_decref(body);
  json_decref(msgs);
  evd_buf_free(&text);
  if (t == NULL || r == NULL)
    return reply_error(c, 500, "out_of_memory", NULL, "out of memory");
  if (bad != 0) {
    tq_release(c->site->q, t);
    return reply_error(c, 400, "invalid_request", f.bad, "%s",
                       f.bad ? f.why : "out of memory");
  }
  return reply_task(c, t, &responses_api, c->stream);
}

enum MHD_Result responses_get(call_t *c, const char *id) {
  rstore_t *r = c->site->responses;
  char *answer = NULL;
  pthread_mutex_lock(&r->mu);
  stored_t *s = find(r, id);
  if (s != NULL)
    answer = strdup(s->answer);
  pthread_mutex_unlock(&r->mu);
  if (s == NULL)
    return reply_error(c, 404, "not_found", NULL, "no stored response %s",
                       id);
  if (answer == NULL)
    return reply_error(c, 500, "out_of_memory", NULL, "out of memory");
  return reply_text(c, 200, "application/json", answer, strlen(answer));
}

enum MHD_Result responses_delete(call_t *c, const char *id) {
  rstore_t *r = c->site->responses;
  pthread_mutex_lock(&r->mu);
  stored_t *s = find(r, id);
  if (s != NULL) {
    unlink_stored(r, s);
    free(s->answer);
    free(s);
  }
  pthread_mutex_unlock(&r->mu);
  if (s == NULL)
    return reply_error(c, 404, "not_found", NULL, "no stored response %s",
                       id);
  return reply_json(c, 200, json_pack("{s:s,s:s,s:b}", "id", id, "object",
                                      "response", "deleted", 1));
}
