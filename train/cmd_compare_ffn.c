/* `tapegrad compare-ffn`: the dying-ReLU experiment. For each learning rate, trains a ReLU FFN
 * model (hidden 4*dim) and a SwiGLU FFN model (the preset's hidden, about 8/3*dim) of about the
 * same parameter count, from the same seed and data, with the ordinary trainer and --log-grads;
 * then reads their metrics.jsonl and grads.jsonl back and reports them side by side.
 *
 * Every run folder stays under DIR (DIR/lr<lr>-<ffn>), so inspect, sample, eval and report work
 * on each. DIR/report.html holds the combined report, DIR/compare.jsonl every series it charts,
 * DIR/summary.json the final figures. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../data/corpus.h"
#include "../lib/atomic_file.h"
#include "checkpoint.h"
#include "checkpoint_folder.h"
#include "cli.h"
#include "inspect.h"
#include "report.h"
#include "run_history.h"
#include "trainer.h"

enum { MAX_LRS = 8, N_KINDS = 2 };
static const FfnKind kinds[N_KINDS] = {FFN_RELU, FFN_SWIGLU};

/* "1e-3,3e-3" -> lrs; one line naming the bad item otherwise. */
static int parse_lrs(const char *text, double *lrs, int *n) {
    *n = 0;
    const char *p = text;
    while (1) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno || !isfinite(v) || !(v > 0) || (*end != ',' && *end != '\0')) {
            int len = (int)strcspn(p, ",");
            fprintf(stderr, "tapegrad compare-ffn: --lrs: '%.*s' is not a positive number; give a comma-separated list like 1e-3,3e-3,1e-2\n",
                    len, p);
            return 2;
        }
        for (int i = 0; i < *n; i++)
            if (lrs[i] == v) {
                fprintf(stderr, "tapegrad compare-ffn: --lrs: %g appears twice\n", v);
                return 2;
            }
        if (*n == MAX_LRS) {
            fprintf(stderr, "tapegrad compare-ffn: --lrs: at most %d learning rates\n", MAX_LRS);
            return 2;
        }
        lrs[(*n)++] = v;
        if (*end == '\0') return 0;
        p = end + 1;
    }
}

typedef struct {
    double lr;
    FfnKind kind;
    char dir[4200];
    ModelConfig cfg;
    RunHistory h;
    bool loaded;
} CompareRun;

static void run_folder(char *out, size_t cap, const char *root, double lr, FfnKind kind) {
    snprintf(out, cap, "%s/lr%g-%s", root, lr, ffn_kind_name(kind));
}

/* Loads the history and the model config (for exact parameter counts) of a finished run. */
static tg_status load_run(CompareRun *run) {
    char ckpt[4200];
    uint64_t fingerprint;
    TG_TRY(checkpoint_resolve(run->dir, ckpt, sizeof ckpt));
    TG_TRY(checkpoint_read_config(ckpt, &run->cfg, &fingerprint));
    TG_TRY(run_history_load(run->dir, &run->h));
    run->loaded = true;
    if (run->h.n_logs == 0)
        return tg_fail(TG_ERR_FORMAT, "%s has no grads.jsonl; it was not trained with --log-grads", run->dir);
    return TG_OK;
}

static const GradLogRow *last_log(const CompareRun *run) { return &run->h.logs[run->h.n_logs - 1]; }

/* ---------------------------------------------------------------- the combined report */

static void add_layer_comparison(Report *r, const CompareRun *pair, const char *title, const char *y_label,
                                 LayerStat stat) {
    ReportChart *c = report_chart(r, title, "step", y_label, false);
    for (int k = 0; k < N_KINDS; k++) {
        const CompareRun *run = &pair[k];
        for (int l = 0; l < run->h.n_layers; l++) {
            char name[48];
            snprintf(name, sizeof name, "%s layer %d", ffn_kind_name(run->kind), l);
            /* one colour per layer; dashed for SwiGLU */
            ReportSeries *s = report_series(c, name, l, run->kind == FFN_SWIGLU);
            for (int64_t i = 0; i < run->h.n_logs; i++)
                report_point(s, (double)run->h.logs[i].step, grad_log_layer_values(&run->h.logs[i], stat)[l]);
        }
    }
}

