/* The .npy reader: the magic and version, the header (a Python dict literal
 * with exactly 'descr', 'fortran_order' and 'shape'), and row reads by pread
 * with in-place decoding. Byte order is decoded explicitly, so the reader
 * works on any host. */
#include "npy.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"

static int fail(int err, char *msg, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(int err, char *msg, size_t len, const char *fmt, ...) {
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, len, fmt, ap);
  va_end(ap);
  return err;
}

/* Reads exactly n bytes at off. EVD_ECORRUPT when the file ends first. */
static int pread_all(int fd, void *buf, size_t n, uint64_t off) {
  unsigned char *p = buf;

  while (n > 0) {
    size_t chunk = n > (size_t)1 << 30 ? (size_t)1 << 30 : n;
    ssize_t r = pread(fd, p, chunk, (off_t)off);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return EVD_EIO;
    }
    if (r == 0)
      return EVD_ECORRUPT;
    p += r;
    n -= (size_t)r;
    off += (uint64_t)r;
  }
  return 0;
}

/* ---- the header: a small parser for the one dict literal numpy writes -- */

typedef struct {
  const char *s, *end;
} cursor_t;

static void skip_ws(cursor_t *c) {
  while (c->s < c->end && (*c->s == ' ' || *c->s == '\t' || *c->s == '\n' ||
                           *c->s == '\r'))
    c->s++;
}

/* Consumes `ch` (after blanks) and returns 1, or returns 0. */
static int eat(cursor_t *c, char ch) {
  skip_ws(c);
  if (c->s < c->end && *c->s == ch) {
    c->s++;
    return 1;
  }
  return 0;
}

/* A quoted string into out (at most len - 1 bytes, else refused). */
static int parse_str(cursor_t *c, char *out, size_t len) {
  char q;
  size_t n = 0;

  skip_ws(c);
  if (c->s >= c->end || (*c->s != '\'' && *c->s != '"'))
    return -1;
  q = *c->s++;
  while (c->s < c->end && *c->s != q) {
    if (*c->s == '\\' && c->s + 1 < c->end)
      c->s++;
    if (n + 1 >= len)
      return -1;
    out[n++] = *c->s++;
  }
  if (c->s >= c->end)
    return -1;
  c->s++;
  out[n] = '\0';
  return 0;
}

static int parse_word(cursor_t *c, const char *word) {
  size_t n = strlen(word);

  skip_ws(c);
  if ((size_t)(c->end - c->s) < n || memcmp(c->s, word, n) != 0)
    return 0;
  c->s += n;
  return 1;
}

/* A non-negative integer (Python 2 numpy wrote "3L"). */
static int parse_uint(cursor_t *c, uint64_t *v) {
  uint64_t x = 0;
  int digits = 0;

  skip_ws(c);
  while (c->s < c->end && *c->s >= '0' && *c->s <= '9') {
    unsigned d = (unsigned)(*c->s - '0');
    if (x > (UINT64_MAX - d) / 10)
      return -1;
    x = x * 10 + d;
    c->s++;
    digits++;
  }
  if (digits == 0)
    return -1;
  if (c->s < c->end && *c->s == 'L')
    c->s++;
  *v = x;
  return 0;
}

static int parse_shape(cursor_t *c, evd_npy_t *f, char *msg, size_t len) {
  f->ndim = 0;
  if (!eat(c, '('))
    return fail(EVD_ECORRUPT, msg, len, "bad header: 'shape' is not a tuple");
  while (!eat(c, ')')) {
    uint64_t v;
    if (f->ndim == EVD_NPY_MAX_DIMS)
      return fail(EVD_ECORRUPT, msg, len,
                  "bad header: shape has more than %d dimensions",
                  EVD_NPY_MAX_DIMS);
    if (parse_uint(c, &v) < 0)
      return fail(EVD_ECORRUPT, msg, len,
                  "bad header: 'shape' holds something other than "
                  "non-negative integers");
    f->shape[f->ndim++] = v;
    if (!eat(c, ',')) {
      if (!eat(c, ')'))
        return fail(EVD_ECORRUPT, msg, len, "bad header: unterminated shape");
      break;
    }
  }
  return 0;
}

