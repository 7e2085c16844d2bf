/* evictd-llama serve's HTTP side: libmicrohttpd with a thread per
 * connection (http.c: bodies, the API key, CORS, the route table), the
 * answers it sends (reply.c: JSON with jansson, the one error shape, event
 * streams), and the APIs that turn requests into tasks and a task's
 * events into answers (openai.c with chat.c: OpenAI's /v1; anthropic.c
 * with anthropic_in.c: Anthropic's /v1/messages; native.c: llama.cpp's
 * /completion; status.c: /health, /metrics; extra.c: llama-server's
 * /tokenize, /detokenize, /apply-template, /props, /slots). All
 * formatting is here; the engine only emits events. */
#ifndef EVICTD_LLAMA_HTTP_H
#define EVICTD_LLAMA_HTTP_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "common/lm.h"
#include "serve/serve.h"
#include "serve/tasks.h"

/* What every request may read. */
typedef struct site_s {
  const serve_opts_t *o;
  const lm_t *lm;         /* tokenizing only: the vocabulary is read-only */
  tq_t *q;
  const char *model;      /* the model's name in answers (--alias) */
  long long created;      /* when serve started (GET /v1/models) */
  struct up_chat_s *chat; /* the chat templates (llama.cpp's common) */
  json_t *defaults;       /* the request defaults the command line set,
                             under llama-server's names: the sampler's
                             (--temp, ...) and a chat's (chat.c:
                             --reasoning-format, --chat-template-kwargs) */
  struct rstore_s *responses; /* stored responses (responses.c) */
  struct tokcache_s *tokens;  /* prompts' tokens kept for the next that
                                 begins like them (tokcache.h) */
} site_t;

/* A task's outcome gathered for an answer that is not streamed. */
typedef struct choice_out_s {
  evd_buf_t text;
  finish_t finish;
  uint32_t tokens;
  uint32_t stop;          /* FIN_STOP: which of want.stop */
  evd_buf_t drawn;        /* its EV_TOKEN events, each as a size_t length
                             then the token_ev_t's bytes */
} choice_out_t;

typedef struct call_s call_t;

/* How one API answers from a task's events. */
typedef struct api_s {
  /* One event of a stream as a JSON chunk (a new reference), or NULL when
   * the event is not sent. text: the event's bytes (EV_TEXT). */
  json_t *(*chunk)(call_t *c, const event_t *e, const char *text);
  /* The answer once the task is done, not streamed: out[0..n). */
  json_t *(*whole)(call_t *c, const choice_out_t *out, uint32_t n);
  /* A stream's last chunk before `done` (may be NULL, or return NULL). */
  json_t *(*last)(call_t *c);
  const char *done;       /* the stream's last data line, or NULL */
  bool typed;             /* chunk and last give arrays of typed events
                             ("event: TYPE" frames: the Responses API) */
  bool multi;             /* chunk may give an array of chunks, each a
                             "data:" frame (a chat's deltas) */
  /* A stream's failure as its event(s), or NULL: OpenAI's error shape. */
  json_t *(*failed)(call_t *c, const fault_t *f);
} api_t;

/* One request in flight, on its connection's thread. */
struct call_s {
  site_t *site;
  struct MHD_Connection *conn;
  evd_buf_t body;
  bool too_large;
  int fd;                 /* the client's socket, to notice it leave */
  const char *allow;      /* a 405's Allow header: the path's method */
  task_t *task;           /* once submitted */
  const api_t *api;
  bool stream;
  /* a stream's state (reply.c) */
  news_t news;
  evd_buf_t out;          /* SSE frames not sent yet, from out_off on */
  size_t out_off;
  bool ended;
  /* the API's (openai.c): chunks' id and time, the choices that sent a
   * chunk, usage */
  bool chat;
  bool usage;             /* stream_options.include_usage */
  bool timings;           /* llama-server's timings_per_token: a stream's
                             chunks carry the timings so far */
  char id[80];
  long long created;
  bool *seen;
  uint64_t tokens;        /* the choices' tokens, for usage */
  struct resp_s *resp;    /* the Responses API's (responses.c) */
  struct oa_s *oa;        /* OpenAI's completions' (openai.c) */
  struct nat_s *nat;      /* llama.cpp's /completion's (native.c) */
  struct an_s *an;        /* Anthropic's Messages API's (anthropic.c) */
  /* The error shape of the route's API (the status, code, param and
   * message as reply_error_json takes them; a new reference), or NULL:
   * OpenAI's. Set before the API key is checked, so that a 401 has it. */
  json_t *(*errors)(unsigned status, const char *code, const char *param,
                    const char *message);
};

