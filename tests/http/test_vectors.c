/* Every vector in proto/vectors and proto/vectors/rehome replayed through
 * the daemon: once through the per-session endpoints (step, commit,
 * truncate, evict, fork, adopt, GET), and once with all vectors
 * interleaved through the batch endpoint, one batch per op index. The
 * answers must equal the vectors' exactly; refused ops by error code (a
 * stale_position or diverged with the newest the answers said). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define MAX_VECTORS 64
#define MAX_NAME 80

static char *names[MAX_VECTORS];
static int nnames;

#define MAX_SESSIONS 16

/* One vector as the replay needs it: its main session and the ones forked
 * from it or adopted, each with the newest position its answers said. */
typedef struct {
  json_t *root; /* the whole file */
  const char *name;
  json_t *ops;
  json_int_t budget, sinks, lookahead, page_size;
  int nsess;
  struct {
    char name[64]; /* "" for the main session */
    char id[240];
    json_int_t newest;
  } sess[MAX_SESSIONS];
} vec_t;

static int is_json(const struct dirent *e) {
  size_t n = strlen(e->d_name);
  return n > 5 && strcmp(e->d_name + n - 5, ".json") == 0;
}

/* Lists the vector files once, when the suite is built: the loop test
 * needs their number. Those of rehome/ (adopt, expect_newest) follow,
 * named with their folder. */
static void list_vectors(const char *sub) {
  struct dirent **list;
  char dir[512], name[MAX_NAME];
  int n, i;

  snprintf(dir, sizeof dir, "%s%s%s", ht_vectors_dir(), *sub ? "/" : "", sub);
  n = scandir(dir, &list, is_json, alphasort);
  for (i = 0; i < n; i++) {
    snprintf(name, sizeof name, "%.16s%s%.60s", sub, *sub ? "/" : "",
             list[i]->d_name);
    if (nnames < MAX_VECTORS)
      names[nnames++] = strdup(name);
    free(list[i]);
  }
  if (n >= 0)
    free(list);
}

static void free_names(void) {
  while (nnames > 0)
    free(names[--nnames]);
}

static void vec_load(vec_t *v, const char *file, const char *id_prefix) {
  char path[512];
  json_error_t err;

  snprintf(path, sizeof path, "%s/%s", ht_vectors_dir(), file);
  memset(v, 0, sizeof *v);
  v->root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
  ck_assert_msg(v->root != NULL, "%s: %s", path, err.text);
  v->name = json_string_value(json_object_get(v->root, "name"));
  v->ops = json_object_get(v->root, "ops");
  ck_assert_msg(v->name != NULL && json_is_array(v->ops), "%s: no name/ops",
                path);
  v->budget = json_integer_value(json_object_get(v->root, "budget"));
  v->sinks = json_integer_value(json_object_get(v->root, "sinks"));
  v->lookahead = json_object_get(v->root, "lookahead") != NULL
                     ? json_integer_value(json_object_get(v->root, "lookahead"))
                     : 1;
  v->page_size = json_integer_value(json_object_get(v->root, "page_size"));
  v->nsess = 1;
  snprintf(v->sess[0].id, sizeof v->sess[0].id, "%s%s", id_prefix, v->name);
}

/* The session of name `name` (NULL: the main one), or -1. */
static int sess_named(vec_t *v, const char *name) {
  int i;

  if (name == NULL)
    return 0;
  for (i = 1; i < v->nsess; i++)
    if (strcmp(v->sess[i].name, name) == 0)
      return i;
  return -1;
}

/* The session an op addresses ("session": a fork's or an adoption's name,
 * else the main one). */
static int sess_of(vec_t *v, json_t *op) {
  const char *name = json_string_value(json_object_get(op, "session"));
  int i = sess_named(v, name);

  ck_assert_msg(i >= 0, "%s: op on unknown session %s", v->name, name);
  return i;
}

