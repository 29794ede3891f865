/* linear: y = x W^T, no bias. W is stored [out, in] as in PyTorch. Its three products run in the
 * tape's precision (tg_tape_set_precision): in bf16 each rounds its operands and sums in fp32.
 * LoRA's lora_linear adds its low-rank products, in the same precision. */
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
        tg_tape_gemm(tape, false, false, rows, in, out, 1.0f, y->grad, out, w->data, in,
                      accumulate ? 1.0f : 0.0f, dx, in);
    }
    if (tg_tensor_wants_grad(w)) {
        float *dw = tg_tensor_grad_for_write(tape, w, &accumulate);
        tg_tape_gemm(tape, true, false, out, in, rows, 1.0f, y->grad, out, x->data, in,
                      accumulate ? 1.0f : 0.0f, dw, in);
    }
}

static void check_linear_shapes(const char *op, const TgTensor *x, const TgTensor *w) {
    TG_CHECK(w->ndim == 2, "%s weight '%s' must be 2-d [out, in]", op, w->name);
    TG_CHECK(x->ndim >= 1 && tg_tensor_dim(x, -1) == tg_tensor_dim(w, 1), "%s: x '%s' last dim %lld != weight '%s' in-dim %lld",
             op, x->name, (long long)tg_tensor_dim(x, -1), w->name, (long long)tg_tensor_dim(w, 1));
}

/* The output of a product with `out` columns: a copy of the residual, for the GEMM to add onto
 * (beta 1), or, without one, a fresh tensor shaped as x with its last dim `out`. */
static TgTensor *residual_output(TgTape *tape, const char *op, const TgTensor *x, int64_t out, const TgTensor *residual) {
    int64_t shape[TG_MAX_DIMS];
    if (!residual) {
        memcpy(shape, x->shape, sizeof shape);
        shape[x->ndim - 1] = out;
        return tg_tensor_new(tape->arena, op, x->ndim, shape);
    }
    int64_t rows = tg_tensor_rows(x);
    TG_CHECK(residual->ndim >= 1 && tg_tensor_dim(residual, -1) == out && tg_tensor_rows(residual) == rows,
             "%s: residual '%s' is not (%lld rows, %lld)", op, residual->name, (long long)rows, (long long)out);
    TG_CHECK(residual != x, "%s: the residual cannot be the input", op);
    TgTensor *y = tg_tensor_new(tape->arena, op, residual->ndim, residual->shape);
    memcpy(y->data, residual->data, (size_t)y->numel * sizeof(float));
    return y;
}

TgTensor *tg_linear(TgTape *tape, TgTensor *x, TgTensor *w) {
    check_linear_shapes("linear", x, w);
    int64_t rows = tg_tensor_rows(x), in = tg_tensor_dim(w, 1), out = tg_tensor_dim(w, 0);
    TgTensor *y = residual_output(tape, "linear", x, out, NULL);   /* (..., out) */
    tg_tape_gemm(tape, false, true, rows, out, in, 1.0f, x->data, in, w->data, in, 0.0f, y->data, out);
    tg_tape_record(tape, tg_op_name(TG_OP_LINEAR), linear_backward, y, 2, (TgTensor *[]){x, w});
    return y;
}

/* ---- linear with a residual: y = r + x W^T, the sub-block output of a pre-norm transformer ----
 * The same as tg_add(r, tg_linear(x, w)) without the intermediate x W^T tensor (which nothing
 * needs in the backward): r is copied into y and the GEMM adds onto it (beta 1).
 *   dr += dy;  dx += dy W;  dW += dy^T x
 * dr is dy itself when r has no gradient yet (the buffer is handed over, as tg_add does). */
static void residual_backward(TgTape *tape, TgTensor *r, TgTensor *y) {
    if (!tg_tensor_wants_grad(r)) return;
    if (!r->grad && !y->retain_grad) {
        r->grad = y->grad;
        y->grad = NULL;
        return;
    }
    float *dr = tg_tensor_grad(tape, r);
    for (int64_t i = 0; i < r->numel; i++) dr[i] += y->grad[i];
}

static void linear_residual_backward(TgTape *tape, TgTapeNode *node) {
    TgTensor *r = node->in[2], *y = node->out;
    linear_backward(tape, node);   /* in[0], in[1] are x and w, as for tg_linear */
    residual_backward(tape, r, y);
}