static int parse_descr(cursor_t *c, evd_npy_t *f, char *msg, size_t len) {
  char d[32];

  skip_ws(c);
  if (c->s < c->end && *c->s == '[')
    return fail(EVD_ECORRUPT, msg, len,
                "unsupported dtype: a structured array (want '<f4' float32 "
                "or '<f2' float16)");
  if (parse_str(c, d, sizeof d) < 0)
    return fail(EVD_ECORRUPT, msg, len, "bad header: 'descr' is not a string");
  if (strcmp(d, "<f4") == 0)
    f->dtype = EVD_NPY_F4;
  else if (strcmp(d, "<f2") == 0)
    f->dtype = EVD_NPY_F2;
  else
    return fail(EVD_ECORRUPT, msg, len,
                "unsupported dtype '%s' (want '<f4' float32 or '<f2' float16, "
                "little-endian)", d);
  return 0;
}

/* The dict: each of the three keys exactly once, nothing else. */
static int parse_header(const char *h, size_t n, evd_npy_t *f, char *msg,
                        size_t len) {
  cursor_t c = {h, h + n};
  int seen[3] = {0, 0, 0}, err, i;
  static const char *const keys[3] = {"descr", "fortran_order", "shape"};

  if (!eat(&c, '{'))
    return fail(EVD_ECORRUPT, msg, len, "bad header: not a Python dict");
  while (!eat(&c, '}')) {
    char key[32];
    if (parse_str(&c, key, sizeof key) < 0 || !eat(&c, ':'))
      return fail(EVD_ECORRUPT, msg, len, "bad header: malformed dict");
    for (i = 0; i < 3 && strcmp(key, keys[i]) != 0; i++)
      ;
    if (i == 3)
      return fail(EVD_ECORRUPT, msg, len, "bad header: unexpected key '%s'",
                  key);
    if (seen[i]++)
      return fail(EVD_ECORRUPT, msg, len, "bad header: key '%s' twice", key);
    if (i == 0) {
      err = parse_descr(&c, f, msg, len);
    } else if (i == 1) {
      if (parse_word(&c, "True"))
        return fail(EVD_ECORRUPT, msg, len,
                    "fortran_order is True: want C order");
      err = parse_word(&c, "False")
                ? 0
                : fail(EVD_ECORRUPT, msg, len,
                       "bad header: 'fortran_order' is not True or False");
    } else {
      err = parse_shape(&c, f, msg, len);
    }
    if (err < 0)
      return err;
    if (!eat(&c, ',')) {
      if (!eat(&c, '}'))
        return fail(EVD_ECORRUPT, msg, len, "bad header: malformed dict");
      break;
    }
  }
  skip_ws(&c);
  if (c.s != c.end)
    return fail(EVD_ECORRUPT, msg, len, "bad header: text after the dict");
  for (i = 0; i < 3; i++)
    if (!seen[i])
      return fail(EVD_ECORRUPT, msg, len, "bad header: no '%s' key", keys[i]);
  return 0;
}

/* ---- open ------------------------------------------------------------ */

/* The magic, version and header length: fills f->major and *hlen, *hoff. */
static int read_preamble(evd_npy_t *f, uint64_t size, uint32_t *hlen,
                         uint32_t *hoff, char *msg, size_t len) {
  unsigned char p[12];
  int err;

  if (size < 10)
    return fail(EVD_ECORRUPT, msg, len,
                "truncated header: %llu bytes, not a .npy file",
                (unsigned long long)size);
  err = pread_all(f->fd, p, size < 12 ? 10 : 12, 0);
  if (err == EVD_EIO)
    return fail(err, msg, len, "%s", strerror(errno));
  if (err < 0)
    return fail(err, msg, len, "file shrank while being read");
  if (memcmp(p, "\x93NUMPY", 6) != 0)
    return fail(EVD_ECORRUPT, msg, len,
                "bad magic: not a NumPy .npy file (want \\x93NUMPY)");
  if (p[6] < 1 || p[6] > 3 || p[7] != 0)
    return fail(EVD_ECORRUPT, msg, len,
                "unsupported .npy format version %u.%u (want 1.0, 2.0 or 3.0)",
                p[6], p[7]);
  f->major = p[6];
  if (f->major == 1) {
    *hlen = (uint32_t)p[8] | (uint32_t)p[9] << 8;
    *hoff = 10;
  } else {
    if (size < 12)
      return fail(EVD_ECORRUPT, msg, len, "truncated header");
    *hlen = (uint32_t)p[8] | (uint32_t)p[9] << 8 | (uint32_t)p[10] << 16 |
            (uint32_t)p[11] << 24;
    *hoff = 12;
  }
  if (*hlen > EVD_NPY_MAX_HEADER)
    return fail(EVD_ECORRUPT, msg, len,
                "bad header: %u bytes long (at most %u accepted)", *hlen,
                EVD_NPY_MAX_HEADER);
  if (*hoff + (uint64_t)*hlen > size)
    return fail(EVD_ECORRUPT, msg, len,
                "truncated header: it claims %u bytes, the file has %llu "
                "after the preamble", *hlen,
                (unsigned long long)(size - *hoff));
  return 0;
}

