#include "inspect/run_history.h"

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_folder.h"
#include "inspect/inspect.h"
#include "lib/checked.h"
#include "lib/file_read.h"
#include "lib/path.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- reading */

static double number_or_nan(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* The "step" of a line: a whole number a run can reach (JSON gives a double; casting inf, NaN or
 * 2^63 straight to int64_t would be undefined). */
static TgStatus read_step(const cJSON *obj, int64_t *step, const char *path, int64_t line_no) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "step");
    if (cJSON_IsNumber(v) && tg_double_to_i64(v->valuedouble, 0, TG_CHECKPOINT_MAX_STEP, step)) return TG_OK;
    if (!cJSON_IsNumber(v))
        return tg_fail(TG_ERR_FORMAT, "%s line %lld: not a JSON object with a step", path, (long long)line_no);
    return tg_fail(TG_ERR_FORMAT, "%s line %lld: step %g is not a whole number in [0, 2^53]", path, (long long)line_no,
                   v->valuedouble);
}

static void merge_metric(TgMetricRow *into, const TgMetricRow *from) {
    if (isfinite(from->loss)) into->loss = from->loss;
    if (isfinite(from->val_loss)) into->val_loss = from->val_loss;
    if (isfinite(from->lr)) into->lr = from->lr;
    if (isfinite(from->grad_norm)) into->grad_norm = from->grad_norm;
    if (isfinite(from->val_bpb)) into->val_bpb = from->val_bpb;
}

static TgStatus load_metrics(const char *dir, TgRunHistory *h) {
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, dir, "metrics.jsonl"));
    FILE *f = tg_file_open_read(path);
    if (!f)
        return tg_fail(TG_ERR_IO, "%s: %s; is %s a run folder written by `tapegrad train`?", path, tg_file_open_error(errno),
                       dir);
    char *line = NULL;
    size_t cap = 0;
    int64_t line_no = 0, alloc = 0;
    TgStatus s = TG_OK;
    while (getline(&line, &cap, f) > 0) {
        line_no++;
        if (line[0] == '\n') continue;
        cJSON *o = cJSON_Parse(line);
        TgMetricRow row = {0, number_or_nan(o, "loss"), number_or_nan(o, "val_loss"), number_or_nan(o, "lr"),
                         number_or_nan(o, "grad_norm"), number_or_nan(o, "val_bpb")};
        s = read_step(o, &row.step, path, line_no);
        cJSON_Delete(o);
        if (s != TG_OK) break;
        /* a resumed run repeats steps after its checkpoint: the newer lines win */
        while (h->n_metrics > 0 && h->metrics[h->n_metrics - 1].step > row.step) h->n_metrics--;
        if (h->n_metrics > 0 && h->metrics[h->n_metrics - 1].step == row.step) {
            merge_metric(&h->metrics[h->n_metrics - 1], &row); /* the end-of-run val loss shares the step */
            continue;
        }
        if (h->n_metrics == alloc) {
            alloc = alloc ? 2 * alloc : 256;
            h->metrics = tg_realloc(h->metrics, (size_t)alloc * sizeof *h->metrics);
        }
        h->metrics[h->n_metrics++] = row;
    }
    free(line);
    fclose(f);
    return s;
}

static void free_log_row(TgGradLogRow *row) {
    free(row->grad_norm); /* one allocation holds every array of the row */
    memset(row, 0, sizeof *row);
}

