/* The best checkpoint and the early stop (--keep-best, --early-stop; train/best.h): the record of
 * the best evaluation, its place in the checkpoint and in the run folder (`best`, never deleted
 * by --keep), and end to end: with --keep 1 and a val loss that goes up and down the folder keeps
 * the best checkpoint beside the newest; an early stop ends at the same step whether the run
 * stopped and resumed on the way or not, with the same checkpoints, bit for bit. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_folder.h"
#include "ckptutil.h"
#include "datagen.h"
#include "testutil.h"
#include "train/best.h"

/* ---------------------------------------------------------------- the record */

Test(best_record, the_lowest_value_is_the_best_and_a_tie_or_nan_does_not_better_it) {
    TgBestRecord r = {0};
    tg_best_record_start(&r, TG_EVAL_METRIC_VAL_LOSS);
    cr_assert(r.kept && r.step == -1 && isnan(r.value) && r.evals_since == 0);
    static const double values[] = {3.0, 2.5, 2.7, 2.5, NAN, 2.4, 2.6};
    static const bool better[] = {true, true, false, false, false, true, false};
    static const int64_t best_step[] = {2, 4, 4, 4, 4, 12, 12}, since[] = {0, 0, 1, 2, 3, 0, 1};
    for (int i = 0; i < 7; i++) {
        int64_t step = 2 * (i + 1);
        cr_expect_eq(tg_best_record_update(&r, TG_EVAL_METRIC_VAL_LOSS, values[i], step), better[i], "step %lld",
                     (long long)step);
        cr_expect_eq(r.step, best_step[i], "step %lld", (long long)step);
        cr_expect_eq(r.evals_since, since[i], "step %lld", (long long)step);
        cr_expect_eq(tg_best_record_exhausted(&r, 3), since[i] >= 3, "step %lld", (long long)step);
    }
    cr_expect_eq(r.value, 2.4);
    cr_expect_not(tg_best_record_exhausted(&r, 0), "patience 0 never stops");
    cr_expect_not(tg_eval_metric_maximised(TG_EVAL_METRIC_VAL_LOSS) ||
                  tg_eval_metric_maximised(TG_EVAL_METRIC_VAL_BPB));
}

Test(best_record, what_a_run_watches_and_a_record_it_resumes_with) {
    cr_expect_eq(tg_best_watched(TG_EVAL_METRIC_NONE, 0), TG_EVAL_METRIC_NONE);
    cr_expect_eq(tg_best_watched(TG_EVAL_METRIC_NONE, 3), TG_EVAL_METRIC_VAL_LOSS,
                 "--early-stop alone watches val_loss");
    cr_expect_eq(tg_best_watched(TG_EVAL_METRIC_VAL_BPB, 3), TG_EVAL_METRIC_VAL_BPB);
    TgEvalFigures f = {.val_loss = 2.0, .val_bpb = 3.0};
    cr_expect_eq(tg_best_metric_value(TG_EVAL_METRIC_VAL_LOSS, &f), 2.0);
    cr_expect_eq(tg_best_metric_value(TG_EVAL_METRIC_VAL_BPB, &f), 3.0);
    cr_expect_str_eq(tg_eval_metric_name(TG_EVAL_METRIC_VAL_BPB), "val_bpb");
    cr_expect_str_eq(TG_EVAL_METRIC_CHOICES, "none|val_loss|val_bpb|task|task_norm");
    cr_expect(tg_eval_metric_maximised(TG_EVAL_METRIC_TASK_ACC) && tg_eval_metric_maximised(TG_EVAL_METRIC_TASK_ACC_NORM),
              "an accuracy is better higher");
    f.task = 0.75;
    cr_expect_eq(tg_best_metric_value(TG_EVAL_METRIC_TASK_ACC_NORM, &f), 0.75);
    /* a record the run resumed with goes on; a run that watches nothing keeps none */
    TgBestRecord r = {.kept = true, .value = 2.5, .step = 4, .evals_since = 2};
    tg_best_record_start(&r, TG_EVAL_METRIC_VAL_LOSS);
    cr_expect(r.kept && r.value == 2.5 && r.step == 4 && r.evals_since == 2);
    tg_best_record_start(&r, TG_EVAL_METRIC_NONE);
    cr_expect_not(r.kept);
    cr_expect_not(tg_best_record_update(&r, TG_EVAL_METRIC_NONE, 1.0, 6));
    cr_expect_not(r.kept || r.evals_since, "a record not kept stays empty");
}

