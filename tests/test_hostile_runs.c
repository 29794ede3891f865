/* Hostile run folders: run.txt and train_options.txt with values no run wrote (refused in one
 * line with exit 1; lines of any length read whole), metrics.jsonl and grads.jsonl with steps no
 * run reaches (refused by the report instead of cast to int64 undefined), report axes over
 * values closer than a double's rounding gap (the tick loop once never ended), compare-ffn
 * --reuse of runs with different layer counts (an out-of-bounds read), and where `ckpt export`
 * writes. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckptutil.h"
#include "datagen.h"
#include "inspect/report.h"
#include "testutil.h"
#include "run/train_options.h"

static char *dir, *corpus, *run;

static void setup(void) {
    dir = ckpt_test_setup(&corpus);
    run = datagen_path(dir, "run");
    ckpt_train_small(corpus, run, 2, "--log-grads 1");
}

static void teardown(void) {
    datagen_remove_tree(dir);
    free(dir), free(corpus), free(run);
}

TestSuite(hostile_run, .init = setup, .fini = teardown, .timeout = 120);

/* `tapegrad ARGS` (a format with one %s for the run folder) exits `code` with one line holding
 * `fragment`; returns that line (malloc'ed). */
static char *expect_refused(const char *args_fmt, int code, const char *fragment) {
    char args[8192], *out = NULL;
    snprintf(args, sizeof args, args_fmt, run);
    int rc = ckpt_cli(&out, "%s", args);
    cr_expect_eq(rc, code, "`tapegrad %s` exited %d, expected %d:\n%s", args, rc, code, out);
    cr_expect(strchr(out, '\n') && strchr(out, '\n')[1] == '\0', "`tapegrad %s`: not one line:\n%s", args, out);
    cr_expect(strstr(out, fragment), "`tapegrad %s`: the message lacks '%s':\n%s", args, fragment, out);
    return out;
}

/* Replaces the run's `name` with `text`. */
static void put(const char *name, const char *text) {
    char *path = datagen_path(run, name);
    ckpt_write_file(path, text, strlen(text));
    free(path);
}

/* ---- run.txt and train_options.txt ---- */

Test(hostile_run, run_txt_values_are_range_checked_on_resume) {
    static const struct {
        const char *seed, *says;
    } seeds[] = {
        {"x", "--seed expects an integer, got 'x'"},
        {"-5", "--seed must not be negative, got -5"},
        {"99999999999999999999", "--seed must be at most 9223372036854775807, got 99999999999999999999"},
        {"12abc", "--seed expects an integer"},
    };
    char text[512];
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        snprintf(text, sizeof text, "--preset tiny\n--data %s\n--tokenizer char\n--val-fraction 0.1\n--seed %s\n", corpus,
                 seeds[i].seed);
        put(TG_RUN_IDENTITY_FILE, text);
        free(expect_refused("train --resume %s", 1, seeds[i].says));
        free(expect_refused("train --resume %s", 1, "run.txt line 5"));
    }
}

Test(hostile_run, train_options_txt_values_are_range_checked_on_resume) {
    put(TG_TRAIN_OPTIONS_FILE, "--steps 4\n--batch 99999999999\n");
    free(expect_refused("train --resume %s", 1,
                        "train_options.txt line 2: --batch must be in [1, 1048576], got 99999999999"));
    put(TG_TRAIN_OPTIONS_FILE, "--steps 4\n--accum 0\n");
    free(expect_refused("train --resume %s", 1, "--accum must be in [1, 1048576], got 0"));
    put(TG_TRAIN_OPTIONS_FILE, "--steps 1e400\n");
    free(expect_refused("train --resume %s", 1, "--steps expects an integer"));
}

/* A value train_options.txt or run.txt cannot hold (a line break in a path) is refused before the
 * run starts (exit 2), not saved without it; a resume of a folder without train_options.txt says
 * exactly which defaults it takes instead of the run's own options. */
Test(hostile_run, options_a_resume_cannot_read_back_are_refused_or_said) {
    char *folder = datagen_path(dir, "a\nb"), *odd = datagen_path(folder, "agree.jsonl"), *fresh = datagen_path(dir, "fresh"),
         *out = NULL;
    cr_assert_eq(mkdir(folder, 0755), 0);
    datagen_write(folder, "agree.jsonl", "{\"sentence_good\": \"a b\", \"sentence_bad\": \"b a\"}\n", 47);
    static const char *const flags[] = {"--eval-task", "--probe-prompts"};
    for (int i = 0; i < 2; i++) {
        int rc = ckpt_cli(&out, "train " CKPT_SMALL_FLAGS " --data %s --steps 2 --eval-every 2 %s '%s' --out %s", corpus,
                          flags[i], odd, fresh);
        cr_expect_eq(rc, 2, "%s: %s", flags[i], out);
        cr_expect(strstr(out, "holds a line break, which train_options.txt (one option a line) cannot store"), "%s: %s",
                  flags[i], out);
        free(out);
        cr_expect_neq(access(fresh, F_OK), 0, "%s: the refused run left its folder", flags[i]);
    }
    char *options = datagen_path(run, TG_TRAIN_OPTIONS_FILE);
    cr_assert_eq(unlink(options), 0);
    int rc = ckpt_cli(&out, "train --resume %s --steps 3", run);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "has no train_options.txt") && strstr(out, "--batch 16") && strstr(out, "--threads") &&
                  !strstr(out, "--steps 1500"),
              "%s", out);
    free(out);
    cr_expect_eq(access(options, F_OK), 0, "the resume did not write train_options.txt anew");
    free(folder), free(odd), free(fresh), free(options);
}