/* Names session c `name`, with the id <main id>.<name>. */
static void sess_name(vec_t *v, int c, const char *name) {
  char child[sizeof v->sess[c].id];
  int n;

  snprintf(v->sess[c].name, sizeof v->sess[c].name, "%s", name);
  n = snprintf(child, sizeof child, "%.160s.%s", v->sess[0].id,
               v->sess[c].name);
  ck_assert(n > 0 && (size_t)n < sizeof child);
  memcpy(v->sess[c].id, child, sizeof child);
}

/* PUT the vector's session: it starts holding position 0 in slot 0. */
static void vec_create(ht_t *t, vec_t *v) {
  char path[300], body[200], want[700], extra[100] = "";

  snprintf(path, sizeof path, "/session/%s", v->sess[0].id);
  snprintf(body, sizeof body,
           "{\"budget\":%" JSON_INTEGER_FORMAT ",\"sinks\":%" JSON_INTEGER_FORMAT
           ",\"lookahead\":%" JSON_INTEGER_FORMAT
           ",\"page_size\":%" JSON_INTEGER_FORMAT "}",
           v->budget, v->sinks, v->lookahead, v->page_size);
  /* The view shows lookahead and pages only when they are in use. */
  if (v->lookahead != 1)
    snprintf(extra, sizeof extra, ",\"lookahead\":%" JSON_INTEGER_FORMAT,
             v->lookahead);
  if (v->page_size != 0)
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra),
             ",\"page_size\":%" JSON_INTEGER_FORMAT, v->page_size);
  snprintf(want, sizeof want,
           "{\"id\":\"%s\",\"budget\":%" JSON_INTEGER_FORMAT
           ",\"sinks\":%" JSON_INTEGER_FORMAT
           "%s,\"size\":1,\"newest\":0,\"kept\":[0],\"slots\":[0]%s}",
           v->sess[0].id, v->budget, v->sinks, extra,
           v->page_size != 0 ? ",\"pages\":[0]" : "");
  ht_expect(t, "PUT", path, body, 201, want);
}

/* The step op's request object: "pos" for one position on even op indexes
 * (both forms must behave alike), "positions" otherwise, none for a
 * commit-only step; its "tentative" and "commit". New reference. */
static json_t *step_object(json_t *op, size_t k) {
  json_t *list = json_object_get(op, "step"), *o = json_object();

  if (json_array_size(list) == 1 && k % 2 == 0)
    json_object_set(o, "pos", json_array_get(list, 0));
  else if (json_array_size(list) > 0)
    json_object_set(o, "positions", list);
  if (json_object_get(op, "tentative") != NULL)
    json_object_set(o, "tentative", json_object_get(op, "tentative"));
  if (json_object_get(op, "commit") != NULL)
    json_object_set(o, "commit", json_object_get(op, "commit"));
  if (json_object_get(op, "expect_newest") != NULL)
    json_object_set(o, "expect_newest", json_object_get(op, "expect_newest"));
  return o;
}

/* The keys of a vector op that describe the request, not the answer. */
static int request_key(const char *k) {
  static const char *const keys[] = {"step",     "tentative", "commit",
                                     "evict",    "truncate",  "fork",
                                     "check",    "session",   "error",
                                     "adopt",    "expect_newest", NULL};
  const char *const *p;

  for (p = keys; *p != NULL; p++)
    if (strcmp(k, *p) == 0)
      return 1;
  return 0;
}

/* Checks one answer to a step or evict op: the error the op expects, or
 * exactly the fields it lists. Tracks the session's newest position. */
