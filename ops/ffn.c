/* Feed-forward blocks:
 *   SwiGLU FFN:  out = w2(silu(w1 x) * w3 x)   w1 = gate, w3 = up, w2 = down
 *   ReLU FFN:    out = w2(relu(w1 x))
 * w1, w3 (hidden, dim), w2 (dim, hidden); x (..., dim) -> out (..., dim).
 * The gate product silu(a) * b is one fused op: one pass over the hidden activations each way
 * and no silu(a) tensor kept for the backward. */
#include "lib/error.h"
#include "lib/kernels.h"
#include "ops/checks.h"
#include "ops/ops.h"

typedef struct {
    const float *a, *b;   /* (n) each */
    float *y;             /* (n), forward */
    const float *dy;      /* (n), backward */
    float *da, *db;       /* (n), NULL when that input wants no gradient */
    bool da_accumulate, db_accumulate;   /* add into da / db (else store) */
} SwigluJob;

/* The loops are kernels of the active path (lib/kernels.h): the sigmoid through a vectorised
 * exp, as a call to expf per element cost more than the rest of the FFN's elementwise work. */
static void swiglu_forward_range(void *ctx, int64_t begin, int64_t end, int thread) {
    const SwigluJob *job = ctx;
    tg_kernels()->swiglu_forward(job->a + begin, job->b + begin, job->y + begin, end - begin);
}

/* Differentiating y = silu(a) * b = a s(a) b:
 *   da += dy * b * silu'(a),  silu'(a) = s (1 + a (1 - s))
 *   db += dy * silu(a)                                      */
static void swiglu_backward_range(void *ctx, int64_t begin, int64_t end, int thread) {
    const SwigluJob *job = ctx;
    tg_kernels()->swiglu_backward(job->a + begin, job->b + begin, job->dy + begin, job->da ? job->da + begin : NULL,
                                  job->db ? job->db + begin : NULL, end - begin, job->da_accumulate,
                                  job->db_accumulate);
}

static void swiglu_backward(Tape *tape, TapeNode *node) {
    Tensor *a = node->in[0], *b = node->in[1], *y = node->out;
    SwigluJob job = {.a = a->data, .b = b->data, .dy = y->grad};
    if (tensor_wants_grad(a)) job.da = tensor_grad_for_write(tape, a, &job.da_accumulate);
    if (tensor_wants_grad(b)) job.db = tensor_grad_for_write(tape, b, &job.db_accumulate);
    pool_parallel_for(pool_if_worth(tape->pool, y->numel), y->numel, swiglu_backward_range, &job);
}

Tensor *op_swiglu(Tape *tape, Tensor *a, Tensor *b) {
    char sa[64], sb[64];
    TG_CHECK(tensor_same_shape(a, b), "swiglu: '%s' %s vs '%s' %s", a->name,
             tensor_shape_str(a, sa, sizeof sa), b->name, tensor_shape_str(b, sb, sizeof sb));
    Tensor *y = tensor_new(tape->arena, "swiglu", a->ndim, a->shape);  /* (..., hidden) */
    SwigluJob job = {.a = a->data, .b = b->data, .y = y->data};
    pool_parallel_for(pool_if_worth(tape->pool, y->numel), y->numel, swiglu_forward_range, &job);
    tape_record(tape, tg_op_name(TG_OP_SWIGLU), swiglu_backward, y, 2, (Tensor *[]){a, b});
    return y;
}

static void check_ffn_weights(const Tensor *w_in, const Tensor *w2) {
    char sw[64], s2[64];
    TG_CHECK(w_in->ndim == 2 && w2->ndim == 2 && w2->shape[0] == w_in->shape[1] &&
                 w2->shape[1] == w_in->shape[0],
             "ffn: '%s' %s and '%s' %s are not (hidden, dim) and (dim, hidden)", w_in->name,
             tensor_shape_str(w_in, sw, sizeof sw), w2->name, tensor_shape_str(w2, s2, sizeof s2));
}

/* w2 h, or residual + w2 h in one op (no separate product tensor) */
static Tensor *ffn_down(Tape *tape, Tensor *hidden, Tensor *w2, Tensor *residual) {
    return residual ? op_linear_residual(tape, hidden, w2, residual) : op_linear(tape, hidden, w2);
}

Tensor *ffn_swiglu(Tape *tape, Tensor *x, Tensor *w1, Tensor *w3, Tensor *w2, Tensor *residual, Tensor **hidden_out) {
    check_ffn_weights(w1, w2);
    char s1[64], s3[64];
    TG_CHECK(tensor_same_shape(w1, w3), "ffn_swiglu: gate '%s' %s vs up '%s' %s", w1->name,
             tensor_shape_str(w1, s1, sizeof s1), w3->name, tensor_shape_str(w3, s3, sizeof s3));
    Tensor *gate = op_linear(tape, x, w1);        /* (..., hidden) */
    Tensor *up = op_linear(tape, x, w3);          /* (..., hidden) */
    Tensor *hidden = op_swiglu(tape, gate, up);   /* (..., hidden) */
    tensor_set_name(hidden, "ffn_hidden");
    if (hidden_out) *hidden_out = hidden;
    return ffn_down(tape, hidden, w2, residual);  /* (..., dim) */
}

