/* Rotary position embedding, half-split pairing (Llama / MiniMind):
 *   x' = x * cos + rotate_half(x) * sin,   rotate_half([a, b, c, d]) = [-c, -d, a, b]
 * i.e. per head, for i < h = hd/2 and angle = pos * theta^(-2i/hd):
 *   x'[i]     = x[i]     * cos - x[i + h] * sin
 *   x'[i + h] = x[i + h] * cos + x[i]     * sin
 * Each pair (x[i], x[i+h]) is rotated by its angle, so q.k depends on positions only through
 * their difference. */
#include <math.h>
#include <stdlib.h>

#include "lib/checked.h"
#include "tapegrad/error.h"
#include "lib/kernels.h"
#include "ops/checks.h"
#include "tapegrad/ops.h"

void tg_rope_table_init(TgRopeTable *rope, int64_t max_pos, int64_t head_dim, double theta) {
    TG_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim %lld must be even and > 0",
             (long long)head_dim);
    TG_CHECK(max_pos > 0 && theta > 0.0, "rope: max_pos %lld, theta %g", (long long)max_pos, theta);
    const int64_t half = head_dim / 2;
    rope->max_pos = max_pos;
    rope->head_dim = head_dim;
    rope->theta = theta;
    int64_t entries;
    size_t bytes;
    TG_CHECK(tg_mul_i64(max_pos, half, &entries) && tg_bytes_of(entries, sizeof(float), &bytes),
             "rope: a table of %lld positions x %lld pairs does not fit in memory", (long long)max_pos, (long long)half);
    rope->cos = tg_malloc(bytes);  /* (max_pos, hd/2) */
    rope->sin = tg_malloc(bytes);  /* (max_pos, hd/2) */
    /* in double: at position 10^4 a float angle would already be off by ~1e-3 rad */
    for (int64_t i = 0; i < half; i++) {
        double inv_freq = pow(theta, -2.0 * (double)i / (double)head_dim);
        for (int64_t pos = 0; pos < max_pos; pos++) {
            double angle = (double)pos * inv_freq;
            rope->cos[pos * half + i] = (float)cos(angle);
            rope->sin[pos * half + i] = (float)sin(angle);
        }
    }
}

void tg_rope_table_free(TgRopeTable *rope) {
    free(rope->cos);
    free(rope->sin);
    rope->cos = rope->sin = NULL;
}

void tg_rope_rotate_half(const float *x, float *out, int64_t d) {
    TG_CHECK(d % 2 == 0, "rotate_half of odd length %lld", (long long)d);
    TG_CHECK(x != out, "rotate_half cannot work in place");
    const int64_t half = d / 2;
    for (int64_t i = 0; i < half; i++) {
        out[i] = -x[i + half];
        out[i + half] = x[i];
    }
}

typedef struct {
    const TgRopeTable *rope;
    int64_t seq_len, heads, pos_offset;
    const float *in;  /* (B*T, heads*hd): x in the forward, dy in the backward */
    float *out;       /* (B*T, heads*hd): y in the forward, dx in the backward */
    bool accumulate;  /* backward: add into dx (else store) */
} RopeJob;

/* The rotation of each row's heads is a kernel of the active path (lib/kernels.h):
 * forward:   [x'_i, x'_{i+h}] = [[cos, -sin], [sin, cos]] [x_i, x_{i+h}]
 * backward:  the matrix is orthogonal, so [dx_i, dx_{i+h}] += its transpose times
 *            [dy_i, dy_{i+h}]: dx_i += dy_i cos + dy_{i+h} sin, dx_{i+h} += dy_{i+h} cos - dy_i sin */
static void rope_rows(const RopeJob *job, int64_t begin, int64_t end, bool backward) {
    const int64_t hd = job->rope->head_dim, half = hd / 2, width = job->heads * hd;
    const TgKernels *kernels = tg_kernels();
    TgRopeMode mode = !backward ? TG_ROPE_FORWARD : job->accumulate ? TG_ROPE_BACKWARD_ADD : TG_ROPE_BACKWARD;
    for (int64_t row = begin; row < end; row++) {
        int64_t pos = job->pos_offset + row % job->seq_len;
        kernels->rope(job->in + row * width, job->out + row * width, job->rope->cos + pos * half,
                      job->rope->sin + pos * half, job->heads, hd, mode);
    }
}

