/* Gradient-check cases of linear and the elementwise ops. */
#include "checks.h"
#include "ops.h"

static Tensor *fwd_linear(Tape *t, Tensor *const *in, void *ctx) { return op_linear(t, in[0], in[1]); }
static Tensor *fwd_add(Tape *t, Tensor *const *in, void *ctx) { return op_add(t, in[0], in[1]); }
static Tensor *fwd_mul(Tape *t, Tensor *const *in, void *ctx) { return op_mul(t, in[0], in[1]); }
static Tensor *fwd_scale(Tape *t, Tensor *const *in, void *ctx) { return op_scale(t, in[0], -1.7f); }
static Tensor *fwd_sum(Tape *t, Tensor *const *in, void *ctx) { return op_sum(t, in[0]); }
static Tensor *fwd_mean(Tape *t, Tensor *const *in, void *ctx) { return op_mean(t, in[0]); }
static Tensor *fwd_linear_residual(Tape *t, Tensor *const *in, void *ctx) {
    return op_linear_residual(t, in[0], in[1], in[2]);
}
/* x used twice and a diamond: mean(linear(x, w) * linear(x, w) + x W^T) */
static Tensor *fwd_composite(Tape *t, Tensor *const *in, void *ctx) {
    Tensor *y = op_linear(t, in[0], in[1]);
    Tensor *z = op_linear(t, in[0], in[2]);
    return op_add(t, op_mul(t, y, z), op_scale(t, y, 0.5f));
}

static const OpCheck cases[] = {
    {"linear", "3x5x7", 2, {"x", "w"}, {2, 2}, {{3, 5}, {7, 5}}, 0, 0, fwd_linear, NULL, 0},
    {"linear", "1x1x1", 2, {"x", "w"}, {2, 2}, {{1, 1}, {1, 1}}, 0, 0, fwd_linear, NULL, 0},
    {"linear", "2x3x4x6 (3-d x)", 2, {"x", "w"}, {3, 2}, {{2, 3, 4}, {6, 4}}, 0, 0, fwd_linear, NULL, 0},
    {"linear_residual", "3x5x7", 3, {"x", "w", "r"}, {2, 2, 2}, {{3, 5}, {7, 5}, {3, 7}}, 0, 0,
     fwd_linear_residual, NULL, 0},
    {"linear_residual", "2x3x4x6 (3-d x)", 3, {"x", "w", "r"}, {3, 2, 3}, {{2, 3, 4}, {6, 4}, {2, 3, 6}}, 0, 0,
     fwd_linear_residual, NULL, 0},
    {"add", "4x5", 2, {"a", "b"}, {2, 2}, {{4, 5}, {4, 5}}, 0, 0, fwd_add, NULL, 0},
    {"mul", "4x5", 2, {"a", "b"}, {2, 2}, {{4, 5}, {4, 5}}, 0, 0, fwd_mul, NULL, 0},
    {"scale", "3x7", 1, {"a"}, {2}, {{3, 7}}, 0, 0, fwd_scale, NULL, 0},
    {"sum", "2x3x4", 1, {"a"}, {3}, {{2, 3, 4}}, 0, 0, fwd_sum, NULL, 0},
    {"mean", "5x3", 1, {"a"}, {2}, {{5, 3}}, 0, 0, fwd_mean, NULL, 0},
    {"composite", "x twice, diamond", 3, {"x", "w1", "w2"}, {2, 2, 2}, {{3, 4}, {5, 4}, {5, 4}}, 0, 0,
     fwd_composite, NULL, 0},
};

const OpCheckList checks_basic = {cases, (int)(sizeof cases / sizeof cases[0])};
