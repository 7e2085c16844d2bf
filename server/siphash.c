/* SipHash-1-3 (Aumasson and Bernstein): the session table's keyed hash of
 * ids, and with a fixed key the hash of requests kept in the state
 * directory. */
#include "siphash.h"

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                               \
  do {                                                                         \
    v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);                  \
    v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                     \
    v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                     \
    v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);                  \
  } while (0)

uint64_t evd__siphash13(const uint64_t key[2], const void *data, size_t len) {
  const unsigned char *p = data;
  uint64_t v0 = key[0] ^ 0x736f6d6570736575ull;
  uint64_t v1 = key[1] ^ 0x646f72616e646f6dull;
  uint64_t v2 = key[0] ^ 0x6c7967656e657261ull;
  uint64_t v3 = key[1] ^ 0x7465646279746573ull;
  uint64_t m, last = (uint64_t)len << 56;
  size_t i, tail = len & 7;

  for (i = 0; i + 8 <= len; i += 8) {
    m = 0;
    for (int k = 7; k >= 0; k--) /* little-endian load on any host */
      m = (m << 8) | p[i + (size_t)k];
    v3 ^= m;
    SIPROUND;
    v0 ^= m;
  }
  for (size_t k = 0; k < tail; k++)
    last |= (uint64_t)p[i + k] << (8 * k);
  v3 ^= last;
  SIPROUND;
  v0 ^= last;
  v2 ^= 0xff;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t evd_hash64(const void *p, size_t len) {
  /* A fixed key: the value must be the same in every process that reads
   * the state directory. */
  static const uint64_t key[2] = {0x6576696374642d72ull,
                                  0x65706c6179206b65ull};
  return evd__siphash13(key, p, len);
}
