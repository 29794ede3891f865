/* A run folder: tokenizer.txt, train.tok, val.tok, metrics.jsonl, ckpt-*.tgck, latest.
 * Opening one for training prepares the data and builds (or restores) the model; opening one
 * for sampling or evaluation loads the tokenizer and the newest checkpoint. */
#ifndef TAPEGRAD_RUN_H
#define TAPEGRAD_RUN_H

#include <stdbool.h>
#include <stdio.h>

#include "../data/tokenizer.h"
#include "checkpoint.h"
#include "checkpoint_folder.h"
#include "model.h"
#include "trainer.h"

typedef struct Run {
    char dir[4096];
    Tokenizer tok;
    Model model;
    bool model_built;
    int32_t *train_tokens, *val_tokens;
    int64_t n_train, n_val;
    TrainerState state;
    bool resumed;
    bool initialized_from_file; /* --init-from: weights from a safetensors file */
    bool usage_error; /* the failure was a bad flag (exit 2) rather than a bad file (exit 1) */
    FILE *metrics;
    char last_checkpoint[4200];
} Run;

/* Prepares a new run (or continues o->resume), filling o's derived defaults (warmup, min_lr).
 * A resume refuses identity flags (TrainOptions) that differ from the run's. */
tg_status run_open_for_training(TrainOptions *o, Run *run);
/* For sample/eval/inspect: DIR (its latest checkpoint) or a checkpoint file inside a run folder.
 * The run's tokenizer must match the checkpoint's. */
tg_status run_open_existing(const char *dir_or_file, Run *run);
void run_close(Run *run);

void run_log_metrics(Run *run, int64_t step, double loss, double val_loss, double lr, double grad_norm,
                     double tokens_per_s, double elapsed_s);
/* Encodes prompt (empty: the <eot> token), generates n tokens and prints the decoded text. */
tg_status run_print_sample(Run *run, Tape *tape, const char *prompt, int64_t n, double temperature, int top_k,
                           uint64_t seed);

#endif
