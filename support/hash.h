/* A 64-bit hash of a byte stream, fed in pieces of any size: the same bytes give the same value
 * however they are cut. It identifies contents (a dataset's sources and token files, whether two
 * ranks hold the same tokens); it is no cryptographic hash.
 *
 * Each 8-byte little-endian word w goes through xxHash64's round, acc = rotl(acc + w * P2, 31) * P1,
 * so a change in any bit of any word reaches every bit of the state; the tail and the length are
 * mixed in by tg_hash64_final, which ends with xxHash64's avalanche. */
#ifndef TAPEGRAD_SUPPORT_HASH_H
#define TAPEGRAD_SUPPORT_HASH_H

#include <stddef.h>
#include <stdint.h>

typedef struct TgHash64 {
    uint64_t acc, length;
    unsigned char tail[8];
    unsigned tail_len;
} TgHash64;

void tg_hash64_init(TgHash64 *h, uint64_t seed);
void tg_hash64_update(TgHash64 *h, const void *data, size_t len);
uint64_t tg_hash64_final(const TgHash64 *h);
/* The hash of one buffer. */
uint64_t tg_hash64_of(const void *data, size_t len, uint64_t seed);

#endif
