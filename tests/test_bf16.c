/* bf16 GEMMs (lib/bf16.h, lib/isa/gemm_bf16.c, lib/isa/gemm_amx.c):
 *   - the rounding: to nearest, ties to even, NaN kept NaN, overflow to infinity, on known bits;
 *   - the portable reference against a double-precision product of the rounded inputs (its
 *     only error: fp32 sums), and apart from the unrounded product (it does round);
 *   - every path's bf16 kernel this CPU runs against the reference on ragged shapes (m, n, k
 *     past every block; n = 1, k = 1, odd k), all four transpositions, beta 0 / 1 / other. The
 *     products of bf16 values are exact in fp32, so two kernels differ only in the order of
 *     their fp32 sums: each element within 2 (k + 2) u sum_p |a_ip b_pj| (u = 2^-24, the
 *     standard bound of a recursive sum, once for each side), and bitwise equal on inputs
 *     whose sums are exact (small integers);
 *   - the pool split giving the bits of one thread;
 *   - AMX: where the CPU has it; elsewhere skipped, saying so; and everywhere AVX512-BF16 runs,
 *     the AMX kernel with its tile instructions emulated in C. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/bf16.h"
#include "lib/blas.h"
#include "lib/gemm_plan.h"
#include "lib/kernels.h"
#include "testutil.h"

static uint16_t bits_of(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return tg_bf16_from_float(x);
}

Test(bf16, rounds_to_nearest_even_and_keeps_nan) {
    cr_expect_eq(bits_of(0x3f800000u), 0x3f80);   /* 1 */
    cr_expect_eq(bits_of(0x3f808000u), 0x3f80);   /* halfway, even below: down */
    cr_expect_eq(bits_of(0x3f818000u), 0x3f82);   /* halfway, odd below: up */
    cr_expect_eq(bits_of(0x3f808001u), 0x3f81);   /* past halfway: up */
    cr_expect_eq(bits_of(0x3f807fffu), 0x3f80);   /* below halfway: down */
    cr_expect_eq(bits_of(0xbf818000u), 0xbf82);   /* the same for a negative */
    cr_expect_eq(bits_of(0x80000000u), 0x8000);   /* -0 */
    cr_expect_eq(bits_of(0x7f800000u), 0x7f80);   /* inf */
    cr_expect_eq(bits_of(0x7f7fffffu), 0x7f80);   /* FLT_MAX rounds up to inf, as IEEE rounding does */
    for (uint32_t nan_bits = 0x7f800001u; nan_bits < 0x7f800003u; nan_bits++) {   /* signalling NaNs */
        float x;
        memcpy(&x, &nan_bits, sizeof x);
        cr_expect(isnan(tg_bf16_round(x)), "0x%08x rounded to a non-NaN", nan_bits);
        cr_expect(isnan(tg_bf16_round(-x)), "-0x%08x rounded to a non-NaN", nan_bits);
    }
    cr_expect(isnan(tg_bf16_round(NAN)));
    cr_expect_eq(tg_bf16_to_float(0x3f80), 1.0f);
    cr_expect_eq(tg_bf16_round(0.1f), 0.10009765625f);
}

typedef struct {
    int64_t m, n, k;
} Shape;

/* Ragged against every block: TG_MR 12, TG_NR 32, pairs of k, kc 64..1024 (k 1100 takes two slices);
 * n = 1, k = 1, odd k. */
static const Shape shapes[] = {{1, 1, 1}, {13, 33, 7}, {17, 1, 65}, {33, 65, 1}, {25, 40, 129},
                               {12, 32, 2}, {40, 70, 1100}, {97, 31, 300}, {5, 3, 0}};

typedef struct {
    int64_t lda, ldb, ldc;
    float *a, *b, *c0;
} Operands;

/* op(A) m x k, op(B) k x n, C m x n with padded strides; values uniform in [-1, 1], or small
 * integers (every sum exact in fp32) */
static Operands make_operands(bool ta, bool tb, Shape s, bool integers, uint64_t seed) {
    TgRng rng;
    tg_rng_seed(&rng, seed);
    Operands o = {(ta ? s.m : s.k) + 1, (tb ? s.k : s.n) + 2, s.n + 3, NULL, NULL, NULL};
    int64_t na = (ta ? s.k : s.m) * o.lda + 1, nb = (tb ? s.n : s.k) * o.ldb + 1, nc = s.m * o.ldc + 1;
    o.a = malloc((size_t)na * sizeof(float)), o.b = malloc((size_t)nb * sizeof(float));
    o.c0 = malloc((size_t)nc * sizeof(float));
    tg_rng_fill_uniform(&rng, o.a, (size_t)na, -1.0f, 1.0f);
    tg_rng_fill_uniform(&rng, o.b, (size_t)nb, -1.0f, 1.0f);
    tg_rng_fill_uniform(&rng, o.c0, (size_t)nc, -1.0f, 1.0f);
    if (integers) {
        for (int64_t i = 0; i < na; i++) o.a[i] = roundf(o.a[i] * 8);
        for (int64_t i = 0; i < nb; i++) o.b[i] = roundf(o.b[i] * 8);
        for (int64_t i = 0; i < nc; i++) o.c0[i] = roundf(o.c0[i] * 8);
    }
    return o;
}

