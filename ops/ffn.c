/* Feed-forward blocks:
 *   SwiGLU FFN:  out = w2(silu(w1 x) * w3 x)   w1 = gate, w3 = up, w2 = down
 *   ReLU FFN:    out = w2(relu(w1 x))
 * w1, w3 (hidden, dim), w2 (dim, hidden); x (..., dim) -> out (..., dim).
 * The gate product silu(a) * b is one fused op: one pass over the hidden activations each way
 * and no silu(a) tensor kept for the backward. */
#include "../lib/error.h"
#include "ops.h"
#include "vecmath.h"

/* Below this many elements a pool wake-up costs more than the loop. */
enum { SWIGLU_MIN_PARALLEL = 1 << 15 };

typedef struct {
    const float *a, *b;   /* (n) each */
    float *y;             /* (n), forward */
    const float *dy;      /* (n), backward */
    float *da, *db;       /* (n), NULL when that input wants no gradient */
    bool da_accumulate, db_accumulate;   /* add into da / db (else store) */
} SwigluJob;

/* Eight elements at a time (vecmath.h), the sigmoid through a vectorised exp: a call to expf
 * per element cost more than the rest of the FFN's elementwise work. */
static void swiglu_forward_range(void *ctx, int64_t begin, int64_t end, int thread) {
    const SwigluJob *job = ctx;
    for (int64_t i = begin; i < end; i += LANES) {
        f32x8 a, b;
        load8(&a, job->a + i, end - i);
        load8(&b, job->b + i, end - i);
        f32x8 s = a;
        sigmoid8(&s);
        f32x8 y = a * s * b;   /* silu(a) * b */
        store8(job->y + i, &y, end - i);
    }
}

/* Differentiating y = silu(a) * b = a s(a) b:
 *   da += dy * b * silu'(a),  silu'(a) = s (1 + a (1 - s))
 *   db += dy * silu(a)                                      */
static void swiglu_backward_range(void *ctx, int64_t begin, int64_t end, int thread) {
    const SwigluJob *job = ctx;
    for (int64_t i = begin; i < end; i += LANES) {
        f32x8 a, b, dy, g;
        load8(&a, job->a + i, end - i);
        load8(&b, job->b + i, end - i);
        load8(&dy, job->dy + i, end - i);
        f32x8 s = a;
        sigmoid8(&s);
        if (job->da) {
            f32x8 da = dy * b * s * (1.0f + a * (1.0f - s));
            if (job->da_accumulate) load8(&g, job->da + i, end - i), da = g + da;
            store8(job->da + i, &da, end - i);
        }
        if (job->db) {   /* after da: when b is a, this adds to what was just stored */
            f32x8 db = dy * a * s;
            if (job->db_accumulate) load8(&g, job->db + i, end - i), db = g + db;
            store8(job->db + i, &db, end - i);
        }
    }
}

static Pool *pool_if_worth_it(Tape *tape, int64_t numel) {
    return numel >= SWIGLU_MIN_PARALLEL ? tape->pool : NULL;
}

static void swiglu_backward(Tape *tape, TapeNode *node) {
    Tensor *a = node->in[0], *b = node->in[1], *y = node->out;
    SwigluJob job = {.a = a->data, .b = b->data, .dy = y->grad};
    if (tensor_wants_grad(a)) job.da = tensor_grad_for_write(tape, a, &job.da_accumulate);
    if (tensor_wants_grad(b)) job.db = tensor_grad_for_write(tape, b, &job.db_accumulate);
    pool_parallel_for(pool_if_worth_it(tape, y->numel), y->numel, swiglu_backward_range, &job);
}

Tensor *op_swiglu(Tape *tape, Tensor *a, Tensor *b) {
    char sa[64], sb[64];
    TG_CHECK(tensor_same_shape(a, b), "swiglu: '%s' %s vs '%s' %s", a->name,
             tensor_shape_str(a, sa, sizeof sa), b->name, tensor_shape_str(b, sb, sizeof sb));
    Tensor *y = tensor_new(tape->arena, "swiglu", a->ndim, a->shape);  /* (..., hidden) */
    SwigluJob job = {.a = a->data, .b = b->data, .y = y->data};
    pool_parallel_for(pool_if_worth_it(tape, y->numel), y->numel, swiglu_forward_range, &job);
    tape_record(tape, "swiglu", swiglu_backward, y, 2, (Tensor *[]){a, b});
    return y;
}

static void check_ffn_weights(const Tensor *w_in, const Tensor *w2) {
    char sw[64], s2[64];
    TG_CHECK(w_in->ndim == 2 && w2->ndim == 2 && w2->shape[0] == w_in->shape[1] &&
                 w2->shape[1] == w_in->shape[0],
             "ffn: '%s' %s and '%s' %s are not (hidden, dim) and (dim, hidden)", w_in->name,
             tensor_shape_str(w_in, sw, sizeof sw), w2->name, tensor_shape_str(w2, s2, sizeof s2));
}

Tensor *ffn_swiglu(Tape *tape, Tensor *x, Tensor *w1, Tensor *w3, Tensor *w2, Tensor **hidden_out) {
    check_ffn_weights(w1, w2);
    char s1[64], s3[64];
    TG_CHECK(tensor_same_shape(w1, w3), "ffn_swiglu: gate '%s' %s vs up '%s' %s", w1->name,
             tensor_shape_str(w1, s1, sizeof s1), w3->name, tensor_shape_str(w3, s3, sizeof s3));
    Tensor *gate = op_linear(tape, x, w1);        /* (..., hidden) */
    Tensor *up = op_linear(tape, x, w3);          /* (..., hidden) */
    Tensor *hidden = op_swiglu(tape, gate, up);   /* (..., hidden) */
    Tensor *out = op_linear(tape, hidden, w2);    /* (..., dim) */
    tensor_set_name(gate, "ffn_gate");
    tensor_set_name(up, "ffn_up");
    tensor_set_name(hidden, "ffn_hidden");
    tensor_set_name(out, "ffn_out");
    if (hidden_out) *hidden_out = hidden;
    return out;
}

Tensor *ffn_relu(Tape *tape, Tensor *x, Tensor *w1, Tensor *w2, Tensor **hidden_out) {
    check_ffn_weights(w1, w2);
    Tensor *pre = op_linear(tape, x, w1);         /* (..., hidden) */
    Tensor *hidden = op_relu(tape, pre);          /* (..., hidden) */
    Tensor *out = op_linear(tape, hidden, w2);    /* (..., dim) */
    tensor_set_name(pre, "ffn_pre");
    tensor_set_name(hidden, "ffn_hidden");
    tensor_set_name(out, "ffn_out");
    if (hidden_out) *hidden_out = hidden;
    return out;
}
