/* The per-ISA kernels (lib/kernels.h), on every path this CPU runs: an AVX-512 machine also tests
 * its avx2 and generic paths (tg_isa_set switches in-process; Criterion runs each test in its own
 * process, so a switch does not leak).
 *
 * For each path:
 *  - the blocked GEMM (ragged shapes across every tile and block edge, all four transpositions,
 *    beta 0 / 1 / 0.5) and the few-rows product (every block width and the scalar tail, a
 *    transposed A, accumulate) against double-precision triple loops;
 *  - every vector kernel against a plain-C double reference, on lengths that end in every
 *    partial vector;
 *  - determinism: the same input twice gives the same bits; a range split in two (as the pool
 *    splits it) gives the same bits as one call; GEMMs on 1 and 2 threads give the same bits;
 *  - the registered finite-difference checks of every op (attention's also with P recomputed;
 *    tests/test_ops_attn.c runs its reference, thread and recomputation tests on every path),
 *    and two training steps of a tiny model (the same bits on 1 and 2 threads);
 * and across paths: each kernel's results agree within the tolerances below.
 *
 * Tolerances (inputs of order 1):
 *  - GEMM, against double: |c - ref| <= 1e-6 (k + 1) + 1e-6 (one float rounding per step of k);
 *  - vector kernels, against double: |got - ref| <= 2e-6 |ref| + 1e-6 (the exp is within 1.2e-7
 *    relative; a few roundings per element; sums over up to 100 terms);
 *  - across paths: the same bounds, doubled (each path is within them of the reference);
 *  - training: the second step's loss within 1e-5 relative across paths.
 * A deliberately wrong kernel (softmax scaled by 1.00001, one GEMM element off by 5e-5, an AdamW
 * that forgets the bias correction) is rejected by the same checks. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "lib/blas.h"
#include "lib/cpu.h"
#include "lib/gemm_plan.h"
#include "lib/kernels.h"
#include "ops/checks.h"
#include "tapegrad/ops.h"
#include "testutil.h"
#include "tapegrad/model.h"
#include "tapegrad/optim.h"

enum { MSG = 512 };

/* the paths to test: every one this CPU runs */
static int supported_paths(TgIsa *paths) {
    int n = 0;
    for (int i = 0; i < TG_ISA_COUNT; i++)
        if (tg_isa_supported((TgIsa)i)) paths[n++] = (TgIsa)i;
    return n;
}

static float *random_floats(TgRng *rng, int64_t n, float lo, float hi) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    tg_rng_fill_uniform(rng, p, (size_t)n, lo, hi);
    return p;
}

static float *copy_floats(const float *src, int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    memcpy(p, src, (size_t)n * sizeof(float));
    return p;
}

/* |got - ref| <= rtol |ref| + atol for every element; else false, with the worst in `why` */
static bool all_close(const char *what, const float *got, const double *ref, int64_t n, double rtol, double atol,
                      char *why) {
    for (int64_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - ref[i]);
        if (!(err <= rtol * fabs(ref[i]) + atol)) {
            snprintf(why, MSG, "%s: element %lld of %lld is %.9g, expected %.9g", what, (long long)i, (long long)n,
                     (double)got[i], ref[i]);
            return false;
        }
    }
    return true;
}

static const double RTOL = 2e-6, ATOL = 1e-6;

/* ---- GEMM ---- */

typedef struct {
    int64_t m, n, k;
} Shape;

/* C = alpha op(A) op(B) + beta C with strided A, B and C; NaN in C where beta 0 must not read */
static bool check_gemm_case(const TgKernels *kern, const TgGemmPlan *plan, bool ta, bool tb, Shape s, float alpha,
                            float beta, char *why) {
    TgRng rng;
    tg_rng_seed(&rng, (uint64_t)(s.m * 7919 + s.n * 104729 + s.k * 13 + ta * 2 + tb));
    int64_t lda = (ta ? s.m : s.k) + 1, ldb = (tb ? s.k : s.n) + 2, ldc = s.n + 3;
    float *a = random_floats(&rng, (ta ? s.k : s.m) * lda, -1, 1), *b = random_floats(&rng, (tb ? s.n : s.k) * ldb, -1, 1);
    float *c = random_floats(&rng, s.m * ldc, -1, 1), *c0 = copy_floats(c, s.m * ldc);
    if (beta == 0.0f)
        for (int64_t i = 0; i < s.m * ldc; i++) c[i] = NAN;
    kern->sgemm(plan, ta, tb, s.m, s.n, s.k, alpha, a, lda, b, ldb, beta, c, ldc);
    bool ok = true;
    for (int64_t i = 0; i < s.m && ok; i++)
        for (int64_t j = 0; j < s.n && ok; j++) {
            double sum = 0;
            for (int64_t p = 0; p < s.k; p++)
                sum += (double)(ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
            double expect = alpha * sum + (beta == 0.0f ? 0.0 : beta * (double)c0[i * ldc + j]);
            double err = fabs(expect - c[i * ldc + j]);
            if (!(err <= 1e-6 * (double)(s.k + 1) + 1e-6)) {
                snprintf(why, MSG,
                         "%s sgemm (kc %lld, nc %lld, mc %lld) %c%c m=%lld n=%lld k=%lld beta=%g: C(%lld,%lld) = %.9g, "
                         "expected %.9g",
                         tg_isa_name(kern->isa), (long long)plan->kc, (long long)plan->nc, (long long)plan->mc,
                         ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)s.m, (long long)s.n, (long long)s.k, beta, (long long)i, (long long)j, (double)c[i * ldc + j], expect);
                ok = false;
            }
        }
    free(a), free(b), free(c), free(c0);
    return ok;
}

/* shapes across the tiles (TG_MR 12 or 6, TG_NR 32, 16 or 8), the k slices (equal, at most kc) and the
 * blocks (mc, nc), with m, n or k of 1, each under three plans: this machine's, one of the
 * smallest blocks (kc 64, two tiles per block: every shape crosses slices and blocks) and one of
 * the longest slices (kc 1024) */
