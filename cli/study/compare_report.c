/* compare-ffn's combined HTML report: what was compared and how, the val-loss comparison per
 * learning rate, the figures of every (learning rate, FFN) cell over its seeds, then per learning
 * rate the curves as seed means with min-max bands and a per-layer table. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/study/compare_results.h"
#include "inspect/inspect.h"

/* ReLU red, SwiGLU blue, in every chart (report.h's palette). */
static int kind_color(int k) { return compare_kinds[k] == TG_FFN_RELU ? 1 : 0; }

/* Where a per-step curve comes from: a loss of metrics.jsonl, or a layer statistic of
 * grads.jsonl (one layer, or the mean over layers when layer < 0). */
typedef struct {
    bool from_logs, val_loss;
    TgLayerStat stat;
    int layer;
} StepSource;

static int64_t source_rows(const TgRunHistory *h, StepSource src) { return src.from_logs ? h->n_logs : h->n_metrics; }
static int64_t source_step(const TgRunHistory *h, StepSource src, int64_t i) {
    return src.from_logs ? h->logs[i].step : h->metrics[i].step;
}
static double source_value(const TgRunHistory *h, StepSource src, int64_t i) {
    if (!src.from_logs) return src.val_loss ? h->metrics[i].val_loss : h->metrics[i].loss;
    const double *v = tg_grad_log_layer_values(&h->logs[i], src.stat);
    if (src.layer < 0) return tg_run_history_layer_mean(h, v);
    return src.layer < h->n_layers ? v[src.layer] : NAN;
}

static bool curve_run(const CompareRun *run) { return run->loaded && run->state != RUN_DIVERGED; }

/* A cell's curve: at every step of its longest run, the mean of its seeds' values there, over
 * a band from their min to their max (a seed without a value at a step is left out there;
 * diverged runs are left out). */
static void add_seed_curve(TgReportChart *chart, const char *name, int color, bool dashed, const CompareCell *c,
                           StepSource src) {
    TgReportSeries *series = tg_report_series(chart, name, color, dashed);
    const TgRunHistory *longest = NULL;
    for (int s = 0; s < c->n_runs; s++)
        if (curve_run(c->runs[s]) && (!longest || source_rows(&c->runs[s]->h, src) > source_rows(longest, src)))
            longest = &c->runs[s]->h;
    if (!longest) return;
    int64_t cursor[COMPARE_MAX_SEEDS] = {0};
    for (int64_t i = 0; i < source_rows(longest, src); i++) {
        int64_t step = source_step(longest, src, i);
        double values[COMPARE_MAX_SEEDS];
        int n = 0;
        for (int s = 0; s < c->n_runs; s++) {
            const TgRunHistory *h = &c->runs[s]->h;
            if (!curve_run(c->runs[s])) continue;
            /* rows are in step order: each run's cursor only moves forward */
            while (cursor[s] < source_rows(h, src) && source_step(h, src, cursor[s]) < step) cursor[s]++;
            if (cursor[s] < source_rows(h, src) && source_step(h, src, cursor[s]) == step)
                values[n++] = source_value(h, src, cursor[s]);
        }
        SeedSpread spread = seed_spread(values, n);
        tg_report_point_range(series, (double)step, spread.mean, spread.min, spread.max);
    }
}

/* ---------------------------------------------------------------- the tables */

static void format_mean_range(char *buf, size_t cap, const SeedSpread *s) {
    if (s->n == 0) snprintf(buf, cap, "-");
    else snprintf(buf, cap, "%.3f [%.3f – %.3f]", s->mean, s->min, s->max);
}

