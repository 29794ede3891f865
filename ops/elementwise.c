/* Elementwise add, mul, scale and the reductions sum and mean (to a scalar). */
#include "../lib/error.h"
#include "ops.h"

static void check_same(const char *op, const Tensor *a, const Tensor *b) {
    char sa[64], sb[64];
    TG_CHECK(tensor_same_shape(a, b), "%s: '%s' %s vs '%s' %s", op, a->name,
             tensor_shape_str(a, sa, sizeof sa), b->name, tensor_shape_str(b, sb, sizeof sb));
}

/* ---- add: c = a + b;  da += dc, db += dc ---- */
static void add_backward(Tape *tape, TapeNode *node) {
    const float *dc = node->out->grad;
    for (int k = 0; k < 2; k++) {
        Tensor *t = node->in[k];
        if (!tensor_wants_grad(t)) continue;
        float *g = tensor_grad(tape, t);
        for (int64_t i = 0; i < t->numel; i++) g[i] += dc[i];
    }
}

Tensor *op_add(Tape *tape, Tensor *a, Tensor *b) {
    check_same("add", a, b);
    Tensor *c = tensor_new(tape->arena, "add", a->ndim, a->shape);
    for (int64_t i = 0; i < c->numel; i++) c->data[i] = a->data[i] + b->data[i];
    tape_record(tape, "add", add_backward, c, 2, (Tensor *[]){a, b});
    return c;
}

/* ---- mul: c = a * b;  da += dc * b, db += dc * a ---- */
static void mul_backward(Tape *tape, TapeNode *node) {
    Tensor *a = node->in[0], *b = node->in[1];
    const float *dc = node->out->grad;
    if (tensor_wants_grad(a)) {
        float *ga = tensor_grad(tape, a);
        for (int64_t i = 0; i < a->numel; i++) ga[i] += dc[i] * b->data[i];
    }
    if (tensor_wants_grad(b)) {
        float *gb = tensor_grad(tape, b);
        for (int64_t i = 0; i < b->numel; i++) gb[i] += dc[i] * a->data[i];
    }
}

Tensor *op_mul(Tape *tape, Tensor *a, Tensor *b) {
    check_same("mul", a, b);
    Tensor *c = tensor_new(tape->arena, "mul", a->ndim, a->shape);
    for (int64_t i = 0; i < c->numel; i++) c->data[i] = a->data[i] * b->data[i];
    tape_record(tape, "mul", mul_backward, c, 2, (Tensor *[]){a, b});
    return c;
}

/* ---- scale: c = s * a;  da += s * dc ---- */
static void scale_backward(Tape *tape, TapeNode *node) {
    Tensor *a = node->in[0];
    float s = (float)node->fparam[0];
    const float *dc = node->out->grad;
    float *ga = tensor_grad(tape, a);
    for (int64_t i = 0; i < a->numel; i++) ga[i] += s * dc[i];
}

Tensor *op_scale(Tape *tape, Tensor *a, float s) {
    Tensor *c = tensor_new(tape->arena, "scale", a->ndim, a->shape);
    for (int64_t i = 0; i < c->numel; i++) c->data[i] = s * a->data[i];
    TapeNode *node = tape_record(tape, "scale", scale_backward, c, 1, &a);
    if (node) node->fparam[0] = s;
    return c;
}

/* ---- sum / mean: c = k * sum(a) with k = 1 or 1/n;  da += k * dc ---- */
static void sum_backward(Tape *tape, TapeNode *node) {
    Tensor *a = node->in[0];
    float d = (float)node->fparam[0] * node->out->grad[0];
    float *ga = tensor_grad(tape, a);
    for (int64_t i = 0; i < a->numel; i++) ga[i] += d;
}

static Tensor *scaled_sum(Tape *tape, Tensor *a, const char *op, double k) {
    Tensor *c = tensor_new(tape->arena, op, 0, NULL);
    double s = 0.0; /* double accumulation: the order is fixed, the result deterministic */
    for (int64_t i = 0; i < a->numel; i++) s += a->data[i];
    c->data[0] = (float)(k * s);
    TapeNode *node = tape_record(tape, op, sum_backward, c, 1, &a);
    if (node) node->fparam[0] = k;
    return c;
}

Tensor *op_sum(Tape *tape, Tensor *a) { return scaled_sum(tape, a, "sum", 1.0); }

Tensor *op_mean(Tape *tape, Tensor *a) {
    TG_CHECK(a->numel > 0, "mean of empty tensor '%s'", a->name);
    return scaled_sum(tape, a, "mean", 1.0 / (double)a->numel);
}