TgTensor *tg_linear_residual(TgTape *tape, TgTensor *x, TgTensor *w, TgTensor *residual) {
    check_linear_shapes("linear_residual", x, w);
    int64_t rows = tg_tensor_rows(x), in = tg_tensor_dim(w, 1), out = tg_tensor_dim(w, 0);
    TgTensor *y = residual_output(tape, "linear_residual", x, out, residual);   /* (..., out) */
    tg_tape_gemm(tape, false, true, rows, out, in, 1.0f, x->data, in, w->data, in, 1.0f, y->data, out);
    tg_tape_record(tape, tg_op_name(TG_OP_LINEAR_RESIDUAL), linear_residual_backward, y, 3, (TgTensor *[]){x, w, residual});
    return y;
}

/* ---- LoRA linear: y = [r +] x W^T + s (x A^T) B^T,  s = alpha / rank ----
 * W (out, in) is the frozen base, A (rank, in) and B (out, rank) the adapter; x (..., in). The
 * low-rank product goes through h = x A^T (rows, rank), kept for the backward:
 *   g   = s dy B              (rows, rank) = (rows, out) (out, rank)
 *   dx += dy W + g A          (rows, in)
 *   dA += g^T x               (rank, in)   = (rank, rows) (rows, in)
 *   dB += s dy^T h            (out, rank)  = (out, rows) (rows, rank)
 *   dW += dy^T x              only when W wants a gradient: a frozen base costs no dW product
 *   dr += dy
 * With B = 0 the low-rank term adds exact zeros to x W^T, which is computed as tg_linear (or
 * tg_linear_residual) computes it: a fresh adapter leaves the model's outputs bitwise unchanged. */
static void lora_linear_backward(TgTape *tape, TgTapeNode *node) {
    TgTensor *x = node->in[0], *w = node->in[1], *a = node->in[2], *b = node->in[3], *y = node->out;
    TgTensor *r = node->n_in > 4 ? node->in[4] : NULL;
    const float *h = node->saved, *dy = y->grad;
    float s = (float)node->fparam[0];
    int64_t rows = tg_tensor_rows(x), in = tg_tensor_dim(w, 1), out = tg_tensor_dim(w, 0), rank = tg_tensor_dim(a, 0);
    bool accumulate;
    linear_backward(tape, node);   /* dx += dy W and, for a trainable W, dW += dy^T x */
    if (tg_tensor_wants_grad(x) || tg_tensor_wants_grad(a)) {
        float *g = tg_arena_alloc(tape->arena, (size_t)(rows * rank) * sizeof(float));   /* (rows, rank) */
        tg_tape_gemm(tape, false, false, rows, rank, out, s, dy, out, b->data, rank, 0.0f, g, rank);
        if (tg_tensor_wants_grad(x))
            tg_tape_gemm(tape, false, false, rows, in, rank, 1.0f, g, rank, a->data, in, 1.0f, x->grad, in);
        if (tg_tensor_wants_grad(a)) {
            float *da = tg_tensor_grad_for_write(tape, a, &accumulate);
            tg_tape_gemm(tape, true, false, rank, in, rows, 1.0f, g, rank, x->data, in, accumulate ? 1.0f : 0.0f,
                          da, in);
        }
    }
    if (tg_tensor_wants_grad(b)) {
        float *db = tg_tensor_grad_for_write(tape, b, &accumulate);
        tg_tape_gemm(tape, true, false, out, rank, rows, s, dy, out, h, rank, accumulate ? 1.0f : 0.0f, db, rank);
    }
    if (r) residual_backward(tape, r, y);   /* last: it may hand dy over to r */
}

