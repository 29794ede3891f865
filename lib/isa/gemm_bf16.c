/* The bf16 GEMM of one path: C = alpha op(A) op(B) + beta C with every element of A and B rounded
 * to bf16 (lib/bf16.h: to nearest, ties to even) and the products summed in fp32. Same contract,
 * plan and determinism as the fp32 sgemm (lib/isa/gemm_tiled.c): each element of C is a chain of
 * sums per k slice, the slices cut by k and the plan's kc alone (gemm_tile.h), so splitting C
 * over threads changes no bit.
 *
 * avx512bf16 (compiled into the amx path too, which multiplies on tiles: lib/isa/gemm_amx.c):
 * the blocking of the fp32 kernel with k taken in pairs. Both operands are packed, rounding as they go:
 *   A into micro-panels of TG_MR rows, per pair of k steps the TG_MR pairs (A(r, 2q), A(r, 2q+1)),
 *   B into panels of TG_NR = 32 columns, per pair the 32 pairs (B(2q, c), B(2q + 1, c)),
 * an odd k padded with a zero pair half. The micro-kernel holds the TG_MR x TG_NR tile of C in 24 zmm
 * accumulators; per pair it loads the B panel's two vectors (16 column pairs each) and, for each
 * row, broadcasts the row's pair of A and runs vdpbf16ps on each vector:
 *   acc_c += A(r, 2q) B(2q, c) + A(r, 2q+1) B(2q+1, c)
 * (the products exact in fp32). The instruction treats subnormal inputs as zero and flushes
 * subnormal results, as every tapegrad thread does for fp32 (lib/fpmode.h).
 *
 * generic, avx2, avx512 (no bf16 instructions): the rounded operands are copied as floats and
 * multiplied by the path's fp32 kernel. Same rounding, same fp32 sums, slower than fp32 by the
 * copies; the CLI says so when a bf16 run starts on such a CPU. */
#include <stdlib.h>

#include "lib/bf16.h"
#include "lib/isa/gemm_tile.h"
#include "tapegrad/error.h"

#if TG_ISA_LEVEL >= 3
#include <immintrin.h>

_Static_assert(TG_NR == 32 && TG_MR == 12, "the avx512bf16 tile: 12 rows, two vectors of 16 column pairs");

/* Rounding as packing goes, in two shapes of loop that the compiler vectorises (the rounding
 * branch-free, as tg_bf16_from_float computes it):
 *   a run of k along a row (A plain, B transposed): rounded into a contiguous run, then its
 *     pairs (32 bits each) stored `stride` pairs apart;
 *   two rows of k side by side (A transposed, B plain): each pair is one element of row 2q and
 *     one of row 2q + 1, interleaved. */
typedef uint32_t bf16_pair __attribute__((may_alias));   /* two bf16 in the packing buffer */

static inline uint16_t bf16_bits(uint32_t u) {
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet_nan = (u >> 16) | 0x0040u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

static inline void round_run(const float *src, int64_t n, uint16_t *dst) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, src + i, sizeof u);
        dst[i] = bf16_bits(u);
    }
}

/* src[0, kc) -> the pairs dst32[q stride], an odd kc padded with a zero */
static void pack_run_as_pairs(const float *src, int64_t kc, bf16_pair *dst32, int64_t stride) {
    uint16_t run[TG_GEMM_KC_MAX + 8] __attribute__((aligned(64)));
    round_run(src, kc, run);
    run[kc] = 0;
    for (int64_t q = 0; q < (kc + 1) / 2; q++) {
        uint32_t pair;
        memcpy(&pair, run + 2 * q, sizeof pair);
        dst32[q * stride] = pair;
    }
}

/* Rows 2q and 2q + 1 (row1 NULL: zeros) of `count` lines -> their pairs, line l in panel l / width
 * at pair q: dst[(l / width) panel + (q width + l % width) 2 + e]. A whole row at a time, so the
 * rounding runs over long runs whatever the panel width. */
