/* POST /completion (native.h), as llama.cpp's own server answers it:
 * {"prompt" (a string, token ids, both mixed, an object {"prompt_string"},
 * or a list of several such prompts, each its own answer), "n_predict"
 * (or "max_completion_tokens", "max_tokens"; -1: until an end token),
 * "stream", the sampler's fields under llama-server's names (temperature,
 * top_k, top_p, min_p, penalties, logit_bias, grammar, json_schema,
 * n_probs or logprobs, seed, ...), "stop", "return_tokens",
 * "cache_prompt", "response_fields"} in; {"content", "tokens",
 * "id_slot", "stop", "model", "tokens_predicted",
 * "tokens_evaluated", "generation_settings", "prompt", "has_new_line",
 * "truncated", "stop_type", "stopping_word", "tokens_cached", "timings",
 * "completion_probabilities", "session"} out, or a stream of {"content",
 * "tokens", "stop": false, ...} events ending with {"stop": true, ...}.
 * One choice a prompt; several prompts, a list of answers (not streamed).
 * Its timings, prompt_progress and stop_type are llama-server's fields
 * every API may carry (shared/timings.h). */
#include "serve/api/native.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/shared/answer.h"
#include "serve/shared/chain.h"
#include "serve/shared/fields.h"
#include "serve/shared/probs.h"
#include "serve/shared/timings.h"
#include "serve/upstream/sampler.h"

/* What /completion keeps while it answers a prompt: the tokens drawn and
 * their probabilities, the settings. */
typedef struct nat_s {
  struct nat_s *more;     /* the next prompt's, of several */
  task_t *task;           /* several prompts: this one's (borrowed) */
  uint32_t index;         /* its prompt's among several */
  json_t *fields;         /* response_fields: the paths answered, or NULL */
  json_t *tokens;         /* ids, when return_tokens or streamed */
  json_t *probs;          /* completion_probabilities, when n_probs */
  json_t *settings;       /* generation_settings */
  bool return_tokens;
  bool stream;            /* every chunk says its tokens, as llama-server's */
  bool post;              /* post_sampling_probs: probabilities, not logs */
  bool has_new_line;
} nat_t;

static void nat_free(nat_t *n) {
  while (n != NULL) {
    nat_t *next = n->more;
    json_decref(n->fields);
    json_decref(n->tokens);
    json_decref(n->probs);
    json_decref(n->settings);
    free(n);
    n = next;
  }
}

/* A request's state: its prompts', in order, and the one whose answer is
 * made now. */
typedef struct nat_call_s {
  answer_t a;             /* first: answer.h's */
  nat_t *head, *cur;
  bool timings;           /* llama-server's timings_per_token */
} nat_call_t;

static void nat_call_free(answer_t *a) { nat_free(((nat_call_t *)a)->head); }

/* llama-server's response_fields: of the answer j (taken), the values at
 * the paths asked ("a/b": b inside a), each under its path; a path that
 * leads nowhere is left out. The whole answer without them. */
static json_t *only_fields(json_t *j, json_t *paths) {
  if (j == NULL || json_array_size(paths) == 0)
    return j;
  json_t *out = json_object(), *p;
  size_t i;
  json_array_foreach(paths, i, p) {
    const char *path = json_string_value(p), *at = path;
    json_t *v = j;
    while (v != NULL && at != NULL) {
      const char *end = strchr(at, '/');
      size_t len = end ? (size_t)(end - at) : strlen(at);
      v = json_is_object(v) ? json_object_getn(v, at, len) : NULL;
      at = end ? end + 1 : NULL;
    }
    if (v != NULL)
      json_object_set(out, path, v);
  }
  json_decref(j);
  return out;
}

/* A drawn token: its id (return_tokens, or a stream's chunk) and
 * probabilities (n_probs). */
static void take_token(answer_t *a, uint32_t i, const char *bytes,
                       size_t len) {
  nat_t *n = ((nat_call_t *)a)->cur;
  (void)i;
  token_ev_t *t = probs_read(bytes, len);
  if (t == NULL)
    return;
  if (n->return_tokens || n->stream)
    json_array_append_new(n->tokens, json_integer(t->id));
  if (a->task->want.n_probs > 0)
    json_array_append_new(n->probs, probs_native(a->site, t, n->post));
  free(t);
}