Tensor *ffn_relu(Tape *tape, Tensor *x, Tensor *w1, Tensor *w2, Tensor *residual, Tensor **hidden_out) {
    check_ffn_weights(w1, w2);
    Tensor *hidden = op_relu(tape, op_linear(tape, x, w1));   /* (..., hidden) */
    tensor_set_name(hidden, "ffn_hidden");
    if (hidden_out) *hidden_out = hidden;
    return ffn_down(tape, hidden, w2, residual);              /* (..., dim) */
}

/* ---- gradient checks (ops/op_list.h) ---- */

static Tensor *fwd_swiglu(Tape *t, Tensor *const *in, void *ctx) { return op_swiglu(t, in[0], in[1]); }
static Tensor *fwd_ffn_swiglu(Tape *t, Tensor *const *in, void *ctx) {
    return ffn_swiglu(t, in[0], in[1], in[2], in[3], NULL, NULL);
}
/* as the model uses it: x + w2(silu(w1 x) * w3 x) */
static Tensor *fwd_ffn_swiglu_residual(Tape *t, Tensor *const *in, void *ctx) {
    return ffn_swiglu(t, in[0], in[1], in[2], in[3], in[0], NULL);
}

/* ReLU FFN away from the kink for any seed: inputs in [0.2, 1) and row j of w1 multiplied by a
 * fixed sign (+ for even j), so hidden unit j's pre-activation is +-(x . |w1_j|), of magnitude
 * >= dim * 0.04 = 0.2 at dim 5, while a 1e-2 perturbation of x or w1 moves it by at most 1e-2.
 * Alternate hidden units are active; w1's gradient passes through the FFN and then the mul. */
static Tensor *signed_rows(Tape *t, Tensor *w1) {
    Tensor *signs = tensor_new(t->arena, "signs", w1->ndim, w1->shape);
    for (int64_t i = 0; i < signs->numel; i++) signs->data[i] = (i / w1->shape[1]) % 2 == 0 ? 1.0f : -1.0f;
    return op_mul(t, w1, signs);
}
static Tensor *fwd_ffn_relu(Tape *t, Tensor *const *in, void *ctx) {
    return ffn_relu(t, in[0], signed_rows(t, in[1]), in[2], NULL, NULL);
}
static Tensor *fwd_ffn_relu_residual(Tape *t, Tensor *const *in, void *ctx) {
    return ffn_relu(t, in[0], signed_rows(t, in[1]), in[2], in[0], NULL);
}

static const OpCheck swiglu_cases[] = {
    {"4x5", 2, {"a", "b"}, {2, 2}, {{4, 5}, {4, 5}}, 0, 0, fwd_swiglu, NULL, 0},
    {"2x3x4 on [-4, 4)", 2, {"a", "b"}, {3, 3}, {{2, 3, 4}, {2, 3, 4}}, -4.0f, 4.0f, fwd_swiglu, NULL, 0},
};
const OpCheckList swiglu_checks = OP_CHECK_LIST(swiglu_cases);

static const OpCheck ffn_swiglu_cases[] = {
    {"3 rows dim5 hidden7", 4, {"x", "w1", "w3", "w2"}, {2, 2, 2, 2}, {{3, 5}, {7, 5}, {7, 5}, {5, 7}}, 0, 0,
     fwd_ffn_swiglu, NULL, 0},
    {"2x3 rows dim5 hidden7 + residual", 4, {"x", "w1", "w3", "w2"}, {3, 2, 2, 2},
     {{2, 3, 5}, {7, 5}, {7, 5}, {5, 7}}, 0, 0, fwd_ffn_swiglu_residual, NULL, 0},
};
const OpCheckList ffn_swiglu_checks = OP_CHECK_LIST(ffn_swiglu_cases);

static const OpCheck ffn_relu_cases[] = {
    {"3 rows dim5 hidden7", 3, {"x", "w1", "w2"}, {2, 2, 2}, {{3, 5}, {7, 5}, {5, 7}}, 0.2f, 1.0f, fwd_ffn_relu,
     NULL, 0},
    {"2x3 rows dim5 hidden6 + residual", 3, {"x", "w1", "w2"}, {3, 2, 2}, {{2, 3, 5}, {6, 5}, {5, 6}}, 0.2f, 1.0f,
     fwd_ffn_relu_residual, NULL, 0},
};
const OpCheckList ffn_relu_checks = OP_CHECK_LIST(ffn_relu_cases);