/* What a hand-edited train_options.txt or run.txt gets wrong is refused, naming the file and the
 * line, instead of read as something else: a key given twice (the last one won), misspelt keys
 * (skipped), a NUL byte ("--steps 30\0junk" read as 30), values that conflict, and a tokenizer
 * no flag would take. Each of these inputs is also a fuzz regression (tests/fuzz/regressions/
 * run_files). */
Test(hostile_run, options_files_are_read_strictly_on_resume) {
    static const struct {
        const char *file, *text;
        size_t len; /* 0: strlen */
        const char *says;
    } cases[] = {
        {TG_TRAIN_OPTIONS_FILE, "--steps 30\n--lr 0.01\n--steps 40\n", 0,
         "train_options.txt line 3: --steps again (line 1 set it already); each option appears once"},
        {TG_TRAIN_OPTIONS_FILE, "--steps 30\n--stepz 5\n", 0,
         "train_options.txt line 2: unknown option '--stepz' (did you mean --steps?)"},
        {TG_TRAIN_OPTIONS_FILE, "--steps 30\n-warmup 3\n", 0,
         "train_options.txt line 2: unknown option '-warmup' (did you mean --warmup?)"},
        {TG_TRAIN_OPTIONS_FILE, "--steps 30\0junk\n", 16, "train_options.txt line 1 holds a NUL byte"},
        {TG_TRAIN_OPTIONS_FILE, "--steps 30\n--preset small\n", 0,
         "train_options.txt line 2: --preset is not one of the options this file holds"},
        {TG_TRAIN_OPTIONS_FILE, "--steps 30\n--lr 0.003\n--min-lr 0.5\n", 0,
         "train_options.txt line 3) is above --lr 0.003 ("},
        {TG_TRAIN_OPTIONS_FILE, "--steps 30\n--lr 1e-320\n", 0, "--lr 1e-320 is below 2.2250738585072014e-308"},
        {TG_RUN_IDENTITY_FILE, "--preset tiny\n--data CORPUS\n--tokenizer zzz\n--val-fraction 0.1\n--seed 1\n", 0,
         "run.txt line 3: --tokenizer must be char, bpe or hf:PATH/tokenizer.json, got 'zzz'"},
        {TG_RUN_IDENTITY_FILE, "--preset tiny\n--data CORPUS\n--tokenizer char\n--seed 1\n--seed 2\n", 0,
         "run.txt line 5: --seed again (line 4 set it already)"},
        {TG_RUN_IDENTITY_FILE, "--preset tiny\n--data CORPUS\n--tokenizer char\n--seed 1\n--steps 9\n", 0,
         "run.txt line 5: --steps is not one of the options this file holds"},
    };
    char *options_path = datagen_path(run, TG_TRAIN_OPTIONS_FILE), *identity_path = datagen_path(run, TG_RUN_IDENTITY_FILE);
    char *options = ckpt_read_text(options_path), *identity = ckpt_read_text(identity_path);
    free(options_path), free(identity_path);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024];
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].text);
        memcpy(text, cases[i].text, len + 1);
        char *at = strstr(text, "CORPUS"); /* run.txt's --data: the corpus the run was made from */
        if (at) {
            char tail[512];
            snprintf(tail, sizeof tail, "%s", at + 6);
            snprintf(at, sizeof text - (size_t)(at - text), "%s%s", corpus, tail);
            len = strlen(text);
        }
        put(TG_TRAIN_OPTIONS_FILE, options);
        put(TG_RUN_IDENTITY_FILE, identity);
        char *path = datagen_path(run, cases[i].file);
        ckpt_write_file(path, text, len);
        free(path);
        free(expect_refused("train --resume %s", 1, cases[i].says));
    }
    put(TG_TRAIN_OPTIONS_FILE, options);
    put(TG_RUN_IDENTITY_FILE, identity);
    /* a conflict between a flag given now and the file's value is the flag's: exit 2, the line named */
    put(TG_TRAIN_OPTIONS_FILE, "--steps 30\n--min-lr 0.001\n");
    free(expect_refused("train --resume %s --lr 0.0005", 2, "--min-lr 0.001 ("));
    free(expect_refused("train --resume %s --lr 0.0005", 2, "train_options.txt line 2) is above --lr 0.0005"));
    put(TG_TRAIN_OPTIONS_FILE, options);
    free(options), free(identity);
}

/* A line of train_options.txt longer than any fixed buffer is one line: read in 255-byte pieces,
 * "--steps 000...0003" became "--steps 000" and a line "0...03" that is no option. */
