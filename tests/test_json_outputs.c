/* Every JSON the program prints or writes is strict JSON (RFC 8259), read back by Python's json
 * module told to refuse NaN and Infinity (tests/support/strict_json.py): eval's line, inspect
 * --json, bench --json, a run's metrics.jsonl and grads.jsonl, the report's series and embedded
 * data, compare-ffn's summary.json and compare.jsonl, and what ckpt export writes (config.json,
 * tokenizer.json, the safetensors header). The writers that take numbers a run can make non-finite
 * (statistics of zero weights, a diverged loss) are also fed NaN and Inf directly: they write
 * null. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckptutil.h"
#include "datagen.h"
#include "inspect/inspect.h"
#include "inspect/report.h"
#include "support/json_write.h"
#include "testutil.h"

CKPT_SCRATCH_FIXTURE
TestSuite(json_outputs, .init = setup, .fini = teardown, .timeout = 300);

/* strict_json.py over the paths (files or folders, space-separated, each quoted by the caller):
 * exits 0 and read at least `documents` documents. */
static void expect_strict_json(const char *paths, int documents) {
    char cmd[8192], *log = datagen_path(dir, "strict.txt");
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/support/strict_json.py %s >'%s' 2>&1", TAPEGRAD_SOURCE_DIR,
             paths, log);
    int rc = test_run(cmd);
    char *out = ckpt_read_text(log);
    cr_expect_eq(rc, 0, "not strict JSON:\n%s", out);
    int n = 0;
    const char *counts = strstr(out, " files, ");
    if (counts) n = atoi(counts + 8);
    cr_expect_geq(n, documents, "%d JSON documents read, expected at least %d:\n%s", n, documents, out);
    free(out), free(log);
}

/* `tapegrad ARGS` with its stdout alone into dir/NAME; it must exit 0. */
static void capture(const char *name, const char *args) {
    char cmd[8192], *out = datagen_path(dir, name), *err = datagen_path(dir, "stderr.txt");
    snprintf(cmd, sizeof cmd, "%s %s >'%s' 2>'%s' </dev/null", TAPEGRAD_BIN, args, out, err);
    int rc = test_run(cmd);
    char *text = ckpt_read_text(err);
    cr_assert_eq(rc, 0, "`tapegrad %s` exited %d: %s", args, rc, text);
    free(text), free(out), free(err);
}

Test(json_outputs, every_json_the_program_writes_is_strict) {
    char *run = datagen_path(dir, "run"), *cmp = datagen_path(dir, "cmp"), args[8192];
    ckpt_train_small(corpus, run, 3, "--log-grads 1 --eval-every 1");
    snprintf(args, sizeof args, "eval --run '%s'", run);
    capture("eval.json", args);
    snprintf(args, sizeof args, "inspect --run '%s' --json --batches 1 --batch 2 --threads 1", run);
    capture("inspect.json", args);
    capture("bench.json", "bench --preset tiny --batch 2 --seq 8 --steps 1 --warmup 0 --threads 1 --json");
    char *report_dir = datagen_path(dir, "report");
    cr_assert_eq(mkdir(report_dir, 0755), 0);
    free(report_dir);
    snprintf(args, sizeof args, "report '%s' --out '%s/report/run.html'", run, dir);
    capture("report.txt", args);
    snprintf(args, sizeof args, "ckpt export '%s' --hf '%s/hf'", run, dir);
    capture("export.txt", args);
    snprintf(args, sizeof args,
             "compare-ffn --preset tiny --steps 2 --seeds 1 --lrs 3e-3 --batch 2 --eval-batches 1 --probe-batches 1 "
             "--threads 1 --data '%s' --out '%s'",
             corpus, cmp);
    capture("compare.txt", args);
    char paths[8192];
    /* eval 1, inspect 1, bench 1, the run's 4 + 4 lines, the report's data and series, the export's
     * config, tokenizer and safetensors header, compare-ffn's summary, series and its runs' logs */
    snprintf(paths, sizeof paths, "'%s/eval.json' '%s/inspect.json' '%s/bench.json' '%s' '%s/report' '%s/hf' '%s'", dir,
             dir, dir, run, dir, dir, cmp);
    expect_strict_json(paths, 20);
    free(run), free(cmp);
}

/* The hand-written writers given numbers no JSON has: null in their place. */
Test(json_outputs, non_finite_numbers_are_written_as_null) {
    char *path = datagen_path(dir, "numbers.jsonl");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    const double values[] = {NAN, INFINITY, -INFINITY, 1.5, -0.0, 1e-310, 1e308};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        fputs("{\"v\":", f);
        tg_json_write_number(f, values[i], 9);
        tg_json_write_field(f, "w", values[i], 6);
        fputs(",\"s\":", f);
        tg_json_write_string(f, "a \"quoted\" \\ path\n\twith\x01 control bytes");
        fputs("}\n", f);
    }
    fclose(f);
    char *text = ckpt_read_text(path);
    cr_expect(strstr(text, "{\"v\":null,\"w\":null,"), "%s", text);
    free(text);
    /* the statistics of a model whose weights are all zero: grad/weight and update ratios are 0/0 */
    TgModelConfig c;
    cr_assert_eq(tg_model_preset("tiny", &c), TG_OK);
    c.vocab = 16, c.n_layers = 1, c.seq_len = 8;
    TgModel m;
    tg_model_build(&m, &c); /* zeroed */
    TgModelInspection mi;
    tg_model_inspection_init(&mi, &m);
    double *ratios = calloc((size_t)m.params.count, sizeof *ratios);
    for (int i = 0; i < m.params.count; i++) ratios[i] = i % 2 ? NAN : INFINITY;
    char *stats = datagen_path(dir, "stats.jsonl");
    f = fopen(stats, "w");
    fputs("{\"step\":1,", f);
    tg_model_inspection_write_json(f, &mi, &m, ratios, NULL);
    fputs("}\n", f);
    fclose(f);
    tg_model_inspection_free(&mi);
    tg_model_free(&m);
    /* a report series with a diverged point */
    TgReport *r = tg_report_new("diverged");
    TgReportSeries *s = tg_report_series(tg_report_chart(r, "loss", "step", "loss", true), "run", 0, false);
    tg_report_point(s, 1, 2.5);
    tg_report_point(s, 2, NAN);
    tg_report_point(s, 3, INFINITY);
    char *series = datagen_path(dir, "series.jsonl");
    cr_assert_eq(tg_report_write_series_jsonl(r, series), TG_OK, "%s", tg_error_message());
    tg_report_free(r);
    char paths[8192];
    snprintf(paths, sizeof paths, "'%s' '%s' '%s'", path, stats, series);
    expect_strict_json(paths, 9);
    free(ratios), free(path), free(stats), free(series);
}