/* ---------------------------------------------------------------- checkpoints and the folder */

static void small_model(TgModel *m) {
    TgModelConfig c = {.dim = 16,
                       .n_layers = 1,
                       .n_heads = 2,
                       .n_kv_heads = 1,
                       .hidden = 32,
                       .vocab = 20,
                       .seq_len = 8,
                       .ffn = TG_FFN_SWIGLU,
                       .rope_theta = 1e6,
                       .norm_eps = 1e-5};
    cr_assert_eq(tg_model_config_validate(&c), TG_OK, "%s", tg_error_message());
    tg_model_build(m, &c);
    tg_model_init_weights(m, 3);
}

Test(best_checkpoint, the_record_round_trips_and_only_a_run_that_keeps_one_writes_it) {
    char *tmp = datagen_tempdir(), *with = datagen_path(tmp, "with.tgck"), *without = datagen_path(tmp, "without.tgck");
    TgModel m, back;
    small_model(&m);
    TgTrainerState st = {.step = 10, .best_val_loss = 2.5, .seed = 1};
    TgCheckpointSource src = tg_checkpoint_source_of(&m, 1, &st);
    assert_ok(tg_checkpoint_write(without, &src));
    src.state.best = (TgBestRecord){.kept = true, .value = 2.25, .step = 6, .evals_since = 2};
    assert_ok(tg_checkpoint_write(with, &src));
    TgCheckpointInfo info;
    assert_ok(ckpt_load_model(without, &back, &info));
    cr_expect_eq(info.flags & TG_CHECKPOINT_FLAG_BEST, 0u);
    cr_expect_not(info.state.best.kept);
    tg_model_free(&back);
    assert_ok(ckpt_load_model(with, &back, &info));
    cr_expect_neq(info.flags & TG_CHECKPOINT_FLAG_BEST, 0u);
    cr_expect(info.state.best.kept && info.state.best.value == 2.25 && info.state.best.step == 6 &&
              info.state.best.evals_since == 2);
    tg_model_free(&back);
    /* the fingerprint of what the value was measured on (a task file) round-trips too */
    src.state.best.source = 0x1234567890abcdefull;
    assert_ok(tg_checkpoint_write(with, &src));
    assert_ok(ckpt_load_model(with, &back, &info));
    cr_expect_eq(info.state.best.source, 0x1234567890abcdefull);
    cr_expect(info.state.best.value == 2.25 && info.state.best.step == 6 && info.state.best.evals_since == 2);
    tg_model_free(&back);
    src.state.best.source = 0;
    /* a record no run writes: its best after the checkpoint's step */
    src.state.best.step = 11;
    assert_ok(tg_checkpoint_write(with, &src));
    assert_fails(ckpt_load_model(with, &back, &info), TG_ERR_FORMAT, "invalid best record");
    tg_model_free(&m);
    datagen_remove_tree(tmp);
    free(tmp), free(with), free(without);
}

/* The checkpoint files of dir, "ckpt-00000004.tgck ckpt-00000008.tgck " (ascending). */
static void checkpoint_files(const char *dir, char *out, size_t cap) {
    out[0] = '\0';
    for (int step = 0; step <= 100; step++) {
        char name[64], *path;
        snprintf(name, sizeof name, "ckpt-%08d.tgck", step);
        path = datagen_path(dir, name);
        if (access(path, F_OK) == 0) snprintf(out + strlen(out), cap - strlen(out), "%s ", name);
        free(path);
    }
}

