/* Elementwise activations: relu, silu, gelu (erf form), sigmoid.  x (any shape) -> y (same).
 *
 * Each activation is a value y = f(x) and a slope f'(x) (given x and y, whichever is cheaper);
 * one forward and one backward loop serve all four:
 *   forward:  y[i]   = f(x[i])
 *   backward: dx[i] += dy[i] * f'(x[i])
 * Elements are independent, so splitting them over the pool cannot change any result. */
#include <math.h>

#include "ops/checks.h"
#include "tapegrad/ops.h"

static const float INV_SQRT_2 = 0.70710678118654752f;    /* 1 / sqrt(2) */
static const float INV_SQRT_2PI = 0.39894228040143268f;  /* 1 / sqrt(2 pi) */

/* ---- sigmoid: s = 1 / (1 + e^-x);  ds/dx = s (1 - s) ---- */
float tg_act_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static float sigmoid_slope(float x, float y) { return y * (1.0f - y); }

/* ---- relu: y = max(x, 0);  dy/dx = [x > 0] (0 at the kink, as PyTorch) ---- */
static float relu_value(float x) { return x > 0.0f ? x : 0.0f; }
static float relu_slope(float x, float y) { return x > 0.0f ? 1.0f : 0.0f; }

/* ---- silu: y = x s(x);  dy/dx = s + x s (1 - s) = s (1 + x (1 - s)) ---- */
float tg_act_silu(float x) { return x * tg_act_sigmoid(x); }
static float silu_slope(float x, float y) {
    float s = tg_act_sigmoid(x);
    return s * (1.0f + x * (1.0f - s));
}

/* ---- gelu: y = x Phi(x), Phi(x) = 0.5 (1 + erf(x / sqrt 2));
 *      dy/dx = Phi(x) + x phi(x), phi(x) = e^(-x^2/2) / sqrt(2 pi) ---- */
float tg_act_gelu(float x) { return 0.5f * x * (1.0f + erff(x * INV_SQRT_2)); }
static float gelu_slope(float x, float y) {
    float cdf = 0.5f * (1.0f + erff(x * INV_SQRT_2));
    float pdf = INV_SQRT_2PI * expf(-0.5f * x * x);
    return cdf + x * pdf;
}

typedef enum { ACT_RELU, ACT_SILU, ACT_GELU, ACT_SIGMOID } ActivationKind;
static const TgOp activation_ops[] = {TG_OP_RELU, TG_OP_SILU, TG_OP_GELU, TG_OP_SIGMOID};

static inline float activation_value(ActivationKind kind, float x) {
    switch (kind) {
    case ACT_RELU: return relu_value(x);
    case ACT_SILU: return tg_act_silu(x);
    case ACT_GELU: return tg_act_gelu(x);
    case ACT_SIGMOID: return tg_act_sigmoid(x);
    }
    return 0.0f;
}

static inline float activation_slope(ActivationKind kind, float x, float y) {
    switch (kind) {
    case ACT_RELU: return relu_slope(x, y);
    case ACT_SILU: return silu_slope(x, y);
    case ACT_GELU: return gelu_slope(x, y);
    case ACT_SIGMOID: return sigmoid_slope(x, y);
    }
    return 0.0f;
}

typedef struct {
    ActivationKind kind;
    const float *x, *y;  /* (n) */
    const float *dy;     /* (n), backward only */
    float *out;          /* (n): y in the forward, dx in the backward */
    bool accumulate;     /* backward: add into dx (else store) */
} ActivationJob;

static void activation_forward_range(void *ctx, int64_t begin, int64_t end, int thread) {
    const ActivationJob *job = ctx;
    for (int64_t i = begin; i < end; i++) job->out[i] = activation_value(job->kind, job->x[i]);
}

static void activation_backward_range(void *ctx, int64_t begin, int64_t end, int thread) {
    const ActivationJob *job = ctx;
    for (int64_t i = begin; i < end; i++)
        job->out[i] = (job->accumulate ? job->out[i] : 0.0f) +
                      job->dy[i] * activation_slope(job->kind, job->x[i], job->y[i]);
}

/* dx += dy * f'(x), differentiating y = f(x) */
static void activation_backward(TgTape *tape, TgTapeNode *node) {
    TgTensor *x = node->in[0], *y = node->out;
    if (!tg_tensor_wants_grad(x)) return;
    ActivationJob job = {(ActivationKind)node->iparam[0], x->data, y->data, y->grad, NULL, false};
    job.out = tg_tensor_grad_for_write(tape, x, &job.accumulate);
    tg_pool_parallel_for(tg_pool_if_worth(tape->pool, x->numel), x->numel, activation_backward_range, &job);
}