Test(hostile_run, lines_of_any_length_are_read_whole) {
    char line[1024] = "--steps ";
    memset(line + 8, '0', 700);
    strcpy(line + 708, "3\n");
    put(TG_TRAIN_OPTIONS_FILE, line);
    ckpt_expect_resume_reaches(run, "", 3, "--steps 000...0003");

    /* and run.txt's string values, through the options reader itself */
    char path_value[600], file[800];
    memset(path_value, 'd', sizeof path_value - 1);
    path_value[0] = '/';
    path_value[sizeof path_value - 1] = '\0';
    snprintf(file, sizeof file, "--data %s\n--seed 7\n", path_value);
    put("identity.txt", file);
    TgTrainOptions id;
    tg_train_options_defaults(&id);
    TgOptStrings strings = {0};
    char *path = datagen_path(run, "identity.txt");
    assert_ok(tg_opt_read(tg_train_option_table(), &id, TG_TRAIN_OPT_IDENTITY, 0, path, NULL, &strings));
    cr_expect_str_eq(id.spec.data_path, path_value);
    cr_expect_eq(id.spec.seed, 7);
    tg_opt_strings_free(&strings);
    free(path);
}

/* ---- metrics.jsonl, grads.jsonl and the report ---- */

Test(hostile_run, the_report_refuses_steps_no_run_reaches) {
    static const struct {
        const char *metrics, *says;
    } cases[] = {
        /* doubles 16 apart: the axis loop stepping by 5 once never ended */
        {"{\"step\":1e17,\"loss\":2}\n{\"step\":100000000000000032,\"loss\":2}\n", "step 1e+17 is not a whole number"},
        {"{\"step\":1e999,\"loss\":2}\n", "step inf is not a whole number"},
        {"{\"step\":9.3e18,\"loss\":2}\n", "step 9.3e+18 is not a whole number"},
        {"{\"step\":-3,\"loss\":2}\n", "step -3 is not a whole number"},
        {"{\"step\":2.5,\"loss\":2}\n", "step 2.5 is not a whole number"},
        {"{\"step\":\"one\",\"loss\":2}\n", "not a JSON object with a step"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        put("metrics.jsonl", cases[i].metrics);
        free(expect_refused("report %s", 1, cases[i].says));
        free(expect_refused("report %s", 1, "metrics.jsonl line"));
    }
    put("metrics.jsonl", "{\"step\":1,\"loss\":2}\n");
    put("grads.jsonl", "{\"step\":1e300,\"params\":[],\"ffn\":[]}\n");
    free(expect_refused("report %s", 1, "grads.jsonl line 1: step 1e+300 is not a whole number"));
}

/* Each line is strict JSON (support/json_reader.h), and a member the report reads appears once:
 * text after the object, a leading zero, a byte that is not UTF-8 and a key given twice were
 * all read before (cJSON took the first of two keys and ignored what followed the object). */
Test(hostile_run, the_report_refuses_lines_that_are_not_strict_json) {
    static const struct {
        const char *metrics, *says;
    } cases[] = {
        {"{\"step\":1,\"loss\":2} trailing\n", "metrics.jsonl line 1: text after the JSON object at byte 20"},
        {"{\"step\":1,\"loss\":2}\n{\"step\":2,\"loss\":02}\n",
         "metrics.jsonl line 2 is not valid JSON: a malformed number (a leading zero) at byte 17"},
        {"{\"step\":1,\"loss\":2,\"note\":\"\xff\"}\n", "metrics.jsonl line 1 is not valid JSON: byte 0xff"},
        {"{\"step\":1,\"step\":2,\"loss\":2}\n", "metrics.jsonl line 1: \"step\" is given twice"},
        {"{\"step\":1,\"loss\":2,\"loss\":3}\n", "metrics.jsonl line 1: \"loss\" is given twice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        put("metrics.jsonl", cases[i].metrics);
        free(expect_refused("report %s", 1, cases[i].says));
    }
    put("metrics.jsonl", "{\"step\":1,\"loss\":2}\n");
    put("grads.jsonl", "{\"step\":1,\"params\":[],\"params\":[],\"ffn\":[]}\n");
    free(expect_refused("report %s", 1, "grads.jsonl line 1: \"params\" is given twice"));
    put("grads.jsonl", "{\"step\":1,\"params\":[{\"name\":\"w\",\"grad_norm\":1,\"grad_norm\":2}],\"ffn\":[]}\n");
    free(expect_refused("report %s", 1, "grads.jsonl line 1: \"grad_norm\" is given twice"));
    put("grads.jsonl", "{\"step\":1,\"params\":[],\"ffn\":[]}\r\n\n"); /* a CRLF end and an empty line: white space */
    put("metrics.jsonl", "{\"step\":1,\"loss\":2}\r\n");
    char *out = NULL;
    int rc = ckpt_cli(&out, "report %s", run);
    cr_expect_eq(rc, 0, "a CRLF line end was refused:\n%s", out);
    free(out);
}

/* A chart whose x and y values are 32 apart at 1e17, written by a child limited to 16 MB of
 * output: the tick loops must end, and the file stay small. */
static void write_close_values_report(void *ctx) {
    struct rlimit limit = {16 << 20, 16 << 20};
    setrlimit(RLIMIT_FSIZE, &limit);
    TgReport *r = tg_report_new("close values");
    TgReportChart *c = tg_report_chart(r, "chart", "x", "y", false);
    TgReportSeries *s = tg_report_series(c, "s", 0, false);
    tg_report_point(s, 1e17, 1e17);
    tg_report_point(s, 1e17 + 32, 1e17 + 32);
    TgReportChart *log_chart = tg_report_chart(r, "log chart", "x", "y", true);
    TgReportSeries *t = tg_report_series(log_chart, "t", 0, false);
    tg_report_point(t, 0, 1e-300);
    tg_report_point(t, 1, 1e300);
    if (tg_report_write_html(r, ctx) != TG_OK) abort();
    tg_report_free(r);
}

Test(hostile_run, report_axes_end_for_values_closer_than_their_rounding_gap, .timeout = 30) {
    char *html = datagen_path(dir, "close.html"), msg[1024];
    cr_assert_eq(test_run_expecting_abort(write_close_values_report, html, msg, sizeof msg), 0,
                 "the report writer was killed (an endless axis?): %s", msg);
    struct stat st;
    cr_assert_eq(stat(html, &st), 0);
    cr_expect_lt(st.st_size, 200000, "a two-point report of %lld bytes", (long long)st.st_size);
    free(html);
}

Test(hostile_run, compare_ffn_refuses_reused_runs_with_other_layer_counts) {
    char *out_dir = datagen_path(dir, "cmp"), *relu = datagen_path(out_dir, "lr0.003-relu-s1337"),
         *swiglu = datagen_path(out_dir, "lr0.003-swiglu-s1337");
    /* the tiny preset has 2 layers and SwiGLU hidden 176, so its ReLU runs get 3/2 x 176 = 264: the
     * ReLU run is what the experiment plans, the SwiGLU one has a layer less */
    char *out = NULL;
    const char *common = "--preset tiny --steps 2 --eval-every 0 --sample-tokens 0 --log-grads 1 --seed 1337";
    cr_assert_eq(ckpt_cli(&out, "train %s --data %s --ffn relu --hidden 264 --out %s", common, corpus, relu), 0, "%s", out);
    free(out);
    cr_assert_eq(ckpt_cli(&out, "train %s --data %s --layers 1 --out %s", common, corpus, swiglu), 0, "%s", out);
    free(out);
    int rc = ckpt_cli(&out, "compare-ffn --reuse --lrs 3e-3 --seeds 1 --preset tiny --steps 2 --data %s --out %s",
                      corpus, out_dir);
    cr_expect_eq(rc, 1, "compare-ffn exited %d:\n%s", rc, out);
    cr_expect(strstr(out, "holds a swiglu model of 1 layers") && strstr(out, "2 layers"), "%s", out);
    char *report = datagen_path(out_dir, "report.html");
    cr_expect_neq(access(report, F_OK), 0, "a report was written");
    free(out), free(report), free(out_dir), free(relu), free(swiglu);
}

/* ---- ckpt export's output folder ---- */

Test(hostile_run, ckpt_export_makes_its_folder_and_keeps_another_model_s_config) {
    char *out = NULL, *weights = datagen_path(dir, "new/sub/w.safetensors");
    cr_assert_eq(ckpt_cli(&out, "ckpt export %s --safetensors %s", run, weights), 0, "%s", out);
    free(out);
    cr_expect_eq(access(weights, F_OK), 0);
    /* again: the weights exist, so --force; config.json says the same, so it may stay */
    cr_expect_eq(ckpt_cli(&out, "ckpt export %s --safetensors %s", run, weights), 2, "%s", out);
    cr_expect(strstr(out, "w.safetensors exists; add --force"), "%s", out);
    free(out);
    cr_expect_eq(ckpt_cli(&out, "ckpt export %s --safetensors %s --force", run, weights), 0, "%s", out);
    free(out);
    /* new weights beside another model's config.json: refused, nothing written; --force replaces it */
    datagen_write(dir, "other/config.json", "{\"dim\": 4096}\n", 14);
    char *other = datagen_path(dir, "other/w.safetensors");
    cr_expect_eq(ckpt_cli(&out, "ckpt export %s --safetensors %s", run, other), 2, "%s", out);
    cr_expect(strstr(out, "config.json already exists and describes another model; add --force"), "%s", out);
    cr_expect_neq(access(other, F_OK), 0, "the weights were written beside another model's config");
    size_t len;
    char *config = datagen_path(dir, "other/config.json");
    uint8_t *kept = ckpt_read_file(config, &len);
    cr_expect(len == 14 && memcmp(kept, "{\"dim\": 4096}\n", 14) == 0, "the other config.json changed");
    free(out), free(kept);
    cr_expect_eq(ckpt_cli(&out, "ckpt export %s --safetensors %s --force", run, other), 0, "%s", out);
    char *text = ckpt_read_text(config);
    cr_expect(strstr(text, "\"n_layers\": 1"), "--force kept the other config.json:\n%s", text);
    free(out), free(weights), free(other), free(config), free(text);
}

/* ---- files of the run folder that are symlinks ---- */

/* A run folder from elsewhere may hold symlinks where its files should be. A resume replaces
 * train_options.txt by a file of its own (it was rewritten in place once) and refuses to append
 * to a linked metrics.jsonl; neither link's target changes. */
Test(hostile_run, a_resume_never_writes_through_a_symlinked_run_file) {
    char *victim = datagen_path(dir, "victim.txt"), *options = datagen_path(run, TG_TRAIN_OPTIONS_FILE);
    datagen_write(dir, "victim.txt", "--steps 3\n", 10);
    cr_assert_eq(unlink(options), 0);
    cr_assert_eq(symlink(victim, options), 0);
    char *out = NULL;
    cr_assert_eq(ckpt_cli(&out, "train --resume %s --eval-batches 1", run), 0, "%s", out);
    free(out);
    struct stat st;
    cr_assert_eq(lstat(options, &st), 0);
    cr_expect(S_ISREG(st.st_mode), "train_options.txt is still the symlink");
    size_t len;
    uint8_t *text = ckpt_read_file(victim, &len);
    cr_expect(len == 10 && memcmp(text, "--steps 3\n", 10) == 0, "the symlink's target was written");
    free(text);

    char *metrics = datagen_path(run, "metrics.jsonl");
    datagen_write(dir, "victim.txt", "{\"step\":1}\n", 11);
    cr_assert_eq(unlink(metrics), 0);
    cr_assert_eq(symlink(victim, metrics), 0);
    put(TG_TRAIN_OPTIONS_FILE, "--steps 4\n");
    free(expect_refused("train --resume %s", 1, "metrics.jsonl is a symbolic link"));
    text = ckpt_read_file(victim, &len);
    cr_expect(len == 11 && memcmp(text, "{\"step\":1}\n", 11) == 0, "metrics were appended to the symlink's target");
    free(text), free(victim), free(options), free(metrics);
}

/* ---- files of the run folder that are no files ---- */

/* Replaces the run's `name` by a FIFO (no one writes it: opening it to read would wait for good)
 * or by a symlink to /dev/zero (a line reader would never find the end of its first line). */
static void plant(const char *name, bool fifo) {
    char *path = datagen_path(run, name);
    char moved[4300];
    snprintf(moved, sizeof moved, "%s.real", path);
    cr_assert_eq(rename(path, moved), 0, "cannot move %s aside", path);
    cr_assert_eq(fifo ? mkfifo(path, 0644) : symlink("/dev/zero", path), 0, "cannot plant %s", path);
    free(path);
}

static void restore(const char *name) {
    char *path = datagen_path(run, name);
    char moved[4300];
    snprintf(moved, sizeof moved, "%s.real", path);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(rename(moved, path), 0);
    free(path);
}

Test(hostile_run, a_fifo_or_a_device_in_place_of_a_run_file_is_refused_not_waited_on, .timeout = 60) {
    static const struct {
        const char *file, *command, *says;
    } cases[] = {
        {"tokenizer.txt", "sample --run %s --tokens 2", "not a regular file"},
        {"val.tok", "eval --run %s", "not a regular file"},
        {"latest", "ckpt info %s", "not a regular file"},
        {"metrics.jsonl", "report %s", "not a regular file"},
        {TG_TRAIN_OPTIONS_FILE, "train --resume %s", "not a regular file"},
        {TG_RUN_IDENTITY_FILE, "train --resume %s", "not a regular file"},
    };
    for (int fifo = 0; fifo <= 1; fifo++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            plant(cases[i].file, fifo);
            free(expect_refused(cases[i].command, 1, cases[i].says));
            restore(cases[i].file);
        }
    /* a FIFO where the metrics are appended to */
    put(TG_TRAIN_OPTIONS_FILE, "--steps 4\n");
    plant("metrics.jsonl", true);
    free(expect_refused("train --resume %s", 1, "metrics.jsonl: not a regular file"));
}

/* ---- where commands write: the one output check (run/output_check.h) ---- */

/* Every file of the run folder, its name and bytes: what no refused command may change. */
static char *run_snapshot(void) {
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    struct dirent **names;
    int n = scandir(run, &names, NULL, alphasort);
    cr_assert_geq(n, 0);
    for (int i = 0; i < n; i++) {
        char *path = datagen_path(run, names[i]->d_name);
        struct stat st;
        cr_assert_eq(lstat(path, &st), 0);
        fprintf(out, "%s %o", names[i]->d_name, (unsigned)st.st_mode);
        if (S_ISREG(st.st_mode)) {
            size_t bytes;
            uint8_t *data = ckpt_read_file(path, &bytes);
            uint64_t h = 14695981039346656037ull;
            for (size_t k = 0; k < bytes; k++) h = (h ^ data[k]) * 1099511628211ull;
            fprintf(out, " %zu %016llx", bytes, (unsigned long long)h);
            free(data);
        }
        fputc('\n', out);
        free(path);
        free(names[i]);
    }
    free(names);
    fclose(out);
    return text;
}

/* `tapegrad ARGS` (%1$s: the run folder, %2$s: the scratch folder) is refused with `code` and a
 * line holding `fragment`, and the run folder is as it was. */
static void expect_output_refused(const char *args_fmt, int code, const char *fragment) {
    char args[8192], *out = NULL, *before = run_snapshot();
    snprintf(args, sizeof args, args_fmt, run, dir);
    int rc = ckpt_cli(&out, "%s", args);
    cr_expect_eq(rc, code, "`tapegrad %s` exited %d, expected %d:\n%s", args, rc, code, out);
    cr_expect(strchr(out, '\n') && strchr(out, '\n')[1] == '\0', "`tapegrad %s`: not one line:\n%s", args, out);
    cr_expect(strstr(out, fragment), "`tapegrad %s`: the message lacks '%s':\n%s", args, fragment, out);
    char *after = run_snapshot();
    cr_expect_str_eq(after, before, "`tapegrad %s` changed the run folder", args);
    free(out), free(before), free(after);
}

/* These exited 0 and replaced the newest checkpoint, the tokenizer or the metrics (report --out
 * RUN/metrics.jsonl wrote the HTML and then the series into it). --force changes nothing. */
Test(hostile_run, no_output_replaces_a_file_of_a_run) {
    static const struct {
        const char *args, *says;
    } cases[] = {
        {"ckpt export %1$s --gguf %1$s/ckpt-00000002.tgck", "is a checkpoint of the run in"},
        {"ckpt export %1$s --safetensors %1$s/tokenizer.txt", "is the tokenizer of the run in"},
        {"ckpt export %1$s/ckpt-00000002.tgck --safetensors %1$s/val.tok", "is the tokenized validation data"},
        {"ckpt export %1$s --safetensors %1$s/latest", "is the pointer to the newest checkpoint"},
        {"ckpt export %1$s --gguf %1$s/train.lock", "is the lock of the run"},
        {"ckpt export %1$s --gguf %1$s/ckpt-00000099.tgck", "is a checkpoint of the run"}, /* not there yet */
        {"ckpt export %1$s --hf %1$s", "is a run folder"},
        {"report %1$s --out %1$s/metrics.jsonl", "is the metrics of the run in"},
        {"report %1$s --out %1$s/grads.html", "grads.jsonl is the gradient log of the run"}, /* the series beside it */
        {"report %1$s --out %1$s/run.txt", "is the description of the run"},
        {"inspect --run %1$s --batches 1 --batch 1 --dump-grads %1$s/ckpt-00000002.tgck", "is a checkpoint of the run"},
        {"inspect --run %1$s --batches 1 --batch 1 --dump-grads %1$s/train_options.txt", "is the training options"},
        {"compare-ffn --preset tiny --steps 1 --seeds 1 --lrs 1e-3 --data %2$s/corpus.txt --out %1$s", "is a run folder"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int force = 0; force <= 1; force++) {
            char args[1024];
            snprintf(args, sizeof args, "%s%s", cases[i].args, force ? " --force" : "");
            expect_output_refused(args, 2, cases[i].says);
        }
    }
    /* the same through a link to the run folder */
    char *link = datagen_path(dir, "link");
    cr_assert_eq(symlink(run, link), 0);
    expect_output_refused("ckpt export %1$s --gguf %2$s/link/metrics.jsonl --force", 2, "is the metrics of the run in");
    expect_output_refused("ckpt export %1$s --hf %2$s/link --force", 2, "is a run folder");
    char *missing = datagen_path(run, "ckpt-00000099.tgck");
    cr_expect_neq(access(missing, F_OK), 0, "a refused export wrote %s", missing);
    free(link), free(missing);
}

/* A link, a FIFO, a device or a folder at an output path is refused, --force or not; a file is
 * replaced only with --force; no flag takes an empty path; two outputs of one command, or an
 * output and the command's input, are never one file. */
Test(hostile_run, outputs_are_files_of_their_own, .timeout = 60) {
    char *victim = datagen_path(dir, "victim.txt"), *link = datagen_path(dir, "out.gguf");
    datagen_write(dir, "victim.txt", "mine\n", 5);
    cr_assert_eq(symlink(victim, link), 0);
    char *fifo = datagen_path(dir, "grads.safetensors");
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    datagen_write(dir, "folder.gguf/keep", "x", 1);
    datagen_write(dir, "mine.html", "my page\n", 8);
    static const struct {
        const char *args, *says;
        int code;
    } cases[] = {
        {"ckpt export %1$s --gguf %2$s/out.gguf", "out.gguf is a symbolic link", 2},
        {"ckpt export %1$s --safetensors %2$s/out.gguf", "out.gguf is a symbolic link", 2},
        {"report %1$s --out %2$s/out.gguf", "out.gguf is a symbolic link", 2},
        {"inspect --run %1$s --batches 1 --batch 1 --dump-grads %2$s/grads.safetensors", "grads.safetensors is a FIFO", 2},
        {"ckpt export %1$s --gguf /dev/null", "/dev/null is a device", 2},
        {"ckpt export %1$s --gguf %2$s/folder.gguf", "folder.gguf is a folder", 2},
        {"ckpt export %1$s --gguf %2$s/", "names a folder", 2},
        {"ckpt export %1$s --hf %2$s/victim.txt", "victim.txt is a file, not a folder", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int force = 0; force <= 1; force++) {
            char args[1024];
            snprintf(args, sizeof args, "%s%s", cases[i].args, force ? " --force" : "");
            expect_output_refused(args, cases[i].code, cases[i].says);
        }
    struct stat st;
    cr_expect(lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "the link was replaced");
    size_t len;
    uint8_t *text = ckpt_read_file(victim, &len);
    cr_expect(len == 5 && memcmp(text, "mine\n", 5) == 0, "the link's target was written");
    free(text);

    /* a file: --force replaces it */
    expect_output_refused("report %1$s --out %2$s/mine.html", 2, "mine.html exists; add --force to replace it");
    char *mine = datagen_path(dir, "mine.html"), *out = NULL;
    text = ckpt_read_file(mine, &len);
    cr_expect(len == 8 && memcmp(text, "my page\n", 8) == 0, "a refused report wrote over mine.html");
    free(text);
    cr_expect_eq(ckpt_cli(&out, "report %s --out %s --force", run, mine), 0, "%s", out);
    free(out);
    text = ckpt_read_file(mine, &len);
    cr_expect(len > 8 && memcmp(text, "my page\n", 8) != 0, "report --force kept mine.html");
    free(text), free(mine);

    /* no name at all: `--gguf ""` said "cannot write : No such file or directory; the previous  is untouched" */
    expect_output_refused("ckpt export %1$s --gguf ''", 2, "--gguf needs a file name");
    expect_output_refused("ckpt export %1$s --safetensors ''", 2, "--safetensors needs a file name");
    expect_output_refused("ckpt export %1$s --hf ''", 2, "--hf needs a folder name");
    expect_output_refused("report %1$s --out ''", 2, "--out needs a file name");
    expect_output_refused("inspect --run %1$s --dump-grads ''", 2, "--dump-grads needs a file name");
    expect_output_refused("compare-ffn --data %2$s/corpus.txt --out ''", 2, "--out needs a folder name");

    /* two outputs in one file, and an output that is the input */
    expect_output_refused("report %1$s --out %2$s/r.jsonl", 2, "the series beside --out would be the same file");
    expect_output_refused("ckpt export %1$s --safetensors %2$s/w/config.json", 2,
                          "the config.json beside --safetensors would be the same file");
    char *alone = datagen_path(dir, "alone.tgck"), *ckpt = datagen_path(run, "ckpt-00000002.tgck");
    uint8_t *bytes = ckpt_read_file(ckpt, &len);
    ckpt_write_file(alone, bytes, len);
    expect_output_refused("ckpt export %2$s/alone.tgck --safetensors %2$s/alone.tgck --force", 2, "which this command reads");
    size_t now_len;
    uint8_t *now = ckpt_read_file(alone, &now_len);
    cr_expect(now_len == len && memcmp(now, bytes, len) == 0, "the checkpoint read was replaced");
    free(now), free(bytes), free(alone), free(ckpt), free(victim), free(link), free(fifo);
}

/* ---- run files removed while the run trains ---- */

/* log.txt and metrics.jsonl removed midway come back at the run's next line, with a warning on
 * stderr and a note in the new log: the rest of the run's lines are there, up to the last step. */
Test(hostile_run, run_files_removed_while_it_trains_come_back, .timeout = 180) {
    char *fresh = datagen_path(dir, "fresh"), *log = datagen_path(dir, "train.log"),
         *metrics = datagen_path(fresh, "metrics.jsonl"), *runlog = datagen_path(fresh, "log.txt");
    char *args[] = {"tapegrad", "train", "--preset", "tiny", "--batch", "4", "--threads", "1", "--eval-batches", "2",
                    "--sample-tokens", "0", "--data", corpus, "--steps", "400", "--eval-every", "0", "--log-every", "1",
                    "--ckpt-every", "0", "--out", fresh, NULL};
    pid_t pid = ckpt_spawn_cli(log, args);
    /* until the run wrote a few lines into its folder's files (bounded: 60 s) */
    for (int i = 0; i < 12000 && !(access(runlog, F_OK) == 0 && ckpt_count_lines(metrics) >= 3); i++) usleep(5000);
    cr_assert_geq(ckpt_count_lines(metrics), 3, "the run wrote no metrics in 60 s");
    cr_assert_eq(unlink(metrics), 0);
    cr_assert_eq(unlink(runlog), 0);
    int status = ckpt_wait_at_most(pid, 150);
    char *out = ckpt_read_text(log);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d: %s", status, out);
    cr_expect(strstr(out, "metrics.jsonl was removed or replaced while the run trained: written anew from step") &&
                  strstr(out, "log.txt was removed or replaced while the run trained"),
              "%s", out);
    free(out);
    cr_assert_eq(access(metrics, F_OK), 0, "metrics.jsonl did not come back");
    CkptMetricLine m[512];
    int n = ckpt_read_metrics(fresh, 0, m, 512);
    cr_assert_gt(n, 0);
    cr_expect_eq(m[n - 1].step, 400, "the last line is of step %lld", (long long)m[n - 1].step);
    cr_assert_eq(access(runlog, F_OK), 0, "log.txt did not come back");
    char *text = ckpt_read_text(runlog);
    cr_expect(strstr(text, "note: this log was removed or replaced") && strstr(text, "done at step 400"), "%s", text);
    free(text), free(fresh), free(log), free(metrics), free(runlog);
}

/* ---- messages ---- */

/* --eval-task given as a relative path is saved absolute, so a resume from another folder finds it;
 * a relative one an older run saved names the flag, the file's line and the fix when it is not
 * found from here. */
Test(hostile_run, a_saved_task_path_resumes_from_another_folder) {
    char *fresh = datagen_path(dir, "fresh"), *options = datagen_path(fresh, TG_TRAIN_OPTIONS_FILE), *out = NULL;
    datagen_write(dir, "agree.jsonl", "{\"sentence_good\": \"the a\", \"sentence_bad\": \"a the\"}\n", 51);
    char launcher[4200];
    snprintf(launcher, sizeof launcher, "cd '%s' &&", dir);
    int rc = ckpt_cli_launched(&out, launcher, "train " CKPT_SMALL_FLAGS " --data %s --steps 2 --eval-every 2 "
                               "--eval-task agree.jsonl --out fresh", corpus);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *text = ckpt_read_text(options), want[4300];
    snprintf(want, sizeof want, "--eval-task %s/agree.jsonl\n", dir);
    cr_expect(strstr(text, want), "train_options.txt keeps the path as given:\n%s", text);
    free(text);
    rc = ckpt_cli(&out, "train --resume %s --steps 4", fresh); /* from the test's own folder */
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    /* a relative path in the file, as an older run saved it */
    text = ckpt_read_text(options);
    char *line = strstr(text, want);
    cr_assert_not_null(line);
    memmove(line + strlen("--eval-task "), line + strlen("--eval-task ") + strlen(dir) + 1,
            strlen(line + strlen("--eval-task ") + strlen(dir)));
    ckpt_write_file(options, text, strlen(text));
    free(text);
    rc = ckpt_cli(&out, "train --resume %s --steps 6", fresh);
    cr_expect(rc == 1 && strstr(out, "--eval-task (") && strstr(out, "train_options.txt line ") &&
                  strstr(out, "give --eval-task again with a path that exists from here") && strstr(out, "agree.jsonl"),
              "%d: %s", rc, out);
    free(out), free(fresh), free(options);
}

/* A run that takes no step changes nothing: a finished run resumed says so and logs and saves
 * nothing; a new run interrupted (SIGINT) before its first step says nothing was trained and
 * leaves no folder, where it used to save a step-0 checkpoint with a NaN val loss. */
Test(hostile_run, a_run_that_takes_no_step_changes_nothing, .timeout = 120) {
    char *metrics = datagen_path(run, "metrics.jsonl"), *out = NULL;
    int lines = ckpt_count_lines(metrics);
    int rc = ckpt_cli(&out, "train --resume %s", run);
    cr_expect(rc == 0 && strstr(out, "done at step 2, as the run already was: nothing to train, nothing changed"), "%d: %s",
              rc, out);
    cr_expect_null(strstr(out, "val loss nan"), "%s", out);
    free(out);
    cr_expect_eq(ckpt_count_lines(metrics), lines, "the resume of a finished run logged a line");

    /* 20 MB to prepare: SIGINT lands while the run prepares, before its first step */
    char *text = datagen_english(11, (size_t)20 << 20), *never = datagen_path(dir, "never"),
         *log = datagen_path(dir, "never.log"), *big = datagen_path(dir, "big.txt");
    datagen_write(dir, "big.txt", text, strlen(text));
    free(text);
    char *args[] = {"tapegrad", "train", "--preset", "tiny", "--batch", "4", "--threads", "1", "--eval-batches", "2",
                    "--sample-tokens", "0", "--data", big, "--steps", "5", "--out", never, NULL};
    pid_t pid = ckpt_spawn_cli(log, args);
    for (int i = 0; i < 12000; i++) { /* bounded: 60 s */
        if (access(log, F_OK) == 0) {
            char *now = ckpt_read_text(log);
            bool preparing = strstr(now, "preparing") != NULL;
            free(now);
            if (preparing) break;
        }
        usleep(5000);
    }
    cr_assert_eq(kill(pid, SIGINT), 0);
    int status = ckpt_wait_at_most(pid, 100);
    out = ckpt_read_text(log);
    cr_assert(!strstr(out, "\nstep 1/"), "the run took its first step before SIGINT came: the test shows nothing\n%s", out);
    cr_expect(WIFEXITED(status) && strstr(out, "interrupted before the first step: nothing was trained, and no run folder "
                                                "is kept"),
              "status %d: %s", status, out);
    free(out);
    cr_expect_neq(access(never, F_OK), 0, "the interrupted run left its folder");
    free(metrics), free(never), free(log), free(big);
}

/* `sample --run RUN` whose `latest` names a folder: a file problem, exit 1 as everywhere else. */
Test(hostile_run, a_checkpoint_name_that_is_a_folder_is_a_file_problem) {
    char name[64], *path;
    int64_t step = ckpt_latest_step(run);
    snprintf(name, sizeof name, "ckpt-%08lld.tgck", (long long)step);
    path = datagen_path(run, name);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(mkdir(path, 0755), 0);
    free(expect_refused("sample --run %s --tokens 4", 1, "is a folder, not a checkpoint file"));
    free(path);
}
