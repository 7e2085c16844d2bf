/* Every vector of proto/vectors and proto/vectors/rehome replayed through
 * the C client against the real daemon: once op by op (create, step with
 * pos/positions, tentative and commit, commit, truncate, fork, evict,
 * adopt, GET, each change with its expect_newest when the op has one), and
 * once with every vector's steps interleaved through batches. Every field
 * of every answer (pages_new, pages_freed and pages_transient included)
 * must equal the vector's, and a list the vector leaves out must come back
 * empty; refused ops must carry the vector's error code and its status,
 * and a stale_position or diverged refusal the newest the answers said. */
#include <dirent.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define MAX_VECTORS 64
#define MAX_POS 4096
#define MAX_NAMES 64

/* A vector, and what its answers said so far: the sessions it has made
 * ("" is its main session; forks and adoptions add "<id>.<name>") and the
 * newest position each holds, which a refusal must report. */
typedef struct {
  json_t *root, *ops;
  const char *name;
  char id[160];
  struct {
    const char *name;
    int64_t newest;
  } known[MAX_NAMES];
  size_t n_known;
} vec_t;

static int is_json(const struct dirent *e) {
  size_t n = strlen(e->d_name);
  return n > 5 && strcmp(e->d_name + n - 5, ".json") == 0;
}

/* Loads the vectors of dir into v[*k..cap), in name order. */
static void load_dir(const char *dir, vec_t *v, int cap, int *k) {
  struct dirent **list;
  int n, i;

  n = scandir(dir, &list, is_json, alphasort);
  ck_assert_msg(n > 0, "no vectors in %s", dir);
  for (i = 0; i < n; i++) {
    char path[512];
    json_error_t err;
    ck_assert_msg(*k < cap, "more than %d vectors", cap);
    snprintf(path, sizeof path, "%s/%s", dir, list[i]->d_name);
    v[*k].root = json_load_file(path, 0, &err);
    ck_assert_msg(v[*k].root != NULL, "%s: %s", path, err.text);
    v[*k].ops = json_object_get(v[*k].root, "ops");
    v[*k].name = json_string_value(json_object_get(v[*k].root, "name"));
    snprintf(v[*k].id, sizeof v[*k].id, "%s", v[*k].name);
    v[*k].known[0].name = "";
    v[*k].known[0].newest = 0;
    v[*k].n_known = 1;
    (*k)++;
    free(list[i]);
  }
  free(list);
}

/* Loads every vector, proto/vectors' and then rehome/'s; returns how
 * many. */
static int load_all(vec_t *v, int cap) {
  int k = 0;

  load_dir(EVD_VECTORS_DIR, v, cap, &k);
  load_dir(EVD_VECTORS_DIR "/rehome", v, cap, &k);
  return k;
}

static int64_t num(json_t *o, const char *key, int64_t dflt) {
  json_t *v = json_object_get(o, key);
  return v != NULL ? (int64_t)json_integer_value(v) : dflt;
}

/* The vector's name of the session an op addresses ("" for the main). */
static const char *op_name(json_t *op) {
  const char *s = json_string_value(json_object_get(op, "session"));
  return s != NULL ? s : "";
}

/* The newest the answers said session `name` holds, or NULL when the
 * vector has not made it. */
static int64_t *known(vec_t *v, const char *name) {
  size_t i;

  for (i = 0; i < v->n_known; i++)
    if (strcmp(v->known[i].name, name) == 0)
      return &v->known[i].newest;
  return NULL;
}

static void learn(vec_t *v, const char *name, int64_t newest) {
  int64_t *n = known(v, name);

  if (n == NULL) {
    ck_assert(v->n_known < MAX_NAMES);
    v->known[v->n_known].name = name;
    n = &v->known[v->n_known++].newest;
  }
  *n = newest;
}

