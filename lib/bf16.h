/* bfloat16: the top 16 bits of an IEEE float (sign, 8-bit exponent, 7-bit fraction).
 *
 * fp32 -> bf16 rounds to nearest, ties to even, on the bits: (u + 0x7fff + ((u >> 16) & 1)) >> 16.
 * A carry out of the fraction steps the exponent, so the largest floats round to infinity as
 * IEEE rounding does; a NaN stays a NaN (its quiet bit set, since rounding could carry a
 * signalling NaN's payload into infinity). bf16 -> fp32 is exact (the low 16 bits zero).
 *
 * A product of two bf16 values has at most 16 significant bits, so it is exact in fp32: a bf16
 * GEMM that accumulates in fp32 rounds only its additions, and two such GEMMs differ only in the
 * order of their sums. */
#ifndef TAPEGRAD_LIB_BF16_H
#define TAPEGRAD_LIB_BF16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t tg_bf16_from_float(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);   /* NaN, kept quiet */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float tg_bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* x rounded to the nearest bf16, as a float */
static inline float tg_bf16_round(float x) { return tg_bf16_to_float(tg_bf16_from_float(x)); }

#endif
