// CRC-32 (IEEE 802.3 / zlib polynomial) for checkpoint integrity checks.
#ifndef FSDPGEN_IO_CRC32_H
#define FSDPGEN_IO_CRC32_H

#include <stddef.h>
#include <stdint.h>

// Continues a CRC: start with crc = 0; io_crc32(io_crc32(0, a, n), b, m) equals the CRC
// of a followed by b. io_crc32(0, "123456789", 9) == 0xCBF43926.
uint32_t io_crc32(uint32_t crc, const void *data, size_t n);

#endif