static inline __attribute__((always_inline)) void pack_two_rows(const float *row0, const float *row1, int64_t count,
                                                                int width, int64_t panel, uint16_t *dst) {
    for (int64_t l0 = 0; l0 < count; l0 += width, dst += panel) {
        int64_t n_l = count - l0 < width ? count - l0 : width;
        for (int64_t l = 0; l < n_l; l++) {
            uint32_t u0, u1 = 0;
            memcpy(&u0, row0 + l0 + l, sizeof u0);
            if (row1) memcpy(&u1, row1 + l0 + l, sizeof u1);
            dst[2 * l] = bf16_bits(u0);
            dst[2 * l + 1] = row1 ? bf16_bits(u1) : 0;
        }
    }
}

/* op(X) k [0, kc) x `lines` [0, count) (rows of A, columns of B) -> panels of `width` lines
 * (TG_MR or TG_NR), k in pairs: panel[(q width + l) 2 + e] = bf16(X(line l, k 2q + e)); lines past
 * `count` and the pad past kc are zero. `along_k`: a line's k steps lie side by side in x (A
 * plain, B transposed); else a step's lines do (A transposed, B plain). */
static inline __attribute__((always_inline)) void pack_pairs(const float *x, int64_t ld, bool along_k, int64_t kc,
                                                             int64_t count, int width, uint16_t *dst) {
    int64_t pairs = (kc + 1) / 2, panel = (int64_t)width * 2 * pairs;
    if (count % width) memset(dst + count / width * panel, 0, (size_t)panel * sizeof(uint16_t));
    if (along_k) {
        for (int64_t l = 0; l < count; l++)
            pack_run_as_pairs(x + l * ld, kc, (bf16_pair *)(dst + l / width * panel) + l % width, width);
        return;
    }
    for (int64_t q = 0; q < pairs; q++)
        pack_two_rows(x + 2 * q * ld, 2 * q + 1 < kc ? x + (2 * q + 1) * ld : NULL, count, width, panel,
                      dst + q * width * 2);
}

static void pack_a_pairs(const float *a, int64_t lda, bool trans, int64_t kc, int64_t rows, uint16_t *dst) {
    pack_pairs(a, lda, !trans, kc, rows, TG_MR, dst);
}
static void pack_b_pairs(const float *b, int64_t ldb, bool trans, int64_t kc, int64_t cols, uint16_t *dst) {
    pack_pairs(b, ldb, trans, kc, cols, TG_NR, dst);
}

/* acc (TG_MR x TG_NR) = A micro-panel (TG_MR x 2 pairs) * B panel (2 pairs x TG_NR), in a function of its own
 * so that the 24 accumulators, the two B vectors and the broadcast stay in registers (as the fp32
 * kernel's tile_product says). */
