/* Losses without gradients: over fixed batches, over a whole split of conversations, and the
 * figures beside them (evaluate.h). */
#include "train/evaluate.h"

#include <math.h>
#include <stdlib.h>

#include "data/sft_loader.h"

void tg_eval_batch_losses(TgModel *model, TgTape *tape, const TgEvalBatches *e, int64_t begin, int64_t end,
                          double *losses) {
    int64_t batch = e->batch, seq = e->seq;
    const int32_t *inputs = e->tokens, *targets = e->targets, *key_start = e->key_start;
    bool old = tg_tape_set_grad_enabled(tape, false);
    for (int64_t b = begin; b < end; b++) {
        size_t off = (size_t)(b * batch * seq);
        TgTensor *loss =
            key_start
                ? tg_model_loss(model, tape,
                                &(TgBatch){.tokens = inputs + off,
                                           .targets = targets + off,
                                           .key_start = key_start + off,
                                           .batch = batch,
                                           .seq = seq},
                                NULL)
                : tg_model_loss(
                      model, tape,
                      &(TgBatch){.tokens = inputs + off, .targets = targets + off, .batch = batch, .seq = seq}, NULL);
        losses[b] = loss->data[0];
        tg_tape_reset(tape);
    }
    tg_tape_set_grad_enabled(tape, old);
}

double tg_mean_in_order(const double *values, int64_t n) {
    double total = 0.0;
    for (int64_t i = 0; i < n; i++) total += values[i];
    return n ? total / (double)n : NAN;
}

double tg_bits_per_byte(double mean_loss, uint64_t n_targets, uint64_t bytes) {
    return bytes ? mean_loss * (double)n_targets / (log(2.0) * (double)bytes) : NAN;
}

/* Whether id is a special (control) token: <eot>, <|im_start|>, <|im_end|>, ... */
static bool is_control(const TgTokenizer *tok, int32_t id) {
    if (id == tok->eot_id) return true;
    for (int32_t i = 0; i < tok->n_added; i++)
        if (tok->added[i].id == id) return tok->added[i].special;
    return false;
}

uint64_t tg_tokens_text_bytes(const TgTokenizer *tok, const int32_t *ids, size_t n) {
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        if (ids[i] >= 0 && !is_control(tok, ids[i])) tg_tokenizer_token_bytes(tok, ids[i], &len);
        bytes += len;
    }
    return bytes;
}

uint64_t tg_count_targets(const int32_t *targets, size_t n) {
    uint64_t count = 0;
    for (size_t i = 0; i < n; i++) count += targets[i] != TG_IGNORE_INDEX;
    return count;
}

double tg_mean_over_targets(const double *losses, const double *counts, int64_t n) {
    double total = 0.0, count = 0.0;
    for (int64_t i = 0; i < n; i++) {
        total += losses[i] * counts[i];
        count += counts[i];
    }
    return count > 0 ? total / count : NAN;
}

double tg_evaluate_loss(TgModel *model, TgTape *tape, const TgEvalBatches *e) {
    double *losses = tg_malloc((size_t)(e->n > 0 ? e->n : 1) * sizeof(double));
    tg_eval_batch_losses(model, tape, e, 0, e->n, losses);
    double mean = tg_mean_in_order(losses, e->n);
    free(losses);
    return mean;
}

TgStatus tg_evaluate_conversations(TgModel *model, TgTape *tape, const TgTokenizer *tok, const TgSplit *split,
                                   int64_t batch, TgSplitEval *out) {
    double *loss = &out->loss;
    uint64_t *targets = &out->targets, *bytes = &out->bytes, *rows = &out->rows;
    int64_t seq = model->cfg.seq_len;
    size_t window = (size_t)(batch * seq);
    TgSftLoader ld;
    TG_TRY(tg_sft_loader_init(&ld, split, batch, seq, 0, tok->eot_id, TG_SFT_ORDER_ONCE));
    int32_t *in = tg_malloc(window * sizeof *in), *tg = tg_malloc(window * sizeof *tg),
            *ks = tg_malloc(window * sizeof *ks);
    double nats = 0;
    *targets = *bytes = *rows = 0;
    TgStatus s = TG_OK;
    bool old = tg_tape_set_grad_enabled(tape, false);
    while (s == TG_OK && !tg_sft_loader_done(&ld)) {
        s = tg_sft_loader_next(&ld, in, tg, ks);
        if (s != TG_OK) break;
        uint64_t count = tg_count_targets(tg, window);
        nats +=
            (double)tg_model_loss(
                model, tape, &(TgBatch){.tokens = in, .targets = tg, .key_start = ks, .batch = batch, .seq = seq}, NULL)
                ->data[0] *
            (double)count;
        tg_tape_reset(tape);
        *targets += count, *bytes += tg_tokens_text_bytes(tok, tg, window), *rows += (uint64_t)batch;
    }
    tg_tape_set_grad_enabled(tape, old);
    free(in), free(tg), free(ks);
    tg_sft_loader_free(&ld);
    *loss = *targets ? nats / (double)*targets : NAN;
    return s;
}
