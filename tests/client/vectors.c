/* Every vector of proto/vectors replayed through the C client against the
 * real daemon: once op by op (create, step with pos/positions, tentative
 * and commit, commit, truncate, fork, evict, GET), and once with every
 * vector's steps interleaved through batches. Every field of every answer
 * (pages_new, pages_freed and pages_transient included) must equal the
 * vector's, and a list the vector leaves out must come back empty; refused
 * ops must carry the vector's error code. */
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

typedef struct {
  json_t *root, *ops;
  const char *name;
  char id[160];
} vec_t;

static int is_json(const struct dirent *e) {
  size_t n = strlen(e->d_name);
  return n > 5 && strcmp(e->d_name + n - 5, ".json") == 0;
}

/* Loads every vector; returns how many. */
static int load_all(vec_t *v, int cap) {
  struct dirent **list;
  int n, i, k = 0;

  n = scandir(EVD_VECTORS_DIR, &list, is_json, alphasort);
  ck_assert_msg(n > 0, "no vectors in %s", EVD_VECTORS_DIR);
  for (i = 0; i < n; i++) {
    char path[512];
    json_error_t err;
    if (k < cap) {
      snprintf(path, sizeof path, "%s/%s", EVD_VECTORS_DIR, list[i]->d_name);
      v[k].root = json_load_file(path, 0, &err);
      ck_assert_msg(v[k].root != NULL, "%s: %s", path, err.text);
      v[k].ops = json_object_get(v[k].root, "ops");
      v[k].name = json_string_value(json_object_get(v[k].root, "name"));
      snprintf(v[k].id, sizeof v[k].id, "%s", v[k].name);
      k++;
    }
    free(list[i]);
  }
  free(list);
  return k;
}

static int64_t num(json_t *o, const char *key, int64_t dflt) {
  json_t *v = json_object_get(o, key);
  return v != NULL ? (int64_t)json_integer_value(v) : dflt;
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

/* The session id an op addresses: the vector's, or "<id>.<fork name>". */
static void op_session(vec_t *v, json_t *op, char *out, size_t cap) {
  const char *s = json_string_value(json_object_get(op, "session"));

  if (s == NULL)
    snprintf(out, cap, "%s", v->id);
  else
    snprintf(out, cap, "%s.%s", v->id, s);
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

/* A step op as a request: positions go into pos[] (MAX_POS). Returns
 * false for a position no uint32_t holds (the vectors' -1 and 2^32),
 * which the C API cannot send. */
static bool step_of(json_t *op, const char *sid, uint32_t *pos,
                    evd_step_t *s) {
  json_t *x;
  size_t i;

  memset(s, 0, sizeof *s);
  s->session = sid;
  json_array_foreach(json_object_get(op, "step"), i, x) {
    ck_assert(i < MAX_POS);
    if (json_integer_value(x) < 0 || json_integer_value(x) > UINT32_MAX)
      return false;
    pos[i] = (uint32_t)json_integer_value(x);
  }
  s->positions = pos;
  s->n_positions = json_array_size(json_object_get(op, "step"));
  s->tentative = json_is_true(json_object_get(op, "tentative"));
  if (json_object_get(op, "commit") != NULL) {
    s->has_commit = true;
    s->commit = (uint32_t)num(op, "commit", 0);
  }
  return true;
}

static void expect_error(evd_client_t *c, int rc, json_t *op,
                         const char *where) {
  const char *code = json_string_value(json_object_get(op, "error"));

  ck_assert_msg(rc == EVD_CLIENT_EAPI, "%s: rc %d, want error %s", where, rc,
                code);
  ck_assert_msg(strcmp(evd_client_error(c)->code, code) == 0,
                "%s: %s, want %s", where, evd_client_error(c)->code, code);
  ck_assert_int_ge(evd_client_error(c)->status, 400);
}

/* One op that is not a step (or a step when batched is false). */
static void run_op(evd_client_t *c, vec_t *v, size_t k, json_t *op) {
  static uint32_t pos[MAX_POS];
  char sid[300], where[300], into[300];
  evd_answer_t a;
  evd_view_t view;
  evd_step_t s;
  int rc;

  op_session(v, op, sid, sizeof sid);
  snprintf(where, sizeof where, "%s op %zu", v->name, k);
  if (json_object_get(op, "step") != NULL) {
    if (!step_of(op, sid, pos, &s))
      return;
    rc = evd_client_step(c, &s, &a);
  } else if (json_object_get(op, "commit") != NULL) {
    rc = evd_client_commit(c, sid, (uint32_t)num(op, "commit", 0), &a);
  } else if (json_object_get(op, "truncate") != NULL) {
    rc = evd_client_truncate(c, sid, (uint32_t)num(op, "truncate", 0), &a);
  } else if (json_object_get(op, "evict") != NULL) {
    rc = evd_client_evict(c, sid, num(op, "evict", 0), &a);
  } else if (json_object_get(op, "fork") != NULL) {
    snprintf(into, sizeof into, "%s.%s", v->id,
             json_string_value(json_object_get(op, "fork")));
    rc = evd_client_fork(c, sid, into, &view);
    ck_assert_msg(rc == 0, "%s: fork: %s", where,
                  evd_client_error(c)->message);
    ck_assert(view.created);
    ck_assert_str_eq(view.id, into);
    return;
  } else {
    json_t *check = json_object_get(op, "check");
    ck_assert_msg(check != NULL, "%s: an op this test does not know", where);
    rc = evd_client_get(c, sid, &view);
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
    return;
  }
  if (json_object_get(op, "error") != NULL)
    expect_error(c, rc, op, where);
  else {
    ck_assert_msg(rc == 0, "%s: %s", where, evd_client_error(c)->message);
    expect_answer(op, &a, where);
  }
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
      op_session(&v[i], op, sid[m], sizeof sid[m]);
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
      if (json_object_get(op, "error") != NULL) {
        ck_assert_msg(out[k].rc == EVD_CLIENT_EAPI, "%s: rc %d", where,
                      out[k].rc);
        ck_assert_str_eq(out[k].error.code,
                         json_string_value(json_object_get(op, "error")));
        ck_assert_int_ge(out[k].error.status, 400);
        ck_assert(out[k].error.message[0] != '\0');
      } else {
        ck_assert_msg(out[k].rc == 0, "%s: %s", where,
                      out[k].error.message);
        expect_answer(op, &out[k].answer, where);
      }
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