Test(best_checkpoint, keep_1_keeps_the_newest_and_the_one_best_names) {
    char *tmp = datagen_tempdir(), files[512], path[4200];
    TgModel m;
    small_model(&m);
    TgCheckpointKeep keep = {.newest = 1, .best = true, .metric = "val_loss"};
    /* evaluations at 2, 4, 6, 8: the best at 4, then at 10 */
    static const int64_t best_at[] = {2, 4, 4, 4, 10};
    for (int i = 0; i < 5; i++) {
        int64_t step = 2 * (i + 1);
        TgTrainerState st = {.step = step, .best_val_loss = 2, .seed = 1};
        st.best = (TgBestRecord){.kept = true,
                                 .value = 3.0 - 0.125 * (double)best_at[i],
                                 .step = best_at[i],
                                 .evals_since = (step - best_at[i]) / 2};
        TgCheckpointSource src = tg_checkpoint_source_of(&m, 1, &st);
        assert_ok(tg_checkpoint_save_in_folder(tmp, &src, &keep, NULL, 0));
        checkpoint_files(tmp, files, sizeof files);
        if (step == 8) cr_expect_str_eq(files, "ckpt-00000004.tgck ckpt-00000008.tgck ");
    }
    checkpoint_files(tmp, files, sizeof files);
    cr_expect_str_eq(files, "ckpt-00000010.tgck ", "the best is the newest: one file");
    char *best = datagen_path(tmp, TG_CHECKPOINT_BEST_FILE), *text = ckpt_read_text(best);
    cr_expect_str_eq(text, "ckpt-00000010.tgck\nval_loss 1.75\nstep 10\n");
    free(text);
    /* RUN/best and RUN/latest name checkpoints wherever a checkpoint is asked for */
    assert_ok(tg_checkpoint_resolve(best, path, sizeof path));
    cr_expect(strstr(path, "/ckpt-00000010.tgck"), "%s", path);
    /* a run that keeps no best: the newest alone, and `best` is left as it is */
    keep.best = false;
    TgTrainerState st = {.step = 12, .best_val_loss = 2, .seed = 1};
    st.best = (TgBestRecord){.kept = true, .value = 1.75, .step = 10, .evals_since = 1};
    TgCheckpointSource src = tg_checkpoint_source_of(&m, 1, &st);
    assert_ok(tg_checkpoint_save_in_folder(tmp, &src, &keep, NULL, 0));
    checkpoint_files(tmp, files, sizeof files);
    cr_expect_str_eq(files, "ckpt-00000012.tgck ");
    /* a record of no evaluation yet removes `best` */
    assert_ok(tg_checkpoint_write_best(tmp, "val_loss", &(TgBestRecord){.kept = true, .value = NAN, .step = -1}));
    cr_expect_neq(access(best, F_OK), 0);
    tg_model_free(&m);
    datagen_remove_tree(tmp);
    free(tmp), free(best);
}

/* ---------------------------------------------------------------- end to end */

CKPT_SCRATCH_FIXTURE

/* A constant learning rate high enough that the val loss of the tiny model goes up and down
 * between evaluations every 2 steps. */
#define BUMPY_FLAGS CKPT_TEST_FLAGS " --lr 0.05 --min-lr 0.05 --warmup 0 --eval-every 2 --ckpt-every 0 --keep 1"

typedef struct {
    int64_t step;
    double val;
} Eval;

/* The evaluations of RUN/metrics.jsonl's training lines, in order. */
static int evaluations(const char *run, Eval *out, int cap) {
    CkptMetricLine m[256];
    int n = ckpt_read_metrics(run, 0, m, 256), k = 0;
    for (int i = 0; i < n && k < cap; i++)
        if (m[i].val_loss[0]) out[k++] = (Eval){m[i].step, strtod(m[i].val_loss, NULL)};
    return k;
}

/* The step of the first lowest val loss; *stop (may be NULL): the step at which `patience`
 * evaluations in a row have not bettered the best (-1: none). */
static int64_t expected_best(const Eval *e, int n, int patience, int64_t *stop) {
    int best = 0, since = 0;
    if (stop) *stop = -1;
    for (int i = 1; i < n; i++) {
        if (e[i].val < e[best].val)
            best = i, since = 0;
        else
            since++;
        if (stop && *stop < 0 && since == patience) *stop = e[i].step;
    }
    return e[best].step;
}

