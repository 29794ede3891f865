/* tapegrad's own single-threaded sgemm, one copy per kernel path (lib/isa/simd.h).
 *
 * The blocked GEMM of BLIS, with its blocks derived from this machine's caches (lib/gemm_plan.h
 * says how; the names are BLIS's with A and B exchanged, since row-major C is column-major C^T):
 *
 *   for each block of mc rows of C (L3)
 *     for each k slice of at most kc:          a transposed A [block, slice]: packed into
 *                                              TG_MR-row micro-panels
 *       for each block of nc columns (L2):     pack B [slice, block] into TG_NR-column panels
 *         for each TG_MR micro-panel of A (L1):   for each TG_NR panel of B (streams from L2):
 *           C tile (TG_MR x TG_NR) += A micro-panel * B panel
 *
 * B is always packed: a panel holds, per step of k, the TG_NR floats the kernel loads at that step,
 * side by side, so the panels stream in order. A plain A is read where it lies (TG_MR rows, one
 * float of each per step of k, the next micro-panel's rows prefetched a line ahead): each
 * micro-panel is reused only n / TG_NR times, too few to pay for packing it (docs/results.md,
 * 2026-12-02, GEMM blocks from the caches). A transposed A (dY^T in a weight gradient, k = tokens) is packed once per k slice:
 * read in place, each step of k would touch another line. A last partial micro-panel of a plain
 * A is packed with zero rows, so the kernel never reads past A.
 *
 * The micro-kernel keeps an TG_MR x TG_NR tile of C in 2 TG_MR vector registers (TG_NR = two vectors); per
 * step of k it loads the two vectors of the B panel and, for each of the TG_MR rows, broadcasts one
 * float of A and does two multiply-adds:
 *
 *   avx512  16-float zmm, 32 registers: TG_MR 12, TG_NR 32 (24 accumulators)
 *   avx2     8-float ymm, 16 registers: TG_MR  6, TG_NR 16 (12 accumulators)
 *   generic  4-float xmm, 16 registers: TG_MR  6, TG_NR  8 (12 accumulators; a multiply and an add)
 *
 * Compiled with -O3 -ffp-contract=fast, so that `acc += a * b` becomes one FMA (ISO C mode turns
 * contraction off) and the accumulators stay in registers (at -O2 GCC spills the B vectors to
 * the stack and runs at half the speed). Each element of C is the sum over k in a fixed order (a
 * chain of multiply-adds per k slice, the slices added in order), whatever the shape of the
 * call, the blocks or the tile the element falls in (a partial tile runs the same vector code as
 * a full one): splitting C over threads, or another mc or nc, changes no bit; the slices depend
 * on k and the plan's kc alone. Measured speeds are in docs/results.md.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "lib/isa/gemm_tile.h"
#include "tapegrad/error.h"

_Static_assert(TG_MR % 3 == 0, "tile_product reads A's rows in groups of three");

/* Steps of k packed at a time when a transposed B is read across its lines; micro-panels of a
 * transposed A packed side by side */
enum { PACK_RUN = 16, PACK_GROUP = 8 };

/* A rows [0, rows) x k [0, kc) -> micro-panels of TG_MR rows: panel[p * TG_MR + r] = A(r, p); rows past
 * `rows` are zero, so the kernel never reads past A. A transposed A (a weight gradient's dY^T)
 * is read a row of a (a column of A) at a time, in order. */
