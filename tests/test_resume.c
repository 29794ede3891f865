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
#include "checkpoint/checkpoint_folder.h"


CKPT_SCRATCH_FIXTURE

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
    ckpt_expect_same_metrics(straight, split, 20, 20);
    ckpt_expect_same_checkpoints(straight, split, 40);
    free(straight);
    free(split);
}

Test(resume, sigterm_saves_at_the_step_reached_and_resumes_exactly, .init = setup, .fini = teardown, .timeout = 120) {
    char *run = datagen_path(dir, "run"), *log = datagen_path(dir, "train.log"), *metrics = datagen_path(run, "metrics.jsonl");
    char *args[] = {"tapegrad", "train", "--preset", "tiny", "--batch", "4", "--threads", "1", "--eval-batches", "2",
                    "--sample-tokens", "0", "--data", corpus, "--steps", "100000", "--eval-every", "0",
                    "--ckpt-every", "0", "--out", run, NULL};
    pid_t pid = ckpt_spawn_cli(log, args);
    /* let it train a while: at least 12 logged steps */
    for (int i = 0; i < 6000 && ckpt_count_lines(metrics) < 12; i++) usleep(5000);
    cr_assert_geq(ckpt_count_lines(metrics), 12, "the run logged no steps in 30 s");
    cr_assert_eq(kill(pid, SIGTERM), 0);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    char *text = ckpt_read_text(log);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "SIGTERM: status %d, output:\n%s", status, text);
    cr_assert(strstr(text, "stopped by SIGTERM"), "%s", text);
    free(text);

    /* the checkpoint is at the last step trained (the last line with a loss) */
    CkptMetricLine m[256];
    int n = ckpt_read_metrics(run, 0, m, 256);
    int64_t reached = m[n - 1].step;
    cr_assert_eq(n, reached, "metrics hold %d training lines up to step %lld", n, (long long)reached);
    char path[4200];
    TgModel model;
    TgCheckpointInfo info;
    cr_assert_eq(tg_checkpoint_resolve(run, path, sizeof path), TG_OK, "%s", tg_error_message());
    cr_assert_eq(ckpt_load_model(path, &model, &info), TG_OK, "%s", tg_error_message());
    cr_assert_eq(info.state.step, reached, "checkpoint at step %lld, the run reached %lld", (long long)info.state.step,
                 (long long)reached);
    tg_model_free(&model);

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
    ckpt_expect_same_metrics(straight, run, reached, 5);
    ckpt_expect_same_checkpoints(straight, run, target);
    free(straight);
    free(run);
    free(log);
    free(metrics);
}

/* The "grad_norm" values of a metrics.jsonl, one after another. */
static void grad_norms(const char *metrics, char *out, size_t cap) {
    for (const char *p = strstr(metrics, "\"grad_norm\":"); p; p = strstr(p + 1, "\"grad_norm\":")) {
        size_t len = strlen(out), n = strcspn(p + 12, ",}");
        if (len + n + 2 < cap) snprintf(out + len, cap - len, "%.*s ", (int)n, p + 12);
    }
}

/* run.txt records the GEMMs' k slice and a resume uses it, not this CPU's: a run trained with
 * --gemm-kc 64 (this machine's is larger), stopped and resumed with no flag, logs and ends as its
 * straight twin; and kc 64 does change the sums (its gradient norms differ from the CPU's kc), so
 * a resume that took the CPU's kc would fail here. */
Test(resume, a_resume_sums_with_the_k_slice_the_run_recorded, .init = setup, .fini = teardown, .timeout = 120) {
    char *straight = datagen_path(dir, "kc-straight"), *split = datagen_path(dir, "kc-split"),
         *native = datagen_path(dir, "kc-native"), *out = NULL;
    const char *flags = "train " CKPT_TEST_FLAGS " --data %s --steps 16 --eval-every 8 --ckpt-every 0 %s --out %s";
    cr_assert_eq(ckpt_cli(&out, flags, corpus, "--gemm-kc 64", straight), 0, "%s", out);
    free(out);
    cr_assert_eq(ckpt_cli(&out, flags, corpus, "--gemm-kc 64 --stop-after 8", split), 0, "%s", out);
    free(out);
    cr_assert_eq(ckpt_cli(&out, flags, corpus, "", native), 0, "%s", out);
    free(out);
    char *run_txt = datagen_path(split, "run.txt"), *text = ckpt_read_text(run_txt);
    cr_expect(strstr(text, "--gemm-kc 64\n"), "run.txt does not record the k slice:\n%s", text);
    free(text), free(run_txt);
    cr_assert_eq(ckpt_cli(&out, "train --resume %s", split), 0, "resume failed:\n%s", out);
    free(out);
    ckpt_expect_same_metrics(straight, split, 8, 8);
    ckpt_expect_same_checkpoints(straight, split, 16);
    /* the CPU's kc gives other gradient norms */
    char *a_path = datagen_path(straight, "metrics.jsonl"), *b_path = datagen_path(native, "metrics.jsonl");
    char *a = ckpt_read_text(a_path), *b = ckpt_read_text(b_path), norms_a[4096] = "", norms_b[4096] = "";
    grad_norms(a, norms_a, sizeof norms_a);
    grad_norms(b, norms_b, sizeof norms_b);
    cr_expect(norms_a[0] && strcmp(norms_a, norms_b) != 0,
              "kc 64 and this CPU's kc gave the same gradient norms (%s): the test cannot tell them apart", norms_a);
    free(a), free(b), free(a_path), free(b_path);
    free(straight), free(split), free(native);
}

