/* libFuzzer harness for the API without sockets: decodes each input into
 * requests, hands them to ONE long-lived evd_api_t (state accumulates across
 * inputs, as in a running daemon) and checks the answers' invariants.
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
 * Invariants checked after each request (abort() with a report on stderr):
 * the status is one the spec documents for that route and method; a 204 has
 * an empty body; every other answer but /metrics is a JSON object (jansson,
 * duplicate keys refused, so also valid UTF-8); an error is exactly
 * {"error":{"code","message"}} (plus "newest" for stale_position) with a code
 * that belongs to its status; a refused request changed neither the session
 * count nor the addressed session; a 405 names the route's methods in Allow;
 * step answers have size <= the session budget, strictly ascending victims
 * below the newest position, one slot per requested position, each slot <=
 * budget, "newest" equal to the last requested position, and a replayed
 * answer equal to the original one; evict answers have ascending victims and
 * size <= the budget used; after a step or an evict the victims and the
 * positions left are exactly the policy's (the oldest unpinned go first);
 * views agree with the table; the reaper removes
 * exactly the sessions idle for longer than the TTL; the table never holds
 * more than max_sessions, and its last-use list is ordered. Built with
 * -DEVD_FUZZ_DIFF (as fuzz.mk does when server/fastpath.c exists), every
 * request also goes to a twin API without the fast path for step and batch
 * bodies, and the two answers must be identical.
 *
 * EVD_FUZZ_FRESH=1 in the environment makes a new API state for every
 * input, to reproduce a failure from one file alone. Built with
 * -DEVD_FUZZ_STANDALONE it has its own main() that runs the files named on
 * the command line (for coverage reports and for debugging under gcc).
 * At most 64 records of an input are run, so that no input takes long. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evictd/api.h"
#include "evictd/error.h"
#include "evictd/session.h"

enum { MAX_PATH = 512, MAX_RECORDS = 64 };

static evd_api_t *api;
static evd_config_t cfg;
static evd_buf_t out;
static uint64_t clock_ms = 1000000;
static json_t *last_step; /* session id -> its last applied step answer */
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

static void setup(void) {
  evd_config_defaults(&cfg);
  cfg.budget = 4;
  cfg.sinks = 0;
  cfg.max_budget = 4096;
  cfg.max_sessions = 1000;
  cfg.max_positions = 1024;
  cfg.max_batch = 64;
  cfg.idle_ttl = 5;
  if (evd_api_new(&api, &cfg) != 0)
    abort();
  evd_api_set_clock(api, clock_ms);
  evd_buf_init(&out);
  last_step = json_object();
#ifdef EVD_FUZZ_DIFF
  if (ref_evd_api_new(&twin, &cfg) != 0)
    abort();
  ref_evd_api_set_clock(twin, clock_ms);
  evd_buf_init(&twin_out);
#endif
}

static void teardown(void) {
  evd_api_free(api);
  evd_buf_free(&out);
  json_decref(last_step);
  api = NULL;
#ifdef EVD_FUZZ_DIFF
  ref_evd_api_free(twin);
  evd_buf_free(&twin_out);
#endif
}

/* ---- the spec as tables ------------------------------------------------- */

static int code_status(const char *code) {
  static const struct {
    const char *code;
    int status;
  } codes[] = {
      {"invalid_json", 400},       {"invalid_field", 400},
      {"invalid_session_id", 400}, {"invalid_budget", 400},
      {"invalid_sinks", 400},      {"invalid_position", 400},
      {"too_many_positions", 400}, {"too_many_steps", 400},
      {"unknown_session", 404},    {"not_found", 404},
      {"method_not_allowed", 405}, {"session_exists", 409},
      {"stale_position", 409},     {"body_too_large", 413},
      {"session_limit", 503},      {"out_of_memory", 503}};
  size_t i;

  for (i = 0; i < sizeof codes / sizeof codes[0]; i++)
    if (strcmp(codes[i].code, code) == 0)
      return codes[i].status;
  return -1;
}

static const char *route_allow(evd_route_t r) {
  switch (r) {
  case EVD_R_HEALTHZ:
  case EVD_R_METRICS: return "GET, HEAD";
  case EVD_R_SESSION: return "GET, HEAD, PUT, DELETE";
  case EVD_R_STEP:
  case EVD_R_EVICT:
  case EVD_R_BATCH: return "POST";
  default: return NULL;
  }
}

