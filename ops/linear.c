/* linear: y = x W^T, no bias. W is stored [out, in] as in PyTorch. */
#include <string.h>

#include "../lib/blas.h"
#include "../lib/error.h"
#include "ops.h"

/* dx += dy W          (rows, in)  = (rows, out) (out, in)
 * dW += dy^T x        (out, in)   = (out, rows) (rows, in)
 * A gradient written for the first time is stored (beta 0), not added to zeros. */
static void linear_backward(Tape *tape, TapeNode *node) {
    Tensor *x = node->in[0], *w = node->in[1], *y = node->out;
    int64_t rows = tensor_rows(x), in = tensor_dim(w, 1), out = tensor_dim(w, 0);
    bool accumulate;
    if (tensor_wants_grad(x)) {
        float *dx = tensor_grad_for_write(tape, x, &accumulate);
        tg_sgemm_pool(tape->pool, false, false, rows, in, out, 1.0f, y->grad, out, w->data, in,
                      accumulate ? 1.0f : 0.0f, dx, in);
    }
    if (tensor_wants_grad(w)) {
        float *dw = tensor_grad_for_write(tape, w, &accumulate);
        tg_sgemm_pool(tape->pool, true, false, out, in, rows, 1.0f, y->grad, out, x->data, in,
                      accumulate ? 1.0f : 0.0f, dw, in);
    }
}

Tensor *op_linear(Tape *tape, Tensor *x, Tensor *w) {
    TG_CHECK(w->ndim == 2, "linear weight '%s' must be 2-d [out, in]", w->name);
    TG_CHECK(x->ndim >= 1 && tensor_dim(x, -1) == tensor_dim(w, 1),
             "linear: x '%s' last dim %lld != weight '%s' in-dim %lld", x->name,
             (long long)tensor_dim(x, -1), w->name, (long long)tensor_dim(w, 1));
    int64_t rows = tensor_rows(x), in = tensor_dim(w, 1), out = tensor_dim(w, 0);
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = out;
    Tensor *y = tensor_new(tape->arena, "linear", x->ndim, shape);   /* (..., out) */
    tg_sgemm_pool(tape->pool, false, true, rows, out, in, 1.0f, x->data, in, w->data, in, 0.0f, y->data, out);
    tape_record(tape, "linear", linear_backward, y, 2, (Tensor *[]){x, w});
    return y;
}
