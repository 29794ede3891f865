/* Embedding lookup: out[n, :] = table[ids[n], :].
 *
 * table (V, D); ids has `ndim` dims (N tokens in all); out (ids' shape..., D).
 * The ids are copied into the arena so the backward does not depend on the caller's buffer
 * outliving the forward.
 */
#include <string.h>

#include "tapegrad/error.h"
#include "ops/checks.h"
#include "tapegrad/ops.h"

typedef struct {
    const float *table;     /* (V, D) */
    const int32_t *ids;     /* (N) */
    float *out;             /* (N, D) */
    float *dtable;          /* (V, D) */
    const float *dout;      /* (N, D) */
    int64_t n_tokens, dim;
} EmbeddingJob;

/* Parallel over tokens: each copies one row. */
static void embedding_forward_range(void *ctx_, int64_t begin, int64_t end, int thread) {
    const EmbeddingJob *job = ctx_;
    for (int64_t n = begin; n < end; n++)
        memcpy(job->out + n * job->dim, job->table + (int64_t)job->ids[n] * job->dim,
               (size_t)job->dim * sizeof(float));
}

/* Forward: out[n, :] = table[ids[n], :]
 * Backward: dtable[ids[n], :] += dout[n, :] for every token n.
 * A repeated id receives the sum of its tokens' gradients. Split over columns [begin, end) of
 * D, each thread walking all tokens in order: no two threads touch the same element, and every
 * element sums its tokens in token order, so the result is bitwise the same on any thread
 * count. */
static void embedding_backward_range(void *ctx_, int64_t begin, int64_t end, int thread) {
    const EmbeddingJob *job = ctx_;
    for (int64_t n = 0; n < job->n_tokens; n++) {
        float *dst = job->dtable + (int64_t)job->ids[n] * job->dim;   // (D)
        const float *src = job->dout + n * job->dim;                  // (D)
        for (int64_t d = begin; d < end; d++) dst[d] += src[d];
    }
}

static void embedding_backward(TgTape *tape, TgTapeNode *node) {
    TgTensor *table = node->in[0], *out = node->out;
    EmbeddingJob job = {
        .ids = node->saved,
        .dtable = tg_tensor_grad(tape, table),
        .dout = out->grad,
        .n_tokens = node->iparam[0],
        .dim = tg_tensor_dim(table, 1),
    };
    tg_pool_parallel_for(tape->pool, job.dim, embedding_backward_range, &job);
}

TgTensor *tg_embedding(TgTape *tape, TgTensor *table, const int32_t *ids, int ndim, const int64_t *shape) {
    TG_CHECK(table->ndim == 2, "embedding table '%s' must be 2-d (V, D)", table->name);
    TG_CHECK(ndim >= 0 && ndim < TG_MAX_DIMS, "embedding: ids have %d dims; at most %d", ndim,
             TG_MAX_DIMS - 1);
    int64_t vocab = tg_tensor_dim(table, 0), dim = tg_tensor_dim(table, 1);
    int64_t out_shape[TG_MAX_DIMS];
    int64_t n_tokens = 1;
    for (int i = 0; i < ndim; i++) {
        TG_CHECK(shape[i] >= 0, "embedding: ids dim %d is %lld", i, (long long)shape[i]);
        out_shape[i] = shape[i];
        n_tokens *= shape[i];
    }
    out_shape[ndim] = dim;
    for (int64_t n = 0; n < n_tokens; n++)
        TG_CHECK(ids[n] >= 0 && ids[n] < vocab, "embedding '%s': id %d at token %lld outside [0, %lld)",
                 table->name, (int)ids[n], (long long)n, (long long)vocab);

    TgTensor *out = tg_tensor_new(tape->arena, "embedding", ndim + 1, out_shape);   // (shape..., D)
    EmbeddingJob job = {.table = table->data, .ids = ids, .out = out->data, .n_tokens = n_tokens, .dim = dim};
    tg_pool_parallel_for(tape->pool, n_tokens, embedding_forward_range, &job);

    TgTapeNode *node = tg_tape_record(tape, tg_op_name(TG_OP_EMBEDDING), embedding_backward, out, 1, &table);
    if (node) {
        int32_t *saved_ids = tg_arena_alloc(tape->arena, (size_t)n_tokens * sizeof(int32_t));   // (N)
        if (n_tokens > 0) memcpy(saved_ids, ids, (size_t)n_tokens * sizeof(int32_t));
        node->saved = saved_ids;
        node->iparam[0] = n_tokens;
    }
    return out;
}

/* ---- gradient checks (tapegrad/op_list.h): the table; the ids repeat so the scatter-add accumulates ---- */

typedef struct {
    const int32_t *ids;
    int ndim;
    int64_t shape[3];
} EmbeddingCheckParams;

static const int32_t emb_ids_2x5[] = {3, 1, 3, 7, 0, 9, 3, 1, 1, 5};
static const int32_t emb_ids_same[] = {2, 2, 2, 2};
static EmbeddingCheckParams emb_2x5 = {emb_ids_2x5, 2, {2, 5}};
static EmbeddingCheckParams emb_same = {emb_ids_same, 1, {4}};

static TgTensor *fwd_embedding(TgTape *t, TgTensor *const *in, void *ctx) {
    const EmbeddingCheckParams *p = ctx;
    return tg_embedding(t, in[0], p->ids, p->ndim, p->shape);
}

static const TgOpCheck embedding_cases[] = {
    {.variant = "V10 D6 ids 2x5 repeats", .inputs = {{"table", {10, 6}}}, .forward = fwd_embedding, .ctx = &emb_2x5},
    {.variant = "V3 D5 one id 4 times", .inputs = {{"table", {3, 5}}}, .forward = fwd_embedding, .ctx = &emb_same},
};
const TgOpCheckList tg_embedding_checks = TG_OP_CHECK_LIST(embedding_cases);
