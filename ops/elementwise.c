/* Elementwise add, mul, scale and the reductions sum and mean (to a scalar). */
#include <string.h>

#include "tapegrad/error.h"
#include "ops/checks.h"
#include "tapegrad/ops.h"

static void check_same(const char *op, const TgTensor *a, const TgTensor *b) {
    char sa[64], sb[64];
    TG_CHECK(tg_tensor_same_shape(a, b), "%s: '%s' %s vs '%s' %s", op, a->name,
             tg_tensor_shape_str(a, sa, sizeof sa), b->name, tg_tensor_shape_str(b, sb, sizeof sb));
}

/* ---- add: c = a + b;  da += dc, db += dc ----
 * When a has no gradient yet, dc itself becomes a's gradient: the buffer is handed over rather
 * than copied (dc is spent after this backward anyway). In the residual stream x + f(x) this
 * passes the gradient down a layer at no cost. */
static void add_backward(TgTape *tape, TgTapeNode *node) {
    TgTensor *a = node->in[0], *b = node->in[1], *c = node->out;
    const float *dc = c->grad;
    if (tg_tensor_wants_grad(b)) {
        bool accumulate;
        float *gb = tg_tensor_grad_for_write(tape, b, &accumulate);
        if (accumulate) for (int64_t i = 0; i < b->numel; i++) gb[i] += dc[i];
        else memcpy(gb, dc, (size_t)b->numel * sizeof(float));
    }
    if (!tg_tensor_wants_grad(a)) return;
    if (!a->grad && !c->retain_grad) {   /* a != b here: b's gradient would exist by now */
        a->grad = c->grad;
        c->grad = NULL;
        return;
    }
    float *ga = tg_tensor_grad(tape, a);
    for (int64_t i = 0; i < a->numel; i++) ga[i] += dc[i];
}

TgTensor *tg_add(TgTape *tape, TgTensor *a, TgTensor *b) {
    check_same("add", a, b);
    TgTensor *c = tg_tensor_new(tape->arena, "add", a->ndim, a->shape);
    for (int64_t i = 0; i < c->numel; i++) c->data[i] = a->data[i] + b->data[i];
    tg_tape_record(tape, tg_op_name(TG_OP_ADD), add_backward, c, 2, (TgTensor *[]){a, b});
    return c;
}

/* ---- mul: c = a * b;  da += dc * b, db += dc * a ---- */
static void mul_backward(TgTape *tape, TgTapeNode *node) {
    TgTensor *a = node->in[0], *b = node->in[1];
    const float *dc = node->out->grad;
    bool accumulate;
    if (tg_tensor_wants_grad(a)) {
        float *ga = tg_tensor_grad_for_write(tape, a, &accumulate);
        for (int64_t i = 0; i < a->numel; i++) ga[i] = (accumulate ? ga[i] : 0.0f) + dc[i] * b->data[i];
    }
    if (tg_tensor_wants_grad(b)) {   /* after a's: when b is a, this adds to what was just written */
        float *gb = tg_tensor_grad_for_write(tape, b, &accumulate);
        for (int64_t i = 0; i < b->numel; i++) gb[i] = (accumulate ? gb[i] : 0.0f) + dc[i] * a->data[i];
    }
}

TgTensor *tg_mul(TgTape *tape, TgTensor *a, TgTensor *b) {
    check_same("mul", a, b);
    TgTensor *c = tg_tensor_new(tape->arena, "mul", a->ndim, a->shape);
    for (int64_t i = 0; i < c->numel; i++) c->data[i] = a->data[i] * b->data[i];
    tg_tape_record(tape, tg_op_name(TG_OP_MUL), mul_backward, c, 2, (TgTensor *[]){a, b});
    return c;
}

/* ---- scale: c = s * a;  da += s * dc ---- */
static void scale_backward(TgTape *tape, TgTapeNode *node) {
    TgTensor *a = node->in[0];
    float s = (float)node->fparam[0];
    const float *dc = node->out->grad;
    bool accumulate;
    float *ga = tg_tensor_grad_for_write(tape, a, &accumulate);
    for (int64_t i = 0; i < a->numel; i++) ga[i] = (accumulate ? ga[i] : 0.0f) + s * dc[i];
}

