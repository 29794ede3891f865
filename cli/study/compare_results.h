/* What `tapegrad compare-ffn` found, as its report and summaries read it: every run (one per
 * seed, learning rate and FFN), the figures of each, and per (learning rate, FFN) cell their
 * spread over the seeds; per learning rate, ReLU's val loss against SwiGLU's (seed_stats.h).
 * Internal to inspect/compare_*.c. */
#ifndef TAPEGRAD_STUDY_COMPARE_RESULTS_H
#define TAPEGRAD_STUDY_COMPARE_RESULTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "inspect/report.h"
#include "inspect/run_history.h"
#include "cli/study/seed_stats.h"
#include "tapegrad/error.h"
#include "tapegrad/model.h"

enum { COMPARE_MAX_LRS = 8, COMPARE_MAX_SEEDS = 16, COMPARE_KINDS = 2 };
/* Random inputs per layer for the check of the initial weights (tg_ffn_zero_fraction_at_init). */
enum { COMPARE_INIT_CHECK_ROWS = 1024 };
/* The FFN of cell column k: ReLU first, then SwiGLU. */
extern const TgFfnKind compare_kinds[COMPARE_KINDS];

/* The figures of one run. Dead units and zeros are means over the layers; "training batch" is
 * the batch the logged step trained on, "probe" the fixed held-out batches (TgTrainHooks). */
typedef enum {
    FIG_VAL_LOSS,         /* the last val loss */
    FIG_TRAIN_LOSS,       /* mean train loss of the last 10 steps */
    FIG_PROBE_DEAD_FIRST, /* the first logged step is step 1: the initial weights */
    FIG_PROBE_DEAD_PEAK,  /* the largest over the logged steps */
    FIG_PROBE_DEAD_END,   /* the last logged step */
    FIG_DEAD_FIRST,
    FIG_DEAD_PEAK,
    FIG_DEAD_END,
    FIG_ZEROS_FIRST,
    FIG_ZEROS_END,
    FIG_PROBE_ZEROS_END,
    FIG_W1_ROWS_END,      /* w1 rows whose gradient was all zero */
    N_FIGURES
} Figure;

/* A figure's key (summary.json) and its label (tables). */
const char *figure_key(Figure f);
const char *figure_label(Figure f);

typedef enum { RUN_NEW, RUN_PARTIAL, RUN_FINISHED, RUN_DIVERGED } RunState;

typedef struct CompareRun {
    double lr;
    TgFfnKind kind;
    int64_t seed;
    char dir[TG_PATH_CAP];
    RunState state;        /* what its folder held before this invocation (RUN_DIVERGED also after it) */
    int64_t hidden;        /* the FFN hidden size it trains with */
    TgRunHistory h;
    bool loaded;           /* h holds its history */
    double fig[N_FIGURES]; /* NaN when not measured (a diverged run has none) */
} CompareRun;

/* The seeds of one (learning rate, FFN) pair. */
typedef struct CompareCell {
    double lr;
    TgFfnKind kind;
    int64_t hidden;
    TgModelConfig cfg;            /* from a finished run's checkpoint */
    bool has_cfg;
    int n_runs;
    CompareRun *runs[COMPARE_MAX_SEEDS];
    SeedSpread fig[N_FIGURES];
    int n_layers;               /* the fewest layers any of its loaded runs logged */
} CompareCell;

typedef struct CompareResults {
    const char *preset, *data;
    int64_t steps, batch, log_grads, eval_every, probe_batches;
    int n_lrs, n_seeds, n_runs;
    double lrs[COMPARE_MAX_LRS];
    int64_t seeds[COMPARE_MAX_SEEDS];
    CompareRun *runs;    /* [n_runs], seed-major: run (s, l, k) at (s * n_lrs + l) * COMPARE_KINDS + k */
    CompareCell cells[COMPARE_MAX_LRS][COMPARE_KINDS];
    SeedComparison val_loss[COMPARE_MAX_LRS]; /* ReLU (a) against SwiGLU (b) */
    double init_zero_frac[COMPARE_KINDS];     /* tg_ffn_zero_fraction_at_init of each cell's model, first seed */
    int trained, reused;                      /* runs this invocation trained (or resumed), and reused */
    double wall_s, load_start, load_end;      /* this invocation; load averages over 1 minute */
} CompareResults;

static inline CompareRun *compare_run_at(const CompareResults *r, int seed, int lr, int kind) {
    return &r->runs[(seed * r->n_lrs + lr) * COMPARE_KINDS + kind];
}

/* Loads every run's history and fills the figures, the cells, the comparisons and the check
 * of the initial weights. */
TgStatus compare_results_load(CompareResults *r, int threads);
void compare_results_free(CompareResults *r);

/* The mean over a cell's loaded runs of one layer's value at the last logged step (l below the
 * cell's n_layers). */
double compare_cell_layer_mean(const CompareCell *c, TgLayerStat stat, int layer);
/* A number with `digits` decimals (a sign when `sign`), "-" when it is not finite. */
void format_number(char *buf, size_t cap, double v, int digits, bool sign);
/* "mean ± std" and "min – max" of a spread, with `digits` decimals ("-" when nothing was measured). */
void format_mean_std(char *buf, size_t cap, const SeedSpread *s, int digits);
void format_min_max(char *buf, size_t cap, const SeedSpread *s, int digits);
/* The parameter pairing in one sentence (counts from the cells' checkpoints). */
void compare_pairing_text(const CompareResults *r, char *buf, size_t cap);
/* How the report decides that a val-loss difference exceeds the seed-to-seed spread, in words. */
extern const char compare_spread_rule[];
/* The check of the initial weights in one sentence. */
void compare_init_check_text(const CompareResults *r, char *buf, size_t cap);
/* "1337, 1338, 1339" */
void compare_seeds_text(const CompareResults *r, char *buf, size_t cap);

/* The combined report (report.html and compare.jsonl come from it). */
TgReport *compare_report_build(const CompareResults *r);
/* summary.json: every run's figures and layers, every cell's spreads, every comparison. */
TgStatus compare_summary_json_write(const CompareResults *r, const char *path);
/* summary.md: the tables to paste into a README, to a file and (out may be NULL) a stream. */
TgStatus compare_summary_md_write(const CompareResults *r, const char *command, const char *path, FILE *out);

#endif
