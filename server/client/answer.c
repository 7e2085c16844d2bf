/* The C client's answer parser: the daemon's JSON answers read in one pass
 * straight into the client's pools, with no tree and no allocation. Exact:
 * anything that is not JSON, or not the contract's shape, is refused.
 *
 * Why not jansson, which the daemon uses: parsing one 256-item batch answer
 * (15.8 KB) into a jansson tree took 513 us on the development machine,
 * several times the daemon's own time for the whole batch (~90 us), because
 * jansson allocates every object, key and integer. This parser reads the
 * same answer in a few microseconds; `make bench-client` prints both. */
#include "client_int.h"

#include <stdio.h>
#include <string.h>

#define MAX_DEPTH 64 /* of values skipped: the daemon's answers are flat */

typedef struct {
  evd_client_t *c;
  const char *s, *p, *end;
  const char *why; /* the first thing found wrong */
  int depth;
} jp_t;

static int fail(jp_t *j, const char *why) {
  if (j->why == NULL)
    j->why = why;
  return -1;
}

static inline void ws(jp_t *j) {
  while (j->p < j->end &&
         (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t'))
    j->p++;
}

/* Consumes `ch` after any whitespace: 1 when it was there. (The daemon
 * writes no whitespace: the first test is the one that counts.) */
static inline int eat(jp_t *j, char ch) {
  if (j->p < j->end && *j->p == ch) {
    j->p++;
    return 1;
  }
  ws(j);
  if (j->p < j->end && *j->p == ch) {
    j->p++;
    return 1;
  }
  return 0;
}

static int hex4(jp_t *j, unsigned *v) {
  int i;

  *v = 0;
  if (j->end - j->p < 4)
    return fail(j, "a truncated \\u escape");
  for (i = 0; i < 4; i++) {
    char ch = *j->p++;
    *v <<= 4;
    if (ch >= '0' && ch <= '9')
      *v |= (unsigned)(ch - '0');
    else if (ch >= 'a' && ch <= 'f')
      *v |= (unsigned)(ch - 'a' + 10);
    else if (ch >= 'A' && ch <= 'F')
      *v |= (unsigned)(ch - 'A' + 10);
    else
      return fail(j, "a bad \\u escape");
  }
  return 0;
}

/* Appends one byte to dst when it fits in cap - 1 (room for the NUL). */
#define PUT(ch)                                                                \
  do {                                                                         \
    if (n + 1 < cap)                                                           \
      dst[n] = (char)(ch);                                                     \
    n++;                                                                       \
  } while (0)

/* A string, decoded into dst (cap bytes, NUL-terminated, cut when longer;
 * dst may be NULL with cap 0 to skip). *len gets the decoded length, which
 * is at most the quoted length minus one. */
static int str(jp_t *j, char *dst, size_t cap, size_t *len) {
  size_t n = 0;

  if (!eat(j, '"'))
    return fail(j, "expected a string");
  for (;;) {
    unsigned char ch;
    unsigned cp, lo;

    if (j->p >= j->end)
      return fail(j, "a string that does not end");
    ch = (unsigned char)*j->p++;
    if (ch == '"')
      break;
    if (ch < 0x20)
      return fail(j, "a control character in a string");
    if (ch != '\\') {
      PUT(ch);
      continue;
    }
    if (j->p >= j->end)
      return fail(j, "a string that does not end");
    switch (*j->p++) {
    case '"': PUT('"'); break;
    case '\\': PUT('\\'); break;
    case '/': PUT('/'); break;
    case 'b': PUT('\b'); break;
    case 'f': PUT('\f'); break;
    case 'n': PUT('\n'); break;
    case 'r': PUT('\r'); break;
    case 't': PUT('\t'); break;
    case 'u':
      if (hex4(j, &cp))
        return -1;
      if (cp >= 0xDC00 && cp <= 0xDFFF)
        return fail(j, "a lone low surrogate");
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
          return fail(j, "a lone high surrogate");
        j->p += 2;
        if (hex4(j, &lo))
          return -1;
        if (lo < 0xDC00 || lo > 0xDFFF)
          return fail(j, "a lone high surrogate");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      }
      if (cp < 0x80) {
        PUT(cp);
      } else if (cp < 0x800) {
        PUT(0xC0 | (cp >> 6));
        PUT(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        PUT(0xE0 | (cp >> 12));
        PUT(0x80 | ((cp >> 6) & 0x3F));
        PUT(0x80 | (cp & 0x3F));
      } else {
        PUT(0xF0 | (cp >> 18));
        PUT(0x80 | ((cp >> 12) & 0x3F));
        PUT(0x80 | ((cp >> 6) & 0x3F));
        PUT(0x80 | (cp & 0x3F));
      }
      break;
    default:
      return fail(j, "a bad escape in a string");
    }
  }
  if (cap > 0)
    dst[n < cap ? n : cap - 1] = '\0';
  if (len != NULL)
    *len = n;
  return 0;
}

/* A string into the client's char pool (which has room: see client_int.h). */
static int pool_str(jp_t *j, const char **out) {
  evd_client_t *c = j->c;
  char *dst = c->chars + c->chars_len;
  size_t cap = c->chars_cap - c->chars_len, n;

  if (str(j, dst, cap, &n))
    return -1;
  if (n + 1 > cap)
    return fail(j, "strings longer than the answer"); /* cannot happen */
  c->chars_len += n + 1;
  *out = dst;
  return 0;
}

/* Digits of a JSON number after p (at least one): the new position. */
static const char *digits(const char *p, const char *end) {
  while (p < end && *p >= '0' && *p <= '9')
    p++;
  return p;
}

/* A JSON number that is an integer in 0..max (no sign, fraction or
 * exponent: the contract's integers never have them). */
static inline int integer(jp_t *j, uint64_t max, uint64_t *v) {
  const char *p, *q;
  uint64_t x = 0;
  int big = 0;

  ws(j);
  p = j->p;
  if (p < j->end && *p == '-')
    return fail(j, "a negative number where the contract has none");
  q = digits(p, j->end);
  if (q == p)
    return fail(j, "expected an integer");
  if (*p == '0' && q - p > 1)
    return fail(j, "a number with a leading zero");
  if (q < j->end && (*q == '.' || *q == 'e' || *q == 'E'))
    return fail(j, "a number that is not an integer");
  for (; p < q; p++) {
    unsigned d = (unsigned)(*p - '0');
    if (x > (max - d) / 10)
      big = 1;
    else
      x = x * 10 + d;
  }
  if (big)
    return fail(j, "an integer out of range");
  j->p = q;
  *v = x;
  return 0;
}

static int u32(jp_t *j, uint32_t *v) {
  uint64_t x;

  if (integer(j, UINT32_MAX, &x))
    return -1;
  *v = (uint32_t)x;
  return 0;
}

static int literal(jp_t *j, const char *word) {
  size_t n = strlen(word);

  if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0)
    return fail(j, "not a JSON value");
  j->p += n;
  return 0;
}

static int boolean(jp_t *j, bool *v) {
  ws(j);
  if (j->p < j->end && *j->p == 't') {
    *v = true;
    return literal(j, "true");
  }
  if (j->p < j->end && *j->p == 'f') {
    *v = false;
    return literal(j, "false");
  }
  return fail(j, "expected true or false");
}

/* Iterating an object after its '{': 1 with the next key in `key` (cut
 * keys are emptied, so they match nothing) and the cursor before its
 * value, 0 after the closing brace, -1 on an error. *n counts the keys. */
static int next_key(jp_t *j, int *n, char *key, size_t cap) {
  size_t len;

  ws(j);
  if (j->p >= j->end)
    return fail(j, "the answer ends early");
  if (eat(j, '}'))
    return 0;
  if (*n > 0 && !eat(j, ','))
    return fail(j, "expected ',' or '}' in an object");
  ws(j);
  if (j->p < j->end && *j->p == '"') {
    /* The usual key: short, no escapes; copied without decoding. */
    const char *q = j->p + 1, *stop = j->end;
    if ((size_t)(stop - q) > cap)
      stop = q + cap;
    while (q < stop && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20)
      q++;
    if (q < stop && *q == '"') {
      len = (size_t)(q - j->p - 1);
      memcpy(key, j->p + 1, len);
      key[len] = '\0';
      j->p = q + 1;
      goto colon;
    }
  }
  if (str(j, key, cap, &len))
    return -1;
  if (len >= cap)
    key[0] = '\0';
colon:
  if (!eat(j, ':'))
    return fail(j, "expected ':' after a key");
  (*n)++;
  return 1;
}

/* Iterating an array after its '[': 1 before the next element, 0 after
 * the closing bracket, -1 on an error. */
static inline int next_elem(jp_t *j, size_t *n) {
  ws(j);
  if (j->p >= j->end)
    return fail(j, "the answer ends early");
  if (eat(j, ']'))
    return 0;
  if (*n > 0 && !eat(j, ','))
    return fail(j, "expected ',' or ']' in an array");
  (*n)++;
  return 1;
}

/* Any JSON value, checked and passed over (fields this client does not
 * know: a newer daemon may add some). */
static int skip(jp_t *j) {
  char key[1];
  int r, nk = 0;
  size_t ne = 0;
  const char *p;

  ws(j);
  if (j->p >= j->end)
    return fail(j, "the answer ends early");
  switch (*j->p) {
  case '{':
  case '[':
    if (++j->depth > MAX_DEPTH)
      return fail(j, "values nested too deeply");
    if (*j->p++ == '{') {
      while ((r = next_key(j, &nk, key, sizeof key)) > 0)
        if (skip(j))
          return -1;
    } else {
      while ((r = next_elem(j, &ne)) > 0)
        if (skip(j))
          return -1;
    }
    j->depth--;
    return r;
  case '"':
    return str(j, NULL, 0, NULL);
  case 't':
    return literal(j, "true");
  case 'f':
    return literal(j, "false");
  case 'n':
    return literal(j, "null");
  default:
    p = j->p;
    if (*p == '-')
      p++;
    if (p >= j->end || *p < '0' || *p > '9')
      return fail(j, "not a JSON value");
    p = *p == '0' ? p + 1 : digits(p, j->end);
    if (p < j->end && *p == '.') {
      const char *q = digits(p + 1, j->end);
      if (q == p + 1)
        return fail(j, "a number without digits after '.'");
      p = q;
    }
    if (p < j->end && (*p == 'e' || *p == 'E')) {
      const char *q;
      p++;
      if (p < j->end && (*p == '+' || *p == '-'))
        p++;
      q = digits(p, j->end);
      if (q == p)
        return fail(j, "a number without exponent digits");
      p = q;
    }
    j->p = p;
    return 0;
  }
}

/* An array of integers 0..4294967295 into the client's u32 pool. */
static int list(jp_t *j, evd_list_t *out) {
  evd_client_t *c = j->c;
  uint32_t *v = c->u32 + c->u32_len;
  size_t n = 0, room = c->u32_cap - c->u32_len;
  int r;

  out->v = NULL;
  out->n = 0;
  if (!eat(j, '['))
    return fail(j, "expected an array of integers");
  while ((r = next_elem(j, &n)) > 0) {
    if (n > room)
      return fail(j, "more numbers than the answer holds"); /* cannot */
    if (u32(j, &v[n - 1]))
      return -1;
  }
  if (r < 0)
    return -1;
  c->u32_len += n;
  if (n > 0) {
    out->v = v;
    out->n = n;
  }
  return 0;
}

/* An error object (the value of "error"). Batch items carry a status. */
static int error_obj(jp_t *j, evd_client_err_t *e, bool item) {
  char key[16];
  int r, nk = 0;
  uint64_t x;

  e->rc = EVD_CLIENT_EAPI;
  e->status = 0;
  e->code = e->message = NULL;
  e->newest = -1;
  if (!eat(j, '{'))
    return fail(j, "\"error\" is not an object");
  while ((r = next_key(j, &nk, key, sizeof key)) > 0) {
    if (strcmp(key, "code") == 0)
      r = pool_str(j, &e->code);
    else if (strcmp(key, "message") == 0)
      r = pool_str(j, &e->message);
    else if (strcmp(key, "newest") == 0) {
      r = integer(j, UINT32_MAX, &x);
      e->newest = (int64_t)x;
    } else if (strcmp(key, "status") == 0) {
      r = integer(j, 599, &x);
      e->status = (int)x;
    } else
      r = skip(j);
    if (r)
      return -1;
  }
  if (r < 0)
    return -1;
  if (e->code == NULL)
    return fail(j, "an error without \"code\"");
  if (e->message == NULL)
    return fail(j, "an error without \"message\"");
  if (item && e->status < 400)
    return fail(j, "a batch item's error without a 4xx/5xx \"status\"");
  return 0;
}

/* The bit of a list field of step, commit, truncate and evict answers, and
 * where it goes. The pages lists have no bit: a daemon without pages (or
 * older than pages_transient) leaves them out, and they stay empty. */
static evd_list_t *answer_list(evd_answer_t *a, const char *key,
                               unsigned *bit) {
  *bit = 0;
  switch (key[0]) {
  case 'v':
    if (strcmp(key, "victims") == 0)
      return *bit = EVD__F_VICTIMS, &a->victims;
    break;
  case 's':
    if (strcmp(key, "slots") == 0)
      return *bit = EVD__F_SLOTS, &a->slots;
    break;
  case 'd':
    if (strcmp(key, "dropped") == 0)
      return *bit = EVD__F_DROPPED, &a->dropped;
    break;
  case 'r':
    if (strcmp(key, "removed") == 0)
      return *bit = EVD__F_REMOVED, &a->removed;
    break;
  case 'p':
    if (strcmp(key, "pages_new") == 0)
      return &a->pages_new;
    if (strcmp(key, "pages_freed") == 0)
      return &a->pages_freed;
    if (strcmp(key, "pages_transient") == 0)
      return &a->pages_transient;
    break;
  }
  return NULL;
}

/* The object of a step, commit, truncate or evict answer, or of a batch
 * item (which may be {"error":{...}} instead: *is_err, when err is not
 * NULL). *seen gets the EVD__F_* bits of the fields present. */
static int answer_obj(jp_t *j, evd_answer_t *a, unsigned *seen,
                      evd_client_err_t *err, bool *is_err) {
  char key[24]; /* the longest key read, "pages_transient", is 15 bytes */
  int r, nk = 0;
  unsigned bit;
  evd_list_t *l;

  memset(a, 0, sizeof *a);
  *seen = 0;
  if (!eat(j, '{'))
    return fail(j, "expected an object");
  while ((r = next_key(j, &nk, key, sizeof key)) > 0) {
    if ((l = answer_list(a, key, &bit)) != NULL) {
      r = list(j, l);
      *seen |= bit;
    } else if (strcmp(key, "size") == 0) {
      r = u32(j, &a->size);
      *seen |= EVD__F_SIZE;
    } else if (strcmp(key, "newest") == 0) {
      r = u32(j, &a->newest);
      *seen |= EVD__F_NEWEST;
    } else if (strcmp(key, "replayed") == 0) {
      r = boolean(j, &a->replayed);
    } else if (err != NULL && strcmp(key, "error") == 0) {
      r = error_obj(j, err, true);
      *is_err = true;
    } else {
      r = skip(j);
    }
    if (r)
      return -1;
  }
  return r;
}

/* The first field of `required` missing from `seen`, for the message. */
static int missing(jp_t *j, unsigned required, unsigned seen) {
  static const char *const names[] = {
      "an answer without \"victims\"", "an answer without \"slots\"",
      "an answer without \"dropped\"", "an answer without \"removed\"",
      "an answer without \"size\"",    "an answer without \"newest\""};
  unsigned i;

  for (i = 0; i < sizeof names / sizeof names[0]; i++)
    if ((required & (1u << i)) && !(seen & (1u << i)))
      return fail(j, names[i]);
  return 0;
}

static void begin(jp_t *j, evd_client_t *c) {
  j->c = c;
  j->s = j->p = c->ans.p;
  j->end = c->ans.p + c->ans.len;
  j->why = NULL;
  j->depth = 0;
}

/* Checks that nothing but whitespace follows, and on failure writes what
 * and where into c->parse_msg. Returns rc (0 or -1). */
static int end(jp_t *j, int rc) {
  char excerpt[48];
  size_t at, i, n;

  if (rc == 0) {
    ws(j);
    if (j->p == j->end)
      return 0;
    fail(j, "bytes after the answer");
  }
  if (j->why == NULL)
    j->why = "not the contract's answer";
  at = (size_t)(j->p - j->s);
  n = (size_t)(j->end - j->p);
  n = n < sizeof excerpt - 1 ? n : sizeof excerpt - 1;
  for (i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)j->p[i];
    excerpt[i] = ch >= 0x20 && ch < 0x7F ? (char)ch : '.';
  }
  excerpt[n] = '\0';
  snprintf(j->c->parse_msg, sizeof j->c->parse_msg,
           "%s at byte %zu of %zu (\"%s\")", j->why, at,
           (size_t)(j->end - j->s), excerpt);
  return -1;
}

