/* The inspection commands end to end, through the tapegrad binary: train --log-grads, inspect
 * (--json, --dump-grads), report, compare-ffn (spreads over seeds, equal parameters, diverged and
 * continued runs), their refusals of bad input, and a headless browser's screenshots of a run's
 * report and of compare-ffn's bands. Tiny models, a few steps, generated text. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "datagen.h"
#include "model/safetensors.h"
#include "report_check.h"
#include "testutil.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_folder.h"
#include "tapegrad/model.h"

static char *dir;
static void make_dir(void) {
    dir = datagen_tempdir();
    char *text = datagen_english(11, 40000);
    datagen_write(dir, "text.txt", text, strlen(text));
    free(text);
}
static void remove_dir(void) {
    datagen_remove_tree(dir);
    free(dir);
}
TestSuite(inspect_cli, .init = make_dir, .fini = remove_dir, .timeout = 120);

/* Runs `tapegrad ARGS` with stdout and stderr to dir/out.txt and dir/err.txt; returns the exit code. */
static int tapegrad(const char *args) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s %s >'%s/out.txt' 2>'%s/err.txt'", TAPEGRAD_BIN, args, dir, dir);
    return test_run(cmd);
}

static char *read_in_dir(const char *name) {
    char *path = datagen_path(dir, name);
    char *text = check_read_file(path, NULL);
    cr_assert_not_null(text, "cannot read %s", path);
    free(path);
    return text;
}

/* A 6-step tiny run in dir/run, statistics at steps 1, 2, 4, 6. */
static void train_tiny(const char *ffn) {
    char args[4096];
    snprintf(args, sizeof args,
             "train --preset tiny --ffn %s --steps 6 --batch 4 --log-grads 2 --eval-every 3 --eval-batches 2 "
             "--sample-tokens 0 --threads 1 --data '%s/text.txt' --out '%s/run'",
             ffn, dir, dir);
    int rc = tapegrad(args);
    if (rc != 0) {
        char *err = read_in_dir("err.txt");
        cr_assert_fail("train exited %d: %s", rc, err);
    }
}

/* The model of dir/run, rebuilt from its checkpoint's config, to know every parameter. */
static void build_run_model(TgModel *m) {
    char run[4096], ckpt[4200];
    snprintf(run, sizeof run, "%s/run", dir);
    TgModelConfig c;
    uint64_t fingerprint;
    cr_assert_eq(tg_checkpoint_resolve(run, ckpt, sizeof ckpt), TG_OK, "%s", tg_error_message());
    cr_assert_eq(tg_checkpoint_read_config(ckpt, &c, &fingerprint), TG_OK, "%s", tg_error_message());
    tg_model_build(m, &c);
}

static void assert_number(const cJSON *o, const char *key, const char *where) {
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(o, key)), "%s: no number '%s'", where, key);
}

Test(inspect_cli, log_grads_writes_well_formed_lines_with_every_field) {
    train_tiny("relu");
    TgModel m;
    build_run_model(&m);
    char *text = read_in_dir("run/grads.jsonl");
    const int64_t expected_steps[] = {1, 2, 4, 6};
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), n++) {
        cr_assert_lt(n, 4, "more lines than logged steps");
        cJSON *o = cJSON_Parse(line);
        cr_assert_not_null(o, "line %d is not JSON", n + 1);
        cr_assert_eq((int64_t)cJSON_GetObjectItem(o, "step")->valuedouble, expected_steps[n]);
        assert_number(o, "lr", "line");
        assert_number(o, "loss", "line");
        const cJSON *params = cJSON_GetObjectItem(o, "params"), *ffn = cJSON_GetObjectItem(o, "ffn");
        cr_assert_eq(cJSON_GetArraySize(params), m.params.count);
        for (int i = 0; i < m.params.count; i++) {
            const cJSON *p = cJSON_GetArrayItem(params, i);
            const TgTensor *t = m.params.tensors[i];
            cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(p, "name")), t->name);
            const cJSON *shape = cJSON_GetObjectItem(p, "shape");
            cr_assert_eq(cJSON_GetArraySize(shape), t->ndim);
            for (int d = 0; d < t->ndim; d++)
                cr_assert_eq((int64_t)cJSON_GetArrayItem(shape, d)->valuedouble, t->shape[d]);
            static const char *const fields[] = {"weight_norm", "grad_norm", "grad_max", "grad_to_weight", "update_ratio"};
            for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) assert_number(p, fields[k], t->name);
            cr_assert_gt(cJSON_GetObjectItem(p, "update_ratio")->valuedouble, 0, "%s was not updated", t->name);
        }
        cr_assert_eq(cJSON_GetArraySize(ffn), m.cfg.n_layers);
        for (int l = 0; l < m.cfg.n_layers; l++) {
            const cJSON *f = cJSON_GetArrayItem(ffn, l);
            static const char *const fields[] = {"layer", "hidden", "tokens", "dead_units", "dead_frac",
                                                 "zero_frac", "mean", "std", "w1_zero_grad_rows"};
            for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) assert_number(f, fields[k], "ffn entry");
            cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(f, "kind")), "relu");
            cr_assert_eq((int64_t)cJSON_GetObjectItem(f, "tokens")->valuedouble, 4 * m.cfg.seq_len);
            double zero = cJSON_GetObjectItem(f, "zero_frac")->valuedouble;
            cr_assert(zero > 0.2 && zero < 0.8, "ReLU zero fraction %.3f", zero);
        }
        cJSON_Delete(o);
    }
    cr_assert_eq(n, 4);
    free(text);
    tg_model_free(&m);
}

