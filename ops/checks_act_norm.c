/* Gradient-check cases of the activations, RMSNorm, RoPE, SwiGLU and the two FFNs.
 * Inputs are uniform in [lo, hi) from the run's seed, so every case must pass for any seed:
 * the ReLU cases keep every pre-activation at least 0.1 away from the kink by construction. */
#include <stdbool.h>

#include "checks.h"
#include "ops.h"

static Tensor *fwd_relu(Tape *t, Tensor *const *in, void *ctx) { return op_relu(t, in[0]); }
static Tensor *fwd_silu(Tape *t, Tensor *const *in, void *ctx) { return op_silu(t, in[0]); }
static Tensor *fwd_gelu(Tape *t, Tensor *const *in, void *ctx) { return op_gelu(t, in[0]); }
static Tensor *fwd_sigmoid(Tape *t, Tensor *const *in, void *ctx) { return op_sigmoid(t, in[0]); }
static Tensor *fwd_rmsnorm(Tape *t, Tensor *const *in, void *ctx) {
    return op_rmsnorm(t, in[0], in[1], 1e-5f);
}
/* eps large enough to shape y at d = 1, where y = x / sqrt(x^2 + eps) * g */
static Tensor *fwd_rmsnorm_eps_0_1(Tape *t, Tensor *const *in, void *ctx) {
    return op_rmsnorm(t, in[0], in[1], 0.1f);
}
static Tensor *fwd_swiglu(Tape *t, Tensor *const *in, void *ctx) { return op_swiglu(t, in[0], in[1]); }
static Tensor *fwd_ffn_swiglu(Tape *t, Tensor *const *in, void *ctx) {
    return ffn_swiglu(t, in[0], in[1], in[2], in[3], NULL);
}

/* A constant (no grad) tensor shaped like `like` holding +1 or -1 by `row_len`-long blocks:
 * block k gets +1 when k % period == 0. */
static Tensor *sign_pattern(Tape *t, const Tensor *like, int64_t row_len, int64_t period) {
    Tensor *signs = tensor_new(t->arena, "signs", like->ndim, like->shape);
    for (int64_t i = 0; i < signs->numel; i++) signs->data[i] = (i / row_len) % period == 0 ? 1.0f : -1.0f;
    return signs;
}

/* relu on both sides of 0: x in [0.1, 1) times a fixed +-1 pattern, so |pre-activation| >= 0.1
 * while the checker's perturbation is 1e-2. */
static Tensor *fwd_relu_mixed_signs(Tape *t, Tensor *const *in, void *ctx) {
    return op_relu(t, op_mul(t, in[0], sign_pattern(t, in[0], 1, 3)));
}

/* ReLU FFN away from the kink for any seed: inputs in [0.2, 1) and row j of w1 multiplied by a
 * fixed sign, so hidden unit j's pre-activation is +-(x . |w1_j|), of magnitude >= dim * 0.04
 * = 0.2 at dim 5, while a 1e-2 perturbation of x or w1 moves it by at most 1e-2. Alternate
 * hidden units are active; w1's gradient passes through ffn_relu's w1 and then the mul. */
static Tensor *fwd_ffn_relu(Tape *t, Tensor *const *in, void *ctx) {
    Tensor *w1 = in[1];  /* (hidden, dim) */
    Tensor *w1_signed = op_mul(t, w1, sign_pattern(t, w1, w1->shape[1], 2));
    return ffn_relu(t, in[0], w1_signed, in[2], NULL);
}

/* RoPE: the table is built on first use and kept for the process (a few hundred bytes). */
typedef struct {
    int64_t heads, head_dim, pos_offset;
    double theta;
    RopeTable table;
    bool ready;
} RopeCase;

static Tensor *fwd_rope(Tape *t, Tensor *const *in, void *ctx) {
    RopeCase *c = ctx;
    if (!c->ready) {
        rope_table_init(&c->table, 16, c->head_dim, c->theta);
        c->ready = true;
    }
    return op_rope(t, in[0], c->heads, &c->table, c->pos_offset);
}
/* in place over a copy: the checker perturbs its inputs and must find them unchanged */
static Tensor *fwd_rope_inplace(Tape *t, Tensor *const *in, void *ctx) {
    RopeCase *c = ctx;
    fwd_rope(t, in, ctx);   /* builds the table */
    return op_rope_inplace(t, op_scale(t, in[0], 1.0f), c->heads, &c->table, c->pos_offset);
}

/* theta 1e6 (the model's) turns only the first pairs visibly at positions < 16; theta 10 turns
 * every pair by a non-trivial angle. */
static RopeCase rope_pos0_theta1e6 = {.heads = 2, .head_dim = 8, .pos_offset = 0, .theta = 1e6};
static RopeCase rope_pos5_theta1e6 = {.heads = 2, .head_dim = 8, .pos_offset = 5, .theta = 1e6};
static RopeCase rope_pos5_theta10 = {.heads = 2, .head_dim = 8, .pos_offset = 5, .theta = 10};
static RopeCase rope_pos9_theta10 = {.heads = 2, .head_dim = 8, .pos_offset = 9, .theta = 10};
static RopeCase rope_hd2_theta10 = {.heads = 3, .head_dim = 2, .pos_offset = 2, .theta = 10};