static json_t *chunk(answer_t *a, const event_t *e, const char *text) {
  nat_call_t *nc = (nat_call_t *)a;
  nat_t *n = nc->cur;
  if (e->kind == EV_TOKEN) {
    take_token(a, 0, text, e->len);
    return NULL;
  }
  if (e->kind == EV_PROGRESS) {
    json_t *j = json_pack("{s:i,s:s,s:[],s:b,s:i,s:i,s:I,s:o}", "index", 0,
                          "content", "", "tokens", "stop", 0, "id_slot", -1,
                          "tokens_predicted", 0, "tokens_evaluated",
                          (json_int_t)a->task->n_prompt, "prompt_progress",
                          timings_progress(a->task, e));
    if (j != NULL && nc->timings)
      json_object_set_new(j, "timings", timings_now(a->task, e));
    return j;
  }
  if (e->kind == EV_TEXT) {
    n->has_new_line = n->has_new_line || memchr(text, '\n', e->len) != NULL;
    /* The chunk takes the tokens and probabilities since the last one. */
    json_t *j = json_pack("{s:i,s:s%,s:o,s:b,s:i,s:i,s:I}", "index", 0,
                          "content", text, e->len, "tokens", n->tokens,
                          "stop", 0, "id_slot", -1, "tokens_predicted",
                          (int)e->tokens, "tokens_evaluated",
                          (json_int_t)a->task->n_prompt);
    n->tokens = json_array();
    if (j != NULL && nc->timings)
      json_object_set_new(j, "timings", timings_now(a->task, e));
    if (j != NULL && json_array_size(n->probs) > 0) {
      json_object_set_new(j, "completion_probabilities", n->probs);
      n->probs = json_array();
    }
    return j;
  }
  task_t *t = a->task;
  return only_fields(json_pack(
      "{s:i,s:s,s:[],s:i,s:b,s:s,s:i,s:I,s:O,s:o,s:b,s:b,s:s,s:s,s:I,s:o,"
      "s:s}", "index", 0, "content", "", "tokens", "id_slot", -1, "stop", 1,
      "model",
      a->site->model, "tokens_predicted", (int)e->tokens,
      "tokens_evaluated", (json_int_t)t->n_prompt, "generation_settings",
      n->settings, "prompt", timings_prompt(a->site, t), "has_new_line",
      n->has_new_line,
      "truncated", 0,
      "stop_type", timings_stop_type(e->finish), "stopping_word",
      timings_stopping_word(t, e->finish, e->stop),
      "tokens_cached", (json_int_t)t->cached, "timings",
      timings_json(t, e->tokens), "session",
      t->conv[0] ? t->conv : t->id), n->fields);
}

static json_t *whole(answer_t *a, const choice_out_t *out, uint32_t n_out) {
  nat_t *n = ((nat_call_t *)a)->cur;
  task_t *t = a->task;
  (void)n_out;
  answer_drawn(a, 0, &out[0], take_token);
  const char *text = out[0].text.data ? out[0].text.data : "";
  json_t *j = json_pack(
      "{s:i,s:s%,s:O,s:i,s:b,s:s,s:i,s:I,s:O,s:o,s:b,s:b,s:s,s:s,s:I,s:o,"
      "s:s}", "index", (int)n->index, "content", text, out[0].text.len,
      "tokens", n->tokens, "id_slot", -1, "stop", 1, "model", a->site->model,
      "tokens_predicted", (int)out[0].tokens, "tokens_evaluated",
      (json_int_t)t->n_prompt, "generation_settings", n->settings,
      "prompt", timings_prompt(a->site, t), "has_new_line",
      memchr(text, '\n', out[0].text.len) != NULL, "truncated", 0,
      "stop_type", timings_stop_type(out[0].finish), "stopping_word",
      timings_stopping_word(t, out[0].finish, out[0].stop),
      "tokens_cached", (json_int_t)t->cached, "timings",
      timings_json(t, out[0].tokens), "session",
      t->conv[0] ? t->conv : t->id);
  if (j != NULL && t->want.n_probs > 0)
    json_object_set(j, "completion_probabilities", n->probs);
  return only_fields(j, n->fields);
}

