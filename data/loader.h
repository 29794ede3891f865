/* Batch loader over a token file (a TokenStore, data/tokfile.h: read a window at a time, never
 * whole) or a token array in memory.
 *
 * Training batches: each of the `batch` rows is a window of seq + 1 consecutive tokens whose
 * start is drawn uniformly from [0, n - seq - 1] by the loader's own RNG; inputs are the first
 * seq tokens, targets the last seq (inputs shifted by one). The draws depend only on the seed
 * and the number of batches drawn, so a run resumed from a saved LoaderState draws exactly the
 * batches the uninterrupted run would have.
 *
 * Evaluation batches (loader_fixed_batches) are deterministic and evenly spaced, the same every
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

typedef struct LoaderState {
    TgRng rng;
    uint64_t batches_drawn;
} LoaderState;

typedef struct Loader {
    TokenStore tokens; /* a copy; the file or array must outlive the loader */
    int64_t batch, seq;
    LoaderState state;
} Loader;

/* Refuses batch < 1, seq < 1 and n < seq + 1 (no window fits), with a message. */
TgStatus loader_init(Loader *ld, const int32_t *tokens, size_t n, int64_t batch, int64_t seq, uint64_t seed);
TgStatus loader_init_store(Loader *ld, const TokenStore *tokens, int64_t batch, int64_t seq, uint64_t seed);

/* Fills inputs and targets, each (batch, seq). Fails only when the token file cannot be read
 * (or changed under the run). */
TgStatus loader_next(Loader *ld, int32_t *inputs, int32_t *targets);
/* Draws n batches without copying them: the state moves exactly as n loader_next calls move it.
 * The ranks of a data-parallel run share one stream this way, each copying only its own. */
void loader_skip(Loader *ld, int64_t n_batches);

LoaderState loader_get_state(const Loader *ld);
void loader_set_state(Loader *ld, const LoaderState *state);

/* A portable fixed-size encoding of a LoaderState (little-endian: rng s[0..3], the spare
 * normal's bits, has_spare, batches_drawn) for checkpoint files. */
enum { LOADER_STATE_BYTES = 56 };
void loader_state_pack(const LoaderState *state, uint8_t out[LOADER_STATE_BYTES]);
void loader_state_unpack(const uint8_t in[LOADER_STATE_BYTES], LoaderState *state);

/* k evaluation batches: k * batch windows with starts evenly spaced over [0, n - seq - 1]
 * (the first at 0, the last at n - seq - 1 when k * batch > 1). inputs and targets hold
 * (k, batch, seq) each. Refuses the same arguments as loader_init, and k < 1. */
TgStatus loader_fixed_batches(const int32_t *tokens, size_t n, int64_t batch, int64_t seq, int64_t k,
                               int32_t *inputs, int32_t *targets);
TgStatus loader_fixed_batches_store(const TokenStore *tokens, int64_t batch, int64_t seq, int64_t k, int32_t *inputs,
                                     int32_t *targets);

#endif
