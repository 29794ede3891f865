/* The hot kernels, one table per instruction-set path (the active one chosen below among those lib/cpu.h says the CPU runs).
 *
 * Each kernel has one source in lib/isa/, compiled once per path with that path's compiler
 * flags (CMakeLists.txt); lib/isa/simd.h says how. Callers fetch the active table once per
 * parallel range, `const TgKernels *k = tg_kernels();`, and call through it.
 *
 * Determinism, on one path: every kernel computes each output element by the same sequence of
 * operations whatever the range it is called on (whole vectors and the partial vector at the
 * end of a range share their code), and every reduction (a row's max, sum or dot product) runs
 * in an order fixed by its length alone. So an op that splits its rows or elements over threads
 * gives the same bits on any thread count. Across paths the reductions have other lane counts,
 * and generic has no fused multiply-add: results agree within float rounding (the tolerances are
 * in tests/test_kernels.c), not bitwise. */
#ifndef TAPEGRAD_LIB_KERNELS_H
#define TAPEGRAD_LIB_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/cpu.h"

/* One AdamW update over elements [begin, end) of flat buffers:
 *   m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2
 *   p = p (1 - decay) - step_size m / (sqrt(v) / bias2_sqrt + eps)
 * with step_size = lr / (1 - beta1^t), bias2_sqrt = sqrt(1 - beta2^t), decay = lr wd (or 0). */
typedef struct {
    float *p, *m, *v;
    const float *g;
    float beta1, beta2, step_size, bias2_sqrt, eps, decay;
} TgAdamW;

typedef enum {
    TG_ROPE_FORWARD = 0,      /* out = R in */
    TG_ROPE_BACKWARD,         /* out = R^T in */
    TG_ROPE_BACKWARD_ADD,     /* out += R^T in */
} TgRopeMode;

struct TgGemmPlan;

