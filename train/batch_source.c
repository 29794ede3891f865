/* The batch sources (batch_source.h): each kind of split, read through one table of calls. */
#include "train/batch_source.h"

#include <stdlib.h>
#include <string.h>

/* ---- text windows (data/loader.h) ---- */

static TgStatus text_next(TgBatchSource *s, int32_t *tokens, int32_t *targets, int32_t *key_start) {
    (void)key_start;
    return tg_loader_next(&s->reader.text, tokens, targets);
}
static void text_skip(TgBatchSource *s, int64_t n) { tg_loader_skip(&s->reader.text, n); }
static TgLoaderState text_state(const TgBatchSource *s) { return tg_loader_get_state(&s->reader.text); }
static void text_set_state(TgBatchSource *s, const TgLoaderState *st) { tg_loader_set_state(&s->reader.text, st); }
static void text_close(TgBatchSource *s) { (void)s; }

static const TgBatchSourceOps text_ops = {text_next, text_skip, text_state, text_set_state, text_close};

/* ---- packed conversations (data/sft_loader.h) ---- */

static TgStatus packed_next(TgBatchSource *s, int32_t *tokens, int32_t *targets, int32_t *key_start) {
    return tg_sft_loader_next(&s->reader.packed, tokens, targets, key_start);
}
static void packed_skip(TgBatchSource *s, int64_t n) { tg_sft_loader_skip(&s->reader.packed, n); }
static TgLoaderState packed_state(const TgBatchSource *s) { return tg_sft_loader_get_state(&s->reader.packed); }
static void packed_set_state(TgBatchSource *s, const TgLoaderState *st) {
    tg_sft_loader_set_state(&s->reader.packed, st);
}
static void packed_close(TgBatchSource *s) { tg_sft_loader_free(&s->reader.packed); }

static const TgBatchSourceOps packed_ops = {packed_next, packed_skip, packed_state, packed_set_state, packed_close};

/* ---- preference pairs (data/pair_loader.h) ---- */

static TgStatus pairs_next(TgBatchSource *s, int32_t *tokens, int32_t *targets, int32_t *key_start) {
    (void)key_start;
    return tg_pair_loader_next(&s->reader.pairs, tokens, targets, s->which);
}
static void pairs_skip(TgBatchSource *s, int64_t n) { tg_pair_loader_skip(&s->reader.pairs, n); }
static TgLoaderState pairs_state(const TgBatchSource *s) { return tg_pair_loader_get_state(&s->reader.pairs); }
static void pairs_set_state(TgBatchSource *s, const TgLoaderState *st) {
    tg_pair_loader_set_state(&s->reader.pairs, st);
}
static void pairs_close(TgBatchSource *s) { tg_pair_loader_free(&s->reader.pairs); }

static const TgBatchSourceOps pairs_ops = {pairs_next, pairs_skip, pairs_state, pairs_set_state, pairs_close};

/* ---- the interface ---- */

TgStatus tg_batch_source_open(TgBatchSource *s, const TgSplit *split, int64_t batch, int64_t seq, uint64_t seed,
                              int32_t pad_id) {
    memset(s, 0, sizeof *s);
    s->split = split, s->batch = batch, s->seq = seq;
    if (split->pairs) {
        TG_CHECK(batch % 2 == 0, "a batch of pairs is 2P rows, not %lld", (long long)batch);
        TG_TRY(tg_pair_loader_init(&s->reader.pairs, split, batch / 2, seq, seed, pad_id, true));
        s->which = tg_malloc((size_t)(batch / 2) * sizeof *s->which);
        s->ops = &pairs_ops;
        return TG_OK;
    }
    if (split->kind == TG_SPLIT_CONVERSATIONS) {
        TG_TRY(tg_sft_loader_init(&s->reader.packed, split, batch, seq, seed, pad_id, TG_SFT_ORDER_SHUFFLED));
        s->ops = &packed_ops;
        return TG_OK;
    }
    TG_TRY(tg_loader_init_store(&s->reader.text, &split->tokens, batch, seq, seed));
    s->ops = &text_ops;
    return TG_OK;
}

TgStatus tg_batch_source_next(TgBatchSource *s, int32_t *tokens, int32_t *targets, int32_t *key_start) {
    return s->ops->next(s, tokens, targets, key_start);
}
void tg_batch_source_skip(TgBatchSource *s, int64_t n) { s->ops->skip(s, n); }
TgLoaderState tg_batch_source_state(const TgBatchSource *s) { return s->ops->get_state(s); }
void tg_batch_source_set_state(TgBatchSource *s, const TgLoaderState *state) { s->ops->set_state(s, state); }

void tg_batch_source_close(TgBatchSource *s) {
    if (s->ops) s->ops->close(s);
    free(s->which);
    memset(s, 0, sizeof *s);
}

bool tg_split_packed(const TgSplit *split) { return split->kind == TG_SPLIT_CONVERSATIONS && !split->pairs; }

/* pairs: each batch's loss is a mean over its P pairs, and every batch holds P */
TgLossWeighting tg_split_loss_weighting(const TgSplit *split) {
    return tg_split_packed(split) ? TG_LOSS_MEAN_OF_TARGETS : TG_LOSS_MEAN_OF_BATCHES;
}

static TgStatus fixed_pairs(const TgSplit *split, int64_t batch, int64_t seq, int64_t k, int32_t pad_id,
                            int32_t *tokens, int32_t *targets, uint64_t *which) {
    TgPairLoader ld;
    TG_TRY(tg_pair_loader_init(&ld, split, batch / 2, seq, 0, pad_id, false));
    uint64_t *own = which ? NULL : tg_malloc((size_t)(batch / 2) * sizeof *own);
    TgStatus s = TG_OK;
    for (int64_t b = 0; b < k && s == TG_OK; b++) {
        size_t off = (size_t)(b * batch * seq);
        s = tg_pair_loader_next(&ld, tokens + off, targets + off, which ? which + b * (batch / 2) : own);
    }
    free(own);
    tg_pair_loader_free(&ld);
    return s;
}

TgStatus tg_split_fixed_batches(const TgSplit *split, int64_t batch, int64_t seq, int64_t k, int32_t pad_id,
                                int32_t *tokens, int32_t *targets, int32_t *key_start, uint64_t *which) {
    if (split->pairs) return fixed_pairs(split, batch, seq, k, pad_id, tokens, targets, which);
    if (split->kind == TG_SPLIT_CONVERSATIONS)
        return tg_sft_fixed_batches(split, batch, seq, k, pad_id, tokens, targets, key_start);
    return tg_loader_fixed_batches_store(&split->tokens, batch, seq, k, tokens, targets);
}