static const api_t native = {.chunk = chunk, .whole = whole,
                             .free = nat_call_free};

/* llama-server's fields of /completion that would change the answer and
 * that serve cannot honour: refused unless they ask for nothing. */
static const unhonoured_t unhonoured[] = {
    {"t_max_predict_ms", 0, NULL}, {"n_indent", 0, NULL},
    {"lora", 0, NULL}, {"image_data", 0, NULL},
    {"multimodal_data", 0, NULL}, {"n_cmpl", 1, NULL}, {"n", 1, NULL},
    {NULL, 0, NULL}};

/* llama-server's other name of n_probs here, "logprobs" (a count), when
 * n_probs is not given: into params (chain_params leaves logprobs out,
 * a chat's boolean elsewhere). 0, or -1 with f's why set. */
static int probs_alias(fields_t *f, json_t *body, json_t *params) {
  json_t *np = json_object_get(body, "n_probs");
  json_t *lp = json_object_get(body, "logprobs");
  long long k;
  if ((np != NULL && !json_is_null(np)) || lp == NULL || json_is_null(lp))
    return 0;
  if (field_int(f, "logprobs", 0, SERVE_PROBS_MAX, 0, &k) != 0)
    return -1;
  return json_object_set_new(params, "n_probs", json_integer(k)) == 0 ? 0
                                                                      : -1;
}

/* response_fields: a list of paths (strings), or null. */
static int response_fields(fields_t *f, json_t **out) {
  json_t *v = json_object_get(f->body, "response_fields"), *p;
  size_t i;
  *out = NULL;
  if (v == NULL || json_is_null(v))
    return 0;
  if (!json_is_array(v) || json_array_size(v) > 256)
    goto bad;
  json_array_foreach(v, i, p) {
    if (!json_is_string(p) || json_string_length(p) == 0)
      goto bad;
  }
  *out = json_array_size(v) > 0 ? json_incref(v) : NULL;
  return 0;
bad:
  f->bad = "response_fields";
  snprintf(f->why, sizeof(f->why), "\"response_fields\" must be a list of "
           "up to 256 paths (\"a\", \"a/b\")");
  return -1;
}

/* One prompt's task and state (p: the prompt; item: its index among
 * several, or -1). 0, or -1 with f's why set (or none: out of memory). */
static int one_prompt(nat_call_t *nc, fields_t *f, json_t *p, long item,
                      task_t **tp, nat_t **np) {
  const site_t *site = nc->a.site;
  const serve_opts_t *o = site->o;
  json_t *body = f->body, *params = NULL;
  task_t *t = *tp = task_new();
  nat_t *n = *np = calloc(1, sizeof(*n));
  long long n_predict;
  bool stream;
  if (t == NULL || n == NULL)
    return -1;
  n->index = item < 0 ? 0 : (uint32_t)item;
  n->task = t;
  /* n_predict (or llama-server's aliases, max_completion_tokens and
   * max_tokens); -1: until an end token, or --n-predict-max. */
  int bad = field_n_predict(f, o->n_predict_max,
                            o->n_predict ? o->n_predict
                            : o->n_predict_max < 128 ? o->n_predict_max
                                                     : 128,
                            &n_predict) ||
            field_bool(f, "stream", false, &stream) ||
            field_stop(f, "stop", 16, &t->want) ||
            field_bool(f, "ignore_eos", false, &t->want.ignore_eos) ||
            field_bool(f, "cache_prompt", true, &t->want.cache_prompt) ||
            field_bool(f, "return_tokens", false, &n->return_tokens) ||
            field_unhonoured(f, unhonoured) ||
            response_fields(f, &n->fields) ||
            field_prompt_of(f, site, "prompt", p, item, t);
  if (bad)
    return -1;
  t->want.n = 1;
  t->want.n_predict = (uint32_t)n_predict;
  /* llama-server's chunks carry their token ids whatever return_tokens
   * says (its test_completion_stream asserts them). */
  n->stream = stream;
  t->want.tokens = n->return_tokens || stream;
  t->want.seed = (uint64_t)time(NULL) ^ (uintptr_t)t;
  n->tokens = json_array();
  n->probs = json_array();
  params = chain_params(site, NULL, body);
  bad = params == NULL || probs_alias(f, body, params) ||
        field_extras(f, params, stream, &nc->timings, t) ||
        chain_make(f, site, params, t);
  json_decref(params);
  if (bad)
    return -1;
  char *s = NULL;
  if (up_sampler_settings(t->want.samplers[0], &s, NULL, 0) == 0)
    n->settings = json_loads(s, 0, NULL);
  free(s);
  if (n->settings == NULL)
    n->settings = json_object();
  n->post = json_is_true(json_object_get(n->settings,
                                         "post_sampling_probs"));
  json_object_set_new(n->settings, "n_predict", json_integer(n_predict));
  return 0;
}

