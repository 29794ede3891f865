#include "data/loader.h"

#include <inttypes.h>
#include <string.h>

static TgStatus check_shape(size_t n, int64_t batch, int64_t seq) {
    if (batch < 1) return tg_fail(TG_ERR_ARG, "batch size %" PRId64 " must be at least 1", batch);
    if (seq < 1) return tg_fail(TG_ERR_ARG, "seq_len %" PRId64 " must be at least 1", seq);
    if ((uint64_t)seq >= n)
        return tg_fail(TG_ERR_ARG,
                       "%zu tokens are too few for seq_len %" PRId64 ": a window needs %" PRId64
                       " tokens; use a smaller seq_len or more data",
                       n, seq, seq + 1);
    return TG_OK;
}

TgStatus tg_loader_init_store(TgLoader *ld, const TgTokenStore *tokens, int64_t batch, int64_t seq, uint64_t seed) {
    memset(ld, 0, sizeof *ld);
    TG_TRY(check_shape((size_t)tokens->n, batch, seq));
    ld->tokens = *tokens;
    ld->batch = batch;
    ld->seq = seq;
    tg_rng_seed(&ld->state.rng, seed);
    return TG_OK;
}

TgStatus tg_loader_init(TgLoader *ld, const int32_t *tokens, size_t n, int64_t batch, int64_t seq, uint64_t seed) {
    TgTokenStore store;
    tg_token_store_from_memory(&store, tokens, n);
    return tg_loader_init_store(ld, &store, batch, seq, seed);
}

/* One row: tokens[start .. start + seq] split into inputs and targets. */
static TgStatus copy_window(const TgTokenStore *tokens, uint64_t start, int64_t seq, int32_t *in, int32_t *tg) {
    TG_TRY(tg_token_store_read(tokens, start, (size_t)seq, in));
    memcpy(tg, in + 1, (size_t)(seq - 1) * sizeof *tg);
    return tg_token_store_read(tokens, start + (uint64_t)seq, 1, tg + seq - 1);
}

/* The start of the next window: uniform over 0 .. n - seq - 1. */
static uint64_t draw_start(TgLoader *ld) {
    TG_CHECK(ld->tokens.n > 0 && ld->seq > 0, "drawing from an uninitialised loader");
    return tg_rng_below(&ld->state.rng, ld->tokens.n - (uint64_t)ld->seq);
}

TgStatus tg_loader_next(TgLoader *ld, int32_t *inputs, int32_t *targets) {
    TgStatus st = TG_OK;
    for (int64_t b = 0; b < ld->batch; b++) {
        uint64_t start = draw_start(ld); /* drawn whatever happens, so the stream stays in step */
        if (st == TG_OK) st = copy_window(&ld->tokens, start, ld->seq, inputs + b * ld->seq, targets + b * ld->seq);
    }
    ld->state.batches_drawn++;
    return st;
}

void tg_loader_skip(TgLoader *ld, int64_t n_batches) {
    for (int64_t i = 0; i < n_batches; i++) {
        for (int64_t b = 0; b < ld->batch; b++) draw_start(ld);
        ld->state.batches_drawn++;
    }
}

TgLoaderState tg_loader_get_state(const TgLoader *ld) { return ld->state; }

void tg_loader_set_state(TgLoader *ld, const TgLoaderState *state) { ld->state = *state; }

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void tg_loader_state_pack(const TgLoaderState *state, uint8_t out[TG_LOADER_STATE_BYTES]) {
    for (int i = 0; i < 4; i++) put_u64(out + 8 * i, state->rng.s[i]);
    uint64_t spare;
    memcpy(&spare, &state->rng.spare, sizeof spare);
    put_u64(out + 32, spare);
    put_u64(out + 40, state->rng.has_spare);
    put_u64(out + 48, state->batches_drawn);
}

void tg_loader_state_unpack(const uint8_t in[TG_LOADER_STATE_BYTES], TgLoaderState *state) {
    memset(state, 0, sizeof *state);
    for (int i = 0; i < 4; i++) state->rng.s[i] = get_u64(in + 8 * i);
    uint64_t spare = get_u64(in + 32);
    memcpy(&state->rng.spare, &spare, sizeof spare);
    state->rng.has_spare = (uint32_t)get_u64(in + 40);
    state->batches_drawn = get_u64(in + 48);
}

TgStatus tg_loader_fixed_batches(const int32_t *tokens, size_t n, int64_t batch, int64_t seq, int64_t k,
                               int32_t *inputs, int32_t *targets) {
    TgTokenStore store;
    tg_token_store_from_memory(&store, tokens, n);
    return tg_loader_fixed_batches_store(&store, batch, seq, k, inputs, targets);
}

TgStatus tg_loader_fixed_batches_store(const TgTokenStore *tokens, int64_t batch, int64_t seq, int64_t k, int32_t *inputs,
                                     int32_t *targets) {
    size_t n = (size_t)tokens->n;
    TG_TRY(check_shape(n, batch, seq));
    if (k < 1) return tg_fail(TG_ERR_ARG, "the number of evaluation batches (%" PRId64 ") must be at least 1", k);
    if ((uint64_t)k > UINT32_MAX / (uint64_t)batch)
        return tg_fail(TG_ERR_ARG, "%" PRId64 " evaluation batches of %" PRId64 " rows is too many", k, batch);
    uint64_t windows = (uint64_t)k * (uint64_t)batch; /* < 2^32, so i * rem below fits */
    uint64_t last = (uint64_t)(n - (size_t)seq - 1); /* the largest start */
    uint64_t gaps = windows > 1 ? windows - 1 : 1;
    /* start_i = floor(i * last / gaps), computed without overflowing i * last */
    uint64_t step = last / gaps, rem = last % gaps;
    for (uint64_t i = 0; i < windows; i++) {
        uint64_t start = i * step + i * rem / gaps;
        TG_TRY(copy_window(tokens, start, seq, inputs + (int64_t)i * seq, targets + (int64_t)i * seq));
    }
    return TG_OK;
}
