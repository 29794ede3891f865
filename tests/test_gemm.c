/* The GEMMs: tapegrad's blocked kernel (the active path's; tests/test_kernels.c runs every
 * path) against a double-precision triple loop on shapes that cross block edges (TG_MR 12 or 6,
 * TG_NR 32 or 16, k slices of at most 512, MC 96, NC 512), all four transpositions, and
 * beta 0 / 1 / other; and the pool split giving the same bits as one thread. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/blas.h"
#include "testutil.h"

typedef void (*GemmFn)(bool, bool, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *,
                       int64_t, float, float *, int64_t);

static float *random_floats(TgRng *rng, int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    tg_rng_fill_uniform(rng, p, (size_t)n, -1.0f, 1.0f);
    return p;
}

/* C = alpha op(A) op(B) + beta C with ldc = n + 3 (a strided C), checked element by element */
static void check_gemm(GemmFn gemm, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, float beta) {
    TgRng rng;
    tg_rng_seed(&rng, (uint64_t)(m * 7919 + n * 104729 + k * 13 + ta * 2 + tb));
    int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 2, ldc = n + 3;
    float *a = random_floats(&rng, (ta ? k : m) * lda), *b = random_floats(&rng, (tb ? n : k) * ldb);
    float *c = random_floats(&rng, m * ldc), *c0 = malloc((size_t)(m * ldc > 0 ? m * ldc : 1) * sizeof(float));
    memcpy(c0, c, (size_t)(m * ldc) * sizeof(float));
    if (beta == 0.0f)   /* beta 0 must not read C: NaN there must not leak */
        for (int64_t i = 0; i < m * ldc; i++) c[i] = NAN;
    gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    double worst = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s += (double)(ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
            double expect = alpha * s + (beta == 0.0f ? 0.0 : beta * (double)c0[i * ldc + j]);
            double err = fabs(expect - c[i * ldc + j]);
            worst = isnan(err) ? INFINITY : fmax(worst, err);
        }
    cr_expect_leq(worst, 1e-6 * (double)(k + 1) + 1e-6, "%c%c m=%lld n=%lld k=%lld alpha=%g beta=%g: off by %g",
                  ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)m, (long long)n, (long long)k, alpha, beta, worst);
    free(a), free(b), free(c), free(c0);
}

Test(gemm, tiled_kernel_matches_a_triple_loop_across_block_edges) {
    const int64_t shapes[][3] = {{1, 1, 1}, {12, 32, 7}, {13, 33, 513}, {11, 31, 512}, {97, 65, 300}, {40, 70, 800},
                                 {25, 513, 40}, {200, 17, 520}, {5, 3, 0}};
    const float betas[] = {0.0f, 1.0f, 0.5f};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int bi = 0; bi < 3; bi++)
                check_gemm(tg_sgemm, t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2],
                           bi == 2 ? 0.75f : 1.0f, betas[bi]);
}

static TgPool *test_pool;
static void pooled(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                   const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    tg_sgemm_pool(test_pool, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

Test(gemm, pool_split_is_correct_and_bitwise_equal_to_one_thread) {
    test_pool = tg_pool_create(2);
    check_gemm(pooled, false, true, 300, 200, 100, 1.0f, 0.0f);
    check_gemm(pooled, true, false, 130, 96, 400, 1.0f, 1.0f);
    check_gemm(pooled, true, false, 40, 300, 500, 1.0f, 1.0f);   /* wider than tall: split by columns */
    check_gemm(pooled, false, true, 50, 301, 90, 1.0f, 0.0f);
    TgRng rng;
    tg_rng_seed(&rng, 5);
    int64_t m = 301, n = 150, k = 260;
    float *a = random_floats(&rng, m * k), *b = random_floats(&rng, n * k);
    float *c1 = calloc((size_t)(m * n), sizeof(float)), *c2 = calloc((size_t)(m * n), sizeof(float));
    tg_sgemm(false, true, m, n, k, 1.0f, a, k, b, k, 0.0f, c1, n);
    tg_sgemm_pool(test_pool, false, true, m, n, k, 1.0f, a, k, b, k, 0.0f, c2, n);
    cr_expect_eq(memcmp(c1, c2, (size_t)(m * n) * sizeof(float)), 0, "2 threads differ from 1");
    free(a), free(b), free(c1), free(c2);
    tg_pool_destroy(test_pool);
}
