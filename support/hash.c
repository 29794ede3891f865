#include "support/hash.h"

#include <string.h>

static const uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full, P3 = 0x165667B19E3779F9ull;

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static uint64_t round_word(uint64_t acc, uint64_t w) { return rotl(acc + w * P2, 31) * P1; }

static uint64_t load_le(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void tg_hash64_init(TgHash64 *h, uint64_t seed) {
    memset(h, 0, sizeof *h);
    h->acc = seed + P3;
}

void tg_hash64_update(TgHash64 *h, const void *data, size_t len) {
    const unsigned char *p = data;
    h->length += len;
    if (h->tail_len) {
        while (len && h->tail_len < 8) h->tail[h->tail_len++] = *p++, len--;
        if (h->tail_len < 8) return;
        h->acc = round_word(h->acc, load_le(h->tail));
        h->tail_len = 0;
    }
    uint64_t acc = h->acc;
    for (; len >= 8; p += 8, len -= 8) acc = round_word(acc, load_le(p));
    h->acc = acc;
    memcpy(h->tail, p, len);
    h->tail_len = (unsigned)len;
}

uint64_t tg_hash64_final(const TgHash64 *h) {
    uint64_t acc = h->acc ^ round_word(0, h->length);
    for (unsigned i = 0; i < h->tail_len; i++) acc = rotl(acc ^ (h->tail[i] * P3), 11) * P1;
    acc ^= acc >> 33;
    acc *= P2;
    acc ^= acc >> 29;
    acc *= P3;
    acc ^= acc >> 32;
    return acc;
}

uint64_t tg_hash64_of(const void *data, size_t len, uint64_t seed) {
    TgHash64 h;
    tg_hash64_init(&h, seed);
    tg_hash64_update(&h, data, len);
    return tg_hash64_final(&h);
}
