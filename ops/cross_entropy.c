/* Cross-entropy of logits against integer targets, mean over the counted rows:
 *
 *     loss = (1 / count) sum_{r : target_r != ignore} (logsumexp(z_r) - z_r[target_r])
 *
 * logits (..., V) seen as (R, V); targets (R). A row whose target is ignore_index adds nothing
 * to the loss, to the count or to the gradient; when every row is ignored the loss is 0.
 * The softmax is never stored: the backward recomputes it from the saved row logsumexp.
 */
#include <math.h>
#include <string.h>

#include "tapegrad/error.h"
#include "lib/kernels.h"
#include "ops/checks.h"
#include "tapegrad/ops.h"

typedef struct {
    float *lse;          /* (R): logsumexp of each counted row */
    int32_t *targets;    /* (R): a copy of the caller's targets */
} CrossEntropySaved;

typedef struct {
    const float *logits;      /* (R, V) */
    const int32_t *targets;   /* (R) */
    int32_t ignore_index;
    int64_t vocab;
    float *lse;               /* (R) */
    double *row_loss;         /* (R): forward only */
    float *dlogits;           /* (R, V): backward only; may be `logits` itself (see below) */
    bool accumulate;          /* backward: add into dlogits (else store, zeros on ignored rows) */
    float dloss_per_row;      /* backward only: dloss / count */
} CrossEntropyJob;

/* lse_r = m + log(sum_i exp(z_ri - m)), m = max_i z_ri: subtracting the max keeps every exp
 * in (0, 1], and the sum runs in double so 6400 terms lose nothing that matters. The exps are
 * a kernel of the active path (lib/kernels.h), vectorised. */
static void cross_entropy_forward_range(void *ctx_, int64_t begin, int64_t end, int thread) {
    const CrossEntropyJob *job = ctx_;
    const TgKernels *kernels = tg_kernels();
    for (int64_t r = begin; r < end; r++) {
        job->row_loss[r] = 0.0;
        int32_t target = job->targets[r];
        if (target == job->ignore_index) continue;
        const float *z = job->logits + r * job->vocab;   // (V)
        double lse = kernels->logsumexp(z, job->vocab);
        job->lse[r] = (float)lse;
        job->row_loss[r] = lse - (double)z[target];
    }
}

/* Forward: loss = (1/count) sum_r (lse_r - z_r[t_r])
 * Backward: dz_ri += dloss / count * (softmax(z_r)_i - [i == t_r]), softmax(z_r)_i = exp(z_ri - lse_r),
 * for counted rows only. */
static void cross_entropy_backward_range(void *ctx_, int64_t begin, int64_t end, int thread) {
    const CrossEntropyJob *job = ctx_;
    const TgKernels *kernels = tg_kernels();
    for (int64_t r = begin; r < end; r++) {
        int32_t target = job->targets[r];
        const float *z = job->logits + r * job->vocab;   // (V)
        float *dz = job->dlogits + r * job->vocab;       // (V), may be z: each z_i is read before dz_i is written
        if (target == job->ignore_index) {
            if (!job->accumulate) memset(dz, 0, (size_t)job->vocab * sizeof(float));
            continue;
        }
        kernels->scaled_exp(z, job->vocab, job->lse[r], job->dloss_per_row, dz, job->accumulate);
        dz[target] -= job->dloss_per_row;
    }
}

/* With `consume` (the logits' values are needed by nobody after the loss: the head's backward
 * reads its input and weight, not its output), a first gradient is written over the logits
 * themselves, which saves a (R, V) buffer: 52 MB at B=8, T=256, V=6400. */
static void cross_entropy_backward(TgTape *tape, TgTapeNode *node) {
    int64_t count = node->iparam[0];
    if (count == 0) return;   /* every row ignored: the loss is the constant 0 */
    TgTensor *logits = node->in[0];
    const CrossEntropySaved *saved = node->saved;
    bool consume = node->iparam[2] != 0;
    CrossEntropyJob job = {
        .logits = logits->data,
        .targets = saved->targets,
        .ignore_index = (int32_t)node->iparam[1],
        .vocab = tg_tensor_dim(logits, -1),
        .lse = saved->lse,
        .dloss_per_row = (float)((double)node->out->grad[0] / (double)count),
    };
    if (consume && !logits->grad) {
        logits->grad = logits->data;
        job.dlogits = logits->grad;
        job.accumulate = false;
    } else {
        job.dlogits = tg_tensor_grad_for_write(tape, logits, &job.accumulate);
    }
    tg_pool_parallel_for(tape->pool, tg_tensor_rows(logits), cross_entropy_backward_range, &job);
}

