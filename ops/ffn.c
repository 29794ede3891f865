/* Feed-forward blocks, composed in one place (tg_ffn):
 *   SwiGLU FFN:  out = w2(silu(w1 x) * w3 x)   w1 = gate, w3 = up, w2 = down
 *   ReLU FFN:    out = w2(relu(w1 x))          (no up projection)
 * w1, w3 (hidden, dim), w2 (dim, hidden); x (..., dim) -> out (..., dim).
 * The gate product silu(a) * b is one fused op: one pass over the hidden activations each way
 * and no silu(a) tensor kept for the backward. */
#include "tapegrad/error.h"
#include "lib/kernels.h"
#include "ops/checks.h"
#include "tapegrad/ops.h"

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

static void swiglu_backward(TgTape *tape, TgTapeNode *node) {
    TgTensor *a = node->in[0], *b = node->in[1], *y = node->out;
    SwigluJob job = {.a = a->data, .b = b->data, .dy = y->grad};
    if (tg_tensor_wants_grad(a)) job.da = tg_tensor_grad_for_write(tape, a, &job.da_accumulate);
    if (tg_tensor_wants_grad(b)) job.db = tg_tensor_grad_for_write(tape, b, &job.db_accumulate);
    tg_pool_parallel_for(tg_pool_if_worth(tape->pool, y->numel), y->numel, swiglu_backward_range, &job);
}

TgTensor *tg_swiglu(TgTape *tape, TgTensor *a, TgTensor *b) {
    char sa[64], sb[64];
    TG_CHECK(tg_tensor_same_shape(a, b), "swiglu: '%s' %s vs '%s' %s", a->name,
             tg_tensor_shape_str(a, sa, sizeof sa), b->name, tg_tensor_shape_str(b, sb, sizeof sb));
    TgTensor *y = tg_tensor_new(tape->arena, "swiglu", a->ndim, a->shape);  /* (..., hidden) */
    SwigluJob job = {.a = a->data, .b = b->data, .y = y->data};
    tg_pool_parallel_for(tg_pool_if_worth(tape->pool, y->numel), y->numel, swiglu_forward_range, &job);
    tg_tape_record(tape, tg_op_name(TG_OP_SWIGLU), swiglu_backward, y, 2, (TgTensor *[]){a, b});
    return y;
}

static void check_ffn_weights(const TgTensor *w_in, const TgTensor *w2) {
    char sw[64], s2[64];
    TG_CHECK(w_in->ndim == 2 && w2->ndim == 2 && w2->shape[0] == w_in->shape[1] &&
                 w2->shape[1] == w_in->shape[0],
             "ffn: '%s' %s and '%s' %s are not (hidden, dim) and (dim, hidden)", w_in->name,
             tg_tensor_shape_str(w_in, sw, sizeof sw), w2->name, tg_tensor_shape_str(w2, s2, sizeof s2));
}

/* x W^T, or residual + x W^T in one op (no separate product tensor): each product of an FFN
 * unless its caller takes them another way */
static TgTensor *plain_product(TgTape *tape, TgTensor *x, TgTensor *w, TgTensor *residual) {
    return residual ? tg_linear_residual(tape, x, w, residual) : tg_linear(tape, x, w);
}

static TgTensor *product(const TgFfn *f, TgTape *tape, TgFfnProduct which, TgTensor *x, TgTensor *w,
                         TgTensor *residual) {
    return f->project ? f->project(f->ctx, tape, which, x, w, residual) : plain_product(tape, x, w, residual);
}

TgTensor *tg_ffn(TgTape *tape, const TgFfn *f, TgTensor *x, TgTensor *residual, TgTensor **hidden_out) {
    check_ffn_weights(f->w1, f->w2);
    char s1[64], s3[64];
    TG_CHECK(!f->w3 || tg_tensor_same_shape(f->w1, f->w3), "tg_ffn: gate '%s' %s vs up '%s' %s", f->w1->name,
             tg_tensor_shape_str(f->w1, s1, sizeof s1), f->w3 ? f->w3->name : "",
             f->w3 ? tg_tensor_shape_str(f->w3, s3, sizeof s3) : "");
    TgTensor *gate = product(f, tape, TG_FFN_GATE, x, f->w1, NULL);                               /* (..., hidden) */
    TgTensor *hidden = f->w3 ? tg_swiglu(tape, gate, product(f, tape, TG_FFN_UP, x, f->w3, NULL)) /* (..., hidden) */
                             : tg_relu(tape, gate);
    tg_tensor_set_name(hidden, "ffn_hidden");
    if (hidden_out) *hidden_out = hidden;
    return product(f, tape, TG_FFN_DOWN, hidden, f->w2, residual); /* (..., dim) */
}

TgTensor *tg_ffn_swiglu(TgTape *tape, TgTensor *x, TgTensor *w1, TgTensor *w3, TgTensor *w2, TgTensor *residual,
                        TgTensor **hidden_out) {
    TG_CHECK(w3, "tg_ffn_swiglu: no up projection");
    return tg_ffn(tape, &(TgFfn){.w1 = w1, .w3 = w3, .w2 = w2}, x, residual, hidden_out);
}