/* ---- small JSON helpers ------------------------------------------------- */

static int is_u32(json_t *v) {
  return json_is_integer(v) && json_integer_value(v) >= 0 &&
         json_integer_value(v) <= (json_int_t)UINT32_MAX;
}

/* A number of a request as uint32 (validated by the API when it answered
 * 200); a body read with integers as reals holds them as reals. */
static uint32_t u32_of(json_t *v) {
  return json_is_real(v) ? (uint32_t)json_real_value(v)
                         : (uint32_t)json_integer_value(v);
}

/* A request body as the API reads it: integers beyond 64 bits are valid
 * JSON, which the API reads again with every integer as a real. */
static json_t *parse_request(const evd_request_t *req) {
  json_error_t err;
  json_t *j;

  if (req->body_len == 0)
    return NULL;
  j = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &err);
  if (j == NULL && json_error_code(&err) == json_error_numeric_overflow)
    j = json_loadb(req->body, req->body_len,
                   JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, NULL);
  return j;
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

/* Checks an error object; in a batch it also carries its status. */
static void check_error(json_t *e, int status, int in_batch) {
  json_t *code = json_object_get(e, "code"), *v;
  const char *key;

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
  CHECK(code_status(json_string_value(code)) == status,
        "code %s with status %d", json_string_value(code), status);
  json_object_foreach(e, key, v) {
    if (strcmp(key, "code") == 0 || strcmp(key, "message") == 0 ||
        (in_batch && strcmp(key, "status") == 0))
      continue;
    CHECK(strcmp(key, "newest") == 0 &&
              strcmp(json_string_value(code), "stale_position") == 0,
          "error %s has field %s", json_string_value(code), key);
  }
  if (strcmp(json_string_value(code), "stale_position") == 0)
    CHECK(is_u32(json_object_get(e, "newest")), "stale without newest");
}

/* ---- answers of successful requests ------------------------------------- */

static evd_session_t *session_of(const char *id, size_t len) {
  return evd_table_find(evd_api_table(api), id, len);
}

/* The positions a step object asks for, or 0 if it names none validly. */
static size_t requested(json_t *obj, uint32_t *last) {
  json_t *pos = json_object_get(obj, "pos"), *list;

  if (pos != NULL) {
    *last = u32_of(pos);
    return 1;
  }
  list = json_object_get(obj, "positions");
  if (!json_is_array(list) || json_array_size(list) == 0)
    return 0;
  *last = u32_of(json_array_get(list, json_array_size(list) - 1));
  return json_array_size(list);
}

/* A step result for session id: `req` is the step object asked for. */
static void check_step_result(json_t *res, json_t *req, const char *id,
                              size_t idlen) {
  evd_session_t *s = session_of(id, idlen);
  json_t *replayed = json_object_get(res, "replayed"), *v, *prev;
  const char *key;
  uint32_t budget, newest, last = 0;
  size_t n = requested(req, &last), i;
  char key_id[EVD_SESSION_ID_MAX + 1];

  CHECK(s != NULL, "step answered 200 but session %.*s does not exist",
        (int)idlen, id);
  budget = evd_session_window(s)->budget;
  json_object_foreach(res, key, v) {
    CHECK(strcmp(key, "victims") == 0 || strcmp(key, "slots") == 0 ||
              strcmp(key, "size") == 0 || strcmp(key, "newest") == 0 ||
              (strcmp(key, "replayed") == 0 && json_is_true(v)),
          "step result has field %s", key);
  }
  check_u32_array(json_object_get(res, "victims"), 1, "victims");
  check_u32_array(json_object_get(res, "slots"), 0, "slots");
  CHECK(is_u32(json_object_get(res, "size")), "size missing");
  CHECK(is_u32(json_object_get(res, "newest")), "newest missing");
  newest = u32_of(json_object_get(res, "newest"));
  CHECK(u32_of(json_object_get(res, "size")) >= 1 &&
            u32_of(json_object_get(res, "size")) <= budget,
        "size %u outside 1..budget %u", u32_of(json_object_get(res, "size")),
        budget);
  CHECK(n > 0 && json_array_size(json_object_get(res, "slots")) == n,
        "%zu slots for %zu positions",
        json_array_size(json_object_get(res, "slots")), n);
  CHECK(newest == last, "newest %u, last position asked %u", newest, last);
  json_array_foreach(json_object_get(res, "slots"), i, v)
    CHECK(u32_of(v) <= budget, "slot %u above budget %u", u32_of(v), budget);
  json_array_foreach(json_object_get(res, "victims"), i, v)
    CHECK(u32_of(v) < newest, "victim %u not below newest %u", u32_of(v),
          newest);
  /* Retries get the original answer; others become the one to replay. */
  memcpy(key_id, id, idlen);
  key_id[idlen] = '\0';
  prev = json_object_get(last_step, key_id);
  if (replayed != NULL) {
    json_t *copy = json_deep_copy(res);
    json_object_del(copy, "replayed");
    CHECK(prev != NULL, "replayed answer but no step was applied before");
    CHECK(json_equal(copy, prev), "replayed answer differs from original %s",
          json_dumps(prev, JSON_COMPACT));
    json_decref(copy);
  } else {
    if (prev != NULL)
      CHECK(newest > u32_of(json_object_get(prev, "newest")),
            "newest went from %u to %u",
            u32_of(json_object_get(prev, "newest")), newest);
    json_object_set_new(last_step, key_id, json_deep_copy(res));
  }
}