static const OpCheck cases[] = {
    {"relu", "4x5 on [0.1, 1)", 1, {"x"}, {2}, {{4, 5}}, 0.1f, 1.0f, fwd_relu, NULL, 0},
    {"relu", "4x5 on [-1, -0.1)", 1, {"x"}, {2}, {{4, 5}}, -1.0f, -0.1f, fwd_relu, NULL, 0},
    {"relu", "3x7 mixed signs, |x|>=0.1", 1, {"x"}, {2}, {{3, 7}}, 0.1f, 1.0f, fwd_relu_mixed_signs, NULL, 0},
    {"silu", "4x5", 1, {"x"}, {2}, {{4, 5}}, 0, 0, fwd_silu, NULL, 0},
    {"silu", "2x3x4 on [-4, 4)", 1, {"x"}, {3}, {{2, 3, 4}}, -4.0f, 4.0f, fwd_silu, NULL, 0},
    {"gelu", "4x5", 1, {"x"}, {2}, {{4, 5}}, 0, 0, fwd_gelu, NULL, 0},
    {"gelu", "2x3x4 on [-4, 4)", 1, {"x"}, {3}, {{2, 3, 4}}, -4.0f, 4.0f, fwd_gelu, NULL, 0},
    {"sigmoid", "4x5", 1, {"x"}, {2}, {{4, 5}}, 0, 0, fwd_sigmoid, NULL, 0},
    {"sigmoid", "2x3x4 on [-4, 4)", 1, {"x"}, {3}, {{2, 3, 4}}, -4.0f, 4.0f, fwd_sigmoid, NULL, 0},
    {"rmsnorm", "3x7", 2, {"x", "g"}, {2, 1}, {{3, 7}, {7}}, 0, 0, fwd_rmsnorm, NULL, 0},
    /* d = 1 with eps 0.1: y = x / sqrt(x^2 + eps) * g has a real slope in x. (At eps 1e-5,
     * y ~ sign(x) g and dy/dx ~ eps / |x|^3 drowns in float noise against the checker's 1e-3
     * floor: up to 6e-3 relative error over 500 seeds, too near the 1e-2 tolerance.) */
    {"rmsnorm", "3x1 eps 0.1", 2, {"x", "g"}, {2, 1}, {{3, 1}, {1}}, 0, 0, fwd_rmsnorm_eps_0_1, NULL, 0},
    {"rmsnorm", "2x3x8 (3-d x)", 2, {"x", "g"}, {3, 1}, {{2, 3, 8}, {8}}, 0, 0, fwd_rmsnorm, NULL, 0},
    {"rope", "B2 T7 H2 hd8 pos0 th1e6", 1, {"x"}, {3}, {{2, 7, 16}}, 0, 0, fwd_rope, &rope_pos0_theta1e6, 0},
    {"rope", "B2 T7 H2 hd8 pos5 th1e6", 1, {"x"}, {3}, {{2, 7, 16}}, 0, 0, fwd_rope, &rope_pos5_theta1e6, 0},
    {"rope", "B2 T7 H2 hd8 pos5 th10", 1, {"x"}, {3}, {{2, 7, 16}}, 0, 0, fwd_rope, &rope_pos5_theta10, 0},
    {"rope", "B2 T1 H2 hd8 pos9 th10", 1, {"x"}, {3}, {{2, 1, 16}}, 0, 0, fwd_rope, &rope_pos9_theta10, 0},
    {"rope", "in place B2 T7 H2 hd8 pos5", 1, {"x"}, {3}, {{2, 7, 16}}, 0, 0, fwd_rope_inplace, &rope_pos5_theta1e6, 0},
    {"rope", "B1 T3 H3 hd2 pos2 th10", 1, {"x"}, {3}, {{1, 3, 6}}, 0, 0, fwd_rope, &rope_hd2_theta10, 0},
    {"swiglu", "4x5", 2, {"a", "b"}, {2, 2}, {{4, 5}, {4, 5}}, 0, 0, fwd_swiglu, NULL, 0},
    {"swiglu", "2x3x4 on [-4, 4)", 2, {"a", "b"}, {3, 3}, {{2, 3, 4}, {2, 3, 4}}, -4.0f, 4.0f,
     fwd_swiglu, NULL, 0},
    {"ffn_swiglu", "3 rows dim5 hidden7", 4, {"x", "w1", "w3", "w2"}, {2, 2, 2, 2},
     {{3, 5}, {7, 5}, {7, 5}, {5, 7}}, 0, 0, fwd_ffn_swiglu, NULL, 0},
    {"ffn_swiglu", "2x3 rows dim5 hidden7", 4, {"x", "w1", "w3", "w2"}, {3, 2, 2, 2},
     {{2, 3, 5}, {7, 5}, {7, 5}, {5, 7}}, 0, 0, fwd_ffn_swiglu, NULL, 0},
    {"ffn_relu", "3 rows dim5 hidden7", 3, {"x", "w1", "w2"}, {2, 2, 2},
     {{3, 5}, {7, 5}, {5, 7}}, 0.2f, 1.0f, fwd_ffn_relu, NULL, 0},
    {"ffn_relu", "2x3 rows dim5 hidden6", 3, {"x", "w1", "w2"}, {3, 2, 2},
     {{2, 3, 5}, {6, 5}, {5, 6}}, 0.2f, 1.0f, fwd_ffn_relu, NULL, 0},
};

const OpCheckList checks_act_norm = {cases, (int)(sizeof cases / sizeof cases[0])};
