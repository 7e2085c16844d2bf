/* A growable byte buffer for writing responses and journal records in place:
 * reused across requests so that the hot path does not allocate. */
#ifndef EVICTD_BUF_H
#define EVICTD_BUF_H

#include <stddef.h>
#include <stdint.h>

/* Appends never fail loudly: a failed allocation sets `oom`, later appends
 * become no-ops, and the owner checks `oom` once when the text is complete. */
typedef struct evd_buf_s {
  char *data;
  size_t len;
  size_t cap;
  int oom;
} evd_buf_t;

/* An empty buffer; allocates nothing until the first append. */
void evd_buf_init(evd_buf_t *b);

/* Frees the storage and leaves an empty buffer behind. */
void evd_buf_free(evd_buf_t *b);

/* Forgets the contents (and an earlier oom) but keeps the storage, unless
 * it grew past `keep` bytes, in which case it is freed. */
void evd_buf_reset(evd_buf_t *b, size_t keep);

/* Makes room for `n` more bytes. Returns 0, or EVD_ENOMEM (and sets oom). */
int evd_buf_reserve(evd_buf_t *b, size_t n);

/* As evd_buf_reserve, but a failure leaves the buffer usable (oom is not
 * set): for making room before a change, so that writing its answer
 * cannot fail after it. */
int evd_buf_room(evd_buf_t *b, size_t n);

/* Appends n bytes, a NUL-terminated string, one byte, or a uint32 in
 * decimal. */
void evd_buf_add(evd_buf_t *b, const void *p, size_t n);
void evd_buf_str(evd_buf_t *b, const char *s);
void evd_buf_chr(evd_buf_t *b, char c);
void evd_buf_u32(evd_buf_t *b, uint32_t v);
void evd_buf_u64(evd_buf_t *b, uint64_t v);

/* Length of the valid UTF-8 sequence at p[0..n), or 0 when there is none
 * (bad lead byte, bad or missing continuation, overlong form, surrogate, or
 * beyond U+10FFFF). */
size_t evd_utf8_len(const unsigned char *p, size_t n);

/* Appends `"s"` as a JSON string, escaping what JSON requires. */
void evd_buf_json_str(evd_buf_t *b, const char *s, size_t n);

/* Appends a JSON array of uint32 values: [v0,v1,...]. */
void evd_buf_u32_array(evd_buf_t *b, const uint32_t *v, size_t n);

/* Appends n uint32 values separated by commas (and one before them when
 * lead_comma): v[0..n), or start, start + 1, ... when v is NULL. */
void evd_buf_u32_seq(evd_buf_t *b, const uint32_t *v, uint32_t start,
                     size_t n, int lead_comma);

#endif
