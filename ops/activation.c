/* Elementwise activations: relu, silu, gelu (erf form), sigmoid.  x (any shape) -> y (same).
 *
 * Each activation is a value y = f(x) and a slope f'(x) (given x and y, whichever is cheaper);
 * one forward and one backward loop serve all four:
 *   forward:  y[i]   = f(x[i])
 *   backward: dx[i] += dy[i] * f'(x[i])
 * Elements are independent, so splitting them over the pool cannot change any result. */
#include <math.h>

#include "ops/checks.h"
#include "ops/ops.h"

static const float INV_SQRT_2 = 0.70710678118654752f;    /* 1 / sqrt(2) */
static const float INV_SQRT_2PI = 0.39894228040143268f;  /* 1 / sqrt(2 pi) */

/* ---- sigmoid: s = 1 / (1 + e^-x);  ds/dx = s (1 - s) ---- */
float act_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static float sigmoid_slope(float x, float y) { return y * (1.0f - y); }

/* ---- relu: y = max(x, 0);  dy/dx = [x > 0] (0 at the kink, as PyTorch) ---- */
static float relu_value(float x) { return x > 0.0f ? x : 0.0f; }
static float relu_slope(float x, float y) { return x > 0.0f ? 1.0f : 0.0f; }

/* ---- silu: y = x s(x);  dy/dx = s + x s (1 - s) = s (1 + x (1 - s)) ---- */
float act_silu(float x) { return x * act_sigmoid(x); }
static float silu_slope(float x, float y) {
    float s = act_sigmoid(x);
    return s * (1.0f + x * (1.0f - s));
}

/* ---- gelu: y = x Phi(x), Phi(x) = 0.5 (1 + erf(x / sqrt 2));
 *      dy/dx = Phi(x) + x phi(x), phi(x) = e^(-x^2/2) / sqrt(2 pi) ---- */
float act_gelu(float x) { return 0.5f * x * (1.0f + erff(x * INV_SQRT_2)); }
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
    case ACT_SILU: return act_silu(x);
    case ACT_GELU: return act_gelu(x);
    case ACT_SIGMOID: return act_sigmoid(x);
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
static void activation_backward(Tape *tape, TapeNode *node) {
    Tensor *x = node->in[0], *y = node->out;
    if (!tensor_wants_grad(x)) return;
    ActivationJob job = {(ActivationKind)node->iparam[0], x->data, y->data, y->grad, NULL, false};
    job.out = tensor_grad_for_write(tape, x, &job.accumulate);
    pool_parallel_for(pool_if_worth(tape->pool, x->numel), x->numel, activation_backward_range, &job);
}

static Tensor *activation_forward(Tape *tape, Tensor *x, ActivationKind kind) {
    const char *name = tg_op_name(activation_ops[kind]);
    Tensor *y = tensor_new(tape->arena, name, x->ndim, x->shape);  /* same shape as x */
    ActivationJob job = {kind, x->data, NULL, NULL, y->data, false};
    pool_parallel_for(pool_if_worth(tape->pool, x->numel), x->numel, activation_forward_range, &job);
    TapeNode *node = tape_record(tape, name, activation_backward, y, 1, &x);
    if (node) {
        node->iparam[0] = kind;
        node->reads_out = true;   /* the slopes use y (sigmoid(x) for silu and sigmoid) */
    }
    return y;
}

Tensor *op_relu(Tape *tape, Tensor *x) { return activation_forward(tape, x, ACT_RELU); }
Tensor *op_silu(Tape *tape, Tensor *x) { return activation_forward(tape, x, ACT_SILU); }
Tensor *op_gelu(Tape *tape, Tensor *x) { return activation_forward(tape, x, ACT_GELU); }
Tensor *op_sigmoid(Tape *tape, Tensor *x) { return activation_forward(tape, x, ACT_SIGMOID); }

/* ---- gradient checks (ops/op_list.h) ----
 * Inputs are uniform in [lo, hi) from the run's seed, so every case must pass for any seed: the
 * ReLU cases keep every pre-activation at least 0.1 away from the kink by construction. */

static Tensor *fwd_relu(Tape *t, Tensor *const *in, void *ctx) { return op_relu(t, in[0]); }
static Tensor *fwd_silu(Tape *t, Tensor *const *in, void *ctx) { return op_silu(t, in[0]); }
static Tensor *fwd_gelu(Tape *t, Tensor *const *in, void *ctx) { return op_gelu(t, in[0]); }
static Tensor *fwd_sigmoid(Tape *t, Tensor *const *in, void *ctx) { return op_sigmoid(t, in[0]); }

/* relu on both sides of 0: x in [0.1, 1) times a fixed +-1 pattern (every third element +1), so
 * |pre-activation| >= 0.1 while the checker's perturbation is 1e-2. */
static Tensor *fwd_relu_mixed_signs(Tape *t, Tensor *const *in, void *ctx) {
    Tensor *signs = tensor_new(t->arena, "signs", in[0]->ndim, in[0]->shape);
    for (int64_t i = 0; i < signs->numel; i++) signs->data[i] = i % 3 == 0 ? 1.0f : -1.0f;
    return op_relu(t, op_mul(t, in[0], signs));
}

static const OpCheck relu_cases[] = {
    {"4x5 on [0.1, 1)", 1, {"x"}, {2}, {{4, 5}}, 0.1f, 1.0f, fwd_relu, NULL, 0},
    {"4x5 on [-1, -0.1)", 1, {"x"}, {2}, {{4, 5}}, -1.0f, -0.1f, fwd_relu, NULL, 0},
    {"3x7 mixed signs, |x|>=0.1", 1, {"x"}, {2}, {{3, 7}}, 0.1f, 1.0f, fwd_relu_mixed_signs, NULL, 0},
};
static const OpCheck silu_cases[] = {
    {"4x5", 1, {"x"}, {2}, {{4, 5}}, 0, 0, fwd_silu, NULL, 0},
    {"2x3x4 on [-4, 4)", 1, {"x"}, {3}, {{2, 3, 4}}, -4.0f, 4.0f, fwd_silu, NULL, 0},
};
static const OpCheck gelu_cases[] = {
    {"4x5", 1, {"x"}, {2}, {{4, 5}}, 0, 0, fwd_gelu, NULL, 0},
    {"2x3x4 on [-4, 4)", 1, {"x"}, {3}, {{2, 3, 4}}, -4.0f, 4.0f, fwd_gelu, NULL, 0},
};
static const OpCheck sigmoid_cases[] = {
    {"4x5", 1, {"x"}, {2}, {{4, 5}}, 0, 0, fwd_sigmoid, NULL, 0},
    {"2x3x4 on [-4, 4)", 1, {"x"}, {3}, {{2, 3, 4}}, -4.0f, 4.0f, fwd_sigmoid, NULL, 0},
};
const OpCheckList relu_checks = OP_CHECK_LIST(relu_cases);
const OpCheckList silu_checks = OP_CHECK_LIST(silu_cases);
const OpCheckList gelu_checks = OP_CHECK_LIST(gelu_cases);
const OpCheckList sigmoid_checks = OP_CHECK_LIST(sigmoid_cases);
