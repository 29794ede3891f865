/* tapegrad's own single-threaded sgemm, one copy per kernel path (lib/isa/simd.h).
 *
 * The textbook blocked GEMM (Goto/BLIS):
 *
 *   for each block of NC columns of C
 *     for each slice along k (at most KC):   pack op(B)[slice, block] into NR-column panels
 *       for each block of MC rows:
 *         for each NR panel, each MR panel:   C tile (MR x NR) += A rows * B panel
 *
 * Unlike BLIS, a non-transposed A is read where it lies (MR rows, one float of each per step of
 * k) rather than packed: with k = 128 or n = 128, as in the small model, packing A cost as much
 * as the product itself, and the rows of a tile stay in L1/L2 across the NR panels anyway. Only
 * a last partial panel of fewer than MR rows is packed (with zero rows), so the kernel never
 * reads past A. A transposed A (dY^T in a weight gradient, k = tokens) is packed per block.
 *
 * The micro-kernel keeps an MR x NR tile of C in 2 MR vector registers (NR = two vectors);
 * per step of k it loads the two vectors of the B panel and, for each of the MR rows,
 * broadcasts one float of A and does two multiply-adds: 2 MR FMAs per 2 loads and MR
 * broadcasts, so the FMA units, not the loads, set the pace. The tile per path fills the
 * vector registers, with room for the two B vectors and a broadcast:
 *
 *   avx512  16-float zmm, 32 registers: MR 12, NR 32 (24 accumulators)
 *   avx2     8-float ymm, 16 registers: MR  6, NR 16 (12 accumulators)
 *   generic  4-float xmm, 16 registers: MR  6, NR  8 (12 accumulators; a multiply and an add)
 *
 * At least 8 independent accumulators keep two FMA pipes of latency 4 busy. The packed B panel
 * (KC x NR floats: at most 64 KB for avx512, 32 KB for avx2) stays in L1/L2 across the MR panels
 * of a block of MC rows, whose A (MC x KC) stays in L2. A's rows, read in place, are prefetched
 * a tile ahead: MR short streams that start in every tile are too short for the hardware's
 * prefetcher to pick up (that and slices of 512 rather than 384 + 128 made the minimind-26m
 * forward products 5-10% faster: bench/README.md).
 *
 * Compiled with -O3 -ffp-contract=fast, so that `acc += a * b` becomes one FMA (ISO C mode turns
 * contraction off) and the accumulators stay in registers (at -O2 GCC spills the B vectors to
 * the stack and runs at half the speed). Each element of C is the sum over k in a fixed order (a
 * chain of multiply-adds per k slice, the slices added in order), whatever the shape of the
 * call or the tile the element falls in (a partial tile runs the same vector code as a full
 * one): splitting C over threads changes no bit. Measured speeds are in bench/README.md.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "lib/isa/isa_kernels.h"
#include "tapegrad/error.h"
#include "lib/isa/simd.h"

enum {
    MR = ISA_GEMM_MR, /* rows of the C tile */
    NR = ISA_GEMM_NR, /* columns of the C tile: two vectors */
    KC = 512,         /* longest k slice; k is cut into equal slices of at most this */
    MC = 96,          /* rows per block: 96 x 512 floats of A = 192 KB (a multiple of MR) */
    NC = 512,         /* columns per packed B block: 512 x 512 floats = 1 MB (a multiple of NR) */
};
_Static_assert(MC % MR == 0 && NC % NR == 0, "blocks are whole tiles");

/* A rows [0, rows) x k [0, kc) -> panels of MR rows: panel[p * MR + r] = A(r, p); rows past
 * `rows` are zero. */
static void pack_a(const float *a, int64_t lda, bool trans, int64_t rows, int64_t kc, float *dst) {
    if (trans) {   /* A(i, p) = a[p lda + i]: row p of a holds A's column p; read it once, in order */
        int64_t full_rows = rows / MR * MR;
        for (int64_t p = 0; p < kc; p++) {
            const float *src = a + p * lda;
            for (int64_t r0 = 0; r0 < full_rows; r0 += MR) memcpy(dst + r0 * kc + p * MR, src + r0, MR * sizeof(float));
            if (full_rows < rows) {
                float *d = dst + full_rows * kc + p * MR;
                int64_t r = 0;
                for (; r < rows - full_rows; r++) d[r] = src[full_rows + r];
                for (; r < MR; r++) d[r] = 0.0f;
            }
        }
        return;
    }
    for (int64_t r0 = 0; r0 < rows; r0 += MR, dst += MR * kc) {
        int64_t n_r = rows - r0 < MR ? rows - r0 : MR;
        for (int64_t r = 0; r < MR; r++) {
            if (r < n_r) {
                const float *src = a + (r0 + r) * lda;
                for (int64_t p = 0; p < kc; p++) dst[p * MR + r] = src[p];
            } else {
                for (int64_t p = 0; p < kc; p++) dst[p * MR + r] = 0.0f;
            }
        }
    }
}