static void add_summary_table(Report *r, const CompareRun *runs, int n_runs) {
    static const char *const header[] = {"lr", "FFN", "hidden", "parameters", "FFN parameters", "final val loss",
                                         "train loss (last 10 steps)", "dead units at step 1", "dead units, end",
                                         "exact zeros at step 1", "exact zeros, end", "w1 zero-grad rows, end"};
    ReportTable *t = report_table(r, "Summary (dead units, zeros, w1 rows: mean over layers)", 12, header);
    for (int i = 0; i < n_runs; i++) {
        const CompareRun *run = &runs[i];
        const RunHistory *h = &run->h;
        report_cell(t, "%g", run->lr);
        report_cell(t, "%s", ffn_kind_name(run->kind));
        report_cell(t, "%lld", (long long)run->cfg.hidden);
        report_cell(t, "%lld", (long long)model_config_param_count(&run->cfg));
        report_cell(t, "%lld", (long long)model_config_ffn_param_count(&run->cfg));
        report_cell(t, "%.4f", run_history_final_val_loss(h));
        report_cell(t, "%.4f", run_history_final_train_loss(h, 10));
        report_cell(t, "%.4f", run_history_layer_mean(h, h->logs[0].dead_frac));
        report_cell(t, "%.4f", run_history_layer_mean(h, last_log(run)->dead_frac));
        report_cell(t, "%.4f", run_history_layer_mean(h, h->logs[0].zero_frac));
        report_cell(t, "%.4f", run_history_layer_mean(h, last_log(run)->zero_frac));
        report_cell(t, "%.4f", run_history_layer_mean(h, last_log(run)->w1_zero_grad_rows));
    }
}

static void add_layer_table(Report *r, const CompareRun *pair) {
    char caption[128];
    snprintf(caption, sizeof caption, "Per layer at the last logged step, lr %g", pair[0].lr);
    static const char *const header[] = {"layer", "relu dead units", "relu exact zeros", "relu w1 zero-grad rows",
                                         "swiglu dead units", "swiglu exact zeros", "swiglu w1 zero-grad rows"};
    ReportTable *t = report_table(r, caption, 7, header);
    for (int l = 0; l < pair[0].h.n_layers; l++) {
        report_cell(t, "%d", l);
        for (int k = 0; k < N_KINDS; k++) {
            const GradLogRow *row = last_log(&pair[k]);
            report_cell(t, "%.4f", row->dead_frac[l]);
            report_cell(t, "%.4f", row->zero_frac[l]);
            report_cell(t, "%.4f", row->w1_zero_grad_rows[l]);
        }
    }
}