Test(keep_best_cli, keep_1_keeps_the_best_checkpoint_beside_the_newest, .init = setup, .fini = teardown,
     .timeout = 60) {
    char *run = datagen_path(dir, "run"), *out = NULL, files[512], name[64];
    int rc = ckpt_cli(&out, "train " BUMPY_FLAGS " --data %s --steps 30 --keep-best val_loss --out %s", corpus, run);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "best checkpoint: val_loss"), "%s", out);
    free(out);
    Eval e[64];
    int n = evaluations(run, e, 64);
    cr_assert_eq(n, 15);
    bool rose = false;
    for (int i = 1; i < n; i++) rose |= e[i].val > e[i - 1].val;
    cr_assert(rose, "the val loss never went up: the test shows nothing");
    int64_t best = expected_best(e, n, 0, NULL);
    cr_assert_lt(best, 30, "the best is the last evaluation: the test shows nothing");
    checkpoint_files(run, files, sizeof files);
    char expect[128];
    snprintf(expect, sizeof expect, "ckpt-%08lld.tgck ckpt-00000030.tgck ", (long long)best);
    cr_expect_str_eq(files, expect);
    char *pointer = datagen_path(run, "best"), *text = ckpt_read_text(pointer);
    snprintf(name, sizeof name, "ckpt-%08lld.tgck\nval_loss ", (long long)best);
    cr_expect_eq(strncmp(text, name, strlen(name)), 0, "%s", text);
    free(text);
    /* the kept checkpoint is the best's, its record its own */
    char path[4200];
    TgModel m;
    TgCheckpointInfo info;
    assert_ok(tg_checkpoint_resolve(pointer, path, sizeof path));
    assert_ok(ckpt_load_model(path, &m, &info));
    cr_expect_eq(info.state.step, best);
    cr_expect(info.state.best.kept && info.state.best.step == best && info.state.best.evals_since == 0);
    tg_model_free(&m);
    char *identity = datagen_path(run, "run.txt");
    text = ckpt_read_text(identity);
    cr_expect(strstr(text, "--keep-best val_loss\n"), "%s", text);
    free(text);
    /* a resume cannot make the record another figure's */
    rc = ckpt_cli(&out, "train --resume %s --keep-best val_bpb --steps 32", run);
    cr_expect(rc == 2 && strstr(out, "--keep-best val_bpb differs from the resumed run's val_loss"), "%d: %s", rc, out);
    free(out);
    free(run), free(pointer), free(identity);
}

/* --keep-best task:NAME keeps the checkpoint of the highest accuracy of that --eval-task (the
 * first of equal ones), by the figures metrics.jsonl holds; run.txt records it; a name that is no
 * --eval-task file's is refused before anything is written. */
