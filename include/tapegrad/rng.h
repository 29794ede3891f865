/* Seeded RNG: xoshiro256** seeded through splitmix64; normals by Box-Muller.
 * The whole state is a plain struct, so saving and restoring it (checkpoints) is a memcpy and
 * the stream continues bit-exactly. */
#ifndef TG_RNG_H
#define TG_RNG_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#pragma GCC visibility push(default)

typedef struct TgRng {
    uint64_t s[4];
    double spare;   /* second Box-Muller normal, valid when has_spare */
    uint32_t has_spare;
    uint32_t pad_;
} TgRng;

/* The same seed gives the same stream on every machine. */
void tg_rng_seed(TgRng *rng, uint64_t seed);
/* 64 random bits. */
uint64_t tg_rng_u64(TgRng *rng);
/* Uniform in [0, 1) with 24 random bits (exactly representable in float). */
float tg_rng_uniform(TgRng *rng);
/* Uniform integer in [0, n), unbiased. n > 0. */
uint64_t tg_rng_below(TgRng *rng, uint64_t n);
/* Standard normal. */
double tg_rng_normal(TgRng *rng);
/* out[0..n) ~ N(mean, std^2), drawn in order. */
void tg_rng_fill_normal(TgRng *rng, float *out, size_t n, float mean, float std);
/* out[0..n) uniform in [lo, hi), drawn in order. */
void tg_rng_fill_uniform(TgRng *rng, float *out, size_t n, float lo, float hi);

#pragma GCC visibility pop

#endif
