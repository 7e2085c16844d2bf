/* The C client's JSON lexing, its less frequent steps: strings with their
 * escapes, object keys, passing over values this client does not know, and
 * the arena answers are read into. The cursor and the per-value steps are
 * in json.h. */
#include "json.h"

#include <stdlib.h>
#include <string.h>

int evd__arena_fit(evd__arena_t *a, size_t len) {
  /* Every number of a list takes at least two bytes ("7," or "7]"), and
   * a string's decoded bytes plus its NUL at most its quoted ones. */
  size_t u32_need = len / 2 + 1, chars_need = len + 1;

  a->u32_len = a->chars_len = 0;
  if (a->u32_cap < u32_need) {
    uint32_t *p = realloc(a->u32, u32_need * 2 * sizeof *p);
    if (p == NULL)
      return -1;
    a->u32 = p;
    a->u32_cap = u32_need * 2;
  }
  if (a->chars_cap < chars_need) {
    char *p = realloc(a->chars, chars_need * 2);
    if (p == NULL)
      return -1;
    a->chars = p;
    a->chars_cap = chars_need * 2;
  }
  return 0;
}

void evd__arena_free(evd__arena_t *a) {
  free(a->u32);
  free(a->chars);
  a->u32 = NULL;
  a->chars = NULL;
  a->u32_len = a->u32_cap = a->chars_len = a->chars_cap = 0;
}

static int hex4(jp_t *j, unsigned *v) {
  int i;

  *v = 0;
  if (j->end - j->p < 4)
    return jp_fail(j, "a truncated \\u escape");
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
      return jp_fail(j, "a bad \\u escape");
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


int evd__jp_str(jp_t *j, char *dst, size_t cap, size_t *len) {
  size_t n = 0;

  if (!jp_eat(j, '"'))
    return jp_fail(j, "expected a string");
  for (;;) {
    unsigned char ch;
    unsigned cp, lo;

    if (j->p >= j->end)
      return jp_fail(j, "a string that does not end");
    ch = (unsigned char)*j->p++;
    if (ch == '"')
      break;
    if (ch < 0x20)
      return jp_fail(j, "a control character in a string");
    if (ch != '\\') {
      PUT(ch);
      continue;
    }
    if (j->p >= j->end)
      return jp_fail(j, "a string that does not end");
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
        return jp_fail(j, "a lone low surrogate");
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
          return jp_fail(j, "a lone high surrogate");
        j->p += 2;
        if (hex4(j, &lo))
          return -1;
        if (lo < 0xDC00 || lo > 0xDFFF)
          return jp_fail(j, "a lone high surrogate");
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
      return jp_fail(j, "a bad escape in a string");
    }
  }
  if (cap > 0)
    dst[n < cap ? n : cap - 1] = '\0';
  if (len != NULL)
    *len = n;
  return 0;
}

int evd__jp_pool_str(jp_t *j, const char **out) {
  evd__arena_t *a = j->r->arena;
  char *dst = a->chars + a->chars_len;
  size_t cap = a->chars_cap - a->chars_len, n;

  if (evd__jp_str(j, dst, cap, &n))
    return -1;
  if (n + 1 > cap)
    return jp_fail(j, "strings longer than the answer"); /* cannot happen */
  a->chars_len += n + 1;
  *out = dst;
  return 0;
}

static int literal(jp_t *j, const char *word) {
  size_t n = strlen(word);

  if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0)
    return jp_fail(j, "not a JSON value");
  j->p += n;
  return 0;
}

int evd__jp_bool(jp_t *j, bool *v) {
  jp_ws(j);
  if (j->p < j->end && *j->p == 't') {
    *v = true;
    return literal(j, "true");
  }
  if (j->p < j->end && *j->p == 'f') {
    *v = false;
    return literal(j, "false");
  }
  return jp_fail(j, "expected true or false");
}

int evd__jp_next_key(jp_t *j, int *n, char *key, size_t cap) {
  size_t len;
  int r;

  if ((r = jp_member(j, '}', (size_t)*n,
                     "expected ',' or '}' in an object")) <= 0)
    return r;
  jp_ws(j);
  if (j->p < j->end && *j->p == '"') {
    /* The usual key: short, no escapes; copied as it is scanned (a call
     * of memcpy costs more than these few bytes). A key that is longer
     * than cap, or has escapes, goes the long way. */
    const char *q = j->p + 1, *stop = j->end;
    if ((size_t)(stop - q) > cap)
      stop = q + cap;
    for (len = 0; q < stop && *q != '"' && *q != '\\' &&
                  (unsigned char)*q >= 0x20;
         q++)
      key[len++] = *q;
    if (q < stop && *q == '"') {
      key[len] = '\0';
      j->p = q + 1;
      goto colon;
    }
  }
  if (evd__jp_str(j, key, cap, &len))
    return -1;
  if (len >= cap)
    key[0] = '\0';
colon:
  if (!jp_eat(j, ':'))
    return jp_fail(j, "expected ':' after a key");
  (*n)++;
  return 1;
}

int evd__jp_skip(jp_t *j) {
  char key[1];
  int r, nk = 0;
  size_t ne = 0;
  const char *p;

  jp_ws(j);
  if (j->p >= j->end)
    return jp_fail(j, "the answer ends early");
  switch (*j->p) {
  case '{':
  case '[':
    if (++j->depth > MAX_DEPTH)
      return jp_fail(j, "values nested too deeply");
    if (*j->p++ == '{') {
      while ((r = evd__jp_next_key(j, &nk, key, sizeof key)) > 0)
        if (evd__jp_skip(j))
          return -1;
    } else {
      while ((r = jp_next_elem(j, &ne)) > 0)
        if (evd__jp_skip(j))
          return -1;
    }
    j->depth--;
    return r;
  case '"':
    return evd__jp_str(j, NULL, 0, NULL);
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
      return jp_fail(j, "not a JSON value");
    p = *p == '0' ? p + 1 : jp_digits(p, j->end);
    if (p < j->end && *p == '.') {
      const char *q = jp_digits(p + 1, j->end);
      if (q == p + 1)
        return jp_fail(j, "a number without digits after '.'");
      p = q;
    }
    if (p < j->end && (*p == 'e' || *p == 'E')) {
      const char *q;
      p++;
      if (p < j->end && (*p == '+' || *p == '-'))
        p++;
      q = jp_digits(p, j->end);
      if (q == p)
        return jp_fail(j, "a number without exponent digits");
      p = q;
    }
    j->p = p;
    return 0;
  }
}
