/* Growable byte buffer with a sticky out-of-memory flag, and the few JSON
 * writers the responses need. */
#include "buf.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

void evd_buf_init(evd_buf_t *b) {
  b->data = NULL;
  b->len = b->cap = 0;
  b->oom = 0;
}

void evd_buf_free(evd_buf_t *b) {
  free(b->data);
  evd_buf_init(b);
}

void evd_buf_reset(evd_buf_t *b, size_t keep) {
  if (b->cap > keep)
    evd_buf_free(b);
  b->len = 0;
  b->oom = 0;
}

/* Grows the storage to hold n more bytes; 0, or EVD_ENOMEM. */
static int grow(evd_buf_t *b, size_t n) {
  size_t cap;
  char *p;

  if (b->cap - b->len >= n)
    return 0;
  cap = b->cap ? b->cap : 256;
  while (cap - b->len < n) {
    if (cap > SIZE_MAX / 2)
      return EVD_ENOMEM;
    cap *= 2;
  }
  p = realloc(b->data, cap);
  if (p == NULL)
    return EVD_ENOMEM;
  b->data = p;
  b->cap = cap;
  return 0;
}

int evd_buf_reserve(evd_buf_t *b, size_t n) {
  if (b->oom)
    return EVD_ENOMEM;
  if (grow(b, n) != 0) {
    b->oom = 1;
    return EVD_ENOMEM;
  }
  return 0;
}

int evd_buf_room(evd_buf_t *b, size_t n) {
  return b->oom ? EVD_ENOMEM : grow(b, n);
}

void evd_buf_add(evd_buf_t *b, const void *p, size_t n) {
  /* Nothing to add: also keeps an empty buffer's NULL data out of pointer
   * arithmetic (NULL + 0 is undefined, and UBSan says so). */
  if (n == 0)
    return;
  if (evd_buf_reserve(b, n) != 0)
    return;
  memcpy(b->data + b->len, p, n);
  b->len += n;
}

void evd_buf_str(evd_buf_t *b, const char *s) {
  evd_buf_add(b, s, strlen(s));
}

void evd_buf_chr(evd_buf_t *b, char c) {
  if (evd_buf_reserve(b, 1) != 0)
    return;
  b->data[b->len++] = c;
}

/* Writes v in decimal, backwards from end; returns the first digit. */
static char *u64_digits(char *end, uint64_t v) {
  static const char pairs[201] =
      "00010203040506070809101112131415161718192021222324252627282930313233"
      "34353637383940414243444546474849505152535455565758596061626364656667"
      "6869707172737475767778798081828384858687888990919293949596979899";
  char *p = end;

  while (v >= 100) {
    unsigned r = (unsigned)(v % 100);
    v /= 100;
    *--p = pairs[2 * r + 1];
    *--p = pairs[2 * r];
  }
  if (v >= 10) {
    *--p = pairs[2 * v + 1];
    *--p = pairs[2 * v];
  } else {
    *--p = (char)('0' + v);
  }
  return p;
}

void evd_buf_u64(evd_buf_t *b, uint64_t v) {
  char tmp[20], *p = u64_digits(tmp + sizeof tmp, v);
  evd_buf_add(b, p, (size_t)(tmp + sizeof tmp - p));
}

void evd_buf_u32(evd_buf_t *b, uint32_t v) {
  evd_buf_u64(b, v);
}

void evd_buf_u32_array(evd_buf_t *b, const uint32_t *v, size_t n) {
  size_t i;
  char *out;

  /* 10 digits and a comma per value, plus the brackets. */
  if (evd_buf_reserve(b, n * 11 + 2) != 0)
    return;
  out = b->data + b->len;
  *out++ = '[';
  for (i = 0; i < n; i++) {
    char tmp[20], *p = u64_digits(tmp + sizeof tmp, v[i]);
    size_t len = (size_t)(tmp + sizeof tmp - p);
    if (i > 0)
      *out++ = ',';
    memcpy(out, p, len);
    out += len;
  }
  *out++ = ']';
  b->len = (size_t)(out - b->data);
}

void evd_buf_u32_seq(evd_buf_t *b, const uint32_t *v, uint32_t start,
                     size_t n, int lead_comma) {
  size_t i;
  char *out;

  if (n == 0 || evd_buf_reserve(b, n * 11 + 1) != 0)
    return;
  out = b->data + b->len;
  for (i = 0; i < n; i++) {
    char tmp[20], *p = u64_digits(tmp + sizeof tmp,
                                  v != NULL ? v[i] : start + (uint32_t)i);
    size_t len = (size_t)(tmp + sizeof tmp - p);
    if (i > 0 || lead_comma)
      *out++ = ',';
    memcpy(out, p, len);
    out += len;
  }
  b->len = (size_t)(out - b->data);
}

size_t evd_utf8_len(const unsigned char *p, size_t n) {
  size_t len, i;
  uint32_t cp;

  if (p[0] < 0x80)
    return 1;
  if (p[0] >= 0xc2 && p[0] <= 0xdf) {
    len = 2;
    cp = p[0] & 0x1f;
  } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
    len = 3;
    cp = p[0] & 0x0f;
  } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
    len = 4;
    cp = p[0] & 0x07;
  } else {
    return 0;
  }
  if (n < len)
    return 0;
  for (i = 1; i < len; i++) {
    if ((p[i] & 0xc0) != 0x80)
      return 0;
    cp = cp << 6 | (p[i] & 0x3f);
  }
  if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
      (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
    return 0;
  return len;
}

void evd_buf_json_str(evd_buf_t *b, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0, len;

  evd_buf_chr(b, '"');
  while (i < n) {
    unsigned char c = p[i];
    if (c == '"' || c == '\\') {
      evd_buf_chr(b, '\\');
      evd_buf_chr(b, (char)c);
      i++;
    } else if (c < 0x20) {
      char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
      evd_buf_add(b, esc, sizeof esc);
      i++;
    } else if ((len = evd_utf8_len(p + i, n - i)) > 0) {
      evd_buf_add(b, p + i, len);
      i += len;
    } else {
      /* Not UTF-8 (a client's bytes, or a cut through a character):
       * JSON text must be, so write U+FFFD instead of the byte. */
      evd_buf_add(b, "\\ufffd", 6);
      i++;
    }
  }
  evd_buf_chr(b, '"');
}
