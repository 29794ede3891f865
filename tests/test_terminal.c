/* A run outlives its terminal (cli/output.h, cli/train_report.h): a stdout pipe that closes, that
 * nobody reads or that is closed from the start, SIGHUP, SIGTERM while stdout is full, stdout on
 * a full disk and the run folder on a full disk lose no trained step and no line of the run's log;
 * and every command that prints results fails, with one line, when its output cannot be written.
 *
 * Each test waits for what it asserts with a bound: a run that blocks on its terminal fails by
 * that bound instead of hanging the suite. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckptutil.h"
#include "datagen.h"
#include "testutil.h"

extern char **environ;

CKPT_SCRATCH_FIXTURE

/* Starts tapegrad with argv `args`: stdin /dev/null, stdout the descriptor out_fd (-1: closed),
 * stderr the file err_log. close_fd (-1: none) is closed in the child (a pipe's other end). */
static pid_t spawn_with_stdout(int out_fd, int close_fd, const char *err_log, char *const args[]) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (out_fd >= 0) posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    else posix_spawn_file_actions_addclose(&fa, 1);
    posix_spawn_file_actions_addopen(&fa, 2, err_log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (close_fd >= 0) posix_spawn_file_actions_addclose(&fa, close_fd);
    if (out_fd > 2) posix_spawn_file_actions_addclose(&fa, out_fd);
    pid_t pid;
    cr_assert_eq(posix_spawn(&pid, TAPEGRAD_BIN, &fa, NULL, args, environ), 0, "cannot start %s", TAPEGRAD_BIN);
    posix_spawn_file_actions_destroy(&fa);
    return pid;
}

/* The same with stdout a pipe; *reader receives its other end. */
static pid_t spawn_into_pipe(int *reader, const char *err_log, char *const args[]) {
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = spawn_with_stdout(p[1], p[0], err_log, args);
    close(p[1]);
    *reader = p[0];
    return pid;
}

/* The argv of a tiny run of `steps` steps into RUN, one progress line per step (so that its
 * output fills a pipe's buffer many times over). */
static void train_args(char *argv[], const char *run, const char *steps, const char *ckpt_every) {
    char *args[] = {"tapegrad", "train", "--preset", "tiny", "--batch", "4", "--threads", "1", "--eval-batches", "2",
                    "--sample-tokens", "20", "--data", corpus, "--steps", (char *)steps, "--log-every", "1",
                    "--eval-every", "0", "--ckpt-every", (char *)ckpt_every, "--out", (char *)run, NULL};
    memcpy(argv, args, sizeof args);
}

/* RUN/log.txt's text ("" while it does not exist). */
static char *log_of(const char *run) {
    char *path = datagen_path(run, "log.txt");
    char *text = access(path, R_OK) == 0 ? ckpt_read_text(path) : NULL;
    free(path);
    return text ? text : calloc(1, 1);
}

/* Runs a shell command line; *err receives what it wrote on stderr. Returns its exit code. */
static int run_with_stderr(char **err, const char *fmt, const char *arg) {
    char *err_path = datagen_path(dir, "cmd.stderr"), cmd[8192], line[4096];
    snprintf(line, sizeof line, fmt, arg);
    snprintf(cmd, sizeof cmd, "%s %s 2>'%s' </dev/null", TAPEGRAD_BIN, line, err_path);
    int rc = test_run(cmd);
    *err = ckpt_read_text(err_path);
    free(err_path);
    return rc;
}

/* Waits (at most `seconds`) until RUN/log.txt holds `what`. */
static bool log_shows(const char *run, const char *what, double seconds) {
    for (int i = 0; i < (int)(seconds * 100); i++) {
        char *text = log_of(run);
        bool found = strstr(text, what) != NULL;
        free(text);
        if (found) return true;
        usleep(10000);
    }
    return false;
}

/* Waits (at most `seconds`) until RUN/metrics.jsonl holds `lines` lines. */
static bool metrics_reach(const char *run, int lines, double seconds) {
    char *path = datagen_path(run, "metrics.jsonl");
    int i = 0;
    for (; i < (int)(seconds * 100) && ckpt_count_lines(path) < lines; i++) usleep(10000);
    bool reached = ckpt_count_lines(path) >= lines;
    free(path);
    return reached;
}

static int count_of(const char *text, const char *what) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

/* The run ended as it should: exit 0, the checkpoint at its last step, and a log holding one
 * progress line for every step and the summary line. */
