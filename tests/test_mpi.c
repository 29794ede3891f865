/* Data-parallel training on 2 ranks, through mpirun (Open MPI), as a user runs it:
 *   - 2 ranks with --batch B log bitwise what one process logs with --batch B --accum 2, and end
 *     with bitwise the same weights, AdamW moments and loader state; fine-tuning too (packed
 *     conversations, the loss per trained token over both ranks' micro-batches);
 *   - two 2-rank runs are bitwise the same;
 *   - a 2-rank run stopped and resumed (on 2 ranks, or on 1 with --accum 2) is bitwise the run
 *     that never stopped;
 *   - SIGTERM to mpirun: both ranks stop after the same step, rank 0 saves there, both exit 0;
 *     SIGUSR1 to mpirun: the same, and mpirun exits 0 too;
 *   - a rank killed with SIGKILL ends the job, and `latest` names a checkpoint that loads;
 *   - a rank that hangs ends the job after --comm-timeout;
 *   - replicas whose weights drift apart are caught by the checksum compared at checkpoints.
 * Built only when CMake found Open MPI (its mpirun flags are used below). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "support/clock.h"
#include "ckptutil.h"
#include "datagen.h"
#include "checkpoint/checkpoint_folder.h"

#ifndef TAPEGRAD_MPIEXEC
#error "TAPEGRAD_MPIEXEC must name Open MPI's mpirun"
#endif

CKPT_SCRATCH_FIXTURE

/* mpirun for 2 ranks here: --oversubscribe (the machine may count fewer slots), no binding to
 * cores (other tests share them), --allow-run-as-root when the tests run as root (CI). */
enum { LAUNCHER_ARGS = 8 };
static int launcher_argv(char *argv[LAUNCHER_ARGS]) {
    int n = 0;
    argv[n++] = TAPEGRAD_MPIEXEC;
    argv[n++] = "-np";
    argv[n++] = "2";
    argv[n++] = "--oversubscribe";
    argv[n++] = "--bind-to";
    argv[n++] = "none";
    if (geteuid() == 0) argv[n++] = "--allow-run-as-root";
    return n;
}

static const char *launcher(void) {
    static char line[512];
    char *argv[LAUNCHER_ARGS];
    int n = launcher_argv(argv);
    line[0] = '\0';
    for (int i = 0; i < n; i++) snprintf(line + strlen(line), sizeof line - strlen(line), "%s%s", i ? " " : "", argv[i]);
    return line;
}

#define TWO_RANKS(out, ...) ckpt_cli_launched(out, launcher(), __VA_ARGS__)

/* The pid of the process of `rank` whose command line holds `marker` (its run folder), or 0. */
static pid_t rank_pid(const char *marker, int rank) {
    DIR *d = opendir("/proc");
    cr_assert_not_null(d);
    char want[64];
    snprintf(want, sizeof want, "OMPI_COMM_WORLD_RANK=%d", rank);
    pid_t found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 0 || pid == getpid()) continue;
        char path[64], buf[65536];
        size_t n;
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        for (size_t i = 0; i < n; i++) buf[i] = buf[i] ? buf[i] : ' ';
        buf[n] = '\0';
        if (!strstr(buf, TAPEGRAD_BIN " train") || !strstr(buf, marker)) continue;
        snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
        if (!(f = fopen(path, "r"))) continue;
        n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        for (size_t i = 0; i < n && !found; i += strlen(buf + i) + 1) found = strcmp(buf + i, want) == 0 ? pid : 0;
    }
    closedir(d);
    return found;
}

/* Whether rank `rank` of the job whose command line holds `marker` has ended within `seconds`: a
 * rank that mpirun ended may still be exiting, or wait to be reaped by its new parent, for a
 * moment after mpirun itself returned (a zombie counts as ended: it runs nothing). */
static bool rank_ends_within(const char *marker, int rank, double seconds) {
    for (double waited = 0;; waited += 0.05) {
        pid_t pid = rank_pid(marker, rank);
        if (pid == 0) return true;
        char path[64], state = '?';
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "r");
        if (f) {
            /* "PID (COMM) STATE ...": the state follows the last ')' */
            char buf[1024];
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            buf[n] = '\0';
            char *paren = strrchr(buf, ')');
            if (paren && paren[1] == ' ') state = paren[2];
            fclose(f);
        }
        if (!f || state == 'Z' || state == 'X') return true;
        if (waited >= seconds) return false;
        usleep(50000);
    }
}

