/* The API fuzzer's reading of the spec: error codes and their statuses,
 * routes and their methods, the route and session id of a path, and the
 * JSON helpers that read request bodies and answers as the spec does. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_api.h"

const fuzz_code_t codes[E_COUNT] = {
    [E_INVALID_JSON] = {"invalid_json", 400},
    [E_INVALID_FIELD] = {"invalid_field", 400},
    [E_INVALID_SESSION_ID] = {"invalid_session_id", 400},
    [E_INVALID_BUDGET] = {"invalid_budget", 400},
    [E_INVALID_SINKS] = {"invalid_sinks", 400},
    [E_INVALID_LOOKAHEAD] = {"invalid_lookahead", 400},
    [E_INVALID_PAGE_SIZE] = {"invalid_page_size", 400},
    [E_INVALID_POSITION] = {"invalid_position", 400},
    [E_TOO_MANY_POSITIONS] = {"too_many_positions", 400},
    [E_TOO_MANY_STEPS] = {"too_many_steps", 400},
    [E_UNKNOWN_SESSION] = {"unknown_session", 404},
    [E_NOT_FOUND] = {"not_found", 404},
    [E_METHOD_NOT_ALLOWED] = {"method_not_allowed", 405},
    [E_SESSION_EXISTS] = {"session_exists", 409},
    [E_STALE_POSITION] = {"stale_position", 409},
    [E_TENTATIVE_PENDING] = {"tentative_pending", 409},
    [E_SESSION_LIMIT] = {"session_limit", 503},
    [E_INVALID_STATE] = {"invalid_state", 400},
    [E_DIVERGED] = {"diverged", 409},
};

static int code_index(const char *code) {
  int i;

  for (i = 0; i < E_COUNT; i++)
    if (strcmp(codes[i].code, code) == 0)
      return i;
  return -1;
}

/* Names of a set of codes, for reports. */
const char *code_names(unsigned set) {
  static char buf[512];
  size_t n = 0;
  int i;

  buf[0] = '\0';
  for (i = 0; i < E_COUNT; i++)
    if (set & B(i))
      n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", n ? " " : "",
                            codes[i].code);
  return set ? buf : "(none)";
}

const char *route_allow(evd_route_t r) {
  switch (r) {
  case EVD_R_HEALTHZ:
  case EVD_R_METRICS: return "GET, HEAD";
  case EVD_R_SESSION: return "GET, HEAD, PUT, DELETE";
  case EVD_R_STEP:
  case EVD_R_EVICT:
  case EVD_R_BATCH:
  case EVD_R_COMMIT:
  case EVD_R_TRUNCATE:
  case EVD_R_FORK:
  case EVD_R_ADOPT: return "POST";
  default: return NULL;
  }
}

int route_methods(evd_route_t r) {
  switch (r) {
  case EVD_R_HEALTHZ:
  case EVD_R_METRICS: return EVD_M_GET | EVD_M_HEAD;
  case EVD_R_SESSION: return EVD_M_GET | EVD_M_HEAD | EVD_M_PUT | EVD_M_DELETE;
  case EVD_R_NONE: return 0;
  default: return EVD_M_POST;
  }
}

/* The statuses the spec documents per route. */
int route_status_ok(evd_route_t r, int st) {
  static const int allowed[EVD_R_COUNT][9] = {
      [EVD_R_NONE] = {404},
      [EVD_R_HEALTHZ] = {200, 405},
      [EVD_R_METRICS] = {200, 405},
      [EVD_R_BATCH] = {200, 400, 405},
      [EVD_R_SESSION] = {200, 201, 204, 400, 404, 405, 409, 503},
      [EVD_R_STEP] = {200, 400, 404, 405, 409, 503},
      [EVD_R_EVICT] = {200, 400, 404, 405, 409},
      [EVD_R_COMMIT] = {200, 400, 404, 405, 409},
      [EVD_R_TRUNCATE] = {200, 400, 404, 405, 409},
      [EVD_R_FORK] = {200, 201, 400, 404, 405, 409, 503},
      [EVD_R_ADOPT] = {200, 201, 400, 405, 409, 503},
  };
  int i;

  for (i = 0; i < 9 && allowed[r][i] != 0; i++)
    if (allowed[r][i] == st)
      return 1;
  return 0;
}

