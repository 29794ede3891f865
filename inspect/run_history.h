/* What a run folder recorded while it trained, read back: metrics.jsonl (loss, val loss, lr,
 * global grad norm per step, the accuracies of --eval-task's tasks at each evaluation), when the
 * run used --log-grads, grads.jsonl (per-parameter gradient statistics and per-layer FFN
 * activation statistics at the logged steps), and when it used --probe-prompts, probes.jsonl
 * (each prompt's continuation at each evaluation). Feeds `tapegrad report` and `tapegrad
 * compare-ffn`. */
#ifndef TAPEGRAD_INSPECT_RUN_HISTORY_H
#define TAPEGRAD_INSPECT_RUN_HISTORY_H

#include <stdbool.h>
#include <stdint.h>

#include "data/task_file.h"
#include "tapegrad/error.h"
#include "inspect/report.h"

typedef struct TgMetricRow {
    int64_t step;
    double loss, val_loss, lr, grad_norm; /* NaN where the line had no value */
    double val_bpb;                       /* the val loss in bits per byte (train/evaluate.h: tg_bits_per_byte) */
} TgMetricRow;

/* A task's accuracies at one evaluation: a line's "task/NAME/acc" and "task/NAME/acc_norm"
 * (train/tasks.h), each a number in [0, 1] or null, and "task/NAME/items" and "task/NAME/chance"
 * (runs from before those were written have neither). */
typedef struct TgTaskPoint {
    int64_t step;
    int task;             /* its name: TgRunHistory.task_names[task] */
    double acc, acc_norm; /* NaN where the line had none */
    int64_t items;        /* 0 where the line had none */
    double chance;        /* NaN where the line had none */
} TgTaskPoint;
enum { TG_RUN_HISTORY_MAX_TASKS = 64 }; /* distinct task names a metrics.jsonl may hold */

/* One line of grads.jsonl. */
typedef struct TgGradLogRow {
    int64_t step;
    double *grad_norm, *weight_norm, *update_ratio;                       /* [n_params] */
    double *dead_frac, *zero_frac, *act_mean, *act_std, *w1_zero_grad_rows; /* [n_layers], the training batch */
    double *probe_dead_frac, *probe_zero_frac; /* [n_layers], the probe set (TgTrainHooks); NaN without one */
} TgGradLogRow;

/* One line of probes.jsonl (train/probe_prompts.h): a prompt's continuation at a step. */
typedef struct TgProbeRow {
    int64_t step;
    char *prompt, *text; /* decoded and NUL-terminated (a NUL inside, written as \u0000, ends them) */
} TgProbeRow;

/* The per-layer statistics of a log row, by name, for code that charts any of them. */
typedef enum {
    TG_LAYER_DEAD_FRAC,
    TG_LAYER_ZERO_FRAC,
    TG_LAYER_ACT_MEAN,
    TG_LAYER_ACT_STD,
    TG_LAYER_W1_ZERO_GRAD_ROWS,
    TG_LAYER_PROBE_DEAD_FRAC,
    TG_LAYER_PROBE_ZERO_FRAC,
} TgLayerStat;
const double *tg_grad_log_layer_values(const TgGradLogRow *row, TgLayerStat stat);

typedef struct TgRunHistory {
    TgMetricRow *metrics;
    int64_t n_metrics;
    char (*task_names)[TG_TASK_NAME_CAP]; /* [n_tasks], in the order the lines first name them */
    int n_tasks;
    TgTaskPoint *task_points; /* by step, each task once a step */
    int64_t n_task_points;
    TgGradLogRow *logs;        /* empty when the run had no --log-grads */
    int64_t n_logs;
    int n_params, n_layers;
    char **param_names;      /* [n_params] */
    char ffn_kind[16];       /* "relu" | "swiglu" ("" without grads.jsonl) */
    bool has_probe;          /* the first logged line holds probe-set statistics */
    TgProbeRow *probes;      /* in the file's order; empty when the run had no --probe-prompts */
    int64_t n_probes;
} TgRunHistory;

/* Reads DIR/metrics.jsonl (required), DIR/grads.jsonl and DIR/probes.jsonl (optional). A run
 * resumed from an earlier checkpoint repeats steps: later lines replace earlier ones from that
 * step on. A member "task/..." of a metrics line must be "task/NAME/acc" or "task/NAME/acc_norm"
 * (NAME a task's name, data/task_file.h), given once, with a number in [0, 1] or null; at most
 * TG_RUN_HISTORY_MAX_TASKS names. */
TgStatus tg_run_history_load(const char *dir, TgRunHistory *h);
void tg_run_history_free(TgRunHistory *h);

/* The last val loss recorded (NaN if none), and the last val bits per byte. */
double tg_run_history_final_val_loss(const TgRunHistory *h);
double tg_run_history_final_val_bpb(const TgRunHistory *h);
/* Mean train loss of the last `n` steps (a single step's loss is noisy). */
double tg_run_history_final_train_loss(const TgRunHistory *h, int64_t n);
/* Mean over layers of a per-layer series at log row `row` (e.g. h->logs[row].dead_frac). */
double tg_run_history_layer_mean(const TgRunHistory *h, const double *per_layer);

/* Adds the charts and tables of one run (loss, val loss, lr, grad norms, task accuracies, update
 * ratios, FFN dead/zero fractions, activation std) to a report. */
void tg_report_add_run(TgReport *r, const TgRunHistory *h);

/* The whole report of one run folder: a table of its facts (model config from its latest
 * checkpoint, the best checkpoint DIR/best names), then tg_report_add_run, then a table of each
 * probe prompt's continuations by step; the HTML to html_path, the series to jsonl_path. */
TgStatus tg_run_report_write(const char *dir, const TgRunHistory *h, const char *html_path, const char *jsonl_path);

#endif
