/* compare-ffn's results: each run's figures from its history, their spread per cell, the val-loss
 * comparisons, and the zeros of the initial weights. */
#include "cli/study/compare_results.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "inspect/inspect.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_folder.h"
#include "support/path.h"

const TgFfnKind compare_kinds[COMPARE_KINDS] = {TG_FFN_RELU, TG_FFN_SWIGLU};

typedef enum { FROM_VAL_LOSS, FROM_TRAIN_LOSS, AT_FIRST_LOG, AT_LAST_LOG, PEAK_OVER_LOGS } FigureSource;

static const struct {
    const char *key, *label;
    FigureSource source;
    TgLayerStat stat; /* for the figures of grads.jsonl */
} figure_specs[N_FIGURES] = {
    [FIG_VAL_LOSS] = {"final_val_loss", "final val loss", FROM_VAL_LOSS, TG_LAYER_DEAD_FRAC /* unused */},
    [FIG_TRAIN_LOSS] = {"train_loss_last10", "train loss, last 10 steps", FROM_TRAIN_LOSS, TG_LAYER_DEAD_FRAC /* unused */},
    [FIG_PROBE_DEAD_FIRST] = {"probe_dead_first", "dead units at step 1, probe set", AT_FIRST_LOG,
                              TG_LAYER_PROBE_DEAD_FRAC},
    [FIG_PROBE_DEAD_PEAK] = {"probe_dead_peak", "dead units at their peak, probe set", PEAK_OVER_LOGS,
                             TG_LAYER_PROBE_DEAD_FRAC},
    [FIG_PROBE_DEAD_END] = {"probe_dead_end", "dead units at the end, probe set", AT_LAST_LOG, TG_LAYER_PROBE_DEAD_FRAC},
    [FIG_DEAD_FIRST] = {"dead_first", "dead units at step 1, training batch", AT_FIRST_LOG, TG_LAYER_DEAD_FRAC},
    [FIG_DEAD_PEAK] = {"dead_peak", "dead units at their peak, training batch", PEAK_OVER_LOGS, TG_LAYER_DEAD_FRAC},
    [FIG_DEAD_END] = {"dead_end", "dead units at the end, training batch", AT_LAST_LOG, TG_LAYER_DEAD_FRAC},
    [FIG_ZEROS_FIRST] = {"zeros_first", "exact zeros at step 1, training batch", AT_FIRST_LOG, TG_LAYER_ZERO_FRAC},
    [FIG_ZEROS_END] = {"zeros_end", "exact zeros at the end, training batch", AT_LAST_LOG, TG_LAYER_ZERO_FRAC},
    [FIG_PROBE_ZEROS_END] = {"probe_zeros_end", "exact zeros at the end, probe set", AT_LAST_LOG,
                             TG_LAYER_PROBE_ZERO_FRAC},
    [FIG_W1_ROWS_END] = {"w1_zero_grad_rows_end", "w1 zero-gradient rows at the end", AT_LAST_LOG,
                         TG_LAYER_W1_ZERO_GRAD_ROWS},
};

const char *figure_key(Figure f) { return figure_specs[f].key; }
const char *figure_label(Figure f) { return figure_specs[f].label; }

static double log_figure(const TgRunHistory *h, FigureSource source, TgLayerStat stat) {
    if (h->n_logs == 0) return NAN;
    if (source == AT_FIRST_LOG) return tg_run_history_layer_mean(h, tg_grad_log_layer_values(&h->logs[0], stat));
    if (source == AT_LAST_LOG) return tg_run_history_layer_mean(h, tg_grad_log_layer_values(&h->logs[h->n_logs - 1], stat));
    double peak = NAN;
    for (int64_t i = 0; i < h->n_logs; i++) {
        double v = tg_run_history_layer_mean(h, tg_grad_log_layer_values(&h->logs[i], stat));
        if (isfinite(v) && !(v <= peak)) peak = v;
    }
    return peak;
}

static void run_figures(CompareRun *run) {
    for (int f = 0; f < N_FIGURES; f++) {
        FigureSource source = figure_specs[f].source;
        if (run->state == RUN_DIVERGED || !run->loaded) run->fig[f] = NAN;
        else if (source == FROM_VAL_LOSS) run->fig[f] = tg_run_history_final_val_loss(&run->h);
        else if (source == FROM_TRAIN_LOSS) run->fig[f] = tg_run_history_final_train_loss(&run->h, 10);
        else run->fig[f] = log_figure(&run->h, source, figure_specs[f].stat);
    }
}