static TgTensor *cross_entropy_forward(TgTape *tape, TgTensor *logits, const int32_t *targets, int32_t ignore_index,
                                     bool consume) {
    TG_CHECK(logits->ndim >= 1 && tg_tensor_dim(logits, -1) >= 1,
             "cross_entropy: logits '%s' must be (..., V) with V >= 1", logits->name);
    int64_t rows = tg_tensor_rows(logits), vocab = tg_tensor_dim(logits, -1);
    int64_t count = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (targets[r] == ignore_index) continue;
        TG_CHECK(targets[r] >= 0 && targets[r] < vocab,
                 "cross_entropy '%s': target %d at row %lld outside [0, %lld) and not ignore_index %d",
                 logits->name, (int)targets[r], (long long)r, (long long)vocab, (int)ignore_index);
        count++;
    }

    TgTensor *loss = tg_tensor_new(tape->arena, "cross_entropy", 0, NULL);   // scalar
    bool recording = tape->grad_enabled && logits->requires_grad;
    CrossEntropySaved *saved = NULL;
    CrossEntropyJob job = {.logits = logits->data, .targets = targets, .ignore_index = ignore_index,
                           .vocab = vocab};
    if (recording) {
        saved = tg_arena_alloc(tape->arena, sizeof *saved);
        saved->lse = tg_arena_alloc(tape->arena, (size_t)rows * sizeof(float));            // (R)
        saved->targets = tg_arena_alloc(tape->arena, (size_t)rows * sizeof(int32_t));      // (R)
        if (rows > 0) memcpy(saved->targets, targets, (size_t)rows * sizeof(int32_t));
    }
    TgArenaMark scratch_mark = tg_arena_mark(tape->arena);
    job.lse = recording ? saved->lse : tg_arena_alloc(tape->arena, (size_t)rows * sizeof(float));
    job.row_loss = tg_arena_alloc(tape->arena, (size_t)rows * sizeof(double));              // (R)
    tg_pool_parallel_for(tape->pool, rows, cross_entropy_forward_range, &job);
    /* summed in row order on the caller: the same bits on any thread count */
    double total = 0.0;
    for (int64_t r = 0; r < rows; r++) total += job.row_loss[r];
    loss->data[0] = count > 0 ? (float)(total / (double)count) : 0.0f;
    tg_arena_rewind(tape->arena, scratch_mark);

    TgTapeNode *node = tg_tape_record(tape, tg_op_name(TG_OP_CROSS_ENTROPY), cross_entropy_backward, loss, 1, &logits);
    TG_CHECK((node != NULL) == recording, "cross_entropy: tape recorded %d, expected %d", node != NULL,
             recording);
    if (node) {
        node->saved = saved;
        node->iparam[0] = count;
        node->iparam[1] = ignore_index;
        node->iparam[2] = consume;
    }
    return loss;
}

TgTensor *tg_cross_entropy(TgTape *tape, TgTensor *logits, const int32_t *targets, int32_t ignore_index) {
    return cross_entropy_forward(tape, logits, targets, ignore_index, false);
}

TgTensor *tg_cross_entropy_consuming(TgTape *tape, TgTensor *logits, const int32_t *targets, int32_t ignore_index) {
    /* the backward writes over the logits' values: refuse when anything still needs them */
    if (tape->grad_enabled && logits->requires_grad) {
        TG_CHECK(tg_tape_find_producer(tape, logits) != NULL,
                 "cross_entropy_consuming: logits '%s' were not computed on this tape (a parameter or "
                 "the caller's tensor) and would be overwritten; use tg_cross_entropy",
                 logits->name);
        const TgTapeNode *reader = tg_tape_find_reader(tape, logits->data);
        TG_CHECK(reader == NULL,
                 "cross_entropy_consuming: the backward of '%s' reads the values of logits '%s', which "
                 "this loss overwrites; use tg_cross_entropy",
                 reader ? reader->op : "", logits->name);
    }
    return cross_entropy_forward(tape, logits, targets, ignore_index, true);
}

/* ---- gradient checks (tapegrad/op_list.h): the logits; some targets ignored ---- */

typedef struct {
    const int32_t *targets;
    int32_t ignore_index;
} CrossEntropyCheckParams;

