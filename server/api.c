/* The API: routes, request validation and the step, evict and view
 * operations on the session table. Responses are written straight into the
 * caller's buffer; nothing here knows about sockets. */
#include "evictd/api.h"

#include <assert.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "evictd/apierr.h"
#include "evictd/log.h"
#include "evictd/metrics.h"

struct evd_api_s {
  evd_config_t cfg;
  evd_table_t *table;
  uint32_t now_tick; /* the loop's clock in 100 ms ticks */
  /* Scratch arrays reused by every request: positions, their slots and the
   * victims of a request. Grown on demand, never shrunk. */
  uint32_t *pos, *slots, *victims;
  size_t pos_cap, victims_cap;
  char msg[256]; /* an error message with figures in it */
  evd_metrics_t metrics;
};

void evd_config_defaults(evd_config_t *c) {
  memset(c, 0, sizeof *c);
  c->listen = "127.0.0.1:8090";
  c->budget = EVD_WINDOW_DEFAULT_BUDGET;
  c->sinks = 0;
  c->max_budget = 1048576;
  c->max_sessions = 1000000;
  c->max_positions = 65536;
  c->max_batch = 65536;
  c->max_depth = 32;
  c->max_body = 1048576;
  c->idle_ttl = 0;
  c->max_conns = 4096;
  c->conn_timeout = 30;
  c->autocreate = 1;
  c->log_level = EVD_LOG_INFO;
}

int evd_method_parse(const char *m) {
  static const struct {
    const char *name;
    int bit;
  } methods[] = {{"GET", EVD_M_GET},   {"HEAD", EVD_M_HEAD},
                 {"PUT", EVD_M_PUT},   {"POST", EVD_M_POST},
                 {"DELETE", EVD_M_DELETE}};
  size_t i;

  for (i = 0; i < sizeof methods / sizeof methods[0]; i++)
    if (strcmp(m, methods[i].name) == 0)
      return methods[i].bit;
  return EVD_M_OTHER;
}

int evd_api_new(evd_api_t **out, const evd_config_t *cfg) {
  evd_api_t *api = calloc(1, sizeof *api);

  if (api == NULL)
    return EVD_ENOMEM;
  api->cfg = *cfg;
  if (evd_table_new(&api->table, cfg->max_sessions) != 0) {
    free(api);
    return EVD_ENOMEM;
  }
  *out = api;
  return 0;
}

void evd_api_free(evd_api_t *api) {
  if (api == NULL)
    return;
  evd_table_free(api->table);
  free(api->pos);
  free(api->slots);
  free(api->victims);
  free(api);
}

evd_table_t *evd_api_table(evd_api_t *api) {
  return api->table;
}

evd_metrics_t *evd_api_metrics(evd_api_t *api) {
  return &api->metrics;
}

void evd_api_set_clock(evd_api_t *api, uint64_t now_ms) {
  /* Ticks wrap after 13 years; ages are computed by unsigned difference. */
  api->now_tick = (uint32_t)(now_ms / 100);
}

uint32_t evd_api_reap(evd_api_t *api) {
  /* Ticks are truncated, so "more than ttl ticks ago" guarantees at least
   * ttl seconds of real idleness: a session is never reaped early. */
  uint32_t ttl = api->cfg.idle_ttl * 10u, n = 0;
  evd_session_t *s;

  if (api->cfg.idle_ttl == 0)
    return 0;
  while ((s = evd_table_oldest(api->table)) != NULL &&
         (uint32_t)(api->now_tick - s->used) > ttl) {
    evd_log(EVD_LOG_DEBUG, "reaped idle session %.*s", (int)s->idlen, s->id);
    evd_table_remove(api->table, s);
    n++;
  }
  api->metrics.reaped += n;
  return n;
}

/* ---- scratch space ------------------------------------------------------ */

static int grow(uint32_t **p, size_t *cap, size_t n) {
  uint32_t *q;
  size_t c = *cap ? *cap : 64;

  if (n <= *cap)
    return 0;
  while (c < n)
    c *= 2;
  q = realloc(*p, c * sizeof *q);
  if (q == NULL)
    return EVD_ENOMEM;
  *p = q;
  *cap = c;
  return 0;
}

