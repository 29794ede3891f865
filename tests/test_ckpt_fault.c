/* Crash safety: `tapegrad train --ckpt-every 1` is killed with SIGKILL at random moments (the
 * writer is busy nearly all the time, so most kills land inside a checkpoint write), 20 times
 * over, each time resuming the same run. After every kill `latest` must name a checkpoint that
 * loads (and passes `gzip -t`), no older than the one before, and the next --resume must start
 * from exactly that checkpoint. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckptutil.h"
#include "datagen.h"
#include "tapegrad/rng.h"
#include "testutil.h"
#include "checkpoint/checkpoint_folder.h"


enum { TRIALS = 20, MAX_DELAY_MS = 250 };

CKPT_SCRATCH_FIXTURE

static bool log_has(const char *log, const char *needle) {
    if (access(log, F_OK) != 0) return false;
    char *text = ckpt_read_text(log);
    bool found = strstr(text, needle) != NULL;
    free(text);
    return found;
}

Test(ckpt_fault, sigkill_at_random_moments_never_breaks_latest, .init = setup, .fini = teardown, .timeout = 240) {
    char *run = datagen_path(dir, "run"), *log = datagen_path(dir, "train.log"), *latest = datagen_path(run, "latest");
    bool have_gzip = test_run("gzip --version >/dev/null 2>&1") == 0;
    if (!have_gzip) fprintf(stderr, "\n*** ckpt_fault: gzip not installed, skipping the gzip -t checks ***\n");
    TgRng rng;
    tg_rng_seed(&rng, 20240611);
    int64_t last_step = -1;
    int killed_mid_write = 0;
    for (int trial = 0; trial < TRIALS; trial++) {
        char *fresh[] = {"tapegrad", "train", "--preset", "tiny", "--batch", "4", "--threads", "1", "--eval-batches", "2",
                         "--sample-tokens", "0", "--data", corpus, "--steps", "100000", "--eval-every", "0",
                         "--ckpt-every", "1", "--keep", "2", "--out", run, NULL};
        char *resume[] = {"tapegrad", "train", "--resume", run, NULL};
        pid_t pid = ckpt_spawn_cli(log, trial == 0 ? fresh : resume);
        /* until it trains (and, the first time, until a checkpoint exists), then a random delay */
        for (int i = 0; i < 6000 && !(log_has(log, "model:") && (trial > 0 || access(latest, F_OK) == 0)); i++) usleep(5000);
        int delay_ms = (int)tg_rng_below(&rng, MAX_DELAY_MS + 1);
        usleep((useconds_t)delay_ms * 1000);
        cr_assert_eq(kill(pid, SIGKILL), 0);
        int status;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        if (!WIFSIGNALED(status)) {
            char *text = ckpt_read_text(log);
            cr_assert_fail("trial %d: train ended by itself (status %d) before the kill:\n%s", trial, status, text);
        }
        killed_mid_write += test_count_tmp_files(run) > 0; /* a .tmp left behind: the kill hit a write */
        if (trial > 0) {
            char expect[64];
            snprintf(expect, sizeof expect, "resuming at step %lld ", (long long)last_step);
            cr_assert(log_has(log, expect), "trial %d: the resume did not start from the checkpoint `latest` named (step %lld)",
                      trial, (long long)last_step);
        }

        char path[4200];
        TgModel model;
        TgCheckpointInfo info;
        cr_assert_eq(tg_checkpoint_resolve(run, path, sizeof path), TG_OK, "trial %d (killed %d ms in): %s", trial, delay_ms,
                     tg_error_message());
        cr_assert_eq(ckpt_load_model(path, &model, &info), TG_OK, "trial %d (killed %d ms in): %s", trial, delay_ms,
                     tg_error_message());
        tg_model_free(&model);
        cr_assert_geq(info.state.step, last_step, "trial %d: latest went back from step %lld to %lld", trial,
                      (long long)last_step, (long long)info.state.step);
        last_step = info.state.step;
        if (have_gzip) {
            char cmd[4400];
            snprintf(cmd, sizeof cmd, "gzip -t %s", path);
            cr_assert_eq(test_run(cmd), 0, "trial %d: gzip -t %s failed", trial, path);
        }
    }
    fprintf(stderr, "ckpt_fault: %d kills, %d of them inside a checkpoint write; latest ended at step %lld\n", TRIALS,
            killed_mid_write, (long long)last_step);
    cr_expect_geq(killed_mid_write, 1, "no kill landed inside a checkpoint write: the test proves nothing");

    /* and the run goes on: a last resume finishes cleanly and removes the stray .tmp files */
    char *out = NULL;
    int rc = ckpt_cli(&out, "train --resume %s --stop-after %lld", run, (long long)last_step + 3);
    cr_assert_eq(rc, 0, "final resume failed:\n%s", out);
    free(out);
    char path[4200];
    TgModel model;
    TgCheckpointInfo info;
    cr_assert_eq(tg_checkpoint_resolve(run, path, sizeof path), TG_OK, "%s", tg_error_message());
    cr_assert_eq(ckpt_load_model(path, &model, &info), TG_OK, "%s", tg_error_message());
    cr_expect_eq(info.state.step, last_step + 3);
    cr_expect_eq(test_count_tmp_files(run), 0, "stray .tmp files after a clean run");
    /* steps logged after the last checkpoint of a killed run are dropped on resume: each step once */
    char *metrics = datagen_path(run, "metrics.jsonl");
    char *text = ckpt_read_text(metrics);
    int64_t expect_step = 1;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strstr(line, "\"loss\":")) continue;
        int64_t step = strtoll(strstr(line, "\"step\":") + 7, NULL, 10);
        cr_expect_eq(step, expect_step, "metrics.jsonl: step %lld where %lld was due", (long long)step, (long long)expect_step);
        expect_step = step + 1;
    }
    cr_expect_eq(expect_step, last_step + 4);
    free(text);
    free(metrics);
    tg_model_free(&model);
    free(run);
    free(log);
    free(latest);
}