Test(inspect_cli, inspect_json_holds_every_parameter_and_dump_reads_back) {
    train_tiny("swiglu");
    TgModel m;
    build_run_model(&m);
    char args[8192];
    snprintf(args, sizeof args, "inspect --run '%s/run' --batches 2 --batch 4 --threads 1 --json --dump-grads '%s/g.safetensors'",
             dir, dir);
    cr_assert_eq(tapegrad(args), 0, "inspect failed");
    char *out = read_in_dir("out.txt");
    cJSON *o = cJSON_Parse(out);
    cr_assert_not_null(o, "inspect --json printed no JSON object: %s", out);
    cr_assert_eq((int64_t)cJSON_GetObjectItem(o, "step")->valuedouble, 6);
    cr_assert_eq((int64_t)cJSON_GetObjectItem(o, "batches")->valuedouble, 2);
    assert_number(o, "loss", "inspect");
    const cJSON *params = cJSON_GetObjectItem(o, "params");
    cr_assert_eq(cJSON_GetArraySize(params), m.params.count);
    for (int i = 0; i < m.params.count; i++) {
        const cJSON *p = cJSON_GetArrayItem(params, i);
        cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(p, "name")), m.params.tensors[i]->name);
        assert_number(p, "grad_norm", m.params.tensors[i]->name);
        assert_number(p, "grad_to_weight", m.params.tensors[i]->name);
    }
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, "ffn")), m.cfg.n_layers);
    cJSON_Delete(o);
    free(out);

    TgStFile *f;
    char *path = datagen_path(dir, "g.safetensors");
    cr_assert_eq(tg_st_open(path, &f), TG_OK, "%s", tg_error_message());
    cr_assert_eq(tg_st_count(f), (size_t)m.params.count);
    for (int i = 0; i < m.params.count; i++) {
        const TgTensor *t = m.params.tensors[i];
        char name[128];
        snprintf(name, sizeof name, "grad.%s", t->name);
        cr_assert_eq(tg_st_expect_shape(f, name, t->ndim, t->shape), TG_OK, "%s", tg_error_message());
        float *g = malloc((size_t)t->numel * sizeof(float));
        cr_assert_eq(tg_st_read_f32(f, name, g, t->numel), TG_OK);
        double norm = 0;
        for (int64_t j = 0; j < t->numel; j++) norm += (double)g[j] * g[j];
        cr_assert_gt(norm, 0, "%s is all zero", name);
        free(g);
    }
    tg_st_close(f);
    free(path);

    /* the table form, from a checkpoint file */
    char ckpt[4200], run[4096];
    snprintf(run, sizeof run, "%s/run", dir);
    cr_assert_eq(tg_checkpoint_resolve(run, ckpt, sizeof ckpt), TG_OK);
    snprintf(args, sizeof args, "inspect --ckpt '%s' --batches 1 --threads 1", ckpt);
    cr_assert_eq(tapegrad(args), 0);
    out = read_in_dir("out.txt");
    cr_assert(strstr(out, "model.layers.1.mlp.up_proj.weight") && strstr(out, "dead frac"), "%s", out);
    free(out);
    tg_model_free(&m);
}

