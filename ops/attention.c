/* Causal grouped-query attention: out = softmax(Q K^T / sqrt(hd) + causal mask) V per head.
 *
 * Shapes: q (B, Tq, H*hd), k and v (B, Tk, KVH*hd), out (B, Tq, H*hd). Query head h reads KV
 * head g = h / (H / KVH). Query t sits at absolute position pos(t) = Tk - Tq + t and sees keys
 * 0 ..= pos(t). The masked keys cost no work and hold no -inf: only the queries' blocking
 * computes up to 3 scores past a row's diagonal, which are then replaced by zeros.
 *
 * Packed rows (tg_attention_segmented): a row of B may hold several sequences one after the
 * other (conversations packed into one training window). Query t of row b then sees only keys
 * first(b, t) ..= pos(t), first = key_start[b Tq + t], the start of its own sequence; key_start
 * never decreases along a row. The keys before first are masked like those after pos(t): a
 * block of queries computes its scores from the first key of its first query, rounded down to a
 * block of keys (those of earlier sequences cost nothing beyond that), and the scores of a row
 * before its own first key are replaced by zeros. Zeros times finite values add nothing, so a
 * sequence's outputs are bitwise the same whatever shares its row, as long as it keeps its place.
 *
 * What the backward keeps: the softmax probabilities P, (B, H, Tq, Tk), of which only the causal
 * part j <= pos(t) (and the zeros just past it) is written -- while they are small. Past a limit
 * (8 MB per call by default: B=16, H=4, T=128 keeps them; B=8, H=8, T=256 would keep 16 MB per
 * layer, 128 MB for 8 layers) the backward recomputes each head's P from Q and K instead, with
 * the same code as the forward, so the gradients come out bitwise the same either way. That
 * costs one more product (Q K^T) and the exps again, a few per cent of a training step at
 * these sizes, and makes the attention's memory linear in T instead of quadratic.
 *
 * The products go through tg_gemm_rows (lib/blas.h), a product of a few rows, not a full GEMM:
 * the blocks are small, causally ragged and run inside the pool's threads, where a threaded
 * OpenBLAS call would oversubscribe the cores. They and the softmax rows run on the active
 * kernel path (lib/kernels.h).
 */
#include <math.h>
#include <string.h>

#include "lib/blas.h"
#include "tapegrad/error.h"
#include "lib/kernels.h"
#include "ops/checks.h"
#include "tapegrad/ops.h"

/* Queries (and, in the backward, keys) are taken BLOCK_ROWS at a time through the shared
 * few-rows product of lib/blas.h. */
enum { BLOCK_ROWS = TG_GEMM_ROWS_MAX };

/* dst (hd, ld_dst) = src^T, src (rows, hd) with row stride ld_src: a head's keys or values
 * transposed, so that "queries against every key" becomes rows times a row-major matrix. */
static void transpose_head(const float *src, int64_t rows, int64_t ld_src, int64_t hd,
                           float *dst, int64_t ld_dst) {
    for (int64_t j = 0; j < rows; j++)
        for (int64_t d = 0; d < hd; d++) dst[d * ld_dst + j] = src[j * ld_src + d];
}

/* Everything the forward and backward loops share. */
typedef struct {
    int64_t batch, q_len, kv_len, heads, kv_heads, head_dim;
    int64_t group;      /* query heads per KV head: heads / kv_heads */
    int64_t offset;     /* absolute position of query 0: kv_len - q_len */
    int64_t q_stride;   /* floats between two tokens of q, out: heads * head_dim */
    int64_t kv_stride;  /* floats between two tokens of k, v: kv_heads * head_dim */
    int64_t key_pad;    /* kv_len rounded up to 16: row stride of the transposed scratch */
    float scale;        /* 1 / sqrt(head_dim) */
    const int32_t *key_start; /* (B, Tq): each query's first key, or NULL: 0 for all */
} AttentionDims;

static AttentionDims attention_dims(const TgTensor *q, const TgTensor *k, int64_t heads,
                                    int64_t kv_heads, const int32_t *key_start) {
    AttentionDims dims;
    dims.key_start = key_start;
    dims.batch = q->shape[0];
    dims.q_len = q->shape[1];
    dims.kv_len = k->shape[1];
    dims.heads = heads;
    dims.kv_heads = kv_heads;
    dims.head_dim = q->shape[2] / heads;
    dims.group = heads / kv_heads;
    dims.offset = dims.kv_len - dims.q_len;
    dims.q_stride = heads * dims.head_dim;
    dims.kv_stride = kv_heads * dims.head_dim;
    dims.key_pad = (dims.kv_len + 15) / 16 * 16;
    dims.scale = (float)(1.0 / sqrt((double)dims.head_dim));
    return dims;
}

