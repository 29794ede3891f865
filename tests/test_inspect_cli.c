/* The inspection commands end to end, through the tapegrad binary: train --log-grads, inspect
 * (--json, --dump-grads), report, compare-ffn, their refusals of bad input, and a headless
 * browser's screenshot of a report. Tiny models, a few steps, generated text. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "datagen.h"
#include "lib/safetensors.h"
#include "report_check.h"
#include "testutil.h"
#include "train/checkpoint.h"
#include "train/checkpoint_folder.h"
#include "train/model.h"

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
static void build_run_model(Model *m) {
    char run[4096], ckpt[4200];
    snprintf(run, sizeof run, "%s/run", dir);
    ModelConfig c;
    uint64_t fingerprint;
    cr_assert_eq(checkpoint_resolve(run, ckpt, sizeof ckpt), TG_OK, "%s", tg_error_message());
    cr_assert_eq(checkpoint_read_config(ckpt, &c, &fingerprint), TG_OK, "%s", tg_error_message());
    model_build(m, &c);
}

static void assert_number(const cJSON *o, const char *key, const char *where) {
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(o, key)), "%s: no number '%s'", where, key);
}

Test(inspect_cli, log_grads_writes_well_formed_lines_with_every_field) {
    train_tiny("relu");
    Model m;
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
            const Tensor *t = m.params.tensors[i];
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
    model_free(&m);
}

Test(inspect_cli, inspect_json_holds_every_parameter_and_dump_reads_back) {
    train_tiny("swiglu");
    Model m;
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

    StFile *f;
    char *path = datagen_path(dir, "g.safetensors");
    cr_assert_eq(st_open(path, &f), TG_OK, "%s", tg_error_message());
    cr_assert_eq(st_count(f), (size_t)m.params.count);
    for (int i = 0; i < m.params.count; i++) {
        const Tensor *t = m.params.tensors[i];
        char name[128];
        snprintf(name, sizeof name, "grad.%s", t->name);
        cr_assert_eq(st_expect_shape(f, name, t->ndim, t->shape), TG_OK, "%s", tg_error_message());
        float *g = malloc((size_t)t->numel * sizeof(float));
        cr_assert_eq(st_read_f32(f, name, g, t->numel), TG_OK);
        double norm = 0;
        for (int64_t j = 0; j < t->numel; j++) norm += (double)g[j] * g[j];
        cr_assert_gt(norm, 0, "%s is all zero", name);
        free(g);
    }
    st_close(f);
    free(path);

    /* the table form, from a checkpoint file */
    char ckpt[4200], run[4096];
    snprintf(run, sizeof run, "%s/run", dir);
    cr_assert_eq(checkpoint_resolve(run, ckpt, sizeof ckpt), TG_OK);
    snprintf(args, sizeof args, "inspect --ckpt '%s' --batches 1 --threads 1", ckpt);
    cr_assert_eq(tapegrad(args), 0);
    out = read_in_dir("out.txt");
    cr_assert(strstr(out, "model.layers.1.mlp.up_proj.weight") && strstr(out, "dead frac"), "%s", out);
    free(out);
    model_free(&m);
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

