/* The API fuzzer's checks of one answer: status, headers and body as the
 * spec gives them per route, then against the model; and the daemon's
 * session table against the model's. */
#include <jansson.h>
#include <string.h>

#include "fuzz_api.h"

/* ---- the daemon's table against the model ------------------------------ */

evd_session_t *session_of(const char *id, size_t len) {
  return evd_table_find(evd_api_table(api), id, len);
}

/* The daemon's session `id` agrees with the model (which has none when
 * m is NULL). */
void check_session(const char *id, size_t idlen, const char *when) {
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

void check_count(const char *when) {
  uint32_t n = evd_table_count(evd_api_table(api));

  CHECK(n == sh_count, "%s: %u sessions, the model has %u", when, n,
        sh_count);
  CHECK(n <= cfg.max_sessions, "%u sessions live", n);
}

/* Every session of the table agrees with the model, and the last-use list
 * is as long as the table and ordered by use. */
void check_table(void) {
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
    static const char *const fields[] = {"budget", "expect_newest", NULL};
    int bad = parse_body(req, 1, &body), has_expect = 0;
    unsigned e = bad ? B(E_INVALID_JSON) : 0;
    uint32_t limit = s != NULL ? s->budget : 0, expect = 0;
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
    e |= read_expect(body, &has_expect, &expect);
    if (e == 0) { /* these may hold together; the spec orders them not */
      e |= expect_codes(s, has_expect, expect);
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
    o.newest = s != NULL ? s->newest : 0;
    settle(&o, res, st, 0, id, idlen, "evict");
    outcome_free(&o);
    break;
  }
  case EVD_R_ADOPT:
    check_adopt(req, res, st, id, idlen);
    break;
  case EVD_R_FORK: {
    static const char *const fields[] = {"into", "expect_newest", NULL};
    int bad = parse_body(req, 0, &body), has_expect = 0;
    unsigned e = bad ? B(E_INVALID_JSON) : 0;
    json_t *v = body != NULL ? json_object_get(body, "into") : NULL;
    const char *into = NULL;
    size_t intolen = 0;
    uint32_t expect = 0;
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
    if (!bad)
      e |= read_expect(body, &has_expect, &expect);
    /* A resent fork (the child as the parent is) is answered whatever it
     * expects; else the parent must be where the request expects it. */
    if (e == 0 && (child == NULL || !sh_same_state(child, s)))
      e |= expect_codes(s, has_expect, expect);
    if (e == 0 && child != NULL && !sh_same_state(child, s))
      e |= B(E_SESSION_EXISTS);
    if (e == 0 && child == NULL && sh_count >= cfg.max_sessions)
      e |= B(E_SESSION_LIMIT);
    if (st >= 400) {
      int k = check_error(json_object_get(res, "error"), st, 0);
      CHECK(e & B(k), "fork refused with %s; the conditions of %s hold",
            codes[k].code, code_names(e));
      if (k == E_DIVERGED)
        check_diverged(json_object_get(res, "error"), id, idlen);
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
void check_reply(const evd_request_t *req, const evd_reply_t *rep) {
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
            route == EVD_R_FORK || route == EVD_R_ADOPT,
        "201 for something else than PUT /session/{id}, fork or adopt");
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
        "evictd_removed_positions_total", "evictd_adoptions_created_total",
        "evictd_adoptions_replaced_total", "evictd_adoptions_resent_total",
        "evictd_adoptions_refused_total", "evictd_divergences_total"};
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