/* Checks a report file; returns its parsed data block (cJSON_Delete it). */
static cJSON *check_report(const char *name, int min_series) {
    char *html = read_in_dir(name);
    char why[256];
    cr_assert(html_tags_balanced(html, why, sizeof why), "%s: %s", name, why);
    cr_assert_null(strstr(html, "http://"), "%s refers to the network", name);
    cr_assert_null(strstr(html, "https://"), "%s refers to the network", name);
    cJSON *data = html_report_data(html);
    cr_assert_not_null(data, "%s: no parsable data block", name);
    int drawn = html_series_drawn(html, data, why, sizeof why);
    cr_assert_geq(drawn, min_series, "%s: %s", name, why);
    free(html);
    return data;
}

Test(inspect_cli, report_of_a_run_is_well_formed_and_holds_its_series) {
    train_tiny("relu");
    char args[4096];
    snprintf(args, sizeof args, "report '%s/run'", dir);
    cr_assert_eq(tapegrad(args), 0);
    cJSON *data = check_report("run/report.html", 10);
    static const char *const series[] = {"train loss", "val loss", "lr", "grad norm", "layer 0", "layer 1",
                                         "embedding", "mlp gate (w1)", "mlp down (w2)"};
    for (size_t i = 0; i < sizeof series / sizeof series[0]; i++)
        cr_assert(report_has_series(data, series[i], 2), "no series '%s' with data", series[i]);
    cr_assert(report_has_series(data, "train loss", 6));
    cJSON_Delete(data);
    char *jsonl = read_in_dir("run/report.jsonl");
    cr_assert(strstr(jsonl, "\"train loss\"") && strstr(jsonl, "dead units"));
    free(jsonl);
}

/* ---- compare-ffn ---------------------------------------------------------------------------- */

static void compare_ffn(const char *options, const char *out) {
    char args[4096];
    snprintf(args, sizeof args,
             "compare-ffn --preset tiny --batch 4 --log-grads 2 --eval-batches 2 --probe-batches 2 --threads 1 "
             "--data '%s/text.txt' --out '%s/%s' %s",
             dir, dir, out, options);
    int rc = tapegrad(args);
    char *err = read_in_dir("err.txt");
    cr_assert_eq(rc, 0, "compare-ffn exited %d: %s", rc, err);
    free(err);
}

static cJSON *read_json_in_dir(const char *name) {
    char *text = read_in_dir(name);
    cJSON *o = cJSON_Parse(text);
    cr_assert_not_null(o, "%s is not JSON", name);
    free(text);
    return o;
}

/* What a run folder recorded, read here rather than through run_history: the last val loss of
 * metrics.jsonl, and the mean over layers of a per-layer field of grads.jsonl's last line. */
static double last_val_loss(const char *run) {
    char name[512];
    snprintf(name, sizeof name, "%s/metrics.jsonl", run);
    char *text = read_in_dir(name);
    double val = NAN;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *v = cJSON_GetObjectItem(o, "val_loss");
        if (cJSON_IsNumber(v)) val = v->valuedouble;
        cJSON_Delete(o);
    }
    free(text);
    return val;
}

static double last_logged_layer_mean(const char *run, const char *field) {
    char name[512];
    snprintf(name, sizeof name, "%s/grads.jsonl", run);
    char *text = read_in_dir(name), *last = NULL;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) last = line;
    cJSON *o = cJSON_Parse(last);
    const cJSON *ffn = cJSON_GetObjectItem(o, "ffn"), *layer;
    double sum = 0;
    cJSON_ArrayForEach(layer, ffn) sum += cJSON_GetObjectItem(layer, field)->valuedouble;
    double mean = sum / cJSON_GetArraySize(ffn);
    cJSON_Delete(o);
    free(text);
    return mean;
}

/* Mean, sample std, min and max of two values. */
typedef struct {
    double mean, std, min, max;
} Spread2;
static Spread2 spread2(double a, double b) {
    return (Spread2){(a + b) / 2, fabs(a - b) / sqrt(2.0), fmin(a, b), fmax(a, b)};
}

static void assert_spread(const cJSON *cell, const char *figure, Spread2 want) {
    const cJSON *f = cJSON_GetObjectItem(cJSON_GetObjectItem(cell, "figures"), figure);
    cr_assert_eq(cJSON_GetObjectItem(f, "n")->valueint, 2, "%s", figure);
    static const char *const keys[] = {"mean", "std", "min", "max"};
    const double values[] = {want.mean, want.std, want.min, want.max};
    for (int i = 0; i < 4; i++)
        cr_assert_float_eq(cJSON_GetObjectItem(f, keys[i])->valuedouble, values[i], 1e-9, "%s %s", figure, keys[i]);
}

