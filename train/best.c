/* The best checkpoint and the early stop: the record of the best evaluation (best.h). */
#include "train/best.h"

#include <math.h>

TgEvalMetric tg_best_watched(TgEvalMetric keep_best, int64_t early_stop) {
    if (keep_best != TG_EVAL_METRIC_NONE) return keep_best;
    return early_stop > 0 ? TG_EVAL_METRIC_VAL_LOSS : TG_EVAL_METRIC_NONE;
}

double tg_best_metric_value(TgEvalMetric metric, const TgEvalFigures *figures) {
    switch (metric) {
    case TG_EVAL_METRIC_VAL_LOSS:
        return figures->val_loss;
    case TG_EVAL_METRIC_VAL_BPB:
        return figures->val_bpb;
    case TG_EVAL_METRIC_TASK_ACC:
    case TG_EVAL_METRIC_TASK_ACC_NORM:
        return figures->task;
    default:
        return NAN;
    }
}

void tg_best_record_start(TgBestRecord *record, TgEvalMetric metric) {
    if (metric == TG_EVAL_METRIC_NONE)
        *record = (TgBestRecord){0};
    else if (!record->kept)
        *record = (TgBestRecord){.kept = true, .value = NAN, .step = -1};
}

bool tg_best_record_update(TgBestRecord *record, TgEvalMetric metric, double value, int64_t step) {
    if (!record->kept) return false;
    bool better =
        isfinite(value) &&
        (record->step < 0 || (tg_eval_metric_maximised(metric) ? value > record->value : value < record->value));
    if (better)
        *record = (TgBestRecord){.kept = true, .value = value, .step = step, .evals_since = 0};
    else
        record->evals_since++;
    return better;
}

bool tg_best_record_exhausted(const TgBestRecord *record, int64_t patience) {
    return patience > 0 && record->kept && record->evals_since >= patience;
}
