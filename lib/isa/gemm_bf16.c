/* The bf16 GEMM of one path: C = alpha op(A) op(B) + beta C with every element of A and B rounded
 * to bf16 (lib/bf16.h: to nearest, ties to even) and the products summed in fp32. Same contract,
 * plan and determinism as the fp32 sgemm (lib/isa/gemm_tiled.c): each element of C is a chain of
 * sums per k slice, the slices cut by k and the plan's kc alone (gemm_tile.h), so splitting C
 * over threads changes no bit.
 *
 * avx512bf16 (and amx, for products too small for its tiles' set-up to pay): the blocking of
 * the fp32 kernel with k taken in pairs. Both operands are packed, rounding as they go:
 *   A into micro-panels of MR rows, per pair of k steps the MR pairs (A(r, 2q), A(r, 2q+1)),
 *   B into panels of NR = 32 columns, per pair the 32 pairs (B(2q, c), B(2q + 1, c)),
 * an odd k padded with a zero pair half. The micro-kernel holds the MR x NR tile of C in 24 zmm
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

_Static_assert(NR == 32 && MR == 12, "the avx512bf16 tile: 12 rows, two vectors of 16 column pairs");

/* op(A) rows [0, rows) x k [0, kc) -> micro-panels of MR rows, k in pairs:
 * panel[(q MR + r) 2 + e] = bf16(A(r, 2q + e)); rows past `rows` and the pad past kc are zero. */
static void pack_a_bf16(const float *a, int64_t lda, bool trans, int64_t rows, int64_t kc, uint16_t *dst) {
    int64_t pairs = (kc + 1) / 2;
    for (int64_t r0 = 0; r0 < rows; r0 += MR, dst += (int64_t)MR * 2 * pairs) {
        int64_t n_r = rows - r0 < MR ? rows - r0 : MR;
        if (n_r < MR || kc % 2) memset(dst, 0, (size_t)MR * 2 * (size_t)pairs * sizeof(uint16_t));
        if (trans) {   /* A(i, p) = a[p lda + i]: each row of a read in order */
            for (int64_t p = 0; p < kc; p++) {
                const float *src = a + p * lda + r0;
                uint16_t *d = dst + (p / 2) * MR * 2 + (p & 1);
                for (int64_t r = 0; r < n_r; r++) d[2 * r] = tg_bf16_from_float(src[r]);
            }
        } else {       /* A(i, p) = a[i lda + p] */
            for (int64_t r = 0; r < n_r; r++) {
                const float *src = a + (r0 + r) * lda;
                uint16_t *d = dst + 2 * r;
                for (int64_t p = 0; p < kc; p++) d[(p / 2) * MR * 2 + (p & 1)] = tg_bf16_from_float(src[p]);
            }
        }
    }
}

/* op(B) k [0, kc) x columns [0, cols) -> panels of NR columns, k in pairs:
 * panel[(q NR + c) 2 + e] = bf16(B(2q + e, c)); columns past `cols` and the pad past kc are zero. */
static void pack_b_bf16(const float *b, int64_t ldb, bool trans, int64_t kc, int64_t cols, uint16_t *dst) {
    int64_t pairs = (kc + 1) / 2;
    for (int64_t c0 = 0; c0 < cols; c0 += NR, dst += (int64_t)NR * 2 * pairs) {
        int64_t n_c = cols - c0 < NR ? cols - c0 : NR;
        if (n_c < NR || kc % 2) memset(dst, 0, (size_t)NR * 2 * (size_t)pairs * sizeof(uint16_t));
        if (trans) {   /* B(p, c) = b[c ldb + p]: each row of b (a column of B) read in order */
            for (int64_t c = 0; c < n_c; c++) {
                const float *src = b + (c0 + c) * ldb;
                uint16_t *d = dst + 2 * c;
                for (int64_t p = 0; p < kc; p++) d[(p / 2) * NR * 2 + (p & 1)] = tg_bf16_from_float(src[p]);
            }
        } else {       /* B(p, c) = b[p ldb + c] */
            for (int64_t p = 0; p < kc; p++) {
                const float *src = b + p * ldb + c0;
                uint16_t *d = dst + (p / 2) * NR * 2 + (p & 1);
                for (int64_t c = 0; c < n_c; c++) d[2 * c] = tg_bf16_from_float(src[c]);
            }
        }
    }
}

/* acc (MR x NR) = A micro-panel (MR x 2 pairs) * B panel (2 pairs x NR), in a function of its own
 * so that the 24 accumulators, the two B vectors and the broadcast stay in registers (as the fp32
 * kernel's tile_product says). */