static void check_view(json_t *res, const char *id, size_t idlen) {
  evd_session_t *s = session_of(id, idlen);
  const evd_window_t *w;
  json_t *kept = json_object_get(res, "kept"), *slots, *v;
  uint32_t size, budget, sinks, seen[64] = {0};
  size_t i;

  CHECK(s != NULL, "view of a session not in the table");
  w = evd_session_window(s);
  v = json_object_get(res, "id");
  CHECK(json_is_string(v) && json_string_length(v) == idlen &&
            memcmp(json_string_value(v), id, idlen) == 0,
        "view of another id");
  CHECK(json_object_size(res) == 7, "view has %zu fields",
        json_object_size(res));
  budget = u32_of(json_object_get(res, "budget"));
  sinks = u32_of(json_object_get(res, "sinks"));
  size = u32_of(json_object_get(res, "size"));
  CHECK(budget == w->budget && sinks == w->sinks && size == w->size &&
            budget >= 1 && budget <= cfg.max_budget && sinks < budget,
        "view config/size disagree with the table");
  CHECK(size >= 1 && size <= budget, "view size %u, budget %u", size, budget);
  check_u32_array(kept, 1, "kept");
  slots = json_object_get(res, "slots");
  check_u32_array(slots, 0, "view slots");
  CHECK(json_array_size(kept) == size && json_array_size(slots) == size,
        "kept/slots length differ from size");
  CHECK(u32_of(json_object_get(res, "newest")) ==
            u32_of(json_array_get(kept, size - 1)) &&
            u32_of(json_object_get(res, "newest")) == w->newest,
        "newest is not the last kept position");
  json_array_foreach(slots, i, v) {
    uint32_t sl = u32_of(v);
    CHECK(sl <= budget, "view slot %u above budget", sl);
    CHECK(i >= sinks || sl == i, "pinned position %zu in slot %u", i, sl);
    if (budget < 64 * 32) { /* distinct slots */
      CHECK(!(seen[sl / 32] & (1u << (sl % 32))), "slot %u used twice", sl);
      seen[sl / 32] |= 1u << (sl % 32);
    }
  }
}

/* ---- one request --------------------------------------------------------- */

/* What a request may change: the session count and the addressed session,
 * with every position it holds. */
typedef struct {
  int exists;
  uint32_t count, size, newest, budget, sinks, used;
  uint32_t kept[4096 + 1]; /* max_budget + 1 */
} snap_t;

static snap_t before, after;

static void snapshot(snap_t *sn, const char *id, size_t idlen) {
  evd_session_t *s = NULL;
  uint32_t i;

  sn->exists = 0;
  sn->size = sn->newest = sn->budget = sn->sinks = sn->used = 0;
  sn->count = evd_table_count(evd_api_table(api));
  if (id != NULL && evd_session_id_valid(id, idlen))
    s = session_of(id, idlen);
  if (s != NULL) {
    const evd_window_t *w = evd_session_window(s);
    CHECK(w->size <= w->budget + 1 && w->budget <= cfg.max_budget,
          "window of %u positions, budget %u", w->size, w->budget);
    sn->exists = 1;
    sn->size = w->size;
    sn->newest = w->newest;
    sn->budget = w->budget;
    sn->sinks = w->sinks;
    sn->used = s->used;
    for (i = 0; i < w->size; i++)
      sn->kept[i] = evd_window_at(w, i, NULL);
  }
}

