/* Batches of preference pairs, a conversation a row (pair_loader.h). */
#include "data/pair_loader.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "data/sft_data.h"
#include "data/sft_loader.h"
#include "tapegrad/ops.h"

TgStatus tg_pair_split_count(const TgSplit *split, size_t *n_pairs) {
    if (split->n_conversations % 2 != 0)
        return tg_fail(TG_ERR_FORMAT,
                       "%s holds %zu conversations: preference pairs come two by two, so it was not prepared as pairs",
                       split->tokens.path, split->n_conversations);
    *n_pairs = split->n_conversations / 2;
    return TG_OK;
}

TgStatus tg_pair_loader_init(TgPairLoader *ld, const TgSplit *split, int64_t pairs, int64_t seq, uint64_t seed,
                             int32_t pad_id, bool shuffled) {
    memset(ld, 0, sizeof *ld);
    if (pairs < 1 || seq < 1)
        return tg_fail(TG_ERR_ARG, "pairs %lld and seq %lld must be positive", (long long)pairs, (long long)seq);
    TG_TRY(tg_pair_split_count(split, &ld->n_pairs));
    if (ld->n_pairs == 0 || ld->n_pairs > UINT32_MAX)
        return tg_fail(TG_ERR_ARG, "a split of %zu pairs cannot be loaded (1 to 2^32 - 1)", ld->n_pairs);
    ld->split = split, ld->shuffled = shuffled;
    ld->pairs = pairs, ld->seq = seq, ld->seed = seed, ld->pad_id = pad_id;
    ld->tokens = tg_malloc((size_t)seq * sizeof *ld->tokens);
    ld->mask = tg_malloc((size_t)seq * sizeof *ld->mask);
    if (shuffled) {
        ld->order = tg_malloc(ld->n_pairs * sizeof *ld->order);
        tg_sft_shuffle(ld->order, ld->n_pairs, seed, 0);
    }
    return TG_OK;
}

void tg_pair_loader_free(TgPairLoader *ld) {
    free(ld->order), free(ld->tokens), free(ld->mask);
    memset(ld, 0, sizeof *ld);
}

/* The next pair in the order, a new epoch begun when the last one ran out. */
static uint64_t next_pair(TgPairLoader *ld) {
    if (ld->next == ld->n_pairs) {
        ld->next = 0;
        ld->epoch++;
        if (ld->order) tg_sft_shuffle(ld->order, ld->n_pairs, ld->seed, ld->epoch);
    }
    size_t k = ld->next++;
    return ld->order ? ld->order[k] : k;
}

/* Conversation c alone in a row of seq positions, then padding. */
static TgStatus fill_row(TgPairLoader *ld, size_t c, int32_t *inputs, int32_t *targets) {
    const TgSplit *split = ld->split;
    int64_t len = (int64_t)(split->starts[c + 1] - split->starts[c]);
    TG_CHECK(len <= ld->seq, "a conversation of %lld tokens in a window of %lld (sft_split_open refuses one)",
             (long long)len, (long long)ld->seq);
    TG_TRY(tg_token_store_read(&split->tokens, split->starts[c], (size_t)len, ld->tokens));
    TG_TRY(tg_token_store_read(&split->mask, split->starts[c], (size_t)len, ld->mask));
    for (int64_t i = 0; i < ld->seq; i++) {
        inputs[i] = i < len ? ld->tokens[i] : ld->pad_id;
        targets[i] = i + 1 < len && ld->mask[i + 1] == TG_SFT_MASK_TRAINED ? ld->tokens[i + 1] : TG_IGNORE_INDEX;
    }
    return TG_OK;
}

TgStatus tg_pair_loader_next(TgPairLoader *ld, int32_t *inputs, int32_t *targets, uint64_t *which) {
    const int64_t P = ld->pairs, T = ld->seq;
    for (int64_t p = 0; p < P; p++) {
        uint64_t k = next_pair(ld);
        which[p] = k;
        TG_TRY(fill_row(ld, (size_t)(2 * k), inputs + p * T, targets + p * T));
        TG_TRY(fill_row(ld, (size_t)(2 * k + 1), inputs + (P + p) * T, targets + (P + p) * T));
    }
    ld->batches_drawn++;
    return TG_OK;
}

void tg_pair_loader_skip(TgPairLoader *ld, int64_t n_batches) {
    for (int64_t i = 0; i < n_batches * ld->pairs; i++) next_pair(ld);
    ld->batches_drawn += (uint64_t)n_batches;
}

TgLoaderState tg_pair_loader_get_state(const TgPairLoader *ld) {
    TgLoaderState st = {0};
    st.batches_drawn = ld->batches_drawn;
    return st;
}

void tg_pair_loader_set_state(TgPairLoader *ld, const TgLoaderState *state) {
    ld->batches_drawn = 0, ld->epoch = 0, ld->next = 0;
    if (ld->order) tg_sft_shuffle(ld->order, ld->n_pairs, ld->seed, 0);
    tg_pair_loader_skip(ld, (int64_t)state->batches_drawn);
}