static Report *build_report(const CompareRun *runs, int n_lrs, const char *preset, int64_t steps) {
    char title[256];
    snprintf(title, sizeof title, "Dying ReLU: ReLU FFN vs SwiGLU FFN (preset %s, %lld steps)", preset, (long long)steps);
    Report *r = report_new(title);
    const CompareRun *relu = &runs[0], *swiglu = &runs[1];
    int64_t pr = model_config_param_count(&relu->cfg), ps = model_config_param_count(&swiglu->cfg);
    report_text(r,
                "Same seed, data and schedule for both. ReLU FFN: w2(relu(w1 x)), hidden %lld, 2 matrices per layer: "
                "%lld FFN parameters, %lld in all. SwiGLU FFN: w2(silu(w1 x) * w3 x), hidden %lld, 3 matrices per "
                "layer: %lld FFN parameters, %lld in all. Difference %+lld parameters (%+.2f%%): 3 d h_swiglu = 2 d "
                "h_relu holds exactly at h_swiglu = 8/3 d, and the preset rounds that hidden size.",
                (long long)relu->cfg.hidden, (long long)model_config_ffn_param_count(&relu->cfg), (long long)pr,
                (long long)swiglu->cfg.hidden, (long long)model_config_ffn_param_count(&swiglu->cfg), (long long)ps,
                (long long)(ps - pr), 100.0 * (double)(ps - pr) / (double)pr);
    report_text(r, "A dead unit is an FFN hidden unit (an input of w2) that is exactly zero for every token of the "
                   "logged batch; exact zeros count every zero activation. Step 1 is measured on the initial "
                   "weights. A w1 row whose gradient is all zero gets no learning signal at that step.");
    add_summary_table(r, runs, n_lrs * N_KINDS);
    if (n_lrs > 1) {
        ReportChart *c = report_chart(r, "Final val loss by learning rate", "log10(lr)", "val loss", false);
        ReportChart *d = report_chart(r, "Dead units at the end by learning rate", "log10(lr)",
                                      "fraction of units (mean over layers)", false);
        for (int k = 0; k < N_KINDS; k++) {
            ReportSeries *sv = report_series(c, ffn_kind_name(kinds[k]), k, kinds[k] == FFN_SWIGLU);
            ReportSeries *sd = report_series(d, ffn_kind_name(kinds[k]), k, kinds[k] == FFN_SWIGLU);
            for (int i = 0; i < n_lrs; i++) {
                const CompareRun *run = &runs[i * N_KINDS + k];
                report_point(sv, log10(run->lr), run_history_final_val_loss(&run->h));
                report_point(sd, log10(run->lr), run_history_layer_mean(&run->h, last_log(run)->dead_frac));
            }
        }
    }
    for (int i = 0; i < n_lrs; i++) {
        const CompareRun *pair = &runs[i * N_KINDS];
        char heading[64];
        snprintf(heading, sizeof heading, "Learning rate %g", pair[0].lr);
        report_heading(r, heading);
        ReportChart *loss = report_chart(r, "Loss", "step", "cross-entropy", false);
        for (int k = 0; k < N_KINDS; k++) {
            char name[48];
            snprintf(name, sizeof name, "%s train", ffn_kind_name(pair[k].kind));
            ReportSeries *train = report_series(loss, name, 2 * k, false);
            snprintf(name, sizeof name, "%s val", ffn_kind_name(pair[k].kind));
            ReportSeries *val = report_series(loss, name, 2 * k + 1, true);
            for (int64_t j = 0; j < pair[k].h.n_metrics; j++) {
                const MetricRow *m = &pair[k].h.metrics[j];
                report_point(train, (double)m->step, m->loss);
                report_point(val, (double)m->step, m->val_loss);
            }
        }
        add_layer_comparison(r, pair, "Dead units per layer (solid ReLU, dashed SwiGLU)", "fraction of units",
                             LAYER_DEAD_FRAC);
        add_layer_comparison(r, pair, "Exact zeros of the FFN hidden activation", "fraction of activations",
                             LAYER_ZERO_FRAC);
        add_layer_comparison(r, pair, "w1 rows whose gradient is all zero", "fraction of rows",
                             LAYER_W1_ZERO_GRAD_ROWS);
        add_layer_table(r, pair);
    }
    return r;
}

/* ---------------------------------------------------------------- summary.json and stdout */

static cJSON *layer_array(const double *values, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int l = 0; l < n; l++) cJSON_AddItemToArray(a, isfinite(values[l]) ? cJSON_CreateNumber(values[l]) : cJSON_CreateNull());
    return a;
}