static void expect_whole_run(const char *run, int status, int steps, const char *err_log) {
    char *errors = ckpt_read_text(err_log), *text = log_of(run);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit status %d; stderr:\n%s", status, errors);
    cr_assert_eq(ckpt_latest_step(run), steps);
    char done[64], last[64];
    snprintf(done, sizeof done, "done at step %d:", steps);
    snprintf(last, sizeof last, "step %d/%d loss", steps, steps);
    cr_assert(strstr(text, done) && strstr(text, last), "the log lacks the end of the run:\n%s", text);
    char per_step[32];
    snprintf(per_step, sizeof per_step, "/%d loss", steps);
    cr_assert_eq(count_of(text, per_step), steps, "the log holds %d progress lines for %d steps",
                 count_of(text, per_step), steps);
    free(errors);
    free(text);
}

/* `tapegrad train | head -3`: head goes, the run does not. */
Test(terminal, train_into_head_loses_no_step, .init = setup, .fini = teardown, .timeout = 240) {
    char *run = datagen_path(dir, "run"), *err_log = datagen_path(dir, "stderr"), *argv[32];
    train_args(argv, run, "1500", "0");
    int reader;
    pid_t pid = spawn_into_pipe(&reader, err_log, argv);
    FILE *head = fdopen(reader, "r");
    char line[4096];
    for (int i = 0; i < 3; i++) cr_assert(fgets(line, sizeof line, head), "the run printed fewer than 3 lines");
    fclose(head); /* what `head` does once it has its lines */
    int status = ckpt_wait_at_most(pid, 180);
    cr_assert_neq(status, -1, "the run did not end within 180 s");
    expect_whole_run(run, status, 1500, err_log);
    char *text = log_of(run);
    cr_assert(strstr(text, "note: stdout lost") && strstr(text, "Broken pipe"), "%s", text);
    free(text);
    free(run);
    free(err_log);
}

/* Started with stdout closed (`>&-`): nothing takes its number, the run and its log are whole. */
Test(terminal, a_closed_stdout_loses_no_step, .init = setup, .fini = teardown, .timeout = 240) {
    char *run = datagen_path(dir, "run"), *err_log = datagen_path(dir, "stderr"), *argv[32];
    train_args(argv, run, "300", "100");
    pid_t pid = spawn_with_stdout(-1, -1, err_log, argv);
    int status = ckpt_wait_at_most(pid, 180);
    cr_assert_neq(status, -1, "the run did not end within 180 s");
    expect_whole_run(run, status, 300, err_log);
    char *errors = ckpt_read_text(err_log);
    cr_assert(strstr(errors, "it is closed") && strstr(errors, "log.txt has all of it"), "%s", errors);
    free(errors);
    /* no file of the run got stdout's descriptor and its text */
    char *metrics = datagen_path(run, "metrics.jsonl");
    char *m = ckpt_read_text(metrics);
    int lines = ckpt_count_lines(metrics);
    cr_assert_eq(count_of(m, "{\"step\":"), lines, "metrics.jsonl holds other text:\n%s", m);
    cr_assert_geq(lines, 300, "metrics.jsonl: %d lines", lines);
    free(m);
    free(metrics);
    free(run);
    free(err_log);
}

/* A stdout pipe nobody reads (a pager left open, a supervisor that does not drain it): its buffer
 * fills after some 600 lines, and the run goes on to its end regardless; once the reader goes,
 * the process ends. */
Test(terminal, a_stdout_pipe_nobody_reads_slows_no_step, .init = setup, .fini = teardown, .timeout = 240) {
    char *run = datagen_path(dir, "run"), *err_log = datagen_path(dir, "stderr"), *argv[32];
    train_args(argv, run, "2000", "0");
    int reader;
    pid_t pid = spawn_into_pipe(&reader, err_log, argv);
    bool finished = log_shows(run, "done at step 2000:", 180);
    close(reader);
    int status = ckpt_wait_at_most(pid, 60);
    cr_assert(finished, "the run did not finish within 180 s while nobody read its stdout");
    cr_assert_neq(status, -1, "the run did not end within 60 s of its reader going");
    expect_whole_run(run, status, 2000, err_log);
    /* it wrote well past a pipe's buffer: the test tested what it says */
    char *text = log_of(run);
    cr_assert_gt(strlen(text), (size_t)2 * 65536, "the run printed only %zu bytes", strlen(text));
    free(text);
    free(run);
    free(err_log);
}

/* SIGHUP (a terminal closed, an ssh session dropped) leaves the run going, as under nohup
 * (docs/training.md); the log says when it came. */