static void create(evd_client_t *c, vec_t *v) {
  evd_session_cfg_t cfg = {num(v->root, "budget", -1),
                           num(v->root, "sinks", -1),
                           num(v->root, "lookahead", -1),
                           num(v->root, "page_size", -1)};
  evd_view_t view;
  int rc = evd_client_create(c, v->id, &cfg, &view);

  ck_assert_msg(rc == 0, "%s: create: %s", v->name,
                evd_client_error(c)->message);
  ck_assert(view.created);
  ck_assert_str_eq(view.id, v->id);
  ck_assert_int_eq(view.budget, cfg.budget);
  ck_assert_int_eq(view.sinks, cfg.sinks);
  ck_assert_int_eq(view.lookahead, cfg.lookahead < 0 ? 1 : cfg.lookahead);
  ck_assert_int_eq(view.page_size, cfg.page_size < 0 ? 0 : cfg.page_size);
  ck_assert_int_eq(view.size, 1);
  ck_assert_int_eq(view.newest, 0);
}

/* The session id of the vector's session `name`: its id, or
 * "<id>.<name>". */
static void session_id(vec_t *v, const char *name, char *out, size_t cap) {
  if (name[0] == '\0')
    snprintf(out, cap, "%s", v->id);
  else
    snprintf(out, cap, "%s.%s", v->id, name);
}

/* Expects the list `key` of the op (absent: empty). */
static void expect_json_list(json_t *op, const char *key, evd_list_t got,
                             const char *where) {
  json_t *a = json_object_get(op, key), *x;
  uint32_t want[MAX_POS];
  size_t i, n = 0;
  char what[256];

  json_array_foreach(a, i, x) {
    ck_assert(n < MAX_POS);
    want[n++] = (uint32_t)json_integer_value(x);
  }
  snprintf(what, sizeof what, "%s %s", where, key);
  tc_expect_list(got, want, n, what);
}

static void expect_answer(json_t *op, const evd_answer_t *a,
                          const char *where) {
  expect_json_list(op, "victims", a->victims, where);
  expect_json_list(op, "slots", a->slots, where);
  expect_json_list(op, "dropped", a->dropped, where);
  expect_json_list(op, "removed", a->removed, where);
  expect_json_list(op, "pages_new", a->pages_new, where);
  expect_json_list(op, "pages_freed", a->pages_freed, where);
  expect_json_list(op, "pages_transient", a->pages_transient, where);
  ck_assert_msg(a->size == num(op, "size", -1), "%s size %u", where,
                a->size);
  if (json_object_get(op, "newest") != NULL)
    ck_assert_msg(a->newest == num(op, "newest", -1), "%s newest %u", where,
                  a->newest);
  ck_assert_msg(!a->replayed, "%s replayed", where);
}

/* The view an adopt op answers: its fields are the op's but for the
 * request keys, lookahead 1 and page_size 0 when the op leaves them out,
 * no drafts; created when the vector names the session for the first
 * time (proto/vectors/README.md). */
static void expect_adopted(json_t *op, const evd_view_t *view,
                           const char *sid, bool fresh, const char *where) {
  ck_assert_msg(strcmp(view->id, sid) == 0, "%s id %s", where, view->id);
  ck_assert_msg(view->created == fresh, "%s created %d", where,
                view->created);
  ck_assert_int_eq(view->budget, num(op, "budget", -1));
  ck_assert_int_eq(view->sinks, num(op, "sinks", -1));
  ck_assert_int_eq(view->lookahead, num(op, "lookahead", 1));
  ck_assert_int_eq(view->page_size, num(op, "page_size", 0));
  ck_assert_int_eq(view->size, num(op, "size", -1));
  ck_assert_int_eq(view->newest, num(op, "newest", -1));
  expect_json_list(op, "kept", view->kept, where);
  expect_json_list(op, "slots", view->slots, where);
  expect_json_list(op, "pages", view->pages, where);
  expect_json_list(op, "tentative", view->tentative, where);
}

/* The numbers of a JSON array into out (MAX_POS); false when one is out
 * of 0..4294967295 (the vectors' -1 and 2^32), which the C API cannot
 * send. */
static bool u32s(json_t *a, uint32_t *out, size_t *n) {
  json_t *x;
  size_t i;

  json_array_foreach(a, i, x) {
    ck_assert(i < MAX_POS);
    if (json_integer_value(x) < 0 || json_integer_value(x) > UINT32_MAX)
      return false;
    out[i] = (uint32_t)json_integer_value(x);
  }
  *n = json_array_size(a);
  return true;
}