/* What every OpenAI answer says it was made by (system_fingerprint) and
 * /props's build_info: llama-server's "b<build>-<commit>" of the llama.cpp
 * linked (llama.mk's EVD_LLAMA_CPP_COMMIT; the build number is 0, what
 * llama.cpp's own build gives a tree without its git history, as the
 * pinned npm bundle is), then serve's own name and version. Clients and
 * llama.cpp's tests read the leading "b". */
#define SERVE_FINGERPRINT \
  "b0-" EVD_LLAMA_CPP_COMMIT "-evictd-llama-" EVD_CLIENT_VERSION

/* ---- http.c -------------------------------------------------------------- */

/* Starts libmicrohttpd on the listening socket fd. NULL on failure. */
struct MHD_Daemon *http_start(site_t *site, int fd);

/* Adds the CORS headers (--cors-origins, --cors-credentials, as
 * llama-server sends them) to an answer of c's request: reply.c calls it
 * on every answer it queues. */
void http_cors(call_t *c, struct MHD_Response *rs);

/* ---- reply.c ------------------------------------------------------------- */

/* Sends j (taken) as the answer. */
enum MHD_Result reply_json(call_t *c, unsigned status, json_t *j);

/* body[0..len) as it is (taken: malloc'd). */
enum MHD_Result reply_text(call_t *c, unsigned status, const char *type,
                           char *body, size_t len);
/* reply_text with one more header, name: value (both borrowed). */
enum MHD_Result reply_text_header(call_t *c, unsigned status,
                                  const char *type, char *body, size_t len,
                                  const char *name, const char *value);

/* The one shape of every error: {"error": {"message", "type", "param",
 * "code"}} (OpenAI's), type from the status; param may be NULL. */
json_t *reply_error_json(unsigned status, const char *code,
                         const char *param, const char *message);

/* Sends an error, in the shape of the call's API (c->errors, else
 * OpenAI's); a 503 says when to try again (Retry-After). */