/* Queries are taken BLOCK_ROWS at a time and a block runs to the keys of its last query, so the
 * first rows of a block compute up to BLOCK_ROWS - 1 scores past their diagonal. Those are
 * overwritten with zeros, here in a row of P and in the backward in a row of dS: the block's
 * products with V (and K) then add exact zeros for them, and the backward's products over
 * columns, which also run in blocks of BLOCK_ROWS keys, read zeros there too. Zeros are written
 * at [n_keys, n_keys + BLOCK_ROWS - 1), cut at kv_len; beyond that nothing is read. (A zero
 * times a later position's value adds nothing, so rows stay bitwise independent of later
 * positions, as long as those are finite: 0 * inf would be NaN.) */
static void zero_past_diagonal(float *row, int64_t n_keys, int64_t kv_len) {
    int64_t end = n_keys + BLOCK_ROWS - 1 < kv_len ? n_keys + BLOCK_ROWS - 1 : kv_len;
    for (int64_t j = n_keys; j < end; j++) row[j] = 0.0f;
}

/* Query t of batch entry b sees keys row_first ..= pos(t). */
static int64_t row_first(const AttentionDims *dims, int64_t b, int64_t t) {
    return dims->key_start ? dims->key_start[b * dims->q_len + t] : 0;
}

/* The first key column the query block starting at t0 computes: its first query's first key (the
 * smallest of the block: key_start never decreases), rounded down to a block of BLOCK_ROWS keys.
 * The scores in [block_first, row_first) are computed and then replaced by zeros, so that the
 * backward's products over blocks of keys, which start at multiples of BLOCK_ROWS, read zeros
 * there (attention_query_end). */
static int64_t block_first(const AttentionDims *dims, int64_t b, int64_t t0) {
    return row_first(dims, b, t0) / BLOCK_ROWS * BLOCK_ROWS;
}

/* The backward's products over the block of keys at j0 (a multiple of BLOCK_ROWS) read the
 * queries from the first that sees key j0 (causally) to the end of the last block of queries
 * whose block_first is at most j0: the later blocks start past the keys' block, so none of their
 * queries sees those keys, and their rows of P and dS hold nothing there. */
static int64_t attention_query_end(const AttentionDims *dims, int64_t b, int64_t j0) {
    if (!dims->key_start) return dims->q_len;
    int64_t t0 = 0;
    while (t0 < dims->q_len && block_first(dims, b, t0) <= j0) t0 += BLOCK_ROWS;
    return t0 < dims->q_len ? t0 : dims->q_len;
}

/* ---- forward ---- */

/* One query head of one batch entry, as probs_block reads it. */
typedef struct {
    const AttentionDims *dims;
    const TgKernels *kernels;
    int64_t b;           /* the batch entry */
    const float *q;      /* (Tq, hd), rows q_stride apart */
    const float *keys_t; /* its KV head's keys transposed, (hd, key_pad) */
} AttentionHead;

/* Rows [t0, t0 + rows) of the head's P, (rows, ld_p), columns from k0 = block_first on: S = Q K^T
 * over the block's keys, then P_j = exp(scale (s_j - max s)) / sum_i exp(scale (s_i - max s))
 * over each row's keys first ..= pos(t), zeros in [k0, first) and just past the diagonal. The
 * forward and the backward's recomputation both come here, so they get the same bits. */
static void probs_block(const AttentionHead *head, int64_t t0, int rows, float *p_block, int64_t ld_p) {
    const AttentionDims *dims = head->dims;
    const TgKernels *kernels = head->kernels;
    int64_t block_keys = dims->offset + t0 + rows;   /* keys 0 ..= pos(last row) */
    int64_t k0 = block_first(dims, head->b, t0);
    kernels->gemm_rows(rows, dims->head_dim, head->q + t0 * dims->q_stride, dims->q_stride, 1, head->keys_t + k0,
                       dims->key_pad, block_keys - k0, p_block + k0, ld_p, false);
    for (int r = 0; r < rows; r++) {
        float *p_row = p_block + r * ld_p;
        int64_t first = row_first(dims, head->b, t0 + r),
                n_keys = dims->offset + t0 + r + 1; /* keys first ..= pos(t) */
        for (int64_t j = k0; j < first; j++) p_row[j] = 0.0f;
        kernels->softmax_scaled(p_row + first, n_keys - first, dims->scale);
        zero_past_diagonal(p_row, n_keys, dims->kv_len);
    }
}