/* Several prompts: answer i's state made current. */
static void pick(answer_t *a, uint32_t i) {
  nat_call_t *nc = (nat_call_t *)a;
  nat_t *n = nc->head;
  while (n != NULL && n->index != i)
    n = n->more;
  nc->cur = n;
}

/* Whether the request's prompts are too many, or several asked to be
 * streamed (f's why set). */
static bool several_refused(fields_t *f, size_t k, uint32_t queue) {
  bool stream = false;
  if (k > queue) {
    f->bad = "prompt";
    snprintf(f->why, sizeof(f->why), "\"prompt\" holds %zu prompts: at "
             "most %u (--queue) in one request", k, queue);
    return true;
  }
  if (field_bool(f, "stream", false, &stream) != 0)
    return true;
  if (stream) {
    f->bad = "stream";
    snprintf(f->why, sizeof(f->why), "several prompts in one request are "
             "answered whole here: \"stream\" must be false (or send one "
             "prompt per request)");
    return true;
  }
  return false;
}

/* POST /completion (and /completions). */
static enum MHD_Result completion(call_t *c) {
  json_t *body;
  enum MHD_Result sent;
  if (http_json(c, &body, &sent) != 0)
    return sent;
  const site_t *site = c->ctx;
  fields_t f = {.body = body};
  json_t *prompt = json_object_get(body, "prompt");
  bool several = field_prompt_list(prompt);
  size_t k = several ? json_array_size(prompt) : 1;
  /* A list of one prompt is that prompt, answered alone (llama-server's
   * single answer). */
  if (several && k == 1)
    several = false, prompt = json_array_get(prompt, 0);
  nat_call_t *nc = answer_new(c, &native, sizeof(*nc));
  task_t **ts = nc != NULL ? calloc(k, sizeof(*ts)) : NULL;
  int bad = ts == NULL ? -1 : 0;
  /* Several prompts are several tasks, all queued at once. */
  if (bad == 0 && several && several_refused(&f, k, site->o->queue))
    bad = -1;
  nat_t **at = nc != NULL ? &nc->head : NULL;
  for (size_t i = 0; bad == 0 && i < k; i++) {
    nat_t *n = NULL;
    bad = one_prompt(nc, &f, several ? json_array_get(prompt, i) : prompt,
                     several ? (long)i : -1, &ts[i], &n);
    if (n != NULL) { /* kept in order, freed with the request */
      *at = n;
      at = &n->more;
    }
    if (ts[i] == NULL || n == NULL)
      bad = -1, f.bad = NULL;
  }
  json_decref(body);
  if (bad != 0) {
    for (size_t i = 0; ts != NULL && i < k; i++)
      if (ts[i] != NULL)
        tq_release(site->q, ts[i]);
    free(ts);
    return fields_refuse(c, &f);
  }
  nc->cur = nc->head;
  if (!several) {
    task_t *t = ts[0];
    free(ts);
    return answer_task(&nc->a, t, nc->head->stream);
  }
  enum MHD_Result rc = answer_tasks(&nc->a, ts, (uint32_t)k, pick);
  free(ts);
  return rc;
}

/* llama-server's own completion, /completions too (not OpenAI's). */
const http_route_t native_routes[] = {
    {"/completion", "POST", completion, 0, NULL, NULL},
    {"/completions", "POST", completion, 0, NULL, NULL},
    {NULL, NULL, NULL, 0, NULL, NULL}};
