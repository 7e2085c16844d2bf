/* The C client's JSON lexing: the cursor over an answer and the steps every
 * answer shape is read with (answer.c). The small steps taken per value
 * are inline here, the rest (strings, keys, skipping, the arena) in
 * json.c. */
#ifndef EVICTD_CLIENT_JSON_H
#define EVICTD_CLIENT_JSON_H

#include "reader.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MAX_DEPTH 64 /* of values skipped: the daemon's answers are flat */

typedef struct {
  evd__reader_t *r; /* its arena takes lists and strings, its why the
                       sentence of a refusal */
  const char *s, *p, *end;
  const char *why; /* the first thing found wrong */
  int depth;
} jp_t;

/* Notes the first thing found wrong; returns -1. */
static inline int jp_fail(jp_t *j, const char *why) {
  if (j->why == NULL)
    j->why = why;
  return -1;
}

/* Skips whitespace. */
static inline void jp_ws(jp_t *j) {
  while (j->p < j->end &&
         (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t'))
    j->p++;
}

/* Consumes `ch` after any whitespace: 1 when it was there. (The daemon
 * writes no whitespace: the first test is the one that counts.) */
static inline int jp_eat(jp_t *j, char ch) {
  if (j->p < j->end && *j->p == ch) {
    j->p++;
    return 1;
  }
  jp_ws(j);
  if (j->p < j->end && *j->p == ch) {
    j->p++;
    return 1;
  }
  return 0;
}

/* Digits of a JSON number after p (at least one): the new position. */
static inline const char *jp_digits(const char *p, const char *end) {
  while (p < end && *p >= '0' && *p <= '9')
    p++;
  return p;
}

/* A JSON number that is an integer in 0..max, max below 10^19 (no sign,
 * fraction or exponent: the contract's integers never have them). The
 * digits are summed without a check per digit: up to 19 of them cannot
 * overflow 64 bits, and more are out of range whatever they say. */
static inline int jp_integer(jp_t *j, uint64_t max, uint64_t *v) {
  const char *p, *q;
  uint64_t x = 0;

  jp_ws(j);
  p = j->p;
  if (p < j->end && *p == '-')
    return jp_fail(j, "a negative number where the contract has none");
  for (q = p; q < j->end && *q >= '0' && *q <= '9'; q++)
    x = x * 10 + (uint64_t)(*q - '0');
  if (q == p)
    return jp_fail(j, "expected an integer");
  if (*p == '0' && q - p > 1)
    return jp_fail(j, "a number with a leading zero");
  if (q < j->end && (*q == '.' || *q == 'e' || *q == 'E'))
    return jp_fail(j, "a number that is not an integer");
  if (q - p > 19 || x > max)
    return jp_fail(j, "an integer out of range");
  j->p = q;
  *v = x;
  return 0;
}

static inline int jp_u32(jp_t *j, uint32_t *v) {
  uint64_t x;

  if (jp_integer(j, UINT32_MAX, &x))
    return -1;
  *v = (uint32_t)x;
  return 0;
}

/* Between the members of an array or object, after its opening bracket
 * and `count` members: 1 before the next member (past its ','), 0 after
 * the closing bracket `close`, -1 on an error (`sep` says which: a
 * member not followed by ',' or `close`). */
static inline int jp_member(jp_t *j, char close, size_t count,
                            const char *sep) {
  jp_ws(j);
  if (j->p >= j->end)
    return jp_fail(j, "the answer ends early");
  if (jp_eat(j, close))
    return 0;
  if (count > 0 && !jp_eat(j, ','))
    return jp_fail(j, sep);
  return 1;
}

/* Iterating an array after its '[': 1 before the next element, 0 after
 * the closing bracket, -1 on an error. *n counts the elements. */
static inline int jp_next_elem(jp_t *j, size_t *n) {
  int r = jp_member(j, ']', *n, "expected ',' or ']' in an array");

  if (r > 0)
    (*n)++;
  return r;
}

/* A string, decoded into dst (cap bytes, NUL-terminated, cut when longer;
 * dst may be NULL with cap 0 to skip). *len gets the decoded length, which
 * is at most the quoted length minus one. */
int evd__jp_str(jp_t *j, char *dst, size_t cap, size_t *len);

/* A string into the arena's chars (which has room: see reader.h). */
int evd__jp_pool_str(jp_t *j, const char **out);

/* true or false. */
int evd__jp_bool(jp_t *j, bool *v);

/* Iterating an object after its '{': 1 with the next key in `key` (cut
 * keys are emptied, so they match nothing) and the cursor before its
 * value, 0 after the closing brace, -1 on an error. *n counts the keys. */
int evd__jp_next_key(jp_t *j, int *n, char *key, size_t cap);

/* Any JSON value, checked and passed over (fields this client does not
 * know: a newer daemon may add some). */
int evd__jp_skip(jp_t *j);

#endif
