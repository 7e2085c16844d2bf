/* POST /completion, as llama.cpp's own server answers it: {"prompt",
 * "n_predict", "stream", "temperature", "seed", "stop"} in; {"content",
 * "tokens_predicted", "tokens_evaluated", "stop_type", "session"} out, or
 * a stream of {"content", "stop": false} events ending with {"stop": true,
 * "stop_type", ...}. One choice. */
#include <stdio.h>
#include <stdlib.h>

#include "serve/http.h"

static const char *stop_type(finish_t f) {
  return f == FIN_EOS ? "eos" : f == FIN_STOP ? "word" : "limit";
}

static json_t *chunk(call_t *c, const event_t *e, const char *text) {
  if (e->kind == EV_TEXT)
    return json_pack("{s:s%,s:b}", "content", text, e->len, "stop", 0);
  return json_pack("{s:s,s:b,s:s,s:i,s:i}", "content", "", "stop", 1,
                   "stop_type", stop_type(e->finish), "tokens_predicted",
                   (int)e->tokens, "tokens_evaluated",
                   (int)c->task->n_prompt);
}

static json_t *whole(call_t *c, const choice_out_t *out, uint32_t n) {
  (void)n;
  return json_pack("{s:s%,s:i,s:i,s:s,s:s}", "content",
                   out[0].text.data ? out[0].text.data : "", out[0].text.len,
                   "tokens_predicted", (int)out[0].tokens,
                   "tokens_evaluated", (int)c->task->n_prompt, "stop_type",
                   stop_type(out[0].finish), "session", c->task->id);
}

static const api_t native = {.chunk = chunk, .whole = whole};

/* llama-server's fields of /completion that would change the answer and
 * that serve does not honour: refused unless they ask for nothing. */
static const unhonoured_t unhonoured[] = {
    {"top_k", 0, NULL}, {"min_p", 0, NULL}, {"typical_p", 1, NULL},
    {"repeat_penalty", 1, NULL}, {"presence_penalty", 0, NULL},
    {"frequency_penalty", 0, NULL}, {"mirostat", 0, NULL},
    {"dry_multiplier", 0, NULL}, {"xtc_probability", 0, NULL},
    {"n_probs", 0, NULL}, {"logit_bias", 0, NULL}, {"grammar", 0, NULL},
    {"json_schema", 0, NULL}, {"response_format", 0, "text"},
    {"t_max_predict_ms", 0, NULL}, {"n_indent", 0, NULL},
    {"lora", 0, NULL}, {"image_data", 0, NULL},
    {"multimodal_data", 0, NULL}, {"response_fields", 0, NULL},
    {"return_tokens", 0, NULL}, {NULL, 0, NULL}};

enum MHD_Result native_completion(call_t *c) {
  json_t *body;
  enum MHD_Result sent;
  if (http_body(c, &body, &sent) != 0)
    return sent;
  const serve_opts_t *o = c->site->o;
  fields_t f = {.body = body};
  task_t *t = task_new();
  json_t *p = json_object_get(body, "prompt");
  long long n_predict, seed;
  bool stream;
  int bad;
  if (t == NULL) {
    json_decref(body);
    return reply_error(c, 500, "out_of_memory", NULL, "out of memory");
  }
  if (p == NULL || !json_is_string(p)) {
    f.bad = "prompt";
    snprintf(f.why, sizeof(f.why), "\"prompt\" is required, a string");
    bad = 1;
  } else {
    bad = field_int(&f, "n_predict", 1, o->n_predict_max,
                    o->n_predict ? o->n_predict
                    : o->n_predict_max < 128 ? o->n_predict_max : 128,
                    &n_predict) ||
          field_int(&f, "seed", 0, INT64_MAX, 0, &seed) ||
          field_num(&f, "temperature", 0, 100, 0, &t->want.temp) ||
          field_num(&f, "top_p", 0, 1, 1, &t->want.top_p) ||
          field_unhonoured(&f, unhonoured) ||
          field_bool(&f, "stream", false, &stream) ||
          field_stop(&f, "stop", 16, &t->want) ||
          field_bool(&f, "ignore_eos", false, &t->want.ignore_eos) ||
          field_bool(&f, "cache_prompt", true, &t->want.cache_prompt) ||
          field_prompt(&f, c->site, "prompt", json_string_value(p),
                       json_string_length(p), false, t);
  }
  json_decref(body);
  if (bad) {
    tq_release(c->site->q, t);
    return reply_error(c, 400, "invalid_request", f.bad, "%s", f.why);
  }
  t->want.n = 1;
  t->want.n_predict = (uint32_t)n_predict;
  t->want.seed = (uint64_t)seed;
  return reply_task(c, t, &native, stream);
}