typedef struct TgKernels {
    TgIsa isa;
    /* The blocked GEMM's register tile (rows x columns of C): callers that split C over threads
     * hand out multiples of it. */
    int gemm_mr, gemm_nr;
    /* C = alpha op(A) op(B) + beta C, row-major, single-threaded (lib/blas.h, tg_sgemm), blocked
     * as `plan` says (lib/gemm_plan.h). Each element of C is a fixed-order sum over k (a chain
     * per k slice, the slices cut by k and plan->kc alone), whatever the shape of the call:
     * splitting C changes no bit. beta 0 never reads C. */
    void (*sgemm)(const struct TgGemmPlan *plan, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                  int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
    /* The same product with every element of A and B rounded to bf16 (lib/bf16.h) and the
     * products summed in fp32 (lib/isa/gemm_bf16.c): same plan, same determinism. bf16_native:
     * with bf16 instructions (vdpbf16ps, AMX); false: the rounded operands through the fp32
     * kernel, slower than fp32. */
    void (*bf16gemm)(const struct TgGemmPlan *plan, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                     float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                     int64_t ldc);
    bool bf16_native;
    /* C (rows, n) (+)= A (rows, k) B (k, n), 1 <= rows <= TG_GEMM_ROWS_MAX (lib/blas.h). */
    void (*gemm_rows)(int rows, int64_t k, const float *a, int64_t a_row, int64_t a_col, const float *b,
                      int64_t ldb, int64_t n, float *c, int64_t ldc, bool accumulate);

    /* p[0..n) = softmax(scale p) in place, n >= 1, scale > 0:
     * p_j = exp(scale (p_j - max p)) / sum_i exp(scale (p_i - max p)). */
    void (*softmax_scaled)(float *p, int64_t n, float scale);
    /* Its backward, given the probabilities p and dp = dL/dp (overwritten with dL/ds for
     * s = p's logits before the scale): dp_j = scale p_j (dp_j - sum_i p_i dp_i). */
    void (*softmax_backward)(const float *p, float *dp, int64_t n, float scale);
    /* log sum_j exp(z_j), as max + log(sum exp(z_j - max)) with the sum in double; n >= 1. */
    double (*logsumexp)(const float *z, int64_t n);
    /* out_j = scale exp(z_j - shift) (added to out_j with `accumulate`), z_j <= shift (up to
     * rounding); out may be z itself. */
    void (*scaled_exp)(const float *z, int64_t n, float shift, float scale, float *out, bool accumulate);

    /* y = silu(a) b = a sigmoid(a) b over n elements. */
    void (*swiglu_forward)(const float *a, const float *b, float *y, int64_t n);
    /* da (+)= dy b silu'(a), silu'(a) = s (1 + a (1 - s)), s = sigmoid(a); db (+)= dy silu(a).
     * da or db may be NULL; db is written after da, so with b the same tensor as a (db == da)
     * the two terms add. */
    void (*swiglu_backward)(const float *a, const float *b, const float *dy, float *da, float *db, int64_t n,
                            bool da_accumulate, bool db_accumulate);

    /* One row of RMSNorm: y = x rstd g, returns rstd = (mean(x^2) + eps)^(-1/2), the mean in
     * double. */
    float (*rmsnorm_forward)(const float *x, const float *g, float *y, int64_t d, float eps);
    /* dx (+)= rstd (dy g - x rstd mean_j(dy_j g_j x_j rstd)), the mean in double. */
    void (*rmsnorm_backward)(const float *x, const float *g, const float *dy, float rstd, float *dx, int64_t d,
                             bool accumulate);
    /* dg_sum[j] += dy_j (x_j rstd) in double for j < n: one row's share of the gain's gradient. */
    void (*rmsnorm_gain_grad)(const float *x, const float *dy, float rstd, double *dg_sum, int64_t n);

    /* Rotary embedding of one token's `heads` heads of head_dim (even) floats, half-split pairs:
     * out_i = in_i cos_i - in_{i+h} sin_i, out_{i+h} = in_{i+h} cos_i + in_i sin_i (forward;
     * the backward rotates by -angle). cos, sin hold head_dim / 2 values. out may be in. */
    void (*rope)(const float *in, float *out, const float *cos, const float *sin, int64_t heads, int64_t head_dim,
                 TgRopeMode mode);

    /* AdamW over [begin, end) (TgAdamW above). */
    void (*adamw)(const TgAdamW *args, int64_t begin, int64_t end);

    /* `iters` rounds of independent multiply-add chains on registers (the FMA ceiling);
     * fma_loop_flops FLOPs per round. Writes a result into *sink so nothing is optimised away. */
    void (*fma_loop)(int64_t iters, float *sink);
    double fma_loop_flops;
    /* The same for the bf16 GEMM's instruction (vdpbf16ps, AMX's tdpbf16ps; fma_loop where the
     * path has none): its ceiling. */
    void (*bf16_loop)(int64_t iters, float *sink);
    double bf16_loop_flops;
} TgKernels;

/* The active path's table (chosen at start-up by tg_isa_init, or by tg_isa_set; below). */
const TgKernels *tg_kernels(void);
/* The table of one path, whether or not this CPU can run it (for listing and tests). */
const TgKernels *tg_kernels_of(TgIsa isa);


/* The path this CPU can run (and this build carries: on other architectures only generic). */
bool tg_isa_supported(TgIsa isa);
/* The highest supported path. */
TgIsa tg_isa_best(void);
/* The path named by TAPEGRAD_ISA (generic | avx2 | avx512 | avx512bf16 | amx), or the highest supported when the
 * variable is unset or empty. TG_ERR_ARG with a one-line message for an unknown name or a path
 * this CPU cannot run; the active path is then unchanged. The CLI calls it first thing; a
 * library user who does not is served the same choice on the first kernel call (an invalid
 * TAPEGRAD_ISA then aborts with that message). */
TgStatus tg_isa_init(void);
/* Makes `isa` the active path; TG_ERR_ARG when the CPU cannot run it. Not while ops run. */
TgStatus tg_isa_set(TgIsa isa);
/* The active path (initialising it from the environment on first use). */
TgIsa tg_isa_active(void);

/* The FP32 multiply-add ceiling of the active path on this machine, in GFLOP/s: every thread of
 * `pool` (NULL: the caller alone) runs independent chains of the path's widest fused
 * multiply-add (a multiply and an add on generic) on registers, for about `seconds` of the
 * caller's CPU time; the sum over threads of each one's FLOPs per second of its own CPU time,
 * best of a few rounds. 2 FLOPs per lane per multiply-add. */
double tg_peak_gflops(TgPool *pool, double seconds);
/* The same for the bf16 GEMM's instruction of the active path (vdpbf16ps on avx512bf16,
 * tdpbf16ps on amx; the fp32 ceiling on a path without one): 2 FLOPs per multiply-add. */
double tg_peak_bf16_gflops(TgPool *pool, double seconds);
#endif