static const Shape gemm_shapes[] = {{1, 1, 1},    {6, 16, 7},    {12, 32, 5},    {13, 33, 513}, {11, 31, 512},
                                    {9, 40, 1100}, {25, 70, 40}, {97, 65, 300},  {40, 530, 20}, {200, 17, 130},
                                    {1, 300, 70}, {70, 1, 300},  {70, 300, 1},   {130, 70, 129}, {5, 3, 0}};

static bool check_gemm(const TgKernels *kern, char *why) {
    const float betas[] = {0.0f, 1.0f, 0.5f};
    TgGemmPlan plans[3];
    plans[0] = tg_gemm_plan_for(kern->gemm_mr, kern->gemm_nr, tg_cpu_caches());
    plans[1] = (TgGemmPlan){kern->gemm_mr, kern->gemm_nr, TG_GEMM_KC_MIN, 2 * kern->gemm_nr, 2 * kern->gemm_mr};
    plans[2] = (TgGemmPlan){kern->gemm_mr, kern->gemm_nr, TG_GEMM_KC_MAX, 3 * kern->gemm_nr, 5 * kern->gemm_mr};
    for (int pl = 0; pl < 3; pl++)
        for (size_t s = 0; s < sizeof gemm_shapes / sizeof gemm_shapes[0]; s++)
            for (int t = 0; t < 4; t++)
                for (int bi = 0; bi < 3; bi++)
                    if (!check_gemm_case(kern, &plans[pl], t & 1, t >> 1, gemm_shapes[s], bi == 2 ? 0.75f : 1.0f,
                                         betas[bi], why))
                        return false;
    return true;
}