/* Waits up to `seconds` for pid; its wait status, or -1 (and it is killed) when it is still
 * running then: a job that does not end is the failure these tests look for. */

#define FLAGS CKPT_TEST_FLAGS " --data %s --steps 50 --eval-every 25"

/* Trains 50 steps into RUN through `launcher` ("" for one process) with FLAGS and `extra`. */
static void train_50_steps(const char *launcher, const char *extra, const char *run) {
    char *out = NULL;
    int rc = ckpt_cli_launched(&out, launcher, "train " FLAGS " %s --ckpt-every 0 --out %s", corpus, extra, run);
    cr_assert_eq(rc, 0, "`%s tapegrad train ... %s` failed:\n%s", launcher, extra, out);
    if (launcher[0]) cr_assert(strstr(out, " x 2 ranks = "), "not one job of 2 ranks:\n%s", out);
    free(out);
}

/* Two such runs into DIR/a and DIR/b are bitwise the same. */
static void expect_same_runs(const char *launcher_a, const char *extra_a, const char *launcher_b, const char *extra_b) {
    char *a = datagen_path(dir, "a"), *b = datagen_path(dir, "b");
    train_50_steps(launcher_a, extra_a, a);
    train_50_steps(launcher_b, extra_b, b);
    ckpt_expect_same_metrics(a, b, 0, 50);
    ckpt_expect_same_checkpoints(a, b, 50);
    free(a);
    free(b);
}

Test(mpi, two_ranks_log_bitwise_what_one_process_logs_with_accum_2, .init = setup, .fini = teardown, .timeout = 120) {
    expect_same_runs(launcher(), "", "", "--accum 2");
}

/* A base run whose tokenizer has the ChatML markers (2 steps), for fine-tuning and DPO. */
static char *chatml_base(void) {
    char *base = datagen_path(dir, "base"), *out = NULL;
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --tokenizer bpe --vocab 300 --special-tokens chatml --steps 2 "
                            "--eval-every 0 --out %s",
                      corpus, base);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    return base;
}

/* tapegrad sft on 2 ranks: each rank's micro-batch weighs its share of the step's trained tokens,
 * counted over both ranks, as one process with --accum 2 weighs its two. */
Test(mpi, fine_tuning_on_two_ranks_is_bitwise_one_process_with_accum_2, .init = setup, .fini = teardown,
     .timeout = 120) {
    char *base = chatml_base(), *a = datagen_path(dir, "a"), *b = datagen_path(dir, "b"), *out = NULL;
    int rc;
    char text[8192];
    size_t n = 0;
    for (int i = 0; i < 30; i++)
        n += (size_t)snprintf(text + n, sizeof text - n,
                              "{\"conversations\": [{\"role\": \"user\", \"content\": \"q%d\"}, {\"role\": \"assistant\", "
                              "\"content\": \"%s\"}]}\n",
                              i, i % 3 ? "short" : "a longer reply of several words");
    datagen_write(dir, "c.jsonl", text, n);
    char *data = datagen_path(dir, "c.jsonl");
    rc = ckpt_cli(&out, "sft " CKPT_TEST_FLAGS " --init-from %s --data %s --seq 48 --steps 8 --eval-every 4 --accum 2 --out %s",
                  base, data, a);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = TWO_RANKS(&out, "sft " CKPT_TEST_FLAGS " --init-from %s --data %s --seq 48 --steps 8 --eval-every 4 --out %s", base,
                   data, b);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, " x 2 ranks = "), "not one job of 2 ranks:\n%s", out);
    free(out);
    ckpt_expect_same_metrics(a, b, 0, 8);
    ckpt_expect_same_checkpoints(a, b, 8);
    /* and with LoRA adapters on the frozen base: the ranks sum the adapters' gradients alone */
    char *la = datagen_path(dir, "lora-a"), *lb = datagen_path(dir, "lora-b");
    rc = ckpt_cli(&out, "sft " CKPT_TEST_FLAGS " --init-from %s --data %s --seq 48 --steps 8 --eval-every 4 --lora-rank 4 "
                        "--accum 2 --out %s", base, data, la);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = TWO_RANKS(&out, "sft " CKPT_TEST_FLAGS " --init-from %s --data %s --seq 48 --steps 8 --eval-every 4 --lora-rank 4 "
                         "--out %s", base, data, lb);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    ckpt_expect_same_metrics(la, lb, 0, 8);
    free(base), free(a), free(b), free(data), free(la), free(lb);
}

