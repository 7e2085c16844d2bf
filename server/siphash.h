/* SipHash-1-3, for the session table (keyed per process) and for values
 * kept in the state directory (a fixed key). */
#ifndef EVICTD_SIPHASH_H
#define EVICTD_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

/* SipHash-1-3 of data[0..len) under a 128-bit key, the same on any host
 * (the input is read little-endian). */
uint64_t evd__siphash13(const uint64_t key[2], const void *data, size_t len);

/* A 64-bit hash of p[0..len), the same in every process (SipHash with a
 * fixed key): for values kept in the state directory. */
uint64_t evd_hash64(const void *p, size_t len);

#endif