TgTensor *tg_ffn_relu(TgTape *tape, TgTensor *x, TgTensor *w1, TgTensor *w2, TgTensor *residual, TgTensor **hidden_out) {
    return tg_ffn(tape, &(TgFfn){.w1 = w1, .w2 = w2}, x, residual, hidden_out);
}

/* ---- gradient checks (tapegrad/op_list.h) ---- */

static TgTensor *fwd_swiglu(TgTape *t, TgTensor *const *in, void *ctx) { return tg_swiglu(t, in[0], in[1]); }
static TgTensor *fwd_ffn_swiglu(TgTape *t, TgTensor *const *in, void *ctx) {
    return tg_ffn_swiglu(t, in[0], in[1], in[2], in[3], NULL, NULL);
}
/* as the model uses it: x + w2(silu(w1 x) * w3 x) */
static TgTensor *fwd_ffn_swiglu_residual(TgTape *t, TgTensor *const *in, void *ctx) {
    return tg_ffn_swiglu(t, in[0], in[1], in[2], in[3], in[0], NULL);
}

/* ReLU FFN away from the kink for any seed: inputs in [0.2, 1) and row j of w1 multiplied by a
 * fixed sign (+ for even j), so hidden unit j's pre-activation is +-(x . |w1_j|), of magnitude
 * >= dim * 0.04 = 0.2 at dim 5, while a 1e-2 perturbation of x or w1 moves it by at most 1e-2.
 * Alternate hidden units are active; w1's gradient passes through the FFN and then the mul. */
static TgTensor *signed_rows(TgTape *t, TgTensor *w1) {
    TgTensor *signs = tg_tensor_new(t->arena, "signs", w1->ndim, w1->shape);
    for (int64_t i = 0; i < signs->numel; i++) signs->data[i] = (i / w1->shape[1]) % 2 == 0 ? 1.0f : -1.0f;
    return tg_mul(t, w1, signs);
}
static TgTensor *fwd_ffn_relu(TgTape *t, TgTensor *const *in, void *ctx) {
    return tg_ffn_relu(t, in[0], signed_rows(t, in[1]), in[2], NULL, NULL);
}
static TgTensor *fwd_ffn_relu_residual(TgTape *t, TgTensor *const *in, void *ctx) {
    return tg_ffn_relu(t, in[0], signed_rows(t, in[1]), in[2], in[0], NULL);
}

/* silu(a) * b runs through vector kernels: lengths one short of and one past their 4, 8 and 16
 * floats, and 1 */
#define SWIGLU_CASE(rows, n)                                                                          \
    {.variant = #rows "x" #n, .inputs = {{"a", {rows, n}}, {"b", {rows, n}}}, .forward = fwd_swiglu},

static const TgOpCheck swiglu_cases[] = {
    {.variant = "4x5", .inputs = {{"a", {4, 5}}, {"b", {4, 5}}}, .forward = fwd_swiglu},
    {.variant = "2x3x4 on [-4, 4)", .inputs = {{"a", {2, 3, 4}}, {"b", {2, 3, 4}}}, .forward = fwd_swiglu, .lo = -4.0f,
     .hi = 4.0f},
    SWIGLU_CASE(1, 1) SWIGLU_CASE(1, 7) SWIGLU_CASE(1, 15) SWIGLU_CASE(1, 17) SWIGLU_CASE(3, 11) SWIGLU_CASE(1, 33)
    SWIGLU_CASE(1, 65)
};
const TgOpCheckList tg_swiglu_checks = TG_OP_CHECK_LIST(swiglu_cases);

#define SWIGLU_FFN_INPUTS(dim, hidden) {"w1", {hidden, dim}}, {"w3", {hidden, dim}}, {"w2", {dim, hidden}}

static const TgOpCheck ffn_swiglu_cases[] = {
    {.variant = "3 rows dim5 hidden7", .inputs = {{"x", {3, 5}}, SWIGLU_FFN_INPUTS(5, 7)}, .forward = fwd_ffn_swiglu},
    {.variant = "2x3 rows dim5 hidden7 + residual", .inputs = {{"x", {2, 3, 5}}, SWIGLU_FFN_INPUTS(5, 7)},
     .forward = fwd_ffn_swiglu_residual},
    /* 7 rows, one past the GEMM's 6-row tile; hidden 17, one past the vectors of 16 floats */
    {.variant = "7 rows dim9 hidden17", .inputs = {{"x", {7, 9}}, SWIGLU_FFN_INPUTS(9, 17)},
     .forward = fwd_ffn_swiglu},
};
const TgOpCheckList tg_ffn_swiglu_checks = TG_OP_CHECK_LIST(ffn_swiglu_cases);

static const TgOpCheck ffn_relu_cases[] = {
    {.variant = "3 rows dim5 hidden7", .inputs = {{"x", {3, 5}}, {"w1", {7, 5}}, {"w2", {5, 7}}},
     .forward = fwd_ffn_relu, .lo = 0.2f, .hi = 1.0f},
    {.variant = "2x3 rows dim5 hidden6 + residual", .inputs = {{"x", {2, 3, 5}}, {"w1", {6, 5}}, {"w2", {5, 6}}},
     .forward = fwd_ffn_relu_residual, .lo = 0.2f, .hi = 1.0f},
};
const TgOpCheckList tg_ffn_relu_checks = TG_OP_CHECK_LIST(ffn_relu_cases);
