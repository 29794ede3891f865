/* The batch sources (batch_source.h): each kind of split, read through one table of calls. */
#include "train/batch_source.h"

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

/* ---- the interface ---- */

TgStatus tg_batch_source_open(TgBatchSource *s, const TgSplit *split, int64_t batch, int64_t seq, uint64_t seed,
                              int32_t pad_id) {
    memset(s, 0, sizeof *s);
    s->split = split, s->batch = batch, s->seq = seq;
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
    memset(s, 0, sizeof *s);
}

bool tg_split_packed(const TgSplit *split) { return split->kind == TG_SPLIT_CONVERSATIONS; }

TgLossWeighting tg_split_loss_weighting(const TgSplit *split) {
    return split->kind == TG_SPLIT_CONVERSATIONS ? TG_LOSS_MEAN_OF_TARGETS : TG_LOSS_MEAN_OF_BATCHES;
}

TgStatus tg_split_fixed_batches(const TgSplit *split, int64_t batch, int64_t seq, int64_t k, int32_t pad_id,
                                int32_t *tokens, int32_t *targets, int32_t *key_start) {
    if (split->kind == TG_SPLIT_CONVERSATIONS)
        return tg_sft_fixed_batches(split, batch, seq, k, pad_id, tokens, targets, key_start);
    return tg_loader_fixed_batches_store(&split->tokens, batch, seq, k, tokens, targets);
}