Test(keep_best_cli, a_task_accuracy_keeps_the_checkpoint_of_its_highest_value, .init = setup, .fini = teardown,
     .timeout = 90) {
    char *run = datagen_path(dir, "run"), *out = NULL, files[512], line[2048];
    /* minimal pairs from the corpus's own phrases against the same bytes reversed */
    char *text = ckpt_read_text(corpus), *tasks = datagen_path(dir, "order.jsonl");
    FILE *f = fopen(tasks, "w");
    int pairs = 0;
    for (char *l = strtok(text, ".,;\n"); l && pairs < 24; l = strtok(NULL, ".,;\n")) {
        while (*l == ' ') l++;
        size_t n = strlen(l) < 24 ? strlen(l) : 24;
        bool plain = n >= 8;
        for (size_t i = 0; i < n; i++) plain = plain && ((l[i] >= 'a' && l[i] <= 'z') || l[i] == ' ');
        if (!plain) continue;
        fprintf(f, "{\"sentence_good\": \"%.*s\", \"sentence_bad\": \"", (int)n, l);
        for (size_t i = n; i-- > 0;) fputc(l[i], f);
        fputs("\"}\n", f);
        pairs++;
    }
    fclose(f);
    free(text);
    cr_assert_gt(pairs, 8, "the corpus gave only %d phrases of letters", pairs);
    int rc = ckpt_cli(&out, "train " BUMPY_FLAGS " --data %s --steps 24 --eval-task %s --keep-best task:order --out %s",
                      corpus, tasks, run);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    /* the accuracies of the evaluations, from metrics.jsonl */
    char *metrics = datagen_path(run, "metrics.jsonl");
    f = fopen(metrics, "r");
    cr_assert_not_null(f);
    int64_t best = -1;
    double best_acc = -1;
    int evals = 0, changes = 0;
    double last = -1;
    while (fgets(line, sizeof line, f)) {
        const char *acc = strstr(line, "\"task/order/acc\":");
        if (!acc) continue;
        double v = strtod(acc + strlen("\"task/order/acc\":"), NULL);
        long long step = strtoll(strstr(line, "\"step\":") + 7, NULL, 10);
        if (step == 0) continue; /* not an evaluation of --eval-every */
        evals++;
        changes += evals > 1 && v != last;
        last = v;
        if (v > best_acc) best_acc = v, best = step;
    }
    fclose(f);
    cr_assert_eq(evals, 12, "%d evaluations in metrics.jsonl", evals);
    cr_assert_gt(changes, 0, "the accuracy never changed: the test shows nothing");
    checkpoint_files(run, files, sizeof files);
    char expect[128], name[128];
    if (best == 24) snprintf(expect, sizeof expect, "ckpt-00000024.tgck ");
    else snprintf(expect, sizeof expect, "ckpt-%08lld.tgck ckpt-00000024.tgck ", (long long)best);
    cr_expect_str_eq(files, expect, "the best accuracy %g was at step %lld", best_acc, (long long)best);
    char *pointer = datagen_path(run, "best");
    text = ckpt_read_text(pointer);
    snprintf(name, sizeof name, "ckpt-%08lld.tgck\ntask:order ", (long long)best);
    cr_expect_eq(strncmp(text, name, strlen(name)), 0, "%s", text);
    free(text);
    char *identity = datagen_path(run, "run.txt");
    text = ckpt_read_text(identity);
    cr_expect(strstr(text, "--keep-best task:order\n"), "%s", text);
    free(text);
    /* a task the run does not score, and a malformed name */
    char *other = datagen_path(dir, "other");
    rc = ckpt_cli(&out, "train " BUMPY_FLAGS " --data %s --steps 2 --eval-task %s --keep-best task:nope --out %s", corpus,
                  tasks, other);
    cr_expect(rc == 2 && strstr(out, "nope"), "%d: %s", rc, out);
    cr_expect_neq(access(other, F_OK), 0, "the refused run left %s", other);
    free(out);
    rc = ckpt_cli(&out, "train " BUMPY_FLAGS " --data %s --steps 2 --keep-best task:a/b --out %s", corpus, other);
    cr_expect(rc == 2 && strstr(out, "expected task:NAME or task:NAME:acc_norm"), "%d: %s", rc, out);
    free(out);
    free(run), free(tasks), free(metrics), free(pointer), free(identity), free(other);
}

/* Two runs' folders end alike: the same newest checkpoint, `best` file and checkpoint files. */
static void expect_same_folders(const char *a, const char *b, int64_t step) {
    ckpt_expect_same_checkpoints(a, b, step);
    char fa[512], fb[512];
    checkpoint_files(a, fa, sizeof fa);
    checkpoint_files(b, fb, sizeof fb);
    cr_expect_str_eq(fa, fb);
    char *pa = datagen_path(a, "best"), *pb = datagen_path(b, "best");
    bool has_a = access(pa, F_OK) == 0, has_b = access(pb, F_OK) == 0;
    cr_expect_eq(has_a, has_b);
    if (has_a && has_b) {
        char *ta = ckpt_read_text(pa), *tb = ckpt_read_text(pb);
        cr_expect_str_eq(ta, tb);
        free(ta), free(tb);
    }
    free(pa), free(pb);
}

/* A straight run that stops early, and its twin stopped at `stop_after` (an evaluation's step),
 * resumed for one step (which ends with an evaluation the record must not count: a run that
 * never stopped makes none there) and resumed again, stop at the same step with the same
 * folder. */
