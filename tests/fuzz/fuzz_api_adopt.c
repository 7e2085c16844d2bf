/* POST /session/{id}/adopt as the API fuzzer's model reads the spec: the
 * codes whose conditions hold (the body, the configuration, the rules a
 * state keeps), then a creation, a resend, a refusal of another state or
 * a replacement, each checked against the model's own session. */
#include <jansson.h>
#include <string.h>

#include "fuzz_api.h"

/* Room for any list a body of -max_len bytes holds. */
enum { LIST_MAX = 8192 };
static uint32_t kept[LIST_MAX], slots[LIST_MAX], pages[LIST_MAX];

/* A list of uint32 into dst[0..*n): the codes of a value that is not an
 * array of integers (invalid_field), or of an integer out of range. */
static unsigned read_list(json_t *v, uint32_t *dst, unsigned range,
                          size_t *n) {
  unsigned e = 0;
  json_t *x;
  size_t i;

  *n = 0;
  if (!json_is_array(v))
    return B(E_INVALID_FIELD);
  json_array_foreach(v, i, x) {
    if (!is_int(x))
      e |= B(E_INVALID_FIELD);
    else if (i >= LIST_MAX || !int_in(x, 0, UINT32_MAX, &dst[i]))
      e |= B(range);
  }
  *n = json_array_size(v);
  return e;
}

/* 1 when a session of configuration c can hold k[0..n) with that newest
 * (in slots sl, when not NULL): the spec's rules, restated. */
static int state_ok(const evd_session_config_t *c, const uint32_t *k,
                    const uint32_t *sl, size_t n, uint32_t newest) {
  size_t np = n < c->sinks ? n : c->sinks, i;
  uint32_t last = c->budget + c->lookahead - 1;
  uint64_t turn, room;

  if (n == 0 || n > c->budget || newest < k[n - 1] ||
      (newest > k[n - 1] && newest == UINT32_MAX) ||
      (c->sinks > 0 && k[0] != 0))
    return 0;
  for (i = 1; i < n; i++)
    if (k[i] <= k[i - 1])
      return 0;
  if (sl == NULL)
    return 1;
  for (i = 0; i < n; i++)
    if (sl[i] > last || (i < np && sl[i] != i))
      return 0;
  if (np == n)
    return 1;
  if (sl[np] < c->sinks)
    return 0;
  for (i = np + 1; i < n; i++)
    if (sl[i] != (sl[i - 1] == last ? c->sinks : sl[i - 1] + 1))
      return 0;
  /* The ring turned at most one slot per position that lies between the
   * newest pin (or -1) and the oldest unpinned one. */
  turn = sl[np] - c->sinks;
  room = np > 0 ? (uint64_t)k[np] - k[np - 1] - 1 : (uint64_t)k[np];
  return turn <= room;
}

/* The codes of a "pages" list p[0..np) that is not the pages of kept. */
static unsigned pages_codes(const evd_session_config_t *c, size_t n,
                            size_t np) {
  size_t i, want = 0;

  if (c->page_size == 0)
    return np == 0 ? 0 : B(E_INVALID_STATE);
  for (i = 0; i < n; i++) {
    uint32_t p = kept[i] / c->page_size;
    if (i > 0 && p == kept[i - 1] / c->page_size)
      continue;
    if (want >= np || pages[want] != p)
      return B(E_INVALID_STATE);
    want++;
  }
  return want == np ? 0 : B(E_INVALID_STATE);
}

/* 1 when session s is in exactly the adopted state: configuration, no
 * drafts, kept and newest (and slots, when given). */
static int is_state(const shadow_t *s, const evd_session_config_t *c,
                    size_t n, uint32_t newest, int has_slots) {
  return s->budget == c->budget && s->sinks == c->sinks &&
         s->look == c->lookahead && s->page == c->page_size &&
         sh_drafts(s) == 0 && s->n == n && s->newest == newest &&
         memcmp(s->pos, kept, n * sizeof *kept) == 0 &&
         (!has_slots || memcmp(s->slot, slots, n * sizeof *slots) == 0);
}

