/* compare-ffn's summaries: summary.json (every figure, for programs) and summary.md (the tables
 * for a README, also printed at the end of the run). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/study/compare_results.h"
#include "inspect/inspect.h"
#include "support/atomic_file.h"
#include "support/json_write.h"

/* ---------------------------------------------------------------- summary.json */

static void layer_array(TgJsonWriter *w, const char *key, const TgRunHistory *h, const TgGradLogRow *row,
                        TgLayerStat stat) {
    const double *v = tg_grad_log_layer_values(row, stat);
    tg_json_open_array(w, key);
    for (int l = 0; l < h->n_layers; l++) tg_json_put_number(w, NULL, v[l]);
    tg_json_close(w);
}

static const char *state_name(RunState s) {
    return s == RUN_DIVERGED ? "diverged" : s == RUN_FINISHED ? "finished" : "not finished";
}

static void run_json(TgJsonWriter *w, const CompareRun *run) {
    tg_json_open_object(w, NULL);
    tg_json_put_string(w, "folder", run->dir);
    tg_json_put_number(w, "lr", run->lr);
    tg_json_put_string(w, "ffn", tg_ffn_kind_name(run->kind));
    tg_json_put_number(w, "seed", (double)run->seed);
    tg_json_put_number(w, "hidden", (double)run->hidden);
    tg_json_put_string(w, "state", state_name(run->state));
    tg_json_open_object(w, "figures");
    for (int f = 0; f < N_FIGURES; f++) tg_json_put_number(w, figure_key((Figure)f), run->fig[f]);
    tg_json_close(w);
    if (run->loaded && run->h.n_logs > 0) {
        static const struct {
            const char *key;
            TgLayerStat stat;
        } layers[] = {{"dead_frac", TG_LAYER_DEAD_FRAC}, {"probe_dead_frac", TG_LAYER_PROBE_DEAD_FRAC},
                      {"zero_frac", TG_LAYER_ZERO_FRAC}, {"probe_zero_frac", TG_LAYER_PROBE_ZERO_FRAC},
                      {"w1_zero_grad_rows", TG_LAYER_W1_ZERO_GRAD_ROWS}};
        const TgRunHistory *h = &run->h;
        tg_json_put_number(w, "first_logged_step", (double)h->logs[0].step);
        tg_json_put_number(w, "last_logged_step", (double)h->logs[h->n_logs - 1].step);
        for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
            char key[64];
            snprintf(key, sizeof key, "%s_first", layers[i].key);
            layer_array(w, key, h, &h->logs[0], layers[i].stat);
            snprintf(key, sizeof key, "%s_last", layers[i].key);
            layer_array(w, key, h, &h->logs[h->n_logs - 1], layers[i].stat);
        }
    }
    tg_json_close(w);
}

static void cell_json(TgJsonWriter *w, const CompareCell *c) {
    tg_json_open_object(w, NULL);
    tg_json_put_number(w, "lr", c->lr);
    tg_json_put_string(w, "ffn", tg_ffn_kind_name(c->kind));
    tg_json_put_number(w, "hidden", (double)c->hidden);
    /* null without a config: NaN is written as null */
    tg_json_put_number(w, "params", c->has_cfg ? (double)tg_model_config_param_count(&c->cfg) : NAN);
    tg_json_put_number(w, "ffn_params", c->has_cfg ? (double)tg_model_config_ffn_param_count(&c->cfg) : NAN);
    tg_json_put_number(w, "seeds", c->n_runs);
    tg_json_open_object(w, "figures");
    for (int f = 0; f < N_FIGURES; f++) {
        const SeedSpread *s = &c->fig[f];
        tg_json_open_object(w, figure_key((Figure)f));
        tg_json_put_number(w, "n", s->n);
        tg_json_put_number(w, "missing", s->missing);
        tg_json_put_number(w, "mean", s->mean);
        tg_json_put_number(w, "std", s->std);
        tg_json_put_number(w, "min", s->min);
        tg_json_put_number(w, "max", s->max);
        tg_json_close(w);
    }
    tg_json_close(w);
    tg_json_close(w);
}