static void early_stop_twice(const char *flags, int64_t (*stop_after)(int64_t best, int64_t stop), const char *name) {
    char straight_name[64], split_name[64];
    snprintf(straight_name, sizeof straight_name, "%s-straight", name);
    snprintf(split_name, sizeof split_name, "%s-split", name);
    char *straight = datagen_path(dir, straight_name), *split = datagen_path(dir, split_name), *out = NULL;
    int rc = ckpt_cli(&out, "train " BUMPY_FLAGS " --data %s --steps 60 --early-stop 3 %s --out %s", corpus, flags,
                      straight);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "stopped early (--early-stop 3: val_loss"), "%s", out);
    free(out);
    Eval e[64];
    int64_t stop, best = expected_best(e, evaluations(straight, e, 64), 3, &stop);
    cr_assert_gt(stop, 0, "the run never went 3 evaluations without a better val loss");
    cr_expect_eq(ckpt_latest_step(straight), stop);
    int64_t at = stop_after(best, stop);
    cr_assert(at % 2 == 0 && at + 1 < stop, "stop after %lld, the run stops at %lld", (long long)at, (long long)stop);
    rc = ckpt_cli(&out, "train " BUMPY_FLAGS " --data %s --steps 60 --early-stop 3 %s --stop-after %lld --out %s",
                  corpus, flags, (long long)at, split);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = ckpt_cli(&out, "train --resume %s --stop-after %lld", split, (long long)at + 1);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    /* --resume alone: train_options.txt holds --early-stop */
    rc = ckpt_cli(&out, "train --resume %s", split);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "stopped early"), "%s", out);
    free(out);
    ckpt_expect_same_metrics(straight, split, at, (int)(stop - at));
    expect_same_folders(straight, split, stop);
    /* resumed once more, it stops at once: the count is in its checkpoint */
    rc = ckpt_cli(&out, "train --resume %s", split);
    cr_expect(rc == 0 && strstr(out, "stopped early"), "%s", out);
    free(out);
    cr_expect_eq(ckpt_latest_step(split), stop);
    char *options = datagen_path(split, "train_options.txt"), *text = ckpt_read_text(options);
    cr_expect(strstr(text, "--early-stop 3\n"), "%s", text);
    free(text), free(options);
    free(straight), free(split);
}

/* the evaluation after the best: one counted */
static int64_t after_the_best(int64_t best, int64_t stop) { return best + 2; }
/* the evaluation before the stop: two counted */
static int64_t one_before_the_stop(int64_t best, int64_t stop) { return stop - 2; }

Test(keep_best_cli, an_early_stop_is_at_the_same_step_after_a_stop_and_resume, .init = setup, .fini = teardown,
     .timeout = 90) {
    early_stop_twice("--keep-best val_loss", after_the_best, "best");
    early_stop_twice("", one_before_the_stop, "plain");
    char *plain = datagen_path(dir, "plain-straight/best");
    cr_expect_neq(access(plain, F_OK), 0, "a run without --keep-best has no best pointer");
    free(plain);
}

Test(keep_best_cli, a_resume_may_change_the_patience_and_the_flags_need_evaluations, .init = setup, .fini = teardown,
     .timeout = 60) {
    char *run = datagen_path(dir, "run"), *none = datagen_path(dir, "none"), *out = NULL;
    int rc = ckpt_cli(&out, "train " BUMPY_FLAGS " --data %s --steps 40 --early-stop 1 --out %s", corpus, run);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    int64_t stopped = ckpt_latest_step(run);
    cr_assert_lt(stopped, 40, "--early-stop 1 did not stop the run");
    rc = ckpt_cli(&out, "train --resume %s --early-stop 0", run);
    cr_expect(rc == 0 && strstr(out, "done at step 40"), "%s", out);
    free(out);
    static const char *const lone[] = {"--keep-best val_bpb", "--early-stop 2", "--probe-prompts x.txt"};
    for (int i = 0; i < 3; i++) {
        rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 4 --eval-every 0 %s --out %s", corpus, lone[i],
                      none);
        cr_expect(rc == 2 && strstr(out, "acts at the evaluations of --eval-every"), "%s: %d %s", lone[i], rc, out);
        free(out);
        cr_expect_neq(access(none, F_OK), 0, "%s: a refused run leaves a folder", lone[i]);
    }
    free(run), free(none);
}

/* The steps of the evaluations that bettered the best before them, in order. */
static int new_bests(const Eval *e, int n, int64_t *steps, int cap) {
    int k = 0, best = -1;
    for (int i = 0; i < n && k < cap; i++)
        if (best < 0 || e[i].val < e[best].val) best = i, steps[k++] = e[i].step;
    return k;
}