const char *const route_names[EVD_R_COUNT] = {
    "none", "healthz", "metrics", "batch", "session", "step",
    "evict", "commit", "truncate", "fork", "adopt"};

/* The harness's own reading of a path: the route and the session id. */
evd_route_t parse_route(const char *p, size_t n, const char **id,
                        size_t *idlen) {
  static const struct {
    const char *tail;
    evd_route_t r;
  } tails[] = {{"/step", EVD_R_STEP},         {"/evict", EVD_R_EVICT},
               {"/commit", EVD_R_COMMIT},     {"/truncate", EVD_R_TRUNCATE},
               {"/fork", EVD_R_FORK},         {"/adopt", EVD_R_ADOPT}};
  const char *slash;
  size_t i, rest;

  *id = NULL;
  *idlen = 0;
  if (n == 8 && memcmp(p, "/healthz", 8) == 0)
    return EVD_R_HEALTHZ;
  if (n == 8 && memcmp(p, "/metrics", 8) == 0)
    return EVD_R_METRICS;
  if (n == 5 && memcmp(p, "/step", 5) == 0)
    return EVD_R_BATCH;
  if (n < 9 || memcmp(p, "/session/", 9) != 0)
    return EVD_R_NONE;
  *id = p + 9;
  slash = memchr(p + 9, '/', n - 9);
  *idlen = slash != NULL ? (size_t)(slash - (p + 9)) : n - 9;
  if (*idlen == 0) /* an empty id: no route */
    return EVD_R_NONE;
  if (slash == NULL)
    return EVD_R_SESSION;
  rest = (size_t)(p + n - slash);
  for (i = 0; i < sizeof tails / sizeof tails[0]; i++)
    if (rest == strlen(tails[i].tail) && memcmp(slash, tails[i].tail, rest) == 0)
      return tails[i].r;
  return EVD_R_NONE;
}

int id_valid(const char *id, size_t n) {
  size_t i;

  if (n < 1 || n > 128)
    return 0;
  for (i = 0; i < n; i++) {
    char c = id[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '~' ||
          c == '-'))
      return 0;
  }
  return 1;
}

/* ---- small JSON helpers ------------------------------------------------- */

int is_u32(json_t *v) {
  return json_is_integer(v) && json_integer_value(v) >= 0 &&
         json_integer_value(v) <= (json_int_t)UINT32_MAX;
}

uint32_t u32_of(json_t *v) {
  return (uint32_t)json_integer_value(v);
}

/* The request body was read with every integer as a real (it held one
 * beyond 64 bits): a whole real then counts as an integer. */
static int cur_reals;

int is_int(json_t *v) {
  double x;

  if (json_is_integer(v))
    return 1;
  if (!cur_reals || !json_is_real(v))
    return 0;
  x = json_real_value(v);
  return x == floor(x);
}

/* v is an integer within [min, max]; stored in *o. */
int int_in(json_t *v, long long min, long long max, uint32_t *o) {
  if (json_is_integer(v)) {
    long long x = json_integer_value(v);
    if (x < min || x > max)
      return 0;
    *o = (uint32_t)x;
    return 1;
  }
  if (!is_int(v))
    return 0;
  if (json_real_value(v) < (double)min || json_real_value(v) > (double)max)
    return 0;
  *o = (uint32_t)json_real_value(v);
  return 1;
}

static int depth_of(json_t *j) {
  size_t i;
  const char *k;
  json_t *v;
  int d = 0, x;

  if (json_is_array(j)) {
    json_array_foreach(j, i, v) if ((x = depth_of(v)) > d) d = x;
    return d + 1;
  }
  if (json_is_object(j)) {
    json_object_foreach(j, k, v) if ((x = depth_of(v)) > d) d = x;
    return d + 1;
  }
  return 0;
}

/* A request body as the spec reads it: *root is the object (NULL for an
 * empty body when `optional`). Returns 0, or 1 when the answer must be
 * invalid_json (not JSON, not an object, too deep, empty and required).
 * Integers beyond 64 bits are valid JSON, which is read again with every
 * integer as a real. */