static void check_answer(vec_t *v, size_t k, json_t *op, json_t *got,
                         int status, int in_batch) {
  json_t *err = json_object_get(op, "error"), *want;
  int si = sess_of(v, op);
  const char *key;
  json_t *val;

  if (err != NULL) {
    const char *code = json_string_value(err);
    int st = ht_status_of(code);
    ck_assert_msg(status == st, "%s op %zu: status %d, expected %d (%s): %s",
                  v->name, k, status, st, code, ht_dump(got, 0));
    ht_check_error(got, st, code, in_batch);
    if (strcmp(code, "stale_position") == 0 ||
        strcmp(code, "diverged") == 0) {
      json_int_t n = json_integer_value(
          json_object_get(json_object_get(got, "error"), "newest"));
      ck_assert_msg(n == v->sess[si].newest,
                    "%s op %zu: %s with newest %" JSON_INTEGER_FORMAT
                    ", expected %" JSON_INTEGER_FORMAT,
                    v->name, k, code, n, v->sess[si].newest);
    }
    return;
  }
  want = json_object();
  json_object_foreach(op, key, val) {
    if (!request_key(key))
      json_object_set(want, key, val);
  }
  ck_assert_msg(status == 200 && json_equal(got, want),
                "%s op %zu: expected 200 %s, got %d %s", v->name, k,
                ht_dump(want, 0), status, ht_dump(got, 1));
  if (json_object_get(op, "newest") != NULL)
    v->sess[si].newest = json_integer_value(json_object_get(op, "newest"));
  json_decref(want);
}

/* Sends one request with a JSON body and returns the parsed answer. */
static json_t *send_json(ht_t *t, const char *method, const char *path,
                         json_t *body, int *status) {
  char *text = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
  hc_response_t r;
  json_t *j;

  ck_assert_msg(hc_request(&t->c, method, path, text, &r) == 0,
                "%s %s: no answer", method, path);
  free(text);
  *status = r.status;
  j = json_loadb(r.body, r.body_len, 0, NULL);
  ck_assert_msg(j != NULL, "%s %s: not JSON: %s", method, path, r.body);
  hc_response_free(&r);
  return j;
}

/* A check op against the view: the fields it lists (a "tentative" or
 * "pages" missing from the view reads as []), the newest the answers said,
 * and nothing the view may not have. */
static void check_view(vec_t *v, size_t k, int si, json_t *check, json_t *got,
                       int status) {
  static const char *const keys[] = {"id",   "budget",    "sinks", "lookahead",
                                     "page_size", "size", "newest", "kept",
                                     "slots", "tentative", "pages", NULL};
  const char *key;
  json_t *val;

  ck_assert_msg(status == 200, "%s op %zu: view %d", v->name, k, status);
  json_object_foreach(check, key, val) {
    json_t *have = json_object_get(got, key);
    int ok = json_equal(val, have) ||
             (have == NULL && json_is_array(val) && json_array_size(val) == 0 &&
              (strcmp(key, "tentative") == 0 || strcmp(key, "pages") == 0));
    ck_assert_msg(ok, "%s op %zu: view's %s differs: %s", v->name, k, key,
                  ht_dump(got, 0));
  }
  ck_assert_msg(json_integer_value(json_object_get(got, "newest")) ==
                        v->sess[si].newest &&
                    (size_t)json_integer_value(json_object_get(got, "size")) ==
                        json_array_size(json_object_get(got, "kept")) &&
                    strcmp(json_string_value(json_object_get(got, "id")),
                           v->sess[si].id) == 0,
                "%s op %zu: view %s", v->name, k, ht_dump(got, 0));
  json_object_foreach(got, key, val) {
    const char *const *p;
    for (p = keys; *p != NULL && strcmp(*p, key) != 0; p++)
      ;
    ck_assert_msg(*p != NULL, "%s op %zu: view has %s", v->name, k, key);
  }
}

/* An adopt op: 201 for a name the vector has not made yet, 200
 * otherwise, the answer the view (compared without its id); refusals by
 * error code. */