enum MHD_Result reply_error(call_t *c, unsigned status, const char *code,
                            const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Submits ts[0..k) (taken: each released here, the array the caller's)
 * and answers, once all are done, with the list of api's whole answers
 * of each, in order; pick(c, i) makes task i's state current (c->task is
 * set) before api reads it. A task the queue does not take, or one that
 * fails, ends the others and answers as a single one would. Not
 * streamed. */
enum MHD_Result reply_tasks(call_t *c, task_t **ts, uint32_t k,
                            const api_t *api,
                            void (*pick)(call_t *c, uint32_t i));

/* Submits t (taken) and answers from its events with api: a stream of
 * server-sent events, or the whole answer when it is done; a client that
 * goes away cancels it. */
enum MHD_Result reply_task(call_t *c, task_t *t, const api_t *api,
                           bool stream);

/* ---- fields.c: a request's fields, checked ------------------------------ */

/* Each reader takes the field `name` of body: 0 and the value (def when it
 * is missing or null), or -1 with `bad` (the field) and `why` (a sentence)
 * set, for a 400. */
typedef struct fields_s {
  json_t *body;
  const char *bad;
  char why[480];
} fields_t;

int field_int(fields_t *f, const char *name, long long lo, long long hi,
              long long def, long long *out);
/* How many tokens to generate, under llama-server's names: the first of
 * "n_predict", "max_completion_tokens" and "max_tokens" that is there and
 * not null (llama-server's order), 1 to max, -1 meaning max (until an end
 * token or the cap); def when none is. */
int field_n_predict(fields_t *f, long long max, long long def,
                    long long *out);
int field_num(fields_t *f, const char *name, double lo, double hi,
              double def, double *out);
int field_bool(fields_t *f, const char *name, bool def, bool *out);
/* A string, or a list of up to `max` strings (none empty): into the
 * task's stop strings. */
int field_stop(fields_t *f, const char *name, uint32_t max, want_t *w);

/* A field serve does not honour, refused unless its value asks for
 * nothing: null, false, an empty string, list or object, the number
 * `same`, or the string `text` (also as {"type": text}, as OpenAI's
 * response_format says plain text). */
typedef struct unhonoured_s {
  const char *name;
  double same;
  const char *text;
} unhonoured_t;

/* llama-server's return_progress and timings_per_token (true or false),
 * from f's body: EV_PROGRESS events (t->want.progress) for a stream, the
 * timings in every chunk (*timings). Taken out of params (the sampler's),
 * where sampling_make refuses them for the routes that read them not. */
int field_extras(fields_t *f, json_t *params, bool stream, bool *timings,
                 task_t *t);

/* Refuses (-1, why set) the first field of list (ended by a NULL name)
 * whose value asks for something. */
int field_unhonoured(fields_t *f, const unhonoured_t *list);

/* The prompt of a legacy completion into t's tokens: a string, a list of
 * one string, a list of token ids, or a list of one such list (as
 * llama-server takes them). 0, or -1 with why set. */
int field_prompt_any(fields_t *f, const site_t *site, const char *name,
                     task_t *t);

/* Whether /completion's prompt p is a list of several prompts, as
 * llama-server reads it: a non-empty list with no token id in it (one
 * with ids is a prompt of ids and strings). */
bool field_prompt_list(json_t *p);

/* One of /completion's prompts p into t's tokens, as llama-server's
 * tokenize_input_subprompt reads it: a string (the BOS first); token ids
 * as given; ids and strings mixed (each string tokenized in place, the
 * BOS before it when it comes first); an object {"prompt_string": one
 * of those} ("multimodal_data" refused: no images). item: its index among
 * several, which the refusal names, or -1. 0, or -1 with why set. */
int field_prompt_of(fields_t *f, const site_t *site, const char *name,
                    json_t *p, long item, task_t *t);

/* The prompt text into t's tokens (special: a chat template's text, whose
 * special tokens' text becomes those tokens); -1 with why set. */
int field_prompt(fields_t *f, const site_t *site, const char *name,
                 const char *text, size_t len, bool special, task_t *t);

/* ---- chat.c -------------------------------------------------------------- */

/* A chat request (its messages, tools, tool_choice, response_format, ...)
 * through the templates (upstream.h's up_chat_apply): *out its answer,
 * the prompt's text, what the sampler needs, how to read the text back
 * (a new reference). 0, or -1 with f's why set (a 400). */
int chat_apply(fields_t *f, const site_t *site, json_t *body, json_t **out);

/* The same, messages taken from min of them (Anthropic's route takes
 * none, as llama-server's: the template's generation prompt alone). */
int chat_apply_min(fields_t *f, const site_t *site, json_t *body, size_t min,
                   json_t **out);

/* How many tokens a chat_apply answer's prompt makes, tokenized as a
 * request's is (the BOS, the template's special tokens as themselves):
 * the count, or -1 with f's why set ("messages"), or -1 alone when out of
 * memory. */
int chat_count_tokens(fields_t *f, const site_t *site, json_t *applied);

/* Messages alone through the templates, ending where the assistant's
 * answer begins, into out. 0, or -1 with f's why set. */
int chat_prompt(fields_t *f, const site_t *site, json_t *messages,
                evd_buf_t *out);

/* ---- probs.c: drawn tokens and their candidates --------------------- */

/* A copy of an EV_TOKEN event's bytes, aligned (the caller frees it), or
 * NULL (too short, out of memory). */
token_ev_t *probs_read(const char *bytes, size_t len);

/* OpenAI's chat logprobs entry of t: token, logprob, bytes, top_logprobs
 * (the first `top` candidates). */
json_t *probs_openai(const site_t *site, const token_ev_t *t, uint32_t top);

/* llama-server's completion_probabilities entry of t: logprob and
 * top_logprobs, or with post (post_sampling_probs) prob and top_probs. */
json_t *probs_native(const site_t *site, const token_ev_t *t, bool post);

/* The legacy completions' logprobs object (probs_legacy_new) and t added
 * to its lists; *offset is the text offset so far. */
json_t *probs_legacy_new(void);
void probs_legacy(const site_t *site, const token_ev_t *t, json_t *lp,
                  size_t *offset);

/* ---- sampling.c: the sampler chain ----------------------------------------- */

/* A request's sampler parameters (a new object): format's (a chat
 * template's answer, or NULL), then body's fields under llama-server's
 * names, then the server's defaults, each only where the one before says
 * nothing. */
json_t *sampling_params(const site_t *site, json_t *format, json_t *body);

/* Makes t's samplers (want.n, choice i seeded seed + i; the seed of
 * params, else want.seed), want.n_probs and want.preserved from params.
 * 0, or -1 with f's bad and why set (the shim's sentence names the
 * field). */
int sampling_make(fields_t *f, const site_t *site, json_t *params,
                  task_t *t);

/* ---- the routes ---------------------------------------------------------- */

enum MHD_Result openai_models(call_t *c);       /* openai.c */
enum MHD_Result openai_completions(call_t *c);
enum MHD_Result openai_chat(call_t *c);
/* POST /v1/chat/completions/input_tokens (and without /v1), llama-server's:
 * a chat request's prompt counted, {"object": "response.input_tokens",
 * "input_tokens"}, nothing decoded. */
enum MHD_Result openai_input_tokens(call_t *c);
enum MHD_Result native_completion(call_t *c);   /* native.c */
enum MHD_Result responses_create(call_t *c);    /* responses.c */
enum MHD_Result responses_get(call_t *c, const char *id);
enum MHD_Result responses_delete(call_t *c, const char *id);
enum MHD_Result status_health(call_t *c);       /* status.c */
enum MHD_Result status_metrics(call_t *c);
enum MHD_Result extra_tokenize(call_t *c);      /* extra.c */
enum MHD_Result extra_detokenize(call_t *c);
enum MHD_Result extra_apply_template(call_t *c);
enum MHD_Result extra_props(call_t *c);
/* The tokens' text, each as llama-server's detokenizer shows it (a
 * control token's own text included), as a JSON string (a byte that
 * begins no UTF-8 character as U+FFFD); NULL when out of memory. */
json_t *extra_text(const site_t *site, const llama_token *toks, size_t n);
enum MHD_Result extra_slots(call_t *c);

/* Anthropic's Messages API (anthropic.c): POST /v1/messages and POST
 * /v1/messages/count_tokens. */
enum MHD_Result anthropic_messages(call_t *c);
enum MHD_Result anthropic_count_tokens(call_t *c);

/* Anthropic's error shape, {"type": "error", "error": {"type", "message"}},
 * the type from the status (invalid_request_error, authentication_error,
 * not_found_error, request_too_large, overloaded_error, api_error, ...);
 * code and param are not shown. For call_t's errors. A new reference, or
 * NULL when out of memory. */
json_t *anthropic_error_json(unsigned status, const char *code,
                             const char *param, const char *message);

/* Frees what anthropic.c keeps for a call. */
void anthropic_call_free(call_t *c);

/* anthropic_in.c: the Anthropic request f->body as an OpenAI chat request
 * for chat_apply and sampling_params (*chat, a new reference): messages
 * (system first; a user's tool results as tool messages, an assistant's
 * tool_use blocks as its tool calls), tools, tool_choice,
 * parallel_tool_calls, chat_template_kwargs (enable_thinking false unless
 * given) and reasoning_format none. 0, or -1 with f's bad and why set
 * (bad NULL: out of memory). */
int anthropic_convert(fields_t *f, json_t **chat);

/* The store of responses (store: true) that GET /v1/responses/{id}
 * answers and previous_response_id continues: the newest `max` of them.
 * NULL when out of memory. */
struct rstore_s *responses_store_new(uint32_t max);
void responses_store_free(struct rstore_s *r);

/* Frees what responses.c and openai.c keep for a call. */
void responses_call_free(call_t *c);
void openai_call_free(call_t *c);
void native_call_free(call_t *c);

/* llama-server's "timings" of a finished task that predicted tokens:
 * cache_n, prompt_n, prompt_ms, prompt_per_token_ms, prompt_per_second,
 * predicted_n, predicted_ms, predicted_per_token_ms, predicted_per_second
 * (native.c). */
json_t *native_timings(const task_t *t, uint32_t predicted);
/* A stream's timings so far at event e (timings_per_token): at an
 * EV_PROGRESS the prompt's positions computed and their time, at an
 * EV_TEXT the prompt's and the tokens' so far. */
json_t *native_timings_now(const task_t *t, const event_t *e);
/* llama-server's prompt_progress of an EV_PROGRESS event: {"total",
 * "cache", "processed", "time_ms"}. */
json_t *native_progress(const task_t *t, const event_t *e);
/* llama-server's "__verbose" of an OpenAI answer (its request's
 * "verbose", by default serve --verbose): what /completion would answer
 * for the choice, its "prompt" the text of the prompt's tokens as
 * decoded (the template's rendering, BOS included). text: the choice's
 * whole text ("" in a stream, whose chunks had it, as llama-server's).
 * A new reference, or NULL when out of memory. */
json_t *native_verbose(call_t *c, uint32_t i, const char *text, size_t len,
                       finish_t fin, uint32_t tokens, uint32_t stop);

/* The body as a JSON object into *out, or an answer already sent (400 or
 * 413) and -1. */
int http_body(call_t *c, json_t **out, enum MHD_Result *sent);

#endif