static void add_comparison_table(TgReport *rep, const CompareResults *r) {
    static const char *const header[] = {"lr", "ReLU val loss", "SwiGLU val loss", "difference (ReLU − SwiGLU)",
                                         "pooled std", "|difference| / pooled std",
                                         "difference exceeds the seed-to-seed spread?"};
    TgReportTable *t = tg_report_table(rep, "Final val loss, ReLU against SwiGLU (mean ± std over seeds)", 7, header);
    for (int l = 0; l < r->n_lrs; l++) {
        const SeedComparison *c = &r->val_loss[l];
        char relu[64], swiglu[64], diff[32], pooled[32], effect[32], verdict[256];
        format_mean_std(relu, sizeof relu, &r->cells[l][0].fig[FIG_VAL_LOSS], 4);
        format_mean_std(swiglu, sizeof swiglu, &r->cells[l][1].fig[FIG_VAL_LOSS], 4);
        format_number(diff, sizeof diff, c->diff, 4, true);
        format_number(pooled, sizeof pooled, c->pooled_std, 4, false);
        format_number(effect, sizeof effect, c->effect, 2, false);
        seed_comparison_verdict(c, "ReLU", "SwiGLU", verdict, sizeof verdict);
        tg_report_cell(t, "%g", r->lrs[l]);
        tg_report_cell(t, "%s", relu);
        tg_report_cell(t, "%s", swiglu);
        tg_report_cell(t, "%s", diff);
        tg_report_cell(t, "%s", pooled);
        tg_report_cell(t, "%s", effect);
        tg_report_cell(t, "%s", verdict);
    }
}

static void add_cell_table(TgReport *rep, const CompareResults *r) {
    static const Figure fractions[] = {FIG_PROBE_DEAD_END, FIG_PROBE_DEAD_PEAK, FIG_DEAD_END, FIG_ZEROS_END,
                                       FIG_W1_ROWS_END};
    enum { N_FRACTIONS = sizeof fractions / sizeof fractions[0], N_COLS = 8 + N_FRACTIONS };
    const char *header[N_COLS] = {"lr", "FFN", "hidden", "parameters", "seeds (diverged)", "final val loss",
                                  "val loss min – max", "train loss, last 10 steps"};
    for (int f = 0; f < N_FRACTIONS; f++) header[8 + f] = figure_label(fractions[f]);
    TgReportTable *t = tg_report_table(rep,
                                  "Per learning rate and FFN, over the seeds: mean ± std, or mean [min – max] "
                                  "(dead units, zeros and w1 rows: mean over layers)",
                                  N_COLS, header);
    char buf[96];
    for (int l = 0; l < r->n_lrs; l++) {
        for (int k = 0; k < COMPARE_KINDS; k++) {
            const CompareCell *c = &r->cells[l][k];
            tg_report_cell(t, "%g", c->lr);
            tg_report_cell(t, "%s", tg_ffn_kind_name(c->kind));
            tg_report_cell(t, "%lld", (long long)c->hidden);
            if (c->has_cfg) tg_report_cell(t, "%lld", (long long)tg_model_config_param_count(&c->cfg));
            else tg_report_cell(t, "-");
            tg_report_cell(t, "%d (%d)", c->n_runs, c->fig[FIG_VAL_LOSS].missing);
            format_mean_std(buf, sizeof buf, &c->fig[FIG_VAL_LOSS], 4);
            tg_report_cell(t, "%s", buf);
            format_min_max(buf, sizeof buf, &c->fig[FIG_VAL_LOSS], 4);
            tg_report_cell(t, "%s", buf);
            format_mean_std(buf, sizeof buf, &c->fig[FIG_TRAIN_LOSS], 4);
            tg_report_cell(t, "%s", buf);
            for (int f = 0; f < N_FRACTIONS; f++) {
                format_mean_range(buf, sizeof buf, &c->fig[fractions[f]]);
                tg_report_cell(t, "%s", buf);
            }
        }
    }
}

