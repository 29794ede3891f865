/* tg_gemm_rows: C (rows, n) (+)= A (rows, k) B (k, n) for a few rows (lib/blas.h).
 *
 * The kernel for small, ragged products that run inside one of the pool's jobs (attention's
 * Q K^T, P V and their backward products). Each element of C is the same sequential sum over
 * k whatever the block shape (full vectors or the scalar tail) and whatever n: the result of a
 * column does not depend on its neighbours, so the forward and the backward's recomputation
 * agree bitwise. Compiled with -O3 -ffp-contract=fast: `acc += a * b` is one FMA.
 */
#include "lib/blas.h"
#include "lib/error.h"
#include "lib/vecmath.h"

/* C (rows, n) (+)= A (rows, n_k) B (n_k, n), rows <= BLOCK_ROWS, with A(r, i) = a[r a_row + i a_col]
 * (so A may be a transposed view), B row-major with row stride ldb, C with row stride ldc.
 * BLOCK_ROWS rows share every vector loaded from B and BLOCK_VECTORS vectors share every value
 * of A: 8 accumulators in registers, enough independent adds to hide their latency, and a
 * quarter of the traffic that one row at a time pulls from L2. */
enum { BLOCK_ROWS = TG_GEMM_ROWS_MAX, BLOCK_VECTORS = 2, BLOCK_COLS = LANES * BLOCK_VECTORS };
/* Full blocks use vectors of 16 floats: 32 columns at a time (8 accumulators of 16), then 16,
 * then 8 with the 8-float block, then single columns. Lane-wise FMAs round alike at any width,
 * so an element's value does not depend on which block computed it. */
typedef float f32x16 __attribute__((vector_size(64)));
typedef float f32x16_unaligned __attribute__((vector_size(64), aligned(4), may_alias));
#define VEC16(ptr) (*(f32x16_unaligned *)(ptr))
enum { LANES16 = 16, BLOCK_COLS16 = LANES16 * BLOCK_VECTORS };

/* Each element of C is the same sequential sum over i whatever the block shape (full vectors or
 * the scalar tail) and whatever n: the result of a column does not depend on its neighbours. */
static inline __attribute__((always_inline)) void product_block(int rows, int vectors, int64_t n_k,
                                                                const float *a, int64_t a_row,
                                                                int64_t a_col, const float *b,
                                                                int64_t ldb, float *c, int64_t ldc,
                                                                bool accumulate) {
    f32x8 acc[BLOCK_ROWS][BLOCK_VECTORS];
#pragma GCC unroll 4
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 2
        for (int v = 0; v < vectors; v++) acc[r][v] = (f32x8){0};
    for (int64_t i = 0; i < n_k; i++) {
        f32x8 b_vec[BLOCK_VECTORS];
#pragma GCC unroll 2
        for (int v = 0; v < vectors; v++) b_vec[v] = VEC8(b + i * ldb + LANES * v);
#pragma GCC unroll 4
        for (int r = 0; r < rows; r++) {
            float a_ri = a[r * a_row + i * a_col];
#pragma GCC unroll 2
            for (int v = 0; v < vectors; v++) acc[r][v] += a_ri * b_vec[v];
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 2
        for (int v = 0; v < vectors; v++) {
            if (accumulate) VEC8(c + r * ldc + LANES * v) += acc[r][v];
            else VEC8(c + r * ldc + LANES * v) = acc[r][v];
        }
}

/* The same with sixteen-float vectors (one AVX-512 register), for the full blocks. */
static inline __attribute__((always_inline)) void product_block16(int rows, int vectors, int64_t n_k,
                                                                const float *a, int64_t a_row,
                                                                int64_t a_col, const float *b,
                                                                int64_t ldb, float *c, int64_t ldc,
                                                                bool accumulate) {
    f32x16 acc[BLOCK_ROWS][BLOCK_VECTORS];
#pragma GCC unroll 4
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 2
        for (int v = 0; v < vectors; v++) acc[r][v] = (f32x16){0};
    for (int64_t i = 0; i < n_k; i++) {
        f32x16 b_vec[BLOCK_VECTORS];
#pragma GCC unroll 2
        for (int v = 0; v < vectors; v++) b_vec[v] = VEC16(b + i * ldb + LANES16 * v);
#pragma GCC unroll 4
        for (int r = 0; r < rows; r++) {
            float a_ri = a[r * a_row + i * a_col];
#pragma GCC unroll 2
            for (int v = 0; v < vectors; v++) acc[r][v] += a_ri * b_vec[v];
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 2
        for (int v = 0; v < vectors; v++) {
            if (accumulate) VEC16(c + r * ldc + LANES16 * v) += acc[r][v];
            else VEC16(c + r * ldc + LANES16 * v) = acc[r][v];
        }
}

static inline __attribute__((always_inline)) void product_rows(int rows, int64_t n_k, const float *a,
                                                               int64_t a_row, int64_t a_col,
                                                               const float *b, int64_t ldb, int64_t n,
                                                               float *c, int64_t ldc, bool accumulate) {
    int64_t col = 0;
    for (; col + BLOCK_COLS16 <= n; col += BLOCK_COLS16)
        product_block16(rows, 2, n_k, a, a_row, a_col, b + col, ldb, c + col, ldc, accumulate);
    if (col + LANES16 <= n) {
        product_block16(rows, 1, n_k, a, a_row, a_col, b + col, ldb, c + col, ldc, accumulate);
        col += LANES16;
    }
    if (col + LANES <= n) {
        product_block(rows, 1, n_k, a, a_row, a_col, b + col, ldb, c + col, ldc, accumulate);
        col += LANES;
    }
    for (; col < n; col++)
        for (int r = 0; r < rows; r++) {
            float acc = 0.0f;
            for (int64_t i = 0; i < n_k; i++) acc += a[r * a_row + i * a_col] * b[i * ldb + col];
            c[r * ldc + col] = accumulate ? c[r * ldc + col] + acc : acc;
        }
}

void tg_gemm_rows(int rows, int64_t n_k, const float *a, int64_t a_row, int64_t a_col,
                           const float *b, int64_t ldb, int64_t n, float *c, int64_t ldc,
                           bool accumulate) {
    switch (rows) {
    case 4: product_rows(4, n_k, a, a_row, a_col, b, ldb, n, c, ldc, accumulate); break;
    case 3: product_rows(3, n_k, a, a_row, a_col, b, ldb, n, c, ldc, accumulate); break;
    case 2: product_rows(2, n_k, a, a_row, a_col, b, ldb, n, c, ldc, accumulate); break;
    case 1: product_rows(1, n_k, a, a_row, a_col, b, ldb, n, c, ldc, accumulate); break;
    default: TG_CHECK(rows >= 1 && rows <= BLOCK_ROWS, "tg_gemm_rows of %d rows", rows);
    }
}