static void replay_adopt(ht_t *t, vec_t *v, size_t k, json_t *op) {
  const char *name = json_string_value(json_object_get(op, "session"));
  int status, si = sess_named(v, name), fresh = si < 0;
  char path[300];
  json_t *got, *want, *val;
  const char *key;

  if (fresh) {
    ck_assert_int_lt(v->nsess, MAX_SESSIONS);
    si = v->nsess;
    sess_name(v, si, name);
  }
  snprintf(path, sizeof path, "/session/%s/adopt", v->sess[si].id);
  got = send_json(t, "POST", path, json_object_get(op, "adopt"), &status);
  if (json_object_get(op, "error") != NULL) {
    const char *code = json_string_value(json_object_get(op, "error"));
    ck_assert_msg(status == ht_status_of(code), "%s op %zu: status %d, "
                  "expected %s: %s", v->name, k, status, code,
                  ht_dump(got, 0));
    ht_check_error(got, status, code, 0);
    json_decref(got);
    return;
  }
  want = json_object();
  json_object_foreach(op, key, val) {
    if (!request_key(key))
      json_object_set(want, key, val);
  }
  ck_assert_msg(status == (fresh ? 201 : 200) &&
                    strcmp(json_string_value(json_object_get(got, "id")),
                           v->sess[si].id) == 0,
                "%s op %zu: adopt %d %s", v->name, k, status,
                ht_dump(got, 0));
  json_object_del(got, "id");
  ck_assert_msg(json_equal(got, want), "%s op %zu: expected %s, got %s",
                v->name, k, ht_dump(want, 0), ht_dump(got, 1));
  v->sess[si].newest = json_integer_value(json_object_get(op, "newest"));
  if (fresh)
    v->nsess++;
  json_decref(want);
  json_decref(got);
}

/* Replays one op through its own endpoint. */
static void replay_single(ht_t *t, vec_t *v, size_t k, json_t *op) {
  char path[260];
  json_t *got, *body = NULL, *check = json_object_get(op, "check");
  json_t *expect = json_object_get(op, "expect_newest");
  int status, si;
  const char *id, *route;

  if (json_object_get(op, "adopt") != NULL) {
    replay_adopt(t, v, k, op);
    return;
  }
  si = sess_of(v, op);
  id = v->sess[si].id;

  if (check != NULL) {
    snprintf(path, sizeof path, "/session/%s", id);
    got = send_json(t, "GET", path, NULL, &status);
    check_view(v, k, si, check, got, status);
    json_decref(got);
    return;
  }
  if (json_object_get(op, "fork") != NULL) {
    int c = v->nsess;
    ck_assert_int_lt(c, MAX_SESSIONS);
    sess_name(v, c, json_string_value(json_object_get(op, "fork")));
    body = json_pack("{ss}", "into", v->sess[c].id);
    if (expect != NULL)
      json_object_set(body, "expect_newest", expect);
    snprintf(path, sizeof path, "/session/%s/fork", id);
    got = send_json(t, "POST", path, body, &status);
    json_decref(body);
    if (json_object_get(op, "error") != NULL) {
      check_answer(v, k, op, got, status, 0);
    } else {
      ck_assert_msg(status == 201, "%s op %zu: fork %d %s", v->name, k, status,
                    ht_dump(got, 0));
      v->sess[c].newest = v->sess[si].newest;
      v->nsess++;
    }
    json_decref(got);
    return;
  }
  if (json_object_get(op, "step") != NULL) {
    body = step_object(op, k);
    route = "step";
  } else if (json_object_get(op, "commit") != NULL) {
    body = json_pack("{sO}", "newest", json_object_get(op, "commit"));
    route = "commit";
  } else if (json_object_get(op, "truncate") != NULL) {
    body = json_pack("{sO}", "from", json_object_get(op, "truncate"));
    route = "truncate";
  } else {
    ck_assert_msg(json_object_get(op, "evict") != NULL, "%s op %zu: unknown "
                  "op", v->name, k);
    body = json_pack("{sO}", "budget", json_object_get(op, "evict"));
    route = "evict";
  }
  if (expect != NULL)
    json_object_set(body, "expect_newest", expect);
  snprintf(path, sizeof path, "/session/%s/%s", id, route);
  got = send_json(t, "POST", path, body, &status);
  json_decref(body);
  check_answer(v, k, op, got, status, 0);
  json_decref(got);
}