static tg_status write_summary(const char *path, const CompareRun *runs, int n_runs, const char *preset, int64_t steps) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "preset", preset);
    cJSON_AddNumberToObject(root, "steps", (double)steps);
    cJSON *arr = cJSON_AddArrayToObject(root, "runs");
    for (int i = 0; i < n_runs; i++) {
        const CompareRun *run = &runs[i];
        const GradLogRow *first = &run->h.logs[0], *last = last_log(run);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "folder", run->dir);
        cJSON_AddNumberToObject(o, "lr", run->lr);
        cJSON_AddStringToObject(o, "ffn", ffn_kind_name(run->kind));
        cJSON_AddNumberToObject(o, "hidden", (double)run->cfg.hidden);
        cJSON_AddNumberToObject(o, "params", (double)model_config_param_count(&run->cfg));
        cJSON_AddNumberToObject(o, "ffn_params", (double)model_config_ffn_param_count(&run->cfg));
        cJSON_AddNumberToObject(o, "final_val_loss", run_history_final_val_loss(&run->h));
        cJSON_AddNumberToObject(o, "final_train_loss_last10", run_history_final_train_loss(&run->h, 10));
        cJSON_AddNumberToObject(o, "first_logged_step", (double)first->step);
        cJSON_AddNumberToObject(o, "last_logged_step", (double)last->step);
        cJSON_AddItemToObject(o, "dead_frac_first", layer_array(first->dead_frac, run->h.n_layers));
        cJSON_AddItemToObject(o, "zero_frac_first", layer_array(first->zero_frac, run->h.n_layers));
        cJSON_AddItemToObject(o, "dead_frac_last", layer_array(last->dead_frac, run->h.n_layers));
        cJSON_AddItemToObject(o, "zero_frac_last", layer_array(last->zero_frac, run->h.n_layers));
        cJSON_AddItemToObject(o, "w1_zero_grad_rows_last", layer_array(last->w1_zero_grad_rows, run->h.n_layers));
        cJSON_AddItemToArray(arr, o);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    FILE *f = fopen(path, "w");
    tg_status s = TG_OK;
    if (!f || fprintf(f, "%s\n", text) < 0) s = tg_fail(TG_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    if (f && fclose(f) != 0 && s == TG_OK) s = tg_fail(TG_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    cJSON_free(text);
    return s;
}

static void print_summary(const CompareRun *runs, int n_lrs) {
    printf("\n%-8s %-7s %6s %10s %10s %9s %10s %11s %11s %12s %12s\n", "lr", "ffn", "hidden", "params", "ffn params",
           "val loss", "train loss", "dead step1", "dead end", "zeros step1", "zeros end");
    for (int i = 0; i < n_lrs * N_KINDS; i++) {
        const CompareRun *run = &runs[i];
        const RunHistory *h = &run->h;
        printf("%-8g %-7s %6lld %10lld %10lld %9.4f %10.4f %11.4f %11.4f %12.4f %12.4f\n", run->lr,
               ffn_kind_name(run->kind), (long long)run->cfg.hidden, (long long)model_config_param_count(&run->cfg),
               (long long)model_config_ffn_param_count(&run->cfg), run_history_final_val_loss(h),
               run_history_final_train_loss(h, 10), run_history_layer_mean(h, h->logs[0].dead_frac),
               run_history_layer_mean(h, last_log(run)->dead_frac), run_history_layer_mean(h, h->logs[0].zero_frac),
               run_history_layer_mean(h, last_log(run)->zero_frac));
    }
    printf("(dead units and zeros: mean over layers; step 1 = the initial weights)\n");
}

/* ---------------------------------------------------------------- the command */

static int run_compare_ffn(int argc, char **argv) {
    const char *preset = "small", *lrs_text = "3e-3", *data = NULL, *out = NULL;
    int64_t steps = 300, log_grads = 0, eval_every = 0, eval_batches = 8, batch = 16, seed = 1337, relu_hidden = 0;
    int threads = 2;
    bool reuse = false;
    Flag flags[] = {
        {"--preset", FLAG_STRING, &preset, "tiny | small | minimind-26m (small)", false},
        {"--steps", FLAG_INT64, &steps, "optimizer steps of every run (300)", false},
        {"--lrs", FLAG_STRING, &lrs_text, "comma-separated peak learning rates; each trains both FFNs (3e-3)", false},
        {"--data", FLAG_STRING, &data, "text file or folder (default " CORPUS_DEFAULT_PATH ")", false},
        {"--out", FLAG_STRING, &out, "folder for the runs and the report (default checkpoints/compare-ffn-<time>)", false},
        {"--log-grads", FLAG_INT64, &log_grads, "statistics every N steps (steps/30, at least 1)", false},
        {"--eval-every", FLAG_INT64, &eval_every, "val loss every N steps (steps/10, at least 1)", false},
        {"--eval-batches", FLAG_INT64, &eval_batches, "fixed val batches per evaluation (8)", false},
        {"--batch", FLAG_INT64, &batch, "sequences per step (16)", false},
        {"--seed", FLAG_INT64, &seed, "seed of init and data order, the same for every run (1337)", false},
        {"--relu-hidden", FLAG_INT64, &relu_hidden, "ReLU hidden size (4*dim; 3/2 of the SwiGLU hidden matches the counts exactly)", false},
        {"--threads", FLAG_INT, &threads, "threads (2)", false},
        {"--reuse", FLAG_BOOL, &reuse, "keep runs already finished in --out instead of refusing", false},
    };
    bool help;
    int rc = flags_parse("compare-ffn", "[--preset small] [--steps N] [--lrs 1e-3,3e-3,1e-2] [--data PATH] [--out DIR]",
                         flags, (int)(sizeof flags / sizeof flags[0]), argc, argv, NULL, 0, NULL, &help);
    if (rc || help) return rc;
    double lrs[MAX_LRS];
    int n_lrs;
    if ((rc = parse_lrs(lrs_text, lrs, &n_lrs))) return rc;
    ModelConfig preset_cfg;
    if (model_preset(preset, &preset_cfg) != TG_OK) {
        fprintf(stderr, "tapegrad compare-ffn: %s\n", tg_error_message());
        return 2;
    }
    struct { const char *flag; int64_t value; bool zero_ok; } counts[] = {
        {"--steps", steps, false}, {"--batch", batch, false}, {"--eval-batches", eval_batches, false},
        {"--threads", threads, false}, {"--seed", seed, true}, {"--log-grads", log_grads, true},
        {"--eval-every", eval_every, true}, {"--relu-hidden", relu_hidden, true},
    };
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (counts[i].value < 0 || (counts[i].value == 0 && !counts[i].zero_ok)) {
            fprintf(stderr, "tapegrad compare-ffn: %s must be %s, got %lld\n", counts[i].flag,
                    counts[i].zero_ok ? "0 or more" : "positive", (long long)counts[i].value);
            return 2;
        }
    /* a missing corpus would otherwise surface inside the first training run */
    if (data && access(data, R_OK) != 0) {
        fprintf(stderr, "tapegrad compare-ffn: --data %s: %s\n", data, strerror(errno));
        return 2;
    }
    if (log_grads == 0) log_grads = steps / 30 > 0 ? steps / 30 : 1;
    if (eval_every == 0) eval_every = steps / 10 > 0 ? steps / 10 : 1;
    char root[4096];
    if (out) {
        snprintf(root, sizeof root, "%s", out);
    } else {
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        char stamp[32];
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
        snprintf(root, sizeof root, "checkpoints/compare-ffn-%s", stamp);
    }
    int n_runs = n_lrs * N_KINDS;
    CompareRun runs[MAX_LRS * N_KINDS];
    memset(runs, 0, sizeof runs);
    bool done[MAX_LRS * N_KINDS] = {false};
    for (int i = 0; i < n_runs; i++) {
        runs[i].lr = lrs[i / N_KINDS];
        runs[i].kind = kinds[i % N_KINDS];
        run_folder(runs[i].dir, sizeof runs[i].dir, root, runs[i].lr, runs[i].kind);
        char latest[4300];
        snprintf(latest, sizeof latest, "%s/latest", runs[i].dir);
        done[i] = access(latest, F_OK) == 0;
        if (done[i] && !reuse) {
            fprintf(stderr, "tapegrad compare-ffn: %s already holds a run; add --reuse to keep it, or pass another --out\n",
                    runs[i].dir);
            return 2;
        }
    }
    if (make_folders(root) != TG_OK) {
        fprintf(stderr, "tapegrad compare-ffn: %s\n", tg_error_message());
        return 1;
    }
    int exit_code = 1;
    for (int i = 0; i < n_runs; i++) {
        CompareRun *run = &runs[i];
        if (done[i]) {
            printf("== %s: already trained, reused (--reuse)\n", run->dir);
            continue;
        }
        TrainOptions o;
        train_options_defaults(&o);
        o.preset = preset;
        o.data_path = data;
        o.seed = seed;
        o.steps = steps;
        o.lr = run->lr;
        o.batch = batch;
        o.eval_every = eval_every;
        o.eval_batches = eval_batches;
        o.log_grads = log_grads;
        o.sample_tokens = 0;
        o.threads = threads;
        o.out_dir = run->dir;
        o.ffn = (int)run->kind;
        /* ReLU: 4*dim unless told; SwiGLU: the preset's own hidden */
        o.model.hidden = run->kind == FFN_RELU ? (relu_hidden > 0 ? relu_hidden : 4 * preset_cfg.dim) : preset_cfg.hidden;
        printf("\n== run %d/%d: %s FFN (hidden %lld), lr %g -> %s\n", i + 1, n_runs, ffn_kind_name(run->kind),
               (long long)o.model.hidden, run->lr, run->dir);
        fflush(stdout);
        if (train_run(&o) != 0) {
            fprintf(stderr, "tapegrad compare-ffn: training %s failed (see above)\n", run->dir);
            goto out;
        }
    }
    for (int i = 0; i < n_runs; i++) {
        char html[4300], jsonl[4300];
        snprintf(html, sizeof html, "%s/report.html", runs[i].dir);
        snprintf(jsonl, sizeof jsonl, "%s/report.jsonl", runs[i].dir);
        if (load_run(&runs[i]) != TG_OK || run_report_write(runs[i].dir, &runs[i].h, html, jsonl) != TG_OK) {
            fprintf(stderr, "tapegrad compare-ffn: %s\n", tg_error_message());
            goto out;
        }
    }
    char html[4200], jsonl[4200], summary[4200];
    snprintf(html, sizeof html, "%s/report.html", root);
    snprintf(jsonl, sizeof jsonl, "%s/compare.jsonl", root);
    snprintf(summary, sizeof summary, "%s/summary.json", root);
    Report *r = build_report(runs, n_lrs, preset, steps);
    tg_status s = report_write_html(r, html);
    if (s == TG_OK) s = report_write_series_jsonl(r, jsonl);
    if (s == TG_OK) s = write_summary(summary, runs, n_runs, preset, steps);
    report_free(r);
    if (s != TG_OK) {
        fprintf(stderr, "tapegrad compare-ffn: %s\n", tg_error_message());
        goto out;
    }
    print_summary(runs, n_lrs);
    printf("\nreport: %s\nseries: %s\nsummary: %s\nruns: %s/lr*-{relu,swiglu} (tapegrad inspect/sample/report work on each)\n",
           html, jsonl, summary, root);
    exit_code = 0;
out:
    for (int i = 0; i < n_runs; i++)
        if (runs[i].loaded) run_history_free(&runs[i].h);
    return exit_code;
}

const Subcommand cmd_compare_ffn = {"compare-ffn", "train ReLU-FFN and SwiGLU-FFN models side by side; dying-ReLU report",
                                    run_compare_ffn};