typedef struct {
    AttentionDims dims;
    const float *q, *k, *v;   /* (B,Tq,H*hd), (B,Tk,KVH*hd), (B,Tk,KVH*hd) */
    float *out;               /* (B,Tq,H*hd) */
    float *probs;             /* (B,H,Tq,Tk) when the tape records, else NULL */
    float *scratch;           /* per thread: keys transposed (hd, key_pad) + P rows (BLOCK_ROWS, key_pad) */
    size_t scratch_floats;    /* per thread */
} AttentionForward;

/* One (batch, head) per unit: the units write disjoint parts of out and probs. */
static void attention_forward_range(void *ctx_, int64_t begin, int64_t end, int thread) {
    const AttentionForward *ctx = ctx_;
    const AttentionDims *dims = &ctx->dims;
    int64_t hd = dims->head_dim, tq = dims->q_len, tk = dims->kv_len;
    float *keys_t = ctx->scratch + (size_t)thread * ctx->scratch_floats;   // (hd, key_pad)
    float *prob_rows = keys_t + (size_t)(hd * dims->key_pad);             // (BLOCK_ROWS, key_pad)
    const TgKernels *kernels = tg_kernels();
    int64_t last_kv_unit = -1;
    for (int64_t unit = begin; unit < end; unit++) {
        int64_t b = unit / dims->heads, h = unit % dims->heads, g = h / dims->group;
        const float *q_bh = ctx->q + b * tq * dims->q_stride + h * hd;     // (Tq, hd)
        const float *k_bg = ctx->k + b * tk * dims->kv_stride + g * hd;    // (Tk, hd)
        const float *v_bg = ctx->v + b * tk * dims->kv_stride + g * hd;    // (Tk, hd)
        float *out_bh = ctx->out + b * tq * dims->q_stride + h * hd;       // (Tq, hd)
        /* consecutive heads of a group share their KV head: transpose its keys once */
        int64_t kv_unit = b * dims->kv_heads + g;
        if (kv_unit != last_kv_unit) transpose_head(k_bg, tk, dims->kv_stride, hd, keys_t, dims->key_pad);
        last_kv_unit = kv_unit;
        const AttentionHead head = {dims, kernels, b, q_bh, keys_t};
        for (int64_t t0 = 0; t0 < tq; t0 += BLOCK_ROWS) {
            int rows = tq - t0 < BLOCK_ROWS ? (int)(tq - t0) : BLOCK_ROWS;
            int64_t block_keys = dims->offset + t0 + rows;   /* keys 0 ..= pos(last row) */
            int64_t ld_p = ctx->probs ? tk : dims->key_pad;
            float *p_block = ctx->probs ? ctx->probs + (unit * tq + t0) * tk : prob_rows;   // (rows, ld_p)
            probs_block(&head, t0, rows, p_block, ld_p);
            /* O = P V, over the keys from the block's first */
            int64_t k0 = block_first(dims, b, t0);
            kernels->gemm_rows(rows, block_keys - k0, p_block + k0, ld_p, 1, v_bg + k0 * dims->kv_stride, dims->kv_stride,
                               hd, out_bh + t0 * dims->q_stride, dims->q_stride, false);
        }
    }
}

/* ---- backward ---- */

typedef struct {
    AttentionDims dims;
    const float *q, *k, *v;     /* (B,Tq,H*hd), (B,Tk,KVH*hd), (B,Tk,KVH*hd) */
    const float *probs;         /* (B,H,Tq,Tk) as the forward kept them, or NULL: recompute */
    const float *dout;          /* (B,Tq,H*hd) */
    float *dq, *dk, *dv;        /* like q, k, v; NULL when that input wants no gradient */
    bool accumulate;            /* add into dq, dk, dv (else the first write stores) */
    float *scratch;             /* per thread: values transposed (hd, key_pad), dS (Tq, key_pad),
                                 * and to recompute P: keys transposed (hd, key_pad), P (Tq, key_pad) */
    size_t scratch_floats;
} AttentionBackward;

/* Forward, per (b, h), with P the softmax of S = scale Q K^T over the causal keys:
 *     O = P V
 * Backward, quoting it:
 *     dV += P^T dO
 *     dP  = dO V^T
 *     dS  = P * (dP - rowsum(dP * P))             (softmax: dS_j = P_j (dP_j - sum_i P_i dP_i))
 *     dQ += scale dS K
 *     dK += scale dS^T Q
 * One unit is one (batch, KV head) with the query heads of its group looped inside, in order:
 * those heads all add into the same dK and dV rows, and nothing else does, so the sums are
 * race-free and in the same order on any thread count. When the gradients are new, the group's
 * first head stores into dK and dV and every head stores its dQ (each product covers its whole
 * block), so nothing needs zeroing first. */

