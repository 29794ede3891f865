/* Row-major sgemm with 64-bit sizes: C = alpha * op(A) op(B) + beta * C.
 * The one place tapegrad calls OpenBLAS, so the dims are checked against BLAS's int once. */
#ifndef TAPEGRAD_BLAS_H
#define TAPEGRAD_BLAS_H

#include <stdbool.h>
#include <stdint.h>

/* op(A) is [m, k], op(B) is [k, n], C is [m, n]; lda/ldb/ldc are the row strides as stored. */
void tg_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
              int64_t ldc);
/* Threads OpenBLAS may use for one GEMM. */
void tg_blas_set_threads(int threads);

#endif
