#include "lib/blas.h"

#include <cblas.h>
#include <limits.h>

#include "tapegrad/error.h"
#include "lib/bf16.h"
#include "lib/gemm_plan.h"
#include "lib/kernels.h"

/* OpenBLAS's thread count is a setting of the library for the whole process: it is written only
 * when it differs, so that products on one thread count never write it. */
static void openblas_use_threads(int threads) {
    if (openblas_get_num_threads() != threads) openblas_set_num_threads(threads);
}

static void openblas_gemm(int threads, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                          const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                          int64_t ldc) {
    TG_CHECK(m >= 0 && n >= 0 && k >= 0 && m <= INT_MAX && n <= INT_MAX && k <= INT_MAX &&
                 lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX,
             "sgemm dims m=%lld n=%lld k=%lld exceed BLAS int", (long long)m, (long long)n,
             (long long)k);
    if (m == 0 || n == 0) return;
    openblas_use_threads(threads);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a, (int)lda, b,
                (int)ldb, beta, c, (int)ldc);
}

void tg_sgemm_openblas(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                       int64_t ldc) {
    openblas_gemm(1, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void tg_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
              int64_t ldc) {
    TgGemmPlan plan = tg_gemm_plan();
    tg_kernels()->sgemm(&plan, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void tg_bf16gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    TgGemmPlan plan = tg_gemm_plan();
    tg_kernels()->bf16gemm(&plan, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void tg_bf16gemm_reference(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                           int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float sum = 0.0f;
            for (int64_t p = 0; p < k; p++) {
                float a_ip = tg_bf16_round(trans_a ? a[p * lda + i] : a[i * lda + p]);
                float b_pj = tg_bf16_round(trans_b ? b[j * ldb + p] : b[p * ldb + j]);
                sum += a_ip * b_pj;   /* the product is exact: one rounding, fused or not */
            }
            float *cij = c + i * ldc + j;
            *cij = beta == 0.0f ? alpha * sum : alpha * sum + beta * *cij;
        }
}

void tg_gemm_rows(int rows, int64_t k, const float *a, int64_t a_row, int64_t a_col, const float *b, int64_t ldb,
                  int64_t n, float *c, int64_t ldc, bool accumulate) {
    tg_kernels()->gemm_rows(rows, k, a, a_row, a_col, b, ldb, n, c, ldc, accumulate);
}

typedef struct {
    bool trans_a, trans_b;
    int64_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const float *a, *b;
    float *c;
    int threads;
    TgPrecision precision;
    TgGemmMode mode;
    bool by_columns;
    int64_t row_quantum, column_quantum;
} GemmJob;

/* One product on the calling thread in the precision and mode asked for; `threads` are OpenBLAS's
 * in TG_GEMM_OPENBLAS (which is never split over the pool). */
static void gemm_one(TgPrecision precision, TgGemmMode mode, int threads, bool trans_a, bool trans_b, int64_t m,
                     int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                     float beta, float *c, int64_t ldc) {
    if (precision == TG_PRECISION_BF16) tg_bf16gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else if (mode == TG_GEMM_POOL) tg_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else openblas_gemm(mode == TG_GEMM_OPENBLAS ? threads : 1, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta,
                       c, ldc);
}

static void gemm_block(void *ctx, int64_t begin, int64_t end, int thread) {
    const GemmJob *j = ctx;
    if (j->by_columns) {   /* columns [col0, col1) of op(B) and C */
        int64_t col0 = begin * j->column_quantum, col1 = end * j->column_quantum;
        if (col1 > j->n) col1 = j->n;
        if (col1 <= col0) return;
        const float *b = j->trans_b ? j->b + col0 * j->ldb : j->b + col0;
        gemm_one(j->precision, j->mode, 1, j->trans_a, j->trans_b, j->m, col1 - col0, j->k, j->alpha, j->a, j->lda, b,
                 j->ldb, j->beta, j->c + col0, j->ldc);
        return;
    }
    int64_t row0 = begin * j->row_quantum, row1 = end * j->row_quantum;
    if (row1 > j->m) row1 = j->m;
    if (row1 <= row0) return;
    /* rows [row0, row1) of op(A): A's rows, or A's columns when A is transposed */
    const float *a = j->trans_a ? j->a + row0 : j->a + row0 * j->lda;
    gemm_one(j->precision, j->mode, 1, j->trans_a, j->trans_b, row1 - row0, j->n, j->k, j->alpha, a, j->lda, j->b,
             j->ldb, j->beta, j->c + row0 * j->ldc, j->ldc);
}

/* Below ~2 MFLOP a pool wake-up costs a sizeable part of the product. */
static const double GEMM_MIN_PARALLEL_MNK = 1 << 20;

void tg_sgemm_pool(TgPool *pool, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                   float beta, float *c, int64_t ldc) {
    tg_gemm_pool(pool, TG_PRECISION_FP32, TG_GEMM_POOL, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void tg_tape_gemm(const TgTape *tape, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    tg_gemm_pool(tape->pool, tape->precision, tape->gemm_mode, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta,
                 c, ldc);
}

void tg_gemm_pool(TgPool *pool, TgPrecision precision, TgGemmMode mode, bool trans_a, bool trans_b, int64_t m,
                  int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                  float beta, float *c, int64_t ldc) {
    /* bf16 runs tapegrad's kernels whatever the gemm mode (OpenBLAS has no bf16 GEMM here) */
    bool own_kernel = mode == TG_GEMM_POOL || precision == TG_PRECISION_BF16;
    int threads = tg_pool_threads(pool);
    /* C is handed out in whole register tiles of the kernel (tapegrad's: TG_MR rows and TG_NR columns of
     * the path; OpenBLAS's: multiples of 16 rows and 32 columns): no thread gets a ragged edge
     * tile that a coarser split would avoid. */
    const TgKernels *kernels = tg_kernels();
    int64_t row_quantum = own_kernel ? kernels->gemm_mr : 16;
    int64_t column_quantum = own_kernel ? kernels->gemm_nr : 32;
    /* By rows, each thread reads and packs all of op(B) (k x n) and its share of op(A); by
     * columns, all of op(A) (m x k) and its share of op(B). So by rows, unless that leaves the
     * busiest thread more tiles of C than a split by columns would: a weight gradient whose
     * output side is the larger (w1/w3: m = hidden > n = dim) packs the smaller operand whole
     * and runs faster by rows (docs/results.md, 2026-12-01, splitting a GEMM over the threads),
     * but a square 128 x 128 one splits into 5 and 6 row quanta of 12 (the busiest thread 72
     * rows) and into 2 and 2 column quanta of 32. Either way each element of C is summed in the
     * same order. */
    int64_t row_units = (m + row_quantum - 1) / row_quantum, column_units = (n + column_quantum - 1) / column_quantum;
    double busiest_by_rows = (double)((row_units + threads - 1) / threads * row_quantum) *
                             (double)(column_units * column_quantum);
    double busiest_by_columns = (double)((column_units + threads - 1) / threads * column_quantum) *
                                (double)(row_units * row_quantum);
    bool by_columns = busiest_by_columns < busiest_by_rows;
    int64_t units = by_columns ? column_units : row_units;
    if ((mode == TG_GEMM_OPENBLAS && !own_kernel) || threads == 1 || units < 2 ||
        (double)m * (double)n * (double)k < GEMM_MIN_PARALLEL_MNK) {
        gemm_one(precision, mode, threads, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    GemmJob job = {trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, a, b, c, threads, precision, mode,
                   by_columns, row_quantum, column_quantum};
    if (!own_kernel) openblas_use_threads(1); /* here, not from the pool's threads at once */
    tg_pool_parallel_for(pool, units, gemm_block, &job);
}
