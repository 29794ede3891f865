/* Batch loader over a token file (a TgTokenStore, data/tokfile.h: read a window at a time, never
 * whole) or a token array in memory.
 *
 * Training batches: each of the `batch` rows is a window of seq + 1 consecutive tokens whose
 * start is drawn uniformly from [0, n - seq - 1] by the loader's own RNG; inputs are the first
 * seq tokens, targets the last seq (inputs shifted by one). The draws depend only on the seed
 * and the number of batches drawn, so a run resumed from a saved TgLoaderState draws exactly the
 * batches the uninterrupted run would have.
 *
 * Evaluation batches (tg_loader_fixed_batches) are deterministic and evenly spaced, the same every
 * time, so validation losses are comparable across steps and runs.
 *
 * Layout of inputs/targets: row-major (batch, seq) int32, i.e. inputs[b * seq + t].
 */
#ifndef TAPEGRAD_DATA_LOADER_H
#define TAPEGRAD_DATA_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "data/tokfile.h"
#include "tapegrad/error.h"
#include "tapegrad/rng.h"

typedef struct TgLoaderState {
    TgRng rng;
    uint64_t batches_drawn;
} TgLoaderState;

typedef struct TgLoader {
    TgTokenStore tokens; /* a copy; the file or array must outlive the loader */
    int64_t batch, seq;
    TgLoaderState state;
} TgLoader;

/* Refuses batch < 1, seq < 1 and n < seq + 1 (no window fits), with a message. */
TgStatus tg_loader_init(TgLoader *ld, const int32_t *tokens, size_t n, int64_t batch, int64_t seq, uint64_t seed);
TgStatus tg_loader_init_store(TgLoader *ld, const TgTokenStore *tokens, int64_t batch, int64_t seq, uint64_t seed);

/* Fills inputs and targets, each (batch, seq). Fails only when the token file cannot be read
 * (or changed under the run). */
TgStatus tg_loader_next(TgLoader *ld, int32_t *inputs, int32_t *targets);
/* Draws n batches without copying them: the state moves exactly as n tg_loader_next calls move it.
 * The ranks of a data-parallel run share one stream this way, each copying only its own. */
void tg_loader_skip(TgLoader *ld, int64_t n_batches);

TgLoaderState tg_loader_get_state(const TgLoader *ld);
void tg_loader_set_state(TgLoader *ld, const TgLoaderState *state);

/* A portable fixed-size encoding of a TgLoaderState (little-endian: rng s[0..3], the spare
 * normal's bits, has_spare, batches_drawn) for checkpoint files. */
enum { TG_LOADER_STATE_BYTES = 56 };
void tg_loader_state_pack(const TgLoaderState *state, uint8_t out[TG_LOADER_STATE_BYTES]);
void tg_loader_state_unpack(const uint8_t in[TG_LOADER_STATE_BYTES], TgLoaderState *state);

/* k evaluation batches: k * batch windows with starts evenly spaced over [0, n - seq - 1]
 * (the first at 0, the last at n - seq - 1 when k * batch > 1). inputs and targets hold
 * (k, batch, seq) each. Refuses the same arguments as tg_loader_init, and k < 1. */
TgStatus tg_loader_fixed_batches(const int32_t *tokens, size_t n, int64_t batch, int64_t seq, int64_t k,
                               int32_t *inputs, int32_t *targets);
TgStatus tg_loader_fixed_batches_store(const TgTokenStore *tokens, int64_t batch, int64_t seq, int64_t k, int32_t *inputs,
                                     int32_t *targets);

#endif
