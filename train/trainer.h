/* The training loop: data -> forward -> backward -> clip -> AdamW, with evaluation, metrics,
 * checkpoints, progress reports and a sample at the end. The trainer prints nothing: what a person
 * should see reaches the caller through a TgTrainReporter (the CLI formats it, cli/train_report.c). */
#ifndef TAPEGRAD_TRAIN_TRAINER_H
#define TAPEGRAD_TRAIN_TRAINER_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "tapegrad/error.h"
#include "tapegrad/model.h"
#include "tapegrad/optim.h"
#include "data/prepare.h"
#include "data/sft_data.h"
#include "support/messages.h"
#include "tapegrad/tokenizer.h"
#include "run/train_options.h"

/* What a caller can watch a run do (all members may be NULL). Inspection (--log-grads) comes in
 * this way: the trainer knows nothing of it. On a step for which watch_step(step) is true (step
 * counted from 1), after_forward sees each micro-batch's FFN hidden activations (layers of
 * them, valid until the tape is reset), before_update the summed gradients before clipping, and
 * after_update the model after AdamW. In a data-parallel run only rank 0 calls them: after_forward
 * then sees rank 0's micro-batches, before_update the gradients summed over every rank.
 *
 * The probe: with probe_batches > 0, a watched step first runs that many fixed val batches
 * (tg_loader_fixed_batches: the same held-out tokens at every watched step) forward with nothing
 * recorded, through the weights the step starts from (those its training forward then uses),
 * and hands each batch's FFN hidden activations to after_probe_forward. */
typedef struct TgTrainHooks {
    void *ctx;
    TgStatus (*start)(void *ctx, const char *run_dir, const TgModel *model);
    bool (*watch_step)(void *ctx, int64_t step);
    int64_t probe_batches;
    void (*after_probe_forward)(void *ctx, TgTensor *const *ffn_hidden);
    void (*after_forward)(void *ctx, TgTensor *const *ffn_hidden);
    void (*before_update)(void *ctx, const TgModel *model);
    TgStatus (*after_update)(void *ctx, const TgModel *model, int64_t step, double lr, double loss);
} TgTrainHooks;

/* A progress report: after step 1, every --log-every steps, at each evaluation and at the last step. */
typedef struct TgTrainProgress {
    int64_t step, steps;
    double loss;          /* the step's mean over its micro-batches */
    double val_loss;      /* the latest evaluation's; NaN before the first */
    double val_bpb;       /* the same in bits per byte of the val text (train/evaluate.h: tg_bits_per_byte) */
    double lr, grad_norm; /* the step's rate, and its gradient norm before clipping */
    double tokens_per_s;  /* since the previous report */
    double eta_s;         /* until --steps at the pace since the first step, evaluations counted, or the time budget
                             if sooner; NaN at the first step (nothing measured yet) */
} TgTrainProgress;

/* The sample a finished run ends with (--sample-tokens): the prompt and its continuation. */
typedef struct TgTrainSample {
    const char *prompt, *text;
    size_t prompt_len, text_len;
    int64_t tokens;       /* asked for; text may be shorter (it stops at <eot>) */
    double temperature;
    int top_k;
} TgTrainSample;

/* How a run tells a person what it does (every member may be NULL; rank 0 alone reports in a
 * data-parallel run). message: what is prepared, the model and data, notes and warnings, the
 * summary at the end (support/messages.h); progress and sample: the figures, for the caller to lay
 * out (a bar on a terminal, a line in a log). */
typedef struct TgTrainReporter {
    void *ctx;
    void (*message)(void *ctx, TgMessageLevel level, const char *text);
    void (*progress)(void *ctx, const TgTrainProgress *p);
    void (*sample)(void *ctx, const TgTrainSample *s);
    void (*preparing)(void *ctx, const TgPrepareProgress *p); /* preparing --data (data/prepare.h) */
    /* The run's folder can take files: called before the first step with the folder's path (a
     * new run's temporary one), and again with its final path once a new run moved into place
     * after its first step (a file opened in the temporary folder moved with it and stays open).
     * For the caller's own files there, such as a log (TG_RUN_LOG_FILE). */
    void (*folder)(void *ctx, const char *run_dir);
} TgTrainReporter;

/* Runs a whole training run (a new one, or the invocation's resume) of the options `req` (validated,
 * their defaults derived: tg_train_options_request), reporting to `reporter` (may be NULL:
 * silent). When *stop becomes non-zero (a signal handler's flag: the
 * signal's number; stop may be NULL) the loop ends after the current step and saves, as
 * --stop-after does. In a data-parallel run (lib/dist.h) every rank calls it: the ranks stop
 * after the same step when a signal reached any of them, and *stop then receives the signal they
 * agreed on, on every rank. Returns TG_OK when the run ended normally or was stopped and saved;
 * otherwise a status and message (TG_ERR_ARG: the options; TG_ERR_NUMERIC: the loss or a
 * gradient became NaN/Inf; I/O and format errors: files). A new run that fails before its first
 * step leaves nothing behind. */
TgStatus tg_train_run(const TgTrainRequest *req, volatile sig_atomic_t *stop, const TgTrainHooks *hooks,
                      const TgTrainReporter *reporter);

#endif
