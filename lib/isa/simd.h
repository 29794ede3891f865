/* Vectors of the instruction set a kernel file is compiled for. Private to lib/isa/.
 *
 * Every file in lib/isa/ is compiled once per kernel path (CMakeLists.txt), with
 *   TG_ISA_LEVEL   0 generic, 1 avx2, 2 avx512, 3 avx512bf16, 4 amx (the values of TgIsa in
 *                  lib/cpu.h)
 *   TG_ISA_SUFFIX  generic, avx2, avx512, avx512bf16, amx: TG_ISA_FN(name) is tg_isa_name_<suffix>, so the
 *                  copies of a kernel link side by side and lib/cpu.c picks one table at start-up
 * and the compiler flags of that path: none beyond the build's baseline for generic (SSE2 on
 * x86-64), -mavx2 -mfma for avx2, -mavx512f -mavx512vl -mavx512bw -mavx512dq for avx512, those
 * and -mavx512bf16 for avx512bf16, and -mamx-tile -mamx-bf16 besides for amx (and -O3
 * -ffp-contract=fast -fno-math-errno for all). The two bf16 paths run the avx512 path's fp32
 * code; they differ from it in the bf16 GEMM alone (lib/isa/gemm_bf16.c, lib/isa/gemm_amx.c).
 *
 * The kernels are written once with GNU C vectors of TG_VLANES floats: 16 (one zmm register) for
 * avx512, 8 (one ymm) for avx2, 4 (one xmm, or whatever the target has) for generic. Lane-wise
 * + - * / round exactly like the scalar operations; with -ffp-contract=fast `acc += a * b`
 * becomes one fused multiply-add where the path has FMA (avx2, avx512) and stays a multiply and
 * an add where it has not (generic on x86-64). Each element is computed by the same lane-wise
 * code whether it sits in a full vector or in a partial one at the end of a range (load_part /
 * store_part pad with zeros), and every reduction runs in an order fixed by its length, so an
 * element's bits depend on the path and the data, not on where a thread's range begins. Paths
 * differ from one another in the lane count of reductions and in FMA or not, within the
 * tolerances tests/test_kernels.c states.
 *
 * No function takes or returns a vector by value (the ABI of a vector argument depends on the
 * target flags), hence the in-place helpers, all static inline. */
#ifndef TAPEGRAD_ISA_SIMD_H
#define TAPEGRAD_ISA_SIMD_H

#include <stdint.h>
#include <string.h>

#if !defined(TG_ISA_LEVEL) || !defined(TG_ISA_SUFFIX)
#error "lib/isa/ files are compiled per kernel path: TG_ISA_LEVEL and TG_ISA_SUFFIX come from CMakeLists.txt"
#endif

#if TG_ISA_LEVEL >= 2 && TG_ISA_LEVEL <= 4
#if !defined(__AVX512F__)
#error "the avx512 kernels need -mavx512f"
#endif
#if TG_ISA_LEVEL >= 3 && !defined(__AVX512BF16__)
#error "the avx512bf16 and amx kernels need -mavx512bf16"
#endif
/* GCC spells the AMX macros __AMX_TILE__ / __AMX_BF16__, clang __AMXTILE__ / __AMXBF16__ */
#if TG_ISA_LEVEL == 4 && !((defined(__AMX_TILE__) || defined(__AMXTILE__)) && (defined(__AMX_BF16__) || defined(__AMXBF16__)))
#error "the amx kernels need -mamx-tile -mamx-bf16"
#endif
#define TG_VLANES 16
#elif TG_ISA_LEVEL == 1
#if !defined(__AVX2__) || !defined(__FMA__) || defined(__AVX512F__)
#error "the avx2 kernels need -mavx2 -mfma and no AVX-512"
#endif
#define TG_VLANES 8
#elif TG_ISA_LEVEL == 0
#if defined(__AVX__)
#error "the generic kernels are compiled without AVX (the build's baseline only)"
#endif
#define TG_VLANES 4
#else
#error "unknown TG_ISA_LEVEL"
#endif

#define TG_ISA_CAT2(a, b) a##_##b
#define TG_ISA_CAT(a, b) TG_ISA_CAT2(a, b)
#define TG_ISA_FN(name) TG_ISA_CAT(tg_isa_##name, TG_ISA_SUFFIX)

typedef float vf __attribute__((vector_size(4 * TG_VLANES)));
typedef int32_t vi __attribute__((vector_size(4 * TG_VLANES)));
typedef double vd __attribute__((vector_size(8 * TG_VLANES)));   /* TG_VLANES doubles: two registers */
/* TG_VLANES floats in memory at any float boundary */
typedef float vf_unaligned __attribute__((vector_size(4 * TG_VLANES), aligned(4), may_alias));
typedef double vd_unaligned __attribute__((vector_size(8 * TG_VLANES), aligned(8), may_alias));
#define TG_VF(ptr) (*(vf_unaligned *)(ptr))
#define TG_VD(ptr) (*(vd_unaligned *)(ptr))
#define TG_VF_ALIGNED(ptr) (*(vf *)(ptr))

#define TG_ALWAYS_INLINE static inline __attribute__((always_inline))

