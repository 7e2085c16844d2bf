/* Request bodies (JSON objects, checked for depth before parsing) and the
 * error objects answered when they are wrong. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"

int evd__grow(uint32_t **p, size_t *cap, size_t n) {
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
evd_apierr_t evd__parse_body(evd_api_t *api, const evd_request_t *req,
                             int optional, const char *const *fields,
                             json_t **root, const char **message) {
  json_error_t jerr;
  json_t *j;

  *root = NULL;
  *message = NULL;
  if (req->body_len == 0)
    return optional ? EVD_AE_OK : EVD_AE_INVALID_JSON;
  if (json_depth(req->body, req->body_len) > api->cfg.max_depth)
    return EVD_AE_TOO_DEEP;
  api->ints_as_reals = 0;
  j = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
  if (j == NULL && json_error_code(&jerr) == json_error_numeric_overflow) {
    /* An integer beyond 64 bits is still an integer, just out of every
     * range: read the body again with integers as reals, so that it is
     * refused for its value, by the field it is in. */
    api->ints_as_reals = 1;
    j = json_loadb(req->body, req->body_len,
                   JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &jerr);
  }
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
  if (fields != NULL && !evd__only_fields(api, j, fields)) {
    json_decref(j);
    *message = api->msg;
    return EVD_AE_INVALID_FIELD;
  }
  *root = j;
  return EVD_AE_OK;
}

/* Returns 1 when every key of obj is one of the NULL-terminated names;
 * otherwise writes a message naming the first other key and returns 0. */