void check_adopt(const evd_request_t *req, json_t *res, int st,
                 const char *id, size_t idlen) {
  static const char *const fields[] = {"budget", "sinks",  "lookahead",
                                       "page_size", "kept", "newest",
                                       "slots",  "pages", "replace", NULL};
  shadow_t *s = sh_find(id, idlen), *t;
  evd_session_config_t c;
  json_t *body = NULL, *v, *want;
  unsigned e, shape;
  size_t n = 0, ns = 0, np = 0;
  uint32_t newest = 0;
  int replace = 0, has_newest = 0, has_slots;

  e = parse_body(req, 0, &body) ? B(E_INVALID_JSON) : 0;
  has_slots = body != NULL && json_object_get(body, "slots") != NULL;
  if (body != NULL) {
    if (!only_fields(body, fields))
      e |= B(E_INVALID_FIELD);
    e |= read_config(body, &c);
    v = json_object_get(body, "replace");
    if (v != NULL && !json_is_boolean(v))
      e |= B(E_INVALID_FIELD);
    replace = json_is_true(v);
    v = json_object_get(body, "kept");
    shape = v == NULL ? B(E_INVALID_FIELD)
                      : read_list(v, kept, E_INVALID_POSITION, &n);
    v = json_object_get(body, "newest");
    if (v == NULL)
      shape |= B(E_INVALID_FIELD);
    else if (int_in(v, 0, UINT32_MAX, &newest))
      has_newest = 1;
    else
      shape |= B(E_INVALID_POSITION) |
               (json_is_number(v) ? 0 : B(E_INVALID_FIELD));
    v = json_object_get(body, "slots");
    if (v != NULL) {
      shape |= read_list(v, slots, E_INVALID_STATE, &ns);
      if (json_is_array(v) && ns != n)
        shape |= B(E_INVALID_STATE);
    }
    e |= shape;
    /* The state's rules, once it can be read at all. */
    if (e == 0 && has_newest &&
        !state_ok(&c, kept, has_slots ? slots : NULL, n, newest))
      e |= B(E_INVALID_STATE);
    v = json_object_get(body, "pages");
    if (v != NULL) {
      unsigned pe = read_list(v, pages, E_INVALID_STATE, &np);
      e |= pe != 0 ? pe : e == 0 ? pages_codes(&c, n, np) : 0;
    }
  }
  if (e == 0 && s != NULL && !is_state(s, &c, n, newest, has_slots) &&
      !replace)
    e |= B(E_SESSION_EXISTS);
  if (e == 0 && s == NULL && sh_count >= cfg.max_sessions)
    e |= B(E_SESSION_LIMIT);
  if (st >= 400) {
    int k = check_error(json_object_get(res, "error"), st, 0);
    CHECK(e & B(k), "adopt refused with %s; the conditions of %s hold",
          codes[k].code, code_names(e));
    json_decref(body);
    return;
  }
  CHECK(e == 0, "adopt answered %d; the conditions of %s hold", st,
        code_names(e));
  if (s != NULL && is_state(s, &c, n, newest, has_slots)) {
    CHECK(st == 200, "a resent adoption answered %d", st);
    s->used = now_tick();
    want = sh_view(s);
    check_equal(res, want, "resent adoption's view");
    json_decref(want);
    json_decref(body);
    return;
  }
  CHECK(st == (s == NULL ? 201 : 200), "adopt answered %d, the session "
        "existed: %d", st, s != NULL);
  t = sh_adopted(id, idlen, &c, kept, has_slots ? slots : NULL, (uint32_t)n,
                 newest);
  t->used = now_tick();
  sh_put(t);
  want = sh_view(t);
  check_equal(res, want, "adopted view");
  json_decref(want);
  json_decref(body);
}
