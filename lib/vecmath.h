/* Eight floats at a time, for the ops' loops (attention, SwiGLU). Header-only, static inline.
 *
 * GCC -O2 vectorises none of the ops' loops on its own (its cheap cost model refuses loops
 * that need a scalar remainder, and the float acc[64] of a matrix row stays on the stack), and
 * no compiler vectorises a call to expf, so they are written with GNU C vectors: lane-wise
 * + - * / that lower to one AVX register, two SSE registers or scalars, whatever the target
 * has. Lane-wise operations round exactly like the scalar ones, and every reduction runs in an
 * order fixed by its length alone, so the results are bitwise the same on any thread count.
 * (Moved here from attention.c so SwiGLU can share the exp.) No function takes or returns a vector by
 * value (a non-AVX build would warn that the ABI differs), hence the in-place helpers. */
#ifndef TAPEGRAD_VECMATH_H
#define TAPEGRAD_VECMATH_H

#include <stdint.h>
#include <string.h>

typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
/* eight floats in memory at any float boundary (like immintrin's __m256_u) */
typedef float f32x8_unaligned __attribute__((vector_size(32), aligned(4), may_alias));
#define VEC8(ptr) (*(f32x8_unaligned *)(ptr))
enum { LANES = 8 };

/* the first `count` < 8 floats of p, the other lanes 0 */
static inline void load8_partial(f32x8 *v, const float *p, int64_t count) {
    *v = (f32x8){0};
    memcpy(v, p, (size_t)count * sizeof(float));
}

/* up to 8 floats: *v = p[0..count), other lanes 0; and back. Loops that run whole vectors up to
 * their range's end and a partial one there compute every element by the same lane-wise
 * formula, so an element's bits do not depend on where a thread's range begins or ends. */
static inline void load8(f32x8 *v, const float *p, int64_t count) {
    if (count >= LANES) *v = VEC8(p);
    else load8_partial(v, p, count);
}
static inline void store8(float *p, const f32x8 *v, int64_t count) {
    if (count >= LANES) VEC8(p) = *v;
    else memcpy(p, v, (size_t)count * sizeof(float));
}

/* sum of the lanes, lane 0 first */
static inline float lane_sum(const f32x8 *v) {
    float sum = (*v)[0];
    for (int l = 1; l < LANES; l++) sum += (*v)[l];
    return sum;
}

/* x = exp(x) for x <= 0, the argument of a softmax after its max is subtracted.
 * Cephes' expf: x = n ln2 + r with |r| <= ln2/2, exp(r) by a degree-7 polynomial, 2^n written
 * into the exponent bits. Over every float in [-87, 0] the largest relative error is 8.3e-8
 * (glibc's expf: 6.0e-8); below -87 it returns exp(-87) = 1.6e-38 instead of a subnormal,
 * nothing next to the row's largest term, 1. Unlike a call to expf it vectorises. */
static inline __attribute__((always_inline)) void exp8_nonpositive(f32x8 *x_inout) {
    const f32x8 lowest = (f32x8){0} - 87.0f;
    f32x8 x = *x_inout;
    i32x8 below = x < lowest;
    x = (f32x8)((below & (i32x8)lowest) | (~below & (i32x8)x));
    const float round_magic = 12582912.0f;   /* 1.5 * 2^23: adding it rounds to an integer */
    f32x8 n = (x * 1.44269504088896341f + round_magic) - round_magic;   /* round(x / ln2) */
    f32x8 r = x - n * 0.693359375f + n * 2.12194440e-4f;               /* x - n ln2, in two parts */
    f32x8 poly = r * 1.9875691500e-4f + 1.3981999507e-3f;
    poly = poly * r + 8.3334519073e-3f;
    poly = poly * r + 4.1665795894e-2f;
    poly = poly * r + 1.6666665459e-1f;
    poly = poly * r + 5.0000001201e-1f;
    poly = poly * r * r + r + 1.0f;
    i32x8 two_to_n = (__builtin_convertvector(n, i32x8) + 127) << 23;
    *x_inout = poly * (f32x8)two_to_n;
}

/* x = sigmoid(x) = 1 / (1 + exp(-x)), through exp of -|x| <= 0 so no exp overflows:
 *   x >= 0: 1 / (1 + e),   x < 0: e / (1 + e),   e = exp(-|x|).
 * Relative error within a few 1e-7 of expf's sigmoid. */
static inline __attribute__((always_inline)) void sigmoid8(f32x8 *x_inout) {
    f32x8 x = *x_inout;
    i32x8 negative = x < 0.0f;
    const i32x8 sign_bit = (i32x8){0} + INT32_MIN;
    f32x8 e = (f32x8)((i32x8)x | sign_bit);   /* -|x| */
    exp8_nonpositive(&e);
    f32x8 inv = 1.0f / (1.0f + e);
    f32x8 neg_value = e * inv;
    *x_inout = (f32x8)((negative & (i32x8)neg_value) | (~negative & (i32x8)inv));
}

#endif