static void pack_a(const float *a, int64_t lda, bool trans, int64_t rows, int64_t kc, float *dst) {
    if (trans) {   /* A(i, p) = a[p lda + i]: row p of a holds A's column p */
        /* PACK_GROUP micro-panels at a time, step by step of k: each step reads PACK_GROUP TG_MR
         * floats of a row of a in order and writes TG_MR floats into each of PACK_GROUP streams.
         * All the micro-panels at once would put more streams, TG_MR kc floats apart, in one set
         * of L1 than it has ways whenever TG_MR kc 4 is a multiple of a way (kc 512: 12, 24 KiB);
         * one micro-panel at a time would read TG_MR floats of every line it touches. */
        for (int64_t g0 = 0; g0 < rows; g0 += PACK_GROUP * TG_MR) {
            int64_t g1 = g0 + PACK_GROUP * TG_MR < rows ? g0 + PACK_GROUP * TG_MR : rows;
            for (int64_t p = 0; p < kc; p++) {
                const float *src = a + p * lda;
                for (int64_t r0 = g0; r0 < g1; r0 += TG_MR) {
                    float *d = dst + r0 * kc + p * TG_MR;
                    if (g1 - r0 >= TG_MR) {
                        memcpy(d, src + r0, TG_MR * sizeof(float));
                        continue;
                    }
                    int64_t r = 0;
                    for (; r < g1 - r0; r++) d[r] = src[r0 + r];
                    for (; r < TG_MR; r++) d[r] = 0.0f;
                }
            }
        }
        return;
    }
    /* A(i, p) = a[i lda + p]: each row read in order, its floats written TG_MR apart (the panel,
     * TG_MR kc floats, stays in L1 while it is written) */
    for (int64_t r0 = 0; r0 < rows; r0 += TG_MR, dst += TG_MR * kc) {
        int64_t n_r = rows - r0 < TG_MR ? rows - r0 : TG_MR;
        for (int64_t r = 0; r < TG_MR; r++) {
            if (r < n_r) {
                const float *src = a + (r0 + r) * lda;
                for (int64_t p = 0; p < kc; p++) dst[p * TG_MR + r] = src[p];
            } else {
                for (int64_t p = 0; p < kc; p++) dst[p * TG_MR + r] = 0.0f;
            }
        }
    }
}

/* B k [0, kc) x columns [0, cols) -> panels of TG_NR columns: panel[p * TG_NR + c] = B(p, c); columns
 * past `cols` are zero. Memory is read in its own order (a row of b at a time, or a run of
 * PACK_RUN floats of each row when B is transposed), the panels written where they lie in L1/L2:
 * walking b panel by panel touched a new cache line (and often a new page) per float or two. */
static void pack_b(const float *b, int64_t ldb, bool trans, int64_t kc, int64_t cols, float *dst) {
    int64_t full_cols = cols / TG_NR * TG_NR;
    if (!trans) {   /* B(p, c) = b[p ldb + c]: row p of b is row p of every panel */
        for (int64_t p = 0; p < kc; p++) {
            const float *src = b + p * ldb;
            for (int64_t c0 = 0; c0 < full_cols; c0 += TG_NR) {
                float *d = dst + c0 * kc + p * TG_NR;
                TG_VF_ALIGNED(d) = TG_VF(src + c0);
                TG_VF_ALIGNED(d + TG_VLANES) = TG_VF(src + c0 + TG_VLANES);
            }
            if (full_cols < cols) {
                float *d = dst + full_cols * kc + p * TG_NR;
                int64_t c = 0;
                for (; c < cols - full_cols; c++) d[c] = src[full_cols + c];
                for (; c < TG_NR; c++) d[c] = 0.0f;
            }
        }
        return;
    }
    /* B(p, c) = b[c ldb + p]: row c of b is column c of B; PACK_RUN steps of k at a time, so the
     * panel lines being written stay in L1 while each row's run is read */
    for (int64_t c0 = 0; c0 < cols; c0 += TG_NR, dst += TG_NR * kc) {
        int64_t n_c = cols - c0 < TG_NR ? cols - c0 : TG_NR;
        for (int64_t p0 = 0; p0 < kc; p0 += PACK_RUN) {
            int64_t p1 = p0 + PACK_RUN < kc ? p0 + PACK_RUN : kc;
            for (int64_t c = 0; c < TG_NR; c++) {
                if (c < n_c) {
                    const float *src = b + (c0 + c) * ldb;
                    for (int64_t p = p0; p < p1; p++) dst[p * TG_NR + c] = src[p];
                } else {
                    for (int64_t p = p0; p < p1; p++) dst[p * TG_NR + c] = 0.0f;
                }
            }
        }
    }
}

/* acc (TG_MR x TG_NR) = A (TG_MR x kc) * B panel (kc x TG_NR): the whole inner loop, in a function of its own
 * with nothing else alive, so that the 2 TG_MR accumulators, the two B vectors and the broadcast A
 * float stay in registers. Inlined into the loop over tiles, GCC also kept alpha, beta and C's
 * addresses alive across it and moved a B vector to the stack on the avx512 path: a load per
 * multiply-add.
 * A(r, p) = a[r a_rs + p a_cs]: a packed micro-panel (1, TG_MR), or A's rows read where they lie
 * (lda, 1). `next`, when not NULL, is the next micro-panel's first row, read where it lies: its
 * lines are fetched a line (16 steps of k) ahead of this tile's, since TG_MR short streams that
 * start cold are too short for the hardware's prefetcher. */