/* Checks that the file holds exactly count elements after the header. */
static int check_size(evd_npy_t *f, uint64_t size, char *msg, size_t len) {
  uint64_t need, have = size - f->data_off;
  char shape[128];
  int i;

  f->count = 1;
  for (i = 0; i < f->ndim; i++) {
    if (f->shape[i] != 0 && f->count > UINT64_MAX / f->shape[i])
      return fail(EVD_ECORRUPT, msg, len, "bad shape %s: too large",
                  evd_npy_shape_str(f, shape, sizeof shape));
    f->count *= f->shape[i];
  }
  if (f->count > (uint64_t)INT64_MAX / (uint64_t)f->dtype)
    return fail(EVD_ECORRUPT, msg, len, "bad shape %s: too large",
                evd_npy_shape_str(f, shape, sizeof shape));
  need = f->count * (uint64_t)f->dtype;
  if (have < need)
    return fail(EVD_ECORRUPT, msg, len,
                "truncated data: %llu bytes after the header, shape %s %s "
                "needs %llu", (unsigned long long)have,
                evd_npy_shape_str(f, shape, sizeof shape),
                evd_npy_dtype_str(f), (unsigned long long)need);
  if (have > need)
    return fail(EVD_ECORRUPT, msg, len,
                "%llu unexpected bytes after the data (shape %s %s needs "
                "%llu)", (unsigned long long)(have - need),
                evd_npy_shape_str(f, shape, sizeof shape),
                evd_npy_dtype_str(f), (unsigned long long)need);
  return 0;
}