static int same_state(const snap_t *a, const snap_t *b) {
  return a->exists == b->exists && a->count == b->count &&
         a->size == b->size && a->newest == b->newest &&
         a->budget == b->budget && a->sinks == b->sinks &&
         a->used == b->used &&
         memcmp(a->kept, b->kept, a->size * sizeof(uint32_t)) == 0;
}

/* The policy, restated: after adding positions to `held` (ascending), the
 * oldest unpinned ones go until `budget` remain; pinned are the first
 * `sinks` ever held, which are always the smallest. Checks the answer's
 * victims and the window left behind against that. */
static void check_policy(const uint32_t *held, uint32_t nheld,
                         const uint32_t *add, size_t nadd, uint32_t budget,
                         uint32_t sinks, json_t *victims) {
  static uint32_t all[4096 + 1 + 1024];
  size_t n = 0, i, pinned, excess;

  CHECK(nheld + nadd <= sizeof all / sizeof all[0], "model overflow");
  memcpy(all, held, nheld * sizeof(uint32_t));
  n = nheld;
  for (i = 0; i < nadd; i++)
    all[n++] = (uint32_t)add[i];
  pinned = n < sinks ? n : sinks;
  excess = n > budget ? n - budget : 0;
  CHECK(json_array_size(victims) == excess, "%zu victims, the policy says %zu",
        json_array_size(victims), excess);
  for (i = 0; i < excess; i++)
    CHECK(u32_of(json_array_get(victims, i)) == all[pinned + i],
          "victim %zu is %u, the policy says %u", i,
          u32_of(json_array_get(victims, i)), all[pinned + i]);
  CHECK(after.size == n - excess, "window holds %u, the policy says %zu",
        after.size, n - excess);
  for (i = 0; i < after.size; i++) {
    uint32_t want = i < pinned ? all[i] : all[i + excess];
    CHECK(after.kept[i] == want, "kept[%zu] is %u, the policy says %u", i,
          after.kept[i], want);
  }
}

/* The positions of a validated step object. */
static size_t positions_of(json_t *obj, uint32_t *buf, size_t cap) {
  json_t *pos = json_object_get(obj, "pos"), *list, *v;
  size_t i;

  if (pos != NULL) {
    buf[0] = u32_of(pos);
    return 1;
  }
  list = json_object_get(obj, "positions");
  CHECK(json_array_size(list) <= cap, "too many positions accepted");
  json_array_foreach(list, i, v)
    buf[i] = u32_of(v);
  return json_array_size(list);
}

/* The session id in a /session/{id}... path, or NULL. */
static const char *path_id(const char *p, size_t n, size_t *len) {
  const char *slash;

  if (n < 9 || memcmp(p, "/session/", 9) != 0)
    return NULL;
  slash = memchr(p + 9, '/', n - 9);
  *len = slash != NULL ? (size_t)(slash - (p + 9)) : n - 9;
  return p + 9;
}

static void forget_missing_sessions(void) {
  const char *key;
  json_t *v;
  void *tmp;

  json_object_foreach_safe(last_step, tmp, key, v) {
    if (session_of(key, strlen(key)) == NULL)
      json_object_del(last_step, key);
  }
}

static void check_batch(json_t *res, const evd_request_t *req) {
  json_t *rq = parse_request(req);
  json_t *items = json_object_get(rq, "steps"), *results, *r;
  size_t i;

  CHECK(json_is_array(items), "batch 200 for a body without steps");
  results = json_object_get(res, "results");
  CHECK(json_object_size(res) == 1 && json_is_array(results),
        "batch answer without results");
  CHECK(json_array_size(results) == json_array_size(items),
        "%zu results for %zu items", json_array_size(results),
        json_array_size(items));
  json_array_foreach(results, i, r) {
    json_t *item = json_array_get(items, i), *e = json_object_get(r, "error");
    CHECK(json_is_object(r), "result %zu is not an object", i);
    if (e != NULL) {
      CHECK(json_object_size(r) == 1, "error result %zu has extra fields", i);
      check_error(e, 0, 1);
    } else {
      json_t *sid = json_object_get(item, "session");
      CHECK(json_is_string(sid), "item %zu without session succeeded", i);
      check_step_result(r, item, json_string_value(sid),
                        json_string_length(sid));
    }
  }
  json_decref(rq);
}