static void free_operands(Operands *o) { free(o->a), free(o->b), free(o->c0); }

static float op_at(const float *x, int64_t ld, bool trans, int64_t i, int64_t j) { return trans ? x[j * ld + i] : x[i * ld + j]; }

/* sum_p |A(i, p) B(p, j)| of the rounded operands, and their exact (double) product */
static void exact_product(const Operands *o, bool ta, bool tb, int64_t k, int64_t i, int64_t j, bool round, double *sum,
                          double *abs_sum) {
    *sum = *abs_sum = 0;
    for (int64_t p = 0; p < k; p++) {
        double a = op_at(o->a, o->lda, ta, i, p), b = op_at(o->b, o->ldb, tb, p, j);
        if (round) a = tg_bf16_round((float)a), b = tg_bf16_round((float)b);
        *sum += a * b;
        *abs_sum += fabs(a * b);
    }
}

static const double U = 0x1p-24;

Test(bf16, reference_is_the_rounded_product_up_to_fp32_sums) {
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t >> 1;
            Shape s = shapes[si];
            Operands o = make_operands(ta, tb, s, false, 7 + si * 4 + (uint64_t)t);
            float *c = malloc((size_t)(s.m * o.ldc + 1) * sizeof(float));
            memcpy(c, o.c0, (size_t)(s.m * o.ldc + 1) * sizeof(float));
            tg_bf16gemm_reference(ta, tb, s.m, s.n, s.k, 1.0f, o.a, o.lda, o.b, o.ldb, 0.5f, c, o.ldc);
            double worst_unrounded = 0;
            for (int64_t i = 0; i < s.m; i++)
                for (int64_t j = 0; j < s.n; j++) {
                    double sum, abs_sum, sum32, abs32;
                    exact_product(&o, ta, tb, s.k, i, j, true, &sum, &abs_sum);
                    exact_product(&o, ta, tb, s.k, i, j, false, &sum32, &abs32);
                    double cij = c[i * o.ldc + j], c0 = 0.5 * o.c0[i * o.ldc + j];
                    double bound = (s.k + 2) * U * (abs_sum + fabs(c0)) + 1e-30;
                    cr_assert_leq(fabs(cij - (sum + c0)), bound, "%c%c %lldx%lldx%lld (%lld, %lld): %.9g vs %.9g",
                                  ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)s.m, (long long)s.n, (long long)s.k,
                                  (long long)i, (long long)j, cij, sum + c0);
                    worst_unrounded = fmax(worst_unrounded, fabs(cij - (sum32 + c0)) / (abs32 + 1e-30));
                }
            /* the operands were rounded: bf16 keeps 8 significant bits, so the unrounded product
             * is off by far more than fp32 sums would be (k >= 7: a few elements suffice) */
            if (s.k >= 7) cr_expect_gt(worst_unrounded, 1e-4, "%lldx%lldx%lld: no sign of rounding (%g)", (long long)s.m,
                                       (long long)s.n, (long long)s.k, worst_unrounded);
            free(c);
            free_operands(&o);
        }
}

/* The active path's bf16 kernel against the reference: within the bound of two orders of fp32
 * sums, and bitwise on integer inputs. Returns the worst error relative to the bound. */