/* tapegrad dpo on 2 ranks: each rank draws its pairs, looks up their reference and shares its
 * batch's figures, as one process with --accum 2 does with its two micro-batches. */
Test(mpi, dpo_on_two_ranks_is_bitwise_one_process_with_accum_2, .init = setup, .fini = teardown, .timeout = 120) {
    char *base = chatml_base(), *a = datagen_path(dir, "a"), *b = datagen_path(dir, "b"), *out = NULL;
    int rc;
    char text[16384];
    size_t n = 0;
    for (int i = 0; i < 30; i++)
        n += (size_t)snprintf(text + n, sizeof text - n,
                              "{\"chosen\": [{\"role\": \"user\", \"content\": \"q%d\"}, {\"role\": \"assistant\", "
                              "\"content\": \"%s\"}], \"rejected\": [{\"role\": \"user\", \"content\": \"q%d\"}, "
                              "{\"role\": \"assistant\", \"content\": \"no\"}]}\n",
                              i, i % 3 ? "short" : "a longer reply of several words", i);
    datagen_write(dir, "p.jsonl", text, n);
    char *data = datagen_path(dir, "p.jsonl");
    const char *flags = "dpo " CKPT_TEST_FLAGS " --init-from %s --data %s --batch 2 --seq 48 --lr 3e-3 --steps 8 "
                        "--eval-every 4 %s --out %s";
    rc = ckpt_cli(&out, flags, base, data, "--accum 2", a);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = TWO_RANKS(&out, flags, base, data, "", b);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, " x 2 ranks = "), "not one job of 2 ranks:\n%s", out);
    free(out);
    ckpt_expect_same_metrics(a, b, 0, 8);
    ckpt_expect_same_checkpoints(a, b, 8);
    char *ma = datagen_path(a, "metrics.jsonl"), *mb = datagen_path(b, "metrics.jsonl");
    char *ta = ckpt_read_text(ma), *tb = ckpt_read_text(mb);
    const char *at = strstr(ta, "\"margin\":"), *bt = strstr(tb, "\"margin\":");
    cr_expect(at && bt && strncmp(at, bt, strcspn(at, "}")) == 0, "step 1's DPO figures differ:\n%s\n%s", ta, tb);
    free(ta), free(tb), free(ma), free(mb);
    free(base), free(a), free(b), free(data);
}

Test(mpi, two_ranks_are_bitwise_reproducible, .init = setup, .fini = teardown, .timeout = 120) {
    expect_same_runs(launcher(), "", launcher(), "");
}

/* Stopped at 20 on 2 ranks (saving in the background every 5 steps), then resumed on 2 ranks,
 * and a copy resumed on 1 process with --accum 2: each is the run that never stopped. */
Test(mpi, resume_on_2_ranks_or_on_1_with_accum_2_is_bitwise_the_straight_run, .init = setup, .fini = teardown,
     .timeout = 120) {
    char *straight = datagen_path(dir, "straight"), *split = datagen_path(dir, "split"),
         *moved = datagen_path(dir, "moved"), *out = NULL;
    int rc = TWO_RANKS(&out, "train " FLAGS " --ckpt-every 0 --out %s", corpus, straight);
    cr_assert_eq(rc, 0, "straight run failed:\n%s", out);
    free(out);
    rc = TWO_RANKS(&out, "train " FLAGS " --ckpt-every 5 --stop-after 20 --out %s", corpus, split);
    cr_assert_eq(rc, 0, "run stopped at 20 failed:\n%s", out);
    free(out);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cp -r %s %s", split, moved);
    cr_assert_eq(system(cmd), 0);
    rc = TWO_RANKS(&out, "train --resume %s", split);
    cr_assert_eq(rc, 0, "resume on 2 ranks failed:\n%s", out);
    cr_assert(strstr(out, "resuming at step 20 of 50"), "%s", out);
    free(out);
    rc = ckpt_cli(&out, "train --resume %s --accum 2", moved);
    cr_assert_eq(rc, 0, "resume on 1 process failed:\n%s", out);
    free(out);
    ckpt_expect_same_metrics(straight, split, 20, 30);
    ckpt_expect_same_checkpoints(straight, split, 50);
    ckpt_expect_same_metrics(straight, moved, 20, 30);
    ckpt_expect_same_checkpoints(straight, moved, 50);
    free(straight);
    free(split);
    free(moved);
}

