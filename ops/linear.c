/* linear: y = x W^T, no bias. W is stored [out, in] as in PyTorch. Its three products run in the
 * tape's precision (tg_tape_set_precision): in bf16 each rounds its operands and sums in fp32. */
#include <string.h>

#include "lib/blas.h"
#include "tapegrad/error.h"
#include "ops/checks.h"
#include "tapegrad/ops.h"

/* dx += dy W          (rows, in)  = (rows, out) (out, in)
 * dW += dy^T x        (out, in)   = (out, rows) (rows, in)
 * A gradient written for the first time is stored (beta 0), not added to zeros. */
static void linear_backward(TgTape *tape, TgTapeNode *node) {
    TgTensor *x = node->in[0], *w = node->in[1], *y = node->out;
    int64_t rows = tg_tensor_rows(x), in = tg_tensor_dim(w, 1), out = tg_tensor_dim(w, 0);
    bool accumulate;
    if (tg_tensor_wants_grad(x)) {
        float *dx = tg_tensor_grad_for_write(tape, x, &accumulate);
        tg_gemm_pool(tape->pool, tape->precision, false, false, rows, in, out, 1.0f, y->grad, out, w->data, in,
                      accumulate ? 1.0f : 0.0f, dx, in);
    }
    if (tg_tensor_wants_grad(w)) {
        float *dw = tg_tensor_grad_for_write(tape, w, &accumulate);
        tg_gemm_pool(tape->pool, tape->precision, true, false, out, in, rows, 1.0f, y->grad, out, x->data, in,
                      accumulate ? 1.0f : 0.0f, dw, in);
    }
}

TgTensor *tg_linear(TgTape *tape, TgTensor *x, TgTensor *w) {
    TG_CHECK(w->ndim == 2, "linear weight '%s' must be 2-d [out, in]", w->name);
    TG_CHECK(x->ndim >= 1 && tg_tensor_dim(x, -1) == tg_tensor_dim(w, 1),
             "linear: x '%s' last dim %lld != weight '%s' in-dim %lld", x->name,
             (long long)tg_tensor_dim(x, -1), w->name, (long long)tg_tensor_dim(w, 1));
    int64_t rows = tg_tensor_rows(x), in = tg_tensor_dim(w, 1), out = tg_tensor_dim(w, 0);
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = out;
    TgTensor *y = tg_tensor_new(tape->arena, "linear", x->ndim, shape);   /* (..., out) */
    tg_gemm_pool(tape->pool, tape->precision, false, true, rows, out, in, 1.0f, x->data, in, w->data, in, 0.0f, y->data, out);
    tg_tape_record(tape, tg_op_name(TG_OP_LINEAR), linear_backward, y, 2, (TgTensor *[]){x, w});
    return y;
}

/* ---- linear with a residual: y = r + x W^T, the sub-block output of a pre-norm transformer ----
 * The same as tg_add(r, tg_linear(x, w)) without the intermediate x W^T tensor (which nothing
 * needs in the backward): r is copied into y and the GEMM adds onto it (beta 1).
 *   dr += dy;  dx += dy W;  dW += dy^T x
 * dr is dy itself when r has no gradient yet (the buffer is handed over, as tg_add does). */
static void linear_residual_backward(TgTape *tape, TgTapeNode *node) {
    TgTensor *r = node->in[2], *y = node->out;
    linear_backward(tape, node);   /* in[0], in[1] are x and w, as for tg_linear */
    if (!tg_tensor_wants_grad(r)) return;
    if (!r->grad && !y->retain_grad) {
        r->grad = y->grad;
        y->grad = NULL;
        return;
    }
    float *dr = tg_tensor_grad(tape, r);
    for (int64_t i = 0; i < r->numel; i++) dr[i] += y->grad[i];
}