/* *v = p[0..count), the other lanes 0, for 0 < count; and back (count may exceed TG_VLANES: then a
 * whole vector). A loop that runs whole vectors and then one partial vector computes every
 * element by the same lane-wise formula. */
TG_ALWAYS_INLINE void load_part(vf *v, const float *p, int64_t count) {
    if (count >= TG_VLANES) {
        *v = TG_VF(p);
        return;
    }
    *v = (vf){0};
    memcpy(v, p, (size_t)count * sizeof(float));
}
TG_ALWAYS_INLINE void store_part(float *p, const vf *v, int64_t count) {
    if (count >= TG_VLANES) TG_VF(p) = *v;
    else memcpy(p, v, (size_t)count * sizeof(float));
}
TG_ALWAYS_INLINE void load_part_d(vd *v, const double *p, int64_t count) {
    if (count >= TG_VLANES) {
        *v = TG_VD(p);
        return;
    }
    *v = (vd){0};
    memcpy(v, p, (size_t)count * sizeof(double));
}
TG_ALWAYS_INLINE void store_part_d(double *p, const vd *v, int64_t count) {
    if (count >= TG_VLANES) TG_VD(p) = *v;
    else memcpy(p, v, (size_t)count * sizeof(double));
}

/* a b + c for one float, rounded as one lane of `acc += a * b` on vectors rounds: fused where the
 * target has FMA (there -ffp-contract=fast fuses the vector code). Written out because the
 * vectoriser may turn a scalar loop's multiplies into a vector operation and leave the adds
 * apart, which would round them twice. */
TG_ALWAYS_INLINE float scalar_fma(float a, float b, float c) {
#ifdef __FP_FAST_FMAF
    return __builtin_fmaf(a, b, c);
#else
    return a * b + c;
#endif
}

/* sum of the lanes, lane 0 first (a fixed order) */
TG_ALWAYS_INLINE float lane_sum(const vf *v) {
    float sum = (*v)[0];
    for (int l = 1; l < TG_VLANES; l++) sum += (*v)[l];
    return sum;
}
TG_ALWAYS_INLINE double lane_sum_d(const vd *v) {
    double sum = (*v)[0];
    for (int l = 1; l < TG_VLANES; l++) sum += (*v)[l];
    return sum;
}
TG_ALWAYS_INLINE float lane_max(const vf *v) {
    float m = (*v)[0];
    for (int l = 1; l < TG_VLANES; l++) m = (*v)[l] > m ? (*v)[l] : m;
    return m;
}
TG_ALWAYS_INLINE void vmax_inplace(vf *acc, const vf *x) {
    vi greater = *x > *acc;
    *acc = (vf)((greater & (vi)*x) | (~greater & (vi)*acc));
}
TG_ALWAYS_INLINE void widen(vd *out, const vf *in) { *out = __builtin_convertvector(*in, vd); }

/* x = exp(x) for x <= 0 (a softmax's argument after its max is subtracted).
 * Cephes' expf: x = n ln2 + r with |r| <= ln2/2, exp(r) by a degree-7 polynomial, 2^n written
 * into the exponent bits. Over every float in [-87, 0] the largest relative error is about
 * 1e-7 (glibc's expf: 6e-8); below -87 it returns exp(-87) = 1.6e-38 instead of a subnormal,
 * nothing next to a softmax row's largest term, 1. Unlike a call to expf it vectorises. */
TG_ALWAYS_INLINE void exp_nonpositive(vf *x_inout) {
    const vf lowest = (vf){0} - 87.0f;
    vf x = *x_inout;
    vi below = x < lowest;
    x = (vf)((below & (vi)lowest) | (~below & (vi)x));
    const float round_magic = 12582912.0f;   /* 1.5 * 2^23: adding it rounds to an integer */
    vf n = (x * 1.44269504088896341f + round_magic) - round_magic;   /* round(x / ln2) */
    vf r = x - n * 0.693359375f + n * 2.12194440e-4f;               /* x - n ln2, in two parts */
    vf poly = r * 1.9875691500e-4f + 1.3981999507e-3f;
    poly = poly * r + 8.3334519073e-3f;
    poly = poly * r + 4.1665795894e-2f;
    poly = poly * r + 1.6666665459e-1f;
    poly = poly * r + 5.0000001201e-1f;
    poly = poly * r * r + r + 1.0f;
    vi two_to_n = (__builtin_convertvector(n, vi) + 127) << 23;
    *x_inout = poly * (vf)two_to_n;
}

/* x = sigmoid(x) = 1 / (1 + exp(-x)), through exp of -|x| <= 0 so no exp overflows:
 *   x >= 0: 1 / (1 + e),   x < 0: e / (1 + e),   e = exp(-|x|). */
TG_ALWAYS_INLINE void sigmoid(vf *x_inout) {
    vf x = *x_inout;
    vi negative = x < 0.0f;
    const vi sign_bit = (vi){0} + INT32_MIN;
    vf e = (vf)((vi)x | sign_bit);   /* -|x| */
    exp_nonpositive(&e);
    vf inv = 1.0f / (1.0f + e);
    vf neg_value = e * inv;
    *x_inout = (vf)((negative & (vi)neg_value) | (~negative & (vi)inv));
}

#endif