/* Open MPI's mpirun, sent SIGTERM, stops reading the ranks' output at once, passes SIGTERM on to
 * every rank odls_base_sigkill_timeout seconds later and kills them as long again after that: 5 s
 * here leaves a loaded machine, or a sanitized build, time to finish the step and save. A line
 * every step fills rank 0's stdout pipe in those seconds, so a rank that wrote to it itself would
 * block there and be killed unsaved (cli/output.h). Each rank runs under `sh -c`, which ignores
 * the signal and records the rank's exit status; what rank 0 said is in the run's log, since
 * mpirun no longer passes it on. */
Test(mpi, sigterm_to_mpirun_stops_every_rank_after_the_same_step_and_saves, .init = setup, .fini = teardown,
     .timeout = 120) {
    char *run = datagen_path(dir, "run"), *log = datagen_path(dir, "train.log"), *metrics = datagen_path(run, "metrics.jsonl"),
         *status_path = datagen_path(dir, "status"), script[8192];
    snprintf(script, sizeof script, "trap '' TERM INT; \"$0\" \"$@\"; echo \"rank $OMPI_COMM_WORLD_RANK exit $?\" >> %s",
             status_path);
    char *argv[64];
    int n = launcher_argv(argv);
    char *rest[] = {"--mca", "odls_base_sigkill_timeout", "5", "/bin/sh", "-c", script, TAPEGRAD_BIN, "train",
                    "--preset", "tiny", "--batch", "4", "--threads", "1", "--eval-batches", "2", "--sample-tokens", "0",
                    "--data", corpus, "--steps", "100000", "--eval-every", "0", "--ckpt-every", "0", "--log-every", "1",
                    "--out", run, NULL};
    memcpy(argv + n, rest, sizeof rest);
    pid_t pid = ckpt_spawn(TAPEGRAD_MPIEXEC, log, argv);
    for (int i = 0; i < 6000 && ckpt_count_lines(metrics) < 12; i++) usleep(5000);
    cr_assert_geq(ckpt_count_lines(metrics), 12, "the run logged no steps in 30 s");
    cr_assert_eq(kill(pid, SIGTERM), 0);
    cr_assert_neq(ckpt_wait_at_most(pid, 60), -1, "mpirun did not end within 60 s of SIGTERM");
    char *run_log = datagen_path(run, "log.txt");
    char *text = ckpt_read_text(run_log), *statuses = ckpt_read_text(status_path);
    free(run_log);
    cr_assert(strstr(text, "stopped by SIGTERM"), "%s", text);
    cr_assert(strstr(statuses, "rank 0 exit 0") && strstr(statuses, "rank 1 exit 0"),
              "not every rank exited 0:\n%s\noutput:\n%s", statuses, text);
    free(text);
    free(statuses);
    /* the checkpoint is at the last step trained (test_resume.c shows a resume from it exact) */
    enum { MAX_LINES = 100000 };
    CkptMetricLine *m = malloc(MAX_LINES * sizeof *m);
    int lines = ckpt_read_metrics(run, 0, m, MAX_LINES);
    int64_t reached = m[lines - 1].step;
    cr_assert_eq(lines, reached, "metrics hold %d training lines up to step %lld", lines, (long long)reached);
    cr_assert_eq(ckpt_latest_step(run), reached);
    free(m);
    free(run);
    free(log);
    free(metrics);
    free(status_path);
}

/* Starts a long 2-rank run that saves every 2 steps into RUN; returns mpirun's pid once both
 * ranks run and `latest` exists. */
static pid_t start_saving_job(const char *run, const char *log, const char *comm_timeout) {
    char *argv[64];
    int n = launcher_argv(argv);
    char *rest[] = {TAPEGRAD_BIN, "train", "--preset", "tiny", "--batch", "4", "--threads", "1", "--eval-batches", "2",
                    "--sample-tokens", "0", "--data", corpus, "--steps", "100000", "--eval-every", "0",
                    "--ckpt-every", "2", "--keep", "2", "--comm-timeout", (char *)comm_timeout, "--out", (char *)run,
                    NULL};
    memcpy(argv + n, rest, sizeof rest);
    pid_t pid = ckpt_spawn(TAPEGRAD_MPIEXEC, log, argv);
    char latest[4200];
    snprintf(latest, sizeof latest, "%s/latest", run);
    for (int i = 0; i < 6000 && access(latest, F_OK) != 0; i++) usleep(5000);
    cr_assert_eq(access(latest, F_OK), 0, "no checkpoint within 30 s");
    return pid;
}

/* SIGUSR1 to mpirun, which passes it on and lets the job end by itself: the ranks stop after the
 * same step, rank 0 saves there, and mpirun itself exits 0. */