/* Room for n positions, their slots and n victims. */
static int reserve_positions(evd_api_t *api, size_t n) {
  size_t cap = api->pos_cap;

  if (grow(&api->pos, &cap, n) != 0)
    return EVD_ENOMEM;
  cap = api->pos_cap;
  if (grow(&api->slots, &cap, n) != 0)
    return EVD_ENOMEM;
  api->pos_cap = cap;
  return grow(&api->victims, &api->victims_cap, n);
}

/* ---- request bodies ----------------------------------------------------- */

/* Deepest nesting of arrays and objects in a JSON text, counted before the
 * parser sees it so that hostile nesting costs nothing but this scan. */
static uint32_t json_depth(const char *p, size_t n) {
  uint32_t depth = 0, max = 0;
  int in_str = 0;
  size_t i;

  for (i = 0; i < n; i++) {
    char c = p[i];
    if (in_str) {
      if (c == '\\')
        i++;
      else if (c == '"')
        in_str = 0;
    } else if (c == '"') {
      in_str = 1;
    } else if (c == '[' || c == '{') {
      if (++depth > max)
        max = depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      depth--;
    }
  }
  return max;
}

/* Parses the body into a JSON object. An empty body is an empty object
 * when `optional`, else an error. Returns 0 or the error to answer; on
 * success *root is the object (NULL for an empty optional body). */
static evd_apierr_t parse_body(evd_api_t *api, const evd_request_t *req,
                               int optional, json_t **root,
                               const char **message) {
  json_error_t jerr;
  json_t *j;

  *root = NULL;
  *message = NULL;
  if (req->body_len == 0)
    return optional ? EVD_AE_OK : EVD_AE_INVALID_JSON;
  if (json_depth(req->body, req->body_len) > api->cfg.max_depth)
    return EVD_AE_TOO_DEEP;
  j = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
  if (j == NULL) {
    snprintf(api->msg, sizeof api->msg,
             "The request body is not valid JSON (line %d, column %d: %s).",
             jerr.line, jerr.column, jerr.text);
    *message = api->msg;
    return EVD_AE_INVALID_JSON;
  }
  if (!json_is_object(j)) {
    json_decref(j);
    return EVD_AE_INVALID_JSON;
  }
  *root = j;
  return EVD_AE_OK;
}

/* Returns 1 when every key of obj is one of the NULL-terminated names;
 * otherwise writes a message naming the first other key and returns 0. */
static int only_fields(evd_api_t *api, json_t *obj, const char *const *names) {
  const char *key;
  json_t *v;

  if (obj == NULL)
    return 1;
  json_object_foreach(obj, key, v) {
    const char *const *n;
    for (n = names; *n != NULL; n++)
      if (strcmp(key, *n) == 0)
        break;
    if (*n == NULL) {
      /* The key may hold anything: keep it short and let the writer
       * escape it. */
      snprintf(api->msg, sizeof api->msg, "Unknown field \"%.40s\".", key);
      return 0;
    }
  }
  return 1;
}

/* A JSON integer within [min, max], stored in *out. */
static int int_in(json_t *v, json_int_t min, json_int_t max, json_int_t *out) {
  if (!json_is_integer(v))
    return 0;
  *out = json_integer_value(v);
  return *out >= min && *out <= max;
}

/* ---- responses ---------------------------------------------------------- */

/* Writes an error object: the whole body for a single request, or a batch
 * result that also carries its status. `newest` goes in for stale errors. */
static int write_error(evd_buf_t *out, evd_apierr_t e, const char *message,
                       int in_batch, const uint32_t *newest) {
  evd_buf_str(out, "{\"error\":{");
  evd_apierr_fields(out, e, message);
  if (newest != NULL) {
    evd_buf_str(out, ",\"newest\":");
    evd_buf_u32(out, *newest);
  }
  if (in_batch) {
    evd_buf_str(out, ",\"status\":");
    evd_buf_u32(out, (uint32_t)evd_apierr_status(e));
  }
  evd_buf_str(out, "}}");
  return evd_apierr_status(e);
}

