/* The training loop: data -> forward -> backward -> clip -> AdamW, with evaluation, metrics,
 * checkpoints, a progress line and a sample at the end. */
#ifndef TAPEGRAD_TRAINER_H
#define TAPEGRAD_TRAINER_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "tapegrad/error.h"
#include "tapegrad/model.h"
#include "tapegrad/optim.h"
#include "train/train_options.h"

/* What a caller can watch a run do (all members may be NULL). Inspection (--log-grads) comes in
 * this way: the trainer knows nothing of it. On a step for which watch_step(step) is true (step
 * counted from 1), after_forward sees each micro-batch's FFN hidden activations (layers of
 * them, valid until the tape is reset), before_update the summed gradients before clipping, and
 * after_update the model after AdamW. In a data-parallel run only rank 0 calls them: after_forward
 * then sees rank 0's micro-batches, before_update the gradients summed over every rank.
 *
 * The probe: with probe_batches > 0, a watched step first runs that many fixed val batches
 * (loader_fixed_batches: the same held-out tokens at every watched step) forward with nothing
 * recorded, through the weights the step starts from (those its training forward then uses),
 * and hands each batch's FFN hidden activations to after_probe_forward. */
typedef struct TrainHooks {
    void *ctx;
    TgStatus (*start)(void *ctx, const char *run_dir, const TgModel *model);
    bool (*watch_step)(void *ctx, int64_t step);
    int64_t probe_batches;
    void (*after_probe_forward)(void *ctx, TgTensor *const *ffn_hidden);
    void (*after_forward)(void *ctx, TgTensor *const *ffn_hidden);
    void (*before_update)(void *ctx, const TgModel *model);
    TgStatus (*after_update)(void *ctx, const TgModel *model, int64_t step, double lr, double loss);
} TrainHooks;

/* Runs a whole training run (a new one, or o->resume), printing progress to stdout (a bar on
 * stderr when it is a terminal). When *stop becomes non-zero (a signal handler's flag: the
 * signal's number; stop may be NULL) the loop ends after the current step and saves, as
 * --stop-after does. In a data-parallel run (train/dist.h) every rank calls it: the ranks stop
 * after the same step when a signal reached any of them, and *stop then receives the signal they
 * agreed on, on every rank. Returns TG_OK when the run ended normally or was stopped and saved;
 * otherwise a status and message (TG_ERR_ARG: the options; TG_ERR_NUMERIC: the loss or a
 * gradient became NaN/Inf; I/O and format errors: files). A new run that fails before its first
 * step leaves nothing behind. */
TgStatus train_run(TrainOptions *o, volatile sig_atomic_t *stop, const TrainHooks *hooks);

/* Mean loss over `n_batches` fixed batches of (batch, seq) tokens, no gradients. */
double evaluate_loss(TgModel *model, TgTape *tape, const int32_t *inputs, const int32_t *targets, int64_t n_batches,
                     int64_t batch, int64_t seq);

#endif