int evd__parse_answer(evd_client_t *c, unsigned required, evd_answer_t *out) {
  jp_t j;
  unsigned seen;
  int rc;

  begin(&j, c);
  rc = answer_obj(&j, out, &seen, NULL, NULL);
  if (rc == 0)
    rc = missing(&j, required, seen);
  return end(&j, rc);
}

int evd__parse_batch(evd_client_t *c, evd_batch_result_t *out, size_t n) {
  static const evd_client_err_t none = {0, 0, "", "", -1};
  char key[16];
  int r, nk = 0;
  size_t i = 0;
  bool results = false;
  jp_t j;

  begin(&j, c);
  if (!eat(&j, '{'))
    return end(&j, fail(&j, "expected an object"));
  while ((r = next_key(&j, &nk, key, sizeof key)) > 0) {
    if (strcmp(key, "results") != 0 || results) {
      if (skip(&j))
        return end(&j, -1);
      continue;
    }
    results = true;
    if (!eat(&j, '['))
      return end(&j, fail(&j, "\"results\" is not an array"));
    while ((r = next_elem(&j, &i)) > 0) {
      evd_batch_result_t *res = &out[i - 1];
      bool is_err = false;
      unsigned seen;

      if (i > n)
        return end(&j, fail(&j, "more results than the batch has items"));
      res->error = none;
      if (answer_obj(&j, &res->answer, &seen, &res->error, &is_err))
        return end(&j, -1);
      if (is_err) {
        memset(&res->answer, 0, sizeof res->answer);
        res->rc = EVD_CLIENT_EAPI;
      } else {
        if (missing(&j, EVD__F_VICTIMS | EVD__F_SLOTS | EVD__F_SIZE |
                            EVD__F_NEWEST, seen))
          return end(&j, -1);
        res->rc = 0;
      }
    }
    if (r < 0)
      return end(&j, -1);
    if (i != n)
      return end(&j, fail(&j, "fewer results than the batch has items"));
  }
  if (r < 0)
    return end(&j, -1);
  if (!results)
    return end(&j, fail(&j, "a batch answer without \"results\""));
  return end(&j, 0);
}