static __attribute__((noinline)) void tile_product_bf16(int64_t pairs, const uint16_t *restrict ap,
                                                        const uint16_t *restrict bp, vf acc[restrict MR][2]) {
    __m512 c[MR][2];
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) c[r][0] = c[r][1] = _mm512_setzero_ps();
    for (int64_t q = 0; q < pairs; q++) {
        const __m512bh b0 = (__m512bh)_mm512_load_si512(bp + q * NR * 2);
        const __m512bh b1 = (__m512bh)_mm512_load_si512(bp + q * NR * 2 + NR);
#pragma GCC unroll 12
        for (int r = 0; r < MR; r++) {
            int32_t pair;
            memcpy(&pair, ap + (q * MR + r) * 2, sizeof pair);
            const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
            c[r][0] = _mm512_dpbf16_ps(c[r][0], a, b0);
            c[r][1] = _mm512_dpbf16_ps(c[r][1], a, b1);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) acc[r][0] = (vf)c[r][0], acc[r][1] = (vf)c[r][1];
}

void ISA_FN(bf16gemm_pairs)(const TgGemmPlan *plan, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                            float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                            int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        gemm_scale_c(m, n, beta, c, ldc);
        return;
    }
    int64_t slice = gemm_slice(k, plan->kc), slice_pairs = slice / 2;
    /* the blocks hold what the plan's do in floats, and twice the elements in bf16 */
    int64_t mc = equal_blocks(m, 2 * plan->mc * plan->kc / slice, MR);
    int64_t nc = equal_blocks(n, 2 * plan->nc * plan->kc / slice, NR);
    size_t a_elems = (size_t)mc * 2 * (size_t)slice_pairs, b_elems = (size_t)nc * 2 * (size_t)slice_pairs;
    uint16_t *a_pack = ISA_FN(gemm_thread_buffer)(0, (a_elems + b_elems) * sizeof(uint16_t));
    uint16_t *b_pack = a_pack + a_elems;
    for (int64_t i0 = 0; i0 < m; i0 += mc) {
        int64_t mb = m - i0 < mc ? m - i0 : mc;
        for (int64_t p0 = 0; p0 < k; p0 += slice) {
            int64_t kc = k - p0 < slice ? k - p0 : slice, pairs = (kc + 1) / 2;
            pack_a_bf16(trans_a ? a + p0 * lda + i0 : a + i0 * lda + p0, lda, trans_a, mb, kc, a_pack);
            for (int64_t j0 = 0; j0 < n; j0 += nc) {
                int64_t nb = n - j0 < nc ? n - j0 : nc;
                pack_b_bf16(trans_b ? b + j0 * ldb + p0 : b + p0 * ldb + j0, ldb, trans_b, kc, nb, b_pack);
                for (int64_t ir = 0; ir < mb; ir += MR) {
                    int rows = mb - ir < MR ? (int)(mb - ir) : MR;
                    const uint16_t *ap = a_pack + ir * 2 * pairs;
                    float *c_rows = c + (i0 + ir) * ldc + j0;
                    for (int64_t jr = 0; jr < nb; jr += NR) {
                        int cols = nb - jr < NR ? (int)(nb - jr) : NR;
                        vf acc[MR][2] __attribute__((aligned(64)));
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
void ISA_FN(bf16_loop)(int64_t iters, float *sink) {
    volatile float seed = 1.0f;
    __m512 acc[ISA_PEAK_CHAINS];
    const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80 + (int)(seed - 1.0f));   /* (1, 1) in bf16 */
    const __m512bh y = (__m512bh)_mm512_set1_epi32(0x33803380 + (int)(seed - 1.0f));   /* tiny, so no chain overflows */
    for (int ch = 0; ch < ISA_PEAK_CHAINS; ch++) acc[ch] = _mm512_set1_ps((float)ch);
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 12
        for (int ch = 0; ch < ISA_PEAK_CHAINS; ch++) acc[ch] = _mm512_dpbf16_ps(acc[ch], x, y);
    }
    __m512 total = _mm512_setzero_ps();
    for (int ch = 0; ch < ISA_PEAK_CHAINS; ch++) total = _mm512_add_ps(total, acc[ch]);
    *sink = _mm512_reduce_add_ps(total);
}

#else

/* op(X) (rows x cols) rounded to bf16, as floats, into a compact row-major copy */
static void round_copy(const float *x, int64_t ld, bool trans, int64_t rows, int64_t cols, float *dst) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) dst[i * cols + j] = tg_bf16_round(trans ? x[j * ld + i] : x[i * ld + j]);
}

void ISA_FN(bf16gemm_pairs)(const TgGemmPlan *plan, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                            float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                            int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        gemm_scale_c(m, n, beta, c, ldc);
        return;
    }
    float *a_round = ISA_FN(gemm_thread_buffer)(1, ((size_t)m * (size_t)k + (size_t)k * (size_t)n) * sizeof(float));
    float *b_round = a_round + (size_t)m * (size_t)k;
    round_copy(a, lda, trans_a, m, k, a_round);
    round_copy(b, ldb, trans_b, k, n, b_round);
    ISA_FN(sgemm_tiled)(plan, false, false, m, n, k, alpha, a_round, k, b_round, n, beta, c, ldc);
}

#endif
