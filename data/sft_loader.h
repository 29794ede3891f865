/* Batches of conversations for fine-tuning, packed into windows (data/sft_data.h's splits).
 *
 * A row of a batch is a window of seq positions filled with whole conversations, one after the
 * other, as many as fit; the rest of the row is padding. The model sees them through
 * tg_model_loss_packed: key_start gives each position the start of its own conversation, so no
 * conversation attends to another (and padding attends only to itself). Targets: at position p
 * of a conversation, the conversation's next token if the mask says the loss predicts it, else
 * TG_IGNORE_INDEX; the last position of each conversation and all padding are ignored. So the
 * loss of a row is the loss of its conversations' assistant tokens, each computed as if the
 * conversation stood alone in the window (RoPE depends on relative positions only).
 *
 * Why packing and not one conversation per row, padded: MiniMind's conversations are mostly far
 * shorter than the window, and padding spends the step's work on positions that train nothing;
 * packing without attention across conversations gives the same losses for less work.
 *
 * Order: epoch after epoch, the conversations of the split in an order drawn from the seed and
 * the epoch's number (a Fisher-Yates shuffle); rows take them in that order, a row ending when
 * the next conversation does not fit. The rows drawn depend only on the seed and the number of
 * batches drawn before (TgLoaderState.batches_drawn), so a resumed run, which replays that many
 * from the lengths alone, draws exactly the batches an uninterrupted one would.
 *
 * Evaluation batches (tg_sft_fixed_batches) pack the split's conversations in their order, from the
 * first, starting over when they run out: the same every time. A loader of TG_SFT_ORDER_ONCE packs
 * them in their order once, then pads: what evaluating a whole split takes. */
#ifndef TAPEGRAD_DATA_SFT_LOADER_H
#define TAPEGRAD_DATA_SFT_LOADER_H

#include <stdint.h>

#include "data/loader.h"
#include "data/sft_data.h"
#include "tapegrad/error.h"

typedef enum {
    TG_SFT_ORDER_SHUFFLED, /* epoch after epoch, each in an order drawn from the seed */
    TG_SFT_ORDER_CYCLE,    /* the split's order, over and over */
    TG_SFT_ORDER_ONCE,     /* the split's order once, then rows of padding */
} TgSftOrder;

typedef struct TgSftLoader {
    const TgSplit *split;    /* not owned */
    TgSftOrder how;
    int64_t batch, seq;
    uint64_t seed;
    int32_t pad_id;
    uint64_t batches_drawn;
    uint64_t epoch;           /* the order being taken */
    size_t next;              /* its next conversation */
    uint32_t *order;          /* [n_conversations] when shuffled */
    int32_t *tokens, *mask;   /* one conversation's (seq) */
} TgSftLoader;

/* A loader of (batch, seq) rows over `split`, padding with pad_id (any id the model embeds). */
TgStatus tg_sft_loader_init(TgSftLoader *ld, const TgSplit *split, int64_t batch, int64_t seq, uint64_t seed, int32_t pad_id,
                         TgSftOrder how);
/* TG_SFT_ORDER_ONCE: every conversation has been drawn. */
bool tg_sft_loader_done(const TgSftLoader *ld);
void tg_sft_loader_free(TgSftLoader *ld);
/* The next batch: inputs, targets and key_start, each (batch, seq). */
TgStatus tg_sft_loader_next(TgSftLoader *ld, int32_t *inputs, int32_t *targets, int32_t *key_start);
/* Draws n batches without reading them, moving the state as n tg_sft_loader_next calls do. */
void tg_sft_loader_skip(TgSftLoader *ld, int64_t n_batches);
/* A checkpoint's loader state holds batches_drawn (the RNG part is unused: the order comes from
 * the seed); setting it replays the rows drawn so far from the lengths. */
TgLoaderState tg_sft_loader_get_state(const TgSftLoader *ld);
void tg_sft_loader_set_state(TgSftLoader *ld, const TgLoaderState *state);

/* The order of an epoch: the identity 0..n-1 shuffled by an RNG seeded from (seed, epoch). */
void tg_sft_shuffle(uint32_t *order, size_t n, uint64_t seed, uint64_t epoch);

/* k batches of (batch, seq) rows packed from the split's conversations in order (see above):
 * inputs, targets and key_start hold (k, batch, seq) each. */
TgStatus tg_sft_fixed_batches(const TgSplit *split, int64_t batch, int64_t seq, int64_t k, int32_t pad_id, int32_t *inputs,
                           int32_t *targets, int32_t *key_start);

#endif
