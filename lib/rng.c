#include "tapegrad/rng.h"

#include <math.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void tg_rng_seed(TgRng *rng, uint64_t seed) {
    memset(rng, 0, sizeof *rng);
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&x);
}

uint64_t tg_rng_u64(TgRng *rng) {
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float tg_rng_uniform(TgRng *rng) { return (float)(tg_rng_u64(rng) >> 40) * (1.0f / 16777216.0f); }

uint64_t tg_rng_below(TgRng *rng, uint64_t n) {
    /* rejection sampling: drop the top partial copy of [0, n) */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = tg_rng_u64(rng);
    while (x >= limit);
    return x % n;
}

double tg_rng_normal(TgRng *rng) {
    if (rng->has_spare) {
        rng->has_spare = 0;
        return rng->spare;
    }
    /* u1 in (0, 1] so log(u1) is finite */
    double u1 = ((double)(tg_rng_u64(rng) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(tg_rng_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
    double r = sqrt(-2.0 * log(u1));
    double theta = 2.0 * M_PI * u2;
    rng->spare = r * sin(theta);
    rng->has_spare = 1;
    return r * cos(theta);
}

void tg_rng_fill_normal(TgRng *rng, float *out, size_t n, float mean, float std) {
    for (size_t i = 0; i < n; i++) out[i] = mean + std * (float)tg_rng_normal(rng);
}

void tg_rng_fill_uniform(TgRng *rng, float *out, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) out[i] = lo + (hi - lo) * tg_rng_uniform(rng);
}
