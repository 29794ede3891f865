/* gemm_rows: C (rows, n) (+)= A (rows, k) B (k, n) for a few rows (lib/blas.h, tg_gemm_rows), one
 * copy per kernel path (lib/isa/simd.h).
 *
 * The kernel for small, ragged products that run inside one of the pool's jobs (attention's
 * Q K^T, P V and their backward products). Each element of C is the same sequential sum over
 * k whatever the block shape (full vectors or the scalar tail) and whatever n: the result of a
 * column does not depend on its neighbours, so the forward and the backward's recomputation
 * agree bitwise. Compiled with -O3 -ffp-contract=fast: `acc += a * b` is one FMA on the paths
 * that have it, in the vectors and (scalar_fma) in the scalar tail alike.
 */
#include "lib/isa/isa_kernels.h"
#include "lib/blas.h"
#include "tapegrad/error.h"
#include "lib/isa/simd.h"

/* C (rows, n) (+)= A (rows, n_k) B (n_k, n), rows <= BLOCK_ROWS, with A(r, i) = a[r a_row + i a_col]
 * (so A may be a transposed view), B row-major with row stride ldb, C with row stride ldc.
 * BLOCK_ROWS rows share every vector loaded from B and BLOCK_VECTORS vectors share every value
 * of A: 8 accumulators in registers, enough independent adds to hide their latency, and a
 * quarter of the traffic that one row at a time pulls from L2. */
enum { BLOCK_ROWS = TG_GEMM_ROWS_MAX, BLOCK_VECTORS = 2 };

/* Full blocks use the path's widest vectors, two at a time, then one; the columns left over go
 * through narrower vectors (half, then a quarter of the width, down to 4 floats) and then one
 * at a time. Lane-wise multiply-adds round alike at any width, so an element's value does not
 * depend on which block computed it. */
#define DEFINE_PRODUCT_BLOCK(name, vtype, lanes)                                                                  \
    typedef float name##_unaligned __attribute__((vector_size(4 * (lanes)), aligned(4), may_alias));              \
    static inline __attribute__((always_inline)) void name(int rows, int vectors, int64_t n_k, const float *a,    \
                                                           int64_t a_row, int64_t a_col, const float *b,          \
                                                           int64_t ldb, float *c, int64_t ldc, bool accumulate) { \
        vtype acc[BLOCK_ROWS][BLOCK_VECTORS];                                                                     \
        _Pragma("GCC unroll 4") for (int r = 0; r < rows; r++)                                                    \
            _Pragma("GCC unroll 2") for (int v = 0; v < vectors; v++) acc[r][v] = (vtype){0};                     \
        for (int64_t i = 0; i < n_k; i++) {                                                                       \
            vtype b_vec[BLOCK_VECTORS];                                                                           \
            _Pragma("GCC unroll 2") for (int v = 0; v < vectors; v++)                                             \
                b_vec[v] = *(const name##_unaligned *)(b + i * ldb + (lanes) * v);                                \
            _Pragma("GCC unroll 4") for (int r = 0; r < rows; r++) {                                              \
                float a_ri = a[r * a_row + i * a_col];                                                            \
                _Pragma("GCC unroll 2") for (int v = 0; v < vectors; v++) acc[r][v] += a_ri * b_vec[v];           \
            }                                                                                                     \
        }                                                                                                         \
        _Pragma("GCC unroll 4") for (int r = 0; r < rows; r++)                                                    \
            _Pragma("GCC unroll 2") for (int v = 0; v < vectors; v++) {                                           \
                name##_unaligned *out = (name##_unaligned *)(c + r * ldc + (lanes) * v);                          \
                if (accumulate) *out += acc[r][v];                                                                \
                else *out = acc[r][v];                                                                            \
            }                                                                                                     \
    }

typedef float vf_half __attribute__((vector_size(2 * TG_VLANES)));
typedef float vf_quarter __attribute__((vector_size(TG_VLANES)));
DEFINE_PRODUCT_BLOCK(product_block, vf, TG_VLANES)
DEFINE_PRODUCT_BLOCK(product_block_half, vf_half, TG_VLANES / 2)
DEFINE_PRODUCT_BLOCK(product_block_quarter, vf_quarter, TG_VLANES / 4)

static inline __attribute__((always_inline)) void product_rows(int rows, int64_t n_k, const float *a,
                                                               int64_t a_row, int64_t a_col,
                                                               const float *b, int64_t ldb, int64_t n,
                                                               float *c, int64_t ldc, bool accumulate) {
    int64_t col = 0;
    for (; col + BLOCK_VECTORS * TG_VLANES <= n; col += BLOCK_VECTORS * TG_VLANES)
        product_block(rows, BLOCK_VECTORS, n_k, a, a_row, a_col, b + col, ldb, c + col, ldc, accumulate);
    if (col + TG_VLANES <= n) {
        product_block(rows, 1, n_k, a, a_row, a_col, b + col, ldb, c + col, ldc, accumulate);
        col += TG_VLANES;
    }
    if (TG_VLANES / 2 >= 4 && col + TG_VLANES / 2 <= n) {
        product_block_half(rows, 1, n_k, a, a_row, a_col, b + col, ldb, c + col, ldc, accumulate);
        col += TG_VLANES / 2;
    }
    if (TG_VLANES / 4 >= 4 && col + TG_VLANES / 4 <= n) {
        product_block_quarter(rows, 1, n_k, a, a_row, a_col, b + col, ldb, c + col, ldc, accumulate);
        col += TG_VLANES / 4;
    }
    for (; col < n; col++)
        for (int r = 0; r < rows; r++) {
            float acc = 0.0f;
            for (int64_t i = 0; i < n_k; i++) acc = scalar_fma(a[r * a_row + i * a_col], b[i * ldb + col], acc);
            c[r * ldc + col] = accumulate ? c[r * ldc + col] + acc : acc;
        }
}

void TG_ISA_FN(gemm_rows)(int rows, int64_t n_k, const float *a, int64_t a_row, int64_t a_col, const float *b,
                       int64_t ldb, int64_t n, float *c, int64_t ldc, bool accumulate) {
    switch (rows) {
    case 4: product_rows(4, n_k, a, a_row, a_col, b, ldb, n, c, ldc, accumulate); break;
    case 3: product_rows(3, n_k, a, a_row, a_col, b, ldb, n, c, ldc, accumulate); break;
    case 2: product_rows(2, n_k, a, a_row, a_col, b, ldb, n, c, ldc, accumulate); break;
    case 1: product_rows(1, n_k, a, a_row, a_col, b, ldb, n, c, ldc, accumulate); break;
    default: TG_CHECK(rows >= 1 && rows <= BLOCK_ROWS, "tg_gemm_rows of %d rows", rows);
    }
}