/* B k [0, kc) x columns [0, cols) -> panels of NR columns: panel[p * NR + c] = B(p, c); columns
 * past `cols` are zero. Memory is read in its own order (a row of b at a time, or a run of
 * PACK_RUN floats of each row when B is transposed), the panels written where they lie in L1/L2:
 * walking b panel by panel touched a new cache line (and often a new page) per float or two. */
enum { PACK_RUN = 16 };
static void pack_b(const float *b, int64_t ldb, bool trans, int64_t kc, int64_t cols, float *dst) {
    int64_t full_cols = cols / NR * NR;
    if (!trans) {   /* B(p, c) = b[p ldb + c]: row p of b is row p of every panel */
        for (int64_t p = 0; p < kc; p++) {
            const float *src = b + p * ldb;
            for (int64_t c0 = 0; c0 < full_cols; c0 += NR) {
                float *d = dst + c0 * kc + p * NR;
                VF_ALIGNED(d) = VF(src + c0);
                VF_ALIGNED(d + VLANES) = VF(src + c0 + VLANES);
            }
            if (full_cols < cols) {
                float *d = dst + full_cols * kc + p * NR;
                int64_t c = 0;
                for (; c < cols - full_cols; c++) d[c] = src[full_cols + c];
                for (; c < NR; c++) d[c] = 0.0f;
            }
        }
        return;
    }
    /* B(p, c) = b[c ldb + p]: row c of b is column c of B; PACK_RUN steps of k at a time, so the
     * panel lines being written stay in L1 while each row's run is read */
    for (int64_t c0 = 0; c0 < cols; c0 += NR, dst += NR * kc) {
        int64_t n_c = cols - c0 < NR ? cols - c0 : NR;
        for (int64_t p0 = 0; p0 < kc; p0 += PACK_RUN) {
            int64_t p1 = p0 + PACK_RUN < kc ? p0 + PACK_RUN : kc;
            for (int64_t c = 0; c < NR; c++) {
                if (c < n_c) {
                    const float *src = b + (c0 + c) * ldb;
                    for (int64_t p = p0; p < p1; p++) dst[p * NR + c] = src[p];
                } else {
                    for (int64_t p = p0; p < p1; p++) dst[p * NR + c] = 0.0f;
                }
            }
        }
    }
}

/* One tile of C (MR rows of NR floats, row stride ldc) from its accumulators: first slice
 * C = alpha acc + beta C (beta 0 never reads C), later slices C += alpha acc. */
static inline __attribute__((always_inline)) void update_tile(float *c, int64_t ldc, vf acc[MR][2], float alpha,
                                                              float beta, bool first) {
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
        float *cr = c + r * ldc;
        if (!first) {
            VF(cr) += alpha * acc[r][0];
            VF(cr + VLANES) += alpha * acc[r][1];
        } else if (beta == 0.0f) {
            VF(cr) = alpha * acc[r][0];
            VF(cr + VLANES) = alpha * acc[r][1];
        } else {
            VF(cr) = alpha * acc[r][0] + beta * VF(cr);
            VF(cr + VLANES) = alpha * acc[r][1] + beta * VF(cr + VLANES);
        }
    }
}

/* acc (MR x NR) = A (MR x kc) * B panel (kc x NR), then written into the tile of C.
 * A(r, p) = a[r a_rs + p a_cs]: a packed panel (1, MR), or A read where it lies, (lda, 1) or
 * (1, lda) when transposed. A full tile is updated in place; a partial one (rows x cols) is
 * copied into `edge`, updated by the same vector code (so an element's rounding does not depend
 * on the tile it falls in) and copied back. */
static inline __attribute__((always_inline)) void micro_kernel(int64_t kc, const float *a, int64_t a_rs,
                                                               int64_t a_cs, const float *bp, float *c,
                                                               int64_t ldc, int rows, int cols, float alpha,
                                                               float beta, bool first) {
    vf acc[MR][2];
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = (vf){0};
    for (int64_t p = 0; p < kc; p++) {
        /* A read where it lies: fetch the next tile's rows a line ahead of need (16 steps of k
         * per 64-byte line), since MR short streams start cold in every tile */
        if (a_cs == 1 && (p & 15) == 0) {
#pragma GCC unroll 12
            for (int r = 0; r < MR; r++) __builtin_prefetch(a + (MR + r) * a_rs + p, 0, 3);
        }
        const vf b0 = VF_ALIGNED(bp + p * NR), b1 = VF_ALIGNED(bp + p * NR + VLANES);
#pragma GCC unroll 12
        for (int r = 0; r < MR; r++) {
            const float a_rp = a[r * a_rs + p * a_cs];
            acc[r][0] += a_rp * b0;
            acc[r][1] += a_rp * b1;
        }
    }
    if (rows == MR && cols == NR) {
        update_tile(c, ldc, acc, alpha, beta, first);
        return;
    }
    float edge[MR][NR] __attribute__((aligned(64)));
    bool reads_c = !first || beta != 0.0f;
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) edge[r][j] = reads_c && r < rows && j < cols ? c[r * ldc + j] : 0.0f;
    update_tile(&edge[0][0], NR, acc, alpha, beta, first);
    for (int r = 0; r < rows; r++) memcpy(c + r * ldc, edge[r], (size_t)cols * sizeof(float));
}

