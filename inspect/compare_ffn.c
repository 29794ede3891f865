/* `tapegrad compare-ffn`: the dying-ReLU experiment. For each learning rate, trains a ReLU FFN
 * model (hidden 4*dim) and a SwiGLU FFN model (the preset's hidden, about 8/3*dim) of about the
 * same parameter count, from the same seed and data, with the ordinary trainer and --log-grads;
 * then reads their metrics.jsonl and grads.jsonl back and reports them side by side.
 *
 * Every run folder stays under DIR (DIR/lr<lr>-<ffn>), so inspect, sample, eval and report work
 * on each. DIR/report.html holds the combined report, DIR/compare.jsonl every series it charts,
 * DIR/summary.json the final figures. */
#include "inspect/compare_ffn.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "data/corpus.h"
#include "lib/atomic_file.h"
#include "train/checkpoint.h"
#include "train/checkpoint_folder.h"
#include "inspect/inspect.h"
#include "inspect/report.h"
#include "inspect/run_history.h"
#include "train/trainer.h"

enum { MAX_LRS = 8, N_KINDS = 2 };
static const FfnKind kinds[N_KINDS] = {FFN_RELU, FFN_SWIGLU};

/* "1e-3,3e-3" -> lrs; TG_ERR_ARG naming the bad item otherwise. */
static tg_status parse_lrs(const char *text, double *lrs, int *n) {
    *n = 0;
    const char *p = text;
    while (1) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno || !isfinite(v) || !(v > 0) || (*end != ',' && *end != '\0'))
            return tg_fail(TG_ERR_ARG,
                           "--lrs: '%.*s' is not a positive number; give a comma-separated list like 1e-3,3e-3,1e-2",
                           (int)strcspn(p, ","), p);
        for (int i = 0; i < *n; i++)
            if (lrs[i] == v) return tg_fail(TG_ERR_ARG, "--lrs: %g appears twice", v);
        if (*n == MAX_LRS) return tg_fail(TG_ERR_ARG, "--lrs: at most %d learning rates", MAX_LRS);
        lrs[(*n)++] = v;
        if (*end == '\0') return TG_OK;
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

/* ---------------------------------------------------------------- the options */

#define C CompareFfnOptions
static const OptSpec specs[] = {
    OPT(C, preset, "--preset", OPT_STRING, "model preset", OPT_ANY, "tiny|small|minimind-26m", 0, NULL),
    OPT(C, steps, "--steps", OPT_INT64, "optimizer steps of every run", OPT_POSITIVE, NULL, 0, NULL),
    OPT(C, lrs, "--lrs", OPT_STRING, "comma-separated peak learning rates; each trains both FFNs", OPT_ANY, NULL, 0,
        NULL),
    OPT(C, data, "--data", OPT_STRING, "text file or folder", OPT_ANY, NULL, 0, CORPUS_DEFAULT_PATH),
    OPT(C, out, "--out", OPT_STRING, "folder for the runs and the report", OPT_ANY, NULL, 0,
        "checkpoints/compare-ffn-<time>"),
    OPT(C, log_grads, "--log-grads", OPT_INT64, "statistics every N steps", OPT_NON_NEGATIVE, NULL, 0,
        "steps/30, at least 1"),
    OPT(C, eval_every, "--eval-every", OPT_INT64, "val loss every N steps", OPT_NON_NEGATIVE, NULL, 0,
        "steps/10, at least 1"),
    OPT(C, eval_batches, "--eval-batches", OPT_INT64, "fixed val batches per evaluation", OPT_POSITIVE, NULL, 0, NULL),
    OPT(C, batch, "--batch", OPT_INT64, "sequences per step", OPT_POSITIVE, NULL, 0, NULL),
    OPT(C, seed, "--seed", OPT_INT64, "seed of init and data order, the same for every run", OPT_NON_NEGATIVE, NULL, 0,
        NULL),
    OPT(C, relu_hidden, "--relu-hidden", OPT_INT64,
        "ReLU hidden size (3/2 of the SwiGLU hidden matches the counts exactly)", OPT_NON_NEGATIVE, NULL, 0, "4*dim"),
    OPT(C, threads, "--threads", OPT_INT, "threads", OPT_BETWEEN(1, 256), NULL, 0, NULL),
    OPT(C, reuse, "--reuse", OPT_BOOL, "keep runs already finished in --out instead of refusing", OPT_ANY, NULL, 0,
        NULL),
};
#undef C
static const OptTable table = {"compare-ffn", "[--preset small] [--steps N] [--lrs 1e-3,3e-3,1e-2] [--data PATH] [--out DIR]",
                               specs, (int)(sizeof specs / sizeof specs[0]), 0};