static void write_step_result(evd_buf_t *out, const uint32_t *victims,
                              uint32_t nv, const uint32_t *slots, uint32_t n,
                              uint32_t size, uint32_t newest, int replayed) {
  evd_buf_reserve(out, 80 + 11 * ((size_t)nv + n));
  evd_buf_add(out, "{\"victims\":", 11);
  evd_buf_u32_array(out, victims, nv);
  evd_buf_add(out, ",\"slots\":", 9);
  evd_buf_u32_array(out, slots, n);
  evd_buf_add(out, ",\"size\":", 8);
  evd_buf_u32(out, size);
  evd_buf_add(out, ",\"newest\":", 10);
  evd_buf_u32(out, newest);
  if (replayed)
    evd_buf_add(out, ",\"replayed\":true", 16);
  evd_buf_chr(out, '}');
}

static void write_view(evd_buf_t *out, const evd_session_t *s) {
  const evd_window_t *w = evd_session_window(s);
  uint32_t i, n = evd_window_size(w), slot;

  evd_buf_reserve(out, 160 + s->idlen + 22 * (size_t)n);
  evd_buf_str(out, "{\"id\":");
  evd_buf_json_str(out, s->id, s->idlen);
  evd_buf_str(out, ",\"budget\":");
  evd_buf_u32(out, w->budget);
  evd_buf_str(out, ",\"sinks\":");
  evd_buf_u32(out, w->sinks);
  evd_buf_str(out, ",\"size\":");
  evd_buf_u32(out, n);
  evd_buf_str(out, ",\"newest\":");
  evd_buf_u32(out, evd_window_newest(w));
  evd_buf_str(out, ",\"kept\":[");
  for (i = 0; i < n; i++) {
    if (i > 0)
      evd_buf_chr(out, ',');
    evd_buf_u32(out, evd_window_at(w, i, NULL));
  }
  evd_buf_str(out, "],\"slots\":[");
  for (i = 0; i < n; i++) {
    if (i > 0)
      evd_buf_chr(out, ',');
    evd_window_at(w, i, &slot);
    evd_buf_u32(out, slot);
  }
  evd_buf_str(out, "]}");
}

/* ---- step --------------------------------------------------------------- */

/* A validated step request (one batch item, or one /session/{id}/step). */
typedef struct {
  const char *id;
  size_t idlen;
  uint32_t n;            /* positions, in api->pos */
  int has_budget, has_sinks;
  uint32_t budget, sinks;
} step_req_t;

/* Validates a step object into *r and api->pos. Returns EVD_AE_OK, or the
 * error to answer with *message (NULL for the default one). In a batch item the id comes from
 * its "session" field, else from the path (already in r). */
