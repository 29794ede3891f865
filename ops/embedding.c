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

/* ---- rows replaced: a table whose named rows come from a tensor of their own ----
 *
 * LoRA's trainable token rows (model/lora.c): the base's embedding stays frozen while the rows of a
 * few tokens train, and the embedding and the tied head both read the table with those rows in. */

/* Forward: out = table, then out[ids[j], :] = rows[j, :] for each j < K (the ids distinct).
 * Backward: dtable += dout on every row but the replaced ones (their value did not come from the
 * table); drows[j] += dout[ids[j], :]. */
static void rows_replaced_backward(TgTape *tape, TgTapeNode *node) {
    TgTensor *table = node->in[0], *rows = node->in[1], *out = node->out;
    const int32_t *ids = node->saved;
    int64_t k = node->iparam[0], dim = tg_tensor_dim(table, 1), vocab = tg_tensor_dim(table, 0);
    if (tg_tensor_wants_grad(table)) {
        float *dtable = tg_tensor_grad(tape, table);   // (V, D)
        for (int64_t v = 0, j = 0; v < vocab; v++) {     /* ids ascending: one walk */
            if (j < k && ids[j] == v) {
                j++;
                continue;
            }
            for (int64_t d = 0; d < dim; d++) dtable[v * dim + d] += out->grad[v * dim + d];
        }
    }
    if (tg_tensor_wants_grad(rows)) {
        float *drows = tg_tensor_grad(tape, rows);     // (K, D)
        for (int64_t j = 0; j < k; j++)
            for (int64_t d = 0; d < dim; d++) drows[j * dim + d] += out->grad[(int64_t)ids[j] * dim + d];
    }
}

TgTensor *tg_rows_replaced(TgTape *tape, TgTensor *table, TgTensor *rows, const int32_t *ids) {
    TG_CHECK(table->ndim == 2 && rows->ndim == 2 && tg_tensor_dim(rows, 1) == tg_tensor_dim(table, 1),
             "rows_replaced: table '%s' (V, D) and rows '%s' (K, D) disagree", table->name, rows->name);
    int64_t vocab = tg_tensor_dim(table, 0), dim = tg_tensor_dim(table, 1), k = tg_tensor_dim(rows, 0);
    for (int64_t j = 0; j < k; j++)
        TG_CHECK(ids[j] >= 0 && ids[j] < vocab && (j == 0 || ids[j] > ids[j - 1]),
                 "rows_replaced: the ids must be ascending within [0, %lld); id %d at %lld", (long long)vocab,
                 (int)ids[j], (long long)j);
    TgTensor *out = tg_tensor_new(tape->arena, "rows_replaced", 2, (int64_t[]){vocab, dim});   // (V, D)
    memcpy(out->data, table->data, (size_t)(vocab * dim) * sizeof(float));
    for (int64_t j = 0; j < k; j++)
        memcpy(out->data + (int64_t)ids[j] * dim, rows->data + j * dim, (size_t)dim * sizeof(float));
    TgTapeNode *node = tg_tape_record(tape, tg_op_name(TG_OP_ROWS_REPLACED), rows_replaced_backward, out, 2,
                                      (TgTensor *[]){table, rows});
    if (node) {
        int32_t *saved_ids = tg_arena_alloc(tape->arena, (size_t)(k > 0 ? k : 1) * sizeof(int32_t));   // (K)
        if (k > 0) memcpy(saved_ids, ids, (size_t)k * sizeof(int32_t));
        node->saved = saved_ids;
        node->iparam[0] = k;
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

/* ---- gradient checks of rows_replaced: the table and the rows, the first and last rows replaced too ---- */

static const int32_t rr_ids_3[] = {0, 4, 6};
static const int32_t rr_ids_1[] = {2};

static TgTensor *fwd_rows_replaced_3(TgTape *t, TgTensor *const *in, void *ctx) {
    (void)ctx;
    return tg_rows_replaced(t, in[0], in[1], rr_ids_3);
}

static TgTensor *fwd_rows_replaced_1(TgTape *t, TgTensor *const *in, void *ctx) {
    (void)ctx;
    return tg_rows_replaced(t, in[0], in[1], rr_ids_1);
}

static const TgOpCheck rows_replaced_cases[] = {
    {.variant = "V7 D5 K3 first and last", .inputs = {{"table", {7, 5}}, {"rows", {3, 5}}}, .forward = fwd_rows_replaced_3},
    {.variant = "V4 D3 K1", .inputs = {{"table", {4, 3}}, {"rows", {1, 3}}}, .forward = fwd_rows_replaced_1},
};
const TgOpCheckList tg_rows_replaced_checks = TG_OP_CHECK_LIST(rows_replaced_cases);