/* An op's expect_newest for the _if calls: EVD_NO_EXPECT when it has
 * none. */
static int64_t expect_of(json_t *op) {
  return num(op, "expect_newest", EVD_NO_EXPECT);
}

/* A step op as a request: positions go into pos[] (MAX_POS). Returns
 * false for a position the C API cannot send (see u32s). */
static bool step_of(json_t *op, const char *sid, uint32_t *pos,
                    evd_step_t *s) {
  memset(s, 0, sizeof *s);
  s->session = sid;
  s->positions = pos;
  if (!u32s(json_object_get(op, "step"), pos, &s->n_positions))
    return false;
  s->tentative = json_is_true(json_object_get(op, "tentative"));
  if (json_object_get(op, "commit") != NULL) {
    s->has_commit = true;
    s->commit = (uint32_t)num(op, "commit", 0);
  }
  if (json_object_get(op, "expect_newest") != NULL) {
    s->has_expect = true;
    s->expect_newest = (uint32_t)num(op, "expect_newest", 0);
  }
  return true;
}

/* An adopt op's state. Its lists go into the three arrays (MAX_POS
 * each); false for a number the C API cannot send (see u32s). */
static bool adopt_of(json_t *b, evd_session_cfg_t *cfg,
                     uint32_t (*lists)[MAX_POS], evd_adopt_t *st) {
  size_t n_slots;

  memset(st, 0, sizeof *st);
  *cfg = (evd_session_cfg_t){num(b, "budget", -1), num(b, "sinks", -1),
                             num(b, "lookahead", -1),
                             num(b, "page_size", -1)};
  st->cfg = cfg;
  st->replace = json_is_true(json_object_get(b, "replace"));
  if (num(b, "newest", -1) < 0 || num(b, "newest", -1) > UINT32_MAX ||
      !u32s(json_object_get(b, "kept"), lists[0], &st->n_kept))
    return false;
  st->newest = (uint32_t)num(b, "newest", 0);
  st->kept = lists[0];
  if (json_object_get(b, "slots") != NULL) {
    if (!u32s(json_object_get(b, "slots"), lists[1], &n_slots))
      return false;
    /* Slots of another length than kept are invalid_state; the C API
     * sends n_kept of them, so such an op is one it cannot make. */
    if (n_slots != st->n_kept)
      return false;
    st->slots = lists[1];
  }
  if (json_object_get(b, "pages") != NULL) {
    if (!u32s(json_object_get(b, "pages"), lists[2], &st->n_pages))
      return false;
    st->pages = lists[2];
  }
  return true;
}

/* The status of each error code a vector expects (proto/vectors/README.md);
 * 0 for a code it never expects. */
static int status_of(const char *code) {
  static const struct {
    const char *code;
    int status;
  } table[] = {{"invalid_position", 400}, {"invalid_budget", 400},
               {"too_many_positions", 400}, {"invalid_state", 400},
               {"stale_position", 409},   {"tentative_pending", 409},
               {"session_exists", 409},   {"diverged", 409}};
  size_t i;

  for (i = 0; i < sizeof table / sizeof table[0]; i++)
    if (strcmp(table[i].code, code) == 0)
      return table[i].status;
  return 0;
}

/* A refused op: the vector's code with its status and a message; a stale
 * or diverged refusal carries the newest the session holds, which is the
 * newest its answers said. */
static void expect_error(vec_t *v, json_t *op, int rc,
                         const evd_client_err_t *e, const char *where) {
  const char *code = json_string_value(json_object_get(op, "error"));
  int64_t *newest = known(v, op_name(op));

  ck_assert_msg(rc == EVD_CLIENT_EAPI, "%s: rc %d (%s), want error %s", where,
                rc, e->message, code);
  ck_assert_msg(strcmp(e->code, code) == 0, "%s: %s, want %s", where,
                e->code, code);
  ck_assert_msg(e->status == status_of(code), "%s: status %d", where,
                e->status);
  ck_assert_msg(e->message[0] != '\0', "%s: no message", where);
  if (strcmp(code, "stale_position") == 0 || strcmp(code, "diverged") == 0) {
    ck_assert_msg(newest != NULL, "%s: refused for a session not made",
                  where);
    ck_assert_msg(e->newest == *newest, "%s: newest %lld, want %lld", where,
                  (long long)e->newest, (long long)*newest);
  }
}

