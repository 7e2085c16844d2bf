/* CRC-32C, reflected polynomial 0x82F63B78: with the SSE4.2 instruction
 * where the CPU has it (8 bytes an instruction: loading a snapshot of
 * gigabytes is bound by it otherwise), else by tables, 8 bytes at a time
 * (slicing by 8). */
#include "crc.h"

#include <string.h>

static uint32_t table[8][256];
static int ready;
#if defined(__x86_64__) && defined(__GNUC__)
static int hw;
#endif

static void build(void) {
  uint32_t i, k, c;

  for (i = 0; i < 256; i++) {
    c = i;
    for (k = 0; k < 8; k++)
      c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[0][i] = c;
  }
  for (i = 0; i < 256; i++)
    for (k = 1; k < 8; k++)
      table[k][i] = (table[k - 1][i] >> 8) ^ table[0][table[k - 1][i] & 0xff];
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  hw = __builtin_cpu_supports("sse4.2");
#endif
  ready = 1;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("sse4.2"))) static uint32_t
crc_hw(uint32_t crc, const unsigned char *b, size_t n) {
  uint64_t c = crc;

  while (n > 0 && ((uintptr_t)b & 7) != 0) {
    c = __builtin_ia32_crc32qi((uint32_t)c, *b++);
    n--;
  }
  for (; n >= 8; n -= 8, b += 8) {
    uint64_t v;
    memcpy(&v, b, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  while (n-- > 0)
    c = __builtin_ia32_crc32qi((uint32_t)c, *b++);
  return (uint32_t)c;
}
#endif

static uint32_t crc_sw(uint32_t crc, const unsigned char *b, size_t n) {
  for (; n >= 8; n -= 8, b += 8) {
    uint32_t lo = crc ^ ((uint32_t)b[0] | (uint32_t)b[1] << 8 |
                         (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
    crc = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^
          table[5][(lo >> 16) & 0xff] ^ table[4][lo >> 24] ^
          table[3][b[4]] ^ table[2][b[5]] ^ table[1][b[6]] ^ table[0][b[7]];
  }
  while (n-- > 0)
    crc = table[0][(crc ^ *b++) & 0xff] ^ (crc >> 8);
  return crc;
}

uint32_t evd_crc32c(uint32_t crc, const void *p, size_t n) {
  if (!ready)
    build();
#if defined(__x86_64__) && defined(__GNUC__)
  if (hw)
    return ~crc_hw(~crc, p, n);
#endif
  return ~crc_sw(~crc, p, n);
}

uint32_t evd__crc32c_sw(uint32_t crc, const void *p, size_t n) {
  if (!ready)
    build();
  return ~crc_sw(~crc, p, n);
}
