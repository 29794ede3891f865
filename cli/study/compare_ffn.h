/* The dying-ReLU experiment behind `tapegrad compare-ffn`. For every seed and learning rate,
 * trains a ReLU FFN model and a SwiGLU FFN model of equal parameter count (ReLU hidden = 3/2 x
 * the preset's SwiGLU hidden, unless told) from that seed (initialisation and data order), with
 * the ordinary trainer, gradient logging, and dead units counted on a fixed probe set of val
 * batches as well as on the training batch. Then reads the runs back and reports, per learning
 * rate and FFN, the mean and spread over the seeds, and whether ReLU's and SwiGLU's val losses
 * differ by more than that spread (cli/study/seed_stats.h).
 *
 * Every run folder stays under OUT (OUT/lr<lr>-<ffn>-s<seed>), so inspect, sample, eval and
 * report work on each. OUT/report.html holds the combined report, OUT/compare.jsonl every series
 * it charts, OUT/summary.json every figure, OUT/summary.md the tables for a README. */
#ifndef TAPEGRAD_STUDY_COMPARE_FFN_H
#define TAPEGRAD_STUDY_COMPARE_FFN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "tapegrad/error.h"
#include "support/options.h"
#include "train/trainer.h"

typedef struct CompareFfnOptions {
    TgPreset preset;
    const char *lrs, *seeds, *data, *dataset, *out;
    TgPrecision precision; /* of every run */
    int64_t steps, log_grads, eval_every, eval_batches, probe_batches, batch, seed, relu_hidden;
    int threads;
    bool reuse;
    bool force; /* replace the report and summaries an earlier experiment left in out */
} CompareFfnOptions;

const TgOptTable *compare_ffn_option_table(void);
void compare_ffn_defaults(CompareFfnOptions *o);
/* Runs the experiment; every check happens before anything is written. A non-zero *stop (may be
 * NULL) ends it after the current run's current step (that run is saved; --reuse continues it).
 * A run whose loss turns NaN or Inf is recorded as diverged (OUT/<run>/diverged.txt) and the
 * experiment goes on. What it does, every run's progress and the summary's tables go to `reporter`
 * (may be NULL). */
TgStatus compare_ffn_run(const CompareFfnOptions *o, volatile sig_atomic_t *stop, const TgTrainReporter *reporter);

#endif