/* One query head in the backward: its rows of every tensor, and its unit's scratch rows. */
typedef struct {
    AttentionHead head;    /* Q (Tq, hd), and K transposed when P is recomputed */
    const float *p;        /* P (Tq, ld_p) */
    int64_t ld_p;          /* Tk for the forward's P, key_pad for a recomputed one */
    const float *dout;     /* dO (Tq, hd) */
    const float *k;        /* K (Tk, hd) */
    const float *values_t; /* V transposed (hd, key_pad) */
    float *dscores;        /* scale dS (Tq, key_pad) */
    float *dq, *dk, *dv;   /* (Tq, hd), (Tk, hd), (Tk, hd); NULL when that input wants no gradient */
    bool add_q, add_kv;    /* add into dQ, into dK and dV (else the products store) */
} HeadBackward;

/* The head's whole P recomputed from Q and K into p (Tq, key_pad), as the forward computed it. */
static void recompute_probs(const AttentionHead *head, float *p) {
    int64_t tq = head->dims->q_len, pad = head->dims->key_pad;
    for (int64_t t0 = 0; t0 < tq; t0 += BLOCK_ROWS)
        probs_block(head, t0, tq - t0 < BLOCK_ROWS ? (int)(tq - t0) : BLOCK_ROWS, p + t0 * pad, pad);
}

/* out_j (+)= sum_{t : pos(t) >= j} A_tj x_t for every key j, in blocks of keys: dV from A = P and
 * x = dO, dK from A = scale dS and x = Q. A block's product reads A^T from the first query that
 * sees the block's first key to attention_query_end (with fewer rows than that it stores zeros). */
static void add_keys_product(const AttentionHead *head, const float *a, int64_t ld_a, const float *x, float *out,
                             bool add) {
    const AttentionDims *dims = head->dims;
    int64_t tk = dims->kv_len;
    for (int64_t j0 = 0; j0 < tk; j0 += BLOCK_ROWS) {
        int rows = tk - j0 < BLOCK_ROWS ? (int)(tk - j0) : BLOCK_ROWS;
        int64_t t_first = j0 > dims->offset ? j0 - dims->offset : 0;
        int64_t t_end = attention_query_end(dims, head->b, j0);
        head->kernels->gemm_rows(rows, t_end > t_first ? t_end - t_first : 0, a + t_first * ld_a + j0, 1, ld_a,
                                 x + t_first * dims->q_stride, dims->q_stride, dims->head_dim,
                                 out + j0 * dims->kv_stride, dims->kv_stride, add);
    }
}

/* scale dS into hb->dscores a block of queries at a time (dP = dO V^T, then the softmax's
 * backward over each row's keys, zeros around them), and dQ (+)= scale dS K from each block. */
static void dscores_and_dq(const HeadBackward *hb) {
    const AttentionDims *dims = hb->head.dims;
    const TgKernels *kernels = hb->head.kernels;
    int64_t tq = dims->q_len, hd = dims->head_dim, pad = dims->key_pad;
    for (int64_t t0 = 0; t0 < tq; t0 += BLOCK_ROWS) {
        int rows = tq - t0 < BLOCK_ROWS ? (int)(tq - t0) : BLOCK_ROWS;
        int64_t block_keys = dims->offset + t0 + rows, k0 = block_first(dims, hb->head.b, t0);
        float *ds_block = hb->dscores + t0 * pad; // (rows, key_pad)
        /* dP = dO V^T */
        kernels->gemm_rows(rows, hd, hb->dout + t0 * dims->q_stride, dims->q_stride, 1, hb->values_t + k0, pad,
                           block_keys - k0, ds_block + k0, pad, false);
        for (int r = 0; r < rows; r++) {
            int64_t first = row_first(dims, hb->head.b, t0 + r), n_keys = dims->offset + t0 + r + 1;
            const float *p_t = hb->p + (t0 + r) * hb->ld_p; // (n_keys)
            float *ds_t = ds_block + r * pad;               // (n_keys)
            /* scale dS_tj = scale P_tj (dP_tj - sum_i P_ti dP_ti), over keys first ..= pos(t) */
            kernels->softmax_backward(p_t + first, ds_t + first, n_keys - first, dims->scale);
            for (int64_t j = k0; j < first; j++) ds_t[j] = 0.0f;
            zero_past_diagonal(ds_t, n_keys, dims->kv_len);
        }
        /* dQ += scale dS K */
        if (hb->dq)
            kernels->gemm_rows(rows, block_keys - k0, ds_block + k0, pad, 1, hb->k + k0 * dims->kv_stride,
                               dims->kv_stride, hd, hb->dq + t0 * dims->q_stride, dims->q_stride, hb->add_q);
    }
}

