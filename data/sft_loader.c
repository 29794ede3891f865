/* Packed batches of conversations (sft_loader.h). */
#include "data/sft_loader.h"

#include <stdlib.h>
#include <string.h>

#include "support/hash.h"
#include "tapegrad/ops.h"
#include "tapegrad/rng.h"

void tg_sft_shuffle(uint32_t *order, size_t n, uint64_t seed, uint64_t epoch) {
    uint64_t words[2] = {seed, epoch};
    TgRng rng;
    tg_rng_seed(&rng, tg_hash64_of(words, sizeof words, 0x5f7));
    for (size_t i = 0; i < n; i++) order[i] = (uint32_t)i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)tg_rng_below(&rng, i);
        uint32_t t = order[i - 1];
        order[i - 1] = order[j], order[j] = t;
    }
}

enum { END_OF_PASS = -1 };

/* Where the packing stands in its stream of conversations: a shuffled order epoch after epoch
 * (order set), or the split's own order, over and over or once. */
typedef struct {
    const TgSplit *split;
    TgSftOrder how;
    uint32_t *order;
    uint64_t seed, *epoch;
    size_t *next;
} Stream;

/* The next conversation, or END_OF_PASS once TG_SFT_ORDER_ONCE has drawn them all. */
static int64_t stream_peek(const Stream *s) {
    if (*s->next == s->split->n_conversations) {
        if (s->how == TG_SFT_ORDER_ONCE) return END_OF_PASS;
        *s->next = 0;
        ++*s->epoch;
        if (s->order) tg_sft_shuffle(s->order, s->split->n_conversations, s->seed, *s->epoch);
    }
    return s->order ? (int64_t)s->order[*s->next] : (int64_t)*s->next;
}

static uint64_t conversation_len(const TgSplit *split, size_t c) { return split->starts[c + 1] - split->starts[c]; }

/* One row of seq positions: conversations while they fit, then padding. With inputs NULL the
 * stream only moves. `tokens` and `mask` hold seq ints. */
static TgStatus pack_row(const Stream *s, int64_t seq, int32_t pad_id, int32_t *tokens, int32_t *mask, int32_t *inputs,
                         int32_t *targets, int32_t *key_start) {
    int64_t used = 0;
    for (;;) {
        int64_t c = stream_peek(s);
        if (c == END_OF_PASS) break;
        int64_t len = (int64_t)conversation_len(s->split, (size_t)c);
        TG_CHECK(len <= seq, "a conversation of %lld tokens in a window of %lld (sft_split_open refuses one)", (long long)len,
                 (long long)seq);
        if (used > 0 && used + len > seq) break;
        if (inputs) {
            uint64_t at = s->split->starts[c];
            TG_TRY(tg_token_store_read(&s->split->tokens, at, (size_t)len, tokens));
            TG_TRY(tg_token_store_read(&s->split->mask, at, (size_t)len, mask));
            for (int64_t i = 0; i < len; i++) {
                inputs[used + i] = tokens[i];
                key_start[used + i] = (int32_t)used;
                targets[used + i] = i + 1 < len && mask[i + 1] == TG_SFT_MASK_TRAINED ? tokens[i + 1] : TG_IGNORE_INDEX;
            }
        }
        used += len;
        ++*s->next;
        if (used == seq) break;
    }
    if (inputs)
        for (int64_t p = used; p < seq; p++) {
            inputs[p] = pad_id;
            targets[p] = TG_IGNORE_INDEX;
            key_start[p] = (int32_t)p; /* padding sees itself alone */
        }
    return TG_OK;
}

TgStatus tg_sft_loader_init(TgSftLoader *ld, const TgSplit *split, int64_t batch, int64_t seq, uint64_t seed, int32_t pad_id,
                         TgSftOrder how) {
    memset(ld, 0, sizeof *ld);
    if (batch < 1 || seq < 1) return tg_fail(TG_ERR_ARG, "batch %lld and seq %lld must be positive", (long long)batch, (long long)seq);
    if (split->n_conversations == 0 || split->n_conversations > UINT32_MAX)
        return tg_fail(TG_ERR_ARG, "a split of %zu conversations cannot be loaded (1 to 2^32 - 1)", split->n_conversations);
    ld->split = split;
    ld->how = how;
    ld->batch = batch, ld->seq = seq, ld->seed = seed, ld->pad_id = pad_id;
    ld->tokens = tg_malloc((size_t)seq * sizeof *ld->tokens);
    ld->mask = tg_malloc((size_t)seq * sizeof *ld->mask);
    if (how == TG_SFT_ORDER_SHUFFLED) {
        ld->order = tg_malloc(split->n_conversations * sizeof *ld->order);
        tg_sft_shuffle(ld->order, split->n_conversations, seed, 0);
    }
    return TG_OK;
}

bool tg_sft_loader_done(const TgSftLoader *ld) { return ld->how == TG_SFT_ORDER_ONCE && ld->next == ld->split->n_conversations; }

void tg_sft_loader_free(TgSftLoader *ld) {
    free(ld->order);
    free(ld->tokens);
    free(ld->mask);
    memset(ld, 0, sizeof *ld);
}

static Stream loader_stream(TgSftLoader *ld) {
    return (Stream){ld->split, ld->how, ld->order, ld->seed, &ld->epoch, &ld->next};
}

TgStatus tg_sft_loader_next(TgSftLoader *ld, int32_t *inputs, int32_t *targets, int32_t *key_start) {
    Stream s = loader_stream(ld);
    for (int64_t r = 0; r < ld->batch; r++) {
        size_t off = (size_t)(r * ld->seq);
        TG_TRY(pack_row(&s, ld->seq, ld->pad_id, ld->tokens, ld->mask, inputs + off, targets + off, key_start + off));
    }
    ld->batches_drawn++;
    return TG_OK;
}

void tg_sft_loader_skip(TgSftLoader *ld, int64_t n_batches) {
    Stream s = loader_stream(ld);
    for (int64_t i = 0; i < n_batches * ld->batch; i++) pack_row(&s, ld->seq, ld->pad_id, NULL, NULL, NULL, NULL, NULL);
    ld->batches_drawn += (uint64_t)n_batches;
}

TgLoaderState tg_sft_loader_get_state(const TgSftLoader *ld) {
    TgLoaderState st = {0};
    st.batches_drawn = ld->batches_drawn;
    return st;
}

void tg_sft_loader_set_state(TgSftLoader *ld, const TgLoaderState *state) {
    ld->batches_drawn = 0, ld->epoch = 0, ld->next = 0;
    if (ld->order) tg_sft_shuffle(ld->order, ld->split->n_conversations, ld->seed, 0);
    tg_sft_loader_skip(ld, (int64_t)state->batches_drawn);
}

TgStatus tg_sft_fixed_batches(const TgSplit *split, int64_t batch, int64_t seq, int64_t k, int32_t pad_id, int32_t *inputs,
                           int32_t *targets, int32_t *key_start) {
    if (k < 1) return tg_fail(TG_ERR_ARG, "fixed batches: %lld batches", (long long)k);
    TgSftLoader ld;
    TG_TRY(tg_sft_loader_init(&ld, split, batch, seq, 0, pad_id, TG_SFT_ORDER_CYCLE));
    TgStatus st = TG_OK;
    for (int64_t b = 0; b < k && st == TG_OK; b++) {
        size_t off = (size_t)(b * batch * seq);
        st = tg_sft_loader_next(&ld, inputs + off, targets + off, key_start + off);
    }
    tg_sft_loader_free(&ld);
    return st;
}