/* Per layer at the last logged step, seed means; only layers every run of both cells logged. */
static void add_layer_table(TgReport *rep, const CompareCell *pair) {
    char caption[128];
    snprintf(caption, sizeof caption, "Per layer at the last logged step, lr %g (mean over seeds)", pair[0].lr);
    static const char *const header[] = {"layer", "relu dead units, probe", "relu dead units, training batch",
                                         "relu exact zeros", "relu w1 zero-grad rows", "swiglu dead units, probe",
                                         "swiglu exact zeros"};
    static const struct {
        int kind;
        TgLayerStat stat;
    } columns[] = {{0, TG_LAYER_PROBE_DEAD_FRAC}, {0, TG_LAYER_DEAD_FRAC}, {0, TG_LAYER_ZERO_FRAC}, {0, TG_LAYER_W1_ZERO_GRAD_ROWS},
                   {1, TG_LAYER_PROBE_DEAD_FRAC}, {1, TG_LAYER_ZERO_FRAC}};
    TgReportTable *t = tg_report_table(rep, caption, 7, header);
    int n_layers = pair[0].n_layers < pair[1].n_layers ? pair[0].n_layers : pair[1].n_layers;
    for (int l = 0; l < n_layers; l++) {
        tg_report_cell(t, "%d", l);
        for (size_t j = 0; j < sizeof columns / sizeof columns[0]; j++) {
            char v[32];
            format_number(v, sizeof v, compare_cell_layer_mean(&pair[columns[j].kind], columns[j].stat, l), 4, false);
            tg_report_cell(t, "%s", v);
        }
    }
}

/* ---------------------------------------------------------------- the charts */

static void add_sweep_charts(TgReport *rep, const CompareResults *r) {
    TgReportChart *val = tg_report_chart(rep, "Final val loss by learning rate (mean; band: min-max over seeds)",
                                    "learning rate", "val loss", false);
    TgReportChart *dead = tg_report_chart(rep, "Dead units at the end (solid: probe set, dashed: training batch)",
                                     "learning rate", "fraction of units (mean over layers)", false);
    tg_report_chart_log_x(val), tg_report_chart_log_x(dead);
    for (int k = 0; k < COMPARE_KINDS; k++) {
        const char *kind = tg_ffn_kind_name(compare_kinds[k]);
        char name[64];
        TgReportSeries *sv = tg_report_series(val, kind, kind_color(k), false);
        snprintf(name, sizeof name, "%s probe", kind);
        TgReportSeries *sp = tg_report_series(dead, name, kind_color(k), false);
        snprintf(name, sizeof name, "%s training batch", kind);
        TgReportSeries *sb = tg_report_series(dead, name, kind_color(k), true);
        for (int l = 0; l < r->n_lrs; l++) {
            const SeedSpread *v = &r->cells[l][k].fig[FIG_VAL_LOSS], *p = &r->cells[l][k].fig[FIG_PROBE_DEAD_END],
                             *b = &r->cells[l][k].fig[FIG_DEAD_END];
            tg_report_point_range(sv, r->lrs[l], v->mean, v->min, v->max);
            tg_report_point_range(sp, r->lrs[l], p->mean, p->min, p->max);
            tg_report_point_range(sb, r->lrs[l], b->mean, b->min, b->max);
        }
    }
}