/* The steps of the derivation above, in its order, for each query head of each unit. */
static void attention_backward_range(void *ctx_, int64_t begin, int64_t end, int thread) {
    const AttentionBackward *ctx = ctx_;
    const AttentionDims *dims = &ctx->dims;
    int64_t hd = dims->head_dim, tq = dims->q_len, tk = dims->kv_len, pad = dims->key_pad;
    float *values_t = ctx->scratch + (size_t)thread * ctx->scratch_floats;   // (hd, key_pad)
    float *dscores = values_t + (size_t)(hd * pad);                            // (Tq, key_pad)
    float *keys_t = dscores + (size_t)(tq * pad);                              // (hd, key_pad), recompute only
    float *probs = keys_t + (size_t)(hd * pad);                                // (Tq, key_pad), recompute only
    const TgKernels *kernels = tg_kernels();
    bool need_dscores = ctx->dq || ctx->dk;
    for (int64_t unit = begin; unit < end; unit++) {
        int64_t b = unit / dims->kv_heads, g = unit % dims->kv_heads;
        size_t kv_base = (size_t)(b * tk * dims->kv_stride + g * hd);
        if (need_dscores) transpose_head(ctx->v + kv_base, tk, dims->kv_stride, hd, values_t, pad);
        if (!ctx->probs) transpose_head(ctx->k + kv_base, tk, dims->kv_stride, hd, keys_t, pad);
        for (int64_t h = g * dims->group; h < (g + 1) * dims->group; h++) {
            size_t q_base = (size_t)(b * tq * dims->q_stride + h * hd);
            HeadBackward hb = {
                .head = {dims, kernels, b, ctx->q + q_base, keys_t},
                .p = ctx->probs ? ctx->probs + (size_t)((b * dims->heads + h) * tq * tk) : probs,
                .ld_p = ctx->probs ? tk : pad,
                .dout = ctx->dout + q_base,
                .k = ctx->k + kv_base,
                .values_t = values_t,
                .dscores = dscores,
                .dq = ctx->dq ? ctx->dq + q_base : NULL,
                .dk = ctx->dk ? ctx->dk + kv_base : NULL,
                .dv = ctx->dv ? ctx->dv + kv_base : NULL,
                .add_q = ctx->accumulate,
                .add_kv = ctx->accumulate || h > g * dims->group, /* a later head of the group adds */
            };
            if (!ctx->probs) recompute_probs(&hb.head, probs);
            /* dV += P^T dO */
            if (hb.dv) add_keys_product(&hb.head, hb.p, hb.ld_p, hb.dout, hb.dv, hb.add_kv);
            /* dS, dQ += scale dS K */
            if (need_dscores) dscores_and_dq(&hb);
            /* dK += scale dS^T Q */
            if (hb.dk) add_keys_product(&hb.head, hb.dscores, pad, hb.head.q, hb.dk, hb.add_kv);
        }
    }
}

/* What a segmented attention keeps for its backward (node->saved; iparam[2] set); an unsegmented
 * one keeps P alone. */
typedef struct {
    float *probs;             /* or NULL: recomputed */
    const int32_t *key_start; /* the caller's (B, Tq) */
} SegmentedSaved;

