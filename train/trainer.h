/* The training loop and the run folder it writes. */
#ifndef TAPEGRAD_TRAINER_H
#define TAPEGRAD_TRAINER_H

#include <stdbool.h>
#include <stdint.h>

#include "../lib/error.h"
#include "model.h"
#include "optim.h"

/* Fields that define what the run is (model shape, tokenizer, data, seed) start "unset" (0,
 * NULL, -1) so that a resumed run can tell a flag the user gave from a default: a given value
 * that differs from the checkpoint's is refused. */
typedef struct TrainOptions {
    /* what the run is */
    const char *preset;        /* NULL: "small" */
    ModelConfig model;         /* 0 fields: from the preset; vocab: from the tokenizer */
    int ffn;                   /* -1: SwiGLU; else an FfnKind */
    const char *data_path;     /* NULL: the default corpus */
    const char *tokenizer;     /* NULL: "char" ("bpe" for the minimind-26m preset) */
    double val_fraction;       /* 0: 0.1 */
    int64_t seed;              /* -1: 1337 */
    /* how it trains (may change on resume) */
    int64_t steps, batch, accum, warmup;
    double time_budget_min;    /* 0: none */
    double lr, min_lr, clip;
    AdamWConfig adamw;
    int64_t eval_every, eval_batches, log_every, ckpt_every, sample_tokens;
    int64_t log_grads;         /* 0: off; else gradient/activation statistics to grads.jsonl every N steps */
    int keep;
    int threads;
    const char *out_dir;
    const char *resume;        /* run folder or checkpoint file to continue, or NULL */
    const char *init_from;     /* safetensors weights to start a new run from, or NULL */
    int64_t stop_after;        /* -1: none; else stop (and checkpoint) after this step, schedule unchanged */
} TrainOptions;

void train_options_defaults(TrainOptions *o);

/* How a run trains (--steps, --batch, --lr, ... as "--flag value" lines) is written to this file
 * of the run folder at every start, so that `train --resume DIR` alone continues with the same
 * settings; a flag given with --resume overrides its saved value. */
#define TRAIN_OPTIONS_FILE "train_options.txt"
tg_status train_options_save(const char *dir, const TrainOptions *o);
/* Runs a whole training run; prints progress and errors; returns the process exit code. */
int train_run(TrainOptions *o);

/* Mean loss over `n_batches` fixed batches of (batch, seq) tokens, no gradients. */
double evaluate_loss(Model *model, Tape *tape, const int32_t *inputs, const int32_t *targets, int64_t n_batches,
                     int64_t batch, int64_t seq);

#endif
