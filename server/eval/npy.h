/* Reading NumPy .npy files row by row: the header (format versions 1.0, 2.0
 * and 3.0) and little-endian float32 or float16 data in C order, fetched by
 * pread a slice at a time, so that nothing ever holds the whole array. */
#ifndef EVICTD_EVAL_NPY_H
#define EVICTD_EVAL_NPY_H

#include <stddef.h>
#include <stdint.h>

/* NumPy's own limit on dimensions (NPY_MAXDIMS in NumPy 2). */
#define EVD_NPY_MAX_DIMS 64

/* Headers longer than this are refused: a real one is under 128 bytes, and
 * the cap keeps a hostile header length from costing memory. */
#define EVD_NPY_MAX_HEADER 65536u

typedef enum { EVD_NPY_F4 = 4, EVD_NPY_F2 = 2 } evd_npy_dtype_t;

typedef struct {
  int fd;                 /* open read-only; -1 once closed */
  int major;              /* format version: 1, 2 or 3 (minor is 0) */
  evd_npy_dtype_t dtype;  /* also the element size in bytes */
  int ndim;
  uint64_t shape[EVD_NPY_MAX_DIMS];
  uint64_t count;         /* elements: the product of the shape */
  uint64_t data_off;      /* file offset of the first element */
} evd_npy_t;

/* Opens `path`, parses and checks its header, and checks that the file
 * holds exactly the data the shape calls for (neither truncated nor
 * trailing bytes). On failure writes a one-line reason (without the file
 * name) to msg[0..len) and returns EVD_EIO (the file cannot be opened or
 * read; errno's text is in msg) or EVD_ECORRUPT (not a .npy file this
 * program reads: bad magic, bad header, unsupported dtype or order, wrong
 * size); nothing stays open then. On success the caller closes f with
 * evd_npy_close. */
int evd_npy_open(evd_npy_t *f, const char *path, char *msg, size_t len);

/* Closes f; safe to call twice. */
void evd_npy_close(evd_npy_t *f);

/* Reads elements index..index+n-1 (in C order), raw, into buf, which has
 * room for n floats (so that evd_npy_decode can then decode it in place).
 * Returns 0, or EVD_EINVAL when the range is outside the array, EVD_EIO
 * (errno's text in msg) or EVD_ECORRUPT (the file shrank since it was
 * opened). */
int evd_npy_read_raw(const evd_npy_t *f, uint64_t index, size_t n, void *buf,
                     char *msg, size_t len);

/* Decodes the first n raw elements of buf in place into floats. Decoding a
 * prefix of float16 data overwrites raw elements beyond it (up to 2n), so
 * look at those first (evd_npy_raw_zero). */
void evd_npy_decode(const evd_npy_t *f, void *buf, size_t n);

/* 1 when raw elements from..n-1 of buf are all zero bits (+0.0), else 0. A
 * word-wise scan: the cheap way to check the zeros above a trace's
 * diagonal without decoding them. */
int evd_npy_raw_zero(const evd_npy_t *f, const void *buf, size_t from,
                     size_t n);

/* Advises the kernel that elements index..index+n-1 will be read soon (a
 * hint: errors are ignored). Several interleaved sequential streams, one
 * per head of a 3-D trace, defeat readahead otherwise. */
void evd_npy_prefetch(const evd_npy_t *f, uint64_t index, uint64_t n);

/* Writes the shape as NumPy prints it, e.g. "(8, 4096, 4096)" or "(5,)",
 * truncated to len - 1 bytes; returns buf. */
char *evd_npy_shape_str(const evd_npy_t *f, char *buf, size_t len);

/* The dtype as the header spells it: "<f4" or "<f2". */
const char *evd_npy_dtype_str(const evd_npy_t *f);

/* IEEE 754 binary16 bits to float, exactly (subnormals, infinities and
 * NaNs included). */
float evd_npy_half(uint16_t h);

#endif