/* Fills row from one parsed line; the first line fixes the parameter names and layer count. */
static TgStatus parse_log_row(TgRunHistory *h, const cJSON *o, TgGradLogRow *row, const char *path, int64_t line_no) {
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(o, "params");
    const cJSON *ffn = cJSON_GetObjectItemCaseSensitive(o, "ffn");
    if (!cJSON_IsArray(params) || !cJSON_IsArray(ffn))
        return tg_fail(TG_ERR_FORMAT, "%s line %lld: expected step, params and ffn", path, (long long)line_no);
    TG_TRY(read_step(o, &row->step, path, line_no));
    int n_params = cJSON_GetArraySize(params), n_layers = cJSON_GetArraySize(ffn);
    if (h->param_names == NULL) {
        h->n_params = n_params;
        h->n_layers = n_layers;
        h->param_names = tg_calloc((size_t)n_params + 1, sizeof *h->param_names);
        int i = 0;
        const cJSON *p;
        cJSON_ArrayForEach(p, params) {
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "name"));
            size_t len = strlen(name ? name : "?") + 1;
            h->param_names[i] = tg_malloc(len);
            memcpy(h->param_names[i++], name ? name : "?", len);
        }
        const char *kind = n_layers ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ffn->child, "kind")) : NULL;
        snprintf(h->ffn_kind, sizeof h->ffn_kind, "%s", kind ? kind : "");
    } else if (n_params != h->n_params || n_layers != h->n_layers) {
        return tg_fail(TG_ERR_FORMAT, "%s line %lld: %d parameters and %d layers, earlier lines had %d and %d", path,
                       (long long)line_no, n_params, n_layers, h->n_params, h->n_layers);
    }
    double *block = tg_malloc(((size_t)n_params * 3 + (size_t)n_layers * 7 + 1) * sizeof(double));
    row->grad_norm = block, row->weight_norm = block + n_params, row->update_ratio = block + 2 * n_params;
    double *layer = block + 3 * n_params;
    row->dead_frac = layer, row->zero_frac = layer + n_layers, row->act_mean = layer + 2 * n_layers;
    row->act_std = layer + 3 * n_layers, row->w1_zero_grad_rows = layer + 4 * n_layers;
    row->probe_dead_frac = layer + 5 * n_layers, row->probe_zero_frac = layer + 6 * n_layers;
    int i = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, params) {
        row->grad_norm[i] = number_or_nan(p, "grad_norm");
        row->weight_norm[i] = number_or_nan(p, "weight_norm");
        row->update_ratio[i++] = number_or_nan(p, "update_ratio");
    }
    i = 0;
    cJSON_ArrayForEach(p, ffn) {
        row->dead_frac[i] = number_or_nan(p, "dead_frac");
        row->zero_frac[i] = number_or_nan(p, "zero_frac");
        row->act_mean[i] = number_or_nan(p, "mean");
        row->act_std[i] = number_or_nan(p, "std");
        row->w1_zero_grad_rows[i] = number_or_nan(p, "w1_zero_grad_rows");
        row->probe_dead_frac[i] = number_or_nan(p, "probe_dead_frac");
        row->probe_zero_frac[i++] = number_or_nan(p, "probe_zero_frac");
    }
    return TG_OK;
}

static TgStatus load_grad_log(const char *dir, TgRunHistory *h) {
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, dir, "grads.jsonl"));
    FILE *f = tg_file_open_read(path);
    if (!f) return errno == ENOENT ? TG_OK : tg_fail(TG_ERR_IO, "%s: %s", path, tg_file_open_error(errno));
    char *line = NULL;
    size_t cap = 0;
    int64_t line_no = 0, alloc = 0;
    TgStatus s = TG_OK;
    while (s == TG_OK && getline(&line, &cap, f) > 0) {
        line_no++;
        if (line[0] == '\n') continue;
        cJSON *o = cJSON_Parse(line);
        TgGradLogRow row = {0};
        s = o ? parse_log_row(h, o, &row, path, line_no)
              : tg_fail(TG_ERR_FORMAT, "%s line %lld: not valid JSON", path, (long long)line_no);
        cJSON_Delete(o);
        if (s != TG_OK) break;
        while (h->n_logs > 0 && h->logs[h->n_logs - 1].step >= row.step) free_log_row(&h->logs[--h->n_logs]);
        if (h->n_logs == alloc) {
            alloc = alloc ? 2 * alloc : 64;
            h->logs = tg_realloc(h->logs, (size_t)alloc * sizeof *h->logs);
        }
        h->logs[h->n_logs++] = row;
    }
    h->has_probe = h->n_logs > 0 && h->n_layers > 0 && isfinite(h->logs[0].probe_dead_frac[0]);
    free(line);
    fclose(f);
    return s;
}