TgTensor *tg_scale(TgTape *tape, TgTensor *a, float s) {
    TgTensor *c = tg_tensor_new(tape->arena, "scale", a->ndim, a->shape);
    for (int64_t i = 0; i < c->numel; i++) c->data[i] = s * a->data[i];
    TgTapeNode *node = tg_tape_record(tape, tg_op_name(TG_OP_SCALE), scale_backward, c, 1, &a);
    if (node) node->fparam[0] = s;
    return c;
}

/* ---- sum / mean: c = k * sum(a) with k = 1 or 1/n;  da += k * dc ---- */
static void sum_backward(TgTape *tape, TgTapeNode *node) {
    TgTensor *a = node->in[0];
    float d = (float)node->fparam[0] * node->out->grad[0];
    bool accumulate;
    float *ga = tg_tensor_grad_for_write(tape, a, &accumulate);
    for (int64_t i = 0; i < a->numel; i++) ga[i] = (accumulate ? ga[i] : 0.0f) + d;
}

static TgTensor *scaled_sum(TgTape *tape, TgTensor *a, TgOp op, double k) {
    TgTensor *c = tg_tensor_new(tape->arena, tg_op_name(op), 0, NULL);
    double s = 0.0; /* double accumulation: the order is fixed, the result deterministic */
    for (int64_t i = 0; i < a->numel; i++) s += a->data[i];
    c->data[0] = (float)(k * s);
    TgTapeNode *node = tg_tape_record(tape, tg_op_name(op), sum_backward, c, 1, &a);
    if (node) node->fparam[0] = k;
    return c;
}

TgTensor *tg_sum(TgTape *tape, TgTensor *a) { return scaled_sum(tape, a, TG_OP_SUM, 1.0); }

TgTensor *tg_mean(TgTape *tape, TgTensor *a) {
    TG_CHECK(a->numel > 0, "mean of empty tensor '%s'", a->name);
    return scaled_sum(tape, a, TG_OP_MEAN, 1.0 / (double)a->numel);
}

/* ---- gradient checks (tapegrad/op_list.h) ---- */

static TgTensor *fwd_add(TgTape *t, TgTensor *const *in, void *ctx) { return tg_add(t, in[0], in[1]); }
static TgTensor *fwd_mul(TgTape *t, TgTensor *const *in, void *ctx) { return tg_mul(t, in[0], in[1]); }
static TgTensor *fwd_scale(TgTape *t, TgTensor *const *in, void *ctx) { return tg_scale(t, in[0], -1.7f); }
static TgTensor *fwd_sum(TgTape *t, TgTensor *const *in, void *ctx) { return tg_sum(t, in[0]); }
static TgTensor *fwd_mean(TgTape *t, TgTensor *const *in, void *ctx) { return tg_mean(t, in[0]); }

static const TgOpCheck add_cases[] = {
    {.variant = "4x5", .inputs = {{"a", {4, 5}}, {"b", {4, 5}}}, .forward = fwd_add},
};
static const TgOpCheck mul_cases[] = {
    {.variant = "4x5", .inputs = {{"a", {4, 5}}, {"b", {4, 5}}}, .forward = fwd_mul},
};
static const TgOpCheck scale_cases[] = {
    {.variant = "3x7", .inputs = {{"a", {3, 7}}}, .forward = fwd_scale},
};
static const TgOpCheck sum_cases[] = {
    {.variant = "2x3x4", .inputs = {{"a", {2, 3, 4}}}, .forward = fwd_sum},
};
static const TgOpCheck mean_cases[] = {
    {.variant = "5x3", .inputs = {{"a", {5, 3}}}, .forward = fwd_mean},
};
const TgOpCheckList tg_add_checks = TG_OP_CHECK_LIST(add_cases);
const TgOpCheckList tg_mul_checks = TG_OP_CHECK_LIST(mul_cases);
const TgOpCheckList tg_scale_checks = TG_OP_CHECK_LIST(scale_cases);
const TgOpCheckList tg_sum_checks = TG_OP_CHECK_LIST(sum_cases);
const TgOpCheckList tg_mean_checks = TG_OP_CHECK_LIST(mean_cases);