static double check_kernel(bool ta, bool tb, Shape s, float alpha, float beta, bool integers) {
    Operands o = make_operands(ta, tb, s, integers, 1000 + (uint64_t)(s.m * 31 + s.n * 7 + s.k) + ta * 2 + tb);
    size_t nc = (size_t)(s.m * o.ldc + 1);
    float *c = malloc(nc * sizeof(float)), *ref = malloc(nc * sizeof(float));
    memcpy(ref, o.c0, nc * sizeof(float));
    memcpy(c, o.c0, nc * sizeof(float));
    if (beta == 0.0f)   /* beta 0 must not read C */
        for (size_t i = 0; i < nc; i++) c[i] = NAN;
    tg_bf16gemm_reference(ta, tb, s.m, s.n, s.k, alpha, o.a, o.lda, o.b, o.ldb, beta, ref, o.ldc);
    tg_bf16gemm(ta, tb, s.m, s.n, s.k, alpha, o.a, o.lda, o.b, o.ldb, beta, c, o.ldc);
    double worst = 0;
    for (int64_t i = 0; i < s.m; i++)
        for (int64_t j = 0; j < s.n; j++) {
            float got = c[i * o.ldc + j], want = ref[i * o.ldc + j];
            if (integers) {
                cr_assert_eq(got, want, "%s %c%c %lldx%lldx%lld (%lld, %lld): %.9g, reference %.9g",
                             tg_isa_name(tg_isa_active()), ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)s.m,
                             (long long)s.n, (long long)s.k, (long long)i, (long long)j, got, want);
                continue;
            }
            double sum, abs_sum;
            exact_product(&o, ta, tb, s.k, i, j, true, &sum, &abs_sum);
            double bound = 2 * (s.k + 2) * U * (fabs(alpha) * abs_sum + fabs(beta * o.c0[i * o.ldc + j])) + 1e-30;
            double err = fabs((double)got - want);
            cr_assert_leq(err, bound, "%s %c%c %lldx%lldx%lld alpha %g beta %g (%lld, %lld): %.9g, reference %.9g",
                          tg_isa_name(tg_isa_active()), ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)s.m, (long long)s.n,
                          (long long)s.k, alpha, beta, (long long)i, (long long)j, got, want);
            worst = fmax(worst, err / bound);
        }
    free(c), free(ref);
    free_operands(&o);
    return worst;
}

static void check_path(TgIsa isa) {
    assert_ok(tg_isa_set(isa));
    const float betas[] = {0.0f, 1.0f, 0.5f};
    double worst = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int t = 0; t < 4; t++)
            for (int bi = 0; bi < 3; bi++) {
                worst = fmax(worst, check_kernel(t & 1, t >> 1, shapes[si], bi == 2 ? 0.75f : 1.0f, betas[bi], false));
                check_kernel(t & 1, t >> 1, shapes[si], 1.0f, betas[bi], true);
            }
    cr_log_info("bf16 %s: worst error %.3f of the bound", tg_isa_name(isa), worst);
    assert_ok(tg_isa_set(tg_isa_best()));
}

Test(bf16, every_path_this_cpu_runs_matches_the_reference) {
    int checked = 0;
    for (int isa = 0; isa < TG_ISA_AMX; isa++)
        if (tg_isa_supported((TgIsa)isa)) check_path((TgIsa)isa), checked++;
    cr_expect_geq(checked, 1);
    /* a CPU that reports vdpbf16ps runs the native kernel by default */
    if (tg_isa_supported(TG_ISA_AVX512BF16)) {
        cr_expect(tg_kernels_of(TG_ISA_AVX512BF16)->bf16_native);
        cr_expect_geq(tg_isa_best(), TG_ISA_AVX512BF16);
    }
    cr_expect_not(tg_kernels_of(TG_ISA_GENERIC)->bf16_native);
}

Test(bf16, amx_kernel_matches_the_reference_where_the_cpu_has_amx) {
    if (!tg_isa_supported(TG_ISA_AMX)) {
        fprintf(stderr, "bf16: this CPU (%s) has no AMX tiles (or the kernel refused them): the AMX kernel's "
                        "check is skipped here\n", tg_cpu_name());
        cr_skip_test("no AMX on %s", tg_cpu_name());
    }
    check_path(TG_ISA_AMX);
}

#ifdef TAPEGRAD_AMX_EMULATED
/* The AMX kernel with its tile instructions emulated in C (CMakeLists.txt, lib/isa/gemm_amx.c) */
void tg_isa_bf16gemm_amx_amx_emulated(const TgGemmPlan *plan, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                               float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                               float *c, int64_t ldc);
#endif

/* What can be checked of the AMX kernel without AMX: its packing into tile layout, its blocks and
 * its update of C, with the tile instructions done in C (tdpbf16ps as defined: each pair's exact
 * products added in fp32), against the reference as every path is. The emulated object is built
 * with the amx path's flags, so it runs where AVX512-BF16 does. */