static const int32_t ce_targets_6[] = {3, -1, 10, 0, -1, 7};
static const int32_t ce_targets_2x3[] = {4, 0, -1, 2, 2, 1};
static const int32_t ce_targets_none[] = {-1, -1, -1};
static const int32_t ce_targets_100[] = {6, -100, 0, 6};
static CrossEntropyCheckParams ce_6 = {ce_targets_6, TG_IGNORE_INDEX};
static CrossEntropyCheckParams ce_2x3 = {ce_targets_2x3, TG_IGNORE_INDEX};
static CrossEntropyCheckParams ce_none = {ce_targets_none, TG_IGNORE_INDEX};
static CrossEntropyCheckParams ce_100 = {ce_targets_100, -100};

static TgTensor *fwd_cross_entropy(TgTape *t, TgTensor *const *in, void *ctx) {
    const CrossEntropyCheckParams *p = ctx;
    return tg_cross_entropy(t, in[0], p->targets, p->ignore_index);
}
/* dlogits written over the logits: over a copy, as the checker reuses its inputs */
static TgTensor *fwd_cross_entropy_consuming(TgTape *t, TgTensor *const *in, void *ctx) {
    const CrossEntropyCheckParams *p = ctx;
    return tg_cross_entropy_consuming(t, tg_scale(t, in[0], 1.0f), p->targets, p->ignore_index);
}

/* Targets made from the shape, for a grid: row r is ignored when r % 3 == 1, else its target is
 * (V - 1 + 5 r) mod V, so row 0 aims at the last column, in the vector kernels' tail. ctx: the
 * ignore index, an int32_t. */
static TgTensor *fwd_cross_entropy_patterned(TgTape *t, TgTensor *const *in, void *ignore_index) {
    int64_t rows = tg_tensor_rows(in[0]), vocab = tg_tensor_dim(in[0], -1);
    int32_t ignore = *(const int32_t *)ignore_index;
    int32_t *targets = tg_arena_alloc(t->arena, (size_t)rows * sizeof *targets);   // (rows)
    for (int64_t r = 0; r < rows; r++) targets[r] = r % 3 == 1 ? ignore : (int32_t)((vocab - 1 + 5 * r) % vocab);
    return tg_cross_entropy(t, in[0], targets, ignore);
}

/* vocabularies one short of and one past multiples of the exps' vectors of 4, 8 and 16 floats,
 * and 1 */
#define CROSS_ENTROPY_CASE(rows, vocab, ignore)                                             \
    {.variant = #rows "x" #vocab " ignore " #ignore, .inputs = {{"logits", {rows, vocab}}}, \
     .forward = fwd_cross_entropy_patterned, .ctx = &(int32_t){ignore}, .lo = -2, .hi = 2},
#define CROSS_ENTROPY_RAGGED_VOCAB(rows, ignore)                              \
    CROSS_ENTROPY_CASE(rows, 1, ignore) CROSS_ENTROPY_CASE(rows, 7, ignore)   \
    CROSS_ENTROPY_CASE(rows, 15, ignore) CROSS_ENTROPY_CASE(rows, 17, ignore) \
    CROSS_ENTROPY_CASE(rows, 33, ignore) CROSS_ENTROPY_CASE(rows, 65, ignore)

static const TgOpCheck cross_entropy_cases[] = {
    {.variant = "6x11, 2 ignored", .inputs = {{"logits", {6, 11}}}, .forward = fwd_cross_entropy, .ctx = &ce_6,
     .lo = -2, .hi = 2},
    {.variant = "consuming 6x11, 2 ignored", .inputs = {{"logits", {6, 11}}}, .forward = fwd_cross_entropy_consuming,
     .ctx = &ce_6, .lo = -2, .hi = 2},
    {.variant = "2x3x5, 1 ignored", .inputs = {{"logits", {2, 3, 5}}}, .forward = fwd_cross_entropy, .ctx = &ce_2x3,
     .lo = -2, .hi = 2},
    {.variant = "3x11, all ignored", .inputs = {{"logits", {3, 11}}}, .forward = fwd_cross_entropy, .ctx = &ce_none,
     .lo = -2, .hi = 2},
    {.variant = "4x7, ignore -100", .inputs = {{"logits", {4, 7}}}, .forward = fwd_cross_entropy, .ctx = &ce_100,
     .lo = -2, .hi = 2},
    /* 5 rows, 1 and 4 ignored; the other ignore index, and 1 row with nothing ignored */
    CROSS_ENTROPY_RAGGED_VOCAB(5, -1) CROSS_ENTROPY_CASE(5, 7, -100) CROSS_ENTROPY_CASE(5, 33, -100)
    CROSS_ENTROPY_CASE(1, 17, -1) CROSS_ENTROPY_CASE(1, 65, -1)
};
const TgOpCheckList tg_cross_entropy_checks = TG_OP_CHECK_LIST(cross_entropy_cases);
