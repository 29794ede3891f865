#include "blas.h"

#include <cblas.h>
#include <limits.h>

#include "error.h"

void tg_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
              int64_t ldc) {
    TG_CHECK(m >= 0 && n >= 0 && k >= 0 && m <= INT_MAX && n <= INT_MAX && k <= INT_MAX &&
                 lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX,
             "sgemm dims m=%lld n=%lld k=%lld exceed BLAS int", (long long)m, (long long)n,
             (long long)k);
    if (m == 0 || n == 0) return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a, (int)lda, b,
                (int)ldb, beta, c, (int)ldc);
}

void tg_blas_set_threads(int threads) { openblas_set_num_threads(threads); }