/* C (rows, n) (+)= A (rows, k) B (k, n) with A read through (a_row, a_col) strides */
static bool check_gemm_rows(const TgKernels *kern, char *why) {
    TgRng rng;
    tg_rng_seed(&rng, 99);
    const int64_t ns[] = {1, 3, 4, 5, 8, 12, 16, 20, 31, 32, 33, 47, 64, 70};
    const int64_t ks[] = {1, 7, 32, 65};
    for (int rows = 1; rows <= TG_GEMM_ROWS_MAX; rows++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
                for (int variant = 0; variant < 2; variant++) {   /* 0: A row-major, store; 1: A^T view, add */
                    int64_t n = ns[ni], k = ks[ki], ldb = n + 5, ldc = n + 2;
                    int64_t a_row = variant ? 1 : k + 3, a_col = variant ? rows + 2 : 1;
                    int64_t a_size = variant ? k * (rows + 2) : rows * (k + 3);
                    float *a = random_floats(&rng, a_size, -1, 1), *b = random_floats(&rng, k * ldb, -1, 1);
                    float *c = random_floats(&rng, rows * ldc, -1, 1), *c0 = copy_floats(c, rows * ldc);
                    kern->gemm_rows(rows, k, a, a_row, a_col, b, ldb, n, c, ldc, variant == 1);
                    bool ok = true;
                    for (int r = 0; r < rows && ok; r++)
                        for (int64_t j = 0; j < n && ok; j++) {
                            double sum = variant ? c0[r * ldc + j] : 0.0;
                            for (int64_t i = 0; i < k; i++) sum += (double)a[r * a_row + i * a_col] * b[i * ldb + j];
                            if (!(fabs(sum - c[r * ldc + j]) <= 1e-6 * (double)(k + 1) + 1e-6)) {
                                snprintf(why, MSG, "%s gemm_rows rows=%d n=%lld k=%lld %s: C(%d,%lld) = %.9g, expected %.9g",
                                         tg_isa_name(kern->isa), rows, (long long)n, (long long)k,
                                         variant ? "A^T, add" : "store", r, (long long)j, (double)c[r * ldc + j], sum);
                                ok = false;
                            }
                        }
                    free(a), free(b), free(c), free(c0);
                    if (!ok) return false;
                }
    return true;
}

/* ---- the vector kernels against double ---- */

/* lengths that end in every partial vector of 4, 8 and 16 lanes, and a long row */
static const int64_t lengths[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 15, 16, 17, 24, 31, 32, 33, 47, 64, 100, 1000};
enum { N_LENGTHS = sizeof lengths / sizeof lengths[0] };

static bool check_softmax(const TgKernels *kern, char *why) {
    TgRng rng;
    tg_rng_seed(&rng, 1);
    bool ok = true;
    for (int li = 0; li < N_LENGTHS && ok; li++) {
        int64_t n = lengths[li];
        float scale = 0.35f;
        float *s = random_floats(&rng, n, -8, 8), *p = copy_floats(s, n), *dp = random_floats(&rng, n, -1, 1);
        double *ref = malloc((size_t)n * sizeof(double)), *dref = malloc((size_t)n * sizeof(double));
        kern->softmax_scaled(p, n, scale);
        double max = s[0], sum = 0, dot = 0;
        for (int64_t j = 1; j < n; j++) max = fmax(max, s[j]);
        for (int64_t j = 0; j < n; j++) sum += exp(scale * (s[j] - max));
        for (int64_t j = 0; j < n; j++) ref[j] = exp(scale * (s[j] - max)) / sum;
        ok = all_close("softmax_scaled", p, ref, n, RTOL, ATOL, why);
        /* the backward, from the kernel's own p: dp_j = scale p_j (dp_j - sum_i p_i dp_i) */
        for (int64_t j = 0; j < n; j++) dot += (double)p[j] * dp[j];
        for (int64_t j = 0; j < n; j++) dref[j] = scale * (double)p[j] * (dp[j] - dot);
        kern->softmax_backward(p, dp, n, scale);
        ok = ok && all_close("softmax_backward", dp, dref, n, RTOL, ATOL, why);
        free(s), free(p), free(dp), free(ref), free(dref);
    }
    return ok;
}

static bool check_cross_entropy_exps(const TgKernels *kern, char *why) {
    TgRng rng;
    tg_rng_seed(&rng, 2);
    bool ok = true;
    for (int li = 0; li < N_LENGTHS && ok; li++) {
        int64_t n = lengths[li];
        float *z = random_floats(&rng, n, -6, 6);
        double max = z[0], sum = 0;
        for (int64_t j = 1; j < n; j++) max = fmax(max, z[j]);
        for (int64_t j = 0; j < n; j++) sum += exp(z[j] - max);
        double lse = max + log(sum), got = kern->logsumexp(z, n);
        if (!(fabs(got - lse) <= RTOL * fabs(lse) + ATOL)) {
            snprintf(why, MSG, "logsumexp of %lld: %.9g, expected %.9g", (long long)n, got, lse);
            ok = false;
        }
        /* out = 0.3 exp(z - lse), in place over a copy of z, then added to it */
        float *out = copy_floats(z, n);
        double *ref = malloc((size_t)n * sizeof(double));
        kern->scaled_exp(out, n, (float)lse, 0.3f, out, false);
        for (int64_t j = 0; j < n; j++) ref[j] = 0.3 * exp((double)z[j] - (double)(float)lse);
        ok = ok && all_close("scaled_exp", out, ref, n, RTOL, ATOL, why);
        kern->scaled_exp(z, n, (float)lse, 0.3f, out, true);
        for (int64_t j = 0; j < n; j++) ref[j] *= 2;
        ok = ok && all_close("scaled_exp (add)", out, ref, n, RTOL, ATOL, why);
        free(z), free(out), free(ref);
    }
    return ok;
}

static double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

static bool check_swiglu(const TgKernels *kern, char *why) {
    TgRng rng;
    tg_rng_seed(&rng, 3);
    bool ok = true;
    for (int li = 0; li < N_LENGTHS && ok; li++) {
        int64_t n = lengths[li];
        float *a = random_floats(&rng, n, -6, 6), *b = random_floats(&rng, n, -2, 2), *dy = random_floats(&rng, n, -1, 1);
        float *y = malloc((size_t)n * sizeof(float)), *da = random_floats(&rng, n, -1, 1), *db = copy_floats(da, n);
        float *da0 = copy_floats(da, n);
        double *ref = malloc((size_t)n * sizeof(double)), *dref = malloc((size_t)n * sizeof(double));
        kern->swiglu_forward(a, b, y, n);
        for (int64_t i = 0; i < n; i++) ref[i] = a[i] * sigmoid_d(a[i]) * b[i];
        ok = all_close("swiglu_forward", y, ref, n, RTOL, ATOL, why);
        kern->swiglu_backward(a, b, dy, da, db, n, true, false);   /* da adds, db stores */
        for (int64_t i = 0; i < n; i++) {
            double s = sigmoid_d(a[i]);
            ref[i] = da0[i] + dy[i] * b[i] * s * (1 + a[i] * (1 - s));
            dref[i] = dy[i] * a[i] * s;
        }
        ok = ok && all_close("swiglu_backward da", da, ref, n, RTOL, ATOL, why);
        ok = ok && all_close("swiglu_backward db", db, dref, n, RTOL, ATOL, why);
        /* b the same tensor as a: one gradient, both terms */
        kern->swiglu_backward(a, a, dy, da, da, n, false, true);
        for (int64_t i = 0; i < n; i++) {
            double s = sigmoid_d(a[i]);
            ref[i] = dy[i] * a[i] * s * (1 + a[i] * (1 - s)) + dy[i] * a[i] * s;
        }
        ok = ok && all_close("swiglu_backward a == b", da, ref, n, RTOL, ATOL, why);
        kern->swiglu_backward(a, b, dy, NULL, db, n, false, false);   /* da not wanted */
        ok = ok && all_close("swiglu_backward db only", db, dref, n, RTOL, ATOL, why);
        free(a), free(b), free(dy), free(y), free(da), free(db), free(da0), free(ref), free(dref);
    }
    return ok;
}

static bool check_rmsnorm(const TgKernels *kern, char *why) {
    TgRng rng;
    tg_rng_seed(&rng, 4);
    bool ok = true;
    for (int li = 0; li < N_LENGTHS && ok; li++) {
        int64_t d = lengths[li];
        float eps = 1e-5f;
        float *x = random_floats(&rng, d, -2, 2), *g = random_floats(&rng, d, 0.5f, 1.5f);
        float *dy = random_floats(&rng, d, -1, 1), *y = malloc((size_t)d * sizeof(float));
        float *dx = random_floats(&rng, d, -1, 1), *dx0 = copy_floats(dx, d);
        double *ref = malloc((size_t)d * sizeof(double)), *dg = calloc((size_t)d, sizeof(double));
        double *dg_ref = malloc((size_t)d * sizeof(double));
        for (int64_t j = 0; j < d; j++) dg[j] = dg_ref[j] = 0.25 * j;
        float rstd = kern->rmsnorm_forward(x, g, y, d, eps);
        double sum_sq = 0, dot = 0;
        for (int64_t j = 0; j < d; j++) sum_sq += (double)x[j] * x[j];
        double rstd_ref = 1.0 / sqrt(sum_sq / d + eps);
        ok = all_close("rmsnorm_forward rstd", &rstd, &rstd_ref, 1, RTOL, 0, why);
        for (int64_t j = 0; j < d; j++) ref[j] = x[j] * rstd_ref * g[j];
        ok = ok && all_close("rmsnorm_forward y", y, ref, d, RTOL, ATOL, why);
        for (int64_t j = 0; j < d; j++) dot += (double)dy[j] * g[j] * x[j] * rstd_ref;
        for (int64_t j = 0; j < d; j++) ref[j] = dx0[j] + rstd_ref * (dy[j] * g[j] - x[j] * rstd_ref * dot / d);
        kern->rmsnorm_backward(x, g, dy, rstd, dx, d, true);
        ok = ok && all_close("rmsnorm_backward", dx, ref, d, RTOL, ATOL, why);
        kern->rmsnorm_gain_grad(x, dy, rstd, dg, d);
        float *dg_f = malloc((size_t)d * sizeof(float));
        for (int64_t j = 0; j < d; j++) dg_ref[j] += (double)dy[j] * x[j] * rstd_ref, dg_f[j] = (float)dg[j];
        ok = ok && all_close("rmsnorm_gain_grad", dg_f, dg_ref, d, RTOL, ATOL, why);
        free(x), free(g), free(dy), free(y), free(dx), free(dx0), free(ref), free(dg), free(dg_ref), free(dg_f);
    }
    return ok;
}

static bool check_rope(const TgKernels *kern, char *why) {
    TgRng rng;
    tg_rng_seed(&rng, 5);
    const int64_t head_dims[] = {2, 6, 8, 16, 32, 34, 64, 128};
    bool ok = true;
    for (size_t hi = 0; hi < sizeof head_dims / sizeof head_dims[0] && ok; hi++) {
        int64_t hd = head_dims[hi], half = hd / 2, heads = 3, n = heads * hd;
        float *cs = random_floats(&rng, half, -1, 1), *sn = random_floats(&rng, half, -1, 1);
        float *x = random_floats(&rng, n, -1, 1), *out = random_floats(&rng, n, -1, 1), *out0 = copy_floats(out, n);
        double *fwd = malloc((size_t)n * sizeof(double)), *bwd = malloc((size_t)n * sizeof(double));
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < half; i++) {
                double first = x[h * hd + i], second = x[h * hd + half + i], c = cs[i], s = sn[i];
                fwd[h * hd + i] = first * c - second * s;
                fwd[h * hd + half + i] = second * c + first * s;
                bwd[h * hd + i] = first * c + second * s;
                bwd[h * hd + half + i] = second * c - first * s;
            }
        kern->rope(x, out, cs, sn, heads, hd, TG_ROPE_BACKWARD_ADD);
        for (int64_t i = 0; i < n; i++) bwd[i] += out0[i];
        ok = all_close("rope backward (add)", out, bwd, n, RTOL, ATOL, why);
        float *in_place = copy_floats(x, n);
        kern->rope(in_place, in_place, cs, sn, heads, hd, TG_ROPE_FORWARD);
        ok = ok && all_close("rope forward (in place)", in_place, fwd, n, RTOL, ATOL, why);
        kern->rope(x, out, cs, sn, heads, hd, TG_ROPE_BACKWARD);
        for (int64_t i = 0; i < n; i++) bwd[i] -= out0[i];
        ok = ok && all_close("rope backward", out, bwd, n, RTOL, ATOL, why);
        free(cs), free(sn), free(x), free(out), free(out0), free(fwd), free(bwd), free(in_place);
    }
    return ok;
}

