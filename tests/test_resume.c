/* Exact resume, through the CLI: a run stopped at step 20 (--stop-after) and resumed to 40 logs
 * the very same losses as a run that never stopped, and ends with the very same weights and
 * AdamW moments, bit for bit. The same after a SIGTERM at an arbitrary step. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ckptutil.h"
#include "datagen.h"
#include "train/checkpoint_folder.h"


static char *dir, *corpus;
static void setup(void) { dir = ckpt_test_setup(&corpus); }
static void teardown(void) {
    datagen_remove_tree(dir);
    free(dir);
    free(corpus);
}

/* The raw text of "key":value in a metrics line ("" when absent). */
static void field(const char *line, const char *key, char *out, size_t cap) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *p = strstr(line, pattern);
    out[0] = '\0';
    if (!p) return;
    p += strlen(pattern);
    size_t n = strcspn(p, ",}");
    if (n >= cap) n = cap - 1;
    memcpy(out, p, n);
    out[n] = '\0';
}

typedef struct {
    int64_t step;
    char loss[40], val_loss[40], lr[40], grad_norm[40];
} MetricLine;

/* The training lines (those with a loss) of DIR/metrics.jsonl with step > after. */
static int read_metrics(const char *run, int64_t after, MetricLine *out, int cap) {
    char path[512], line[1024];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s missing", path);
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        MetricLine m;
        char step[32];
        field(line, "step", step, sizeof step);
        m.step = strtoll(step, NULL, 10);
        field(line, "loss", m.loss, sizeof m.loss);
        if (m.step <= after || !m.loss[0]) continue;
        field(line, "val_loss", m.val_loss, sizeof m.val_loss);
        field(line, "lr", m.lr, sizeof m.lr);
        field(line, "grad_norm", m.grad_norm, sizeof m.grad_norm);
        cr_assert_lt(n, cap);
        out[n++] = m;
    }
    fclose(f);
    return n;
}

static void expect_same_metrics(const char *a, const char *b, int64_t after, int expected_lines) {
    MetricLine ma[256], mb[256];
    int na = read_metrics(a, after, ma, 256), nb = read_metrics(b, after, mb, 256);
    cr_assert_eq(na, expected_lines, "%s: %d training lines after step %lld, expected %d", a, na, (long long)after,
                 expected_lines);
    cr_assert_eq(nb, expected_lines, "%s: %d training lines after step %lld, expected %d", b, nb, (long long)after,
                 expected_lines);
    for (int i = 0; i < na; i++) {
        cr_assert_eq(ma[i].step, mb[i].step);
        cr_expect_str_eq(ma[i].loss, mb[i].loss, "step %lld: loss %s straight, %s resumed", (long long)ma[i].step,
                         ma[i].loss, mb[i].loss);
        cr_expect_str_eq(ma[i].val_loss, mb[i].val_loss, "step %lld: val loss", (long long)ma[i].step);
        cr_expect_str_eq(ma[i].lr, mb[i].lr, "step %lld: lr", (long long)ma[i].step);
        cr_expect_str_eq(ma[i].grad_norm, mb[i].grad_norm, "step %lld: grad norm", (long long)ma[i].step);
    }
}

/* The newest checkpoints of two run folders hold bitwise the same model and trainer state. */
static void expect_same_checkpoints(const char *a, const char *b, int64_t step) {
    char pa[4200], pb[4200];
    cr_assert_eq(checkpoint_resolve(a, pa, sizeof pa), TG_OK, "%s", tg_error_message());
    cr_assert_eq(checkpoint_resolve(b, pb, sizeof pb), TG_OK, "%s", tg_error_message());
    Model ma, mb;
    CheckpointInfo ia, ib;
    cr_assert_eq(ckpt_load_model(pa, &ma, &ia), TG_OK, "%s", tg_error_message());
    cr_assert_eq(ckpt_load_model(pb, &mb, &ib), TG_OK, "%s", tg_error_message());
    cr_assert_eq(ia.state.step, step, "%s is at step %lld", pa, (long long)ia.state.step);
    cr_assert_eq(ib.state.step, step, "%s is at step %lld", pb, (long long)ib.state.step);
    cr_expect(ckpt_models_equal(&ma, &mb), "%s and %s hold different weights or moments", pa, pb);
    cr_expect_eq(ia.state.tokens_seen, ib.state.tokens_seen);
    cr_expect_eq(memcmp(&ia.state.loader, &ib.state.loader, sizeof ia.state.loader), 0, "loader states differ");
    cr_expect_eq(memcmp(&ia.state.best_val_loss, &ib.state.best_val_loss, sizeof(double)), 0, "best val losses differ");
    model_free(&ma);
    model_free(&mb);
}