int parse_body(const evd_request_t *req, int optional, json_t **root) {
  json_error_t err;
  json_t *j;

  *root = NULL;
  cur_reals = 0;
  if (req->body_len == 0)
    return !optional;
  j = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &err);
  if (j == NULL && json_error_code(&err) == json_error_numeric_overflow) {
    cur_reals = 1;
    j = json_loadb(req->body, req->body_len,
                   JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, NULL);
  }
  if (j == NULL)
    return 1;
  if (!json_is_object(j) || depth_of(j) > (int)cfg.max_depth) {
    json_decref(j);
    return 1;
  }
  *root = j;
  return 0;
}

/* 1 when every key of obj is one of the NULL-terminated names. */
int only_fields(json_t *obj, const char *const *names) {
  const char *key;
  const char *const *n;
  json_t *v;

  json_object_foreach(obj, key, v) {
    for (n = names; *n != NULL; n++)
      if (strcmp(key, *n) == 0)
        break;
    if (*n == NULL)
      return 0;
  }
  return 1;
}

/* An array of uint32 values, strictly ascending when `ascending`. */
void check_u32_array(json_t *a, int ascending, const char *what) {
  size_t i;
  json_t *v;

  CHECK(json_is_array(a), "%s is not an array", what);
  json_array_foreach(a, i, v) {
    CHECK(is_u32(v), "%s[%zu] is not a uint32", what, i);
    if (ascending && i > 0)
      CHECK(u32_of(v) > u32_of(json_array_get(a, i - 1)),
            "%s not strictly ascending at %zu", what, i);
  }
}

json_t *jarr(const uint32_t *v, size_t n) {
  json_t *a = json_array();
  size_t i;

  for (i = 0; i < n; i++)
    json_array_append_new(a, json_integer(v[i]));
  return a;
}

void jpush(json_t *a, uint32_t v) {
  json_array_append_new(a, json_integer(v));
}

/* Compares an answer with the model's, field order included. */
void check_equal(json_t *got, json_t *want, const char *what) {
  char *g = json_dumps(got, JSON_COMPACT), *w = json_dumps(want, JSON_COMPACT);
  int same = g != NULL && w != NULL && strcmp(g, w) == 0;

  if (!same) {
    fprintf(stderr, "\n*** model %s: %s\n*** got   %s: %s\n", what, w, what, g);
    free(g);
    free(w);
    fail("%s differs from the model's", what);
  }
  free(g);
  free(w);
}

/* Checks an error object; in a batch it also carries its status. */
int check_error(json_t *e, int status, int in_batch) {
  json_t *code = json_object_get(e, "code"), *v;
  const char *key;
  int k;

  CHECK(json_is_object(e), "error is not an object");
  CHECK(json_is_string(code), "error without a string code");
  CHECK(json_is_string(json_object_get(e, "message")) &&
            json_string_length(json_object_get(e, "message")) > 0,
        "error without a message");
  if (in_batch) {
    v = json_object_get(e, "status");
    CHECK(json_is_integer(v), "batch error without a status");
    status = (int)json_integer_value(v);
  }
  k = code_index(json_string_value(code));
  CHECK(k >= 0 && codes[k].status == status, "code %s with status %d",
        json_string_value(code), status);
  json_object_foreach(e, key, v) {
    if (strcmp(key, "code") == 0 || strcmp(key, "message") == 0 ||
        (in_batch && strcmp(key, "status") == 0))
      continue;
    CHECK((strcmp(key, "newest") == 0 &&
           (k == E_STALE_POSITION || k == E_DIVERGED)) ||
              (strcmp(key, "view") == 0 && k == E_DIVERGED),
          "error %s has field %s", json_string_value(code), key);
  }
  if (k == E_STALE_POSITION || k == E_DIVERGED)
    CHECK(is_u32(json_object_get(e, "newest")), "%s without newest",
          codes[k].code);
  if (k == E_DIVERGED)
    CHECK(json_is_object(json_object_get(e, "view")), "diverged without a "
          "view");
  return k;
}
