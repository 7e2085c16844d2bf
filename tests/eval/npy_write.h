/* Writing .npy files for the evaluator's tests and benchmark: the header
 * (any version, any dict text, so that malformed ones can be made too) and
 * float to binary16 conversion. Header-only, static functions. */
#ifndef EVICTD_TESTS_NPY_WRITE_H
#define EVICTD_TESTS_NPY_WRITE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The dict numpy writes for a C-order array of this dtype and shape. */
static inline void npyw_dict(char *buf, size_t len, const char *descr,
                             const uint64_t *shape, int ndim) {
  size_t n = (size_t)snprintf(buf, len,
                              "{'descr': '%s', 'fortran_order': False, "
                              "'shape': (", descr);
  int i;

  for (i = 0; i < ndim; i++)
    n += (size_t)snprintf(buf + n, len - n, "%s%llu", i ? ", " : "",
                          (unsigned long long)shape[i]);
  snprintf(buf + n, len - n, "%s), }", ndim == 1 ? "," : "");
}

/* Magic, version major.0, header length and `dict` padded with spaces and
 * a newline to a multiple of 64 bytes, as numpy does. Returns the bytes
 * written to buf, or 0 when cap is too small. */
static inline size_t npyw_header(unsigned char *buf, size_t cap, int major,
                                 const char *dict) {
  size_t pre = major == 1 ? 10 : 12, d = strlen(dict), total, hlen;

  total = (pre + d + 1 + 63) / 64 * 64;
  if (total > cap)
    return 0;
  hlen = total - pre;
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (unsigned char)major;
  buf[7] = 0;
  buf[8] = (unsigned char)(hlen & 0xff);
  buf[9] = (unsigned char)(hlen >> 8);
  if (major != 1) {
    buf[10] = (unsigned char)(hlen >> 16);
    buf[11] = (unsigned char)(hlen >> 24);
  }
  memcpy(buf + pre, dict, d);
  memset(buf + pre + d, ' ', total - pre - d - 1);
  buf[total - 1] = '\n';
  return total;
}

/* float to IEEE 754 binary16, rounding to nearest even. */
static inline uint16_t npyw_half(float f) {
  uint32_t x, man, sign, h, shift, rem, half;
  int32_t exp;

  memcpy(&x, &f, sizeof x);
  sign = (x >> 16) & 0x8000u;
  man = x & 0x7fffffu;
  if (((x >> 23) & 0xffu) == 0xffu)
    return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
  exp = (int32_t)((x >> 23) & 0xffu) - 127 + 15;
  if (exp >= 31)
    return (uint16_t)(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10)
      return (uint16_t)sign;
    man |= 0x800000u;
    shift = (uint32_t)(14 - exp);
    h = man >> shift;
    rem = man & ((1u << shift) - 1);
    half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1)))
      h++;
    return (uint16_t)(sign | h);
  }
  h = sign | (uint32_t)exp << 10 | man >> 13;
  rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
    h++; /* a carry into the exponent is right, up to infinity */
  return (uint16_t)h;
}

/* Appends n values as '<f4' (esize 4) or '<f2' (esize 2), little-endian
 * whatever the host. Returns 0 or -1. */
static inline int npyw_values(FILE *f, const double *v, size_t n, int esize) {
  unsigned char b[4];
  size_t i;

  for (i = 0; i < n; i++) {
    float x = (float)v[i];
    uint32_t bits;
    if (esize == 2) {
      uint16_t h = npyw_half(x);
      b[0] = (unsigned char)(h & 0xff);
      b[1] = (unsigned char)(h >> 8);
    } else {
      memcpy(&bits, &x, sizeof bits);
      b[0] = (unsigned char)bits;
      b[1] = (unsigned char)(bits >> 8);
      b[2] = (unsigned char)(bits >> 16);
      b[3] = (unsigned char)(bits >> 24);
    }
    if (fwrite(b, (size_t)esize, 1, f) != 1)
      return -1;
  }
  return 0;
}

#endif