const OptTable *compare_ffn_option_table(void) { return &table; }

void compare_ffn_defaults(CompareFfnOptions *o) {
    *o = (CompareFfnOptions){.preset = "small", .lrs = "3e-3", .steps = 300, .eval_batches = 8, .batch = 16,
                             .seed = 1337, .threads = 2};
}

/* ---------------------------------------------------------------- the experiment */

typedef struct {
    const CompareFfnOptions *o;
    ModelConfig preset_cfg;
    double lrs[MAX_LRS];
    int n_lrs, n_runs;
    int64_t log_grads, eval_every;
    char root[4096];
    CompareRun runs[MAX_LRS * N_KINDS];
    bool done[MAX_LRS * N_KINDS];
} Experiment;

/* Every check before anything is written: the learning rates, the preset, the corpus, the run
 * folders (a finished run is refused unless --reuse). */
static tg_status experiment_plan(Experiment *e, const CompareFfnOptions *o) {
    memset(e, 0, sizeof *e);
    e->o = o;
    TG_TRY(parse_lrs(o->lrs, e->lrs, &e->n_lrs));
    TG_TRY(model_preset(o->preset, &e->preset_cfg));
    /* a missing corpus would otherwise surface inside the first training run */
    if (o->data && access(o->data, R_OK) != 0) return tg_fail(TG_ERR_ARG, "--data %s: %s", o->data, strerror(errno));
    e->log_grads = o->log_grads > 0 ? o->log_grads : o->steps / 30 > 0 ? o->steps / 30 : 1;
    e->eval_every = o->eval_every > 0 ? o->eval_every : o->steps / 10 > 0 ? o->steps / 10 : 1;
    if (o->out) {
        snprintf(e->root, sizeof e->root, "%s", o->out);
    } else {
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        char stamp[32];
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
        snprintf(e->root, sizeof e->root, "checkpoints/compare-ffn-%s", stamp);
    }
    e->n_runs = e->n_lrs * N_KINDS;
    for (int i = 0; i < e->n_runs; i++) {
        CompareRun *run = &e->runs[i];
        run->lr = e->lrs[i / N_KINDS];
        run->kind = kinds[i % N_KINDS];
        run_folder(run->dir, sizeof run->dir, e->root, run->lr, run->kind);
        char latest[4300];
        snprintf(latest, sizeof latest, "%s/latest", run->dir);
        e->done[i] = access(latest, F_OK) == 0;
        if (e->done[i] && !o->reuse)
            return tg_fail(TG_ERR_ARG, "%s already holds a run; add --reuse to keep it, or pass another --out", run->dir);
    }
    return TG_OK;
}