static evd_apierr_t parse_step(evd_api_t *api, json_t *obj, int in_batch,
                               step_req_t *r, const char **message) {
  static const char *const single[] = {"pos",    "positions", "attention",
                                       "budget", "sinks",     NULL};
  static const char *const item[] = {"session", "pos",    "positions",
                                     "attention", "budget", "sinks", NULL};
  json_t *pos, *list, *v;
  json_int_t x, prev = -1;
  size_t i, n;

  *message = NULL;
  if (!json_is_object(obj)) {
    *message = "Each item of \"steps\" must be an object.";
    return EVD_AE_INVALID_FIELD;
  }
  if (!only_fields(api, obj, in_batch ? item : single)) {
    *message = api->msg;
    return EVD_AE_INVALID_FIELD;
  }
  if (in_batch) {
    v = json_object_get(obj, "session");
    if (!json_is_string(v)) {
      *message = "Each item of \"steps\" needs a \"session\" string.";
      return EVD_AE_INVALID_FIELD;
    }
    r->id = json_string_value(v);
    r->idlen = json_string_length(v);
    if (!evd_session_id_valid(r->id, r->idlen))
      return EVD_AE_INVALID_SESSION_ID;
  }
  pos = json_object_get(obj, "pos");
  list = json_object_get(obj, "positions");
  if ((pos == NULL) == (list == NULL)) {
    *message = "Give exactly one of \"pos\" and \"positions\".";
    return EVD_AE_INVALID_FIELD;
  }
  if (list != NULL && !json_is_array(list)) {
    *message = "\"positions\" must be an array of integers.";
    return EVD_AE_INVALID_FIELD;
  }
  n = list != NULL ? json_array_size(list) : 1;
  if (n == 0) {
    *message = "\"positions\" must hold at least one position.";
    return EVD_AE_INVALID_POSITION;
  }
  if (n > api->cfg.max_positions) {
    snprintf(api->msg, sizeof api->msg,
             "A step request takes at most %u positions (--max-positions).",
             api->cfg.max_positions);
    *message = api->msg;
    return EVD_AE_TOO_MANY_POSITIONS;
  }
  if (reserve_positions(api, n) != 0)
    return EVD_AE_OUT_OF_MEMORY;
  for (i = 0; i < n; i++) {
    v = list != NULL ? json_array_get(list, i) : pos;
    if (!int_in(v, 0, UINT32_MAX, &x))
      return EVD_AE_INVALID_POSITION;
    if (x <= prev) {
      *message = "Positions within a request must strictly increase.";
      return EVD_AE_INVALID_POSITION;
    }
    api->pos[i] = (uint32_t)x;
    prev = x;
  }
  r->n = (uint32_t)n;
  r->has_budget = (v = json_object_get(obj, "budget")) != NULL;
  if (r->has_budget) {
    if (!json_is_integer(v)) {
      *message = "\"budget\" must be an integer.";
      return EVD_AE_INVALID_FIELD;
    }
    if (!int_in(v, 1, api->cfg.max_budget, &x))
      goto bad_budget;
    r->budget = (uint32_t)x;
  }
  r->has_sinks = (v = json_object_get(obj, "sinks")) != NULL;
  if (r->has_sinks) {
    if (!json_is_integer(v)) {
      *message = "\"sinks\" must be an integer.";
      return EVD_AE_INVALID_FIELD;
    }
    if (!int_in(v, 0, UINT32_MAX, &x))
      return EVD_AE_INVALID_SINKS;
    r->sinks = (uint32_t)x;
  }
  if ((r->has_budget || r->has_sinks) &&
      (r->has_sinks ? r->sinks : api->cfg.sinks) >=
          (r->has_budget ? r->budget : api->cfg.budget))
    return EVD_AE_INVALID_SINKS;
  return EVD_AE_OK;
bad_budget:
  snprintf(api->msg, sizeof api->msg,
           "\"budget\" must be an integer from 1 to %u (--max-budget).",
           api->cfg.max_budget);
  *message = api->msg;
  return EVD_AE_INVALID_BUDGET;
}

/* Applies a validated step request and writes its result (or its error
 * object) to out. Returns the HTTP status of that result. */