static __attribute__((noinline)) void tile_product_bf16(int64_t pairs, const uint16_t *restrict ap,
                                                        const uint16_t *restrict bp, vf acc[restrict TG_MR][2]) {
    __m512 c[TG_MR][2];
#pragma GCC unroll 12
    for (int r = 0; r < TG_MR; r++) c[r][0] = c[r][1] = _mm512_setzero_ps();
    for (int64_t q = 0; q < pairs; q++) {
        const __m512bh b0 = (__m512bh)_mm512_load_si512(bp + q * TG_NR * 2);
        const __m512bh b1 = (__m512bh)_mm512_load_si512(bp + q * TG_NR * 2 + TG_NR);
#pragma GCC unroll 12
        for (int r = 0; r < TG_MR; r++) {
            int32_t pair;
            memcpy(&pair, ap + (q * TG_MR + r) * 2, sizeof pair);
            const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
            c[r][0] = _mm512_dpbf16_ps(c[r][0], a, b0);
            c[r][1] = _mm512_dpbf16_ps(c[r][1], a, b1);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < TG_MR; r++) acc[r][0] = (vf)c[r][0], acc[r][1] = (vf)c[r][1];
}

void TG_ISA_FN(bf16gemm_pairs)(const TgGemmPlan *plan, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                            float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                            int64_t ldc) {
    if (gemm_trivial(m, n, k, beta, c, ldc)) return;
    int64_t slice = gemm_slice(k, plan->kc), slice_pairs = slice / 2;
    /* the blocks hold what the plan's do in floats, and twice the elements in bf16 */
    int64_t mc = equal_blocks(m, 2 * plan->mc * plan->kc / slice, TG_MR);
    int64_t nc = equal_blocks(n, 2 * plan->nc * plan->kc / slice, TG_NR);
    size_t a_elems = (size_t)mc * 2 * (size_t)slice_pairs, b_elems = (size_t)nc * 2 * (size_t)slice_pairs;
    uint16_t *a_pack = TG_ISA_FN(gemm_thread_buffer)(0, (a_elems + b_elems) * sizeof(uint16_t));
    uint16_t *b_pack = a_pack + a_elems;
    for (int64_t i0 = 0; i0 < m; i0 += mc) {
        int64_t mb = m - i0 < mc ? m - i0 : mc;
        for (int64_t p0 = 0; p0 < k; p0 += slice) {
            int64_t kc = k - p0 < slice ? k - p0 : slice, pairs = (kc + 1) / 2;
            pack_a_pairs(trans_a ? a + p0 * lda + i0 : a + i0 * lda + p0, lda, trans_a, kc, mb, a_pack);
            for (int64_t j0 = 0; j0 < n; j0 += nc) {
                int64_t nb = n - j0 < nc ? n - j0 : nc;
                pack_b_pairs(trans_b ? b + j0 * ldb + p0 : b + p0 * ldb + j0, ldb, trans_b, kc, nb, b_pack);
                for (int64_t ir = 0; ir < mb; ir += TG_MR) {
                    int rows = mb - ir < TG_MR ? (int)(mb - ir) : TG_MR;
                    const uint16_t *ap = a_pack + ir * 2 * pairs;
                    float *c_rows = c + (i0 + ir) * ldc + j0;
                    for (int64_t jr = 0; jr < nb; jr += TG_NR) {
                        int cols = nb - jr < TG_NR ? (int)(nb - jr) : TG_NR;
                        vf acc[TG_MR][2] __attribute__((aligned(64)));
                        prefetch_tile(c_rows + jr, ldc);
                        tile_product_bf16(pairs, ap, b_pack + jr * 2 * pairs, acc);
                        write_tile(acc, c_rows + jr, ldc, rows, cols, alpha, beta, p0 == 0);
                    }
                }
            }
        }
    }
}

/* The bf16 ceiling: independent chains of vdpbf16ps on registers, 2 x 32 FLOPs each (16 lanes,
 * two products and their sums per lane). */
void TG_ISA_FN(bf16_loop)(int64_t iters, float *sink) {
    volatile float seed = 1.0f;
    __m512 acc[TG_ISA_PEAK_CHAINS];
    const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80 + (int)(seed - 1.0f));   /* (1, 1) in bf16 */
    const __m512bh y = (__m512bh)_mm512_set1_epi32(0x33803380 + (int)(seed - 1.0f));   /* tiny, so no chain overflows */
    for (int ch = 0; ch < TG_ISA_PEAK_CHAINS; ch++) acc[ch] = _mm512_set1_ps((float)ch);
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 12
        for (int ch = 0; ch < TG_ISA_PEAK_CHAINS; ch++) acc[ch] = _mm512_dpbf16_ps(acc[ch], x, y);
    }
    __m512 total = _mm512_setzero_ps();
    for (int ch = 0; ch < TG_ISA_PEAK_CHAINS; ch++) total = _mm512_add_ps(total, acc[ch]);
    *sink = _mm512_reduce_add_ps(total);
}

#else

/* op(X) (rows x cols) rounded to bf16, as floats, into a compact row-major copy */
static void round_copy(const float *x, int64_t ld, bool trans, int64_t rows, int64_t cols, float *dst) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) dst[i * cols + j] = tg_bf16_round(trans ? x[j * ld + i] : x[i * ld + j]);
}

void TG_ISA_FN(bf16gemm_pairs)(const TgGemmPlan *plan, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                            float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                            int64_t ldc) {
    if (gemm_trivial(m, n, k, beta, c, ldc)) return;
    float *a_round = TG_ISA_FN(gemm_thread_buffer)(1, ((size_t)m * (size_t)k + (size_t)k * (size_t)n) * sizeof(float));
    float *b_round = a_round + (size_t)m * (size_t)k;
    round_copy(a, lda, trans_a, m, k, a_round);
    round_copy(b, ldb, trans_b, k, n, b_round);
    TG_ISA_FN(sgemm_tiled)(plan, false, false, m, n, k, alpha, a_round, k, b_round, n, beta, c, ldc);
}

#endif
