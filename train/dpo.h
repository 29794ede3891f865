/* Preference training (DPO) on a model: a batch of pairs' loss against the reference model's
 * log-probabilities, and those log-probabilities themselves, computed once.
 *
 * A batch is the 2P rows of data/pair_loader.h (the chosen sides, then the rejected ones). The
 * policy's log-probability of a side is tg_sequence_logprob over its row's targets; the loss is
 * tg_dpo_loss of them against the reference's (ops/preference.c has the formulas). The reference
 * is the model a run starts from: its log-probabilities of every pair are computed before the
 * first step, with no gradient, and kept; a run never holds two models. */
#ifndef TAPEGRAD_TRAIN_DPO_H
#define TAPEGRAD_TRAIN_DPO_H

#include <stdint.h>

#include "data/split.h"
#include "tapegrad/model.h"
#include "tapegrad/tape.h"

/* What a batch of pairs says besides its loss: means over its P pairs. */
typedef struct TgDpoStats {
    double margin;           /* the reward margin beta ((c - ref_c) - (r - ref_r)) */
    double accuracy;         /* the share of pairs with a positive margin, a tie (0, as every pair's is at the
                                reference) counted half: 0.5 before the first step */
    double chosen, rejected; /* the policy's log-probabilities of each side */
} TgDpoStats;

/* The DPO loss of the batch's 2P rows (batch->batch is 2P) against ref (2P, in the rows' order:
 * the chosen sides', then the rejected ones'); stats (may be NULL) from the same forward. */
TgTensor *tg_dpo_batch_loss(TgModel *model, TgTape *tape, const TgBatch *batch, const float *ref, double beta,
                            TgDpoStats *stats);

/* The model's log-probability of both sides of every pair of `split` into ref (2 per pair: the
 * chosen side's at 2k, the rejected one's at 2k + 1), `pairs` pairs a forward, no gradient.
 * Padding is pad_id. */
TgStatus tg_dpo_reference(TgModel *model, TgTape *tape, const TgSplit *split, int64_t pairs, int64_t seq,
                          int32_t pad_id, float *ref);

/* The reference of a run: both sides' log-probabilities of every pair of its train and val splits
 * (2 per pair, as tg_dpo_reference lays them out), computed once before the first step and kept in
 * the run folder (TG_DPO_REFERENCE_FILE), so that a resume needs no reference model and continues
 * bitwise. The file names the splits' token hashes and pair counts, and is refused for others. */
#define TG_DPO_REFERENCE_FILE "dpo_reference.bin"
typedef struct TgDpoReference {
    float *train, *val;
    size_t train_pairs, val_pairs;
} TgDpoReference;

/* Computes it (tg_dpo_reference over both splits, `pairs` pairs a forward). */
TgStatus tg_dpo_reference_compute(TgModel *model, TgTape *tape, const TgSplit *train, const TgSplit *val, int64_t pairs,
                                  int64_t seq, int32_t pad_id, TgDpoReference *ref);
/* DIR/TG_DPO_REFERENCE_FILE, written atomically; and read back for these splits (TG_ERR_FORMAT for a
 * file of other splits, a short or a damaged one; TG_ERR_IO when it cannot be read). */
TgStatus tg_dpo_reference_save(const char *dir, const TgSplit *train, const TgSplit *val, const TgDpoReference *ref);
TgStatus tg_dpo_reference_load(const char *dir, const TgSplit *train, const TgSplit *val, TgDpoReference *ref);
void tg_dpo_reference_free(TgDpoReference *ref);

#endif