static void add_learning_rate_section(TgReport *rep, const CompareCell *pair) {
    char heading[96], name[64];
    snprintf(heading, sizeof heading, "Learning rate %g", pair[0].lr);
    tg_report_heading(rep, heading);
    TgReportChart *loss = tg_report_chart(rep, "Loss (mean over seeds; band: min-max)", "step", "cross-entropy", false);
    TgReportChart *dead = tg_report_chart(rep, "Dead units, mean over layers (solid: probe set, dashed: training batch)",
                                     "step", "fraction of units", false);
    TgReportChart *zeros = tg_report_chart(rep, "Exact zeros of the FFN hidden activation (training batch)", "step",
                                      "fraction of activations", false);
    TgReportChart *rows = tg_report_chart(rep, "w1 rows whose gradient is all zero", "step", "fraction of rows", false);
    for (int k = 0; k < COMPARE_KINDS; k++) {
        const char *kind = tg_ffn_kind_name(compare_kinds[k]);
        int color = kind_color(k);
        snprintf(name, sizeof name, "%s train", kind);
        add_seed_curve(loss, name, color, false, &pair[k], (StepSource){false, false, 0, -1});
        snprintf(name, sizeof name, "%s val", kind);
        add_seed_curve(loss, name, color, true, &pair[k], (StepSource){false, true, 0, -1});
        snprintf(name, sizeof name, "%s probe", kind);
        add_seed_curve(dead, name, color, false, &pair[k], (StepSource){true, false, TG_LAYER_PROBE_DEAD_FRAC, -1});
        snprintf(name, sizeof name, "%s training batch", kind);
        add_seed_curve(dead, name, color, true, &pair[k], (StepSource){true, false, TG_LAYER_DEAD_FRAC, -1});
        add_seed_curve(zeros, kind, color, false, &pair[k], (StepSource){true, false, TG_LAYER_ZERO_FRAC, -1});
        add_seed_curve(rows, kind, color, false, &pair[k], (StepSource){true, false, TG_LAYER_W1_ZERO_GRAD_ROWS, -1});
    }
    TgReportChart *layers = tg_report_chart(rep, "ReLU dead units per layer, probe set (mean over seeds)", "step",
                                       "fraction of units", false);
    for (int l = 0; l < pair[0].n_layers; l++) {
        snprintf(name, sizeof name, "relu layer %d", l);
        /* colours from the third on: the first two stand for the FFNs */
        add_seed_curve(layers, name, 2 + l, false, &pair[0], (StepSource){true, false, TG_LAYER_PROBE_DEAD_FRAC, l});
    }
    add_layer_table(rep, pair);
}

/* ---------------------------------------------------------------- the report */

static void add_method_text(TgReport *rep, const CompareResults *r) {
    char text[1024], seeds[512];
    compare_seeds_text(r, seeds, sizeof seeds);
    compare_pairing_text(r, text, sizeof text);
    tg_report_text(rep, "%s", text);
    tg_report_text(rep,
                "Seeds %s: a seed sets a run's initialisation and the order of its training batches; ReLU and SwiGLU "
                "runs of one seed see the same batches. Every run: %lld steps of %lld sequences, the same schedule.",
                seeds, (long long)r->steps, (long long)r->batch);
    tg_report_text(rep,
                "A dead unit is an FFN hidden unit (an input of w2) that is exactly zero for every token counted; exact "
                "zeros count every zero activation. Both are counted every %lld steps with the weights the step starts "
                "from (step 1: the initial weights), on two sets of tokens: the training batch of that step, and the "
                "probe set, %lld fixed held-out val batches (the same tokens at every logged step, run without an "
                "update). Each chart and column names which it shows. A w1 row whose gradient is all zero got no "
                "learning signal at that step.",
                (long long)r->log_grads, (long long)r->probe_batches);
    tg_report_text(rep, "%s", compare_spread_rule);
    compare_init_check_text(r, text, sizeof text);
    tg_report_text(rep, "%s", text);
}

TgReport *compare_report_build(const CompareResults *r) {
    char title[256];
    snprintf(title, sizeof title, "Dying ReLU: ReLU FFN vs SwiGLU FFN (preset %s, %lld steps, %d seed%s)", r->preset,
             (long long)r->steps, r->n_seeds, r->n_seeds == 1 ? "" : "s");
    TgReport *rep = tg_report_new(title);
    add_method_text(rep, r);
    add_comparison_table(rep, r);
    add_cell_table(rep, r);
    if (r->n_lrs > 1) add_sweep_charts(rep, r);
    for (int l = 0; l < r->n_lrs; l++) add_learning_rate_section(rep, r->cells[l]);
    return rep;
}