static void check_answer(const evd_request_t *req, const evd_reply_t *rep) {
  size_t idlen = 0;
  const char *id = path_id(req->path, req->path_len, &idlen);
  int st = rep->status;
  json_error_t jerr;
  json_t *res;

  CHECK(st == 200 || st == 201 || st == 204 || st == 400 || st == 404 ||
            st == 405 || st == 409 || st == 413 || st == 503,
        "undocumented status %d", st);
  CHECK(st != 201 || (req->method == EVD_M_PUT && rep->route == EVD_R_SESSION),
        "201 for something else than PUT /session/{id}");
  if (st == 405) {
    CHECK(rep->allow != NULL && route_allow(rep->route) != NULL &&
              strcmp(rep->allow, route_allow(rep->route)) == 0,
          "405 with Allow [%s]", rep->allow != NULL ? rep->allow : "(none)");
  } else {
    CHECK(rep->allow == NULL, "Allow header with status %d", st);
  }
  snapshot(&after, id, idlen);
  CHECK(after.count <= cfg.max_sessions, "%u sessions live", after.count);
  if (st == 204) {
    CHECK(req->method == EVD_M_DELETE && rep->route == EVD_R_SESSION,
          "204 for something else than DELETE");
    CHECK(out.len == 0, "204 with a body");
    CHECK(before.exists && !after.exists &&
              after.count == before.count - 1,
          "DELETE answered 204 but the session is still there");
    forget_missing_sessions();
    return;
  }
  if (rep->content_type != NULL) {
    CHECK(rep->route == EVD_R_METRICS && st == 200,
          "non-JSON answer outside /metrics");
    CHECK(out.len > 0 && out.data[out.len - 1] == '\n',
          "metrics text does not end with a newline");
    return;
  }
  res = json_loadb(out.data, out.len, JSON_REJECT_DUPLICATES, &jerr);
  CHECK(res != NULL, "answer is not JSON: %s", jerr.text);
  CHECK(json_is_object(res), "answer is not an object");
  if (st >= 400) {
    CHECK(json_object_size(res) == 1, "error body has extra fields");
    check_error(json_object_get(res, "error"), st, 0);
    if (rep->route == EVD_R_STEP &&
        json_object_get(json_object_get(res, "error"), "newest") != NULL)
      CHECK(u32_of(json_object_get(json_object_get(res, "error"), "newest")) ==
                before.newest,
            "stale_position names newest %u, the session holds %u",
            u32_of(json_object_get(json_object_get(res, "error"), "newest")),
            before.newest);
    /* A refused request changes nothing. */
    CHECK(after.count == before.count, "refused request changed the count "
          "from %u to %u", before.count, after.count);
    CHECK(same_state(&before, &after), "refused request changed the session");
    json_decref(res);
    return;
  }
  switch (rep->route) {
  case EVD_R_HEALTHZ:
    CHECK(json_object_size(res) == 1 &&
              json_is_string(json_object_get(res, "status")) &&
              strcmp(json_string_value(json_object_get(res, "status")),
                     "ok") == 0,
          "healthz answer");
    break;
  case EVD_R_SESSION:
    CHECK(req->method != EVD_M_DELETE, "DELETE answered %d", st);
    CHECK(st == 201 ? !before.exists && after.count == before.count + 1
                    : before.exists && after.count == before.count,
          "status %d but the session existed: %d", st, before.exists);
    check_view(res, id, idlen);
    if (st == 200)
      CHECK(before.size == after.size && before.newest == after.newest &&
                memcmp(before.kept, after.kept,
                       after.size * sizeof(uint32_t)) == 0,
            "a view or an identical PUT changed the window");
    break;
  case EVD_R_STEP: {
    json_t *rq = parse_request(req);
    CHECK(rq != NULL, "step 200 for a body that is not JSON");
    check_step_result(res, rq, id, idlen);
    if (json_object_get(res, "replayed") == NULL) {
      static uint32_t add[1024];
      static const uint32_t start[1] = {0}; /* a new session holds 0 */
      size_t nadd = positions_of(rq, add, 1024);
      CHECK(after.newest == u32_of(json_object_get(res, "newest")),
            "window newest %u, answer %u", after.newest,
            u32_of(json_object_get(res, "newest")));
      CHECK(!before.exists || add[0] > before.newest,
            "step of %u applied at newest %u", add[0], before.newest);
      check_policy(before.exists ? before.kept : start,
                   before.exists ? before.size : 1, add, nadd, after.budget,
                   after.sinks, json_object_get(res, "victims"));
    } else {
      CHECK(before.exists && before.size == after.size &&
                memcmp(before.kept, after.kept,
                       after.size * sizeof(uint32_t)) == 0,
            "a replayed step changed the window");
    }
    json_decref(rq);
    break;
  }
  case EVD_R_EVICT: {
    json_t *rq = parse_request(req);
    json_t *b = json_object_get(rq, "budget");
    uint32_t limit = b != NULL ? u32_of(b) : before.budget;
    CHECK(json_object_size(res) == 2, "evict answer has %zu fields",
          json_object_size(res));
    check_u32_array(json_object_get(res, "victims"), 1, "evict victims");
    CHECK(u32_of(json_object_get(res, "size")) == after.size &&
              after.size <= limit && after.size >= 1,
          "evict size %u, budget %u", after.size, limit);
    /* The evict budget replaces the session's for this once. */
    check_policy(before.kept, before.size, NULL, 0, limit, before.sinks,
                 json_object_get(res, "victims"));
    json_decref(rq);
    break;
  }
  case EVD_R_BATCH:
    check_batch(res, req);
    break;
  default:
    fail("200 on route %d", (int)rep->route);
  }
  json_decref(res);
}

