/* Elementwise add, mul, scale and the reductions sum and mean (to a scalar). */
#include <string.h>

#include "lib/error.h"
#include "ops/checks.h"
#include "ops/ops.h"

static void check_same(const char *op, const Tensor *a, const Tensor *b) {
    char sa[64], sb[64];
    TG_CHECK(tensor_same_shape(a, b), "%s: '%s' %s vs '%s' %s", op, a->name,
             tensor_shape_str(a, sa, sizeof sa), b->name, tensor_shape_str(b, sb, sizeof sb));
}

/* ---- add: c = a + b;  da += dc, db += dc ----
 * When a has no gradient yet, dc itself becomes a's gradient: the buffer is handed over rather
 * than copied (dc is spent after this backward anyway). In the residual stream x + f(x) this
 * passes the gradient down a layer at no cost. */
static void add_backward(Tape *tape, TapeNode *node) {
    Tensor *a = node->in[0], *b = node->in[1], *c = node->out;
    const float *dc = c->grad;
    if (tensor_wants_grad(b)) {
        bool accumulate;
        float *gb = tensor_grad_for_write(tape, b, &accumulate);
        if (accumulate) for (int64_t i = 0; i < b->numel; i++) gb[i] += dc[i];
        else memcpy(gb, dc, (size_t)b->numel * sizeof(float));
    }
    if (!tensor_wants_grad(a)) return;
    if (!a->grad && !c->retain_grad) {   /* a != b here: b's gradient would exist by now */
        a->grad = c->grad;
        c->grad = NULL;
        return;
    }
    float *ga = tensor_grad(tape, a);
    for (int64_t i = 0; i < a->numel; i++) ga[i] += dc[i];
}

Tensor *op_add(Tape *tape, Tensor *a, Tensor *b) {
    check_same("add", a, b);
    Tensor *c = tensor_new(tape->arena, "add", a->ndim, a->shape);
    for (int64_t i = 0; i < c->numel; i++) c->data[i] = a->data[i] + b->data[i];
    tape_record(tape, tg_op_name(TG_OP_ADD), add_backward, c, 2, (Tensor *[]){a, b});
    return c;
}

/* ---- mul: c = a * b;  da += dc * b, db += dc * a ---- */
static void mul_backward(Tape *tape, TapeNode *node) {
    Tensor *a = node->in[0], *b = node->in[1];
    const float *dc = node->out->grad;
    bool accumulate;
    if (tensor_wants_grad(a)) {
        float *ga = tensor_grad_for_write(tape, a, &accumulate);
        for (int64_t i = 0; i < a->numel; i++) ga[i] = (accumulate ? ga[i] : 0.0f) + dc[i] * b->data[i];
    }
    if (tensor_wants_grad(b)) {   /* after a's: when b is a, this adds to what was just written */
        float *gb = tensor_grad_for_write(tape, b, &accumulate);
        for (int64_t i = 0; i < b->numel; i++) gb[i] = (accumulate ? gb[i] : 0.0f) + dc[i] * a->data[i];
    }
}

Tensor *op_mul(Tape *tape, Tensor *a, Tensor *b) {
    check_same("mul", a, b);
    Tensor *c = tensor_new(tape->arena, "mul", a->ndim, a->shape);
    for (int64_t i = 0; i < c->numel; i++) c->data[i] = a->data[i] * b->data[i];
    tape_record(tape, tg_op_name(TG_OP_MUL), mul_backward, c, 2, (Tensor *[]){a, b});
    return c;
}

/* ---- scale: c = s * a;  da += s * dc ---- */
static void scale_backward(Tape *tape, TapeNode *node) {
    Tensor *a = node->in[0];
    float s = (float)node->fparam[0];
    const float *dc = node->out->grad;
    bool accumulate;
    float *ga = tensor_grad_for_write(tape, a, &accumulate);
    for (int64_t i = 0; i < a->numel; i++) ga[i] = (accumulate ? ga[i] : 0.0f) + s * dc[i];
}