TgStatus tg_run_history_load(const char *dir, TgRunHistory *h) {
    memset(h, 0, sizeof *h);
    TgStatus s = load_metrics(dir, h);
    if (s == TG_OK) s = load_grad_log(dir, h);
    if (s != TG_OK) tg_run_history_free(h);
    return s;
}

void tg_run_history_free(TgRunHistory *h) {
    for (int64_t i = 0; i < h->n_logs; i++) free_log_row(&h->logs[i]);
    for (int i = 0; i < h->n_params; i++) free(h->param_names[i]);
    free(h->param_names);
    free(h->logs);
    free(h->metrics);
    memset(h, 0, sizeof *h);
}

double tg_run_history_final_val_bpb(const TgRunHistory *h) {
    for (int64_t i = h->n_metrics - 1; i >= 0; i--)
        if (isfinite(h->metrics[i].val_bpb)) return h->metrics[i].val_bpb;
    return NAN;
}

double tg_run_history_final_val_loss(const TgRunHistory *h) {
    for (int64_t i = h->n_metrics - 1; i >= 0; i--)
        if (isfinite(h->metrics[i].val_loss)) return h->metrics[i].val_loss;
    return NAN;
}

double tg_run_history_final_train_loss(const TgRunHistory *h, int64_t n) {
    double sum = 0;
    int64_t count = 0;
    for (int64_t i = h->n_metrics - 1; i >= 0 && count < n; i--)
        if (isfinite(h->metrics[i].loss)) sum += h->metrics[i].loss, count++;
    return count ? sum / (double)count : NAN;
}

double tg_run_history_layer_mean(const TgRunHistory *h, const double *per_layer) {
    double sum = 0;
    for (int l = 0; l < h->n_layers; l++) sum += per_layer[l];
    return h->n_layers ? sum / h->n_layers : NAN;
}

/* ---------------------------------------------------------------- the report of one run */

/* Parameters grouped by role, so a chart has a handful of lines rather than one per tensor. */
static const char *const group_names[] = {"embedding", "attn q", "attn k", "attn v", "attn o",
                                          "mlp gate (w1)", "mlp up (w3)", "mlp down (w2)", "norm gains"};
enum { N_GROUPS = sizeof group_names / sizeof group_names[0] };

static int param_group(const char *name) {
    static const char *const keys[] = {"embed_tokens", "q_proj", "k_proj", "v_proj", "o_proj",
                                       "gate_proj", "up_proj", "down_proj"};
    for (int g = 0; g < 8; g++)
        if (strstr(name, keys[g])) return g;
    return 8;
}

static void add_group_charts(TgReport *r, const TgRunHistory *h) {
    TgReportChart *norms = tg_report_chart(r, "Gradient norm by parameter group (before clipping)", "step", "||g||", true);
    TgReportChart *ratios = tg_report_chart(r, "Update / weight ratio by parameter group", "step", "||dw|| / ||w||", true);
    int *group = tg_malloc((size_t)(h->n_params + 1) * sizeof *group);
    bool present[N_GROUPS] = {false};
    for (int i = 0; i < h->n_params; i++) present[group[i] = param_group(h->param_names[i])] = true;
    for (int g = 0; g < N_GROUPS; g++) {
        if (!present[g]) continue; /* a ReLU FFN has no up projection */
        TgReportSeries *sn = tg_report_series(norms, group_names[g], g, false);
        TgReportSeries *sr = tg_report_series(ratios, group_names[g], g, false);
        for (int64_t k = 0; k < h->n_logs; k++) {
            const TgGradLogRow *row = &h->logs[k];
            /* a group's norm is the norm of its tensors taken together */
            double g2 = 0, w2 = 0, d2 = 0;
            for (int i = 0; i < h->n_params; i++) {
                if (group[i] != g) continue;
                g2 += row->grad_norm[i] * row->grad_norm[i];
                w2 += row->weight_norm[i] * row->weight_norm[i];
                double d = row->update_ratio[i] * row->weight_norm[i];
                d2 += d * d;
            }
            tg_report_point(sn, (double)row->step, sqrt(g2));
            tg_report_point(sr, (double)row->step, w2 > 0 ? sqrt(d2 / w2) : NAN);
        }
    }
    free(group);
}