START_TEST(vector_replays_through_session_endpoints) {
  ht_t t;
  vec_t v;
  size_t k;
  json_t *op;

  ck_assert_msg(_i < nnames, "no vector %d in %s", _i, ht_vectors_dir());
  vec_load(&v, names[_i], "");
  ht_up(&t, NULL, NULL);
  vec_create(&t, &v);
  json_array_foreach(v.ops, k, op) replay_single(&t, &v, k, op);
  ht_down(&t);
  json_decref(v.root);
}
END_TEST

START_TEST(vectors_replay_interleaved_through_batches) {
  vec_t v[MAX_VECTORS];
  size_t k, most = 0, batches = 0;
  int i, status;
  ht_t t;

  ck_assert_msg(nnames > 0, "no vectors in %s", ht_vectors_dir());
  ht_up(&t, NULL, NULL);
  for (i = 0; i < nnames; i++) {
    vec_load(&v[i], names[i], "b-");
    vec_create(&t, &v[i]);
    if (json_array_size(v[i].ops) > most)
      most = json_array_size(v[i].ops);
  }
  for (k = 0; k < most; k++) {
    json_t *steps = json_array(), *body, *got;
    int owner[MAX_VECTORS], n = 0;
    for (i = 0; i < nnames; i++) {
      json_t *op = json_array_get(v[i].ops, k), *item;
      if (op == NULL || json_object_get(op, "step") == NULL)
        continue;
      item = step_object(op, k + (size_t)i);
      json_object_set_new(item, "session",
                          json_string(v[i].sess[sess_of(&v[i], op)].id));
      /* Fields a batch item may carry without changing the outcome. */
      if (i % 2 == 1) {
        json_object_set_new(item, "budget", json_integer(v[i].budget));
        json_object_set_new(item, "sinks", json_integer(v[i].sinks));
        json_object_set_new(item, "lookahead", json_integer(v[i].lookahead));
        json_object_set_new(item, "page_size", json_integer(v[i].page_size));
      }
      if (i % 3 == 0)
        json_object_set_new(item, "attention", json_pack("[ff]", 0.5, 0.25));
      json_array_append_new(steps, item);
      owner[n++] = i;
    }
    if (n > 0) {
      body = json_pack("{so}", "steps", steps);
      got = send_json(&t, "POST", "/step", body, &status);
      json_decref(body);
      ck_assert_msg(status == 200 && json_object_size(got) == 1 &&
                        json_array_size(json_object_get(got, "results")) ==
                            (size_t)n,
                    "batch %zu: %d results expected, got %d %s", k, n, status,
                    ht_dump(got, 0));
      for (i = 0; i < n; i++) {
        vec_t *w = &v[owner[i]];
        json_t *res = json_array_get(json_object_get(got, "results"), i);
        json_t *op = json_array_get(w->ops, k);
        int st = json_object_get(res, "error") != NULL
                     ? (int)json_integer_value(json_object_get(
                           json_object_get(res, "error"), "status"))
                     : 200;
        check_answer(w, k, op, res, st, 1);
      }
      json_decref(got);
      batches++;
    } else {
      json_decref(steps);
    }
    for (i = 0; i < nnames; i++) {
      json_t *op = json_array_get(v[i].ops, k);
      if (op != NULL && json_object_get(op, "step") == NULL)
        replay_single(&t, &v[i], k, op);
    }
  }
  ck_assert_uint_gt(batches, 0);
  ht_down(&t);
  for (i = 0; i < nnames; i++)
    json_decref(v[i].root);
}
END_TEST

Suite *vectors_suite(void) {
  Suite *s = suite_create("vectors");
  TCase *tc = tcase_create("replay");

  list_vectors("");
  list_vectors("rehome");
  atexit(free_names);
  tcase_set_timeout(tc, 120);
  /* One daemon per vector file; a missing directory fails loudly. */
  tcase_add_loop_test(tc, vector_replays_through_session_endpoints, 0,
                      nnames > 0 ? nnames : 1);
  tcase_add_test(tc, vectors_replay_interleaved_through_batches);
  suite_add_tcase(s, tc);
  return s;
}