static int run_step(evd_api_t *api, const step_req_t *r, int in_batch,
                    evd_buf_t *out) {
  evd_session_t *s = evd_table_find(api->table, r->id, r->idlen);
  evd_window_t *w;
  evd_replay_t rp;
  uint32_t i, nv = 0;
  int err;

  if (s == NULL) {
    uint32_t zero = 0;
    if (!api->cfg.autocreate)
      return write_error(out, EVD_AE_UNKNOWN_SESSION, NULL, in_batch, NULL);
    /* A new session holds position 0; refuse before creating anything. */
    if (api->pos[0] == 0)
      return write_error(out, EVD_AE_STALE_POSITION, NULL, in_batch, &zero);
    err = evd_table_add(api->table, r->id, r->idlen,
                        r->has_budget ? r->budget : api->cfg.budget,
                        r->has_sinks ? r->sinks : api->cfg.sinks,
                        api->now_tick, &s);
    if (err == EVD_ELIMIT)
      return write_error(out, EVD_AE_SESSION_LIMIT, NULL, in_batch, NULL);
    if (err != 0)
      return write_error(out, EVD_AE_OUT_OF_MEMORY, NULL, in_batch, NULL);
    api->metrics.created++;
    evd_log(EVD_LOG_DEBUG, "created session %.*s", (int)r->idlen, r->id);
  }
  w = evd_session_window(s);
  if (api->pos[0] <= evd_window_newest(w)) {
    /* A retry of the last applied request gets its answer again. */
    if (evd_session_replay_get(s, &rp) && rp.npos == r->n &&
        memcmp(rp.positions, api->pos, r->n * sizeof(uint32_t)) == 0) {
      evd_table_touch(api->table, s, api->now_tick);
      api->metrics.replays++;
      write_step_result(out, rp.victims, rp.nvictims, rp.slots, rp.npos,
                        rp.size, rp.newest, 1);
      return 200;
    }
    return write_error(out, EVD_AE_STALE_POSITION, NULL, in_batch,
                       &w->newest);
  }
  for (i = 0; i < r->n; i++) {
    err = evd_window_advance(w, api->pos[i], &api->slots[i],
                             &api->victims[nv]);
    assert(err >= 0); /* validated: increasing, above newest, never full */
    nv += (uint32_t)err;
  }
  evd_table_touch(api->table, s, api->now_tick);
  api->metrics.steps += r->n;
  api->metrics.victims += nv;
  /* Without memory for the record a retry is refused as stale, which is
   * safe: it never hands out a wrong answer. */
  (void)evd_session_replay_set(s, api->pos, r->n, api->victims, nv,
                               api->slots, evd_window_size(w));
  write_step_result(out, api->victims, nv, api->slots, r->n,
                    evd_window_size(w), evd_window_newest(w), 0);
  return 200;
}

/* ---- handlers ----------------------------------------------------------- */

typedef struct {
  evd_api_t *api;
  const evd_request_t *req;
  evd_reply_t *reply;
  const char *id; /* for the /session/{id} routes */
  size_t idlen;
  evd_buf_t *out;
} ctx_t;

static int fail(ctx_t *c, evd_apierr_t e, const char *message) {
  evd_apierr_body(c->out, e, message);
  return evd_apierr_status(e);
}


static int h_healthz(ctx_t *c) {
  evd_buf_str(c->out, "{\"status\":\"ok\"}");
  return 200;
}

static int h_metrics(ctx_t *c) {
  c->reply->content_type = "text/plain; version=0.0.4; charset=utf-8";
  evd_metrics_write(&c->api->metrics, evd_table_count(c->api->table), c->out);
  return 200;
}

static int h_step(ctx_t *c) {
  step_req_t r = {.id = c->id, .idlen = c->idlen};
  const char *message;
  json_t *root;
  evd_apierr_t err;
  int status;

  err = parse_body(c->api, c->req, 0, &root, &message);
  if (err == 0)
    err = parse_step(c->api, root, 0, &r, &message);
  if (err != 0) {
    json_decref(root);
    return fail(c, err, message);
  }
  status = run_step(c->api, &r, 0, c->out);
  json_decref(root);
  return status;
}

static int h_batch(ctx_t *c) {
  static const char *const fields[] = {"steps", NULL};
  const char *message;
  json_t *root, *steps, *item;
  evd_apierr_t err;
  size_t i;

  err = parse_body(c->api, c->req, 0, &root, &message);
  if (err != 0)
    return fail(c, err, message);
  if (!only_fields(c->api, root, fields)) {
    json_decref(root);
    return fail(c, EVD_AE_INVALID_FIELD, c->api->msg);
  }
  steps = json_object_get(root, "steps");
  if (!json_is_array(steps)) {
    json_decref(root);
    return fail(c, EVD_AE_INVALID_FIELD,
                "\"steps\" must be an array of step objects.");
  }
  if (json_array_size(steps) > c->api->cfg.max_batch) {
    snprintf(c->api->msg, sizeof c->api->msg,
             "A batch takes at most %u items (--max-batch).",
             c->api->cfg.max_batch);
    json_decref(root);
    return fail(c, EVD_AE_TOO_MANY_STEPS, c->api->msg);
  }
  evd_buf_reserve(c->out, 16 + 64 * json_array_size(steps));
  evd_buf_str(c->out, "{\"results\":[");
  json_array_foreach(steps, i, item) {
    step_req_t r = {0};
    if (i > 0)
      evd_buf_chr(c->out, ',');
    err = parse_step(c->api, item, 1, &r, &message);
    if (err != 0)
      write_error(c->out, err, message, 1, NULL);
    else
      run_step(c->api, &r, 1, c->out);
  }
  evd_buf_str(c->out, "]}");
  json_decref(root);
  return 200;
}

