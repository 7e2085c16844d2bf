/* A fast path for the two request bodies every decode step sends: a step
 * ({"pos":N} or {"positions":[...]}, optionally "tentative", "commit",
 * "budget", "sinks" and "expect_newest") and a batch of such steps
 * ({"steps":[{"session":"id",...},...]}). It reads the body in one pass
 * into the scratch arrays, allocating nothing.
 *
 * It only ever says yes to bodies that the general path (jansson, then the
 * checks in step.c) accepts with the same values: anything unusual, from an
 * escape in a string or a number with a fraction to an "attention" field,
 * a duplicate key or a value out of range, makes it step aside, and the
 * general path answers, errors included. So errors have one source, and a
 * differential fuzz target (tests/fuzz) checks the agreement. */
#include <string.h>

#include "api_int.h"

typedef struct {
  const char *p, *end;
} cursor_t;

/* The deepest nesting accepted here: batch, steps, item, positions. */
#define FAST_DEPTH 4

static void ws(cursor_t *c) {
  while (c->p < c->end &&
         (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
    c->p++;
}

static int eat(cursor_t *c, char ch) {
  ws(c);
  if (c->p < c->end && *c->p == ch) {
    c->p++;
    return 1;
  }
  return 0;
}

/* A plain string without escapes: its bytes in [*s, *s + *n). */
static int plain_string(cursor_t *c, const char **s, size_t *n) {
  const char *q;

  if (!eat(c, '"'))
    return 0;
  for (q = c->p; q < c->end && *q != '"'; q++)
    if (*q == '\\' || (unsigned char)*q < 0x20)
      return 0;
  if (q == c->end)
    return 0;
  *s = c->p;
  *n = (size_t)(q - c->p);
  c->p = q + 1;
  return 1;
}

/* A non-negative integer literal up to UINT32_MAX, as JSON writes them (no
 * leading zeros), not followed by a fraction or an exponent. */
static int u32_value(cursor_t *c, uint32_t *out) {
  uint64_t v = 0;
  const char *start;

  ws(c);
  start = c->p;
  while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
    v = v * 10 + (uint64_t)(*c->p - '0');
    if (v > UINT32_MAX)
      return 0;
    c->p++;
  }
  if (c->p == start || (*start == '0' && c->p - start > 1))
    return 0;
  if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E'))
    return 0;
  *out = (uint32_t)v;
  return 1;
}

enum {
  F_POS = 1,
  F_POSITIONS = 2,
  F_BUDGET = 4,
  F_SINKS = 8,
  F_SESSION = 16,
  F_TENTATIVE = 32,
  F_COMMIT = 64,
  F_EXPECT = 128
};

/* A JSON true or false literal. */
static int boolean(cursor_t *c, uint8_t *out) {
  ws(c);
  if (c->end - c->p >= 4 && memcmp(c->p, "true", 4) == 0) {
    c->p += 4;
    *out = 1;
    return 1;
  }
  if (c->end - c->p >= 5 && memcmp(c->p, "false", 5) == 0) {
    c->p += 5;
    *out = 0;
    return 1;
  }
  return 0;
}

/* One step object, its positions appended to api->pos from *npos on. */
static int step_object(evd_api_t *api, cursor_t *c, int in_batch,
                       evd__step_t *r, size_t *npos) {
  unsigned seen = 0;
  const char *key;
  size_t klen;
  uint32_t v;

  memset(r, 0, sizeof *r);
  r->op = EVD_RP_STEP;
  r->cfg.budget = api->cfg.budget;
  r->cfg.sinks = api->cfg.sinks;
  r->cfg.lookahead = api->cfg.lookahead;
  r->cfg.page_size = api->cfg.page_size;
  r->first = (uint32_t)*npos;
  if (!eat(c, '{'))
    return 0;
  do {
    unsigned f;
    if (!plain_string(c, &key, &klen) || !eat(c, ':'))
      return 0;
    if (klen == 3 && memcmp(key, "pos", 3) == 0)
      f = F_POS;
    else if (klen == 9 && memcmp(key, "positions", 9) == 0)
      f = F_POSITIONS;
    else if (klen == 6 && memcmp(key, "budget", 6) == 0)
      f = F_BUDGET;
    else if (klen == 5 && memcmp(key, "sinks", 5) == 0)
      f = F_SINKS;
    else if (in_batch && klen == 7 && memcmp(key, "session", 7) == 0)
      f = F_SESSION;
    else if (klen == 9 && memcmp(key, "tentative", 9) == 0)
      f = F_TENTATIVE;
    else if (klen == 6 && memcmp(key, "commit", 6) == 0)
      f = F_COMMIT;
    else if (klen == 13 && memcmp(key, "expect_newest", 13) == 0)
      f = F_EXPECT;
    else
      return 0;
    if (seen & f)
      return 0;
    seen |= f;
    switch (f) {
    case F_POS:
    case F_POSITIONS:
      if (f == F_POSITIONS && !eat(c, '['))
        return 0;
      do {
        if (!u32_value(c, &v))
          return 0;
        if (r->n > 0 && v <= api->pos[*npos - 1])
          return 0;
        if (r->n >= api->cfg.max_positions)
          return 0;
        if (*npos >= api->pos_cap &&
            evd__grow(&api->pos, &api->pos_cap, *npos + 1) != 0)
          return 0;
        api->pos[(*npos)++] = v;
        r->n++;
      } while (f == F_POSITIONS && eat(c, ','));
      if (f == F_POSITIONS && !eat(c, ']'))
        return 0;
      break;
    case F_BUDGET:
      if (!u32_value(c, &r->cfg.budget) || r->cfg.budget < 1 ||
          r->cfg.budget > api->cfg.max_budget)
        return 0;
      r->given |= EVD__GIVEN_BUDGET;
      break;
    case F_SINKS:
      if (!u32_value(c, &r->cfg.sinks))
        return 0;
      r->given |= EVD__GIVEN_SINKS;
      break;
    case F_TENTATIVE:
      if (!boolean(c, &r->tentative))
        return 0;
      break;
    case F_COMMIT:
      if (!u32_value(c, &r->arg))
        return 0;
      r->has_arg = 1;
      break;
    case F_EXPECT:
      if (!u32_value(c, &r->expect))
        return 0;
      r->has_expect = 1;
      break;
    case F_SESSION:
      if (!plain_string(c, &r->id, &r->idlen) ||
          !evd_session_id_valid(r->id, r->idlen))
        return 0;
      break;
    }
  } while (eat(c, ','));
  if (!eat(c, '}'))
    return 0;
  /* At most one of pos and positions, and one unless there is a commit;
   * a session in a batch item. */
  if (((seen & F_POS) && (seen & F_POSITIONS)) ||
      (!(seen & (F_POS | F_POSITIONS)) && !(seen & F_COMMIT)) ||
      (in_batch && !(seen & F_SESSION)))
    return 0;
  if (r->cfg.sinks >= r->cfg.budget)
    return 0;
  return 1;
}

/* Room for slots and victims of a request of n positions. */
static int room_for(evd_api_t *api, size_t n) {
  size_t cap = api->slots_cap;

  if (evd__grow(&api->slots, &cap, n) != 0)
    return 0;
  api->slots_cap = cap;
  return evd__grow(&api->victims, &api->victims_cap, n) == 0;
}

int evd__fast_step(evd_api_t *api, const char *body, size_t len,
                   evd__step_t *r) {
  const char *id = r->id; /* the path's */
  size_t npos = 0, idlen = r->idlen;
  cursor_t c;

  if (body == NULL || api->cfg.max_depth < FAST_DEPTH)
    goto aside; /* (no arithmetic on a NULL body, not even + 0) */
  c.p = body;
  c.end = body + len;
  /* Read into *r itself (a copy per decode step saved); a body the
   * general path must read leaves it as a request with the path's id and
   * nothing else, which is what the general path starts from. */
  if (!step_object(api, &c, 0, r, &npos))
    goto aside;
  ws(&c);
  if (c.p != c.end || !room_for(api, npos))
    goto aside;
  r->id = id;
  r->idlen = idlen;
  return 1;
aside:
  *r = (evd__step_t){.id = id, .idlen = idlen};
  return 0;
}

int evd__fast_batch(evd_api_t *api, const char *body, size_t len,
                    size_t *nitems) {
  size_t n = 0, npos = 0, maxn = 0;
  const char *key;
  size_t klen;
  cursor_t c;

  if (body == NULL || api->cfg.max_depth < FAST_DEPTH)
    return 0;
  c.p = body;
  c.end = body + len;
  if (!eat(&c, '{') || !plain_string(&c, &key, &klen) || klen != 5 ||
      memcmp(key, "steps", 5) != 0 || !eat(&c, ':') || !eat(&c, '['))
    return 0;
  do {
    if (n >= api->cfg.max_batch)
      return 0;
    if (n >= api->items_cap) {
      size_t cap = api->items_cap ? 2 * api->items_cap : 64;
      evd__step_t *q = realloc(api->items, cap * sizeof *q);
      if (q == NULL)
        return 0;
      api->items = q;
      api->items_cap = cap;
    }
    if (!step_object(api, &c, 1, &api->items[n], &npos))
      return 0;
    if (api->items[n].n > maxn)
      maxn = api->items[n].n;
    n++;
  } while (eat(&c, ','));
  if (!eat(&c, ']') || !eat(&c, '}'))
    return 0;
  ws(&c);
  if (c.p != c.end || !room_for(api, maxn))
    return 0;
  *nitems = n;
  return 1;
}