static void rope_forward_rows(void *ctx, int64_t begin, int64_t end, int thread) {
    rope_rows(ctx, begin, end, false);
}
static void rope_backward_rows(void *ctx, int64_t begin, int64_t end, int thread) {
    rope_rows(ctx, begin, end, true);
}

static void rope_backward(TgTape *tape, TgTapeNode *node) {
    TgTensor *x = node->in[0], *y = node->out;
    if (!tg_tensor_wants_grad(x)) return;
    RopeJob job = {node->saved, x->shape[1], node->iparam[0], node->iparam[1], y->grad, NULL, false};
    job.out = tg_tensor_grad_for_write(tape, x, &job.accumulate);
    tg_pool_parallel_for(tg_pool_if_worth(tape->pool, 2 * x->numel), tg_tensor_rows(x), rope_backward_rows, &job);
}

static TgTensor *rope_forward(TgTape *tape, TgTensor *x, int64_t heads, const TgRopeTable *rope, int64_t pos_offset,
                            bool in_place) {
    char shape_str[64];
    TG_CHECK(x->ndim == 3, "rope: x '%s' is %s; expected (B, T, heads*head_dim)", x->name,
             tg_tensor_shape_str(x, shape_str, sizeof shape_str));
    const int64_t seq_len = x->shape[1], hd = rope->head_dim;
    TG_CHECK(hd > 0 && hd % 2 == 0, "rope: head_dim %lld must be even", (long long)hd);
    TG_CHECK(heads > 0 && x->shape[2] == heads * hd, "rope: x '%s' last dim %lld != %lld heads x %lld",
             x->name, (long long)x->shape[2], (long long)heads, (long long)hd);
    TG_CHECK(pos_offset >= 0 && pos_offset + seq_len <= rope->max_pos,
             "rope: positions %lld..%lld past the table's %lld (raise max_pos)",
             (long long)pos_offset, (long long)(pos_offset + seq_len - 1), (long long)rope->max_pos);
    /* (B, T, heads*hd); in place is safe: each pair is read before it is written */
    TgTensor *y = in_place ? tg_tensor_view(tape->arena, "rope", x->data, 3, x->shape)
                         : tg_tensor_new(tape->arena, "rope", 3, x->shape);
    RopeJob job = {rope, seq_len, heads, pos_offset, x->data, y->data, false};
    tg_pool_parallel_for(tg_pool_if_worth(tape->pool, 2 * x->numel), tg_tensor_rows(x), rope_forward_rows, &job);
    TgTapeNode *node = tg_tape_record(tape, tg_op_name(TG_OP_ROPE), rope_backward, y, 1, &x);
    if (node) {
        node->saved = (void *)rope;  /* read only; the table outlives the step */
        node->iparam[0] = heads;
        node->iparam[1] = pos_offset;
    }
    return y;
}

TgTensor *tg_rope(TgTape *tape, TgTensor *x, int64_t heads, const TgRopeTable *rope, int64_t pos_offset) {
    return rope_forward(tape, x, heads, rope, pos_offset, false);
}

TgTensor *tg_rope_inplace(TgTape *tape, TgTensor *x, int64_t heads, const TgRopeTable *rope, int64_t pos_offset) {
    return rope_forward(tape, x, heads, rope, pos_offset, true);
}

/* ---- gradient checks (tapegrad/op_list.h) ---- */

/* The table is built on first use and kept for the process (a few kilobytes at most), for
 * positions up to ROPE_CHECK_POSITIONS: pos_offset + T of every case stays within it. */
enum { ROPE_CHECK_POSITIONS = 32 };

typedef struct {
    int64_t heads, head_dim, pos_offset;
    double theta;
    TgRopeTable table;
    bool ready;
} RopeCase;

