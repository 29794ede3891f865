/* The batches a run trains and evaluates on, whatever its data (data/split.h): windows of text
 * (data/loader.h), rows of packed conversations (data/sft_loader.h), or the preference pairs of
 * DPO (data/pair_loader.h: a batch of P pairs is 2P rows, `batch` counts the rows), through one
 * interface. The trainer draws from a source, skips other ranks'
 * draws, saves and restores its position in a checkpoint, and weighs the batches' losses as the
 * source says, knowing nothing else of the data.
 *
 * Each batch fills (batch, seq) tokens and targets, and key_start (each position's first visible
 * one) where the rows are packed (tg_batch_source_packed): the TgBatch the model takes. */
#ifndef TAPEGRAD_TRAIN_BATCH_SOURCE_H
#define TAPEGRAD_TRAIN_BATCH_SOURCE_H

#include <stdbool.h>
#include <stdint.h>

#include "data/loader.h"
#include "data/pair_loader.h"
#include "data/sft_loader.h"
#include "data/split.h"
#include "tapegrad/error.h"

/* How the losses of several batches (a step's micro-batches, the eval batches) make one. */
typedef enum {
    /* every batch predicts batch x seq tokens: the mean of the batches' means */
    TG_LOSS_MEAN_OF_BATCHES,
    /* batches hold different counts of targets (masked conversations): the mean over every target
     * of all the batches, each batch's mean weighed by its count (MiniMind's loss per batch) */
    TG_LOSS_MEAN_OF_TARGETS,
} TgLossWeighting;

struct TgBatchSource;
typedef struct TgBatchSourceOps {
    TgStatus (*next)(struct TgBatchSource *s, int32_t *tokens, int32_t *targets, int32_t *key_start);
    void (*skip)(struct TgBatchSource *s, int64_t n_batches);
    TgLoaderState (*get_state)(const struct TgBatchSource *s);
    void (*set_state)(struct TgBatchSource *s, const TgLoaderState *state);
    void (*close)(struct TgBatchSource *s);
} TgBatchSourceOps;

typedef struct TgBatchSource {
    const TgBatchSourceOps *ops;
    const TgSplit *split; /* not owned */
    int64_t batch, seq;
    union {
        TgLoader text;      /* TG_SPLIT_TEXT */
        TgSftLoader packed; /* TG_SPLIT_CONVERSATIONS */
        TgPairLoader pairs; /* a split of pairs */
    } reader;
    uint64_t *which; /* pairs: [batch / 2], the split's pairs of the last batch drawn (their reference lookup) */
} TgBatchSource;

/* A source of (batch, seq) batches over `split` in its training order (drawn from `seed`),
 * padding packed rows with pad_id. */
TgStatus tg_batch_source_open(TgBatchSource *s, const TgSplit *split, int64_t batch, int64_t seq, uint64_t seed,
                              int32_t pad_id);
/* The next batch; key_start is written only where the rows are packed. Fails only when a file
 * cannot be read (or changed under the run). */
TgStatus tg_batch_source_next(TgBatchSource *s, int32_t *tokens, int32_t *targets, int32_t *key_start);
/* Draws n batches without reading them, moving the position as n tg_batch_source_next do. */
void tg_batch_source_skip(TgBatchSource *s, int64_t n_batches);
/* The position (a checkpoint keeps it), and setting it back. */
TgLoaderState tg_batch_source_state(const TgBatchSource *s);
void tg_batch_source_set_state(TgBatchSource *s, const TgLoaderState *state);
void tg_batch_source_close(TgBatchSource *s);

/* Whether the split's rows are packed (batches carry key_start), and how its losses weigh. */
bool tg_split_packed(const TgSplit *split);
TgLossWeighting tg_split_loss_weighting(const TgSplit *split);
/* k fixed batches of (batch, seq) from the split (the same at every evaluation): tokens, targets
 * and, for packed rows, key_start, each (k, batch, seq). For a split of pairs, which (may be
 * NULL) receives the (k, batch / 2) pairs they hold: the split's first pairs in order, wrapping. */
TgStatus tg_split_fixed_batches(const TgSplit *split, int64_t batch, int64_t seq, int64_t k, int32_t pad_id,
                                int32_t *tokens, int32_t *targets, int32_t *key_start, uint64_t *which);

#endif