static TgTensor *activation_forward(TgTape *tape, TgTensor *x, ActivationKind kind) {
    const char *name = tg_op_name(activation_ops[kind]);
    TgTensor *y = tg_tensor_new(tape->arena, name, x->ndim, x->shape);  /* same shape as x */
    ActivationJob job = {kind, x->data, NULL, NULL, y->data, false};
    tg_pool_parallel_for(tg_pool_if_worth(tape->pool, x->numel), x->numel, activation_forward_range, &job);
    TgTapeNode *node = tg_tape_record(tape, name, activation_backward, y, 1, &x);
    if (node) {
        node->iparam[0] = kind;
        node->reads_out = true;   /* the slopes use y (sigmoid(x) for silu and sigmoid) */
    }
    return y;
}

TgTensor *tg_relu(TgTape *tape, TgTensor *x) { return activation_forward(tape, x, ACT_RELU); }
TgTensor *tg_silu(TgTape *tape, TgTensor *x) { return activation_forward(tape, x, ACT_SILU); }
TgTensor *tg_gelu(TgTape *tape, TgTensor *x) { return activation_forward(tape, x, ACT_GELU); }
TgTensor *tg_sigmoid(TgTape *tape, TgTensor *x) { return activation_forward(tape, x, ACT_SIGMOID); }

/* ---- gradient checks (tapegrad/op_list.h) ----
 * Inputs are uniform in [lo, hi) from the run's seed, so every case must pass for any seed: the
 * ReLU cases keep every pre-activation at least 0.1 away from the kink by construction. */

static TgTensor *fwd_relu(TgTape *t, TgTensor *const *in, void *ctx) { return tg_relu(t, in[0]); }
static TgTensor *fwd_silu(TgTape *t, TgTensor *const *in, void *ctx) { return tg_silu(t, in[0]); }
static TgTensor *fwd_gelu(TgTape *t, TgTensor *const *in, void *ctx) { return tg_gelu(t, in[0]); }
static TgTensor *fwd_sigmoid(TgTape *t, TgTensor *const *in, void *ctx) { return tg_sigmoid(t, in[0]); }

/* relu on both sides of 0: x in [0.1, 1) times a fixed +-1 pattern (every third element +1), so
 * |pre-activation| >= 0.1 while the checker's perturbation is 1e-2. */
static TgTensor *fwd_relu_mixed_signs(TgTape *t, TgTensor *const *in, void *ctx) {
    TgTensor *signs = tg_tensor_new(t->arena, "signs", in[0]->ndim, in[0]->shape);
    for (int64_t i = 0; i < signs->numel; i++) signs->data[i] = i % 3 == 0 ? 1.0f : -1.0f;
    return tg_relu(t, tg_mul(t, in[0], signs));
}

static const TgOpCheck relu_cases[] = {
    {.variant = "4x5 on [0.1, 1)", .inputs = {{"x", {4, 5}}}, .forward = fwd_relu, .lo = 0.1f, .hi = 1.0f},
    {.variant = "4x5 on [-1, -0.1)", .inputs = {{"x", {4, 5}}}, .forward = fwd_relu, .lo = -1.0f, .hi = -0.1f},
    {.variant = "3x7 mixed signs, |x|>=0.1", .inputs = {{"x", {3, 7}}}, .forward = fwd_relu_mixed_signs, .lo = 0.1f,
     .hi = 1.0f},
};
static const TgOpCheck silu_cases[] = {
    {.variant = "4x5", .inputs = {{"x", {4, 5}}}, .forward = fwd_silu},
    {.variant = "2x3x4 on [-4, 4)", .inputs = {{"x", {2, 3, 4}}}, .forward = fwd_silu, .lo = -4.0f, .hi = 4.0f},
};
static const TgOpCheck gelu_cases[] = {
    {.variant = "4x5", .inputs = {{"x", {4, 5}}}, .forward = fwd_gelu},
    {.variant = "2x3x4 on [-4, 4)", .inputs = {{"x", {2, 3, 4}}}, .forward = fwd_gelu, .lo = -4.0f, .hi = 4.0f},
};
static const TgOpCheck sigmoid_cases[] = {
    {.variant = "4x5", .inputs = {{"x", {4, 5}}}, .forward = fwd_sigmoid},
    {.variant = "2x3x4 on [-4, 4)", .inputs = {{"x", {2, 3, 4}}}, .forward = fwd_sigmoid, .lo = -4.0f, .hi = 4.0f},
};
const TgOpCheckList tg_relu_checks = TG_OP_CHECK_LIST(relu_cases);
const TgOpCheckList tg_silu_checks = TG_OP_CHECK_LIST(silu_cases);
const TgOpCheckList tg_gelu_checks = TG_OP_CHECK_LIST(gelu_cases);
const TgOpCheckList tg_sigmoid_checks = TG_OP_CHECK_LIST(sigmoid_cases);