static int h_put(ctx_t *c) {
  static const char *const fields[] = {"budget", "sinks", NULL};
  evd_api_t *api = c->api;
  uint32_t budget = api->cfg.budget, sinks = api->cfg.sinks;
  const char *message;
  evd_session_t *s;
  evd_apierr_t perr;
  json_t *root, *v;
  json_int_t x;
  int err;

  perr = parse_body(api, c->req, 1, &root, &message);
  if (perr != EVD_AE_OK)
    return fail(c, perr, message);
  if (!only_fields(api, root, fields)) {
    json_decref(root);
    return fail(c, EVD_AE_INVALID_FIELD, api->msg);
  }
  if ((v = json_object_get(root, "budget")) != NULL) {
    if (!json_is_integer(v)) {
      json_decref(root);
      return fail(c, EVD_AE_INVALID_FIELD, "\"budget\" must be an integer.");
    }
    if (!int_in(v, 1, api->cfg.max_budget, &x)) {
      json_decref(root);
      snprintf(api->msg, sizeof api->msg,
               "\"budget\" must be an integer from 1 to %u (--max-budget).",
               api->cfg.max_budget);
      return fail(c, EVD_AE_INVALID_BUDGET, api->msg);
    }
    budget = (uint32_t)x;
  }
  if ((v = json_object_get(root, "sinks")) != NULL) {
    if (!json_is_integer(v)) {
      json_decref(root);
      return fail(c, EVD_AE_INVALID_FIELD, "\"sinks\" must be an integer.");
    }
    if (!int_in(v, 0, UINT32_MAX, &x)) {
      json_decref(root);
      return fail(c, EVD_AE_INVALID_SINKS, NULL);
    }
    sinks = (uint32_t)x;
  }
  json_decref(root);
  if (sinks >= budget)
    return fail(c, EVD_AE_INVALID_SINKS, NULL);
  s = evd_table_find(api->table, c->id, c->idlen);
  if (s != NULL) {
    const evd_window_t *w = evd_session_window(s);
    if (w->budget != budget || w->sinks != sinks)
      return fail(c, EVD_AE_SESSION_EXISTS, NULL);
    evd_table_touch(api->table, s, api->now_tick);
    write_view(c->out, s);
    return 200;
  }
  err = evd_table_add(api->table, c->id, c->idlen, budget, sinks,
                      api->now_tick, &s);
  if (err == EVD_ELIMIT)
    return fail(c, EVD_AE_SESSION_LIMIT, NULL);
  if (err != 0)
    return fail(c, EVD_AE_OUT_OF_MEMORY, NULL);
  api->metrics.created++;
  evd_log(EVD_LOG_DEBUG, "created session %.*s", (int)c->idlen, c->id);
  write_view(c->out, s);
  return 201;
}

static int h_get(ctx_t *c) {
  evd_session_t *s = evd_table_find(c->api->table, c->id, c->idlen);

  if (s == NULL)
    return fail(c, EVD_AE_UNKNOWN_SESSION, NULL);
  evd_table_touch(c->api->table, s, c->api->now_tick);
  write_view(c->out, s);
  return 200;
}

static int h_delete(ctx_t *c) {
  evd_session_t *s = evd_table_find(c->api->table, c->id, c->idlen);

  if (s == NULL)
    return fail(c, EVD_AE_UNKNOWN_SESSION, NULL);
  evd_table_remove(c->api->table, s);
  c->api->metrics.deleted++;
  evd_log(EVD_LOG_DEBUG, "deleted session %.*s", (int)c->idlen, c->id);
  return 204;
}