static void comparison_json(TgJsonWriter *w, double lr, const SeedComparison *c) {
    char verdict[256];
    seed_comparison_verdict(c, "relu", "swiglu", verdict, sizeof verdict);
    tg_json_open_object(w, NULL);
    tg_json_put_number(w, "lr", lr);
    tg_json_put_number(w, "val_loss_diff_relu_minus_swiglu", c->diff);
    tg_json_put_number(w, "pooled_std", c->pooled_std);
    tg_json_put_number(w, "diff_over_pooled_std", c->effect);
    tg_json_put_bool(w, "testable", c->testable);
    tg_json_put_string(w, "lower", c->separated < 0 ? "relu" : c->separated > 0 ? "swiglu" : "neither");
    tg_json_put_bool(w, "exceeds_seed_spread", c->separated != 0);
    tg_json_put_number(w, "chance_if_no_difference", c->chance);
    tg_json_put_string(w, "verdict", verdict);
    tg_json_close(w);
}

/* Non-finite numbers (a diverged run's figures) are written as null. */
static void summary_json(TgJsonWriter *w, const CompareResults *r) {
    tg_json_open_object(w, NULL);
    tg_json_put_string(w, "preset", r->preset);
    tg_json_put_string(w, "data", r->data);
    tg_json_put_number(w, "steps", (double)r->steps);
    tg_json_put_number(w, "batch", (double)r->batch);
    tg_json_put_number(w, "log_grads", (double)r->log_grads);
    tg_json_put_number(w, "probe_batches", (double)r->probe_batches);
    tg_json_open_array(w, "seeds");
    for (int s = 0; s < r->n_seeds; s++) tg_json_put_number(w, NULL, (double)r->seeds[s]);
    tg_json_close(w);
    tg_json_open_array(w, "lrs");
    for (int l = 0; l < r->n_lrs; l++) tg_json_put_number(w, NULL, r->lrs[l]);
    tg_json_close(w);
    tg_json_open_object(w, "init_zero_frac_random_inputs");
    for (int k = 0; k < COMPARE_KINDS; k++) tg_json_put_number(w, tg_ffn_kind_name(compare_kinds[k]), r->init_zero_frac[k]);
    tg_json_close(w);
    tg_json_open_array(w, "runs");
    for (int i = 0; i < r->n_runs; i++) run_json(w, &r->runs[i]);
    tg_json_close(w);
    tg_json_open_array(w, "cells");
    for (int l = 0; l < r->n_lrs; l++)
        for (int k = 0; k < COMPARE_KINDS; k++) cell_json(w, &r->cells[l][k]);
    tg_json_close(w);
    tg_json_open_array(w, "comparisons");
    for (int l = 0; l < r->n_lrs; l++) comparison_json(w, r->lrs[l], &r->val_loss[l]);
    tg_json_close(w);
    tg_json_put_number(w, "wall_s", r->wall_s);
    tg_json_put_number(w, "runs_trained", r->trained);
    tg_json_put_number(w, "runs_reused", r->reused);
    tg_json_put_number(w, "load_average_start", r->load_start);
    tg_json_put_number(w, "load_average_end", r->load_end);
    tg_json_close(w);
}

TgStatus compare_summary_json_write(const CompareResults *r, const char *path) {
    TgAtomicFile af;
    TG_TRY(tg_atomic_file_open(&af, path));
    FILE *f = tg_atomic_file_stream(&af);
    TgJsonWriter w = tg_json_writer(f, TG_JSON_INDENTED, false);
    summary_json(&w, r);
    fputc('\n', f);
    return tg_atomic_file_commit(&af);
}

/* ---------------------------------------------------------------- summary.md */

static void md_mean_range(FILE *f, const SeedSpread *s) {
    if (s->n == 0) fputs(" - |", f);
    else fprintf(f, " %.3f [%.3f – %.3f] |", s->mean, s->min, s->max);
}

static void md_cell_table(FILE *f, const CompareResults *r) {
    fputs("| lr | FFN | seeds (diverged) | final val loss, mean ± std | min – max | dead units, end, probe set | "
          "dead units, peak, probe set | dead units, end, training batch | exact zeros, end |\n"
          "|---|---|---|---|---|---|---|---|---|\n",
          f);
    for (int l = 0; l < r->n_lrs; l++) {
        for (int k = 0; k < COMPARE_KINDS; k++) {
            const CompareCell *c = &r->cells[l][k];
            char mean_std[64], min_max[64];
            format_mean_std(mean_std, sizeof mean_std, &c->fig[FIG_VAL_LOSS], 4);
            format_min_max(min_max, sizeof min_max, &c->fig[FIG_VAL_LOSS], 4);
            fprintf(f, "| %g | %s | %d (%d) | %s | %s |", c->lr, c->kind == TG_FFN_RELU ? "ReLU" : "SwiGLU", c->n_runs,
                    c->fig[FIG_VAL_LOSS].missing, mean_std, min_max);
            md_mean_range(f, &c->fig[FIG_PROBE_DEAD_END]);
            md_mean_range(f, &c->fig[FIG_PROBE_DEAD_PEAK]);
            md_mean_range(f, &c->fig[FIG_DEAD_END]);
            md_mean_range(f, &c->fig[FIG_ZEROS_END]);
            fputc('\n', f);
        }
    }
}