Test(bf16, amx_kernel_with_emulated_tiles_matches_the_reference) {
#ifndef TAPEGRAD_AMX_EMULATED
    cr_skip_test("no amx path in this build (not x86-64)");
#else
    if (!tg_isa_supported(TG_ISA_AVX512BF16)) cr_skip_test("the emulated AMX kernel is compiled for AVX512-BF16 CPUs");
    TgGemmPlan plan = tg_gemm_plan();
    const float betas[] = {0.0f, 1.0f, 0.5f};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int t = 0; t < 4; t++)
            for (int bi = 0; bi < 3; bi++)
                for (int integers = 0; integers < 2; integers++) {
                    bool ta = t & 1, tb = t >> 1;
                    Shape s = shapes[si];
                    float alpha = bi == 2 && !integers ? 0.75f : 1.0f, beta = betas[bi];
                    Operands o = make_operands(ta, tb, s, integers, 77 + si * 8 + (uint64_t)t);
                    size_t nc = (size_t)(s.m * o.ldc + 1);
                    float *c = malloc(nc * sizeof(float)), *ref = malloc(nc * sizeof(float));
                    memcpy(ref, o.c0, nc * sizeof(float));
                    memcpy(c, o.c0, nc * sizeof(float));
                    if (beta == 0.0f)
                        for (size_t i = 0; i < nc; i++) c[i] = NAN;
                    tg_bf16gemm_reference(ta, tb, s.m, s.n, s.k, alpha, o.a, o.lda, o.b, o.ldb, beta, ref, o.ldc);
                    tg_isa_bf16gemm_amx_amx_emulated(&plan, ta, tb, s.m, s.n, s.k, alpha, o.a, o.lda, o.b, o.ldb, beta, c, o.ldc);
                    for (int64_t i = 0; i < s.m; i++)
                        for (int64_t j = 0; j < s.n; j++) {
                            double sum, abs_sum, got = c[i * o.ldc + j], want = ref[i * o.ldc + j];
                            exact_product(&o, ta, tb, s.k, i, j, true, &sum, &abs_sum);
                            double bound = integers ? 0
                                                    : 2 * (s.k + 2) * U * (fabs(alpha) * abs_sum + fabs(beta * o.c0[i * o.ldc + j])) + 1e-30;
                            cr_assert_leq(fabs(got - want), bound, "emulated amx %c%c %lldx%lldx%lld beta %g (%lld, %lld): %.9g, reference %.9g",
                                          ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)s.m, (long long)s.n, (long long)s.k, beta,
                                          (long long)i, (long long)j, got, want);
                        }
                    free(c), free(ref);
                    free_operands(&o);
                }
#endif
}

Test(bf16, pool_split_gives_the_bits_of_one_thread) {
    TgPool *pool = tg_pool_create(2);
    TgRng rng;
    tg_rng_seed(&rng, 11);
    const Shape cases[] = {{301, 150, 261}, {40, 300, 501}, {150, 77, 1100}};
    for (int isa = 0; isa < TG_ISA_COUNT; isa++) {
        if (!tg_isa_supported((TgIsa)isa)) continue;
        assert_ok(tg_isa_set((TgIsa)isa));
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
            for (int t = 0; t < 4; t++) {
                bool ta = t & 1, tb = t >> 1;
                Shape s = cases[ci];
                float *a = malloc((size_t)(s.m * s.k) * sizeof(float)), *b = malloc((size_t)(s.k * s.n) * sizeof(float));
                float *c1 = malloc((size_t)(s.m * s.n) * sizeof(float)), *c2 = malloc((size_t)(s.m * s.n) * sizeof(float));
                tg_rng_fill_uniform(&rng, a, (size_t)(s.m * s.k), -1.0f, 1.0f);
                tg_rng_fill_uniform(&rng, b, (size_t)(s.k * s.n), -1.0f, 1.0f);
                int64_t lda = ta ? s.m : s.k, ldb = tb ? s.k : s.n;
                tg_bf16gemm(ta, tb, s.m, s.n, s.k, 1.0f, a, lda, b, ldb, 0.0f, c1, s.n);
                tg_gemm_pool(pool, TG_PRECISION_BF16, TG_GEMM_POOL, ta, tb, s.m, s.n, s.k, 1.0f, a, lda, b, ldb, 0.0f, c2, s.n);
                cr_assert(memcmp(c1, c2, (size_t)(s.m * s.n) * sizeof(float)) == 0, "%s %c%c %lldx%lldx%lld: split differs",
                          tg_isa_name((TgIsa)isa), ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)s.m, (long long)s.n,
                          (long long)s.k);
                free(a), free(b), free(c1), free(c2);
            }
    }
    assert_ok(tg_isa_set(tg_isa_best()));
    tg_pool_destroy(pool);
}

Test(bf16, precision_names_parse_and_refuse) {
    TgPrecision p;
    assert_ok(tg_precision_parse("bf16", &p));
    cr_expect_eq(p, TG_PRECISION_BF16);
    assert_ok(tg_precision_parse("fp32", &p));
    cr_expect_eq(p, TG_PRECISION_FP32);
    assert_fails(tg_precision_parse("fp16", &p), TG_ERR_ARG, "unknown precision 'fp16'; the choices are fp32|bf16");
    cr_expect_str_eq(tg_precision_name(TG_PRECISION_BF16), "bf16");
}