static int h_evict(ctx_t *c) {
  static const char *const fields[] = {"budget", NULL};
  evd_api_t *api = c->api;
  const char *message;
  evd_session_t *s;
  evd_window_t *w;
  json_t *root, *v;
  json_int_t x = 0;
  evd_apierr_t perr;
  uint32_t n;
  int err, has_budget;

  perr = parse_body(api, c->req, 1, &root, &message);
  if (perr != EVD_AE_OK)
    return fail(c, perr, message);
  if (!only_fields(api, root, fields)) {
    json_decref(root);
    return fail(c, EVD_AE_INVALID_FIELD, api->msg);
  }
  v = json_object_get(root, "budget");
  has_budget = v != NULL;
  if (has_budget && !json_is_integer(v)) {
    json_decref(root);
    return fail(c, EVD_AE_INVALID_FIELD, "\"budget\" must be an integer.");
  }
  if (has_budget && !int_in(v, 1, EVD_WINDOW_MAX_BUDGET, &x)) {
    json_decref(root);
    return fail(c, EVD_AE_INVALID_BUDGET,
                "An eviction budget must be an integer from 1 to "
                "4294967294, above the session's sinks.");
  }
  json_decref(root);
  s = evd_table_find(api->table, c->id, c->idlen);
  if (s == NULL)
    return fail(c, EVD_AE_UNKNOWN_SESSION, NULL);
  w = evd_session_window(s);
  if (!has_budget)
    x = w->budget;
  if ((uint32_t)x <= w->sinks) {
    snprintf(api->msg, sizeof api->msg,
             "An eviction budget must be greater than the session's %u "
             "sinks.", w->sinks);
    return fail(c, EVD_AE_INVALID_BUDGET, api->msg);
  }
  if (grow(&api->victims, &api->victims_cap, evd_window_size(w)) != 0)
    return fail(c, EVD_AE_OUT_OF_MEMORY, NULL);
  err = evd_window_evict(w, (uint32_t)x, api->victims, evd_window_size(w), &n);
  assert(err == 0);
  evd_table_touch(api->table, s, api->now_tick);
  api->metrics.victims += n;
  evd_buf_reserve(c->out, 32 + 11 * (size_t)n);
  evd_buf_str(c->out, "{\"victims\":");
  evd_buf_u32_array(c->out, api->victims, n);
  evd_buf_str(c->out, ",\"size\":");
  evd_buf_u32(c->out, evd_window_size(w));
  evd_buf_chr(c->out, '}');
  return 200;
}

/* ---- routing ------------------------------------------------------------ */

typedef int (*handler_t)(ctx_t *c);

/* One row per route: which methods it takes and the handler of each. */
static const struct {
  int methods;
  const char *allow;
  handler_t get, put, post, del;
} routes[EVD_R_COUNT] = {
    [EVD_R_HEALTHZ] = {EVD_M_GET | EVD_M_HEAD, "GET, HEAD", h_healthz, NULL,
                       NULL, NULL},
    [EVD_R_METRICS] = {EVD_M_GET | EVD_M_HEAD, "GET, HEAD", h_metrics, NULL,
                       NULL, NULL},
    [EVD_R_BATCH] = {EVD_M_POST, "POST", NULL, NULL, h_batch, NULL},
    [EVD_R_SESSION] = {EVD_M_GET | EVD_M_HEAD | EVD_M_PUT | EVD_M_DELETE,
                       "GET, HEAD, PUT, DELETE", h_get, h_put, NULL, h_delete},
    [EVD_R_STEP] = {EVD_M_POST, "POST", NULL, NULL, h_step, NULL},
    [EVD_R_EVICT] = {EVD_M_POST, "POST", NULL, NULL, h_evict, NULL},
};

/* Compares the bearer credentials in an Authorization header with the
 * token in time that depends only on the token's length, so that timing
 * tells an attacker nothing about how much of a guess was right. */