const double *tg_grad_log_layer_values(const TgGradLogRow *row, TgLayerStat stat) {
    switch (stat) {
    case TG_LAYER_DEAD_FRAC: return row->dead_frac;
    case TG_LAYER_ZERO_FRAC: return row->zero_frac;
    case TG_LAYER_ACT_MEAN: return row->act_mean;
    case TG_LAYER_ACT_STD: return row->act_std;
    case TG_LAYER_W1_ZERO_GRAD_ROWS: return row->w1_zero_grad_rows;
    case TG_LAYER_PROBE_DEAD_FRAC: return row->probe_dead_frac;
    case TG_LAYER_PROBE_ZERO_FRAC: return row->probe_zero_frac;
    }
    return row->dead_frac;
}

static void add_layer_chart(TgReport *r, const TgRunHistory *h, const char *title, const char *y_label, TgLayerStat stat) {
    TgReportChart *c = tg_report_chart(r, title, "step", y_label, false);
    for (int l = 0; l < h->n_layers; l++) {
        char name[32];
        snprintf(name, sizeof name, "layer %d", l);
        TgReportSeries *s = tg_report_series(c, name, l, false);
        for (int64_t k = 0; k < h->n_logs; k++) {
            tg_report_point(s, (double)h->logs[k].step, tg_grad_log_layer_values(&h->logs[k], stat)[l]);
        }
    }
}

void tg_report_add_run(TgReport *r, const TgRunHistory *h) {
    TgReportChart *loss = tg_report_chart(r, "Loss", "step", "cross-entropy", false);
    TgReportSeries *train = tg_report_series(loss, "train loss", 0, false);
    TgReportSeries *val = tg_report_series(loss, "val loss", 1, false);
    TgReportChart *bpb_chart = tg_report_chart(r, "Val loss in bits per byte of text", "step", "bits per byte", false);
    TgReportSeries *bpb = tg_report_series(bpb_chart, "val bits per byte", 1, false);
    TgReportChart *lr_chart = tg_report_chart(r, "Learning rate", "step", "lr", false);
    TgReportSeries *lr = tg_report_series(lr_chart, "lr", 2, false);
    TgReportChart *gn_chart = tg_report_chart(r, "Global gradient norm (before clipping)", "step", "||g||", true);
    TgReportSeries *gn = tg_report_series(gn_chart, "grad norm", 4, false);
    for (int64_t i = 0; i < h->n_metrics; i++) {
        const TgMetricRow *m = &h->metrics[i];
        tg_report_point(train, (double)m->step, m->loss);
        tg_report_point(val, (double)m->step, m->val_loss);
        tg_report_point(bpb, (double)m->step, m->val_bpb);
        tg_report_point(lr, (double)m->step, m->lr);
        tg_report_point(gn, (double)m->step, m->grad_norm);
    }
    if (h->n_logs == 0) {
        tg_report_text(r, "This run has no grads.jsonl: train with --log-grads N to see gradient and FFN activation "
                       "statistics here.");
        return;
    }
    add_group_charts(r, h);
    add_layer_chart(r, h, "FFN dead units (zero for every token of the logged batch)", "fraction of units",
                    TG_LAYER_DEAD_FRAC);
    if (h->has_probe)
        add_layer_chart(r, h, "FFN dead units on the probe set (fixed held-out batches)", "fraction of units",
                        TG_LAYER_PROBE_DEAD_FRAC);
    add_layer_chart(r, h, "FFN hidden activations that are exactly zero", "fraction of activations",
                    TG_LAYER_ZERO_FRAC);
    add_layer_chart(r, h, "FFN hidden activation std", "std", TG_LAYER_ACT_STD);
    add_layer_chart(r, h, "w1 rows whose gradient is all zero", "fraction of rows",
                    TG_LAYER_W1_ZERO_GRAD_ROWS);
    const TgGradLogRow *last = &h->logs[h->n_logs - 1];
    char caption[96];
    snprintf(caption, sizeof caption, "FFN hidden activations at step %lld (%s)", (long long)last->step,
             h->ffn_kind[0] ? h->ffn_kind : "?");
    static const char *const header[] = {"layer", "dead units", "exact zeros", "mean", "std", "w1 zero-grad rows"};
    TgReportTable *t = tg_report_table(r, caption, 6, header);
    for (int l = 0; l < h->n_layers; l++) {
        tg_report_cell(t, "%d", l);
        tg_report_cell(t, "%.4f", last->dead_frac[l]);
        tg_report_cell(t, "%.4f", last->zero_frac[l]);
        tg_report_cell(t, "%.4g", last->act_mean[l]);
        tg_report_cell(t, "%.4g", last->act_std[l]);
        tg_report_cell(t, "%.4f", last->w1_zero_grad_rows[l]);
    }
}

