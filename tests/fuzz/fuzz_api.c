/* libFuzzer harness for the API without sockets: decodes each input into
 * requests, hands them to ONE long-lived evd_api_t (state accumulates across
 * inputs, as in a running daemon) and checks every answer against the spec
 * (/work/spec9.md: lookahead, page_size, drafts and commit, truncate, fork,
 * pages, replay) and against the harness's own model of every session.
 *
 * Input framing (text-friendly, so that seeds can be written by hand):
 *
 *   input   := record ( 0xFF record )*
 *   record  := op path [ "\n" body ]
 *
 * 0xFF never occurs in UTF-8, so it is never needed inside a JSON body. `op`
 * is one byte: 'G' GET, 'H' HEAD, 'U' PUT, 'P' POST, 'D' DELETE, 'X' a method
 * the API does not know, and 'T' for the clock: then `path` is a decimal
 * number of milliseconds (at most 9 digits) by which the clock advances
 * before the idle reaper runs. Any other op byte picks one of the six
 * methods by its value modulo 6. `path` runs to the first "\n" (or the end)
 * and is passed as is (the transport strips query strings; nothing is
 * decoded); `body` is the rest of the record, passed with its length and no
 * terminating NUL, so that reading past it is caught by ASan.
 *
 * The model. The harness keeps a shadow of every live session, written from
 * the spec and sharing no code with server/ (a plain sorted array of held
 * positions, each with its slot and its pinned and tentative flags, slots
 * handed out by looking at the array, like proto/vectors/gen.py): its
 * configuration (budget, sinks, lookahead, page_size), newest, the committed
 * newest C, the tick of its last use, and its replay record (the last
 * applied step, commit or truncate request and the daemon's answer to it).
 * Every request is first decoded by the harness itself into the set of
 * error codes whose conditions hold (field types and ranges, then the
 * session's state: stale, tentative_pending, too_many_positions for drafts,
 * a commit below C, unknown session, session limit, ...) and, when none
 * holds, the exact answer the model gives. Then, after the API answered:
 *
 * - the route is the harness's own reading of the path, the status is one
 *   the spec documents for that route (201 only for PUT /session/{id} and
 *   fork), a 405 names the route's methods in Allow, a 204 has no body,
 *   every other answer but /metrics is a JSON object (jansson, duplicate
 *   keys refused, so also valid UTF-8), /metrics names the new counters;
 * - an error is exactly {"error":{"code","message"}} (plus "newest" for
 *   stale_position, the session's newest before the request; plus "status"
 *   in a batch) with a code of its status, and a code whose condition holds
 *   for this request; a request for which none holds is not refused;
 * - a refused request changes nothing: the session count, the addressed
 *   session (for fork the child too; for a batch every session named) with
 *   every position, slot, draft and its last-use tick stay as the model has
 *   them;
 * - an answer of step, commit, truncate, evict, PUT, GET, fork is exactly
 *   the model's, field order included: victims are the oldest unpinned
 *   positions, evicted per sub-step of `lookahead` positions (drafts are
 *   appended and never evicted); slots are round-robin over sinks..budget +
 *   lookahead - 1 with pinned position k in slot k; "dropped" only with a
 *   commit, "pages_new"/"pages_freed"/"pages_transient" only with
 *   page_size > 0, equal to after \ before, before \ after and the pages
 *   of the added positions (and page 0 of a new session) in neither, of the
 *   model's pages (those the GET view shows); truncate's removed are the positions >= from; fork's 201 is
 *   the parent's view under the child's id; views show "lookahead" only when
 *   it is not 1, "page_size"/"pages" only when page_size > 0, "tentative"
 *   only when drafts are pending. Independent shape checks back this up
 *   (ascending lists, slots below budget + lookahead, size within budget
 *   + lookahead and within budget without drafts, newest, removed >= from);
 * - a request equal to the session's replay record (same operation and
 *   operation fields) is answered with the recorded answer plus
 *   "replayed":true and changes nothing; a fork's child has no record;
 * - after every request the sessions it addressed agree with the model
 *   (positions, slots, drafts, newest, configuration, last use); every 64
 *   requests all sessions do, the table's last-use list is ordered and as
 *   long as the count, and the count never exceeds max_sessions;
 * - the reaper removes exactly the sessions the model has idle for longer
 *   than the TTL.
 *
 * Built with -DEVD_FUZZ_DIFF (as fuzz.mk does when server/fastpath.c
 * exists), every request also goes to a twin API without the fast path for
 * step and batch bodies, and the two answers must be identical.
 *
 * EVD_FUZZ_FRESH=1 in the environment makes a new API state for every
 * input, to reproduce a failure from one file alone. Built with
 * -DEVD_FUZZ_STANDALONE it has its own main() that runs the files named on
 * the command line (for coverage reports and for debugging under gcc).
 * EVD_FUZZ_STATS=1 prints, at exit, how often each route answered each
 * status. At most 64 records of an input are run, so that no input takes
 * long. */
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evictd/api.h"
#include "evictd/error.h"
#include "evictd/session.h"
#include "evictd/window.h"

enum { MAX_PATH = 512, MAX_RECORDS = 64 };

static evd_api_t *api;
static evd_config_t cfg;
static evd_buf_t out;
static uint64_t clock_ms = 1000000;
static unsigned long calls;
/* The standalone runner goes on with the next file after a violation. */
static jmp_buf next_input;
static int jump_ok;

/* The request being checked, for the report. */
static const char *cur_path, *cur_body;
static size_t cur_path_len, cur_body_len;
static int cur_method;

__attribute__((noreturn, format(printf, 1, 2))) static void
fail(const char *fmt, ...) {
  va_list ap;

  fprintf(stderr, "\n*** invariant violated: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  /* libFuzzer's fork mode shows only the lines of a job's log that hold
   * "ERROR:": say it once more in such a line. */
  fprintf(stderr, "\n==fuzz_api== ERROR: invariant violated: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n*** request: method %d path [%.*s] body (%zu bytes) "
                  "[%.*s]\n*** answer (%zu bytes): [%.*s]\n",
          cur_method, (int)cur_path_len, cur_path, cur_body_len,
          (int)(cur_body_len > 2000 ? 2000 : cur_body_len),
          cur_body != NULL ? cur_body : "", out.len,
          (int)(out.len > 2000 ? 2000 : out.len), out.data != NULL ? out.data : "");
  if (jump_ok)
    longjmp(next_input, 1);
  abort();
}

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond))                                                               \
      fail(__VA_ARGS__);                                                       \
  } while (0)

#ifdef EVD_FUZZ_DIFF
/* The differential twin (see fuzz.mk): the same API with the fast path of
 * step and batch bodies switched off. It gets every request too, and its
 * answers must be the same byte for byte: the fast path may only ever
 * accept what the general path accepts, with the same values. */
int ref_evd_api_new(evd_api_t **out, const evd_config_t *cfg);
void ref_evd_api_free(evd_api_t *api);
void ref_evd_api_handle(evd_api_t *api, const evd_request_t *req,
                        evd_buf_t *out, evd_reply_t *reply);
void ref_evd_api_set_clock(evd_api_t *api, uint64_t now_ms);
uint32_t ref_evd_api_reap(evd_api_t *api);

static evd_api_t *twin;
static evd_buf_t twin_out;

