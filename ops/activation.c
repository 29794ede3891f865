/* Elementwise activations: relu, silu, gelu (erf form), sigmoid.  x (any shape) -> y (same).
 *
 * Each activation is a value y = f(x) and a slope f'(x) (given x and y, whichever is cheaper);
 * one forward and one backward loop serve all four:
 *   forward:  y[i]   = f(x[i])
 *   backward: dx[i] += dy[i] * f'(x[i])
 * Elements are independent, so splitting them over the pool cannot change any result. */
#include <math.h>

#include "ops.h"

/* Below this many elements a pool wake-up costs more than the loop. */
enum { ACTIVATION_MIN_PARALLEL = 1 << 15 };

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
static const char *const activation_names[] = {"relu", "silu", "gelu", "sigmoid"};

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

static Pool *pool_if_worth_it(Tape *tape, int64_t n) {
    return n >= ACTIVATION_MIN_PARALLEL ? tape->pool : NULL;
}

/* dx += dy * f'(x), differentiating y = f(x) */
static void activation_backward(Tape *tape, TapeNode *node) {
    Tensor *x = node->in[0], *y = node->out;
    if (!tensor_wants_grad(x)) return;
    ActivationJob job = {(ActivationKind)node->iparam[0], x->data, y->data, y->grad, NULL, false};
    job.out = tensor_grad_for_write(tape, x, &job.accumulate);
    pool_parallel_for(pool_if_worth_it(tape, x->numel), x->numel, activation_backward_range, &job);
}

static Tensor *activation_forward(Tape *tape, Tensor *x, ActivationKind kind) {
    const char *name = activation_names[kind];
    Tensor *y = tensor_new(tape->arena, name, x->ndim, x->shape);  /* same shape as x */
    ActivationJob job = {kind, x->data, NULL, NULL, y->data, false};
    pool_parallel_for(pool_if_worth_it(tape, x->numel), x->numel, activation_forward_range, &job);
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