/* The two ways of reading A, each with its strides known to the compiler. */
static void kernel_packed_a(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, int rows,
                            int cols, float alpha, float beta, bool first) {
    micro_kernel(kc, ap, 1, MR, bp, c, ldc, rows, cols, alpha, beta, first);
}
static void kernel_rows_a(int64_t kc, const float *a, int64_t lda, const float *bp, float *c, int64_t ldc,
                          int cols, float alpha, float beta, bool first) {
    micro_kernel(kc, a, lda, 1, bp, c, ldc, MR, cols, alpha, beta, first);
}

/* Packing buffers of the calling thread, allocated on its first product and then reused; the
 * key's destructor frees them when the thread ends (the pool's workers end with the pool). */
static _Thread_local float *pack_buffer;
static pthread_key_t pack_buffer_key;
static pthread_once_t pack_buffer_key_once = PTHREAD_ONCE_INIT;

static void make_pack_buffer_key(void) {
    int rc = pthread_key_create(&pack_buffer_key, free);
    if (rc != 0) tg_abort_at(__FILE__, __LINE__, "pthread_key_create failed (%d)", rc);
}

static float *thread_pack_buffer(void) {
    if (!pack_buffer) {
        size_t floats = (size_t)MC * KC + (size_t)KC * NC;
        pack_buffer = aligned_alloc(64, floats * sizeof(float));
        if (!pack_buffer) tg_abort_at(__FILE__, __LINE__, "out of memory: GEMM packing buffer");
        pthread_once(&pack_buffer_key_once, make_pack_buffer_key);
        pthread_setspecific(pack_buffer_key, pack_buffer);
    }
    return pack_buffer;
}

void ISA_FN(sgemm_tiled)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                    int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {   /* C = beta C */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
        return;
    }
    float *a_pack = thread_pack_buffer(), *b_pack = a_pack + (size_t)MC * KC;
    /* k in equal slices of at most KC (rounded up to 8): a short last slice (k = 512 as 384 +
     * 128) pays a tile's fixed costs -- the accumulators, C read and written again, A's rows
     * fetched anew -- over few steps. The slices depend on k alone, so every split of C over
     * threads sums each element in the same order. */
    int64_t slices = (k + KC - 1) / KC, slice = ((k + slices - 1) / slices + 7) / 8 * 8;
    for (int64_t j0 = 0; j0 < n; j0 += NC) {
        int64_t nc = n - j0 < NC ? n - j0 : NC;
        for (int64_t p0 = 0; p0 < k; p0 += slice) {
            int64_t kc = k - p0 < slice ? k - p0 : slice;
            const float *b_slice = trans_b ? b + j0 * ldb + p0 : b + p0 * ldb + j0;
            pack_b(b_slice, ldb, trans_b, kc, nc, b_pack);
            for (int64_t i0 = 0; i0 < m; i0 += MC) {
                int64_t mc = m - i0 < MC ? m - i0 : MC;
                /* A^T (a weight gradient's dY^T) is packed, once per block: read in place, each
                 * step of k would touch another cache line, and the A tile would not stay in L1
                 * next to the B panel. (Packing a plain A too, for blocks of 256 columns or
                 * more, measured 10% slower: bench/README.md.) */
                if (trans_a) pack_a(a + p0 * lda + i0, lda, true, mc, kc, a_pack);
                for (int64_t jr = 0; jr < nc; jr += NR) {
                    int cols = nc - jr < NR ? (int)(nc - jr) : NR;
                    const float *bp = b_pack + jr * kc;
                    for (int64_t ir = 0; ir < mc; ir += MR) {
                        int rows = mc - ir < MR ? (int)(mc - ir) : MR;
                        float *c_tile = c + (i0 + ir) * ldc + j0 + jr;
                        /* rows of A are read in place: packing them would cost as much as the
                         * product when k or n is small (k = 128 here); a last partial panel is
                         * packed with zero rows */
                        const float *a_rows = a + (i0 + ir) * lda + p0;
                        if (trans_a) {
                            kernel_packed_a(kc, a_pack + ir * kc, bp, c_tile, ldc, rows, cols, alpha, beta, p0 == 0);
                        } else if (rows < MR) {
                            pack_a(a_rows, lda, false, rows, kc, a_pack);
                            kernel_packed_a(kc, a_pack, bp, c_tile, ldc, rows, cols, alpha, beta, p0 == 0);
                        } else {
                            kernel_rows_a(kc, a_rows, lda, bp, c_tile, ldc, cols, alpha, beta, p0 == 0);
                        }
                    }
                }
            }
        }
    }
}