static bool check_adamw(const TgKernels *kern, char *why) {
    TgRng rng;
    tg_rng_seed(&rng, 6);
    int64_t n = 203;
    float *p = random_floats(&rng, n, -1, 1), *g = random_floats(&rng, n, -1, 1);
    float *m = random_floats(&rng, n, -0.1f, 0.1f), *v = random_floats(&rng, n, 0, 0.01f);
    float *p0 = copy_floats(p, n), *m0 = copy_floats(m, n), *v0 = copy_floats(v, n);
    double *p_ref = malloc((size_t)n * sizeof(double)), *m_ref = malloc((size_t)n * sizeof(double));
    double *v_ref = malloc((size_t)n * sizeof(double));
    TgAdamW args = {.p = p, .g = g, .m = m, .v = v, .beta1 = 0.9f, .beta2 = 0.95f, .step_size = 1e-3f / 0.19f,
                    .bias2_sqrt = sqrtf(1 - 0.95f * 0.95f), .eps = 1e-8f, .decay = 1e-4f};
    kern->adamw(&args, 0, 100);   /* two ranges, as the pool splits them */
    kern->adamw(&args, 100, n);
    for (int64_t i = 0; i < n; i++) {
        m_ref[i] = 0.9 * m0[i] + 0.1 * g[i];
        v_ref[i] = 0.95 * v0[i] + 0.05 * (double)g[i] * g[i];
        p_ref[i] = p0[i] * (1 - 1e-4) - args.step_size * m_ref[i] / (sqrt(v_ref[i]) / args.bias2_sqrt + 1e-8);
    }
    bool ok = all_close("adamw m", m, m_ref, n, RTOL, ATOL, why) && all_close("adamw v", v, v_ref, n, RTOL, ATOL, why) &&
              all_close("adamw p", p, p_ref, n, RTOL, ATOL, why);
    free(p), free(g), free(m), free(v), free(p0), free(m0), free(v0), free(p_ref), free(m_ref), free(v_ref);
    return ok;
}

typedef bool (*KernelCheck)(const TgKernels *kern, char *why);
static const struct {
    const char *name;
    KernelCheck check;
} kernel_checks[] = {
    {"sgemm", check_gemm},         {"gemm_rows", check_gemm_rows}, {"softmax", check_softmax},
    {"cross-entropy exps", check_cross_entropy_exps}, {"swiglu", check_swiglu}, {"rmsnorm", check_rmsnorm},
    {"rope", check_rope},          {"adamw", check_adamw},
};

Test(kernels, every_path_matches_double_references) {
    TgIsa paths[TG_ISA_COUNT];
    int n_paths = supported_paths(paths);
    cr_assert_geq(n_paths, 1);
    cr_assert_eq(paths[0], TG_ISA_GENERIC, "generic runs everywhere");
    for (int p = 0; p < n_paths; p++)
        for (size_t c = 0; c < sizeof kernel_checks / sizeof kernel_checks[0]; c++) {
            char why[MSG] = "";
            cr_expect(kernel_checks[c].check(tg_kernels_of(paths[p]), why), "%s, %s: %s", tg_isa_name(paths[p]),
                      kernel_checks[c].name, why);
        }
}

/* ---- the checks reject wrong kernels ---- */

