/* Batches of preference pairs for DPO: a split of data/sft_data.h prepared with `pairs` (each
 * pair two conversations, its chosen side then its rejected one).
 *
 * A batch of P pairs is 2P rows of seq positions: row p the chosen side of the batch's pair p, row
 * P + p its rejected side, each one conversation from position 0, then padding; targets as the
 * fine-tuning loader gives them (the next token where the mask predicts it, else
 * TG_IGNORE_INDEX). No packing: DPO sums each side's log-probability over its own row
 * (tg_sequence_logprob). Which pairs of the split a batch holds is handed back, so that their
 * reference log-probabilities can be looked up.
 *
 * Order: epoch after epoch, the split's pairs in an order drawn from the seed and the epoch's
 * number (the fine-tuning loader's shuffle), or the split's own order over and over (evaluation).
 * The pairs drawn depend only on the seed and the number of batches drawn before
 * (TgLoaderState.batches_drawn), so a resumed run draws what an uninterrupted one would. */
#ifndef TAPEGRAD_DATA_PAIR_LOADER_H
#define TAPEGRAD_DATA_PAIR_LOADER_H

#include <stdbool.h>
#include <stdint.h>

#include "data/loader.h"
#include "data/split.h"
#include "tapegrad/error.h"

typedef struct TgPairLoader {
    const TgSplit *split; /* not owned */
    bool shuffled;
    int64_t pairs, seq;
    uint64_t seed;
    int32_t pad_id;
    uint64_t batches_drawn, epoch;
    size_t n_pairs, next;   /* the split's pairs; the next one in the epoch's order */
    uint32_t *order;        /* [n_pairs] when shuffled */
    int32_t *tokens, *mask; /* one conversation's (seq) */
} TgPairLoader;

/* The pairs of a split prepared with `pairs`: refused (TG_ERR_FORMAT, naming its file) when it
 * holds an odd number of conversations. */
TgStatus tg_pair_split_count(const TgSplit *split, size_t *n_pairs);

/* A loader of `pairs` pairs a batch over `split`, padding with pad_id. */
TgStatus tg_pair_loader_init(TgPairLoader *ld, const TgSplit *split, int64_t pairs, int64_t seq, uint64_t seed,
                             int32_t pad_id, bool shuffled);
void tg_pair_loader_free(TgPairLoader *ld);
/* The next batch: inputs and targets (2P, seq) each, and in which (P) the pairs' indices in the split. */
TgStatus tg_pair_loader_next(TgPairLoader *ld, int32_t *inputs, int32_t *targets, uint64_t *which);
/* Draws n batches without reading them. */
void tg_pair_loader_skip(TgPairLoader *ld, int64_t n_batches);
TgLoaderState tg_pair_loader_get_state(const TgPairLoader *ld);
void tg_pair_loader_set_state(TgPairLoader *ld, const TgLoaderState *state);

#endif
