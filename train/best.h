/* The best checkpoint and the early stop (--keep-best, --early-stop): which evaluation of the
 * figure a run watches is the best so far, and how many came after it without bettering it.
 *
 * The record (TgBestRecord, checkpoint/checkpoint.h) is part of the trainer state, so every
 * checkpoint holds it as it was at its step and a resumed run goes on with it exactly. Only the
 * evaluations of --eval-every count (and the one at --steps): not the one a stopped run makes on
 * its way out, which a run that never stopped does not make. A value better than the best by
 * any amount is the new best; an equal one, or one that is not a number, is not. */
#ifndef TAPEGRAD_TRAIN_BEST_H
#define TAPEGRAD_TRAIN_BEST_H

#include <stdbool.h>
#include <stdint.h>

#include "checkpoint/checkpoint.h"
#include "run/train_options.h"

/* The figures of one evaluation, for the metric to take its value from. */
typedef struct TgEvalFigures {
    double val_loss, val_bpb;
    double task; /* the accuracy of the task --keep-best names */
} TgEvalFigures;

/* The figure a run watches: --keep-best's (the run's, `keep_best`), else val_loss when it stops
 * early, else none. */
TgEvalMetric tg_best_watched(TgEvalMetric keep_best, int64_t early_stop);
/* The value of `metric` among the figures (NaN for none). */
double tg_best_metric_value(TgEvalMetric metric, const TgEvalFigures *figures);
/* Readies the record for a run watching `metric`: a record the run resumed with goes on; a run
 * that watches a figure and has none starts an empty one; one that watches none keeps none. */
void tg_best_record_start(TgBestRecord *record, TgEvalMetric metric);
/* The evaluation at `step` of value `value`: true when it is better than the best so far and
 * becomes the best; otherwise one more evaluation since the best. */
bool tg_best_record_update(TgBestRecord *record, TgEvalMetric metric, double value, int64_t step);
/* Whether a run with --early-stop `patience` (> 0) stops: `patience` evaluations since the best. */
bool tg_best_record_exhausted(const TgBestRecord *record, int64_t patience);

#endif