/* A diverged run may have logged nothing, or died before its folder was kept: its history is
 * read when there is one, and it has no figures either way. */
static TgStatus load_run(CompareRun *run) {
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, run->dir, "metrics.jsonl"));
    if (run->state == RUN_DIVERGED && access(path, F_OK) != 0) return TG_OK;
    TG_TRY(tg_run_history_load(run->dir, &run->h));
    run->loaded = true;
    if (run->state != RUN_DIVERGED && run->h.n_logs == 0)
        return tg_fail(TG_ERR_FORMAT, "%s has no grads.jsonl; it was not trained with --log-grads", run->dir);
    return TG_OK;
}

/* The model config of a cell, from the checkpoint of its first finished run (for the exact
 * parameter counts and the initial weights). */
static void cell_config(CompareCell *c) {
    for (int i = 0; i < c->n_runs && !c->has_cfg; i++) {
        char ckpt[TG_PATH_CAP];
        uint64_t fingerprint;
        if (c->runs[i]->state == RUN_DIVERGED) continue;
        c->has_cfg = tg_checkpoint_resolve(c->runs[i]->dir, ckpt, sizeof ckpt) == TG_OK &&
                     tg_checkpoint_read_config(ckpt, &c->cfg, &fingerprint) == TG_OK;
    }
    tg_error_clear();
}

static void cell_fill(CompareResults *r, int l, int k) {
    CompareCell *c = &r->cells[l][k];
    c->lr = r->lrs[l];
    c->kind = compare_kinds[k];
    c->n_runs = r->n_seeds;
    c->n_layers = -1;
    for (int s = 0; s < r->n_seeds; s++) {
        CompareRun *run = c->runs[s] = compare_run_at(r, s, l, k);
        c->hidden = run->hidden;
        /* a run's files are read back, not trusted: the layer count any table may index is the
         * smallest of every run it reads */
        if (run->loaded && (c->n_layers < 0 || run->h.n_layers < c->n_layers)) c->n_layers = run->h.n_layers;
    }
    if (c->n_layers < 0) c->n_layers = 0;
    for (int f = 0; f < N_FIGURES; f++) {
        double values[COMPARE_MAX_SEEDS];
        for (int s = 0; s < c->n_runs; s++) values[s] = c->runs[s]->fig[f];
        c->fig[f] = seed_spread(values, c->n_runs);
    }
    cell_config(c);
}

TgStatus compare_results_load(CompareResults *r, int threads) {
    for (int i = 0; i < r->n_runs; i++) {
        TG_TRY(load_run(&r->runs[i]));
        run_figures(&r->runs[i]);
    }
    for (int l = 0; l < r->n_lrs; l++) {
        for (int k = 0; k < COMPARE_KINDS; k++) cell_fill(r, l, k);
        double relu[COMPARE_MAX_SEEDS], swiglu[COMPARE_MAX_SEEDS];
        for (int s = 0; s < r->n_seeds; s++) {
            relu[s] = r->cells[l][0].runs[s]->fig[FIG_VAL_LOSS];
            swiglu[s] = r->cells[l][1].runs[s]->fig[FIG_VAL_LOSS];
        }
        r->val_loss[l] = seed_compare(relu, r->n_seeds, swiglu, r->n_seeds);
    }
    for (int k = 0; k < COMPARE_KINDS; k++) {
        r->init_zero_frac[k] = NAN;
        for (int l = 0; l < r->n_lrs && isnan(r->init_zero_frac[k]); l++)
            if (r->cells[l][k].has_cfg)
                r->init_zero_frac[k] = tg_ffn_zero_fraction_at_init(&r->cells[l][k].cfg, (uint64_t)r->seeds[0],
                                                                 COMPARE_INIT_CHECK_ROWS, threads);
    }
    return TG_OK;
}

void compare_results_free(CompareResults *r) {
    for (int i = 0; i < r->n_runs; i++)
        if (r->runs[i].loaded) tg_run_history_free(&r->runs[i].h);
    free(r->runs);
    r->runs = NULL;
}

double compare_cell_layer_mean(const CompareCell *c, TgLayerStat stat, int layer) {
    double sum = 0;
    int n = 0;
    for (int s = 0; s < c->n_runs; s++) {
        const CompareRun *run = c->runs[s];
        if (!run->loaded || run->state == RUN_DIVERGED || run->h.n_logs == 0 || layer >= run->h.n_layers) continue;
        double v = tg_grad_log_layer_values(&run->h.logs[run->h.n_logs - 1], stat)[layer];
        if (isfinite(v)) sum += v, n++;
    }
    return n ? sum / n : NAN;
}