/* The row of the report's cell table for (lr, ffn). */
static const cJSON *cell_row(const cJSON *data, const char *lr, const char *ffn) {
    const cJSON *table, *row;
    cJSON_ArrayForEach(table, cJSON_GetObjectItem(data, "tables")) {
        if (strncmp(cJSON_GetStringValue(cJSON_GetObjectItem(table, "caption")), "Per learning rate and FFN", 25)) continue;
        cJSON_ArrayForEach(row, cJSON_GetObjectItem(table, "rows")) {
            if (!strcmp(cJSON_GetArrayItem(row, 0)->valuestring, lr) && !strcmp(cJSON_GetArrayItem(row, 1)->valuestring, ffn))
                return row;
        }
    }
    cr_assert_fail("no row for lr %s, %s in the report's cell table", lr, ffn);
    return NULL;
}

Test(inspect_cli, compare_ffn_spreads_over_seeds_at_equal_parameters) {
    compare_ffn("--steps 4 --lrs 3e-3,1e-2 --seeds 2", "cmp");
    /* the study's time left, from the second run on: the runs to go at the mean time of those done */
    char *printed = read_in_dir("out.txt");
    const char *first = strstr(printed, "== run 1/8"), *second = strstr(printed, "== run 2/8"), *last = strstr(printed, "== run 8/8");
    cr_assert(first && second && last, "%s", printed);
    cr_expect(strstr(first, "(the study:") == strstr(second, "(the study:"), "an ETA before any run was timed:\n%s", printed);
    const char *eta = "(the study: about 0h00m left, 7 runs at ";
    cr_expect(memmem(second, strcspn(second, "\n"), eta, strlen(eta)) && memmem(last, strcspn(last, "\n"), "left, 1 run at ", 15),
              "%s", printed);
    free(printed);
    cJSON *s = read_json_in_dir("cmp/summary.json");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(s, "runs")), 2 * 2 * 2);
    const cJSON *cells = cJSON_GetObjectItem(s, "cells");
    cr_assert_eq(cJSON_GetArraySize(cells), 4);
    char *md = read_in_dir("cmp/summary.md"), *html = read_in_dir("cmp/report.html");
    cJSON *data = html_report_data(html);
    static const char *const lrs[] = {"0.003", "0.01"}, *const ffns[] = {"relu", "swiglu"};
    Spread2 val[2][2];
    for (int l = 0; l < 2; l++) {
        /* tiny: dim 64, 2 layers, SwiGLU hidden 176; equal parameters by default: ReLU hidden 3/2 x 176 */
        const cJSON *relu = cJSON_GetArrayItem(cells, 2 * l), *swiglu = cJSON_GetArrayItem(cells, 2 * l + 1);
        cr_assert_eq(cJSON_GetObjectItem(relu, "hidden")->valueint, 264);
        cr_assert_eq(cJSON_GetObjectItem(swiglu, "hidden")->valueint, 176);
        cr_assert_eq(cJSON_GetObjectItem(relu, "ffn_params")->valueint, 2 * 2 * 64 * 264);
        cr_assert_eq(cJSON_GetObjectItem(swiglu, "ffn_params")->valueint, 2 * 3 * 64 * 176);
        cr_assert_eq(cJSON_GetObjectItem(relu, "params")->valueint, cJSON_GetObjectItem(swiglu, "params")->valueint);
        cr_assert_str_eq(cJSON_GetArrayItem(cell_row(data, lrs[l], "relu"), 3)->valuestring,
                         cJSON_GetArrayItem(cell_row(data, lrs[l], "swiglu"), 3)->valuestring);
        for (int k = 0; k < 2; k++) {
            const cJSON *cell = k ? swiglu : relu;
            char run[2][128];
            for (int seed = 0; seed < 2; seed++) snprintf(run[seed], sizeof run[seed], "cmp/lr%s-%s-s%d", lrs[l], ffns[k], 1337 + seed);
            val[l][k] = spread2(last_val_loss(run[0]), last_val_loss(run[1]));
            assert_spread(cell, "final_val_loss", val[l][k]);
            assert_spread(cell, "probe_dead_end", spread2(last_logged_layer_mean(run[0], "probe_dead_frac"),
                                                          last_logged_layer_mean(run[1], "probe_dead_frac")));
            assert_spread(cell, "dead_end", spread2(last_logged_layer_mean(run[0], "dead_frac"),
                                                    last_logged_layer_mean(run[1], "dead_frac")));
            /* the same figures, as the report's table and summary.md print them */
            char mean_std[64], min_max[64];
            snprintf(mean_std, sizeof mean_std, "%.4f ± %.4f", val[l][k].mean, val[l][k].std);
            snprintf(min_max, sizeof min_max, "%.4f – %.4f", val[l][k].min, val[l][k].max);
            const cJSON *row = cell_row(data, lrs[l], ffns[k]);
            cr_assert_str_eq(cJSON_GetArrayItem(row, 5)->valuestring, mean_std);
            cr_assert_str_eq(cJSON_GetArrayItem(row, 6)->valuestring, min_max);
            cr_assert(strstr(md, mean_std) && strstr(md, min_max), "summary.md lacks %s | %s", mean_std, min_max);
        }
        /* exceeds the spread exactly when the min-max ranges do not overlap */
        const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(s, "comparisons"), l);
        bool apart = val[l][0].max < val[l][1].min || val[l][1].max < val[l][0].min;
        cr_assert_eq(cJSON_IsTrue(cJSON_GetObjectItem(c, "exceeds_seed_spread")), apart, "lr %s", lrs[l]);
        cr_assert_float_eq(cJSON_GetObjectItem(c, "val_loss_diff_relu_minus_swiglu")->valuedouble,
                           val[l][0].mean - val[l][1].mean, 1e-9);
        cr_assert_float_eq(cJSON_GetObjectItem(c, "chance_if_no_difference")->valuedouble, 2.0 / 6.0, 1e-12);
    }
    cr_assert(strstr(md, "Equal parameter counts"), "%s", md);
    /* the zero ratio of the initial weights on random inputs, and the ReLU zeros at step 1 */
    const cJSON *init = cJSON_GetObjectItem(s, "init_zero_frac_random_inputs");
    double zr = cJSON_GetObjectItem(init, "relu")->valuedouble, zs = cJSON_GetObjectItem(init, "swiglu")->valuedouble;
    cr_assert(zr > 0.45 && zr < 0.55 && zs < 0.01, "zeros at init: relu %.3f, swiglu %.3f", zr, zs);
    const cJSON *zeros = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(s, "runs"), 0), "zero_frac_first");
    for (int l = 0; l < 2; l++)
        cr_assert(fabs(cJSON_GetArrayItem(zeros, l)->valuedouble - 0.5) < 0.1, "ReLU zeros at step 1, layer %d", l);
    free(md);
    free(html);
    /* bands on the charts */
    cJSON_Delete(data);
    data = check_report("cmp/report.html", 20);
    static const char *const banded[] = {"relu train", "relu val", "swiglu val", "relu probe", "swiglu training batch"};
    for (size_t i = 0; i < sizeof banded / sizeof banded[0]; i++) {
        const cJSON *series = report_find_series(data, banded[i], 2);
        cr_assert_not_null(series, "no series '%s'", banded[i]);
        cr_assert_not_null(cJSON_GetObjectItem(series, "lo"), "'%s' has no band", banded[i]);
    }
    cJSON_Delete(data);
    cJSON_Delete(s);
    /* every run folder is an ordinary one */
    char args[4096];
    snprintf(args, sizeof args, "inspect --run '%s/cmp/lr0.003-relu-s1338' --batches 1 --batch 2 --threads 1 --json", dir);
    cr_assert_eq(tapegrad(args), 0);
    cJSON_Delete(check_report("cmp/lr0.01-swiglu-s1337/report.html", 5));
    /* a second run into the same folder refuses, unless told to reuse: then it trains nothing */
    snprintf(args, sizeof args, "compare-ffn --preset tiny --steps 4 --lrs 3e-3,1e-2 --seeds 2 --data '%s/text.txt' --out '%s/cmp'",
             dir, dir);
    cr_assert_eq(tapegrad(args), 2);
    compare_ffn("--steps 4 --lrs 3e-3,1e-2 --seeds 2 --reuse", "cmp");
    s = read_json_in_dir("cmp/summary.json");
    cr_assert_eq(cJSON_GetObjectItem(s, "runs_reused")->valueint, 8);
    cJSON_Delete(s);
}