/* Runs the reaper after advancing the clock by `ms`, and checks that it
 * removed exactly the sessions idle for longer than the TTL. */
static void advance_and_reap(uint64_t ms) {
  evd_table_t *t = evd_api_table(api);
  uint32_t now, ttl = cfg.idle_ttl * 10u, expect = 0, count, n;
  evd_session_t *s;

  clock_ms += ms;
  evd_api_set_clock(api, clock_ms);
  now = (uint32_t)(clock_ms / 100);
  count = evd_table_count(t);
  for (s = evd_table_oldest(t); s != NULL && now - s->used > ttl;
       s = evd_table_younger(s))
    expect++;
  n = evd_api_reap(api);
  CHECK(n == expect, "reaped %u, expected %u", n, expect);
#ifdef EVD_FUZZ_DIFF
  ref_evd_api_set_clock(twin, clock_ms);
  CHECK(ref_evd_api_reap(twin) == n, "the twin reaped another number");
#endif
  CHECK(evd_table_count(t) == count - n, "count after reaping");
  s = evd_table_oldest(t);
  CHECK(s == NULL || now - s->used <= ttl, "an expired session survived");
  forget_missing_sessions();
}

/* Walks the last-use list: as long as the table and ordered by use. */
static void check_table(void) {
  evd_table_t *t = evd_api_table(api);
  evd_session_t *s, *prev = NULL;
  uint32_t n = 0;

  for (s = evd_table_oldest(t); s != NULL; prev = s, s = evd_table_younger(s)) {
    CHECK(prev == NULL || s->used >= prev->used, "last-use list out of order");
    CHECK(evd_table_find(t, s->id, s->idlen) == s, "listed session not found");
    CHECK(++n <= evd_table_count(t), "last-use list longer than the count");
  }
  CHECK(n == evd_table_count(t), "last-use list holds %u of %u", n,
        evd_table_count(t));
}

static void run_record(const uint8_t *p, size_t n) {
  static const int methods[6] = {EVD_M_GET,  EVD_M_HEAD,   EVD_M_PUT,
                                 EVD_M_POST, EVD_M_DELETE, EVD_M_OTHER};
  const uint8_t *nl;
  size_t plen;
  char *path, *body = NULL;
  evd_request_t req = {0};
  evd_reply_t rep;
  size_t idlen = 0;
  const char *id;

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
  id = path_id(path, plen, &idlen);
  snapshot(&before, id, idlen);
  evd_api_handle(api, &req, &out, &rep);
#ifdef EVD_FUZZ_DIFF
  twin_handle(&req, &rep);
#endif
  check_answer(&req, &rep);
  if (++calls % 64 == 0)
    check_table();
  free(body);
  free(path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  setup();
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
    }
    jump_ok = 0;
    free(buf);
  }
  teardown();
  printf("ran %d inputs, %d violated an invariant\n", argc - 1, failed);
  return failed ? 1 : 0;
}
#endif