static TgTensor *fwd_rope(TgTape *t, TgTensor *const *in, void *ctx) {
    RopeCase *c = ctx;
    if (!c->ready) {
        tg_rope_table_init(&c->table, ROPE_CHECK_POSITIONS, c->head_dim, c->theta);
        c->ready = true;
    }
    return tg_rope(t, in[0], c->heads, &c->table, c->pos_offset);
}
/* in place over a copy: the checker perturbs its inputs and must find them unchanged */
static TgTensor *fwd_rope_inplace(TgTape *t, TgTensor *const *in, void *ctx) {
    RopeCase *c = ctx;
    fwd_rope(t, in, ctx);   /* builds the table */
    return tg_rope_inplace(t, tg_scale(t, in[0], 1.0f), c->heads, &c->table, c->pos_offset);
}

/* theta 1e6 (the model's) turns only the first pairs visibly at positions < 16; theta 10 turns
 * every pair by a non-trivial angle. */
static RopeCase rope_pos0_theta1e6 = {.heads = 2, .head_dim = 8, .pos_offset = 0, .theta = 1e6};
static RopeCase rope_pos5_theta1e6 = {.heads = 2, .head_dim = 8, .pos_offset = 5, .theta = 1e6};
static RopeCase rope_pos5_theta10 = {.heads = 2, .head_dim = 8, .pos_offset = 5, .theta = 10};
static RopeCase rope_pos9_theta10 = {.heads = 2, .head_dim = 8, .pos_offset = 9, .theta = 10};
static RopeCase rope_hd2_theta10 = {.heads = 3, .head_dim = 2, .pos_offset = 2, .theta = 10};

/* Odd position offsets (a KV cache resumes anywhere) against head dims whose hd/2 pairs are one
 * past or short of the rotation kernel's vectors of 4, 8 and 16 floats: 1, 3, 5, 9, 17 pairs.
 * 3 heads of 5 tokens at theta 10, so every pair turns. */
#define ROPE_CASE(pos, hd)                                                                                 \
    {.variant = "B1 T5 H3 hd" #hd " pos" #pos " th10", .inputs = {{"x", {1, 5, 3 * (hd)}}},                \
     .forward = fwd_rope, .ctx = &(RopeCase){.heads = 3, .head_dim = hd, .pos_offset = pos, .theta = 10}},
#define ROPE_RAGGED_HEAD_DIMS(pos)                                                               \
    ROPE_CASE(pos, 2) ROPE_CASE(pos, 6) ROPE_CASE(pos, 10) ROPE_CASE(pos, 18) ROPE_CASE(pos, 34)

static const TgOpCheck rope_cases[] = {
    {.variant = "B2 T7 H2 hd8 pos0 th1e6", .inputs = {{"x", {2, 7, 16}}}, .forward = fwd_rope,
     .ctx = &rope_pos0_theta1e6},
    {.variant = "B2 T7 H2 hd8 pos5 th1e6", .inputs = {{"x", {2, 7, 16}}}, .forward = fwd_rope,
     .ctx = &rope_pos5_theta1e6},
    {.variant = "B2 T7 H2 hd8 pos5 th10", .inputs = {{"x", {2, 7, 16}}}, .forward = fwd_rope,
     .ctx = &rope_pos5_theta10},
    {.variant = "B2 T1 H2 hd8 pos9 th10", .inputs = {{"x", {2, 1, 16}}}, .forward = fwd_rope,
     .ctx = &rope_pos9_theta10},
    {.variant = "in place B2 T7 H2 hd8 pos5", .inputs = {{"x", {2, 7, 16}}}, .forward = fwd_rope_inplace,
     .ctx = &rope_pos5_theta1e6},
    {.variant = "B1 T3 H3 hd2 pos2 th10", .inputs = {{"x", {1, 3, 6}}}, .forward = fwd_rope, .ctx = &rope_hd2_theta10},
    ROPE_RAGGED_HEAD_DIMS(1) ROPE_RAGGED_HEAD_DIMS(7) ROPE_RAGGED_HEAD_DIMS(11)
    {.variant = "in place B1 T5 H3 hd18 pos3", .inputs = {{"x", {1, 5, 54}}}, .forward = fwd_rope_inplace,
     .ctx = &(RopeCase){.heads = 3, .head_dim = 18, .pos_offset = 3, .theta = 10}},
};
const TgOpCheckList tg_rope_checks = TG_OP_CHECK_LIST(rope_cases);