int evd_npy_open(evd_npy_t *f, const char *path, char *msg, size_t len) {
  struct stat st;
  uint32_t hlen = 0, hoff = 0;
  char *header = NULL;
  int err;

  memset(f, 0, sizeof *f);
  f->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (f->fd < 0)
    return fail(EVD_EIO, msg, len, "%s", strerror(errno));
  if (fstat(f->fd, &st) < 0) {
    err = fail(EVD_EIO, msg, len, "%s", strerror(errno));
    goto fail_open;
  }
  if (!S_ISREG(st.st_mode)) {
    err = fail(EVD_EIO, msg, len, "not a regular file");
    goto fail_open;
  }
  err = read_preamble(f, (uint64_t)st.st_size, &hlen, &hoff, msg, len);
  if (err < 0)
    goto fail_open;
  header = malloc(hlen + 1u);
  if (header == NULL) {
    err = fail(EVD_ENOMEM, msg, len, "out of memory");
    goto fail_open;
  }
  err = pread_all(f->fd, header, hlen, hoff);
  if (err < 0) {
    err = fail(err, msg, len, "%s",
               err == EVD_EIO ? strerror(errno) : "file shrank while read");
    goto fail_header;
  }
  header[hlen] = '\0';
  err = parse_header(header, hlen, f, msg, len);
  if (err < 0)
    goto fail_header;
  f->data_off = hoff + (uint64_t)hlen;
  err = check_size(f, (uint64_t)st.st_size, msg, len);
  if (err < 0)
    goto fail_header;
  free(header);
  /* The common case, one stream read front to back. */
  (void)posix_fadvise(f->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return 0;

fail_header:
  free(header);
fail_open:
  close(f->fd);
  f->fd = -1;
  return err;
}

void evd_npy_close(evd_npy_t *f) {
  if (f->fd >= 0)
    close(f->fd);
  f->fd = -1;
}

/* ---- data ------------------------------------------------------------ */

/* Bit manipulation after F. Giesen's half_to_float_fast: move exponent
 * and mantissa into place and rebias; infinities and NaNs get the rest of
 * the float exponent, subnormals are renormalised by one float subtraction
 * (exact). No table, no loop. */
float evd_npy_half(uint16_t h) {
  const uint32_t inf = 0x7c00u << 13;
  uint32_t o = (uint32_t)(h & 0x7fffu) << 13, exp = o & inf;
  float v;

  o += (127u - 15u) << 23;
  if (exp == inf) {
    o += (128u - 16u) << 23;
  } else if (exp == 0) {
    o += 1u << 23;
    memcpy(&v, &o, sizeof v);
    v -= 0x1p-14f;
    memcpy(&o, &v, sizeof o);
  }
  o |= (uint32_t)(h & 0x8000u) << 16;
  memcpy(&v, &o, sizeof v);
  return v;
}

int evd_npy_read_raw(const evd_npy_t *f, uint64_t index, size_t n, void *buf,
                     char *msg, size_t len) {
  int err;

  if (index > f->count || n > f->count - index)
    return fail(EVD_EINVAL, msg, len, "read outside the array");
  err = pread_all(f->fd, buf, n * (size_t)f->dtype,
                  f->data_off + index * (uint64_t)f->dtype);
  if (err == EVD_EIO)
    return fail(err, msg, len, "%s", strerror(errno));
  if (err < 0)
    return fail(err, msg, len, "truncated data: the file shrank while read");
  return 0;
}

void evd_npy_decode(const evd_npy_t *f, void *buf, size_t n) {
  unsigned char *b = buf;
  size_t i;

  if (f->dtype == EVD_NPY_F4) {
    for (i = 0; i < n; i++) {
      const unsigned char *p = b + 4 * i;
      uint32_t bits = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
                      (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
      memcpy(b + 4 * i, &bits, 4);
    }
    return;
  }
  /* Two bytes per element into four: decode from the end, where element
   * i's float overwrites only raw elements 2i and 2i + 1, never one below
   * i that is still to be decoded. */
  for (i = n; i-- > 0;) {
    float v = evd_npy_half((uint16_t)(b[2 * i] | b[2 * i + 1] << 8));
    memcpy(b + 4 * i, &v, 4);
  }
}

int evd_npy_raw_zero(const evd_npy_t *f, const void *buf, size_t from,
                     size_t n) {
  const unsigned char *b = (const unsigned char *)buf + from * f->dtype;
  size_t bytes = from < n ? (n - from) * f->dtype : 0, i;
  uint64_t acc = 0, w;

  for (i = 0; i + 8 <= bytes; i += 8) {
    memcpy(&w, b + i, 8);
    acc |= w;
  }
  for (; i < bytes; i++)
    acc |= b[i];
  return acc == 0;
}

void evd_npy_prefetch(const evd_npy_t *f, uint64_t index, uint64_t n) {
  if (index >= f->count)
    return;
  if (n > f->count - index)
    n = f->count - index;
  (void)posix_fadvise(f->fd, (off_t)(f->data_off + index * f->dtype),
                      (off_t)(n * f->dtype), POSIX_FADV_WILLNEED);
}

char *evd_npy_shape_str(const evd_npy_t *f, char *buf, size_t len) {
  size_t n = 0;
  int i;

  buf[0] = '\0';
  n += (size_t)snprintf(buf, len, "(");
  for (i = 0; i < f->ndim && n < len; i++)
    n += (size_t)snprintf(buf + n, len - n, "%s%llu", i ? ", " : "",
                          (unsigned long long)f->shape[i]);
  if (n < len)
    snprintf(buf + n, len - n, f->ndim == 1 ? ",)" : ")");
  return buf;
}

const char *evd_npy_dtype_str(const evd_npy_t *f) {
  return f->dtype == EVD_NPY_F2 ? "<f2" : "<f4";
}