Tensor *op_scale(Tape *tape, Tensor *a, float s) {
    Tensor *c = tensor_new(tape->arena, "scale", a->ndim, a->shape);
    for (int64_t i = 0; i < c->numel; i++) c->data[i] = s * a->data[i];
    TapeNode *node = tape_record(tape, tg_op_name(TG_OP_SCALE), scale_backward, c, 1, &a);
    if (node) node->fparam[0] = s;
    return c;
}

/* ---- sum / mean: c = k * sum(a) with k = 1 or 1/n;  da += k * dc ---- */
static void sum_backward(Tape *tape, TapeNode *node) {
    Tensor *a = node->in[0];
    float d = (float)node->fparam[0] * node->out->grad[0];
    bool accumulate;
    float *ga = tensor_grad_for_write(tape, a, &accumulate);
    for (int64_t i = 0; i < a->numel; i++) ga[i] = (accumulate ? ga[i] : 0.0f) + d;
}

static Tensor *scaled_sum(Tape *tape, Tensor *a, TgOp op, double k) {
    Tensor *c = tensor_new(tape->arena, tg_op_name(op), 0, NULL);
    double s = 0.0; /* double accumulation: the order is fixed, the result deterministic */
    for (int64_t i = 0; i < a->numel; i++) s += a->data[i];
    c->data[0] = (float)(k * s);
    TapeNode *node = tape_record(tape, tg_op_name(op), sum_backward, c, 1, &a);
    if (node) node->fparam[0] = k;
    return c;
}

Tensor *op_sum(Tape *tape, Tensor *a) { return scaled_sum(tape, a, TG_OP_SUM, 1.0); }

Tensor *op_mean(Tape *tape, Tensor *a) {
    TG_CHECK(a->numel > 0, "mean of empty tensor '%s'", a->name);
    return scaled_sum(tape, a, TG_OP_MEAN, 1.0 / (double)a->numel);
}

/* ---- gradient checks (ops/op_list.h) ---- */

static Tensor *fwd_add(Tape *t, Tensor *const *in, void *ctx) { return op_add(t, in[0], in[1]); }
static Tensor *fwd_mul(Tape *t, Tensor *const *in, void *ctx) { return op_mul(t, in[0], in[1]); }
static Tensor *fwd_scale(Tape *t, Tensor *const *in, void *ctx) { return op_scale(t, in[0], -1.7f); }
static Tensor *fwd_sum(Tape *t, Tensor *const *in, void *ctx) { return op_sum(t, in[0]); }
static Tensor *fwd_mean(Tape *t, Tensor *const *in, void *ctx) { return op_mean(t, in[0]); }

static const OpCheck add_cases[] = {
    {"4x5", 2, {"a", "b"}, {2, 2}, {{4, 5}, {4, 5}}, 0, 0, fwd_add, NULL, 0},
};
static const OpCheck mul_cases[] = {
    {"4x5", 2, {"a", "b"}, {2, 2}, {{4, 5}, {4, 5}}, 0, 0, fwd_mul, NULL, 0},
};
static const OpCheck scale_cases[] = {
    {"3x7", 1, {"a"}, {2}, {{3, 7}}, 0, 0, fwd_scale, NULL, 0},
};
static const OpCheck sum_cases[] = {
    {"2x3x4", 1, {"a"}, {3}, {{2, 3, 4}}, 0, 0, fwd_sum, NULL, 0},
};
static const OpCheck mean_cases[] = {
    {"5x3", 1, {"a"}, {2}, {{5, 3}}, 0, 0, fwd_mean, NULL, 0},
};
const OpCheckList add_checks = OP_CHECK_LIST(add_cases);
const OpCheckList mul_checks = OP_CHECK_LIST(mul_cases);
const OpCheckList scale_checks = OP_CHECK_LIST(scale_cases);
const OpCheckList sum_checks = OP_CHECK_LIST(sum_cases);
const OpCheckList mean_checks = OP_CHECK_LIST(mean_cases);