Test(inspect_cli, compare_ffn_trains_both_and_reports_side_by_side) {
    char args[4096];
    snprintf(args, sizeof args,
             "compare-ffn --preset tiny --steps 4 --lrs 3e-3 --batch 4 --log-grads 2 --eval-batches 2 --threads 1 "
             "--data '%s/text.txt' --out '%s/cmp'",
             dir, dir);
    int rc = tapegrad(args);
    char *err = read_in_dir("err.txt");
    cr_assert_eq(rc, 0, "compare-ffn exited %d: %s", rc, err);
    free(err);
    char *summary = read_in_dir("cmp/summary.json");
    cJSON *s = cJSON_Parse(summary);
    cr_assert_not_null(s);
    const cJSON *runs = cJSON_GetObjectItem(s, "runs");
    cr_assert_eq(cJSON_GetArraySize(runs), 2);
    const cJSON *relu = cJSON_GetArrayItem(runs, 0), *swiglu = cJSON_GetArrayItem(runs, 1);
    cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(relu, "ffn")), "relu");
    cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(swiglu, "ffn")), "swiglu");
    /* tiny: dim 64, 2 layers; ReLU hidden 4*64 = 256 (2 matrices), SwiGLU the preset's 176 (3) */
    cr_assert_eq(cJSON_GetObjectItem(relu, "hidden")->valueint, 256);
    cr_assert_eq(cJSON_GetObjectItem(swiglu, "hidden")->valueint, 176);
    cr_assert_eq(cJSON_GetObjectItem(relu, "ffn_params")->valueint, 2 * 2 * 64 * 256);
    cr_assert_eq(cJSON_GetObjectItem(swiglu, "ffn_params")->valueint, 2 * 3 * 64 * 176);
    cr_assert_eq(cJSON_GetObjectItem(swiglu, "params")->valueint - cJSON_GetObjectItem(relu, "params")->valueint,
                 2 * 3 * 64 * 176 - 2 * 2 * 64 * 256, "the models differ only in their FFNs");
    const cJSON *zr = cJSON_GetObjectItem(relu, "zero_frac_first"), *zs = cJSON_GetObjectItem(swiglu, "zero_frac_first");
    for (int l = 0; l < 2; l++) {
        double r = cJSON_GetArrayItem(zr, l)->valuedouble, w = cJSON_GetArrayItem(zs, l)->valuedouble;
        cr_assert(r >= 0.4 && r <= 0.6, "ReLU zeros at step 1, layer %d: %.3f", l, r);
        cr_assert(w < 0.01, "SwiGLU zeros at step 1, layer %d: %.3f", l, w);
    }
    cJSON_Delete(s);
    free(summary);
    cJSON *data = check_report("cmp/report.html", 10);
    static const char *const series[] = {"relu train", "relu val", "swiglu train", "swiglu val", "relu layer 0",
                                         "swiglu layer 1"};
    for (size_t i = 0; i < sizeof series / sizeof series[0]; i++)
        cr_assert(report_has_series(data, series[i], 1), "no series '%s'", series[i]);
    cJSON_Delete(data);
    char *jsonl = read_in_dir("cmp/compare.jsonl");
    cr_assert(strstr(jsonl, "\"relu layer 0\""));
    free(jsonl);
    /* every run folder is an ordinary one */
    snprintf(args, sizeof args, "inspect --run '%s/cmp/lr0.003-relu' --batches 1 --batch 2 --threads 1 --json", dir);
    cr_assert_eq(tapegrad(args), 0);
    cJSON_Delete(check_report("cmp/lr0.003-swiglu/report.html", 5));
    /* a second run into the same folder refuses, unless told to reuse */
    snprintf(args, sizeof args, "compare-ffn --preset tiny --steps 4 --lrs 3e-3 --data '%s/text.txt' --out '%s/cmp'", dir, dir);
    cr_assert_eq(tapegrad(args), 2);
    snprintf(args, sizeof args, "compare-ffn --preset tiny --steps 4 --lrs 3e-3 --log-grads 2 --reuse --out '%s/cmp'", dir);
    cr_assert_eq(tapegrad(args), 0);
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
        "train --log-grads 0 --out '%s/x'",
    };
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

Test(inspect_cli, report_renders_in_a_headless_browser) {
    if (access(CHROMIUM, X_OK) != 0) {
        fprintf(stderr, "SKIPPED inspect_cli::report_renders_in_a_headless_browser: " CHROMIUM " is not installed "
                        "(apt-get install chromium)\n");
        cr_skip_test("%s is not installed", CHROMIUM);
    }
    train_tiny("relu");
    char args[4096], cmd[8192];
    snprintf(args, sizeof args, "report '%s/run'", dir);
    cr_assert_eq(tapegrad(args), 0);
    /* a fresh profile, nothing that phones home; `timeout` so a hung browser fails the test */
    snprintf(cmd, sizeof cmd,
             "timeout 90 " CHROMIUM " --headless --no-sandbox --disable-gpu --no-first-run "
             "--disable-background-networking --disable-component-update --disable-sync --disable-quic "
             "--user-data-dir='%s/profile' --screenshot='%s/shot.png' --window-size=1200,900 "
             "'file://%s/run/report.html' >'%s/chromium.log' 2>&1",
             dir, dir, dir, dir);
    int rc = test_run(cmd);
    char *log = read_in_dir("chromium.log");
    cr_assert_eq(rc, 0, "chromium exited %d:\n%s", rc, log);
    free(log);
    PngImage img;
    char why[256], *png = datagen_path(dir, "shot.png");
    cr_assert(png_decode(png, &img, why, sizeof why), "%s", why);
    cr_assert_eq(img.width, 1200);
    cr_assert_eq(img.height, 900);
    uint64_t unlike = png_pixels_unlike_corner(&img), total = (uint64_t)img.width * img.height;
    /* text, axes and lines: far more than a blank page, far less than a solid fill */
    cr_assert(unlike > total / 100, "only %llu of %llu pixels differ from the background", (unsigned long long)unlike,
              (unsigned long long)total);
    png_free(&img);
    free(png);
}