static void attention_backward(TgTape *tape, TgTapeNode *node) {
    TgTensor *q = node->in[0], *k = node->in[1], *v = node->in[2];
    const SegmentedSaved *segmented = node->iparam[2] ? node->saved : NULL;
    AttentionBackward ctx = {
        .dims = attention_dims(q, k, node->iparam[0], node->iparam[1], segmented ? segmented->key_start : NULL),
        .q = q->data, .k = k->data, .v = v->data,
        .probs = segmented ? segmented->probs : node->saved,
        .dout = node->out->grad,
    };
    /* Gradients are taken here, not in the threads (they come from the arena). All three new:
     * the products store. Any one already there (or an input passed twice): all zeroed, all add. */
    bool new_q = !tg_tensor_wants_grad(q) || !q->grad, new_k = !tg_tensor_wants_grad(k) || !k->grad;
    bool new_v = !tg_tensor_wants_grad(v) || !v->grad;
    ctx.accumulate = !(new_q && new_k && new_v && q != k && k != v && q != v);
    bool accumulate_unused;
    if (tg_tensor_wants_grad(q))
        ctx.dq = ctx.accumulate ? tg_tensor_grad(tape, q) : tg_tensor_grad_for_write(tape, q, &accumulate_unused);
    if (tg_tensor_wants_grad(k))
        ctx.dk = ctx.accumulate ? tg_tensor_grad(tape, k) : tg_tensor_grad_for_write(tape, k, &accumulate_unused);
    if (tg_tensor_wants_grad(v))
        ctx.dv = ctx.accumulate ? tg_tensor_grad(tape, v) : tg_tensor_grad_for_write(tape, v, &accumulate_unused);
    const AttentionDims *dims = &ctx.dims;
    /* per-thread scratch, taken before the parallel loop and given back after it */
    int threads = tg_pool_threads(tape->pool);
    TgArenaMark scratch_mark = tg_arena_mark(tape->arena);
    int64_t per_thread = dims->head_dim + dims->q_len;
    if (!ctx.probs) per_thread *= 2;
    ctx.scratch_floats = (size_t)(per_thread * dims->key_pad);
    ctx.scratch = tg_arena_alloc(tape->arena, (size_t)threads * ctx.scratch_floats * sizeof(float));
    tg_pool_parallel_for(tape->pool, dims->batch * dims->kv_heads, attention_backward_range, &ctx);
    tg_arena_rewind(tape->arena, scratch_mark);
}

/* n bytes as the arena hands them out: rounded up to its alignment */
static double arena_rounded(double n) { return ceil(n / TG_ARENA_ALIGN) * TG_ARENA_ALIGN; }

/* The sizes tg_attention and attention_backward pass to the arena below, for the same shapes. */
TgAttentionArena tg_attention_arena_bytes(int64_t batch, int64_t heads, int64_t q_len, int64_t kv_len, int64_t head_dim,
                                          int threads, bool recording, size_t saved_probs_limit) {
    double f = sizeof(float), key_pad = (double)((kv_len + 15) / 16 * 16), t = threads;
    double probs = (double)batch * (double)heads * (double)q_len * (double)kv_len * f;
    bool saved = recording && probs <= (double)saved_probs_limit;
    TgAttentionArena a;
    double out = (double)batch * (double)q_len * (double)(heads * head_dim) * f;
    a.kept = arena_rounded(sizeof(TgTensor)) + arena_rounded(out) + (saved ? arena_rounded(probs) : 0);
    a.forward_scratch = arena_rounded(t * (double)(head_dim + BLOCK_ROWS) * key_pad * f);
    a.backward_scratch = recording ? arena_rounded(t * (double)(head_dim + q_len) * (saved ? 1 : 2) * key_pad * f) : 0;
    return a;
}

/* key_start (B, Tq): each query's first key, within [0, pos(t)] and never decreasing along a row. */
static void check_key_start(const int32_t *key_start, int64_t batch, int64_t q_len, int64_t offset) {
    for (int64_t b = 0; b < batch; b++)
        for (int64_t t = 0; t < q_len; t++) {
            int64_t first = key_start[b * q_len + t], before = t > 0 ? key_start[b * q_len + t - 1] : 0;
            bool fits = first >= before && first <= offset + t;
            TG_CHECK(fits, "attention: key_start %lld of query %lld in row %lld must be in [%lld, %lld]",
                     (long long)first, (long long)t, (long long)b, (long long)before, (long long)(offset + t));
        }
}

TgTensor *tg_attention(TgTape *tape, TgTensor *q, TgTensor *k, TgTensor *v, int64_t heads, int64_t kv_heads) {
    return tg_attention_segmented(tape, q, k, v, heads, kv_heads, NULL);
}

