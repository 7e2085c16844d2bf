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

/* A JSON integer within [min, max], stored in *out. */
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