/* A step, commit, truncate or evict op's outcome (rc and answer a). */
static void expect_change(vec_t *v, json_t *op, int rc,
                          const evd_client_err_t *e, const evd_answer_t *a,
                          const char *where) {
  if (json_object_get(op, "error") != NULL) {
    expect_error(v, op, rc, e, where);
    return;
  }
  ck_assert_msg(rc == 0, "%s: %s", where, e->message);
  expect_answer(op, a, where);
  if (json_object_get(op, "newest") != NULL)
    learn(v, op_name(op), num(op, "newest", 0));
}

/* A fork op: the child is made (its name learnt with its parent's newest)
 * unless the op is refused. */
static void run_fork(evd_client_t *c, vec_t *v, json_t *op, const char *sid,
                     const char *where) {
  const char *child = json_string_value(json_object_get(op, "fork"));
  char into[300];
  evd_view_t view;
  int rc;

  session_id(v, child, into, sizeof into);
  rc = evd_client_fork_if(c, sid, into, expect_of(op), &view);
  if (json_object_get(op, "error") != NULL) {
    expect_error(v, op, rc, evd_client_error(c), where);
    return;
  }
  ck_assert_msg(rc == 0, "%s: fork: %s", where, evd_client_error(c)->message);
  ck_assert(view.created);
  ck_assert_str_eq(view.id, into);
  learn(v, child, *known(v, op_name(op)));
}

static void run_adopt(evd_client_t *c, vec_t *v, json_t *op, const char *sid,
                      const char *where) {
  static uint32_t lists[3][MAX_POS];
  evd_session_cfg_t cfg;
  evd_adopt_t st;
  evd_view_t view;
  bool fresh = known(v, op_name(op)) == NULL;
  int rc;

  if (!adopt_of(json_object_get(op, "adopt"), &cfg, lists, &st))
    return;
  rc = evd_client_adopt(c, sid, &st, &view);
  if (json_object_get(op, "error") != NULL) {
    expect_error(v, op, rc, evd_client_error(c), where);
    return;
  }
  ck_assert_msg(rc == 0, "%s: adopt: %s", where, evd_client_error(c)->message);
  expect_adopted(op, &view, sid, fresh, where);
  learn(v, op_name(op), view.newest);
}

static void run_check(evd_client_t *c, json_t *check, const char *sid,
                      const char *where) {
  evd_view_t view;
  int rc = evd_client_get(c, sid, &view);

  ck_assert_msg(rc == 0, "%s: get: %s", where, evd_client_error(c)->message);
  ck_assert_str_eq(view.id, sid);
  expect_json_list(check, "kept", view.kept, where);
  expect_json_list(check, "slots", view.slots, where);
  if (json_object_get(check, "tentative") != NULL)
    expect_json_list(check, "tentative", view.tentative, where);
  if (json_object_get(check, "pages") != NULL)
    expect_json_list(check, "pages", view.pages, where);
  if (json_object_get(check, "size") != NULL)
    ck_assert_int_eq(view.size, num(check, "size", 0));
  if (json_object_get(check, "newest") != NULL)
    ck_assert_int_eq(view.newest, num(check, "newest", 0));
  ck_assert_int_eq(view.size, view.kept.n);
  ck_assert_int_eq(view.slots.n, view.kept.n);
}

/* One op, a step included (steps of the batched replay go through
 * evd_client_batch instead). */
