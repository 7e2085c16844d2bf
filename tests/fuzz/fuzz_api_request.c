/* Requests as the API fuzzer's model reads them: the codes whose
 * conditions hold for a step, commit or truncate, the answer the model
 * gives, and the check of the API's answer against it. */
#include <jansson.h>
#include <string.h>

#include "fuzz_api.h"

/* A session's configuration from obj's creation fields, defaults filled in;
 * returns the codes whose conditions hold. */
unsigned read_config(json_t *obj, evd_session_config_t *c) {
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

unsigned read_expect(json_t *obj, int *has, uint32_t *expect) {
  json_t *v = obj != NULL ? json_object_get(obj, "expect_newest") : NULL;

  *has = 0;
  if (v == NULL)
    return 0;
  if (!int_in(v, 0, UINT32_MAX, expect))
    return B(E_INVALID_POSITION) | (json_is_number(v) ? 0 : B(E_INVALID_FIELD));
  *has = 1;
  return 0;
}

unsigned expect_codes(const shadow_t *s, int has, uint32_t expect) {
  if (!has)
    return 0;
  if (s == NULL)
    return expect > 0 ? B(E_UNKNOWN_SESSION) : 0;
  return expect != s->newest ? B(E_DIVERGED) : 0;
}

void check_diverged(json_t *e, const char *id, size_t idlen) {
  shadow_t *s = id != NULL ? sh_find(id, idlen) : NULL;
  json_t *want;

  CHECK(s != NULL, "diverged on a session the model does not have");
  CHECK(u32_of(json_object_get(e, "newest")) == s->newest,
        "diverged names newest %u, the session's is %u",
        u32_of(json_object_get(e, "newest")), s->newest);
  want = sh_view(s);
  check_equal(json_object_get(e, "view"), want, "diverged view");
  json_decref(want);
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
  int has_expect;  /* expect_newest, in expect */
  uint32_t expect;
} stepreq_t;

/* The positions of the step being read (a body of -max_len=8192 bytes
 * holds fewer; longer lists are refused and not read further). */
enum { REQ_POS_MAX = 8192 };
static uint32_t req_pos[REQ_POS_MAX];

static void read_step(json_t *obj, int in_batch, stepreq_t *r) {
  static const char *const single[] = {
      "pos", "positions", "tentative", "commit", "attention", "budget",
      "sinks", "lookahead", "page_size", "expect_newest", NULL};
  static const char *const item[] = {
      "session", "pos", "positions", "tentative", "commit", "attention",
      "budget", "sinks", "lookahead", "page_size", "expect_newest", NULL};
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
  r->perr |= read_expect(obj, &r->has_expect, &r->expect);
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
void outcome_free(outcome_t *o) {
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
  if (s == NULL && expect_codes(NULL, r->has_expect, r->expect) != 0) {
    /* A fresh window would describe another cache: nothing is made. */
    o->allowed |= B(E_UNKNOWN_SESSION);
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
  /* Not a resend: the session must be where the request expects it. */
  if (expect_codes(s, r->has_expect, r->expect) != 0) {
    o->allowed |= B(E_DIVERGED);
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
void model_one_position(shadow_t *s, const char *id, size_t idlen,
                        int op, json_t *body, int bad_json,
                        outcome_t *o, uint32_t *arg) {
  static const char *const commit_fields[] = {"newest", "expect_newest",
                                              NULL};
  static const char *const truncate_fields[] = {"from", "expect_newest",
                                                NULL};
  json_t *v;
  shadow_t *t;
  json_t *a, *b = NULL;
  uint32_t expect = 0;
  int has_expect = 0;

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
  o->allowed |= read_expect(body, &has_expect, &expect);
  if (o->allowed != 0)
    return;
  if (sh_rec_match(s, op, 0, 0, *arg, NULL, 0)) {
    o->may_succeed = 1;
    o->replay = 1;
    o->expect = json_deep_copy(s->rec_answer);
    json_object_set_new(o->expect, "replayed", json_true());
    return;
  }
  o->newest = s->newest;
  if (expect_codes(s, has_expect, expect) != 0) {
    o->allowed |= B(E_DIVERGED);
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
void settle(outcome_t *o, json_t *res, int status, int in_batch,
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
    if (k == E_DIVERGED)
      check_diverged(e, id, idlen);
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
void step_item(json_t *obj, json_t *res, int status, int in_batch,
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