Test(mpi, sigusr1_to_mpirun_stops_the_job_cleanly, .init = setup, .fini = teardown, .timeout = 120) {
    char *run = datagen_path(dir, "run"), *log = datagen_path(dir, "train.log");
    pid_t job = start_saving_job(run, log, "300");
    cr_assert_eq(kill(job, SIGUSR1), 0);
    int status = ckpt_wait_at_most(job, 60);
    char *text = ckpt_read_text(log);
    cr_assert(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "mpirun: status %d\n%s", status, text);
    cr_assert(strstr(text, "stopped by SIGUSR1"), "%s", text);
    CkptMetricLine *m = malloc(100000 * sizeof *m);
    int lines = ckpt_read_metrics(run, 0, m, 100000);
    cr_assert_eq(ckpt_latest_step(run), m[lines - 1].step, "the checkpoint is not at the last step trained");
    free(m);
    free(text);
    free(run);
    free(log);
}

/* Killing rank 0, the one that writes checkpoints, while it saves every 2 steps. */
Test(mpi, a_killed_rank_ends_the_job_and_latest_still_loads, .init = setup, .fini = teardown, .timeout = 120) {
    char *run = datagen_path(dir, "run"), *log = datagen_path(dir, "train.log");
    pid_t job = start_saving_job(run, log, "300");
    pid_t rank0 = rank_pid(run, 0), rank1 = rank_pid(run, 1);
    cr_assert(rank0 > 0 && rank1 > 0, "ranks not found (%d, %d)", (int)rank0, (int)rank1);
    usleep(200000);
    cr_assert_eq(kill(rank0, SIGKILL), 0);
    int status = ckpt_wait_at_most(job, 60);
    cr_assert_neq(status, -1, "the job did not end within 60 s of a rank's death");
    cr_assert(!(WIFEXITED(status) && WEXITSTATUS(status) == 0), "mpirun reported success");
    cr_assert(rank_ends_within(run, 1, 30), "rank 1 still runs 30 s after the job ended");
    cr_assert_geq(ckpt_latest_step(run), 2);
    free(run);
    free(log);
}

/* A rank that stops answering (SIGSTOP) without dying, which mpirun does not notice: the other
 * rank's watchdog ends it after --comm-timeout, and the job ends. */
Test(mpi, a_hung_rank_ends_the_job_after_the_comm_timeout, .init = setup, .fini = teardown, .timeout = 120) {
    char *run = datagen_path(dir, "run"), *log = datagen_path(dir, "train.log");
    pid_t job = start_saving_job(run, log, "2");
    pid_t rank1 = rank_pid(run, 1);
    cr_assert(rank1 > 0, "rank 1 not found");
    cr_assert_eq(kill(rank1, SIGSTOP), 0);
    double t0 = tg_clock_seconds();
    int status = ckpt_wait_at_most(job, 60);
    double t1 = tg_clock_seconds();
    kill(rank1, SIGKILL);
    cr_assert_neq(status, -1, "the job did not end within 60 s of a rank hanging");
    double waited = t1 - t0;
    char *text = ckpt_read_text(log);
    cr_assert(strstr(text, "rank 0 of 2: no answer from the other ranks for 2 s"), "%s", text);
    cr_assert_geq(waited, 1.9, "ended after %.1f s, before the timeout", waited);
    cr_assert_geq(ckpt_latest_step(run), 2);
    free(text);
    free(run);
    free(log);
}

Test(mpi, replicas_that_drift_apart_stop_the_run_at_the_next_checkpoint, .init = setup, .fini = teardown,
     .timeout = 120) {
    char *run = datagen_path(dir, "run"), *out = NULL;
    setenv("TAPEGRAD_FAIL_REPLICA", "3", 1); /* rank 1 moves one weight after step 3 (support/fault.h) */
    int rc = ckpt_cli_faults(&out, launcher(), "train " FLAGS " --ckpt-every 5 --out %s", corpus, run);
    unsetenv("TAPEGRAD_FAIL_REPLICA");
    cr_assert_neq(rc, 0, "the run did not fail:\n%s", out);
    cr_assert(strstr(out, "after step 5 the weights of rank 1 differ from rank 0's"), "%s", out);
    char path[4200];
    snprintf(path, sizeof path, "%s/ckpt-00000005.tgck", run);
    cr_assert_neq(access(path, F_OK), 0, "a checkpoint of the drifted step was saved");
    free(out);
    free(run);
}