int evd__parse_view(evd_client_t *c, evd_view_t *out) {
  static const struct {
    const char *key;
    size_t off;
  } nums[] = {{"budget", offsetof(evd_view_t, budget)},
              {"sinks", offsetof(evd_view_t, sinks)},
              {"lookahead", offsetof(evd_view_t, lookahead)},
              {"page_size", offsetof(evd_view_t, page_size)},
              {"size", offsetof(evd_view_t, size)},
              {"newest", offsetof(evd_view_t, newest)}};
  static const struct {
    const char *key;
    size_t off;
  } lists[] = {{"kept", offsetof(evd_view_t, kept)},
               {"slots", offsetof(evd_view_t, slots)},
               {"tentative", offsetof(evd_view_t, tentative)},
               {"pages", offsetof(evd_view_t, pages)}};
  /* The bits of `seen` that must be set: id, budget, sinks, size, newest,
   * kept and slots (lookahead, page_size, tentative and pages may be
   * absent: 1, 0, [], []). */
  const unsigned required = 1u | 2u | 4u | 32u | 64u | 128u | 256u;
  static const char *const names[] = {
      "id", "budget", "sinks", "lookahead", "page_size", "size",
      "newest", "kept", "slots"};
  char key[16], *base = (char *)out;
  unsigned seen = 0, i;
  int r, nk = 0;
  jp_t j;

  memset(out, 0, sizeof *out);
  out->lookahead = 1;
  begin(&j, c);
  if (!eat(&j, '{'))
    return end(&j, fail(&j, "expected an object"));
  while ((r = next_key(&j, &nk, key, sizeof key)) > 0) {
    if (strcmp(key, "id") == 0) {
      r = pool_str(&j, &out->id);
      seen |= 1u;
      goto next;
    }
    for (i = 0; i < sizeof nums / sizeof nums[0]; i++) {
      if (strcmp(key, nums[i].key) == 0) {
        r = u32(&j, (uint32_t *)(void *)(base + nums[i].off));
        seen |= 2u << i;
        goto next;
      }
    }
    for (i = 0; i < sizeof lists / sizeof lists[0]; i++) {
      if (strcmp(key, lists[i].key) == 0) {
        r = list(&j, (evd_list_t *)(void *)(base + lists[i].off));
        seen |= 128u << i;
        goto next;
      }
    }
    r = skip(&j);
  next:
    if (r)
      return end(&j, -1);
  }
  if (r < 0)
    return end(&j, -1);
  for (i = 0; i < sizeof names / sizeof names[0]; i++) {
    if ((required & (1u << i)) && !(seen & (1u << i))) {
      snprintf(c->parse_msg, sizeof c->parse_msg,
               "a session view without \"%s\"", names[i]);
      return -1;
    }
  }
  return end(&j, 0);
}

int evd__parse_error(evd_client_t *c, evd_client_err_t *err) {
  char key[16];
  int r, nk = 0;
  bool found = false;
  jp_t j;

  begin(&j, c);
  if (!eat(&j, '{'))
    return end(&j, fail(&j, "an error answer that is not a JSON object"));
  while ((r = next_key(&j, &nk, key, sizeof key)) > 0) {
    if (strcmp(key, "error") == 0 && !found) {
      found = true;
      r = error_obj(&j, err, false);
    } else {
      r = skip(&j);
    }
    if (r)
      return end(&j, -1);
  }
  if (r < 0)
    return end(&j, -1);
  if (!found)
    return end(&j, fail(&j, "an error answer without \"error\""));
  return end(&j, 0);
}
