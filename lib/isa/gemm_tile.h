/* What the blocked GEMMs of one path share (lib/isa/gemm_tiled.c fp32, lib/isa/gemm_bf16.c and
 * lib/isa/gemm_amx.c bf16): the register tile, the update of C from a tile of accumulators, the
 * cut of k into slices and of C into blocks, and the calling thread's packing buffers. Private
 * to lib/isa/. */
#ifndef TAPEGRAD_ISA_GEMM_TILE_H
#define TAPEGRAD_ISA_GEMM_TILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "lib/gemm_plan.h"
#include "lib/isa/isa_kernels.h"
#include "lib/isa/simd.h"

enum {
    TG_MR = TG_ISA_GEMM_MR, /* rows of the C tile */
    TG_NR = TG_ISA_GEMM_NR, /* columns of the C tile: two vectors */
};

/* One tile of C (TG_MR rows of TG_NR floats, row stride ldc) from its accumulators: first slice
 * C = alpha acc + beta C (beta 0 never reads C), later slices C += alpha acc. */
static inline __attribute__((always_inline)) void update_tile(float *c, int64_t ldc, vf acc[TG_MR][2], float alpha,
                                                              float beta, bool first) {
#pragma GCC unroll 12
    for (int r = 0; r < TG_MR; r++) {
        float *cr = c + r * ldc;
        if (!first) {
            TG_VF(cr) += alpha * acc[r][0];
            TG_VF(cr + TG_VLANES) += alpha * acc[r][1];
        } else if (beta == 0.0f) {
            TG_VF(cr) = alpha * acc[r][0];
            TG_VF(cr + TG_VLANES) = alpha * acc[r][1];
        } else {
            TG_VF(cr) = alpha * acc[r][0] + beta * TG_VF(cr);
            TG_VF(cr + TG_VLANES) = alpha * acc[r][1] + beta * TG_VF(cr + TG_VLANES);
        }
    }
}


/* The tile of C (rows x cols, row stride ldc) from the accumulators. A full tile is updated in
 * place; a partial one is copied into `edge`, updated by the same vector code (so an element's
 * rounding does not depend on the tile it falls in) and copied back. */
static inline void write_tile(vf acc[TG_MR][2], float *c, int64_t ldc, int rows, int cols, float alpha, float beta, bool first) {
    if (rows == TG_MR && cols == TG_NR) {
        update_tile(c, ldc, acc, alpha, beta, first);
        return;
    }
    float edge[TG_MR][TG_NR] __attribute__((aligned(64)));
    bool reads_c = !first || beta != 0.0f;
    for (int r = 0; r < TG_MR; r++)
        for (int j = 0; j < TG_NR; j++) edge[r][j] = reads_c && r < rows && j < cols ? c[r * ldc + j] : 0.0f;
    update_tile(&edge[0][0], TG_NR, acc, alpha, beta, first);
    for (int r = 0; r < rows; r++) memcpy(c + r * ldc, edge[r], (size_t)cols * sizeof(float));
}

/* C's lines, for writing, fetched while the products run */
static inline __attribute__((always_inline)) void prefetch_tile(float *c, int64_t ldc) {
#pragma GCC unroll 12
    for (int r = 0; r < TG_MR; r++) {
        __builtin_prefetch(c + r * ldc, 1, 3);
        __builtin_prefetch(c + r * ldc + TG_NR - 1, 1, 3);
    }
}


/* The size of the blocks that cut `extent` into equal ones of at most `cap` (at least one
 * quantum), each a whole number of quanta. */
static inline int64_t equal_blocks(int64_t extent, int64_t cap, int64_t quantum) {
    cap = cap < quantum ? quantum : cap / quantum * quantum;
    int64_t blocks = (extent + cap - 1) / cap;
    int64_t size = (extent + blocks - 1) / blocks;
    return (size + quantum - 1) / quantum * quantum;
}

/* The length of the k slices: k in equal slices of at most kc (rounded up to 8, so even: the
 * bf16 kernels take k in pairs). A short last slice (k = 512 as 320 + 192) would pay a tile's
 * fixed costs -- the accumulators, C read and written again -- over few steps. The slices depend
 * on k and kc alone, so every split of C over threads sums each element in the same order. */
static inline int64_t gemm_slice(int64_t k, int64_t kc) {
    int64_t slices = (k + kc - 1) / kc;
    return ((k + slices - 1) / slices + 7) / 8 * 8;
}

/* The products with nothing to multiply, done here: an empty C, or k = 0 (C = beta C; beta 0
 * never reads C). True when the call is complete. */
static inline bool gemm_trivial(int64_t m, int64_t n, int64_t k, float beta, float *c, int64_t ldc) {
    if (m > 0 && n > 0 && k > 0) return false;
    for (int64_t i = 0; i < m && k <= 0; i++)
        for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return true;
}

/* At least `bytes` (64-byte aligned) of the calling thread's packing buffer number `slot` (< 2),
 * allocated on first use, grown, never shrunk; freed when the thread ends. */
enum { TG_GEMM_BUFFER_SLOTS = 2 };
void *TG_ISA_FN(gemm_thread_buffer)(int slot, size_t bytes);

#endif