int evd__only_fields(evd_api_t *api, json_t *obj, const char *const *names) {
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

/* 1 when v is a JSON integer; in a body read with integers as reals (one
 * held an integer beyond 64 bits), a whole real counts as one too. */
int evd__is_int(const evd_api_t *api, json_t *v) {
  double x;

  if (json_is_integer(v))
    return 1;
  if (!api->ints_as_reals || !json_is_real(v))
    return 0;
  x = json_real_value(v);
  return x == floor(x);
}

int evd__int_in(const evd_api_t *api, json_t *v, json_int_t min,
                json_int_t max, json_int_t *out) {
  double x;

  if (json_is_integer(v)) {
    *out = json_integer_value(v);
    return *out >= min && *out <= max;
  }
  if (!evd__is_int(api, v))
    return 0;
  /* Only the ranges the API uses (within +-2^32) get here: compare as
   * doubles, which hold those exactly, before converting. */
  x = json_real_value(v);
  if (x < (double)min || x > (double)max)
    return 0;
  *out = (json_int_t)x;
  return 1;
}

/* Writes an error object: the whole body for a single request, or a batch
 * result that also carries its status. `newest` goes in for stale errors. */
int evd__write_error(evd_buf_t *out, evd_apierr_t e, const char *message,
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

evd_apierr_t evd__expect_field(evd_api_t *api, json_t *obj, uint8_t *has,
                               uint32_t *expect, const char **message) {
  json_t *v = obj != NULL ? json_object_get(obj, "expect_newest") : NULL;

  *has = v != NULL;
  if (v != NULL && !evd__u32_field(api, v, 0, UINT32_MAX, expect)) {
    *message = "\"expect_newest\" must be a position: an integer from 0 to "
               "4294967295.";
    return EVD_AE_INVALID_POSITION;
  }
  return EVD_AE_OK;
}

int evd__u32_field(evd_api_t *api, json_t *v, uint32_t min, uint32_t max,
                   uint32_t *out) {
  json_int_t x;

  if (!evd__int_in(api, v, min, max, &x))
    return 0;
  *out = (uint32_t)x;
  return 1;
}

/* One optional integer field of the configuration: not an integer is
 * invalid_field, out of [min, max] is `range` with `msg` (printf'd with
 * max). Returns EVD_AE_OK when absent too. */
static evd_apierr_t config_field(evd_api_t *api, json_t *obj, const char *name,
                                 uint32_t min, uint32_t max,
                                 evd_apierr_t range, const char *msg,
                                 uint32_t *out, const char **message) {
  json_t *v = obj != NULL ? json_object_get(obj, name) : NULL;

  if (v == NULL)
    return EVD_AE_OK;
  if (!evd__is_int(api, v)) {
    snprintf(api->msg, sizeof api->msg, "\"%s\" must be an integer.", name);
    *message = api->msg;
    return EVD_AE_INVALID_FIELD;
  }
  if (!evd__u32_field(api, v, min, max, out)) {
    if (msg != NULL) {
      snprintf(api->msg, sizeof api->msg, msg, max);
      *message = api->msg;
    }
    return range;
  }
  return EVD_AE_OK;
}

evd_apierr_t evd__session_config(evd_api_t *api, json_t *obj,
                                 evd_session_config_t *cfg,
                                 const char **message) {
  evd_apierr_t e;

  *message = NULL;
  cfg->budget = api->cfg.budget;
  cfg->sinks = api->cfg.sinks;
  cfg->lookahead = api->cfg.lookahead;
  cfg->page_size = api->cfg.page_size;
  e = config_field(api, obj, "budget", 1, api->cfg.max_budget,
                   EVD_AE_INVALID_BUDGET,
                   "\"budget\" must be an integer from 1 to %u "
                   "(--max-budget).", &cfg->budget, message);
  if (e == EVD_AE_OK)
    e = config_field(api, obj, "sinks", 0, UINT32_MAX, EVD_AE_INVALID_SINKS,
                     NULL, &cfg->sinks, message);
  if (e == EVD_AE_OK)
    e = config_field(api, obj, "lookahead", 1, api->cfg.max_lookahead,
                     EVD_AE_INVALID_LOOKAHEAD,
                     "\"lookahead\" must be an integer from 1 to %u "
                     "(--max-lookahead).", &cfg->lookahead, message);
  if (e == EVD_AE_OK)
    e = config_field(api, obj, "page_size", 0, EVD_MAX_PAGE_SIZE,
                     EVD_AE_INVALID_PAGE_SIZE,
                     "\"page_size\" must be an integer from 0 to %u.",
                     &cfg->page_size, message);
  /* The flags' defaults already satisfy sinks < budget (main.c checks). */
  if (e == EVD_AE_OK && cfg->sinks >= cfg->budget)
    e = EVD_AE_INVALID_SINKS;
  return e;
}

/* Validates a step object into *r and api->pos. Returns EVD_AE_OK, or the
 * error to answer with *message (NULL for the default one). In a batch
 * item the id comes from its "session" field, else from the path (already
 * in r). */
evd_apierr_t evd__step_parse(evd_api_t *api, json_t *obj, int in_batch,
                             evd__step_t *r, const char **message) {
  static const char *const single[] = {
      "pos",    "positions", "tentative", "commit",        "attention",
      "budget", "sinks",     "lookahead", "page_size", "expect_newest",
      NULL};
  static const char *const item[] = {
      "session", "pos",       "positions", "tentative", "commit",
      "attention", "budget",  "sinks",     "lookahead", "page_size",
      "expect_newest", NULL};
  evd_apierr_t e;
  json_t *pos, *list, *v;
  json_int_t x, prev = -1;
  size_t i, n;

  *message = NULL;
  if (!json_is_object(obj)) {
    *message = "Each item of \"steps\" must be an object.";
    return EVD_AE_INVALID_FIELD;
  }
  if (!evd__only_fields(api, obj, in_batch ? item : single)) {
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
  r->op = EVD_RP_STEP;
  v = json_object_get(obj, "tentative");
  if (v != NULL && !json_is_boolean(v)) {
    *message = "\"tentative\" must be true or false.";
    return EVD_AE_INVALID_FIELD;
  }
  r->tentative = json_is_true(v);
  v = json_object_get(obj, "commit");
  r->has_arg = v != NULL;
  if (v != NULL && !evd__u32_field(api, v, 0, UINT32_MAX, &r->arg)) {
    *message = "\"commit\" must be a position: an integer from 0 to "
               "4294967295.";
    return EVD_AE_INVALID_POSITION;
  }
  e = evd__expect_field(api, obj, &r->has_expect, &r->expect, message);
  if (e != EVD_AE_OK)
    return e;
  pos = json_object_get(obj, "pos");
  list = json_object_get(obj, "positions");
  if ((pos != NULL && list != NULL) ||
      (pos == NULL && list == NULL && !r->has_arg)) {
    *message = "Give exactly one of \"pos\" and \"positions\" (or neither, "
               "with \"commit\").";
    return EVD_AE_INVALID_FIELD;
  }
  if (list != NULL && !json_is_array(list)) {
    *message = "\"positions\" must be an array of integers.";
    return EVD_AE_INVALID_FIELD;
  }
  n = list != NULL ? json_array_size(list) : pos != NULL ? 1 : 0;
  if (list != NULL && n == 0) {
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
  if (evd__grow(&api->pos, &api->pos_cap, n) != 0)
    return EVD_AE_OUT_OF_MEMORY;
  for (i = 0; i < n; i++) {
    v = list != NULL ? json_array_get(list, i) : pos;
    if (!evd__int_in(api, v, 0, UINT32_MAX, &x))
      return EVD_AE_INVALID_POSITION;
    if (x <= prev) {
      *message = "Positions within a request must strictly increase.";
      return EVD_AE_INVALID_POSITION;
    }
    api->pos[i] = (uint32_t)x;
    prev = x;
  }
  r->first = 0;
  r->n = (uint32_t)n;
  r->given = (json_object_get(obj, "budget") ? EVD__GIVEN_BUDGET : 0) |
             (json_object_get(obj, "sinks") ? EVD__GIVEN_SINKS : 0) |
             (json_object_get(obj, "lookahead") ? EVD__GIVEN_LOOKAHEAD : 0) |
             (json_object_get(obj, "page_size") ? EVD__GIVEN_PAGE_SIZE : 0);
  return evd__session_config(api, obj, &r->cfg, message);
}