static int authorized(const char *header, const char *token) {
  size_t glen, tlen = strlen(token), i;
  unsigned char diff;

  if (header == NULL || strncasecmp(header, "Bearer ", 7) != 0)
    return 0;
  header += 7;
  while (*header == ' ')
    header++;
  glen = strlen(header);
  while (glen > 0 && header[glen - 1] == ' ')
    glen--;
  diff = glen != tlen;
  for (i = 0; i < tlen; i++)
    diff |= (unsigned char)(token[i] ^ (i < glen ? header[i] : 0));
  return diff == 0;
}

static int path_is(const char *p, size_t n, const char *lit) {
  size_t len = strlen(lit);
  return n == len && memcmp(p, lit, len) == 0;
}

/* Matches the path to a route, and finds the session id in it. */
static evd_route_t route_of(const char *p, size_t n, const char **id,
                            size_t *idlen) {
  static const char prefix[] = "/session/";
  const size_t plen = sizeof prefix - 1;
  const char *slash;

  if (path_is(p, n, "/healthz"))
    return EVD_R_HEALTHZ;
  if (path_is(p, n, "/step"))
    return EVD_R_BATCH;
  if (path_is(p, n, "/metrics"))
    return EVD_R_METRICS;
  if (n < plen || memcmp(p, prefix, plen) != 0)
    return EVD_R_NONE;
  *id = p + plen;
  slash = memchr(*id, '/', n - plen);
  if (slash == NULL) {
    *idlen = n - plen;
    return EVD_R_SESSION;
  }
  *idlen = (size_t)(slash - *id);
  if (path_is(slash, (size_t)(p + n - slash), "/step"))
    return EVD_R_STEP;
  if (path_is(slash, (size_t)(p + n - slash), "/evict"))
    return EVD_R_EVICT;
  return EVD_R_NONE;
}

void evd_api_handle(evd_api_t *api, const evd_request_t *req, evd_buf_t *out,
                    evd_reply_t *reply) {
  ctx_t c = {.api = api, .req = req, .out = out, .reply = reply};
  handler_t h = NULL;
  evd_route_t r;

  evd_buf_reset(out, 1u << 16);
  reply->allow = NULL;
  reply->content_type = NULL;
  reply->www_authenticate = NULL;
  r = route_of(req->path, req->path_len, &c.id, &c.idlen);
  reply->route = r;
  /* Everything but the health check needs the token, when there is one;
   * unknown paths too, so that they reveal nothing. */
  if (api->cfg.token != NULL && r != EVD_R_HEALTHZ &&
      !authorized(req->authorization, api->cfg.token)) {
    reply->www_authenticate = "Bearer realm=\"evictd\"";
    reply->status = fail(&c, EVD_AE_UNAUTHORIZED, NULL);
    goto done;
  }
  if (r == EVD_R_NONE || routes[r].methods == 0) {
    reply->status = fail(&c, EVD_AE_NOT_FOUND, NULL);
    goto done;
  }
  if (!(routes[r].methods & req->method)) {
    reply->allow = routes[r].allow;
    reply->status = fail(&c, EVD_AE_METHOD_NOT_ALLOWED, NULL);
    goto done;
  }
  if (c.id != NULL && !evd_session_id_valid(c.id, c.idlen)) {
    reply->status = fail(&c, EVD_AE_INVALID_SESSION_ID, NULL);
    goto done;
  }
  switch (req->method) {
  case EVD_M_GET:
  case EVD_M_HEAD: h = routes[r].get; break;
  case EVD_M_PUT: h = routes[r].put; break;
  case EVD_M_POST: h = routes[r].post; break;
  case EVD_M_DELETE: h = routes[r].del; break;
  }
  assert(h != NULL);
  reply->status = h(&c);
done:
  if (out->oom) {
    /* The answer did not fit in memory; say so in a body that does. */
    evd_buf_reset(out, 0);
    reply->content_type = NULL;
    reply->status = fail(&c, EVD_AE_OUT_OF_MEMORY, NULL);
  }
}