static void run_op(evd_client_t *c, vec_t *v, size_t k, json_t *op) {
  static uint32_t pos[MAX_POS];
  char sid[300], where[300];
  int64_t expect = expect_of(op);
  evd_answer_t a;
  evd_step_t s;
  int rc;

  session_id(v, op_name(op), sid, sizeof sid);
  snprintf(where, sizeof where, "%s op %zu", v->name, k);
  if (json_object_get(op, "step") != NULL) {
    if (!step_of(op, sid, pos, &s))
      return;
    rc = evd_client_step(c, &s, &a);
  } else if (json_object_get(op, "commit") != NULL) {
    rc = evd_client_commit_if(c, sid, (uint32_t)num(op, "commit", 0), expect,
                              &a);
  } else if (json_object_get(op, "truncate") != NULL) {
    rc = evd_client_truncate_if(c, sid, (uint32_t)num(op, "truncate", 0),
                                expect, &a);
  } else if (json_object_get(op, "evict") != NULL) {
    rc = evd_client_evict_if(c, sid, num(op, "evict", 0), expect, &a);
  } else if (json_object_get(op, "fork") != NULL) {
    run_fork(c, v, op, sid, where);
    return;
  } else if (json_object_get(op, "adopt") != NULL) {
    run_adopt(c, v, op, sid, where);
    return;
  } else {
    json_t *check = json_object_get(op, "check");
    ck_assert_msg(check != NULL, "%s: an op this test does not know", where);
    run_check(c, check, sid, where);
    return;
  }
  expect_change(v, op, rc, evd_client_error(c), &a, where);
}

START_TEST(vectors_replay_op_by_op) {
  static vec_t v[MAX_VECTORS];
  int n, i;
  evd_client_t *c;

  tc_start(NULL);
  c = tc_client(NULL, 0);
  n = load_all(v, MAX_VECTORS);
  for (i = 0; i < n; i++) {
    json_t *op;
    size_t k;
    create(c, &v[i]);
    json_array_foreach(v[i].ops, k, op) run_op(c, &v[i], k, op);
  }
  for (i = 0; i < n; i++)
    json_decref(v[i].root);
  evd_client_free(c);
  tc_stop();
}
END_TEST

/* Round r sends the r-th op of every vector: its steps in one batch (one
 * item per vector, so no session twice), then the other ops one by one. */
START_TEST(vectors_replay_interleaved_through_batches) {
  static vec_t v[MAX_VECTORS];
  static uint32_t pos[MAX_VECTORS][MAX_POS];
  static char sid[MAX_VECTORS][300];
  evd_step_t steps[MAX_VECTORS];
  evd_batch_result_t out[MAX_VECTORS];
  int owner[MAX_VECTORS];
  size_t r, most = 0;
  int n, i;
  evd_client_t *c;

  tc_start(NULL);
  c = tc_client(NULL, 0);
  n = load_all(v, MAX_VECTORS);
  for (i = 0; i < n; i++) {
    snprintf(v[i].id, sizeof v[i].id, "b.%s", v[i].name);
    create(c, &v[i]);
    if (json_array_size(v[i].ops) > most)
      most = json_array_size(v[i].ops);
  }
  for (r = 0; r < most; r++) {
    size_t m = 0, k;
    int rc;
    for (i = 0; i < n; i++) {
      json_t *op = json_array_get(v[i].ops, r);
      if (op == NULL || json_object_get(op, "step") == NULL)
        continue;
      session_id(&v[i], op_name(op), sid[m], sizeof sid[m]);
      if (step_of(op, sid[m], pos[m], &steps[m]))
        owner[m++] = i;
    }
    rc = evd_client_batch(c, steps, m, out);
    ck_assert_msg(rc == 0, "round %zu: %s", r, evd_client_error(c)->message);
    for (k = 0; k < m; k++) {
      json_t *op = json_array_get(v[owner[k]].ops, r);
      char where[300];
      snprintf(where, sizeof where, "%s op %zu (batched)", v[owner[k]].name,
               r);
      expect_change(&v[owner[k]], op, out[k].rc, &out[k].error,
                    &out[k].answer, where);
    }
    for (i = 0; i < n; i++) {
      json_t *op = json_array_get(v[i].ops, r);
      if (op != NULL && json_object_get(op, "step") == NULL)
        run_op(c, &v[i], r, op);
    }
  }
  for (i = 0; i < n; i++)
    json_decref(v[i].root);
  evd_client_free(c);
  tc_stop();
}
END_TEST

Suite *vectors_suite(void) {
  Suite *s = suite_create("vectors");
  TCase *tc = tcase_create("replay");

  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, vectors_replay_op_by_op);
  tcase_add_test(tc, vectors_replay_interleaved_through_batches);
  suite_add_tcase(s, tc);
  return s;
}