void format_number(char *buf, size_t cap, double v, int digits, bool sign) {
    if (isfinite(v)) snprintf(buf, cap, sign ? "%+.*f" : "%.*f", digits, v);
    else snprintf(buf, cap, "-");
}

void format_mean_std(char *buf, size_t cap, const SeedSpread *s, int digits) {
    if (s->n == 0) snprintf(buf, cap, "-");
    else if (s->n == 1) snprintf(buf, cap, "%.*f", digits, s->mean);
    else snprintf(buf, cap, "%.*f ± %.*f", digits, s->mean, digits, s->std);
}

void format_min_max(char *buf, size_t cap, const SeedSpread *s, int digits) {
    if (s->n == 0) snprintf(buf, cap, "-");
    else snprintf(buf, cap, "%.*f – %.*f", digits, s->min, digits, s->max);
}

void compare_pairing_text(const CompareResults *r, char *buf, size_t cap) {
    const CompareCell *relu = &r->cells[0][0], *swiglu = &r->cells[0][1];
    int64_t d = relu->has_cfg ? relu->cfg.dim : swiglu->cfg.dim, per_relu = 2 * relu->hidden, per_swiglu = 3 * swiglu->hidden;
    int n = snprintf(buf, cap, "ReLU FFN w2(relu(w1 x)), hidden %lld: 2 matrices, %lld·d parameters per layer; SwiGLU FFN "
                     "w2(silu(w1 x) * w3 x), hidden %lld: 3 matrices, %lld·d per layer. ",
                     (long long)relu->hidden, (long long)per_relu, (long long)swiglu->hidden, (long long)per_swiglu);
    if (n < 0 || (size_t)n >= cap) return;
    if (!relu->has_cfg || !swiglu->has_cfg) {
        snprintf(buf + n, cap - (size_t)n, "(No finished run of both to count the models from.)");
        return;
    }
    int64_t pr = tg_model_config_param_count(&relu->cfg), ps = tg_model_config_param_count(&swiglu->cfg);
    if (pr == ps)
        snprintf(buf + n, cap - (size_t)n, "Equal parameter counts: ReLU hidden = 3/2 x SwiGLU hidden; FFNs %lld, models "
                 "%lld parameters each (d = %lld).", (long long)tg_model_config_ffn_param_count(&relu->cfg), (long long)pr,
                 (long long)d);
    else
        snprintf(buf + n, cap - (size_t)n, "Not equal: ReLU model %lld parameters, SwiGLU model %lld (%+lld, %+.2f%%); "
                 "equal at ReLU hidden = 3/2 x SwiGLU hidden = %lld.", (long long)pr, (long long)ps, (long long)(ps - pr),
                 100.0 * (double)(ps - pr) / (double)pr, (long long)(3 * swiglu->hidden / 2));
}

const char compare_spread_rule[] =
    "A val-loss difference exceeds the seed-to-seed spread when the min-max ranges of the two FFNs' seeds do not "
    "overlap: every seed of one ended below every seed of the other (a diverged run counts as the worst). If the FFN "
    "made no difference, the chance of that is 2 / C(2n, n) for n seeds each (10% for 3, 2.9% for 4, 0.8% for 5). "
    "|difference| / pooled std is the size of the effect in units of the seed-to-seed standard deviation.";

void compare_init_check_text(const CompareResults *r, char *buf, size_t cap) {
    char relu[32], swiglu[32];
    format_number(relu, sizeof relu, r->init_zero_frac[0], 4, false);
    format_number(swiglu, sizeof swiglu, r->init_zero_frac[1], 4, false);
    snprintf(buf, cap,
             "The initial weights on random inputs (the zero ratio of ReLU against SwiGLU hidden activations of a "
             "freshly initialised FFN): for %d inputs x ~ N(0, 1) through every layer's FFN of the first seed's "
             "initial model, the hidden activation is exactly zero in %s of the ReLU model's entries and %s of "
             "SwiGLU's.",
             COMPARE_INIT_CHECK_ROWS, relu, swiglu);
}

void compare_seeds_text(const CompareResults *r, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    for (int s = 0; s < r->n_seeds && n < cap; s++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", s ? ", " : "", (long long)r->seeds[s]);
}
