/* What a run folder recorded while it trained, read back: metrics.jsonl (loss, val loss, lr,
 * global grad norm per step) and, when the run used --log-grads, grads.jsonl (per-parameter
 * gradient statistics and per-layer FFN activation statistics at the logged steps). Feeds
 * `tapegrad report` and `tapegrad compare-ffn`. */
#ifndef TAPEGRAD_RUN_HISTORY_H
#define TAPEGRAD_RUN_HISTORY_H

#include <stdbool.h>
#include <stdint.h>

#include "tapegrad/error.h"
#include "inspect/report.h"

typedef struct MetricRow {
    int64_t step;
    double loss, val_loss, lr, grad_norm; /* NaN where the line had no value */
    double val_bpb;                      /* the val loss in bits per byte (train/trainer.h: bits_per_byte) */
} MetricRow;

/* One line of grads.jsonl. */
typedef struct GradLogRow {
    int64_t step;
    double *grad_norm, *weight_norm, *update_ratio;                       /* [n_params] */
    double *dead_frac, *zero_frac, *act_mean, *act_std, *w1_zero_grad_rows; /* [n_layers], the training batch */
    double *probe_dead_frac, *probe_zero_frac; /* [n_layers], the probe set (TrainHooks); NaN without one */
} GradLogRow;

/* The per-layer statistics of a log row, by name, for code that charts any of them. */
typedef enum {
    LAYER_DEAD_FRAC,
    LAYER_ZERO_FRAC,
    LAYER_ACT_MEAN,
    LAYER_ACT_STD,
    LAYER_W1_ZERO_GRAD_ROWS,
    LAYER_PROBE_DEAD_FRAC,
    LAYER_PROBE_ZERO_FRAC,
} LayerStat;
const double *grad_log_layer_values(const GradLogRow *row, LayerStat stat);

typedef struct RunHistory {
    MetricRow *metrics;
    int64_t n_metrics;
    GradLogRow *logs;        /* empty when the run had no --log-grads */
    int64_t n_logs;
    int n_params, n_layers;
    char **param_names;      /* [n_params] */
    char ffn_kind[16];       /* "relu" | "swiglu" ("" without grads.jsonl) */
    bool has_probe;          /* the first logged line holds probe-set statistics */
} RunHistory;

/* Reads DIR/metrics.jsonl (required) and DIR/grads.jsonl (optional). A run resumed from an
 * earlier checkpoint repeats steps: later lines replace earlier ones from that step on. */
TgStatus run_history_load(const char *dir, RunHistory *h);
void run_history_free(RunHistory *h);

/* The last val loss recorded (NaN if none), and the last val bits per byte. */
double run_history_final_val_loss(const RunHistory *h);
double run_history_final_val_bpb(const RunHistory *h);
/* Mean train loss of the last `n` steps (a single step's loss is noisy). */
double run_history_final_train_loss(const RunHistory *h, int64_t n);
/* Mean over layers of a per-layer series at log row `row` (e.g. h->logs[row].dead_frac). */
double run_history_layer_mean(const RunHistory *h, const double *per_layer);

/* Adds the charts and tables of one run (loss, val loss, lr, grad norms, update ratios, FFN
 * dead/zero fractions, activation std) to a report. */
void report_add_run(Report *r, const RunHistory *h);

/* The whole report of one run folder: a table of its facts (model config from its latest
 * checkpoint), then report_add_run; the HTML to html_path, the series to jsonl_path. */
TgStatus run_report_write(const char *dir, const RunHistory *h, const char *html_path, const char *jsonl_path);

#endif