TgTensor *tg_lora_linear(TgTape *tape, TgTensor *x, TgTensor *w, TgTensor *a, TgTensor *b, float scale,
                         TgTensor *residual) {
    check_linear_shapes("lora_linear", x, w);
    int64_t rows = tg_tensor_rows(x), in = tg_tensor_dim(w, 1), out = tg_tensor_dim(w, 0), rank = tg_tensor_dim(a, 0);
    TG_CHECK(a->ndim == 2 && b->ndim == 2 && tg_tensor_dim(a, 1) == in && tg_tensor_dim(b, 0) == out &&
                 tg_tensor_dim(b, 1) == rank,
             "lora_linear: A '%s' must be (rank, %lld) and B '%s' (%lld, rank)", a->name, (long long)in, b->name,
             (long long)out);
    TgTensor *y = residual_output(tape, "lora_linear", x, out, residual);   /* (..., out) */
    tg_tape_gemm(tape, false, true, rows, out, in, 1.0f, x->data, in, w->data, in, residual ? 1.0f : 0.0f,
                  y->data, out);
    float *h = tg_arena_alloc(tape->arena, (size_t)(rows * rank) * sizeof(float));   /* (rows, rank) */
    tg_tape_gemm(tape, false, true, rows, rank, in, 1.0f, x->data, in, a->data, in, 0.0f, h, rank);
    tg_tape_gemm(tape, false, true, rows, out, rank, scale, h, rank, b->data, rank, 1.0f, y->data, out);
    TgTensor *inputs[5] = {x, w, a, b, residual};
    TgTapeNode *node = tg_tape_record(tape, tg_op_name(TG_OP_LORA_LINEAR), lora_linear_backward, y, residual ? 5 : 4, inputs);
    if (node) {
        node->saved = h;
        node->fparam[0] = scale;
    }
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
const TgOpCheckList tg_linear_checks = TG_OP_CHECK_LIST(linear_cases);

static const TgOpCheck linear_residual_cases[] = {
    {.variant = "3x5x7", .inputs = {{"x", {3, 5}}, {"w", {7, 5}}, {"r", {3, 7}}}, .forward = fwd_linear_residual},
    {.variant = "2x3x4x6 (3-d x)", .inputs = {{"x", {2, 3, 4}}, {"w", {6, 4}}, {"r", {2, 3, 6}}},
     .forward = fwd_linear_residual},
    {.variant = "m13 n17 k7", .inputs = {{"x", {13, 7}}, {"w", {17, 7}}, {"r", {13, 17}}},
     .forward = fwd_linear_residual},
};
const TgOpCheckList tg_linear_residual_checks = TG_OP_CHECK_LIST(linear_residual_cases);

/* the LoRA scale rides in ctx: 2.0 (alpha 2 rank, the default) unless a case says otherwise */
static float lora_scale(void *ctx) { return ctx ? *(const float *)ctx : 2.0f; }
static TgTensor *fwd_lora_linear(TgTape *t, TgTensor *const *in, void *ctx) {
    return tg_lora_linear(t, in[0], in[1], in[2], in[3], lora_scale(ctx), NULL);
}
static TgTensor *fwd_lora_linear_residual(TgTape *t, TgTensor *const *in, void *ctx) {
    return tg_lora_linear(t, in[0], in[1], in[2], in[3], lora_scale(ctx), in[4]);
}
static float lora_scale_half = 0.5f;

#define LORA_CASE(m, n, k, r)                   \
    {.variant = "m" #m " n" #n " k" #k " r" #r, \
     .inputs = {{"x", {m, k}}, {"w", {n, k}}, {"a", {r, k}}, {"b", {n, r}}}, .forward = fwd_lora_linear},

static const TgOpCheck lora_linear_cases[] = {
    LORA_CASE(3, 7, 5, 2) LORA_CASE(1, 1, 1, 1) LORA_CASE(13, 17, 9, 4) LORA_CASE(7, 33, 17, 8) LORA_CASE(65, 9, 13, 1)
    {.variant = "2x3x4x6 r3 (3-d x), scale 0.5", .inputs = {{"x", {2, 3, 4}}, {"w", {6, 4}}, {"a", {3, 4}}, {"b", {6, 3}}},
     .forward = fwd_lora_linear, .ctx = &lora_scale_half},
    {.variant = "m5 n7 k6 r2 + residual", .inputs = {{"x", {5, 6}}, {"w", {7, 6}}, {"a", {2, 6}}, {"b", {7, 2}}, {"r", {5, 7}}},
     .forward = fwd_lora_linear_residual},
    {.variant = "2x3x8x5 r4 + residual (3-d)",
     .inputs = {{"x", {2, 3, 8}}, {"w", {5, 8}}, {"a", {4, 8}}, {"b", {5, 4}}, {"r", {2, 3, 5}}},
     .forward = fwd_lora_linear_residual},
};
const TgOpCheckList tg_lora_linear_checks = TG_OP_CHECK_LIST(lora_linear_cases);
