/* CRC-32C (Castagnoli), the checksum of journal and snapshot records. */
#ifndef EVICTD_CRC_H
#define EVICTD_CRC_H

#include <stddef.h>
#include <stdint.h>

/* Continues a CRC-32C over n bytes; start with crc = 0. */
uint32_t evd_crc32c(uint32_t crc, const void *p, size_t n);

/* The same by tables only, whatever the CPU (for tests). */
uint32_t evd__crc32c_sw(uint32_t crc, const void *p, size_t n);

#endif
