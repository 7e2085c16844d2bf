/* CRC-32C, reflected polynomial 0x82F63B78, with a table built on first
 * use (slicing by one byte: fast enough for records written once). */
#include "evictd/crc.h"

static uint32_t table[256];
static int ready;

static void build(void) {
  uint32_t i, k, c;

  for (i = 0; i < 256; i++) {
    c = i;
    for (k = 0; k < 8; k++)
      c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  ready = 1;
}

uint32_t evd_crc32c(uint32_t crc, const void *p, size_t n) {
  const unsigned char *b = p;

  if (!ready)
    build();
  crc = ~crc;
  while (n--)
    crc = table[(crc ^ *b++) & 0xff] ^ (crc >> 8);
  return ~crc;
}
