/* compare-ffn's summaries: summary.json (every figure, for programs) and summary.md (the tables
 * for a README, also printed at the end of the run). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/study/compare_results.h"
#include "inspect/inspect.h"
#include "lib/atomic_file.h"

/* ---------------------------------------------------------------- summary.json */

/* A number, or null when not finite (JSON has no NaN). */
static cJSON *number(double v) { return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull(); }

static cJSON *layer_array(const TgRunHistory *h, const TgGradLogRow *row, TgLayerStat stat) {
    cJSON *a = cJSON_CreateArray();
    const double *v = tg_grad_log_layer_values(row, stat);
    for (int l = 0; l < h->n_layers; l++) cJSON_AddItemToArray(a, number(v[l]));
    return a;
}

static const char *state_name(RunState s) {
    return s == RUN_DIVERGED ? "diverged" : s == RUN_FINISHED ? "finished" : "not finished";
}

static cJSON *run_json(const CompareRun *run) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "folder", run->dir);
    cJSON_AddNumberToObject(o, "lr", run->lr);
    cJSON_AddStringToObject(o, "ffn", tg_ffn_kind_name(run->kind));
    cJSON_AddNumberToObject(o, "seed", (double)run->seed);
    cJSON_AddNumberToObject(o, "hidden", (double)run->hidden);
    cJSON_AddStringToObject(o, "state", state_name(run->state));
    cJSON *figures = cJSON_AddObjectToObject(o, "figures");
    for (int f = 0; f < N_FIGURES; f++) cJSON_AddItemToObject(figures, figure_key((Figure)f), number(run->fig[f]));
    if (!run->loaded || run->h.n_logs == 0) return o;
    static const struct {
        const char *key;
        TgLayerStat stat;
    } layers[] = {{"dead_frac", TG_LAYER_DEAD_FRAC}, {"probe_dead_frac", TG_LAYER_PROBE_DEAD_FRAC},
                  {"zero_frac", TG_LAYER_ZERO_FRAC}, {"probe_zero_frac", TG_LAYER_PROBE_ZERO_FRAC},
                  {"w1_zero_grad_rows", TG_LAYER_W1_ZERO_GRAD_ROWS}};
    const TgRunHistory *h = &run->h;
    cJSON_AddNumberToObject(o, "first_logged_step", (double)h->logs[0].step);
    cJSON_AddNumberToObject(o, "last_logged_step", (double)h->logs[h->n_logs - 1].step);
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
        char key[64];
        snprintf(key, sizeof key, "%s_first", layers[i].key);
        cJSON_AddItemToObject(o, key, layer_array(h, &h->logs[0], layers[i].stat));
        snprintf(key, sizeof key, "%s_last", layers[i].key);
        cJSON_AddItemToObject(o, key, layer_array(h, &h->logs[h->n_logs - 1], layers[i].stat));
    }
    return o;
}

static cJSON *cell_json(const CompareCell *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "lr", c->lr);
    cJSON_AddStringToObject(o, "ffn", tg_ffn_kind_name(c->kind));
    cJSON_AddNumberToObject(o, "hidden", (double)c->hidden);
    cJSON_AddItemToObject(o, "params", c->has_cfg ? cJSON_CreateNumber((double)tg_model_config_param_count(&c->cfg))
                                                  : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "ffn_params", c->has_cfg ? cJSON_CreateNumber((double)tg_model_config_ffn_param_count(&c->cfg))
                                                      : cJSON_CreateNull());
    cJSON_AddNumberToObject(o, "seeds", c->n_runs);
    cJSON *figures = cJSON_AddObjectToObject(o, "figures");
    for (int f = 0; f < N_FIGURES; f++) {
        const SeedSpread *s = &c->fig[f];
        cJSON *spread = cJSON_AddObjectToObject(figures, figure_key((Figure)f));
        cJSON_AddNumberToObject(spread, "n", s->n);
        cJSON_AddNumberToObject(spread, "missing", s->missing);
        cJSON_AddItemToObject(spread, "mean", number(s->mean));
        cJSON_AddItemToObject(spread, "std", number(s->std));
        cJSON_AddItemToObject(spread, "min", number(s->min));
        cJSON_AddItemToObject(spread, "max", number(s->max));
    }
    return o;
}

