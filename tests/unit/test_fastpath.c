/* The fast path against the general path: for randomly generated step and
 * batch bodies (expect_newest among their fields), valid and subtly
 * broken, whenever the fast path accepts a body the general path (jansson
 * and step.c's checks) must accept it too, with exactly the same values.
 * White-box: it calls the evd__ functions. */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../server/api_int.h"
#include "check_main.h"

static uint64_t rng_state;

static uint64_t rnd(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

static unsigned pick(unsigned n) {
  return (unsigned)(rnd() % n);
}

typedef struct {
  char s[8192];
  size_t n;
} text_t;

static void put(text_t *t, const char *s) {
  size_t k = strlen(s);
  if (t->n + k < sizeof t->s) {
    memcpy(t->s + t->n, s, k);
    t->n += k;
  }
}

static void ws(text_t *t) {
  static const char *const w[] = {"", "", "", " ", "\n", "\t ", "\r\n"};
  put(t, w[pick(7)]);
}

/* A number as a client might write it, sometimes in forms that are not
 * plain unsigned integers. */
static void number(text_t *t, uint32_t base) {
  char b[64];
  switch (pick(40)) {
  case 0: snprintf(b, sizeof b, "%u.0", base); break;
  case 1: snprintf(b, sizeof b, "%ue0", base); break;
  case 2: snprintf(b, sizeof b, "-%u", base); break;
  case 3: snprintf(b, sizeof b, "0%u", base); break;
  case 4: snprintf(b, sizeof b, "4294967296"); break;
  case 5: snprintf(b, sizeof b, "99999999999999999999"); break;
  case 6: snprintf(b, sizeof b, "\"%u\"", base); break;
  case 7: snprintf(b, sizeof b, "4294967295"); break;
  case 8: snprintf(b, sizeof b, "0"); break;
  case 9: snprintf(b, sizeof b, "%uE2", base); break;
  default: snprintf(b, sizeof b, "%u", base); break;
  }
  put(t, b);
}

static void key(text_t *t, const char *k) {
  char b[64];
  if (pick(60) == 0)
    snprintf(b, sizeof b, "\"\\u0070%s\"", k + 1); /* an escaped letter */
  else
    snprintf(b, sizeof b, "\"%s\"", k);
  put(t, b);
  ws(t);
  put(t, ":");
  ws(t);
}

static void session_id(text_t *t) {
  static const char *const ids[] = {
      "\"a\"", "\"seq-1\"", "\"s.2_~x\"", "\"\"", "\"a b\"", "\"a\\/b\"",
      "\"\\u0061\"", "\"x\xc3\xa9\"", "17", "null"};
  unsigned i = pick(40);
  put(t, i < 10 ? ids[i] : "\"s42\"");
}

/* One step object; in a batch, with a "session". */
static void step_object(text_t *t, int in_batch) {
  const char *fields[12];
  unsigned nf = 0, i, j;
  uint32_t p = (uint32_t)pick(100);

  if (in_batch && pick(30) != 0)
    fields[nf++] = "session";
  switch (pick(12)) {
  case 0: break;                                   /* neither */
  case 1: fields[nf++] = "pos"; fields[nf++] = "positions"; break;
  case 2: case 3: case 4: fields[nf++] = "positions"; break;
  default: fields[nf++] = "pos"; break;
  }
  if (pick(4) == 0)
    fields[nf++] = "budget";
  if (pick(5) == 0)
    fields[nf++] = "sinks";
  if (pick(25) == 0)
    fields[nf++] = "attention";
  if (pick(4) == 0)
    fields[nf++] = "tentative";
  if (pick(4) == 0)
    fields[nf++] = "commit";
  if (pick(3) == 0)
    fields[nf++] = "expect_newest";
  if (pick(20) == 0)
    fields[nf++] = pick(2) ? "lookahead" : "page_size";
  if (pick(40) == 0)
    fields[nf++] = "extra";
  if (nf > 0 && pick(40) == 0)
    fields[nf++] = fields[0]; /* a duplicate key */
  for (i = 0; i + 1 < nf; i++) { /* shuffle */
    j = i + pick(nf - i);
    const char *x = fields[i];
    fields[i] = fields[j];
    fields[j] = x;
  }
  put(t, "{");
  for (i = 0; i < nf; i++) {
    if (i > 0) {
      ws(t);
      put(t, ",");
    }
    ws(t);
    key(t, fields[i]);
    if (strcmp(fields[i], "session") == 0) {
      session_id(t);
    } else if (strcmp(fields[i], "pos") == 0) {
      number(t, p + 1);
    } else if (strcmp(fields[i], "positions") == 0) {
      unsigned k, len = pick(8);
      put(t, "[");
      for (k = 0; k < len; k++) {
        if (k > 0)
          put(t, ",");
        ws(t);
        p += pick(6) == 0 ? 0 : 1 + pick(3); /* sometimes not increasing */
        number(t, p);
      }
      put(t, "]");
    } else if (strcmp(fields[i], "budget") == 0) {
      number(t, pick(8));
    } else if (strcmp(fields[i], "sinks") == 0) {
      number(t, pick(5));
    } else if (strcmp(fields[i], "tentative") == 0) {
      static const char *const b[] = {"true", "false", "\"true\"", "1",
                                      "null", "tru", "False"};
      unsigned k = pick(20);
      put(t, b[k < 7 ? k : k % 2]);
    } else if (strcmp(fields[i], "commit") == 0 ||
               strcmp(fields[i], "expect_newest") == 0) {
      number(t, p);
    } else if (strcmp(fields[i], "lookahead") == 0 ||
               strcmp(fields[i], "page_size") == 0) {
      number(t, pick(5));
    } else if (strcmp(fields[i], "attention") == 0) {
      put(t, pick(2) ? "[0.5,0.25]" : "null");
    } else {
      put(t, "1");
    }
  }
  ws(t);
  put(t, "}");
}

/* Sometimes damages a finished body. */
static void mutate(text_t *t) {
  switch (pick(12)) {
  case 0:
    if (t->n > 0)
      t->n = pick((unsigned)t->n); /* truncated */
    break;
  case 1:
    if (t->n > 0)
      t->s[pick((unsigned)t->n)] = (char)pick(256); /* one byte changed */
    break;
  case 2:
    put(t, pick(2) ? " x" : "{}"); /* trailing garbage */
    break;
  default:
    break;
  }
}

typedef struct {
  evd__step_t r;
  uint32_t pos[64];
} copy_t;

static evd_api_t *make_api(void) {
  evd_config_t cfg;
  evd_api_t *api;

  evd_config_defaults(&cfg);
  cfg.max_budget = 6; /* small limits, so that bounds get hit */
  cfg.budget = 4;
  cfg.sinks = 1;
  cfg.max_positions = 5;
  cfg.max_batch = 3;
  ck_assert_int_eq(evd_api_new(&api, &cfg), 0);
  return api;
}

static void same(const evd_api_t *api, const copy_t *fast,
                 const evd__step_t *slow, const text_t *t, int in_batch) {
  ck_assert_msg(fast->r.n == slow->n && fast->r.op == slow->op &&
                    memcmp(&fast->r.cfg, &slow->cfg, sizeof slow->cfg) == 0 &&
                    fast->r.tentative == slow->tentative &&
                    fast->r.has_arg == slow->has_arg &&
                    (!slow->has_arg || fast->r.arg == slow->arg) &&
                    fast->r.has_expect == slow->has_expect &&
                    (!slow->has_expect || fast->r.expect == slow->expect) &&
                    memcmp(fast->pos, api->pos + slow->first,
                           slow->n * sizeof(uint32_t)) == 0,
                "fast and general paths read different values from: %.*s",
                (int)t->n, t->s);
  if (in_batch)
    ck_assert_msg(fast->r.idlen == slow->idlen &&
                      memcmp(fast->r.id, slow->id, slow->idlen) == 0,
                  "different session ids from: %.*s", (int)t->n, t->s);
}

START_TEST(fast_step_agrees_with_general_path) {
  evd_api_t *api = make_api();
  const char *env = getenv("EVD_SEED");
  uint64_t seed = env != NULL ? strtoull(env, NULL, 0) : 7;
  long i, accepted = 0, with_expect = 0;

  rng_state = seed;
  for (i = 0; i < 100000; i++) {
    text_t t = {.n = 0};
    evd__step_t r = {.id = "x", .idlen = 1}, slow = {.id = "x", .idlen = 1};
    evd_request_t req = {.method = EVD_M_POST};
    const char *msg;
    copy_t fast;
    json_t *root = NULL;
    evd_apierr_t e;

    ws(&t);
    step_object(&t, 0);
    ws(&t);
    mutate(&t);
    if (!evd__fast_step(api, t.s, t.n, &r)) {
      /* Stepping aside leaves the request as the general path starts it:
       * the path's id and nothing else. */
      ck_assert(r.id[0] == 'x' && r.idlen == 1 && r.n == 0 && r.op == 0 &&
                !r.has_arg && !r.tentative && !r.given && !r.has_expect);
      continue;
    }
    accepted++;
    with_expect += r.has_expect;
    fast.r = r;
    ck_assert_uint_le(r.n, 64);
    memcpy(fast.pos, api->pos + r.first, r.n * sizeof(uint32_t));
    req.body = t.s;
    req.body_len = t.n;
    e = evd__parse_body(api, &req, 0, NULL, &root, &msg);
    if (e == EVD_AE_OK)
      e = evd__step_parse(api, root, 0, &slow, &msg);
    ck_assert_msg(e == EVD_AE_OK, "seed %" PRIu64 ": fast path accepted, "
                  "general path says %s: %.*s", seed, evd_apierr_code(e),
                  (int)t.n, t.s);
    same(api, &fast, &slow, &t, 0);
    json_decref(root);
  }
  /* Both outcomes must be common, or the generator tests nothing; and the
   * precondition must be among what the fast path reads. */
  ck_assert_int_gt(accepted, 20000);
  ck_assert_int_lt(accepted, 90000);
  ck_assert_int_gt(with_expect, 5000);
  evd_api_free(api);
}
END_TEST

START_TEST(fast_batch_agrees_with_general_path) {
  evd_api_t *api = make_api();
  const char *env = getenv("EVD_SEED");
  uint64_t seed = env != NULL ? strtoull(env, NULL, 0) : 11;
  long i, accepted = 0;
  static copy_t fast[8];

  rng_state = seed;
  for (i = 0; i < 50000; i++) {
    text_t t = {.n = 0};
    evd_request_t req = {.method = EVD_M_POST};
    unsigned k, nitems = 1 + pick(4);
    size_t n = 0;
    const char *msg;
    json_t *root = NULL, *steps;
    evd_apierr_t e;

    ws(&t);
    put(&t, "{");
    ws(&t);
    key(&t, pick(50) ? "steps" : "stepz");
    put(&t, "[");
    for (k = 0; k < nitems; k++) {
      if (k > 0)
        put(&t, ",");
      ws(&t);
      step_object(&t, 1);
    }
    put(&t, "]");
    ws(&t);
    put(&t, "}");
    mutate(&t);
    if (!evd__fast_batch(api, t.s, t.n, &n))
      continue;
    accepted++;
    ck_assert_uint_le(n, 8);
    for (k = 0; k < n; k++) {
      fast[k].r = api->items[k];
      ck_assert_uint_le(fast[k].r.n, 64);
      memcpy(fast[k].pos, api->pos + fast[k].r.first,
             fast[k].r.n * sizeof(uint32_t));
    }
    req.body = t.s;
    req.body_len = t.n;
    e = evd__parse_body(api, &req, 0, NULL, &root, &msg);
    ck_assert_msg(e == EVD_AE_OK, "seed %" PRIu64 ": batch body refused by "
                  "the general path: %.*s", seed, (int)t.n, t.s);
    steps = json_object_get(root, "steps");
    ck_assert_msg(json_object_size(root) == 1 && json_is_array(steps) &&
                      json_array_size(steps) == n &&
                      n <= api->cfg.max_batch,
                  "seed %" PRIu64 ": batch shape differs: %.*s", seed,
                  (int)t.n, t.s);
    for (k = 0; k < n; k++) {
      evd__step_t slow = {0};
      e = evd__step_parse(api, json_array_get(steps, k), 1, &slow, &msg);
      ck_assert_msg(e == EVD_AE_OK, "seed %" PRIu64 ": item %u: general path "
                    "says %s: %.*s", seed, k, evd_apierr_code(e), (int)t.n,
                    t.s);
      same(api, &fast[k], &slow, &t, 1);
    }
    json_decref(root);
  }
  ck_assert_int_gt(accepted, 2000);
  evd_api_free(api);
}
END_TEST

static Suite *fastpath_suite(void) {
  Suite *s = suite_create("fastpath");
  TCase *tc = tcase_create("differential");

  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, fast_step_agrees_with_general_path);
  tcase_add_test(tc, fast_batch_agrees_with_general_path);
  suite_add_tcase(s, tc);
  return s;
}

EVD_CHECK_MAIN(fastpath_suite())