static const TgKernels *wrong_base;
static void softmax_off_by_1e5(float *p, int64_t n, float scale) {
    wrong_base->softmax_scaled(p, n, scale);
    for (int64_t j = 0; j < n; j++) p[j] *= 1.00001f;
}
static void sgemm_one_element_off(const TgGemmPlan *plan, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                                  float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                                  float *c, int64_t ldc) {
    wrong_base->sgemm(plan, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (m > 30 && n > 20) c[30 * ldc + 20] += 5e-5f;   /* one element, inside a later tile */
}
static void adamw_without_bias_correction(const TgAdamW *args, int64_t begin, int64_t end) {
    TgAdamW wrong = *args;
    wrong.bias2_sqrt = 1.0f;
    wrong_base->adamw(&wrong, begin, end);
}

Test(kernels, the_checks_reject_a_wrong_kernel) {
    wrong_base = tg_kernels_of(TG_ISA_GENERIC);
    TgKernels wrong = *wrong_base;
    char why[MSG];
    wrong.softmax_scaled = softmax_off_by_1e5;
    cr_expect_not(check_softmax(&wrong, why), "a softmax 1e-5 too large passed");
    wrong = *wrong_base;
    wrong.sgemm = sgemm_one_element_off;
    cr_expect_not(check_gemm(&wrong, why), "a GEMM with one element off by 5e-5 passed");
    wrong = *wrong_base;
    wrong.adamw = adamw_without_bias_correction;
    cr_expect_not(check_adamw(&wrong, why), "an AdamW without bias correction passed");
    cr_expect(check_softmax(wrong_base, why) && check_adamw(wrong_base, why), "%s", why);
}

/* ---- determinism on each path ---- */

static bool same_bits(const float *a, const float *b, int64_t n) { return memcmp(a, b, (size_t)n * sizeof(float)) == 0; }

Test(kernels, each_path_gives_the_same_bits_for_the_same_input_and_any_range_split) {
    TgIsa paths[TG_ISA_COUNT];
    int n_paths = supported_paths(paths);
    TgRng rng;
    tg_rng_seed(&rng, 7);
    int64_t n = 1000, cut = 333;   /* not a multiple of any vector width */
    float *a = random_floats(&rng, n, -5, 5), *b = random_floats(&rng, n, -2, 2), *dy = random_floats(&rng, n, -1, 1);
    float *y1 = malloc(n * sizeof(float)), *y2 = malloc(n * sizeof(float));
    float *da1 = malloc(n * sizeof(float)), *da2 = malloc(n * sizeof(float));
    for (int p = 0; p < n_paths; p++) {
        const TgKernels *k = tg_kernels_of(paths[p]);
        const char *name = tg_isa_name(paths[p]);
        k->swiglu_forward(a, b, y1, n);
        k->swiglu_forward(a, b, y2, cut);
        k->swiglu_forward(a + cut, b + cut, y2 + cut, n - cut);
        cr_expect(same_bits(y1, y2, n), "%s: swiglu_forward split at %lld differs", name, (long long)cut);
        k->swiglu_backward(a, b, dy, da1, NULL, n, false, false);
        k->swiglu_backward(a, b, dy, da2, NULL, cut, false, false);
        k->swiglu_backward(a + cut, b + cut, dy + cut, da2 + cut, NULL, n - cut, false, false);
        cr_expect(same_bits(da1, da2, n), "%s: swiglu_backward split differs", name);
        /* a row's softmax twice: the same bits */
        memcpy(y1, a, n * sizeof(float));
        memcpy(y2, a, n * sizeof(float));
        k->softmax_scaled(y1, n, 0.5f);
        k->softmax_scaled(y2, n, 0.5f);
        cr_expect(same_bits(y1, y2, n), "%s: softmax twice differs", name);
        /* AdamW over one range or two */
        float *p1 = copy_floats(a, n), *m1 = copy_floats(b, n), *v1 = copy_floats(dy, n);
        for (int64_t i = 0; i < n; i++) v1[i] = v1[i] * v1[i];
        float *p2 = copy_floats(p1, n), *m2 = copy_floats(m1, n), *v2 = copy_floats(v1, n);
        TgAdamW one = {.p = p1, .g = dy, .m = m1, .v = v1, .beta1 = 0.9f, .beta2 = 0.95f, .step_size = 1e-3f,
                       .bias2_sqrt = 0.5f, .eps = 1e-8f, .decay = 1e-4f};
        TgAdamW two = one;
        two.p = p2, two.m = m2, two.v = v2;
        k->adamw(&one, 0, n);
        k->adamw(&two, 0, cut);
        k->adamw(&two, cut, n);
        cr_expect(same_bits(p1, p2, n) && same_bits(m1, m2, n) && same_bits(v1, v2, n), "%s: adamw split differs", name);
        free(p1), free(m1), free(v1), free(p2), free(m2), free(v2);
        /* few-rows product: 70 columns at once or 13 + 57 (other blocks, the same bits per column) */
        int64_t k_len = 37, cols = 70;
        float *bm = random_floats(&rng, k_len * cols, -1, 1), *c1 = malloc(4 * cols * sizeof(float));
        float *c2 = malloc(4 * cols * sizeof(float));
        k->gemm_rows(4, k_len, a, k_len, 1, bm, cols, cols, c1, cols, false);
        k->gemm_rows(4, k_len, a, k_len, 1, bm, cols, 13, c2, cols, false);
        k->gemm_rows(4, k_len, a, k_len, 1, bm + 13, cols, cols - 13, c2 + 13, cols, false);
        cr_expect(same_bits(c1, c2, 4 * cols), "%s: gemm_rows column split differs", name);
        free(bm), free(c1), free(c2);
    }
    free(a), free(b), free(dy), free(y1), free(y2), free(da1), free(da2);
}

Test(kernels, each_path_gives_gemms_bitwise_equal_on_1_and_2_threads) {
    TgIsa paths[TG_ISA_COUNT];
    int n_paths = supported_paths(paths);
    TgPool *pool = tg_pool_create(2);
    TgRng rng;
    tg_rng_seed(&rng, 8);
    /* by rows (Y = X W^T), by columns (a weight gradient dW = dY^T X, k the longest side) */
    const struct {
        bool ta, tb;
        int64_t m, n, k;
        float beta;
    } cases[] = {{false, true, 301, 150, 260, 0.0f}, {true, false, 70, 130, 500, 1.0f}, {false, false, 203, 97, 128, 0.5f}};
    for (int p = 0; p < n_paths; p++) {
        cr_assert_eq(tg_isa_set(paths[p]), TG_OK);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            int64_t m = cases[i].m, n = cases[i].n, k = cases[i].k;
            float *a = random_floats(&rng, m * k, -1, 1), *b = random_floats(&rng, n * k, -1, 1);
            float *c1 = random_floats(&rng, m * n, -1, 1), *c2 = copy_floats(c1, m * n);
            int64_t lda = cases[i].ta ? m : k, ldb = cases[i].tb ? k : n;
            tg_sgemm_pool(NULL, cases[i].ta, cases[i].tb, m, n, k, 1.0f, a, lda, b, ldb, cases[i].beta, c1, n);
            tg_sgemm_pool(pool, cases[i].ta, cases[i].tb, m, n, k, 1.0f, a, lda, b, ldb, cases[i].beta, c2, n);
            cr_expect(same_bits(c1, c2, m * n), "%s: case %zu: 2 threads differ from 1", tg_isa_name(paths[p]), i);
            free(a), free(b), free(c1), free(c2);
        }
    }
    tg_pool_destroy(pool);
}