Test(inspect_cli, compare_ffn_records_diverged_runs_and_continues_stopped_ones) {
    /* lr 1e30: the first update makes the weights overflow, the second step's loss is NaN */
    compare_ffn("--steps 4 --lrs 3e-3,1e30 --seeds 1", "div");
    char *marker = datagen_path(dir, "div/lr1e+30-relu-s1337/diverged.txt");
    cr_assert_eq(access(marker, F_OK), 0, "no diverged.txt");
    free(marker);
    cJSON *s = read_json_in_dir("div/summary.json");
    const cJSON *cell = cJSON_GetArrayItem(cJSON_GetObjectItem(s, "cells"), 2);
    cr_assert_eq(cJSON_GetObjectItem(cell, "lr")->valuedouble, 1e30);
    const cJSON *val = cJSON_GetObjectItem(cJSON_GetObjectItem(cell, "figures"), "final_val_loss");
    cr_assert_eq(cJSON_GetObjectItem(val, "missing")->valueint, 1);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(val, "mean")));
    cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(s, "runs"), 2),
                                                              "state")), "diverged");
    cJSON_Delete(s);
    cJSON_Delete(check_report("div/report.html", 10));
    /* more steps with --reuse: the finished runs continue from their checkpoints, the diverged stay */
    compare_ffn("--steps 6 --lrs 3e-3,1e30 --seeds 1 --reuse", "div");
    cr_assert(last_val_loss("div/lr0.003-swiglu-s1337") > 0);
    char *metrics = read_in_dir("div/lr0.003-swiglu-s1337/metrics.jsonl");
    cr_assert(strstr(metrics, "{\"step\":6,"), "the run did not continue to step 6");
    free(metrics);
    s = read_json_in_dir("div/summary.json");
    cr_assert_eq(cJSON_GetObjectItem(s, "runs_trained")->valueint, 2);
    cr_assert_eq(cJSON_GetObjectItem(s, "runs_reused")->valueint, 2);
    cJSON_Delete(s);
    /* fewer steps than the runs hold: refused */
    char args[4096];
    snprintf(args, sizeof args, "compare-ffn --preset tiny --steps 2 --lrs 3e-3 --seeds 1 --reuse --out '%s/div'", dir);
    cr_assert_eq(tapegrad(args), 2);
}

