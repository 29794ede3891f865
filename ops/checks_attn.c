/* Gradient-check cases of attention, embedding and cross-entropy. */
#include "checks.h"
#include "ops.h"

/* ---- attention: q (B,Tq,H*hd), k and v (B,Tk,KVH*hd), all three checked ---- */
typedef struct {
    int64_t heads, kv_heads;
} AttentionCheckParams;

static AttentionCheckParams attn_h2_kv2 = {2, 2};
static AttentionCheckParams attn_h4_kv2 = {4, 2};
static AttentionCheckParams attn_h4_kv1 = {4, 1};
static AttentionCheckParams attn_h2_kv1 = {2, 1};

static Tensor *fwd_attention(Tape *t, Tensor *const *in, void *ctx) {
    const AttentionCheckParams *p = ctx;
    return op_attention(t, in[0], in[1], in[2], p->heads, p->kv_heads);
}

/* ---- embedding: the table is checked; the ids repeat so the scatter-add accumulates ---- */
typedef struct {
    const int32_t *ids;
    int ndim;
    int64_t shape[3];
} EmbeddingCheckParams;

static const int32_t emb_ids_2x5[] = {3, 1, 3, 7, 0, 9, 3, 1, 1, 5};
static const int32_t emb_ids_same[] = {2, 2, 2, 2};
static EmbeddingCheckParams emb_2x5 = {emb_ids_2x5, 2, {2, 5}};
static EmbeddingCheckParams emb_same = {emb_ids_same, 1, {4}};

static Tensor *fwd_embedding(Tape *t, Tensor *const *in, void *ctx) {
    const EmbeddingCheckParams *p = ctx;
    return op_embedding(t, in[0], p->ids, p->ndim, p->shape);
}

/* ---- cross_entropy: logits checked; some targets ignored ---- */
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

static Tensor *fwd_cross_entropy(Tape *t, Tensor *const *in, void *ctx) {
    const CrossEntropyCheckParams *p = ctx;
    return op_cross_entropy(t, in[0], p->targets, p->ignore_index);
}
/* dlogits written over the logits: over a copy, as the checker reuses its inputs */
static Tensor *fwd_cross_entropy_consuming(Tape *t, Tensor *const *in, void *ctx) {
    const CrossEntropyCheckParams *p = ctx;
    return op_cross_entropy_consuming(t, op_scale(t, in[0], 1.0f), p->targets, p->ignore_index);
}

#define QKV {"q", "k", "v"}, {3, 3, 3}

static const OpCheck cases[] = {
    {"attention", "B2 T7 H2 KV2 hd4", 3, QKV, {{2, 7, 8}, {2, 7, 8}, {2, 7, 8}}, 0, 0,
     fwd_attention, &attn_h2_kv2, 0},
    {"attention", "GQA B2 T7 H4 KV2 hd4", 3, QKV, {{2, 7, 16}, {2, 7, 8}, {2, 7, 8}}, 0, 0,
     fwd_attention, &attn_h4_kv2, 0},
    {"attention", "T1 H2 KV2 hd4", 3, QKV, {{2, 1, 8}, {2, 1, 8}, {2, 1, 8}}, 0, 0,
     fwd_attention, &attn_h2_kv2, 0},
    {"attention", "MQA B2 T7 H4 KV1 hd4", 3, QKV, {{2, 7, 16}, {2, 7, 4}, {2, 7, 4}}, 0, 0,
     fwd_attention, &attn_h4_kv1, 0},
    {"attention", "decode Tq1 Tk5 H4 KV2", 3, QKV, {{2, 1, 16}, {2, 5, 8}, {2, 5, 8}}, 0, 0,
     fwd_attention, &attn_h4_kv2, 0},
    {"attention", "Tq3 Tk7 H4 KV2", 3, QKV, {{2, 3, 16}, {2, 7, 8}, {2, 7, 8}}, 0, 0,
     fwd_attention, &attn_h4_kv2, 0},
    /* hd 20 and 18 keys: the 16-wide vector blocks of the row products, not only the tail */
    {"attention", "GQA B1 T18 H2 KV1 hd20", 3, QKV, {{1, 18, 40}, {1, 18, 20}, {1, 18, 20}}, 0, 0,
     fwd_attention, &attn_h2_kv1, 0},
    {"embedding", "V10 D6 ids 2x5 repeats", 1, {"table"}, {2}, {{10, 6}}, 0, 0, fwd_embedding,
     &emb_2x5, 0},
    {"embedding", "V3 D5 one id 4 times", 1, {"table"}, {2}, {{3, 5}}, 0, 0, fwd_embedding,
     &emb_same, 0},
    {"cross_entropy", "6x11, 2 ignored", 1, {"logits"}, {2}, {{6, 11}}, -2, 2, fwd_cross_entropy,
     &ce_6, 0},
    {"cross_entropy", "consuming 6x11, 2 ignored", 1, {"logits"}, {2}, {{6, 11}}, -2, 2,
     fwd_cross_entropy_consuming, &ce_6, 0},
    {"cross_entropy", "2x3x5, 1 ignored", 1, {"logits"}, {3}, {{2, 3, 5}}, -2, 2,
     fwd_cross_entropy, &ce_2x3, 0},
    {"cross_entropy", "3x11, all ignored", 1, {"logits"}, {2}, {{3, 11}}, -2, 2,
     fwd_cross_entropy, &ce_none, 0},
    {"cross_entropy", "4x7, ignore -100", 1, {"logits"}, {2}, {{4, 7}}, -2, 2, fwd_cross_entropy,
     &ce_100, 0},
};

const OpCheckList checks_attn = {cases, (int)(sizeof cases / sizeof cases[0])};