static void md_comparison_table(FILE *f, const CompareResults *r) {
    fputs("| lr | val loss, ReLU − SwiGLU | pooled std | \\|difference\\| / pooled std | exceeds the seed-to-seed "
          "spread? |\n|---|---|---|---|---|\n",
          f);
    for (int l = 0; l < r->n_lrs; l++) {
        const SeedComparison *c = &r->val_loss[l];
        char verdict[256], diff[32], pooled[32], effect[32];
        seed_comparison_verdict(c, "ReLU", "SwiGLU", verdict, sizeof verdict);
        format_number(diff, sizeof diff, c->diff, 4, true);
        format_number(pooled, sizeof pooled, c->pooled_std, 4, false);
        format_number(effect, sizeof effect, c->effect, 2, false);
        fprintf(f, "| %g | %s | %s | %s | %s |\n", r->lrs[l], diff, pooled, effect, verdict);
    }
}

/* ReLU's dead units per layer on the probe set (SwiGLU's are zero throughout, or the cell table
 * would show it). */
static void md_layer_table(FILE *f, const CompareResults *r) {
    int n_layers = -1;
    for (int l = 0; l < r->n_lrs; l++)
        if (n_layers < 0 || r->cells[l][0].n_layers < n_layers) n_layers = r->cells[l][0].n_layers;
    fputs("| lr |", f);
    for (int j = 0; j < n_layers; j++) fprintf(f, " layer %d |", j);
    fputs("\n|---|", f);
    for (int j = 0; j < n_layers; j++) fputs("---|", f);
    fputc('\n', f);
    for (int l = 0; l < r->n_lrs; l++) {
        fprintf(f, "| %g |", r->lrs[l]);
        for (int j = 0; j < n_layers; j++) {
            char v[32];
            format_number(v, sizeof v, compare_cell_layer_mean(&r->cells[l][0], TG_LAYER_PROBE_DEAD_FRAC, j), 3, false);
            fprintf(f, " %s |", v);
        }
        fputc('\n', f);
    }
}

static void md_write(FILE *f, const CompareResults *r, const char *command) {
    char pairing[1024], seeds[512], init_check[1024];
    compare_seeds_text(r, seeds, sizeof seeds);
    compare_pairing_text(r, pairing, sizeof pairing);
    compare_init_check_text(r, init_check, sizeof init_check);
    fprintf(f, "Command (every option resolved): `%s`\n\n", command);
    fprintf(f, "Corpus: %s. %s Seeds: %s (initialisation and data order of each run).\n\n", r->data, pairing, seeds);
    fprintf(f, "Wall time: %.1f min for %d runs trained and %d reused (load average %.2f at the start, %.2f at the "
               "end).\n\n",
            r->wall_s / 60.0, r->trained, r->reused, r->load_start, r->load_end);
    fprintf(f, "%s\n\n", init_check);
    md_cell_table(f, r);
    fprintf(f, "\nOver the seeds: mean ± std, or mean [min – max]. Dead units and zeros: mean over the layers; "
               "probe set: %lld fixed val batches, the same at every logged step; training batch: the batch the "
               "logged step trained on. A diverged run is left out of the means.\n\n",
            (long long)r->probe_batches);
    md_comparison_table(f, r);
    fprintf(f, "\n%s\n\nReLU dead units per layer at the end, probe set (mean over seeds):\n\n", compare_spread_rule);
    md_layer_table(f, r);
}

TgStatus compare_summary_md_write(const CompareResults *r, const char *command, const char *path, FILE *out) {
    TgAtomicFile af;
    TG_TRY(tg_atomic_file_open(&af, path));
    md_write(tg_atomic_file_stream(&af), r, command);
    TG_TRY(tg_atomic_file_commit(&af));
    if (out) md_write(out, r, command);
    return TG_OK;
}