Test(terminal, sighup_goes_on_like_nohup_and_loses_nothing, .init = setup, .fini = teardown, .timeout = 240) {
    char *run = datagen_path(dir, "run"), *err_log = datagen_path(dir, "stderr"), *argv[32];
    train_args(argv, run, "1500", "500");
    int out = open(err_log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    pid_t pid = spawn_with_stdout(out, -1, err_log, argv);
    close(out);
    cr_assert(metrics_reach(run, 20, 120), "the run logged no 20 steps in 120 s");
    cr_assert_eq(kill(pid, SIGHUP), 0);
    int status = ckpt_wait_at_most(pid, 180);
    cr_assert_neq(status, -1, "the run did not end within 180 s");
    expect_whole_run(run, status, 1500, err_log);
    char *text = log_of(run);
    cr_assert(strstr(text, "the terminal hung up (SIGHUP); training goes on"), "%s", text);
    free(text);
    free(run);
    free(err_log);
}

/* SIGTERM while stdout is a full pipe nobody reads: what mpirun does to its ranks when it ends a
 * job (it stops reading them, then passes SIGTERM on). The run stops after the step and saves. */
Test(terminal, sigterm_while_stdout_is_full_stops_and_saves, .init = setup, .fini = teardown, .timeout = 240) {
    char *run = datagen_path(dir, "run"), *err_log = datagen_path(dir, "stderr"), *argv[32];
    train_args(argv, run, "100000", "0");
    int reader;
    pid_t pid = spawn_into_pipe(&reader, err_log, argv);
    /* 1500 lines of about 90 bytes: twice a pipe's buffer */
    cr_assert(metrics_reach(run, 1500, 180), "the run logged no 1500 steps in 180 s");
    cr_assert_eq(kill(pid, SIGTERM), 0);
    int status = ckpt_wait_at_most(pid, 60);
    close(reader);
    cr_assert_neq(status, -1, "the run did not end within 60 s of SIGTERM");
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit status %d", status);
    enum { MAX_LINES = 100000 };
    CkptMetricLine *m = malloc(MAX_LINES * sizeof *m);
    int lines = ckpt_read_metrics(run, 0, m, MAX_LINES);
    cr_assert_gt(lines, 0);
    cr_assert_eq(ckpt_latest_step(run), m[lines - 1].step, "the checkpoint is not at the last step trained");
    char *text = log_of(run);
    cr_assert(strstr(text, "stopped by SIGTERM at step"), "%s", text);
    free(text);
    free(m);
    free(run);
    free(err_log);
}

/* `tapegrad train > /dev/full`: stdout refuses everything; the run is whole, its log too, and
 * stderr says where the output went. */
Test(terminal, train_to_a_full_stdout_finishes_and_names_its_log, .init = setup, .fini = teardown, .timeout = 240) {
    char *run = datagen_path(dir, "run"), *err_log = datagen_path(dir, "stderr"), *argv[32];
    train_args(argv, run, "300", "0");
    int full = open("/dev/full", O_WRONLY);
    cr_assert_geq(full, 0, "no /dev/full");
    pid_t pid = spawn_with_stdout(full, -1, err_log, argv);
    close(full);
    int status = ckpt_wait_at_most(pid, 180);
    cr_assert_neq(status, -1, "the run did not end within 180 s");
    expect_whole_run(run, status, 300, err_log);
    char *errors = ckpt_read_text(err_log);
    cr_assert(strstr(errors, strerror(ENOSPC)) && strstr(errors, "/run/log.txt has all of it"), "%s", errors);
    free(errors);
    free(run);
    free(err_log);
}

/* Every subcommand (its --help is output too), --help and --version: a full or closed stdout is one
 * line on stderr and exit 1, never a lost output reported as success. The subcommands come from
 * `tapegrad --help`, so a new one is checked without a word here. */
Test(terminal, every_command_fails_when_its_output_cannot_be_written, .init = setup, .fini = teardown) {
    char *help = NULL;
    cr_assert_eq(ckpt_cli(&help, "--help"), 0);
    const char *p = strstr(help, "subcommands:\n");
    cr_assert_not_null(p, "%s", help);
    p += strlen("subcommands:\n");
    int checked = 0;
    char name[64], *out = NULL;
    while (sscanf(p, " %63s", name) == 1) {
        int rc = run_with_stderr(&out, "%s --help >/dev/full", name);
        cr_assert_eq(rc, 1, "%s --help > /dev/full: exit %d\n%s", name, rc, out);
        cr_assert(strstr(out, "cannot write its output: ") && strstr(out, strerror(ENOSPC)), "%s: %s", name, out);
        free(out);
        checked++;
        p = strchr(p, '\n');
        if (!p) break;
        p++;
    }
    cr_assert_geq(checked, 10, "found %d subcommands in:\n%s", checked, help);
    free(help);
    const char *plain[] = {"--help", "--version"};
    for (int i = 0; i < 2; i++) {
        int rc = run_with_stderr(&out, "%s >/dev/full", plain[i]);
        cr_assert(rc == 1 && strstr(out, strerror(ENOSPC)), "%s: exit %d\n%s", plain[i], rc, out);
        free(out);
        rc = run_with_stderr(&out, "%s >&-", plain[i]);
        cr_assert(rc == 1 && strstr(out, "stdout is closed"), "%s with stdout closed: exit %d\n%s", plain[i], rc, out);
        free(out);
    }
}

/* The run folder on a disk that fills up mid-run (a tmpfs of its own, mounted in a mount
 * namespace): saves fail and metrics.jsonl's lines wait in memory, each said; training goes on;
 * once space is free again the waiting lines go out, and SIGINT then saves: every step is logged
 * once, in order, up to the checkpoint. */
Test(terminal, a_full_disk_loses_no_step_and_no_line, .init = setup, .fini = teardown, .timeout = 300) {
    char *mnt = datagen_path(dir, "disk"), *out = datagen_path(dir, "out"), *script = datagen_path(dir, "full.sh");
    cr_assert_eq(mkdir(mnt, 0755), 0);
    cr_assert_eq(mkdir(out, 0755), 0);
    FILE *f = fopen(script, "w");
    /* every wait bounded (600 x 0.1 s); the run's folder is copied out before the namespace goes */
    fprintf(f,
            "set -u\n"
            "wait_for() { i=0; until eval \"$1\"; do i=$((i+1)); [ $i -ge 600 ] && { echo \"timed out: $1\" >&2; "
            "kill $pid; exit 3; }; sleep 0.1; done; }\n"
            "lines() { n=$( (wc -l < \"$1\") 2>/dev/null ) || n=0; echo $n; }\n"
            "mount -t tmpfs -o size=64m tmpfs '%s' || exit 2\n"
            "'%s' train %s --data '%s' --steps 10000000 --ckpt-every 100 --keep 2 --log-every 50 --eval-every 0 "
            "--out '%s/run' > '%s/stdout' 2> '%s/stderr' &\n"
            "pid=$!\n"
            "wait_for '[ $(lines %s/run/metrics.jsonl) -ge 150 ]'\n"
            "dd if=/dev/zero of='%s/fill' bs=4k 2>/dev/null\n"
            "wait_for 'grep -q \"metrics.jsonl (No space left on device): its lines wait\" %s/stderr'\n"
            "wait_for 'grep -q \"training goes on and each checkpoint tries again\" %s/stderr'\n"
            "rm '%s/fill'\n"
            "wait_for 'grep -q \"metrics.jsonl is written again\" %s/run/log.txt'\n"
            "wait_for 'grep -q \"checkpoints are saved again\" %s/run/log.txt'\n"
            "kill -INT $pid\n"
            "wait $pid; rc=$?\n"
            "cp -r '%s/run' '%s/run'\n"
            "exit $rc\n",
            mnt, TAPEGRAD_BIN, CKPT_SMALL_FLAGS, corpus, mnt, out, out, mnt, mnt, out, out, mnt, mnt, mnt, mnt, out);
    fclose(f);
    char cmd[8192];
    /* a mount namespace of its own: as root, or through a user namespace */
    snprintf(cmd, sizeof cmd, "if [ \"$(id -u)\" = 0 ]; then unshare -m sh '%s'; else unshare -rm sh '%s'; fi", script,
             script);
    int rc = test_run(cmd);
    char *errors = datagen_path(out, "stderr"), *run = datagen_path(out, "run");
    char *text = ckpt_read_text(errors);
    cr_assert_eq(rc, 0, "the run on a full disk: exit %d\nstderr:\n%s", rc, text ? text : "(none)");
    char *log = log_of(run);
    cr_assert(strstr(log, "metrics.jsonl is written again; no line was lost") && strstr(log, "checkpoints are saved again"),
              "%s", log);
    free(log);
    enum { MAX_LINES = 1 << 20 };
    CkptMetricLine *m = malloc(MAX_LINES * sizeof *m);
    int lines = ckpt_read_metrics(run, 0, m, MAX_LINES);
    cr_assert_gt(lines, 150);
    for (int i = 0; i < lines; i++) cr_assert_eq(m[i].step, i + 1, "line %d is step %lld", i + 1, (long long)m[i].step);
    cr_assert_eq(ckpt_latest_step(run), lines, "the checkpoint is not at the last step logged (%d)", lines);
    free(m);
    free(text);
    free(errors);
    free(run);
    free(mnt);
    free(out);
    free(script);
}