/* The checkpoint RUN/best names on its first line ("" when there is no such file). */
static void best_named(const char *run, char *name, size_t cap) {
    char *pointer = datagen_path(run, "best");
    name[0] = '\0';
    if (access(pointer, F_OK) == 0) {
        char *text = ckpt_read_text(pointer);
        snprintf(name, cap, "%.*s", (int)strcspn(text, "\n"), text);
        free(text);
    }
    free(pointer);
}

/* A new best whose save fails (a full disk) is tried again at the next save; while it is not on
 * disk, `best` keeps naming the best checkpoint that is, --keep 1 never deletes that one, the
 * summary says which is which, and a resume leaves `best` alone. */
Test(keep_best_cli, a_best_whose_save_failed_is_said_and_best_names_a_checkpoint_on_disk, .init = setup,
     .fini = teardown, .timeout = 120) {
    char *ref = datagen_path(dir, "ref"), *out = NULL, files[512], expect[256], name[64], launcher[256];
    int rc = ckpt_cli(&out, "train " BUMPY_FLAGS " --data %s --steps 30 --keep-best val_loss --out %s", corpus, ref);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    Eval e[64];
    int64_t bests[64];
    int k = new_bests(e, evaluations(ref, e, 64), bests, 64);
    while (k > 0 && bests[k - 1] >= 30) k--; /* the last step's save failing fails the run: another test */
    cr_assert_geq(k, 2, "fewer than two new bests before step 30: the test shows nothing");
    int64_t failing = bests[k - 1], before = bests[k - 2];
    char failing_name[64], before_name[64];
    snprintf(failing_name, sizeof failing_name, "ckpt-%08lld.tgck", (long long)failing);
    snprintf(before_name, sizeof before_name, "ckpt-%08lld.tgck", (long long)before);

    /* the disk stays full for that file: both tries fail */
    char *run = datagen_path(dir, "full");
    snprintf(launcher, sizeof launcher, "TAPEGRAD_FAIL_WRITE=%s", failing_name);
    rc = ckpt_cli_faults(&out, launcher, "train " BUMPY_FLAGS " --data %s --steps 30 --keep-best val_loss --out %s",
                         corpus, run);
    cr_expect_eq(rc, 0, "%s", out);
    snprintf(expect, sizeof expect, "at step %lld) could not be saved, twice", (long long)failing);
    cr_expect(strstr(out, expect) && strstr(out, before_name), "%s", out);
    snprintf(expect, sizeof expect, "at step %lld was never saved (its save failed)", (long long)failing);
    cr_expect(strstr(out, expect), "%s", out);
    free(out);
    best_named(run, name, sizeof name);
    cr_expect_str_eq(name, before_name, "`best` must name the best checkpoint on disk");
    checkpoint_files(run, files, sizeof files);
    snprintf(expect, sizeof expect, "%s ckpt-00000030.tgck ", before_name);
    cr_expect_str_eq(files, expect, "--keep 1 deleted the checkpoint `best` names");
    rc = ckpt_cli(&out, "sample --run %s/best --tokens 4", run);
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    /* a resume does not point `best` at the checkpoint its record names but the disk lacks */
    rc = ckpt_cli(&out, "train --resume %s --steps 32", run);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "is not on disk (its save failed)"), "%s", out);
    free(out);
    best_named(run, name, sizeof name);
    cr_expect_str_eq(name, before_name);
    char *kept = datagen_path(run, before_name);
    cr_expect_eq(access(kept, F_OK), 0, "the resume deleted %s", kept);
    free(kept);

    /* full for a moment: the second try saves it */
    char *moment = datagen_path(dir, "moment");
    snprintf(launcher, sizeof launcher, "TAPEGRAD_FAIL_WRITE=%s TAPEGRAD_FAIL_WRITE_TIMES=1", failing_name);
    rc = ckpt_cli_faults(&out, launcher, "train " BUMPY_FLAGS " --data %s --steps 30 --keep-best val_loss --out %s",
                         corpus, moment);
    cr_expect_eq(rc, 0, "%s", out);
    snprintf(expect, sizeof expect, "at step %lld) was saved at a second try", (long long)failing);
    cr_expect(strstr(out, expect), "%s", out);
    cr_expect_null(strstr(out, "never saved"), "%s", out);
    free(out);
    best_named(moment, name, sizeof name);
    cr_expect_str_eq(name, failing_name);
    ckpt_expect_same_checkpoints(ref, moment, 30);
    free(ref), free(run), free(moment);
}