/* Each bad invocation: a non-zero exit and exactly one line on stderr. */
Test(inspect_cli, bad_input_gets_one_line_and_a_nonzero_exit) {
    char args[4096];
    const char *const cases[] = {
        "inspect --run '%s/missing'",
        "inspect",
        "inspect --run '%s' --ckpt '%s'",
        "inspect --run '%s' --batches 0",
        "report '%s/missing'",
        "report",
        "report '%s'",  /* a folder, but no run in it */
        "compare-ffn --lrs 1e-3,abc --out '%s/x'",
        "compare-ffn --lrs '' --out '%s/x'",
        "compare-ffn --lrs 1e-3,-2 --out '%s/x'",
        "compare-ffn --lrs 1e-3,1e-3 --out '%s/x'",
        "compare-ffn --preset huge --out '%s/x'",
        "compare-ffn --steps 0 --out '%s/x'",
        "compare-ffn --seeds 0 --out '%s/x'",
        "compare-ffn --seeds 17 --out '%s/x'",
        "compare-ffn --seeds 1,2,1 --out '%s/x'",
        "compare-ffn --seeds 1,-2 --out '%s/x'",
        "compare-ffn --seeds 1.5,2 --out '%s/x'",
        "compare-ffn --probe-batches 0 --out '%s/x'",
        "compare-ffn --lrs 1e-3,1.0000001e-3 --out '%s/x'",
        /* the ranges train has (run/shared_flags.h): none of these may start a run */
        "compare-ffn --steps 9223372036854775807 --out '%s/x'",
        "compare-ffn --batch 100000000 --out '%s/x'",
        "compare-ffn --eval-batches 100000000 --out '%s/x'",
        "compare-ffn --probe-batches 100000000 --out '%s/x'",
        "compare-ffn --seeds 9007199254740992 --out '%s/x'",
        "compare-ffn --lrs 1e-320 --out '%s/x'",
        "inspect --run '%s' --batches 100000000",
        "inspect --run '%s' --batch 100000000",
        /* a corpus refused inside a run's training (not by compare-ffn's own checks): the
         * trainer's engine, closed unopened, once unmasked every floating-point exception and the
         * next division killed the process with SIGFPE */
        "compare-ffn --preset tiny --steps 2 --threads 1 --data '%s/empty.txt' --out '%s/x'",
    };
    char *empty_path = datagen_path(dir, "empty.txt");
    FILE *empty = fopen(empty_path, "w");
    cr_assert(empty, "cannot write %s", empty_path);
    fclose(empty);
    free(empty_path);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(args, sizeof args, cases[i], dir, dir, dir);
        int rc = tapegrad(args);
        char *err = read_in_dir("err.txt");
        int lines = 0;
        for (char *p = err; *p; p++) lines += *p == '\n';
        cr_assert_neq(rc, 0, "`tapegrad %s` exited 0", args);
        cr_assert_eq(lines, 1, "`tapegrad %s` printed %d lines on stderr:\n%s", args, lines, err);
        cr_assert(strncmp(err, "tapegrad", 8) == 0, "`tapegrad %s`: %s", args, err);
        free(err);
    }
    char *trained = datagen_path(dir, "x/latest");
    cr_assert_neq(access(trained, F_OK), 0, "nothing may have been trained");
    free(trained);
}