TgTensor *tg_attention_segmented(TgTape *tape, TgTensor *q, TgTensor *k, TgTensor *v, int64_t heads, int64_t kv_heads,
                                 const int32_t *key_start) {
    char sq[64], sk[64], sv[64];
    tg_tensor_shape_str(q, sq, sizeof sq);
    tg_tensor_shape_str(k, sk, sizeof sk);
    tg_tensor_shape_str(v, sv, sizeof sv);
    TG_CHECK(q->ndim == 3 && k->ndim == 3 && v->ndim == 3,
             "attention: q %s, k %s, v %s must be (B, T, heads*head_dim)", sq, sk, sv);
    TG_CHECK(heads >= 1 && kv_heads >= 1 && heads % kv_heads == 0,
             "attention: heads %lld must be a multiple of kv_heads %lld", (long long)heads,
             (long long)kv_heads);
    TG_CHECK(q->shape[2] > 0 && q->shape[2] % heads == 0,
             "attention: q '%s' %s: last dim not divisible into %lld heads", q->name, sq, (long long)heads);
    int64_t hd = q->shape[2] / heads;
    TG_CHECK(tg_tensor_same_shape(k, v) && k->shape[0] == q->shape[0] && k->shape[2] == kv_heads * hd,
             "attention: q %s, k %s, v %s do not fit heads %lld, kv_heads %lld", sq, sk, sv,
             (long long)heads, (long long)kv_heads);
    TG_CHECK(q->shape[1] >= 1 && k->shape[1] >= q->shape[1],
             "attention: q '%s' has %lld tokens but k '%s' only %lld", q->name,
             (long long)q->shape[1], k->name, (long long)k->shape[1]);

    AttentionForward ctx = {.dims = attention_dims(q, k, heads, kv_heads, key_start),
                            .q = q->data, .k = k->data, .v = v->data};
    const AttentionDims *dims = &ctx.dims;
    if (key_start) check_key_start(key_start, dims->batch, dims->q_len, dims->offset);
    TgTensor *out = tg_tensor_new(tape->arena, "attention", 3, q->shape);   // (B,Tq,H*hd)
    ctx.out = out->data;
    /* the same condition under which tg_tape_record will append a node */
    bool recording = tape->grad_enabled && (q->requires_grad || k->requires_grad || v->requires_grad);
    size_t probs_bytes = (size_t)(dims->batch * heads * dims->q_len * dims->kv_len) * sizeof(float);
    if (recording && probs_bytes <= tape->saved_probs_limit)
        ctx.probs = tg_arena_alloc(tape->arena, probs_bytes);   // (B,H,Tq,Tk)
    int threads = tg_pool_threads(tape->pool);
    TgArenaMark scratch_mark = tg_arena_mark(tape->arena);
    ctx.scratch_floats = (size_t)((hd + BLOCK_ROWS) * dims->key_pad);
    ctx.scratch = tg_arena_alloc(tape->arena, (size_t)threads * ctx.scratch_floats * sizeof(float));
    tg_pool_parallel_for(tape->pool, dims->batch * heads, attention_forward_range, &ctx);
    tg_arena_rewind(tape->arena, scratch_mark);

    TgTapeNode *node = tg_tape_record(tape, tg_op_name(TG_OP_ATTENTION), attention_backward, out, 3, (TgTensor *[]){q, k, v});
    TG_CHECK((node != NULL) == recording, "attention: tape recorded %d, expected %d", node != NULL, recording);
    if (node) {
        node->saved = ctx.probs;   /* NULL: the backward recomputes P */
        node->iparam[0] = heads;
        node->iparam[1] = kv_heads;
        if (key_start) {
            SegmentedSaved *saved = tg_arena_alloc(tape->arena, sizeof *saved);
            *saved = (SegmentedSaved){ctx.probs, key_start};
            node->saved = saved;
            node->iparam[2] = 1;
        }
    }
    return out;
}

/* ---- gradient checks (tapegrad/op_list.h): q (B,Tq,H*hd), k and v (B,Tk,KVH*hd), all three ---- */

typedef struct {
    int64_t heads, kv_heads;
    const int32_t *key_start; /* (B, Tq) or NULL */
} AttentionCheckParams;

static TgTensor *fwd_attention(TgTape *t, TgTensor *const *in, void *ctx) {
    const AttentionCheckParams *p = ctx;
    return p->key_start ? tg_attention_segmented(t, in[0], in[1], in[2], p->heads, p->kv_heads, p->key_start)
                        : tg_attention(t, in[0], in[1], in[2], p->heads, p->kv_heads);
}

/* q (B, Tq, H*hd), k and v (B, Tk, KVH*hd) */
#define QKV(b, heads, kv_heads, hd, tq, tk)                                                                \
    {{"q", {b, tq, (heads) * (hd)}}, {"k", {b, tk, (kv_heads) * (hd)}}, {"v", {b, tk, (kv_heads) * (hd)}}}

/* A grid of head layouts and lengths. The layouts: GQA 8/2 and 6/2, MQA 4/1 (3 batch entries:
 * 3 backward units, one (batch, KV head) each, split unevenly over 2 threads) and 3/3 (3 units
 * both ways); head dims of 3 (below the 4-float vectors), 5, 9 and 6. The lengths, each cut
 * unevenly into the 4-row blocks of queries and keys: the causal square 5/5, one decoded token
 * after 6 cached (Tq 1, Tk 7) and 3 queries after 14 cached, past the 16-key padding (Tk 17). */