/* ---- across paths ---- */

Test(kernels, paths_agree_within_the_stated_tolerances) {
    TgIsa paths[TG_ISA_COUNT];
    int n_paths = supported_paths(paths);
    TgRng rng;
    tg_rng_seed(&rng, 9);
    int64_t m = 37, n = 53, k = 300, len = 777;
    float *a = random_floats(&rng, m * k, -1, 1), *b = random_floats(&rng, k * n, -1, 1);
    float *x = random_floats(&rng, len, -4, 4), *g = random_floats(&rng, len, 0.5f, 1.5f);
    float *c[TG_ISA_COUNT], *y[TG_ISA_COUNT], *sm[TG_ISA_COUNT];
    for (int p = 0; p < n_paths; p++) {
        const TgKernels *kern = tg_kernels_of(paths[p]);
        c[p] = malloc((size_t)(m * n) * sizeof(float));
        TgGemmPlan plan = tg_gemm_plan_for(kern->gemm_mr, kern->gemm_nr, tg_cpu_caches());
        kern->sgemm(&plan, false, false, m, n, k, 1.0f, a, k, b, n, 0.0f, c[p], n);
        y[p] = malloc((size_t)len * sizeof(float));
        kern->rmsnorm_forward(x, g, y[p], len, 1e-5f);
        sm[p] = copy_floats(x, len);
        kern->softmax_scaled(sm[p], len, 1.0f);
    }
    double *ref = malloc((size_t)(m * n > len ? m * n : len) * sizeof(double));
    for (int p = 1; p < n_paths; p++) {
        char why[MSG] = "";
        for (int64_t i = 0; i < m * n; i++) ref[i] = c[0][i];
        cr_expect(all_close("sgemm", c[p], ref, m * n, 0, 2 * (1e-6 * (k + 1) + 1e-6), why), "%s vs %s: %s",
                  tg_isa_name(paths[p]), tg_isa_name(paths[0]), why);
        for (int64_t i = 0; i < len; i++) ref[i] = y[0][i];
        cr_expect(all_close("rmsnorm", y[p], ref, len, 2 * RTOL, 2 * ATOL, why), "%s vs generic: %s",
                  tg_isa_name(paths[p]), why);
        for (int64_t i = 0; i < len; i++) ref[i] = sm[0][i];
        cr_expect(all_close("softmax", sm[p], ref, len, 2 * RTOL, 2 * ATOL, why), "%s vs generic: %s",
                  tg_isa_name(paths[p]), why);
    }
    for (int p = 0; p < n_paths; p++) free(c[p]), free(y[p]), free(sm[p]);
    free(a), free(b), free(x), free(g), free(ref);
}

/* ---- the ops and a training step on each path ---- */

/* Every op's finite-difference checks, and attention's again with P recomputed in the backward.
 * (tests/test_ops_attn.c compares attention with a double reference, across 1 and 2 threads and
 * against recomputation, on every path too.) */
Test(kernels, every_op_passes_its_gradient_checks_on_every_path) {
    TgIsa paths[TG_ISA_COUNT];
    int n_paths = supported_paths(paths);
    for (int p = 0; p < n_paths; p++) {
        cr_assert_eq(tg_isa_set(paths[p]), TG_OK);
        TestTape tt;
        test_tape_init(&tt, 1);
        int failures = tg_op_checks_run(NULL, &tt.tape, 2024, 1, tg_op_check_print_failures, stderr);
        tg_tape_set_saved_probs_limit(&tt.tape, 0);
        failures += tg_op_checks_run("attention", &tt.tape, 2025, 1, tg_op_check_print_failures, stderr);
        test_tape_free(&tt);
        cr_expect_eq(failures, 0, "%s: %d op check(s) failed", tg_isa_name(paths[p]), failures);
    }
}

/* Two AdamW steps of a tiny model (GQA, vocab 37, 2 x 16 tokens): the losses */
static void train_two_steps(int threads, float losses[2], float *first_param) {
    TgModelConfig c;
    cr_assert_eq(tg_model_preset("tiny", &c), TG_OK);
    c.vocab = 37;
    c.n_kv_heads = 1;
    TgModel m;
    tg_model_build(&m, &c);
    tg_model_init_weights(&m, 11);
    TestTape tt;
    test_tape_init(&tt, threads);
    int64_t B = 2, T = 16;
    int32_t in[32], tg[32];
    for (int i = 0; i < 32; i++) in[i] = (i * 7 + 3) % 37, tg[i] = (i * 5 + 1) % 37;
    TgAdamWConfig opt = tg_adamw_defaults();
    for (int step = 0; step < 2; step++) {
        tg_params_zero_grad(&m.params);
        TgTensor *loss =
            tg_model_loss(&m, &tt.tape, &(TgBatch){.tokens = in, .targets = tg, .batch = B, .seq = T}, NULL);
        losses[step] = loss->data[0];
        tg_tape_backward(&tt.tape, loss);
        tg_tape_reset(&tt.tape);
        tg_clip_grad_norm_pool(&m.params, 1.0, tt.pool);
        tg_adamw_step(&m.params, &opt, step + 1, 1e-3, tt.pool);
    }
    *first_param = m.params.data[0];
    test_tape_free(&tt);
    tg_model_free(&m);
}

