/* evictd-llama serve's small helpers: the clock, a request's memory, and
 * the bytes of JSON strings built by hand (a token's piece may hold part
 * of a UTF-8 character, which jansson refuses). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve.h"

double serve_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- request memory -------------------------------------------------- */

void req_unref(req_t *r) {
  if (--r->refs > 0)
    return;
  pthread_cond_destroy(&r->cv);
  free(r->prompt);
  free(r->hist);
  free(r->out);
  free(r);
}

int buf_add(char **p, size_t *len, size_t *cap, const char *s, size_t n) {
  if (*len + n + 1 > *cap) {
    size_t c = *cap ? *cap : 256;
    while (c < *len + n + 1)
      c *= 2;
    char *q = realloc(*p, c);
    if (q == NULL)
      return -1;
    *p = q;
    *cap = c;
  }
  memcpy(*p + *len, s, n);
  *len += n;
  (*p)[*len] = '\0';
  return 0;
}

/* The bytes of the UTF-8 character at s[0..n), or 0 if it is not one. */
static size_t utf8_char(const unsigned char *s, size_t n) {
  size_t k = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2
           : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
  if (k == 0 || k > n || (k == 2 && s[0] < 0xC2))
    return 0;
  for (size_t i = 1; i < k; i++)
    if ((s[i] & 0xC0) != 0x80)
      return 0;
  return k;
}

int buf_json(char **p, size_t *len, size_t *cap, const char *s, size_t n) {
  int rc = buf_add(p, len, cap, "\"", 1);
  for (size_t i = 0; i < n && rc == 0;) {
    unsigned char c = (unsigned char)s[i];
    char esc[8];
    size_t k = utf8_char((const unsigned char *)s + i, n - i);
    if (k == 0) { /* not UTF-8: U+FFFD, as decoders replace it */
      rc = buf_add(p, len, cap, "\xEF\xBF\xBD", 3);
      i++;
    } else if (c == '"' || c == '\\') {
      esc[0] = '\\';
      esc[1] = (char)c;
      rc = buf_add(p, len, cap, esc, 2);
      i++;
    } else if (c < 0x20) {
      snprintf(esc, sizeof(esc), "\\u%04x", c);
      rc = buf_add(p, len, cap, esc, 6);
      i++;
    } else {
      rc = buf_add(p, len, cap, s + i, k);
      i += k;
    }
  }
  return rc ? rc : buf_add(p, len, cap, "\"", 1);
}

int req_append(req_t *r, const char *s, size_t n) {
  return buf_add(&r->out, &r->out_len, &r->out_cap, s, n);
}

int req_append_json(req_t *r, const char *s, size_t n) {
  return buf_json(&r->out, &r->out_len, &r->out_cap, s, n);
}

/* The length of the longest prefix of s[0..n) that does not end inside a
 * UTF-8 character (a piece may hold part of one; JSON strings cannot). */
size_t utf8_whole(const char *s, size_t n) {
  size_t i = n, back = 0;
  while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
    i--, back++;
  if (i == 0)
    return n;
  unsigned char lead = (unsigned char)s[i - 1];
  size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  return need > back + 1 ? i - 1 : n;
}