TgTensor *tg_linear_residual(TgTape *tape, TgTensor *x, TgTensor *w, TgTensor *residual) {
    TG_CHECK(w->ndim == 2, "linear weight '%s' must be 2-d [out, in]", w->name);
    TG_CHECK(x->ndim >= 1 && tg_tensor_dim(x, -1) == tg_tensor_dim(w, 1),
             "linear: x '%s' last dim %lld != weight '%s' in-dim %lld", x->name,
             (long long)tg_tensor_dim(x, -1), w->name, (long long)tg_tensor_dim(w, 1));
    int64_t rows = tg_tensor_rows(x), in = tg_tensor_dim(w, 1), out = tg_tensor_dim(w, 0);
    TG_CHECK(residual->ndim >= 1 && tg_tensor_dim(residual, -1) == out && tg_tensor_rows(residual) == rows,
             "linear_residual: residual '%s' is not (%lld rows, %lld)", residual->name, (long long)rows,
             (long long)out);
    TG_CHECK(residual != x, "linear_residual: the residual cannot be the input");
    TgTensor *y = tg_tensor_new(tape->arena, "linear_residual", residual->ndim, residual->shape);   /* (..., out) */
    memcpy(y->data, residual->data, (size_t)y->numel * sizeof(float));
    tg_gemm_pool(tape->pool, tape->precision, false, true, rows, out, in, 1.0f, x->data, in, w->data, in, 1.0f, y->data, out);
    tg_tape_record(tape, tg_op_name(TG_OP_LINEAR_RESIDUAL), linear_residual_backward, y, 3, (TgTensor *[]){x, w, residual});
    return y;
}

/* ---- gradient checks (tapegrad/op_list.h) ---- */

static TgTensor *fwd_linear(TgTape *t, TgTensor *const *in, void *ctx) { return tg_linear(t, in[0], in[1]); }
static TgTensor *fwd_linear_residual(TgTape *t, TgTensor *const *in, void *ctx) {
    return tg_linear_residual(t, in[0], in[1], in[2]);
}

/* A grid of m rows, n outputs and k inputs, each ragged against the GEMM's blocks in all three
 * products (y = x W^T is m x n over k, dx m x k over n, dW n x k over m): 1; 7 and 13, one past
 * the register tile's 6 and 12 rows; 9, 17 and 33, one past its 8, 16 and 32 columns and the
 * vectors of 4, 8 and 16 floats; 65. Each value takes each of the three places, beside small
 * values only, so the suite stays quick. */
#define LINEAR_CASE(m, n, k)                                                                              \
    {.variant = "m" #m " n" #n " k" #k, .inputs = {{"x", {m, k}}, {"w", {n, k}}}, .forward = fwd_linear},
#define LINEAR_RAGGED_GRID                                                                     \
    LINEAR_CASE(1, 33, 7) LINEAR_CASE(7, 17, 1) LINEAR_CASE(13, 1, 17) LINEAR_CASE(17, 7, 13)  \
    LINEAR_CASE(33, 13, 1) LINEAR_CASE(7, 33, 17) LINEAR_CASE(13, 9, 33) LINEAR_CASE(65, 1, 7) \
    LINEAR_CASE(1, 65, 1) LINEAR_CASE(1, 1, 65)

static const TgOpCheck linear_cases[] = {
    {.variant = "3x5x7", .inputs = {{"x", {3, 5}}, {"w", {7, 5}}}, .forward = fwd_linear},
    {.variant = "1x1x1", .inputs = {{"x", {1, 1}}, {"w", {1, 1}}}, .forward = fwd_linear},
    {.variant = "2x3x4x6 (3-d x)", .inputs = {{"x", {2, 3, 4}}, {"w", {6, 4}}}, .forward = fwd_linear},
    LINEAR_RAGGED_GRID
};
const TgOpCheckList linear_checks = TG_OP_CHECK_LIST(linear_cases);

static const TgOpCheck linear_residual_cases[] = {
    {.variant = "3x5x7", .inputs = {{"x", {3, 5}}, {"w", {7, 5}}, {"r", {3, 7}}}, .forward = fwd_linear_residual},
    {.variant = "2x3x4x6 (3-d x)", .inputs = {{"x", {2, 3, 4}}, {"w", {6, 4}}, {"r", {2, 3, 6}}},
     .forward = fwd_linear_residual},
    {.variant = "m13 n17 k7", .inputs = {{"x", {13, 7}}, {"w", {17, 7}}, {"r", {13, 17}}},
     .forward = fwd_linear_residual},
};
const TgOpCheckList linear_residual_checks = TG_OP_CHECK_LIST(linear_residual_cases);