Test(kernels, a_training_step_runs_on_every_path_and_threads_change_no_bit) {
    TgIsa paths[TG_ISA_COUNT];
    int n_paths = supported_paths(paths);
    float losses[TG_ISA_COUNT][2];
    for (int p = 0; p < n_paths; p++) {
        cr_assert_eq(tg_isa_set(paths[p]), TG_OK);
        cr_assert_eq(tg_isa_active(), paths[p]);
        float two_threads[2], param1, param2;
        train_two_steps(1, losses[p], &param1);
        train_two_steps(2, two_threads, &param2);
        cr_expect(memcmp(losses[p], two_threads, sizeof two_threads) == 0 && param1 == param2,
                  "%s: 1 thread %.9g %.9g, 2 threads %.9g %.9g", tg_isa_name(paths[p]), losses[p][0], losses[p][1],
                  two_threads[0], two_threads[1]);
        cr_expect(fabs(losses[p][0] - log(37.0)) < 0.1, "%s: first loss %g, ln V %g", tg_isa_name(paths[p]),
                  losses[p][0], log(37.0));
        cr_expect_lt(losses[p][1], losses[p][0], "%s: the step did not lower the loss", tg_isa_name(paths[p]));
    }
    for (int p = 1; p < n_paths; p++)
        for (int s = 0; s < 2; s++)
            cr_expect(fabs(losses[p][s] - losses[0][s]) <= 1e-5 * fabs(losses[0][s]), "step %d loss: %s %.9g, generic %.9g",
                      s + 1, tg_isa_name(paths[p]), losses[p][s], losses[0][s]);
}

/* ---- choosing the path ---- */

Test(kernels, the_environment_chooses_the_path_and_bad_names_are_refused) {
    cr_assert(tg_isa_supported(TG_ISA_GENERIC));
    cr_assert(tg_isa_supported(tg_isa_best()));
    cr_assert_str_eq(tg_isa_name(TG_ISA_AVX2), "avx2");
    setenv("TAPEGRAD_ISA", "generic", 1);
    cr_assert_eq(tg_isa_init(), TG_OK);
    cr_assert_eq(tg_isa_active(), TG_ISA_GENERIC);
    cr_assert_eq(tg_kernels(), tg_kernels_of(TG_ISA_GENERIC));
    setenv("TAPEGRAD_ISA", "sse9", 1);
    assert_fails(tg_isa_init(), TG_ERR_ARG, "TAPEGRAD_ISA=sse9: unknown kernel path");
    cr_assert_eq(tg_isa_active(), TG_ISA_GENERIC, "a refused name changes nothing");
    setenv("TAPEGRAD_ISA", "", 1);
    cr_assert_eq(tg_isa_init(), TG_OK);
    cr_assert_eq(tg_isa_active(), tg_isa_best());
    for (int i = 0; i < TG_ISA_COUNT; i++)
        if (!tg_isa_supported((TgIsa)i)) {
            setenv("TAPEGRAD_ISA", tg_isa_name((TgIsa)i), 1);
            assert_fails(tg_isa_init(), TG_ERR_ARG, "needs more than this CPU");
        }
    unsetenv("TAPEGRAD_ISA");
    cr_assert_str_neq(tg_cpu_name(), "");
}

/* The program: a path named in TAPEGRAD_ISA is used and named; a bad one is one line and exit 2 */
static int run_cli(const char *env, const char *args, char *out, size_t cap) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s %s 2>&1", env, TAPEGRAD_BIN, args);
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL, "cannot run %s", cmd);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Test(kernels, the_program_names_the_path_and_refuses_a_bad_one_in_one_line) {
    char out[4096];
    cr_assert_eq(run_cli("TAPEGRAD_ISA=generic", "selftest", out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "all passed (kernels: generic on ") != NULL, "%s", out);
    cr_assert_eq(run_cli("TAPEGRAD_ISA=sse9", "selftest", out, sizeof out), 2, "%s", out);
    cr_expect_str_eq(out, "tapegrad: TAPEGRAD_ISA=sse9: unknown kernel path; use generic, avx2, avx512, avx512bf16 or amx (or unset it)\n");
    cr_assert_eq(run_cli("", "--version", out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "this CPU runs:") != NULL && strstr(out, " generic)") != NULL, "%s", out);
}

static void print_peak(void) {
    /* a sanity check of the measurement, not a benchmark: positive and finite */
    double gflops = tg_peak_gflops(NULL, 0.01);
    cr_expect(gflops > 0 && isfinite(gflops), "peak %g GFLOP/s", gflops);
}

Test(kernels, the_peak_measurement_returns_a_rate_on_every_path) {
    TgIsa paths[TG_ISA_COUNT];
    int n_paths = supported_paths(paths);
    for (int p = 0; p < n_paths; p++) {
        cr_assert_eq(tg_isa_set(paths[p]), TG_OK);
        print_peak();
    }
}

/* ---- the GEMM plan ---- */

/* The plan from a CPU's caches follows lib/gemm_plan.h: on three CPUs' caches, kc, nc and mc are
 * the model's, and the blocks fit where the model puts them. */