Test(resume, stop_at_20_and_resume_to_40_is_bitwise_the_straight_run, .init = setup, .fini = teardown, .timeout = 120) {
    char *straight = datagen_path(dir, "straight"), *split = datagen_path(dir, "split"), *out = NULL;
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 40 --eval-every 10 --ckpt-every 0 --out %s",
                      corpus, straight);
    cr_assert_eq(rc, 0, "straight run failed:\n%s", out);
    free(out);
    /* the split run also saves in the background every 5 steps: saving must not disturb training */
    rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 40 --eval-every 10 --ckpt-every 5 --stop-after 20 --out %s",
                  corpus, split);
    cr_assert_eq(rc, 0, "run stopped at 20 failed:\n%s", out);
    cr_assert(strstr(out, "stopped as asked (--stop-after) at step 20"), "%s", out);
    free(out);
    /* --resume alone: the run folder remembers --steps, --batch, --threads, ... */
    rc = ckpt_cli(&out, "train --resume %s", split);
    cr_assert_eq(rc, 0, "resume failed:\n%s", out);
    cr_assert(strstr(out, "resuming at step 20 of 40"), "%s", out);
    free(out);
    expect_same_metrics(straight, split, 20, 20);
    expect_same_checkpoints(straight, split, 40);
    free(straight);
    free(split);
}

static int count_lines(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

Test(resume, sigterm_saves_at_the_step_reached_and_resumes_exactly, .init = setup, .fini = teardown, .timeout = 120) {
    char *run = datagen_path(dir, "run"), *log = datagen_path(dir, "train.log"), *metrics = datagen_path(run, "metrics.jsonl");
    char *args[] = {"tapegrad", "train", "--preset", "tiny", "--batch", "4", "--threads", "1", "--eval-batches", "2",
                    "--sample-tokens", "0", "--data", corpus, "--steps", "100000", "--eval-every", "0",
                    "--ckpt-every", "0", "--out", run, NULL};
    pid_t pid = ckpt_spawn_cli(log, args);
    /* let it train a while: at least 12 logged steps */
    for (int i = 0; i < 6000 && count_lines(metrics) < 12; i++) usleep(5000);
    cr_assert_geq(count_lines(metrics), 12, "the run logged no steps in 30 s");
    cr_assert_eq(kill(pid, SIGTERM), 0);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    size_t len;
    char *text = (char *)ckpt_read_file(log, &len);
    text = realloc(text, len + 1);
    text[len] = '\0';
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "SIGTERM: status %d, output:\n%s", status, text);
    cr_assert(strstr(text, "stopped by SIGTERM"), "%s", text);
    free(text);

    /* the checkpoint is at the last step trained (the last line with a loss) */
    MetricLine m[256];
    int n = read_metrics(run, 0, m, 256);
    int64_t reached = m[n - 1].step;
    cr_assert_eq(n, reached, "metrics hold %d training lines up to step %lld", n, (long long)reached);
    char path[4200];
    Model model;
    CheckpointInfo info;
    cr_assert_eq(checkpoint_resolve(run, path, sizeof path), TG_OK, "%s", tg_error_message());
    cr_assert_eq(ckpt_load_model(path, &model, &info), TG_OK, "%s", tg_error_message());
    cr_assert_eq(info.state.step, reached, "checkpoint at step %lld, the run reached %lld", (long long)info.state.step,
                 (long long)reached);
    model_free(&model);

    /* resume 5 more steps; a run that never stopped and stops there gives the same */
    char *out = NULL;
    int64_t target = reached + 5;
    int rc = ckpt_cli(&out, "train --resume %s --stop-after %lld", run, (long long)target);
    cr_assert_eq(rc, 0, "resume after SIGTERM failed:\n%s", out);
    free(out);
    char *straight = datagen_path(dir, "straight");
    rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --steps 100000 --eval-every 0 --ckpt-every 0 --stop-after %lld --out %s",
                  corpus, (long long)target, straight);
    cr_assert_eq(rc, 0, "straight run failed:\n%s", out);
    free(out);
    expect_same_metrics(straight, run, reached, 5);
    expect_same_checkpoints(straight, run, target);
    free(straight);
    free(run);
    free(log);
    free(metrics);
}