/* ---- a browser opens the report ------------------------------------------------------------ */

#define CHROMIUM "/usr/bin/chromium"

static void require_chromium(const char *test) {
    if (access(CHROMIUM, X_OK) == 0) return;
    fprintf(stderr, "SKIPPED inspect_cli::%s: " CHROMIUM " is not installed (apt-get install chromium)\n", test);
    cr_skip_test("%s is not installed", CHROMIUM);
}

/* Opens dir/HTML in headless Chromium and decodes its width x height screenshot into img. */
static void screenshot(const char *html, int width, int height, PngImage *img) {
    char cmd[8192];
    /* a fresh profile, nothing that phones home; `timeout` so a hung browser fails the test */
    snprintf(cmd, sizeof cmd,
             "timeout 90 " CHROMIUM " --headless --no-sandbox --disable-gpu --no-first-run "
             "--disable-background-networking --disable-component-update --disable-sync --disable-quic "
             "--user-data-dir='%s/profile' --screenshot='%s/shot.png' --window-size=%d,%d "
             "'file://%s/%s' >'%s/chromium.log' 2>&1",
             dir, dir, width, height, dir, html, dir);
    int rc = test_run(cmd);
    char *log = read_in_dir("chromium.log");
    cr_assert_eq(rc, 0, "chromium exited %d:\n%s", rc, log);
    free(log);
    char why[256], *png = datagen_path(dir, "shot.png");
    cr_assert(png_decode(png, img, why, sizeof why), "%s", why);
    free(png);
    cr_assert_eq(img->width, (uint32_t)width);
    cr_assert_eq(img->height, (uint32_t)height);
    uint64_t unlike = png_pixels_unlike_corner(img), total = (uint64_t)img->width * img->height;
    /* text, axes and lines: far more than a blank page, far less than a solid fill */
    cr_assert(unlike > total / 100, "only %llu of %llu pixels differ from the background", (unsigned long long)unlike,
              (unsigned long long)total);
}

Test(inspect_cli, report_renders_in_a_headless_browser) {
    require_chromium("report_renders_in_a_headless_browser");
    train_tiny("relu");
    char args[4096];
    snprintf(args, sizeof args, "report '%s/run'", dir);
    cr_assert_eq(tapegrad(args), 0);
    PngImage img;
    screenshot("run/report.html", 1200, 900, &img);
    png_free(&img);
}

Test(inspect_cli, compare_report_renders_its_bands_in_a_headless_browser) {
    require_chromium("compare_report_renders_its_bands_in_a_headless_browser");
    compare_ffn("--steps 4 --lrs 3e-3 --seeds 2", "cmp");
    PngImage img;
    screenshot("cmp/report.html", 1200, 2000, &img);
    /* ReLU's bands: its red (#d62728) at 18% over white; the antialiased edges of red lines come
     * near this colour too, but over far fewer pixels than the bands cover */
    uint64_t band = png_pixels_near(&img, 247, 216, 216, 6);
    cr_assert(band > 10000, "only %llu pixels of ReLU's band colour", (unsigned long long)band);
    png_free(&img);
}