Test(kernels, the_gemm_plan_follows_the_caches) {
    const struct {
        const char *cpu;
        TgCaches caches;
        int mr, nr;
        int64_t kc, nc;
    } cases[] = {
        /* Zen 3, avx2: 7 ways of 4 KiB for 6 rows -> 1194, at most 1024; L2 512 KiB 8-way: (8 - 1 - 1)
         * ways of 64 KiB / (1024 x 4) = 96 */
        {"Zen 3 avx2", {{32768, 8, 64}, {524288, 8, 64}, {33554432, 16, 64}, "test"}, 6, 16, 1024, 96},
        /* Zen 4, avx512: 7 x 4096 / 48 = 597 -> 592; L2 1 MiB 8-way: 6 x 131072 / 2368 = 332 -> 320 */
        {"Zen 4 avx512", {{32768, 8, 64}, {1048576, 8, 64}, {33554432, 16, 64}, "test"}, 12, 32, 592, 320},
        /* Emerald Rapids, avx512: 48 KiB 12-way: 11 x 4096 / 48 = 938 -> 936; L2 2 MiB 16-way:
         * 14 x 131072 / 3744 = 490 -> 480 */
        {"Emerald Rapids avx512", {{49152, 12, 64}, {2097152, 16, 64}, {0, 0, 0}, "test"}, 12, 32, 936, 480},
        /* Zen 5, avx512: 48 KiB 12-way -> 936; L2 1 MiB 16-way: 14 x 65536 / 3744 = 245 -> 224 */
        {"Zen 5 avx512", {{49152, 12, 64}, {1048576, 16, 64}, {33554432, 16, 64}, "test"}, 12, 32, 936, 224},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const TgCaches *c = &cases[i].caches;
        TgGemmPlan p = tg_gemm_plan_for(cases[i].mr, cases[i].nr, c);
        cr_expect_eq(p.kc, cases[i].kc, "%s: kc %lld", cases[i].cpu, (long long)p.kc);
        cr_expect_eq(p.nc, cases[i].nc, "%s: nc %lld", cases[i].cpu, (long long)p.nc);
        cr_expect(p.nc % p.nr == 0 && p.mc % p.mr == 0 && p.kc % 8 == 0, "%s: blocks of whole tiles", cases[i].cpu);
        /* an A micro-panel fits L1 beside a way for C and the streaming B panel; the B block fits L2 */
        cr_expect_leq(p.mr * p.kc * 4, c->l1d.bytes - c->l1d.bytes / c->l1d.ways, "%s", cases[i].cpu);
        cr_expect_leq(p.kc * p.nc * 4, c->l2.bytes, "%s", cases[i].cpu);
        cr_expect_geq(p.mc, p.mr, "%s", cases[i].cpu);
    }
    /* this machine's caches are read (sysfs on Linux), and its plan is a plan */
    const TgCaches *here = tg_cpu_caches();
    cr_expect(here->l1d.bytes >= 4096 && here->l2.bytes >= here->l1d.bytes && here->l1d.line >= 32,
              "caches from %s: L1d %lld, L2 %lld", here->source, (long long)here->l1d.bytes, (long long)here->l2.bytes);
#if defined(__x86_64__)
    /* an x86-64 CPU always tells its caches (sysfs, or cpuid's leaves: 4 on Intel, 0x8000001D or
     * else 0x80000005/6 on AMD, whose older leaves a hypervisor that hides the topology leaf keeps) */
    cr_expect(strcmp(here->source, "assumed") != 0, "the caches were assumed, not read");
    TgCaches cpuid_only;
    cr_expect(tg_cpu_caches_from(TG_CACHES_FROM_CPUID, &cpuid_only) && cpuid_only.l1d.bytes >= 4096 && cpuid_only.l1d.ways >= 1,
              "cpuid tells no L1d");
#endif
    /* cpuid (the fallback) reads what sysfs reports, where both answer */
    TgCaches from_sysfs, from_cpuid;
    if (tg_cpu_caches_from(TG_CACHES_FROM_SYSFS, &from_sysfs) && tg_cpu_caches_from(TG_CACHES_FROM_CPUID, &from_cpuid)) {
        const TgCacheLevel *s_levels[] = {&from_sysfs.l1d, &from_sysfs.l2, &from_sysfs.l3},
                           *c_levels[] = {&from_cpuid.l1d, &from_cpuid.l2, &from_cpuid.l3};
        for (int l = 0; l < 3; l++)
            cr_expect(s_levels[l]->bytes == c_levels[l]->bytes && s_levels[l]->ways == c_levels[l]->ways &&
                          s_levels[l]->line == c_levels[l]->line,
                      "level %d: sysfs %lld bytes %d-way %d-byte lines, cpuid %lld bytes %d-way %d-byte lines", l + 1,
                      (long long)s_levels[l]->bytes, s_levels[l]->ways, s_levels[l]->line, (long long)c_levels[l]->bytes,
                      c_levels[l]->ways, c_levels[l]->line);
    }
    cr_expect_eq(tg_cache_size_parse("32K\n"), 32768);
    cr_expect_eq(tg_cache_size_parse("1024K"), 1048576);
    cr_expect_eq(tg_cache_size_parse("32M"), 33554432);
    cr_expect_eq(tg_cache_size_parse("48"), 48);
    cr_expect_eq(tg_cache_size_parse("K"), -1);
    cr_expect_eq(tg_cache_size_parse("12Q"), -1);
    /* a kc a run asks for is used, a bad one refused */
    cr_expect_eq(tg_gemm_plan_set_kc(128), TG_OK);
    cr_expect_eq(tg_gemm_plan().kc, 128);
    cr_expect_eq(tg_gemm_plan_set_kc(100), TG_ERR_ARG);
    cr_expect_eq(tg_gemm_plan().kc, 128);
    cr_expect_eq(tg_gemm_plan_set_kc(0), TG_OK);
    cr_expect_eq(tg_gemm_plan().kc, tg_gemm_plan_for(tg_kernels()->gemm_mr, tg_kernels()->gemm_nr, here).kc);
}

/* Only kc orders the sums: on every path, blocks of other sizes (nc, mc) give the same bits, and
 * another kc gives other bits (so the test would see a plan that changes the order). */
Test(kernels, only_kc_changes_the_bits_of_a_gemm) {
    TgIsa paths[TG_ISA_COUNT];
    int n_paths = supported_paths(paths);
    TgRng rng;
    tg_rng_seed(&rng, 21);
    int64_t m = 61, n = 75, k = 333;
    float *a = random_floats(&rng, m * k, -1, 1), *b = random_floats(&rng, n * k, -1, 1);
    float *c1 = malloc((size_t)(m * n) * sizeof(float)), *c2 = malloc((size_t)(m * n) * sizeof(float));
    for (int p = 0; p < n_paths; p++) {
        const TgKernels *kern = tg_kernels_of(paths[p]);
        int mr = kern->gemm_mr, nr = kern->gemm_nr;
        TgGemmPlan big = {mr, nr, 128, 4096, 4096}, small = {mr, nr, 128, nr, mr}, other_kc = {mr, nr, 64, 4096, 4096};
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t >> 1;
            int64_t lda = ta ? m : k, ldb = tb ? k : n;
            kern->sgemm(&big, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c1, n);
            kern->sgemm(&small, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c2, n);
            cr_expect(same_bits(c1, c2, m * n), "%s %c%c: nc/mc changed a bit", tg_isa_name(paths[p]), ta ? 'T' : 'N',
                      tb ? 'T' : 'N');
            kern->sgemm(&other_kc, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c2, n);
            cr_expect_not(same_bits(c1, c2, m * n), "%s: kc 64 and 128 gave the same bits", tg_isa_name(paths[p]));
        }
    }
    free(a), free(b), free(c1), free(c2);
}
