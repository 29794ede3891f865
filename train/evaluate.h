/* Evaluation: losses with no gradients, over the fixed batches a run evaluates on or over a whole
 * split, and the figures that go with them (bits per byte, targets, text bytes). */
#ifndef TAPEGRAD_TRAIN_EVALUATE_H
#define TAPEGRAD_TRAIN_EVALUATE_H

#include <stddef.h>
#include <stdint.h>

#include "data/split.h"
#include "tapegrad/error.h"
#include "tapegrad/model.h"
#include "tapegrad/tokenizer.h"

/* Bits per byte of a mean loss (nats per target token) over n_targets target tokens whose text is
 * `bytes` bytes long: mean_loss * n_targets / (ln 2 * bytes), the loss of the whole text in bits,
 * spread over its bytes, so models with different tokenizers compare on one scale. The bytes of
 * a target token are those tg_tokenizer_decode gives it: its text, none for <eot>. NaN when bytes
 * is 0. */
double tg_bits_per_byte(double mean_loss, uint64_t n_targets, uint64_t bytes);
/* The bytes of text the n ids stand for: what tg_tokenizer_decode gives each, none for a special
 * (control) token such as <eot> or <|im_end|>, which stands for no text, and none for an ignored
 * target (a negative id). */
uint64_t tg_tokens_text_bytes(const TgTokenizer *tok, const int32_t *ids, size_t n);
/* The targets that are not TG_IGNORE_INDEX. */
uint64_t tg_count_targets(const int32_t *targets, size_t n);
/* The mean over every target of n batches whose mean losses and target counts are given: the
 * sum of losses[i] counts[i], in order, over the sum of counts (NaN when 0). */
double tg_mean_over_targets(const double *losses, const double *counts, int64_t n);

/* n fixed batches of (batch, seq) rows laid one after the other, as an evaluation reads them. */
typedef struct TgEvalBatches {
    const int32_t *tokens, *targets; /* (n, batch, seq) */
    const int32_t *key_start;        /* (n, batch, seq) for packed rows, else NULL */
    int64_t n, batch, seq;
} TgEvalBatches;
/* losses[b] for the batches b in [begin, end), no gradients. */
void tg_eval_batch_losses(TgModel *model, TgTape *tape, const TgEvalBatches *batches, int64_t begin, int64_t end,
                          double *losses);
/* The mean loss of the batches (tg_mean_in_order of their losses). */
double tg_evaluate_loss(TgModel *model, TgTape *tape, const TgEvalBatches *batches);
/* The mean of n values, added in order (NaN for none). */
double tg_mean_in_order(const double *values, int64_t n);

/* A whole split evaluated once: the mean loss over its targets, their count and text bytes
 * (tg_tokens_text_bytes), and the rows it took. */
typedef struct TgSplitEval {
    double loss;
    uint64_t targets, bytes, rows;
} TgSplitEval;
/* The loss over a whole split of conversations (data/split.h), each once, packed into rows of
 * (batch, seq): the mean over its trained tokens (assistant replies and their <|im_end|>), no
 * gradients. */
TgStatus tg_evaluate_conversations(TgModel *model, TgTape *tape, const TgTokenizer *tok, const TgSplit *split,
                                   int64_t batch, TgSplitEval *out);

#endif