/* run.txt and train_options.txt as tapegrad wrote them before the options were split into their
 * concerns (commit ee66c73), for this test's flags; %s is the corpus. */
static const char EARLIER_RUN_TXT[] = "--task pretrain\n--preset tiny\n--data %s\n--tokenizer char\n"
                                      "--val-fraction 0.10000000000000001\n--seed 1337\n--gemm-kc 64\n--lora-rank 0\n"
                                      "--lora-alpha 0\n--precision fp32\n--keep-best none\n";
static const char RULE_LINE[] = "--ffn-hidden-rule eight-thirds\n";
static const char EARLIER_TRAIN_OPTIONS_TXT[] =
    "--steps 16\n--batch 4\n--accum 1\n--lr 0.0030000000000000001\n--min-lr 0.00030000000000000003\n--warmup 0\n"
    "--weight-decay 0.10000000000000001\n--beta1 0.90000000000000002\n--beta2 0.94999999999999996\n--clip 1\n"
    "--eval-every 8\n--eval-batches 2\n--log-every 10\n--ckpt-every 0\n--keep 3\n--early-stop 0\n--probe-tokens 32\n"
    "--sample-tokens 0\n--threads 1\n";

/* A run folder written by an earlier layout of the options resumes bitwise: the files this build
 * writes are those of the earlier layout, byte for byte (a change to them must keep reading the
 * old ones, and this test then holds the old text), and a run stopped at step 8 whose files are
 * replaced by the earlier text resumes to the very losses, weights and moments of its straight
 * twin. */
Test(resume, a_run_folder_of_the_earlier_options_layout_resumes_bitwise, .init = setup, .fini = teardown,
     .timeout = 120) {
    char *straight = datagen_path(dir, "old-straight"), *split = datagen_path(dir, "old-split"), *out = NULL;
    const char *flags = "train " CKPT_TEST_FLAGS " --data %s --steps 16 --eval-every 8 --ckpt-every 0 --gemm-kc 64 %s --out %s";
    cr_assert_eq(ckpt_cli(&out, flags, corpus, "", straight), 0, "%s", out);
    free(out);
    cr_assert_eq(ckpt_cli(&out, flags, corpus, "--stop-after 8", split), 0, "%s", out);
    free(out);
    char *run_txt = datagen_path(split, "run.txt"), *options_txt = datagen_path(split, "train_options.txt");
    char earlier[4096];
    snprintf(earlier, sizeof earlier, EARLIER_RUN_TXT, corpus);
    /* run.txt has one line more since then, the FFN hidden rule (which an earlier run.txt leaves at
     * eight-thirds, the rule every earlier run had) */
    char *written = ckpt_read_text(run_txt), *rule = strstr(written, RULE_LINE);
    cr_expect_not_null(rule, "run.txt records no FFN hidden rule:\n%s", written);
    if (rule) memmove(rule, rule + strlen(RULE_LINE), strlen(rule + strlen(RULE_LINE)) + 1);
    cr_expect_str_eq(written, earlier, "run.txt is not as the earlier layout wrote it, the rule aside");
    free(written);
    written = ckpt_read_text(options_txt);
    cr_expect_str_eq(written, EARLIER_TRAIN_OPTIONS_TXT, "train_options.txt is not as the earlier layout wrote it");
    free(written);
    ckpt_write_file(run_txt, earlier, strlen(earlier));
    ckpt_write_file(options_txt, EARLIER_TRAIN_OPTIONS_TXT, strlen(EARLIER_TRAIN_OPTIONS_TXT));
    cr_assert_eq(ckpt_cli(&out, "train --resume %s", split), 0, "resume failed:\n%s", out);
    cr_expect(strstr(out, "resuming at step 8 of 16"), "%s", out);
    free(out);
    ckpt_expect_same_metrics(straight, split, 8, 8);
    ckpt_expect_same_checkpoints(straight, split, 16);
    free(run_txt), free(options_txt), free(straight), free(split);
}