static inline __attribute__((always_inline)) void tile_product(int64_t kc, const float *a, int64_t a_rs, int64_t a_cs,
                                                               const float *next, const float *bp, vf out[TG_MR][2]) {
    /* Rows read where they lie are addressed from one row in three (TG_MR is 12 or 6), the other two
     * at a_rs and 2 a_rs from it: GCC otherwise steps a pointer per row, an add per row per step of
     * k and, at 12 rows, more pointers than it has registers. */
    const float *row3[TG_MR / 3], *next3[TG_MR / 3];
#pragma GCC unroll 4
    for (int g = 0; g < TG_MR / 3; g++) row3[g] = a + 3 * g * a_rs, next3[g] = next ? next + 3 * g * a_rs : NULL;
    vf acc[TG_MR][2];
#pragma GCC unroll 12
    for (int r = 0; r < TG_MR; r++) acc[r][0] = acc[r][1] = (vf){0};
    for (int64_t p = 0; p < kc; p++) {
        if (a_cs == 1 && next && (p & 15) == 0) {
#pragma GCC unroll 12
            for (int r = 0; r < TG_MR; r++) __builtin_prefetch(next3[r / 3] + (r % 3) * a_rs + p, 0, 3);
        }
        const vf b0 = TG_VF_ALIGNED(bp + p * TG_NR), b1 = TG_VF_ALIGNED(bp + p * TG_NR + TG_VLANES);
#pragma GCC unroll 12
        for (int r = 0; r < TG_MR; r++) {
            const float a_rp = a_cs == 1 ? row3[r / 3][(r % 3) * a_rs + p] : a[r * a_rs + p * a_cs];
            acc[r][0] += a_rp * b0;
            acc[r][1] += a_rp * b1;
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < TG_MR; r++) out[r][0] = acc[r][0], out[r][1] = acc[r][1];
}
static __attribute__((noinline)) void tile_product_packed(int64_t kc, const float *restrict ap,
                                                          const float *restrict bp, vf acc[restrict TG_MR][2]) {
    tile_product(kc, ap, 1, TG_MR, NULL, bp, acc);
}
static __attribute__((noinline)) void tile_product_rows(int64_t kc, const float *restrict a, int64_t lda,
                                                        const float *next, const float *restrict bp,
                                                        vf acc[restrict TG_MR][2]) {
    tile_product(kc, a, lda, 1, next, bp, acc);
}

/* The two ways of reading A. */
static void kernel_packed_a(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, int rows, int cols,
                            float alpha, float beta, bool first) {
    vf acc[TG_MR][2] __attribute__((aligned(64)));
    prefetch_tile(c, ldc);
    tile_product_packed(kc, ap, bp, acc);
    write_tile(acc, c, ldc, rows, cols, alpha, beta, first);
}
static void kernel_rows_a(int64_t kc, const float *a, int64_t lda, const float *next, const float *bp, float *c,
                          int64_t ldc, int cols, float alpha, float beta, bool first) {
    vf acc[TG_MR][2] __attribute__((aligned(64)));
    prefetch_tile(c, ldc);
    tile_product_rows(kc, a, lda, next, bp, acc);
    write_tile(acc, c, ldc, TG_MR, cols, alpha, beta, first);
}

/* Packing buffers of the calling thread, allocated on its first product and then reused; the
 * keys' destructor frees them when the thread ends (the pool's workers end with the pool). */
static _Thread_local void *pack_buffers[TG_GEMM_BUFFER_SLOTS];
static _Thread_local size_t pack_capacity[TG_GEMM_BUFFER_SLOTS];
static pthread_key_t pack_buffer_keys[TG_GEMM_BUFFER_SLOTS];
static pthread_once_t pack_buffer_keys_once = PTHREAD_ONCE_INIT;

static void make_pack_buffer_keys(void) {
    for (int s = 0; s < TG_GEMM_BUFFER_SLOTS; s++) {
        int rc = pthread_key_create(&pack_buffer_keys[s], free);
        if (rc != 0) tg_abort_at(__FILE__, __LINE__, "pthread_key_create failed (%d)", rc);
    }
}

void *TG_ISA_FN(gemm_thread_buffer)(int slot, size_t bytes) {
    TG_CHECK(slot >= 0 && slot < TG_GEMM_BUFFER_SLOTS, "GEMM packing buffer %d", slot);
    if (bytes > pack_capacity[slot]) {
        free(pack_buffers[slot]);
        pack_buffers[slot] = aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (!pack_buffers[slot]) tg_abort_at(__FILE__, __LINE__, "out of memory: GEMM packing buffer of %zu bytes", bytes);
        pack_capacity[slot] = bytes;
        pthread_once(&pack_buffer_keys_once, make_pack_buffer_keys);
        pthread_setspecific(pack_buffer_keys[slot], pack_buffers[slot]);
    }
    return pack_buffers[slot];
}

void TG_ISA_FN(sgemm_tiled)(const TgGemmPlan *plan, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                         float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                         int64_t ldc) {
    if (gemm_trivial(m, n, k, beta, c, ldc)) return;
    int64_t slice = gemm_slice(k, plan->kc);   /* k in equal slices (gemm_tile.h) */
    /* The blocks hold what the plan's do in floats (kc nc in L2, mc kc in L3), so a slice shorter
     * than kc gets wider ones, and they are cut equally: n = 352 at nc 320 as 192 + 160, not
     * 320 + 32 (a block of one panel re-reads every A micro-panel for a single tile). */
    int64_t mc = equal_blocks(m, plan->mc * plan->kc / slice, TG_MR);
    int64_t nc = equal_blocks(n, plan->nc * plan->kc / slice, TG_NR);
    float *a_pack = TG_ISA_FN(gemm_thread_buffer)(0, ((size_t)mc * (size_t)slice + (size_t)slice * (size_t)nc) * sizeof(float));
    float *b_pack = a_pack + (size_t)mc * (size_t)slice;
    for (int64_t i0 = 0; i0 < m; i0 += mc) {
        int64_t mb = m - i0 < mc ? m - i0 : mc;
        for (int64_t p0 = 0; p0 < k; p0 += slice) {
            int64_t kc = k - p0 < slice ? k - p0 : slice;
            /* a transposed A (a weight gradient's dY^T) is packed: read in place, each step of k
             * would touch another line. A plain A is read where it lies, but for a last partial
             * micro-panel (packed with zero rows, so the kernel never reads past A). */
            const float *a_block = trans_a ? NULL : a + i0 * lda + p0;
            if (trans_a) pack_a(a + p0 * lda + i0, lda, true, mb, kc, a_pack);
            else if (mb % TG_MR) pack_a(a_block + mb / TG_MR * TG_MR * lda, lda, false, mb % TG_MR, kc, a_pack + mb / TG_MR * TG_MR * kc);
            for (int64_t j0 = 0; j0 < n; j0 += nc) {
                int64_t nb = n - j0 < nc ? n - j0 : nc;
                pack_b(trans_b ? b + j0 * ldb + p0 : b + p0 * ldb + j0, ldb, trans_b, kc, nb, b_pack);
                for (int64_t ir = 0; ir < mb; ir += TG_MR) {
                    int rows = mb - ir < TG_MR ? (int)(mb - ir) : TG_MR;
                    bool in_place = !trans_a && rows == TG_MR;
                    const float *ap = in_place ? a_block + ir * lda : a_pack + ir * kc;
                    /* the next micro-panel's rows, fetched during this one's last panel */
                    const float *next = in_place && ir + 2 * TG_MR <= mb ? ap + TG_MR * lda : NULL;
                    float *c_rows = c + (i0 + ir) * ldc + j0;
                    for (int64_t jr = 0; jr < nb; jr += TG_NR) {
                        int cols = nb - jr < TG_NR ? (int)(nb - jr) : TG_NR;
                        const float *bp = b_pack + jr * kc;
                        if (in_place)
                            kernel_rows_a(kc, ap, lda, jr + TG_NR >= nb ? next : NULL, bp, c_rows + jr, ldc, cols, alpha,
                                          beta, p0 == 0);
                        else
                            kernel_packed_a(kc, ap, bp, c_rows + jr, ldc, rows, cols, alpha, beta, p0 == 0);
                    }
                }
            }
        }
    }
}