/* Trains every (learning rate, FFN) pair not already done, with the ordinary trainer. */
static tg_status experiment_train(Experiment *e, volatile sig_atomic_t *stop) {
    const CompareFfnOptions *o = e->o;
    for (int i = 0; i < e->n_runs; i++) {
        CompareRun *run = &e->runs[i];
        if (e->done[i]) {
            printf("== %s: already trained, reused (--reuse)\n", run->dir);
            continue;
        }
        TrainOptions t;
        train_options_defaults(&t);
        t.preset = o->preset;
        t.data_path = o->data;
        t.seed = o->seed;
        t.steps = o->steps;
        t.lr = run->lr;
        t.batch = o->batch;
        t.eval_every = e->eval_every;
        t.eval_batches = o->eval_batches;
        t.log_grads = e->log_grads;
        t.sample_tokens = 0;
        t.threads = o->threads;
        t.out_dir = run->dir;
        t.ffn = ffn_kind_name(run->kind);
        /* ReLU: 4*dim unless told; SwiGLU: the preset's own hidden */
        t.model.hidden = run->kind == FFN_RELU ? (o->relu_hidden > 0 ? o->relu_hidden : 4 * e->preset_cfg.dim)
                                               : e->preset_cfg.hidden;
        printf("\n== run %d/%d: %s FFN (hidden %lld), lr %g -> %s\n", i + 1, e->n_runs, ffn_kind_name(run->kind),
               (long long)t.model.hidden, run->lr, run->dir);
        fflush(stdout);
        GradLogger grads;
        TrainHooks hooks = grad_logger_hooks(&grads, t.log_grads);
        tg_status s = train_run(&t, stop, &hooks);
        grad_logger_close(&grads);
        if (s != TG_OK) return tg_fail(s, "training %s failed: %s", run->dir, tg_error_message());
        if (stop && *stop) return tg_fail(TG_ERR_INTERRUPTED, "stopped during %s; run again with --reuse to go on", run->dir);
    }
    return TG_OK;
}

/* Each run's own report, then the combined report, series and summary. */
static tg_status experiment_report(Experiment *e) {
    for (int i = 0; i < e->n_runs; i++) {
        char html[4300], jsonl[4300];
        snprintf(html, sizeof html, "%s/report.html", e->runs[i].dir);
        snprintf(jsonl, sizeof jsonl, "%s/report.jsonl", e->runs[i].dir);
        TG_TRY(load_run(&e->runs[i]));
        /* the report sets the runs' layers side by side: they must have the same number */
        if (e->runs[i].h.n_layers != e->runs[0].h.n_layers)
            return tg_fail(TG_ERR_FORMAT, "%s logs %d layers but %s logs %d: not runs of one experiment (--reuse of "
                                          "another preset's runs?); pass another --out",
                           e->runs[i].dir, e->runs[i].h.n_layers, e->runs[0].dir, e->runs[0].h.n_layers);
        TG_TRY(run_report_write(e->runs[i].dir, &e->runs[i].h, html, jsonl));
    }
    char html[4200], jsonl[4200], summary[4200];
    snprintf(html, sizeof html, "%s/report.html", e->root);
    snprintf(jsonl, sizeof jsonl, "%s/compare.jsonl", e->root);
    snprintf(summary, sizeof summary, "%s/summary.json", e->root);
    Report *r = build_report(e->runs, e->n_lrs, e->o->preset, e->o->steps);
    tg_status s = report_write_html(r, html);
    if (s == TG_OK) s = report_write_series_jsonl(r, jsonl);
    if (s == TG_OK) s = write_summary(summary, e->runs, e->n_runs, e->o->preset, e->o->steps);
    report_free(r);
    TG_TRY(s);
    print_summary(e->runs, e->n_lrs);
    printf("\nreport: %s\nseries: %s\nsummary: %s\nruns: %s/lr*-{relu,swiglu} (tapegrad inspect/sample/report work on each)\n",
           html, jsonl, summary, e->root);
    return TG_OK;
}

tg_status compare_ffn_run(const CompareFfnOptions *o, volatile sig_atomic_t *stop) {
    TG_TRY(opt_check(&table, o, ~(OptSet)0));
    Experiment *e = tg_calloc(1, sizeof *e);
    tg_status s = experiment_plan(e, o);
    if (s == TG_OK) s = make_folders(e->root);
    if (s == TG_OK) s = experiment_train(e, stop);
    if (s == TG_OK) s = experiment_report(e);
    for (int i = 0; i < e->n_runs; i++)
        if (e->runs[i].loaded) run_history_free(&e->runs[i].h);
    free(e);
    return s;
}