static int same_str(const char *a, const char *b) {
  return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static void twin_handle(const evd_request_t *req, const evd_reply_t *rep) {
  evd_reply_t t;

  ref_evd_api_handle(twin, req, &twin_out, &t);
  CHECK(t.status == rep->status && t.route == rep->route &&
            same_str(t.allow, rep->allow) &&
            same_str(t.content_type, rep->content_type) &&
            same_str(t.www_authenticate, rep->www_authenticate) &&
            /* metrics hold process figures such as the resident size */
            (rep->route == EVD_R_METRICS ||
             (twin_out.len == out.len &&
              (out.len == 0 ||
               memcmp(twin_out.data, out.data, out.len) == 0))),
        "the fast path changed the answer; without it: %d [%.*s]", t.status,
        (int)(twin_out.len > 2000 ? 2000 : twin_out.len),
        twin_out.data != NULL ? twin_out.data : "");
}
#endif

/* ---- the spec as tables ------------------------------------------------- */

/* Error codes, as bits of a set of codes whose conditions hold. */
enum {
  E_INVALID_JSON, E_INVALID_FIELD, E_INVALID_SESSION_ID, E_INVALID_BUDGET,
  E_INVALID_SINKS, E_INVALID_LOOKAHEAD, E_INVALID_PAGE_SIZE,
  E_INVALID_POSITION, E_TOO_MANY_POSITIONS, E_TOO_MANY_STEPS,
  E_UNKNOWN_SESSION, E_NOT_FOUND, E_METHOD_NOT_ALLOWED, E_SESSION_EXISTS,
  E_STALE_POSITION, E_TENTATIVE_PENDING, E_SESSION_LIMIT, E_COUNT
};
#define B(e) (1u << (e))

static const struct {
  const char *code;
  int status;
} codes[E_COUNT] = {
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
};

static int code_index(const char *code) {
  int i;

  for (i = 0; i < E_COUNT; i++)
    if (strcmp(codes[i].code, code) == 0)
      return i;
  return -1;
}

/* Names of a set of codes, for reports. */
static const char *code_names(unsigned set) {
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

static const char *route_allow(evd_route_t r) {
  switch (r) {
  case EVD_R_HEALTHZ:
  case EVD_R_METRICS: return "GET, HEAD";
  case EVD_R_SESSION: return "GET, HEAD, PUT, DELETE";
  case EVD_R_STEP:
  case EVD_R_EVICT:
  case EVD_R_BATCH:
  case EVD_R_COMMIT:
  case EVD_R_TRUNCATE:
  case EVD_R_FORK: return "POST";
  default: return NULL;
  }
}

static int route_methods(evd_route_t r) {
  switch (r) {
  case EVD_R_HEALTHZ:
  case EVD_R_METRICS: return EVD_M_GET | EVD_M_HEAD;
  case EVD_R_SESSION: return EVD_M_GET | EVD_M_HEAD | EVD_M_PUT | EVD_M_DELETE;
  case EVD_R_NONE: return 0;
  default: return EVD_M_POST;
  }
}

/* The statuses the spec documents per route. */
static int route_status_ok(evd_route_t r, int st) {
  static const int allowed[EVD_R_COUNT][9] = {
      [EVD_R_NONE] = {404},
      [EVD_R_HEALTHZ] = {200, 405},
      [EVD_R_METRICS] = {200, 405},
      [EVD_R_BATCH] = {200, 400, 405},
      [EVD_R_SESSION] = {200, 201, 204, 400, 404, 405, 409, 503},
      [EVD_R_STEP] = {200, 400, 404, 405, 409, 503},
      [EVD_R_EVICT] = {200, 400, 404, 405, 409},
      [EVD_R_COMMIT] = {200, 400, 404, 405},
      [EVD_R_TRUNCATE] = {200, 400, 404, 405},
      [EVD_R_FORK] = {200, 201, 400, 404, 405, 409, 503},
  };
  int i;

  for (i = 0; i < 9 && allowed[r][i] != 0; i++)
    if (allowed[r][i] == st)
      return 1;
  return 0;
}

static const char *const route_names[EVD_R_COUNT] = {
    "none", "healthz", "metrics", "batch", "session", "step",
    "evict", "commit", "truncate", "fork"};

/* EVD_FUZZ_STATS: answers per route and status class, and the batch items,
 * so that a run shows how far it got into the new routes. */
static unsigned long seen[EVD_R_COUNT][6], seen_items[2], seen_replays,
    seen_drafts, seen_paged;

static void print_stats(void) {
  int r;

  fprintf(stderr, "fuzz_api stats: route 2xx/400/404/405/409/503\n");
  for (r = 0; r < EVD_R_COUNT; r++)
    fprintf(stderr, "  %-9s %lu/%lu/%lu/%lu/%lu/%lu\n", route_names[r],
            seen[r][0], seen[r][1], seen[r][2], seen[r][3], seen[r][4],
            seen[r][5]);
  fprintf(stderr, "  batch items ok/error %lu/%lu, replays %lu, applied "
          "requests leaving drafts %lu, on paged sessions %lu\n",
          seen_items[0], seen_items[1], seen_replays, seen_drafts,
          seen_paged);
}

static void count_status(evd_route_t r, int st) {
  int k = st < 300 ? 0 : st == 400 ? 1 : st == 404 ? 2 : st == 405 ? 3
        : st == 409 ? 4 : 5;
  seen[r][k]++;
}

/* The harness's own reading of a path: the route and the session id. */
static evd_route_t parse_route(const char *p, size_t n, const char **id,
                               size_t *idlen) {
  static const struct {
    const char *tail;
    evd_route_t r;
  } tails[] = {{"/step", EVD_R_STEP},         {"/evict", EVD_R_EVICT},
               {"/commit", EVD_R_COMMIT},     {"/truncate", EVD_R_TRUNCATE},
               {"/fork", EVD_R_FORK}};
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

static int id_valid(const char *id, size_t n) {
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

static int is_u32(json_t *v) {
  return json_is_integer(v) && json_integer_value(v) >= 0 &&
         json_integer_value(v) <= (json_int_t)UINT32_MAX;
}

static uint32_t u32_of(json_t *v) {
  return (uint32_t)json_integer_value(v);
}

/* The request body was read with every integer as a real (it held one
 * beyond 64 bits): a whole real then counts as an integer. */
static int cur_reals;

static int is_int(json_t *v) {
  double x;

  if (json_is_integer(v))
    return 1;
  if (!cur_reals || !json_is_real(v))
    return 0;
  x = json_real_value(v);
  return x == floor(x);
}

/* v is an integer within [min, max]; stored in *o. */
static int int_in(json_t *v, long long min, long long max, uint32_t *o) {
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
static int parse_body(const evd_request_t *req, int optional, json_t **root) {
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
static int only_fields(json_t *obj, const char *const *names) {
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
static void check_u32_array(json_t *a, int ascending, const char *what) {
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

static json_t *jarr(const uint32_t *v, size_t n) {
  json_t *a = json_array();
  size_t i;

  for (i = 0; i < n; i++)
    json_array_append_new(a, json_integer(v[i]));
  return a;
}

static void jpush(json_t *a, uint32_t v) {
  json_array_append_new(a, json_integer(v));
}

/* Compares an answer with the model's, field order included. */
static void check_equal(json_t *got, json_t *want, const char *what) {
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
static int check_error(json_t *e, int status, int in_batch) {
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
    CHECK(strcmp(key, "newest") == 0 && k == E_STALE_POSITION,
          "error %s has field %s", json_string_value(code), key);
  }
  if (k == E_STALE_POSITION)
    CHECK(is_u32(json_object_get(e, "newest")), "stale without newest");
  return k;
}

/* ---- the model ---------------------------------------------------------- */

/* One session as the spec describes it. */
typedef struct shadow_s {
  struct shadow_s *hnext;
  char id[EVD_SESSION_ID_MAX + 1];
  size_t idlen;
  uint32_t budget, sinks, look, page;
  uint32_t n, cap;          /* held; room (budget + lookahead) */
  uint32_t *pos, *slot;     /* ascending positions and their slots */
  uint8_t *pinned, *tent;   /* flags per held position */
  uint8_t *occ;             /* per slot: held */
  uint32_t newest, committed;
  uint32_t used;            /* tick of the last use */
  /* The replay record: the last applied step, commit or truncate. */
  int rec_op;               /* 0: none, else R_STEP, R_COMMIT, R_TRUNCATE */
  int rec_tent, rec_has_commit;
  uint32_t rec_arg, rec_n, *rec_pos;
  json_t *rec_answer;
} shadow_t;

enum { R_STEP = 1, R_COMMIT = 2, R_TRUNCATE = 3 };

enum { SH_BUCKETS = 4096 };
static shadow_t *sh_tab[SH_BUCKETS];
static uint32_t sh_count;

static uint32_t sh_hash(const char *id, size_t n) {
  uint32_t h = 2166136261u;
  size_t i;

  for (i = 0; i < n; i++)
    h = (h ^ (unsigned char)id[i]) * 16777619u;
  return h % SH_BUCKETS;
}

static shadow_t *sh_find(const char *id, size_t n) {
  shadow_t *s;

  for (s = sh_tab[sh_hash(id, n)]; s != NULL; s = s->hnext)
    if (s->idlen == n && memcmp(s->id, id, n) == 0)
      return s;
  return NULL;
}

static void sh_free(shadow_t *s) {
  if (s == NULL)
    return;
  free(s->pos);
  free(s->slot);
  free(s->pinned);
  free(s->tent);
  free(s->occ);
  free(s->rec_pos);
  json_decref(s->rec_answer);
  free(s);
}

static void *xcalloc(size_t n, size_t sz) {
  void *p = calloc(n ? n : 1, sz);
  if (p == NULL)
    abort();
  return p;
}

static shadow_t *sh_alloc(const char *id, size_t idlen, uint32_t budget,
                          uint32_t sinks, uint32_t look, uint32_t page) {
  shadow_t *s = xcalloc(1, sizeof *s);

  memcpy(s->id, id, idlen);
  s->idlen = idlen;
  s->budget = budget;
  s->sinks = sinks;
  s->look = look;
  s->page = page;
  s->cap = budget + look;
  s->pos = xcalloc(s->cap, sizeof *s->pos);
  s->slot = xcalloc(s->cap, sizeof *s->slot);
  s->pinned = xcalloc(s->cap, 1);
  s->tent = xcalloc(s->cap, 1);
  s->occ = xcalloc(s->cap, 1);
  return s;
}

static uint32_t sh_npinned(const shadow_t *s) {
  uint32_t k = 0;

  while (k < s->n && s->pinned[k])
    k++;
  return k;
}

/* Appends p (above everything held): pinned into slot k while fewer than
 * sinks pinned are held; else the slot after the newest unpinned one, from
 * budget + lookahead - 1 round to sinks, or sinks when none is held. */
static uint32_t sh_append(shadow_t *s, uint32_t p, int tentative) {
  uint32_t np = sh_npinned(s), slot;
  int pin = 0;

  CHECK(s->n < s->cap, "model: %u positions and no free slot", s->n);
  CHECK(s->n == 0 || p > s->pos[s->n - 1], "model: appending %u after %u", p,
        s->pos[s->n - 1]);
  if (np < s->sinks) {
    CHECK(np == s->n, "model: unpinned positions held with %u pinned", np);
    slot = np;
    pin = 1;
  } else if (s->n > np) {
    slot = s->slot[s->n - 1] + 1;
    if (slot == s->budget + s->look)
      slot = s->sinks;
  } else {
    slot = s->sinks;
  }
  CHECK(slot < s->cap && !s->occ[slot], "model: slot %u handed out twice",
        slot);
  s->occ[slot] = 1;
  s->pos[s->n] = p;
  s->slot[s->n] = slot;
  s->pinned[s->n] = (uint8_t)pin;
  s->tent[s->n] = (uint8_t)tentative;
  s->n++;
  s->newest = p;
  return slot;
}

/* Removes held[i..i+k). */
static void sh_cut(shadow_t *s, uint32_t i, uint32_t k) {
  uint32_t j;

  for (j = i; j < i + k; j++)
    s->occ[s->slot[j]] = 0;
  memmove(s->pos + i, s->pos + i + k, (s->n - i - k) * sizeof *s->pos);
  memmove(s->slot + i, s->slot + i + k, (s->n - i - k) * sizeof *s->slot);
  memmove(s->pinned + i, s->pinned + i + k, s->n - i - k);
  memmove(s->tent + i, s->tent + i + k, s->n - i - k);
  s->n -= k;
}

/* The oldest unpinned positions go until at most `limit` remain. */
static void sh_evict_to(shadow_t *s, uint32_t limit, json_t *victims) {
  uint32_t np = sh_npinned(s), k, j;

  if (s->n <= limit)
    return;
  k = s->n - limit;
  CHECK(np + k <= s->n, "model: only pinned positions left to evict");
  for (j = np; j < np + k; j++) {
    CHECK(!s->tent[j], "model: evicting the draft %u", s->pos[j]);
    jpush(victims, s->pos[j]);
  }
  sh_cut(s, np, k);
}

static uint32_t sh_drafts(const shadow_t *s) {
  uint32_t k = 0;

  while (k < s->n && s->tent[s->n - 1 - k])
    k++;
  return k;
}

/* Keeps the drafts <= p, drops the others; newest is the last kept draft,
 * or C; then evicts to the budget. */
static void sh_commit(shadow_t *s, uint32_t p, json_t *victims,
                      json_t *dropped) {
  uint32_t d = sh_drafts(s), first = s->n - d, i, keep = first;

  for (i = first; i < s->n; i++)
    if (s->pos[i] <= p)
      keep = i + 1;
  for (i = keep; i < s->n; i++)
    jpush(dropped, s->pos[i]);
  sh_cut(s, keep, s->n - keep);
  for (i = first; i < s->n; i++)
    s->tent[i] = 0;
  s->newest = keep > first ? s->pos[keep - 1] : s->committed;
  s->committed = s->newest;
  sh_evict_to(s, s->budget, victims);
}

static void sh_truncate(shadow_t *s, uint32_t from, json_t *removed) {
  uint32_t i = s->n;
  json_t *gone;

  while (i > 0 && s->pos[i - 1] >= from)
    i--;
  gone = jarr(s->pos + i, s->n - i);
  json_array_extend(removed, gone);
  json_decref(gone);
  sh_cut(s, i, s->n - i);
  if (from <= s->newest) {
    s->newest = from - 1;
    if (s->committed > from - 1)
      s->committed = from - 1;
  }
  /* With no draft left, the committed newest is the newest (the contract:
   * regress/truncate-of-every-draft-leaves-... keeps it so). */
  if (sh_drafts(s) == 0)
    s->committed = s->newest;
}

/* A new session: position 0 in slot 0. */
static shadow_t *sh_new(const char *id, size_t idlen,
                        const evd_session_config_t *c) {
  shadow_t *s = sh_alloc(id, idlen, c->budget, c->sinks, c->lookahead,
                         c->page_size);
  sh_append(s, 0, 0);
  s->newest = s->committed = 0;
  return s;
}

/* A copy of the state (the replay record only when `record`). */
static shadow_t *sh_copy(const shadow_t *src, const char *id, size_t idlen,
                         int record) {
  shadow_t *s = sh_alloc(id, idlen, src->budget, src->sinks, src->look,
                         src->page);

  s->n = src->n;
  memcpy(s->pos, src->pos, src->n * sizeof *s->pos);
  memcpy(s->slot, src->slot, src->n * sizeof *s->slot);
  memcpy(s->pinned, src->pinned, src->n);
  memcpy(s->tent, src->tent, src->n);
  memcpy(s->occ, src->occ, src->cap);
  s->newest = src->newest;
  s->committed = src->committed;
  s->used = src->used;
  if (record && src->rec_op != 0) {
    s->rec_op = src->rec_op;
    s->rec_tent = src->rec_tent;
    s->rec_has_commit = src->rec_has_commit;
    s->rec_arg = src->rec_arg;
    s->rec_n = src->rec_n;
    s->rec_pos = xcalloc(src->rec_n, sizeof *s->rec_pos);
    if (src->rec_n > 0)
      memcpy(s->rec_pos, src->rec_pos, src->rec_n * sizeof *s->rec_pos);
    s->rec_answer = json_deep_copy(src->rec_answer);
  }
  return s;
}

static void sh_insert(shadow_t *s) {
  uint32_t h = sh_hash(s->id, s->idlen);

  s->hnext = sh_tab[h];
  sh_tab[h] = s;
  sh_count++;
}

static void sh_remove(shadow_t *s) {
  shadow_t **pp = &sh_tab[sh_hash(s->id, s->idlen)];

  while (*pp != s)
    pp = &(*pp)->hnext;
  *pp = s->hnext;
  sh_count--;
  sh_free(s);
}

/* Puts `s` in the place of the session with its id (inserting it when
 * there is none). */
static void sh_put(shadow_t *s) {
  shadow_t *old = sh_find(s->id, s->idlen);

  if (old != NULL)
    sh_remove(old);
  sh_insert(s);
}

static void sh_set_record(shadow_t *s, int op, int tent, int has_commit,
                          uint32_t arg, const uint32_t *pos, uint32_t n,
                          json_t *answer) {
  free(s->rec_pos);
  json_decref(s->rec_answer);
  s->rec_op = op;
  s->rec_tent = tent;
  s->rec_has_commit = has_commit;
  s->rec_arg = arg;
  s->rec_n = n;
  s->rec_pos = xcalloc(n, sizeof *s->rec_pos);
  if (n > 0)
    memcpy(s->rec_pos, pos, n * sizeof *pos);
  s->rec_answer = json_deep_copy(answer);
}

static int sh_rec_match(const shadow_t *s, int op, int tent, int has_commit,
                        uint32_t arg, const uint32_t *pos, uint32_t n) {
  if (s == NULL || s->rec_op != op)
    return 0;
  if (op != R_STEP)
    return s->rec_arg == arg;
  return s->rec_tent == tent && s->rec_has_commit == has_commit &&
         (!has_commit || s->rec_arg == arg) && s->rec_n == n &&
         (n == 0 || memcmp(s->rec_pos, pos, n * sizeof *pos) == 0);
}

/* The pages holding a position (ascending), into `pg`; returns how many.
 * NULL: a session that does not exist yet holds none. */
static uint32_t sh_pages(const shadow_t *s, uint32_t *pg) {
  uint32_t i, k = 0;

  if (s == NULL || s->page == 0)
    return 0;
  for (i = 0; i < s->n; i++)
    if (k == 0 || pg[k - 1] != s->pos[i] / s->page)
      pg[k++] = s->pos[i] / s->page;
  return k;
}

/* Adds "pages_new" (after \ before), "pages_freed" (before \ after) and
 * "pages_transient" (the pages of the `nadded` positions added, and page 0
 * of a new session, in neither) of a request that took `before` (NULL:
 * none) to `after`, when pages are on. */
static void add_pages(json_t *ans, const shadow_t *before,
                      const shadow_t *after, const uint32_t *added,
                      uint32_t nadded) {
  static uint32_t a[4096 + 64 + 1], b[4096 + 64 + 1];
  uint32_t na, nb, i = 0, j = 0, k, page, last = UINT32_MAX;
  json_t *pn, *pf, *pt;

  if (after->page == 0)
    return;
  nb = sh_pages(before, b);
  na = sh_pages(after, a);
  pn = json_array();
  pf = json_array();
  pt = json_array();
  while (i < na || j < nb) {
    if (j == nb || (i < na && a[i] < b[j]))
      jpush(pn, a[i++]);
    else if (i == na || b[j] < a[i])
      jpush(pf, b[j++]);
    else
      i++, j++;
  }
  for (k = before == NULL ? 0 : 1; k <= nadded; k++) {
    page = k == 0 ? 0 : added[k - 1] / after->page;
    if (page == last)
      continue;
    last = page;
    for (i = 0; i < na && a[i] != page; i++)
      ;
    for (j = 0; j < nb && b[j] != page; j++)
      ;
    if (i == na && j == nb)
      jpush(pt, page);
  }
  json_object_set_new(ans, "pages_new", pn);
  json_object_set_new(ans, "pages_freed", pf);
  json_object_set_new(ans, "pages_transient", pt);
}

/* The GET view. */
static json_t *sh_view(const shadow_t *s) {
  static uint32_t pg[4096 + 64 + 1];
  json_t *v = json_object();
  uint32_t d = sh_drafts(s);

  json_object_set_new(v, "id", json_stringn(s->id, s->idlen));
  json_object_set_new(v, "budget", json_integer(s->budget));
  json_object_set_new(v, "sinks", json_integer(s->sinks));
  if (s->look != 1)
    json_object_set_new(v, "lookahead", json_integer(s->look));
  if (s->page != 0)
    json_object_set_new(v, "page_size", json_integer(s->page));
  json_object_set_new(v, "size", json_integer(s->n));
  json_object_set_new(v, "newest", json_integer(s->newest));
  json_object_set_new(v, "kept", jarr(s->pos, s->n));
  json_object_set_new(v, "slots", jarr(s->slot, s->n));
  if (d != 0)
    json_object_set_new(v, "tentative", jarr(s->pos + s->n - d, d));
  if (s->page != 0)
    json_object_set_new(v, "pages", jarr(pg, sh_pages(s, pg)));
  return v;
}

static int sh_same_state(const shadow_t *a, const shadow_t *b) {
  return a->budget == b->budget && a->sinks == b->sinks &&
         a->look == b->look && a->page == b->page && a->n == b->n &&
         a->newest == b->newest && a->committed == b->committed &&
         memcmp(a->pos, b->pos, a->n * sizeof *a->pos) == 0 &&
         memcmp(a->slot, b->slot, a->n * sizeof *a->slot) == 0 &&
         memcmp(a->pinned, b->pinned, a->n) == 0 &&
         memcmp(a->tent, b->tent, a->n) == 0;
}

/* The model's own invariants (the spec's, restated). */
static void sh_check(const shadow_t *s) {
  uint32_t np = sh_npinned(s), d = sh_drafts(s), i;

  CHECK(s->n <= s->budget + s->look && s->n - d <= s->budget &&
            d <= s->look && np <= s->sinks,
        "model %.*s: %u held, %u drafts, %u pinned", (int)s->idlen, s->id,
        s->n, d, np);
  for (i = 0; i < s->n; i++) {
    CHECK(i < np ? s->slot[i] == i : s->slot[i] >= s->sinks,
          "model: pinned k not in slot k");
    CHECK(!s->pinned[i] || i < np, "model: pinned after unpinned");
    CHECK(s->pos[i] <= s->newest, "model: held above newest");
    CHECK(!s->tent[i] || (i >= s->n - d && s->pos[i] > s->committed),
          "model: drafts not the newest positions");
  }
  CHECK(s->committed <= s->newest, "model: committed above newest");
}

/* ---- the daemon's table against the model ------------------------------ */

static evd_session_t *session_of(const char *id, size_t len) {
  return evd_table_find(evd_api_table(api), id, len);
}

/* The daemon's session `id` agrees with the model (which has none when
 * m is NULL). */
static void check_session(const char *id, size_t idlen, const char *when) {
  shadow_t *m = id_valid(id, idlen) ? sh_find(id, idlen) : NULL;
  evd_session_t *s = id_valid(id, idlen) ? session_of(id, idlen) : NULL;
  const evd_window_t *w;
  uint32_t i, slot, p;
  int drafts;

  if (m == NULL) {
    CHECK(s == NULL, "%s: session %.*s exists, the model has none", when,
          (int)idlen, id);
    return;
  }
  CHECK(s != NULL, "%s: session %.*s is gone, the model has it", when,
        (int)idlen, id);
  sh_check(m);
  w = evd_session_window(s);
  CHECK(w->budget == m->budget && w->sinks == m->sinks &&
            evd_window_lookahead(w) == m->look &&
            evd_session_page_size(s) == m->page,
        "%s: session %.*s configuration %u/%u/%u/%u, the model's "
        "%u/%u/%u/%u", when, (int)idlen, id, w->budget, w->sinks,
        evd_window_lookahead(w), evd_session_page_size(s), m->budget,
        m->sinks, m->look, m->page);
  CHECK(evd_window_size(w) == m->n && evd_window_newest(w) == m->newest,
        "%s: session %.*s holds %u newest %u, the model %u newest %u", when,
        (int)idlen, id, evd_window_size(w), evd_window_newest(w), m->n,
        m->newest);
  drafts = evd_window_committed(w) != evd_window_newest(w);
  for (i = 0; i < m->n; i++) {
    p = evd_window_at(w, i, &slot);
    CHECK(p == m->pos[i] && slot == m->slot[i] &&
              (drafts && p > evd_window_committed(w)) == (m->tent[i] != 0),
          "%s: session %.*s holds %u in slot %u (draft %d) at %u, the model "
          "%u in slot %u (draft %d)", when, (int)idlen, id, p, slot,
          drafts && p > evd_window_committed(w), i, m->pos[i], m->slot[i],
          m->tent[i]);
  }
  CHECK(s->used == m->used, "%s: session %.*s last used at tick %u, the "
        "model says %u", when, (int)idlen, id, s->used, m->used);
}

static void check_count(const char *when) {
  uint32_t n = evd_table_count(evd_api_table(api));

  CHECK(n == sh_count, "%s: %u sessions, the model has %u", when, n,
        sh_count);
  CHECK(n <= cfg.max_sessions, "%u sessions live", n);
}

/* Every session of the table agrees with the model, and the last-use list
 * is as long as the table and ordered by use. */
static void check_table(void) {
  evd_table_t *t = evd_api_table(api);
  evd_session_t *s, *prev = NULL;
  uint32_t n = 0;

  check_count("table");
  for (s = evd_table_oldest(t); s != NULL; prev = s, s = evd_table_younger(s)) {
    CHECK(prev == NULL || s->used - prev->used < 0x80000000u,
          "last-use list out of order");
    CHECK(evd_table_find(t, s->id, s->idlen) == s, "listed session not found");
    CHECK(++n <= evd_table_count(t), "last-use list longer than the count");
    check_session(s->id, s->idlen, "table");
  }
  CHECK(n == evd_table_count(t), "last-use list holds %u of %u", n,
        evd_table_count(t));
}

/* ---- requests as the model reads them ---------------------------------- */

static uint32_t now_tick(void) {
  return (uint32_t)(clock_ms / 100);
}

/* A session's configuration from obj's creation fields, defaults filled in;
 * returns the codes whose conditions hold. */
static unsigned read_config(json_t *obj, evd_session_config_t *c) {
  static const struct {
    const char *name;
    long long min;
    int code;
  } f[4] = {{"budget", 1, E_INVALID_BUDGET},
            {"sinks", 0, E_INVALID_SINKS},
            {"lookahead", 1, E_INVALID_LOOKAHEAD},
            {"page_size", 0, E_INVALID_PAGE_SIZE}};
  uint32_t *dst[4] = {&c->budget, &c->sinks, &c->lookahead, &c->page_size};
  long long max[4] = {cfg.max_budget, UINT32_MAX, cfg.max_lookahead, 65536};
  unsigned e = 0;
  int i;

  c->budget = cfg.budget;
  c->sinks = cfg.sinks;
  c->lookahead = cfg.lookahead;
  c->page_size = cfg.page_size;
  for (i = 0; i < 4; i++) {
    json_t *v = obj != NULL ? json_object_get(obj, f[i].name) : NULL;
    if (v == NULL)
      continue;
    if (!is_int(v))
      e |= B(E_INVALID_FIELD);
    else if (!int_in(v, f[i].min, max[i], dst[i]))
      e |= B(f[i].code);
  }
  if (c->sinks >= c->budget)
    e |= B(E_INVALID_SINKS);
  return e;
}

/* A step object (the body of /session/{id}/step or a batch item). */
typedef struct {
  unsigned perr;   /* codes of the request itself */
  unsigned cerr;   /* codes of its creation fields */
  const char *sid; /* a batch item's session, when valid */
  size_t sidlen;
  uint32_t n;
  int tent, has_commit;
  uint32_t commit;
  evd_session_config_t cfg;
  int given[4];    /* budget, sinks, lookahead, page_size named (and
                      valid integers) */
} stepreq_t;

/* The positions of the step being read (a body of -max_len=8192 bytes
 * holds fewer; longer lists are refused and not read further). */
enum { REQ_POS_MAX = 8192 };
static uint32_t req_pos[REQ_POS_MAX];

static void read_step(json_t *obj, int in_batch, stepreq_t *r) {
  static const char *const single[] = {
      "pos", "positions", "tentative", "commit", "attention", "budget",
      "sinks", "lookahead", "page_size", NULL};
  static const char *const item[] = {
      "session", "pos", "positions", "tentative", "commit", "attention",
      "budget", "sinks", "lookahead", "page_size", NULL};
  json_t *pos, *list, *v;
  size_t i;

  memset(r, 0, sizeof *r);
  if (!json_is_object(obj)) {
    r->perr = B(E_INVALID_FIELD);
    return;
  }
  if (!only_fields(obj, in_batch ? item : single))
    r->perr |= B(E_INVALID_FIELD);
  if (in_batch) {
    v = json_object_get(obj, "session");
    if (!json_is_string(v))
      r->perr |= B(E_INVALID_FIELD);
    else if (!id_valid(json_string_value(v), json_string_length(v)))
      r->perr |= B(E_INVALID_SESSION_ID);
    else {
      r->sid = json_string_value(v);
      r->sidlen = json_string_length(v);
    }
  }
  v = json_object_get(obj, "tentative");
  if (v != NULL && !json_is_boolean(v))
    r->perr |= B(E_INVALID_FIELD);
  r->tent = json_is_true(v);
  v = json_object_get(obj, "commit");
  if (v != NULL) {
    if (int_in(v, 0, UINT32_MAX, &r->commit))
      r->has_commit = 1;
    else /* "wrong type of commit" and "not an integer in 0..2^32-1" */
      r->perr |= B(E_INVALID_POSITION) |
                 (json_is_number(v) ? 0 : B(E_INVALID_FIELD));
  }
  pos = json_object_get(obj, "pos");
  list = json_object_get(obj, "positions");
  if ((pos != NULL && list != NULL) ||
      (pos == NULL && list == NULL && v == NULL))
    r->perr |= B(E_INVALID_FIELD);
  if (list != NULL && !json_is_array(list)) {
    r->perr |= B(E_INVALID_FIELD);
  } else if (list != NULL) {
    if (json_array_size(list) == 0)
      r->perr |= B(E_INVALID_POSITION);
    if (json_array_size(list) > cfg.max_positions)
      r->perr |= B(E_TOO_MANY_POSITIONS);
    json_array_foreach(list, i, v) {
      uint32_t x;
      if (i >= REQ_POS_MAX) {
        r->perr |= B(E_TOO_MANY_POSITIONS);
        break;
      }
      if (!int_in(v, 0, UINT32_MAX, &x) || (i > 0 && x <= req_pos[i - 1])) {
        r->perr |= B(E_INVALID_POSITION);
        break;
      }
      req_pos[i] = x;
    }
    r->n = (uint32_t)json_array_size(list);
  } else if (pos != NULL) {
    if (!int_in(pos, 0, UINT32_MAX, &req_pos[0]))
      r->perr |= B(E_INVALID_POSITION);
    r->n = 1;
  }
  r->cerr = read_config(obj, &r->cfg);
  r->given[0] = json_object_get(obj, "budget") != NULL;
  r->given[1] = json_object_get(obj, "sinks") != NULL;
  r->given[2] = json_object_get(obj, "lookahead") != NULL;
  r->given[3] = json_object_get(obj, "page_size") != NULL;
}

/* What the model expects of one request: the codes it may be refused with
 * (those whose conditions hold), whether it may succeed, and then the
 * answer and the sessions after it. */
typedef struct {
  unsigned allowed;
  int may_succeed;
  int status;          /* of success */
  json_t *expect;      /* the answer (NULL: checked by the caller) */
  int replay;          /* the answer is the replay record */
  shadow_t *next;      /* the session after success (owned) */
  uint32_t newest;     /* for stale_position */
} outcome_t;

static void outcome_free(outcome_t *o) {
  json_decref(o->expect);
  sh_free(o->next);
  memset(o, 0, sizeof *o);
}

/* A step request r on session s (NULL: it does not exist). */
static void model_step(shadow_t *s, const char *id, size_t idlen,
                       const stepreq_t *r, outcome_t *o) {
  uint32_t drafts, newest_after, pending_after, i, k, c, look;
  unsigned sem = 0;
  shadow_t *t;
  json_t *victims, *slots, *dropped = NULL;

  memset(o, 0, sizeof *o);
  o->status = 200;
  o->newest = s != NULL ? s->newest : 0;
  o->allowed = r->perr;
  if (r->perr != 0)
    return; /* refused for its shape; nothing else is known */
  if (s == NULL && r->cerr != 0) {
    o->allowed |= r->cerr; /* no session can be made of it */
    return;
  }
  /* Creation fields of an existing session are checked, and must equal
   * its own (else 409, before anything else). */
  o->allowed |= r->cerr;
  if (s != NULL && r->cerr == 0 &&
      ((r->given[0] && r->cfg.budget != s->budget) ||
       (r->given[1] && r->cfg.sinks != s->sinks) ||
       (r->given[2] && r->cfg.lookahead != s->look) ||
       (r->given[3] && r->cfg.page_size != s->page))) {
    o->allowed |= B(E_SESSION_EXISTS);
    return;
  }
  if (sh_rec_match(s, R_STEP, r->tent, r->has_commit, r->commit, req_pos,
                   r->n)) {
    o->may_succeed = 1;
    o->replay = 1;
    o->expect = json_deep_copy(s->rec_answer);
    json_object_set_new(o->expect, "replayed", json_true());
    return;
  }
  drafts = s != NULL ? sh_drafts(s) : 0;
  look = s != NULL ? s->look : r->cfg.lookahead;
  newest_after = o->newest;
  pending_after = drafts;
  if (r->has_commit) {
    uint32_t committed = s != NULL ? s->committed : 0;
    if (r->commit < committed)
      sem |= B(E_INVALID_POSITION);
    newest_after = committed;
    for (i = 0; i < drafts; i++)
      if (s->pos[s->n - drafts + i] <= r->commit)
        newest_after = s->pos[s->n - drafts + i];
    pending_after = 0;
  }
  if (r->n > 0 && req_pos[0] <= newest_after)
    sem |= B(E_STALE_POSITION);
  if (drafts != 0 && !r->tent && !r->has_commit)
    sem |= B(E_TENTATIVE_PENDING);
  if (r->tent && pending_after + r->n > look)
    sem |= B(E_TOO_MANY_POSITIONS);
  if (s == NULL && sh_count >= cfg.max_sessions)
    sem |= B(E_SESSION_LIMIT);
  o->allowed |= sem;
  if (sem != 0)
    return;
  o->may_succeed = 1;
  t = s != NULL ? sh_copy(s, id, idlen, 0) : sh_new(id, idlen, &r->cfg);
  victims = json_array();
  slots = json_array();
  if (r->has_commit) {
    dropped = json_array();
    sh_commit(t, r->commit, victims, dropped);
  }
  if (r->tent) {
    for (i = 0; i < r->n; i++)
      jpush(slots, sh_append(t, req_pos[i], 1));
  } else {
    for (i = 0; i < r->n; i += c) {
      c = r->n - i < t->look ? r->n - i : t->look;
      for (k = i; k < i + c; k++)
        jpush(slots, sh_append(t, req_pos[k], 0));
      sh_evict_to(t, t->budget, victims);
      t->committed = t->newest;
    }
  }
  o->expect = json_object();
  json_object_set_new(o->expect, "victims", victims);
  json_object_set_new(o->expect, "slots", slots);
  json_object_set_new(o->expect, "size", json_integer(t->n));
  json_object_set_new(o->expect, "newest", json_integer(t->newest));
  if (dropped != NULL)
    json_object_set_new(o->expect, "dropped", dropped);
  add_pages(o->expect, s, t, req_pos, r->n);
  o->next = t;
}

/* POST /session/{id}/commit or /truncate: {"newest": P} or {"from": P}. */
static void model_one_position(shadow_t *s, const char *id, size_t idlen,
                               int op, json_t *body, int bad_json,
                               outcome_t *o, uint32_t *arg) {
  static const char *const commit_fields[] = {"newest", NULL};
  static const char *const truncate_fields[] = {"from", NULL};
  json_t *v;
  shadow_t *t;
  json_t *a, *b = NULL;

  memset(o, 0, sizeof *o);
  o->status = 200;
  if (s == NULL)
    o->allowed |= B(E_UNKNOWN_SESSION);
  if (bad_json) {
    o->allowed |= B(E_INVALID_JSON);
    return;
  }
  if (!only_fields(body, op == R_COMMIT ? commit_fields : truncate_fields))
    o->allowed |= B(E_INVALID_FIELD);
  v = json_object_get(body, op == R_COMMIT ? "newest" : "from");
  if (v == NULL)
    o->allowed |= B(E_INVALID_FIELD);
  else if (!int_in(v, op == R_COMMIT ? 0 : 1, UINT32_MAX, arg))
    o->allowed |= B(E_INVALID_POSITION) |
                  (json_is_number(v) ? 0 : B(E_INVALID_FIELD));
  if (o->allowed != 0)
    return;
  if (sh_rec_match(s, op, 0, 0, *arg, NULL, 0)) {
    o->may_succeed = 1;
    o->replay = 1;
    o->expect = json_deep_copy(s->rec_answer);
    json_object_set_new(o->expect, "replayed", json_true());
    return;
  }
  if (op == R_COMMIT && *arg < s->committed) {
    o->allowed |= B(E_INVALID_POSITION);
    return;
  }
  o->may_succeed = 1;
  t = sh_copy(s, id, idlen, 0);
  a = json_array();
  o->expect = json_object();
  if (op == R_COMMIT) {
    b = json_array();
    sh_commit(t, *arg, a, b);
    json_object_set_new(o->expect, "victims", a);
    json_object_set_new(o->expect, "dropped", b);
  } else {
    sh_truncate(t, *arg, a);
    json_object_set_new(o->expect, "removed", a);
  }
  json_object_set_new(o->expect, "size", json_integer(t->n));
  json_object_set_new(o->expect, "newest", json_integer(t->newest));
  add_pages(o->expect, s, t, NULL, 0);
  o->next = t;
}

/* The answer of an applied step-like request: the shape the spec gives it,
 * independent of the model. */
static void check_step_shape(json_t *res, const shadow_t *after,
                             const stepreq_t *r) {
  const char *key;
  json_t *v;
  uint32_t newest, size, i;

  json_object_foreach(res, key, v) {
    CHECK(strcmp(key, "victims") == 0 || strcmp(key, "slots") == 0 ||
              strcmp(key, "size") == 0 || strcmp(key, "newest") == 0 ||
              (strcmp(key, "dropped") == 0 && r->has_commit) ||
              ((strcmp(key, "pages_new") == 0 ||
                strcmp(key, "pages_freed") == 0 ||
                strcmp(key, "pages_transient") == 0) && after->page > 0),
          "step answer has field %s", key);
  }
  CHECK((json_object_get(res, "dropped") != NULL) == r->has_commit,
        "step answer with commit %d, dropped %d", r->has_commit,
        json_object_get(res, "dropped") != NULL);
  CHECK((json_object_get(res, "pages_new") != NULL) == (after->page > 0) &&
            (json_object_get(res, "pages_freed") != NULL) ==
                (after->page > 0) &&
            (json_object_get(res, "pages_transient") != NULL) ==
                (after->page > 0),
        "pages fields with page_size %u", after->page);
  check_u32_array(json_object_get(res, "victims"), 1, "victims");
  check_u32_array(json_object_get(res, "slots"), 0, "slots");
  if (r->has_commit)
    check_u32_array(json_object_get(res, "dropped"), 1, "dropped");
  if (after->page > 0) {
    check_u32_array(json_object_get(res, "pages_new"), 1, "pages_new");
    check_u32_array(json_object_get(res, "pages_freed"), 1, "pages_freed");
    check_u32_array(json_object_get(res, "pages_transient"), 1,
                    "pages_transient");
  }
  CHECK(is_u32(json_object_get(res, "size")) &&
            is_u32(json_object_get(res, "newest")),
        "size or newest missing");
  size = u32_of(json_object_get(res, "size"));
  newest = u32_of(json_object_get(res, "newest"));
  CHECK(size <= after->budget + after->look &&
            (sh_drafts(after) > 0 || size <= after->budget),
        "size %u with budget %u, lookahead %u, %u drafts", size,
        after->budget, after->look, sh_drafts(after));
  CHECK(json_array_size(json_object_get(res, "slots")) == r->n,
        "%zu slots for %u positions",
        json_array_size(json_object_get(res, "slots")), r->n);
  json_array_foreach(json_object_get(res, "slots"), i, v)
    CHECK(u32_of(v) < after->budget + after->look,
          "slot %u beyond budget %u + lookahead %u", u32_of(v), after->budget,
          after->look);
  if (r->n > 0)
    CHECK(newest == req_pos[r->n - 1], "newest %u, last position asked %u",
          newest, req_pos[r->n - 1]);
  json_array_foreach(json_object_get(res, "victims"), i, v)
    CHECK(u32_of(v) < newest, "victim %u not below newest %u", u32_of(v),
          newest);
}

/* Checks the answer (or error object) of a step-like request against the
 * outcome; installs the new state on success. `in_batch` answers carry
 * their status inside the error. */
static void settle(outcome_t *o, json_t *res, int status, int in_batch,
                   const char *id, size_t idlen, const char *what) {
  json_t *e = json_object_get(res, "error");

  if (e != NULL && (in_batch || status >= 400)) {
    int k;
    CHECK(json_object_size(res) == 1, "%s: error with other fields", what);
    k = check_error(e, status, in_batch);
    CHECK(o->allowed & B(k),
          "%s refused with %s; the conditions of %s hold%s", what,
          codes[k].code, code_names(o->allowed),
          o->may_succeed ? " and it may succeed" : "");
    if (k == E_STALE_POSITION)
      CHECK(u32_of(json_object_get(e, "newest")) == o->newest,
            "stale_position names newest %u, the session's is %u",
            u32_of(json_object_get(e, "newest")), o->newest);
    if (in_batch)
      seen_items[1]++;
    return;
  }
  CHECK(status == o->status, "%s answered %d, expected %d", what, status,
        o->status);
  CHECK(o->may_succeed, "%s succeeded; the conditions of %s hold", what,
        code_names(o->allowed));
  if (in_batch)
    seen_items[0]++;
  if (o->expect != NULL)
    check_equal(res, o->expect, o->replay ? "replayed answer" : "answer");
  if (o->replay)
    seen_replays++;
  if (o->next != NULL) {
    o->next->used = now_tick();
    if (sh_drafts(o->next) > 0)
      seen_drafts++;
    if (o->next->page > 0)
      seen_paged++;
    sh_put(o->next);
    o->next = NULL;
  } else {
    shadow_t *s = sh_find(id, idlen);
    if (s != NULL)
      s->used = now_tick();
  }
}

/* One step object for session id (NULL: a batch item without a valid
 * session). */
static void step_item(json_t *obj, json_t *res, int status, int in_batch,
                      const char *id, size_t idlen) {
  stepreq_t r;
  outcome_t o;
  int ok = in_batch ? json_object_get(res, "error") == NULL : status < 400,
      replay;

  read_step(obj, in_batch, &r);
  if (in_batch) {
    id = r.sid;
    idlen = r.sidlen;
  }
  model_step(id != NULL ? sh_find(id, idlen) : NULL, id, idlen, &r, &o);
  if (ok && o.may_succeed && !o.replay)
    check_step_shape(res, o.next, &r);
  replay = o.replay;
  settle(&o, res, status, in_batch, id, idlen,
         in_batch ? "batch item" : "step");
  if (ok && !replay)
    sh_set_record(sh_find(id, idlen), R_STEP, r.tent, r.has_commit,
                  r.commit, req_pos, r.n, res);
  if (id != NULL && !in_batch)
    check_session(id, idlen, "after a step");
  outcome_free(&o);
}

/* ---- one request --------------------------------------------------------- */

static void check_view_answer(json_t *res, const char *id, size_t idlen) {
  shadow_t *m = sh_find(id, idlen);
  json_t *want;

  CHECK(m != NULL, "a view of a session the model does not have");
  want = sh_view(m);
  check_equal(res, want, "view");
  json_decref(want);
}

static void check_answer(const evd_request_t *req, const evd_reply_t *rep,
                         json_t *res) {
  const char *id;
  size_t idlen;
  evd_route_t route = parse_route(req->path, req->path_len, &id, &idlen);
  int st = rep->status;
  json_t *body = NULL;
  shadow_t *s;
  unsigned allowed = 0;

  /* Errors before the handler: unknown path, method, session id. */
  if (route == EVD_R_NONE)
    allowed = B(E_NOT_FOUND);
  else if (!(route_methods(route) & req->method))
    allowed = B(E_METHOD_NOT_ALLOWED);
  else if (id != NULL && !id_valid(id, idlen))
    allowed = B(E_INVALID_SESSION_ID);
  if (allowed != 0) {
    CHECK(st >= 400, "status %d where %s is due", st, code_names(allowed));
    CHECK(allowed & B(check_error(json_object_get(res, "error"), st, 0)),
          "refused with another code than %s", code_names(allowed));
    return;
  }
  s = id != NULL ? sh_find(id, idlen) : NULL;
  switch (route) {
  case EVD_R_HEALTHZ:
    CHECK(st == 200 && json_object_size(res) == 1 &&
              json_is_string(json_object_get(res, "status")) &&
              strcmp(json_string_value(json_object_get(res, "status")),
                     "ok") == 0,
          "healthz answer");
    return;
  case EVD_R_METRICS:
    return; /* checked by the caller */
  case EVD_R_SESSION:
    if (req->method == EVD_M_GET || req->method == EVD_M_HEAD) {
      if (s == NULL) {
        CHECK(st == 404 && check_error(json_object_get(res, "error"), st,
                                       0) == E_UNKNOWN_SESSION,
              "GET of an unknown session");
        return;
      }
      CHECK(st == 200, "GET of a session answered %d", st);
      s->used = now_tick();
      check_view_answer(res, id, idlen);
    } else if (req->method == EVD_M_DELETE) {
      if (s == NULL) {
        CHECK(st == 404 && check_error(json_object_get(res, "error"), st,
                                       0) == E_UNKNOWN_SESSION,
              "DELETE of an unknown session");
        return;
      }
      CHECK(st == 204, "DELETE of a session answered %d", st);
      sh_remove(s);
    } else { /* PUT */
      evd_session_config_t c;
      static const char *const fields[] = {"budget", "sinks", "lookahead",
                                           "page_size", NULL};
      int bad = parse_body(req, 1, &body);
      unsigned e = bad ? B(E_INVALID_JSON) : 0;
      if (!bad) {
        if (body != NULL && !only_fields(body, fields))
          e |= B(E_INVALID_FIELD);
        e |= read_config(body, &c);
      }
      if (e == 0 && s != NULL &&
          (c.budget != s->budget || c.sinks != s->sinks ||
           c.lookahead != s->look || c.page_size != s->page))
        e = B(E_SESSION_EXISTS);
      if (e == 0 && s == NULL && sh_count >= cfg.max_sessions)
        e = B(E_SESSION_LIMIT);
      if (st >= 400) {
        int k = check_error(json_object_get(res, "error"), st, 0);
        CHECK(e & B(k), "PUT refused with %s; the conditions of %s hold",
              codes[k].code, code_names(e));
        break;
      }
      CHECK(e == 0, "PUT answered %d; the conditions of %s hold", st,
            code_names(e));
      CHECK(st == (s == NULL ? 201 : 200), "PUT answered %d, the session "
            "existed: %d", st, s != NULL);
      if (s == NULL) {
        s = sh_new(id, idlen, &c);
        sh_insert(s);
      }
      s->used = now_tick();
      check_view_answer(res, id, idlen);
    }
    break;
  case EVD_R_STEP: {
    int bad = parse_body(req, 0, &body);
    if (bad) {
      CHECK(st >= 400 && check_error(json_object_get(res, "error"), st, 0) ==
                             E_INVALID_JSON,
            "a step body that is not a JSON object answered %d", st);
      break;
    }
    if (st >= 400)
      CHECK(json_object_size(res) == 1, "error body has extra fields");
    step_item(body, res, st, 0, id, idlen);
    break;
  }
  case EVD_R_COMMIT:
  case EVD_R_TRUNCATE: {
    int op = route == EVD_R_COMMIT ? R_COMMIT : R_TRUNCATE;
    int bad = parse_body(req, 0, &body);
    uint32_t arg = 0;
    outcome_t o;
    model_one_position(s, id, idlen, op, body, bad, &o, &arg);
    if (st == 200 && o.may_succeed && !o.replay) {
      /* The shape, independent of the model. */
      const char *key;
      json_t *v;
      size_t i;
      uint32_t newest = u32_of(json_object_get(res, "newest"));
      json_object_foreach(res, key, v)
        CHECK(strcmp(key, op == R_COMMIT ? "victims" : "removed") == 0 ||
                  (op == R_COMMIT && strcmp(key, "dropped") == 0) ||
                  strcmp(key, "size") == 0 || strcmp(key, "newest") == 0 ||
                  ((strcmp(key, "pages_new") == 0 ||
                    strcmp(key, "pages_freed") == 0 ||
                    strcmp(key, "pages_transient") == 0) && s->page > 0),
              "%s answer has field %s", route_names[route], key);
      if (op == R_COMMIT) {
        check_u32_array(json_object_get(res, "victims"), 1, "victims");
        check_u32_array(json_object_get(res, "dropped"), 1, "dropped");
        json_array_foreach(json_object_get(res, "dropped"), i, v)
          CHECK(u32_of(v) > arg, "dropped %u not above the commit %u",
                u32_of(v), arg);
        CHECK(newest <= arg || newest == s->committed,
              "commit %u leaves newest %u", arg, newest);
      } else {
        check_u32_array(json_object_get(res, "removed"), 1, "removed");
        json_array_foreach(json_object_get(res, "removed"), i, v)
          CHECK(u32_of(v) >= arg, "removed %u below from %u", u32_of(v),
                arg);
        CHECK(arg > s->newest ? newest == s->newest : newest == arg - 1,
              "truncate from %u at newest %u leaves newest %u", arg,
              s->newest, newest);
      }
    }
    settle(&o, res, st, 0, id, idlen, route_names[route]);
    if (st == 200 && !o.replay)
      sh_set_record(sh_find(id, idlen), op, 0, 0, arg, NULL, 0, res);
    outcome_free(&o);
    break;
  }
  case EVD_R_EVICT: {
    static const char *const fields[] = {"budget", NULL};
    int bad = parse_body(req, 1, &body);
    unsigned e = bad ? B(E_INVALID_JSON) : 0;
    uint32_t limit = s != NULL ? s->budget : 0;
    json_t *v = body != NULL ? json_object_get(body, "budget") : NULL;
    outcome_t o;
    memset(&o, 0, sizeof o);
    o.status = 200;
    if (s == NULL)
      e |= B(E_UNKNOWN_SESSION);
    if (body != NULL && !only_fields(body, fields))
      e |= B(E_INVALID_FIELD);
    if (v != NULL && !is_int(v))
      e |= B(E_INVALID_FIELD);
    else if (v != NULL && !int_in(v, 1, 4294967294LL, &limit))
      e |= B(E_INVALID_BUDGET);
    if (e == 0) { /* both may hold; the spec orders neither */
      if (sh_drafts(s) > 0)
        e |= B(E_TENTATIVE_PENDING);
      if (limit <= s->sinks)
        e |= B(E_INVALID_BUDGET);
    }
    o.allowed = e;
    if (e == 0) {
      json_t *victims = json_array();
      o.may_succeed = 1;
      o.next = sh_copy(s, id, idlen, 1);
      sh_evict_to(o.next, limit, victims);
      o.expect = json_object();
      json_object_set_new(o.expect, "victims", victims);
      json_object_set_new(o.expect, "size", json_integer(o.next->n));
      add_pages(o.expect, s, o.next, NULL, 0);
      CHECK(st != 200 ||
                u32_of(json_object_get(res, "size")) <= limit,
            "evict to %u leaves %u", limit,
            u32_of(json_object_get(res, "size")));
    }
    settle(&o, res, st, 0, id, idlen, "evict");
    outcome_free(&o);
    break;
  }
  case EVD_R_FORK: {
    static const char *const fields[] = {"into", NULL};
    int bad = parse_body(req, 0, &body);
    unsigned e = bad ? B(E_INVALID_JSON) : 0;
    json_t *v = body != NULL ? json_object_get(body, "into") : NULL;
    const char *into = NULL;
    size_t intolen = 0;
    shadow_t *child = NULL;
    if (s == NULL)
      e |= B(E_UNKNOWN_SESSION);
    if (!bad && !only_fields(body, fields))
      e |= B(E_INVALID_FIELD);
    if (!bad && !json_is_string(v))
      e |= B(E_INVALID_FIELD);
    else if (!bad && !id_valid(json_string_value(v), json_string_length(v)))
      e |= B(E_INVALID_SESSION_ID);
    else if (!bad) {
      into = json_string_value(v);
      intolen = json_string_length(v);
      child = sh_find(into, intolen);
      if (intolen == idlen && memcmp(into, id, idlen) == 0)
        e |= B(E_INVALID_FIELD); /* into itself */
    }
    if (e == 0 && child != NULL && !sh_same_state(child, s))
      e |= B(E_SESSION_EXISTS);
    if (e == 0 && child == NULL && sh_count >= cfg.max_sessions)
      e |= B(E_SESSION_LIMIT);
    if (st >= 400) {
      int k = check_error(json_object_get(res, "error"), st, 0);
      CHECK(e & B(k), "fork refused with %s; the conditions of %s hold",
            codes[k].code, code_names(e));
      if (into != NULL)
        check_session(into, intolen, "after a refused fork");
      break;
    }
    CHECK(e == 0, "fork answered %d; the conditions of %s hold", st,
          code_names(e));
    CHECK(st == (child == NULL ? 201 : 200),
          "fork answered %d, the child existed: %d", st, child != NULL);
    s->used = now_tick();
    if (child == NULL) {
      child = sh_copy(s, into, intolen, 0); /* no replay record */
      sh_insert(child);
    }
    child->used = now_tick();
    check_view_answer(res, into, intolen);
    check_session(into, intolen, "after a fork");
    break;
  }
  case EVD_R_BATCH: {
    static const char *const fields[] = {"steps", NULL};
    int bad = parse_body(req, 0, &body);
    unsigned e = bad ? B(E_INVALID_JSON) : 0;
    json_t *items = body != NULL ? json_object_get(body, "steps") : NULL;
    json_t *results, *item;
    size_t i;
    if (!bad && !only_fields(body, fields))
      e |= B(E_INVALID_FIELD);
    if (!bad && !json_is_array(items))
      e |= B(E_INVALID_FIELD);
    else if (!bad && json_array_size(items) > cfg.max_batch)
      e |= B(E_TOO_MANY_STEPS);
    if (st >= 400) {
      int k = check_error(json_object_get(res, "error"), st, 0);
      CHECK(e & B(k), "batch refused with %s; the conditions of %s hold",
            codes[k].code, code_names(e));
      break;
    }
    CHECK(e == 0 && st == 200, "batch answered %d; the conditions of %s "
          "hold", st, code_names(e));
    results = json_object_get(res, "results");
    CHECK(json_object_size(res) == 1 && json_is_array(results),
          "batch answer without results");
    CHECK(json_array_size(results) == json_array_size(items),
          "%zu results for %zu items", json_array_size(results),
          json_array_size(items));
    /* Items run in order, each on the state the earlier ones left. */
    json_array_foreach(items, i, item) {
      json_t *r = json_array_get(results, i);
      json_t *err = json_object_get(r, "error");
      CHECK(json_is_object(r), "result %zu is not an object", i);
      step_item(item, r, err != NULL ? 0 : 200, 1, NULL, 0);
    }
    /* Then every session named agrees with the model. */
    json_array_foreach(items, i, item) {
      json_t *sid = json_object_get(item, "session");
      if (json_is_string(sid))
        check_session(json_string_value(sid), json_string_length(sid),
                      "after a batch");
    }
    break;
  }
  default:
    fail("an answer on route %d", (int)route);
  }
  json_decref(body);
}

/* The status, headers and body of any answer, then the model's checks. */
static void check_reply(const evd_request_t *req, const evd_reply_t *rep) {
  const char *id;
  size_t idlen;
  evd_route_t route = parse_route(req->path, req->path_len, &id, &idlen);
  int st = rep->status;
  json_error_t jerr;
  json_t *res;

  CHECK(rep->route == route, "route %d, the path says %d", (int)rep->route,
        (int)route);
  count_status(route, st);
  CHECK(route_status_ok(route, st), "status %d on route %s", st,
        route_names[route]);
  CHECK(st != 201 || (req->method == EVD_M_PUT && route == EVD_R_SESSION) ||
            route == EVD_R_FORK,
        "201 for something else than PUT /session/{id} or fork");
  if (st == 405) {
    CHECK(rep->allow != NULL && route_allow(route) != NULL &&
              strcmp(rep->allow, route_allow(route)) == 0,
          "405 with Allow [%s]", rep->allow != NULL ? rep->allow : "(none)");
  } else {
    CHECK(rep->allow == NULL, "Allow header with status %d", st);
  }
  if (st == 204) {
    CHECK(req->method == EVD_M_DELETE && route == EVD_R_SESSION,
          "204 for something else than DELETE");
    CHECK(out.len == 0, "204 with a body");
    check_answer(req, rep, NULL);
  } else if (rep->content_type != NULL) {
    static const char *const counters[] = {
        "evictd_forks_total", "evictd_commits_total",
        "evictd_dropped_positions_total", "evictd_truncates_total",
        "evictd_removed_positions_total"};
    size_t i;
    CHECK(route == EVD_R_METRICS && st == 200,
          "non-JSON answer outside /metrics");
    CHECK(out.len > 0 && out.data[out.len - 1] == '\n',
          "metrics text does not end with a newline");
    for (i = 0; i < sizeof counters / sizeof counters[0]; i++)
      CHECK(memmem(out.data, out.len, counters[i], strlen(counters[i])) !=
                NULL,
            "metrics without %s", counters[i]);
  } else {
    CHECK(route != EVD_R_METRICS || st != 200, "metrics answered JSON");
    res = json_loadb(out.data, out.len, JSON_REJECT_DUPLICATES, &jerr);
    CHECK(res != NULL, "answer is not JSON: %s", jerr.text);
    CHECK(json_is_object(res), "answer is not an object");
    if (st >= 400)
      CHECK(json_object_size(res) == 1, "error body has extra fields");
    check_answer(req, rep, res);
    json_decref(res);
  }
  /* The sessions the request addressed agree with the model, refused or
   * not, and so does the count. */
  check_count("after the request");
  if (id != NULL && id_valid(id, idlen))
    check_session(id, idlen, "after the request");
}

/* Runs the reaper after advancing the clock by `ms`, and checks that it
 * removed exactly the sessions the model has idle for longer than the
 * TTL. */
static void advance_and_reap(uint64_t ms) {
  evd_table_t *t = evd_api_table(api);
  uint32_t now, ttl = cfg.idle_ttl * 10u, expect = 0, count, n, b;
  shadow_t *s, *next;

  clock_ms += ms;
  evd_api_set_clock(api, clock_ms);
  now = now_tick();
  count = evd_table_count(t);
  for (b = 0; b < SH_BUCKETS; b++)
    for (s = sh_tab[b]; s != NULL; s = s->hnext)
      expect += now - s->used > ttl;
  n = evd_api_reap(api);
  CHECK(n == expect, "reaped %u, the model says %u", n, expect);
#ifdef EVD_FUZZ_DIFF
  ref_evd_api_set_clock(twin, clock_ms);
  CHECK(ref_evd_api_reap(twin) == n, "the twin reaped another number");
#endif
  CHECK(evd_table_count(t) == count - n, "count after reaping");
  for (b = 0; b < SH_BUCKETS; b++)
    for (s = sh_tab[b]; s != NULL; s = next) {
      next = s->hnext;
      if (now - s->used > ttl) {
        CHECK(session_of(s->id, s->idlen) == NULL,
              "session %.*s idle for %u ticks survived", (int)s->idlen, s->id,
              now - s->used);
        sh_remove(s);
      } else {
        CHECK(session_of(s->id, s->idlen) != NULL,
              "session %.*s idle for %u ticks was reaped", (int)s->idlen,
              s->id, now - s->used);
      }
    }
  check_count("after reaping");
}

static void setup(void) {
  evd_config_defaults(&cfg);
  cfg.budget = 4;
  cfg.sinks = 0;
  cfg.max_budget = 4096;
  cfg.max_lookahead = 64;
  cfg.max_sessions = 1000;
  cfg.max_positions = 1024;
  cfg.max_batch = 64;
  cfg.idle_ttl = 5;
  if (evd_api_new(&api, &cfg) != 0)
    abort();
  evd_api_set_clock(api, clock_ms);
  evd_buf_init(&out);
#ifdef EVD_FUZZ_DIFF
  if (ref_evd_api_new(&twin, &cfg) != 0)
    abort();
  ref_evd_api_set_clock(twin, clock_ms);
  evd_buf_init(&twin_out);
#endif
}

static void teardown(void) {
  uint32_t b;

  evd_api_free(api);
  evd_buf_free(&out);
  api = NULL;
  for (b = 0; b < SH_BUCKETS; b++)
    while (sh_tab[b] != NULL)
      sh_remove(sh_tab[b]);
#ifdef EVD_FUZZ_DIFF
  ref_evd_api_free(twin);
  evd_buf_free(&twin_out);
#endif
}

static void run_record(const uint8_t *p, size_t n) {
  static const int methods[6] = {EVD_M_GET,  EVD_M_HEAD,   EVD_M_PUT,
                                 EVD_M_POST, EVD_M_DELETE, EVD_M_OTHER};
  const uint8_t *nl;
  size_t plen;
  char *path, *body = NULL;
  evd_request_t req = {0};
  evd_reply_t rep;

  if (n == 0)
    return;
  switch (p[0]) {
  case 'G': req.method = EVD_M_GET; break;
  case 'H': req.method = EVD_M_HEAD; break;
  case 'U': req.method = EVD_M_PUT; break;
  case 'P': req.method = EVD_M_POST; break;
  case 'D': req.method = EVD_M_DELETE; break;
  case 'X': req.method = EVD_M_OTHER; break;
  case 'T': {
    uint64_t ms = 0;
    size_t i;
    for (i = 1; i < n && i <= 9 && p[i] >= '0' && p[i] <= '9'; i++)
      ms = ms * 10 + (uint64_t)(p[i] - '0');
    cur_method = 0;
    cur_path = (const char *)p;
    cur_path_len = n < 10 ? n : 10;
    cur_body = NULL;
    cur_body_len = 0;
    advance_and_reap(ms);
    return;
  }
  default: req.method = methods[p[0] % 6]; break;
  }
  p++;
  n--;
  nl = memchr(p, '\n', n);
  plen = nl != NULL ? (size_t)(nl - p) : n;
  if (plen > MAX_PATH)
    plen = MAX_PATH;
  /* Exact-size copies: ASan catches any read past path_len or body_len. */
  path = malloc(plen ? plen : 1);
  if (path == NULL)
    abort();
  memcpy(path, p, plen);
  req.path = path;
  req.path_len = plen;
  if (nl != NULL && (size_t)(nl - p) + 1 < n) {
    req.body_len = n - (size_t)(nl - p) - 1;
    body = malloc(req.body_len);
    if (body == NULL)
      abort();
    memcpy(body, nl + 1, req.body_len);
    req.body = body;
  }
  cur_method = req.method;
  cur_path = path;
  cur_path_len = plen;
  cur_body = body;
  cur_body_len = req.body_len;
  evd_api_handle(api, &req, &out, &rep);
#ifdef EVD_FUZZ_DIFF
  twin_handle(&req, &rep);
#endif
  check_reply(&req, &rep);
  if (++calls % 64 == 0)
    check_table();
  free(body);
  free(path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  const char *stats = getenv("EVD_FUZZ_STATS");

  (void)argc;
  (void)argv;
  setup();
  if (stats != NULL && stats[0] == '1')
    atexit(print_stats);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *fresh = getenv("EVD_FUZZ_FRESH");
  size_t start = 0, i, records = 0;

  if (fresh != NULL && fresh[0] == '1') {
    teardown();
    setup();
  }
  for (i = 0; i <= size && records < MAX_RECORDS; i++) {
    if (i == size || data[i] == 0xff) {
      run_record(data + start, i - start);
      start = i + 1;
      records++;
    }
  }
  return 0;
}

#ifdef EVD_FUZZ_STANDALONE
/* Runs each file named on the command line as one input, in order, and
 * goes on after a violation. Exits 1 if there was any. */
int main(int argc, char **argv) {
  int i;
  volatile int failed = 0;

  LLVMFuzzerInitialize(&argc, &argv);
  for (i = 1; i < argc; i++) {
    FILE *f = fopen(argv[i], "rb");
    uint8_t *buf;
    long len;
    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0) {
      perror(argv[i]);
      return 1;
    }
    rewind(f);
    buf = malloc((size_t)len + 1);
    if (buf == NULL || fread(buf, 1, (size_t)len, f) != (size_t)len) {
      perror(argv[i]);
      return 1;
    }
    fclose(f);
    if (setjmp(next_input) == 0) {
      jump_ok = 1;
      LLVMFuzzerTestOneInput(buf, (size_t)len);
    } else {
      failed++;
      fprintf(stderr, "*** in %s\n", argv[i]);
      /* The model may be half-updated: start again from nothing. */
      teardown();
      setup();
    }
    jump_ok = 0;
    free(buf);
  }
  teardown();
  printf("ran %d inputs, %d violated an invariant\n", argc - 1, failed);
  return failed ? 1 : 0;
}
#endif