/* The facts of a run as a two-column table; the model config comes from its latest checkpoint. */
static void add_run_facts(TgReport *r, const char *dir, const TgRunHistory *h) {
    static const char *const header[] = {"", "value"};
    TgReportTable *t = tg_report_table(r, "Run", 2, header);
    tg_report_cell(t, "folder");
    tg_report_cell(t, "%s", dir);
    char ckpt[TG_PATH_CAP];
    TgModelConfig c;
    uint64_t fingerprint;
    if (tg_checkpoint_resolve(dir, ckpt, sizeof ckpt) == TG_OK && tg_checkpoint_read_config(ckpt, &c, &fingerprint) == TG_OK) {
        tg_report_cell(t, "model");
        tg_report_cell(t, "dim %lld, %lld layers, %lld heads (%lld kv), vocab %lld, context %lld", (long long)c.dim,
                    (long long)c.n_layers, (long long)c.n_heads, (long long)c.n_kv_heads, (long long)c.vocab,
                    (long long)c.seq_len);
        tg_report_cell(t, "FFN");
        tg_report_cell(t, "%s, hidden %lld", tg_ffn_kind_name(c.ffn), (long long)c.hidden);
        tg_report_cell(t, "parameters");
        tg_report_cell(t, "%lld (FFN %lld)", (long long)tg_model_config_param_count(&c),
                    (long long)tg_model_config_ffn_param_count(&c));
    }
    tg_error_clear();
    tg_report_cell(t, "steps logged");
    tg_report_cell(t, "%lld", (long long)(h->n_metrics ? h->metrics[h->n_metrics - 1].step : 0));
    tg_report_cell(t, "final val loss");
    tg_report_cell(t, "%.4f", tg_run_history_final_val_loss(h));
    tg_report_cell(t, "final val bits per byte");
    tg_report_cell(t, "%.4f", tg_run_history_final_val_bpb(h));
    tg_report_cell(t, "train loss, mean of the last 10 steps");
    tg_report_cell(t, "%.4f", tg_run_history_final_train_loss(h, 10));
}

TgStatus tg_run_report_write(const char *dir, const TgRunHistory *h, const char *html_path, const char *jsonl_path) {
    char title[TG_PATH_CAP + 32];
    snprintf(title, sizeof title, "tapegrad run %s", dir);
    TgReport *r = tg_report_new(title);
    add_run_facts(r, dir, h);
    tg_report_add_run(r, h);
    TgStatus s = tg_report_write_html(r, html_path);
    if (s == TG_OK) s = tg_report_write_series_jsonl(r, jsonl_path);
    tg_report_free(r);
    return s;
}