static cJSON *comparison_json(double lr, const SeedComparison *c) {
    char verdict[256];
    seed_comparison_verdict(c, "relu", "swiglu", verdict, sizeof verdict);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "lr", lr);
    cJSON_AddItemToObject(o, "val_loss_diff_relu_minus_swiglu", number(c->diff));
    cJSON_AddItemToObject(o, "pooled_std", number(c->pooled_std));
    cJSON_AddItemToObject(o, "diff_over_pooled_std", number(c->effect));
    cJSON_AddBoolToObject(o, "testable", c->testable);
    cJSON_AddStringToObject(o, "lower", c->separated < 0 ? "relu" : c->separated > 0 ? "swiglu" : "neither");
    cJSON_AddBoolToObject(o, "exceeds_seed_spread", c->separated != 0);
    cJSON_AddItemToObject(o, "chance_if_no_difference", number(c->chance));
    cJSON_AddStringToObject(o, "verdict", verdict);
    return o;
}

TgStatus compare_summary_json_write(const CompareResults *r, const char *path) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "preset", r->preset);
    cJSON_AddStringToObject(root, "data", r->data);
    cJSON_AddNumberToObject(root, "steps", (double)r->steps);
    cJSON_AddNumberToObject(root, "batch", (double)r->batch);
    cJSON_AddNumberToObject(root, "log_grads", (double)r->log_grads);
    cJSON_AddNumberToObject(root, "probe_batches", (double)r->probe_batches);
    cJSON *seeds = cJSON_AddArrayToObject(root, "seeds"), *lrs = cJSON_AddArrayToObject(root, "lrs");
    for (int s = 0; s < r->n_seeds; s++) cJSON_AddItemToArray(seeds, cJSON_CreateNumber((double)r->seeds[s]));
    for (int l = 0; l < r->n_lrs; l++) cJSON_AddItemToArray(lrs, cJSON_CreateNumber(r->lrs[l]));
    cJSON *init = cJSON_AddObjectToObject(root, "init_zero_frac_random_inputs");
    for (int k = 0; k < COMPARE_KINDS; k++)
        cJSON_AddItemToObject(init, tg_ffn_kind_name(compare_kinds[k]), number(r->init_zero_frac[k]));
    cJSON *runs = cJSON_AddArrayToObject(root, "runs"), *cells = cJSON_AddArrayToObject(root, "cells");
    cJSON *comparisons = cJSON_AddArrayToObject(root, "comparisons");
    for (int i = 0; i < r->n_runs; i++) cJSON_AddItemToArray(runs, run_json(&r->runs[i]));
    for (int l = 0; l < r->n_lrs; l++) {
        for (int k = 0; k < COMPARE_KINDS; k++) cJSON_AddItemToArray(cells, cell_json(&r->cells[l][k]));
        cJSON_AddItemToArray(comparisons, comparison_json(r->lrs[l], &r->val_loss[l]));
    }
    cJSON_AddNumberToObject(root, "wall_s", r->wall_s);
    cJSON_AddNumberToObject(root, "runs_trained", r->trained);
    cJSON_AddNumberToObject(root, "runs_reused", r->reused);
    cJSON_AddItemToObject(root, "load_average_start", number(r->load_start));
    cJSON_AddItemToObject(root, "load_average_end", number(r->load_end));
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    TgAtomicFile af;
    TgStatus s = tg_atomic_file_open(&af, path);
    if (s == TG_OK) {
        fprintf(tg_atomic_file_stream(&af), "%s\n", text);
        s = tg_atomic_file_commit(&af);
    }
    cJSON_free(text);
    return s;
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