#define ATTENTION_CASE(b, heads, kv_heads, hd, tq, tk)                            \
    {.variant = "B" #b " H" #heads " KV" #kv_heads " hd" #hd " Tq" #tq " Tk" #tk, \
     .inputs = QKV(b, heads, kv_heads, hd, tq, tk), .forward = fwd_attention,     \
     .ctx = &(AttentionCheckParams){heads, kv_heads, NULL}},
#define ATTENTION_LENGTHS(b, heads, kv_heads, hd)                                             \
    ATTENTION_CASE(b, heads, kv_heads, hd, 5, 5) ATTENTION_CASE(b, heads, kv_heads, hd, 1, 7) \
    ATTENTION_CASE(b, heads, kv_heads, hd, 3, 17)

static const TgOpCheck attention_cases[] = {
    {.variant = "B2 T7 H2 KV2 hd4", .inputs = QKV(2, 2, 2, 4, 7, 7), .forward = fwd_attention,
     .ctx = &(AttentionCheckParams){2, 2, NULL}},
    {.variant = "GQA B2 T7 H4 KV2 hd4", .inputs = QKV(2, 4, 2, 4, 7, 7), .forward = fwd_attention,
     .ctx = &(AttentionCheckParams){4, 2, NULL}},
    {.variant = "T1 H2 KV2 hd4", .inputs = QKV(2, 2, 2, 4, 1, 1), .forward = fwd_attention,
     .ctx = &(AttentionCheckParams){2, 2, NULL}},
    {.variant = "MQA B2 T7 H4 KV1 hd4", .inputs = QKV(2, 4, 1, 4, 7, 7), .forward = fwd_attention,
     .ctx = &(AttentionCheckParams){4, 1, NULL}},
    {.variant = "decode Tq1 Tk5 H4 KV2", .inputs = QKV(2, 4, 2, 4, 1, 5), .forward = fwd_attention,
     .ctx = &(AttentionCheckParams){4, 2, NULL}},
    {.variant = "Tq3 Tk7 H4 KV2", .inputs = QKV(2, 4, 2, 4, 3, 7), .forward = fwd_attention,
     .ctx = &(AttentionCheckParams){4, 2, NULL}},
    /* hd 20 and 18 keys: the 16-wide vector blocks of the row products, not only the tail */
    {.variant = "GQA B1 T18 H2 KV1 hd20", .inputs = QKV(1, 2, 1, 20, 18, 18), .forward = fwd_attention,
     .ctx = &(AttentionCheckParams){2, 1, NULL}},
    ATTENTION_LENGTHS(1, 8, 2, 3) ATTENTION_LENGTHS(1, 6, 2, 5) ATTENTION_LENGTHS(3, 4, 1, 9)
    ATTENTION_LENGTHS(1, 3, 3, 6)
    /* Packed rows (tg_attention_segmented), each query seeing its own sequence only. Row 0 of the
     * first: sequences of 3, 6 and 2 tokens, the second starting inside a block of 4 queries and
     * ending past the next; row 1: one of 5, then one of 6 and a last one-token sequence, as a
     * padded tail is. A sequence of 9 after 10 (keys of a block left out entirely), with GQA; one
     * behind a KV cache (3 queries after 8 keys, the first key 5); every query its own sequence. */
    {.variant = "segments B2 T11 H4 KV2 hd4", .inputs = QKV(2, 4, 2, 4, 11, 11), .forward = fwd_attention,
     .ctx = &(AttentionCheckParams){4, 2, (const int32_t[]){0, 0, 0, 3, 3, 3, 3, 3, 3, 9, 9,
                                                           0, 0, 0, 0, 0, 5, 5, 5, 5, 5, 10}}},
    {.variant = "segments B1 T19 H6 KV2 hd5", .inputs = QKV(1, 6, 2, 5, 19, 19), .forward = fwd_attention,
     .ctx = &(AttentionCheckParams){6, 2, (const int32_t[]){0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 10, 10, 10, 10, 10, 10, 10, 10}}},
    {.variant = "segments Tq3 Tk8 H2 KV1 hd6", .inputs = QKV(1, 2, 1, 6, 3, 8), .forward = fwd_attention,
     .ctx = &(AttentionCheckParams){2, 1, (const int32_t[]){5, 5, 5}}},
    {.variant = "segments of one B2 T6 H2 KV2 hd3", .inputs = QKV(2, 2, 2, 3, 6, 6), .forward = fwd_attention,
     .ctx = &(AttentionCheckParams){2, 2, (const int32_t[]){0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}}},
};
const TgOpCheckList tg_attention_checks = TG_OP_CHECK_LIST(attention_cases);