/* --keep-best task:NAME resumed with a file of that name but other content: the best record of the
 * old file is not compared with the new one's accuracies; the run says so and measures anew, and
 * `best` names the old best until a new one is saved. */
Test(keep_best_cli, a_task_file_changed_on_a_resume_starts_the_best_anew, .init = setup, .fini = teardown, .timeout = 90) {
    char *run = datagen_path(dir, "run"), *tasks = datagen_path(dir, "order.jsonl"), *out = NULL, name[64];
    FILE *f = fopen(tasks, "w");
    cr_assert_not_null(f);
    static const char *const good[] = {"the old man said", "a day and a day", "she said it was", "the time of day"};
    static const char *const bad[] = {"said man old the", "day a and day a", "was it said she", "day of time the"};
    static const char *const other[] = {"man the old said", "and a day a day", "said she it was", "time the of day"};
    for (int i = 0; i < 4; i++) fprintf(f, "{\"sentence_good\": \"%s\", \"sentence_bad\": \"%s\"}\n", good[i], bad[i]);
    fclose(f);
    int rc = ckpt_cli(&out, "train " BUMPY_FLAGS " --data %s --steps 16 --eval-task %s --keep-best task:order --stop-after 8 "
                      "--out %s", corpus, tasks, run);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *pointer = datagen_path(run, "best"), *before = ckpt_read_text(pointer);
    snprintf(name, sizeof name, "%.*s", (int)strcspn(before, "\n"), before);
    /* the same name, other pairs */
    f = fopen(tasks, "w");
    for (int i = 0; i < 4; i++) fprintf(f, "{\"sentence_good\": \"%s\", \"sentence_bad\": \"%s\"}\n", good[i], other[i]);
    fclose(f);
    rc = ckpt_cli(&out, "train --resume %s", run);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "the task 'order' of --keep-best is not the file it was when its best") &&
                  strstr(out, "the best record starts anew with this file"),
              "%s", out);
    free(out);
    /* the first evaluation after the resume (step 10) is the new file's first, so a best */
    char *after = ckpt_read_text(pointer);
    cr_expect_gt(strtoll(after + 5, NULL, 10), 8, "best still names %s after the resume:\n%s", name, after);
    /* resumed again with that file: nothing to say */
    rc = ckpt_cli(&out, "train --resume %s --steps 18", run);
    cr_expect(rc == 0 && !strstr(out, "starts anew"), "%s", out);
    free(out);
    free(before), free(after), free(pointer), free(run), free(tasks);
}

/* A run whose val loss climbs while its train loss falls (a model many times its few train tokens'
 * size, many passes over them) says it overfits, once, with the figures and what keeps the best
 * model, and again in its summary; a run whose val loss falls says nothing of it. */
Test(keep_best_cli, a_run_that_overfits_says_so, .init = setup, .fini = teardown, .timeout = 90) {
    char *text = datagen_english(5, 4000), *out = NULL, *run = datagen_path(dir, "over"), *fine = datagen_path(dir, "fine");
    datagen_write(dir, "few.txt", text, strlen(text));
    free(text);
    char *few = datagen_path(dir, "few.txt");
    int rc = ckpt_cli(&out, "train --preset small --layers 2 --batch 8 --threads 1 --eval-batches 2 --sample-tokens 0 --data %s "
                      "--steps 300 --eval-every 20 --out %s", few, run);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "warning: the val loss rose at 3 evaluations in a row") && strstr(out, "overfitting its train split") &&
                  strstr(out, "warning: overfitting: the val loss ended at"),
              "%s", out);
    free(out);
    rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 40 --eval-every 10 --out %s", corpus, fine);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect_null(strstr(out, "overfit"), "%s", out);
    free(out);
    free(run), free(fine), free(few);
}
