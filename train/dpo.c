/* A batch of pairs' DPO loss, and the reference's log-probabilities (dpo.h). */
#include "train/dpo.h"

#include <stdlib.h>

#include "data/pair_loader.h"
#include "tapegrad/ops.h"

TgTensor *tg_dpo_batch_loss(TgModel *model, TgTape *tape, const TgBatch *batch, const float *ref, double beta,
                            TgDpoStats *stats) {
    TG_CHECK(batch->batch % 2 == 0 && batch->key_start == NULL, "dpo: a batch is 2P unpacked rows, not %lld",
             (long long)batch->batch);
    TgTensor *logits = tg_model_forward(model, tape, batch, NULL);
    TgTensor *logps = tg_sequence_logprob(tape, logits, batch->targets, TG_IGNORE_INDEX);
    TgTensor *loss = tg_dpo_loss(tape, logps, ref, beta);
    if (stats) {
        int64_t P = batch->batch / 2;
        *stats = (TgDpoStats){0};
        for (int64_t p = 0; p < P; p++) {
            double c = logps->data[p], r = logps->data[P + p];
            double m = beta * ((c - ref[p]) - (r - ref[P + p]));
            stats->margin += m / (double)P;
            stats->accuracy += (m > 0) / (double)P;
            stats->chosen += c / (double)P;
            stats->rejected += r / (double)P;
        }
    }
    return loss;
}

TgStatus tg_dpo_reference(TgModel *model, TgTape *tape, const TgSplit *split, int64_t pairs, int64_t seq,
                          int32_t pad_id, float *ref) {
    TgPairLoader ld;
    TG_TRY(tg_pair_loader_init(&ld, split, pairs, seq, 0, pad_id, false));
    size_t cells = (size_t)(2 * pairs * seq);
    int32_t *in = tg_malloc(cells * sizeof *in), *tg = tg_malloc(cells * sizeof *tg);
    uint64_t *which = tg_malloc((size_t)pairs * sizeof *which);
    bool grad = tg_tape_set_grad_enabled(tape, false);
    TgStatus s = TG_OK;
    /* the split's order once: the last batch wraps to the first pairs again, which are skipped */
    for (size_t done = 0; done < ld.n_pairs && s == TG_OK;) {
        s = tg_pair_loader_next(&ld, in, tg, which);
        if (s != TG_OK) break;
        TgBatch b = {.tokens = in, .targets = tg, .batch = 2 * pairs, .seq = seq};
        TgTensor *logits = tg_model_forward(model, tape, &b, NULL);
        TgTensor *logps = tg_sequence_logprob(tape, logits, tg, TG_IGNORE_INDEX);
        for (int64_t p = 0; p < pairs && done < ld.n_pairs; p++, done++) {
            ref[2 * which[p]] = logps->data[p];
            ref[2 * which[p] + 1] = logps->data[pairs + p];
        }
        tg_tape_reset(tape);
    }
    tg_tape_set_grad_enabled(tape, grad);
    tg_pair_loader_free(&ld);
    free(in), free(tg), free(which);
    return s;
}
