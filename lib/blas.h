/* Row-major sgemm with 64-bit sizes: C = alpha * op(A) op(B) + beta * C.
 * The one place tapegrad calls OpenBLAS, so the dims are checked against BLAS's int once.
 *
 * Threads: a tape's products (tg_tape_gemm) run as its gemm mode says (tapegrad/tape.h). In
 * TG_GEMM_POOL, the default, tapegrad's own kernel computes and tg_gemm_pool splits a large
 * product into one block of C's rows per thread of tapegrad's pool: there is then one set of
 * threads in the process, which sleeps on a condition variable between jobs, and no OpenBLAS
 * code runs. OpenBLAS's own threads, which spin (sched_yield) for a while after each call, would
 * otherwise steal the cores from the pool's ops that follow a GEMM. TG_GEMM_OPENBLAS restores the
 * other policy (OpenBLAS threads each GEMM) for comparison: `tapegrad bench --gemm openblas`. */
#ifndef TAPEGRAD_LIB_BLAS_H
#define TAPEGRAD_LIB_BLAS_H

#include <stdbool.h>
#include <stdint.h>

#include "tapegrad/pool.h"
#include "tapegrad/tape.h"

/* op(A) is [m, k], op(B) is [k, n], C is [m, n]; lda/ldb/ldc are the row strides as stored.
 * tapegrad's own blocked sgemm of the active kernel path (lib/isa/gemm_tiled.c, lib/kernels.h) on
 * the calling thread: what TG_GEMM_POOL runs on each thread. */
void tg_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
              int64_t ldc);
/* The same product, split over the pool's threads by rows of C (by columns when C is wider
 * than tall or k is the longest side) when it is large enough: tg_gemm_pool in fp32 and
 * TG_GEMM_POOL. Each element of C is computed by one thread, so the result depends only on the
 * thread count. Not to be called from inside a pool job. */
void tg_sgemm_pool(TgPool *pool, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                   float beta, float *c, int64_t ldc);

/* The product in `precision` and `mode`: TG_PRECISION_FP32 with TG_GEMM_POOL is tg_sgemm_pool;
 * TG_PRECISION_BF16 rounds every element of A and B to bf16 (lib/bf16.h) and sums the products in
 * fp32, with the active path's bf16 kernel (lib/kernels.h: vdpbf16ps, AMX tiles, or the rounded
 * operands through the fp32 kernel), split over the pool as tg_sgemm_pool splits, in every mode. */
void tg_gemm_pool(TgPool *pool, TgPrecision precision, TgGemmMode mode, bool trans_a, bool trans_b, int64_t m,
                  int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                  float beta, float *c, int64_t ldc);
/* tg_gemm_pool with the tape's pool, precision and gemm mode: every product an op records. */
void tg_tape_gemm(const TgTape *tape, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* The bf16 product on the calling thread, with the active path's bf16 kernel. */
void tg_bf16gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* The reference for tests: C = alpha op(A) op(B) + beta C, each element of A and B rounded to
 * bf16, each element of C one fp32 sum over k in order (k = 0 first), then alpha and beta. */
void tg_bf16gemm_reference(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                           int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* C (rows, n) (+)= A (rows, k) B (k, n) for 1 <= rows <= TG_GEMM_ROWS_MAX, single-threaded, for
 * the small ragged products inside one pool job (attention), on the active kernel path. A(r, i) = a[r a_row + i a_col], so
 * A may be a transposed view; B is row-major with row stride ldb, C with ldc. Each element of C
 * is one sequential sum over k, whatever n and the block it falls in. */
enum { TG_GEMM_ROWS_MAX = 4 };
void tg_gemm_rows(int rows, int64_t k, const float *a, int64_t a_row, int64_t a_col, const float *b, int64_t ldb,
                  int64_t n, float *c, int64_t ldc, bool accumulate);

/* OpenBLAS's cblas_sgemm behind the same contract, on one thread (it sets OpenBLAS's thread
 * count to 1 when it is not). What TG_GEMM_POOL_OPENBLAS runs on each thread. */
void tg_sgemm_openblas(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                       int64_t ldc);

#endif
