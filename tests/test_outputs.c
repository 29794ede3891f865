/* The commands that print results (chat --message, chat --jsonl, sample, eval, ckpt info) when
 * what they print cannot be written, and the generators when the model cannot give a token:
 *
 *   - stdout on a full disk (/dev/full) or closed (the process started without fd 1): one line on
 *     stderr, "cannot write its output: REASON", and exit 1; before, each exited 0 and the output
 *     was lost. chat --jsonl stops at the first reply it could not write, rather than answering
 *     every line of its input into the void.
 *   - finite weights whose activations overflow float32 (every final-norm weight 3e38): eval refused
 *     the loss, but sample printed NUL bytes and chat \u0001 replies, exit 0. Every generator
 *     passes through tg_sample_token, which refuses a row of logits holding NaN or an infinity;
 *     each command then names the checkpoint and the token of the generation, and exits 1. */
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
#include "support/json_write.h"
#include "testutil.h"
#include "checkpoint/checkpoint_folder.h"

extern char **environ;

CKPT_SCRATCH_FIXTURE
TestSuite(outputs, .init = setup, .fini = teardown, .timeout = 240);

/* A run of the tiny preset whose tokenizer holds the ChatML markers, which chat needs (sample,
 * eval and ckpt info take any run). */
static char *chat_run(const char *name) {
    char *run = datagen_path(dir, name), *out = NULL;
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --tokenizer bpe --vocab 320 --special-tokens chatml "
                            "--steps 2 --eval-every 0 --out %s",
                      corpus, run);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    return run;
}

static const char *question = "{\"conversations\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n";

/* `tapegrad ARGS <in` with stdout as the shell redirection `out` says (">/dev/full", ">&-": closed)
 * and stderr into *err (malloc'ed); returns the exit code. */
static int run_redirected(const char *args, const char *in, const char *out, char **err) {
    char cmd[8192], *err_path = datagen_path(dir, "stderr.txt");
    snprintf(cmd, sizeof cmd, "%s %s <'%s' %s 2>'%s'", TAPEGRAD_BIN, args, in, out, err_path);
    int rc = test_run(cmd);
    *err = ckpt_read_text(err_path);
    free(err_path);
    return rc;
}

/* The text holds exactly one line (one '\n', at its end). */
static bool one_line(const char *text) {
    const char *nl = strchr(text, '\n');
    return nl && nl[1] == '\0';
}

/* `tapegrad ARGS <in` writing into a pipe whose read end was closed before it started, as `| head`
 * leaves it once head has its lines: every write meets EPIPE. stderr into *err; the exit code. */
static int run_into_a_closed_pipe(const char *args, const char *in, char **err) {
    int fds[2], fd = 3;
    cr_assert_eq(pipe(fds), 0);
    cr_assert_eq(close(fds[0]), 0);
    while (fd < 10 && fcntl(fd, F_GETFD) != -1) fd++; /* sh names one digit in >&N */
    cr_assert_lt(fd, 10, "no free descriptor below 10");
    cr_assert_eq(dup2(fds[1], fd), fd);
    close(fds[1]);
    char cmd[8192], *err_path = datagen_path(dir, "stderr.txt");
    snprintf(cmd, sizeof cmd, "%s %s <'%s' >&%d 2>'%s'", TAPEGRAD_BIN, args, in, fd, err_path);
    int rc = test_run(cmd);
    close(fd);
    *err = ckpt_read_text(err_path);
    free(err_path);
    return rc;
}

Test(outputs, every_result_printing_command_fails_on_a_full_disk_and_on_a_closed_stdout) {
    char *run = chat_run("run"), *in = datagen_path(dir, "in.jsonl");
    datagen_write(dir, "in.jsonl", question, strlen(question));
    const char *commands[] = {"chat --run '%s' --message hi --tokens 4 --threads 1",
                              "chat --run '%s' --jsonl --tokens 4 --threads 1",
                              "sample --run '%s' --tokens 4 --threads 1",
                              "eval --run '%s' --threads 1",
                              "ckpt info '%s'"};
    const struct {
        const char *redirect, *reason;
    } outputs[] = {{">/dev/full", "No space left on device"}, {">&-", "stdout is closed"}};
    for (size_t c = 0; c < sizeof commands / sizeof commands[0]; c++) {
        char args[4400];
        snprintf(args, sizeof args, commands[c], run);
        char *err = NULL;
        /* the same command with somewhere to write works: what fails below is the output alone */
        int rc = run_redirected(args, in, ">/dev/null", &err);
        cr_assert_eq(rc, 0, "`%s` >/dev/null exited %d: %s", args, rc, err);
        free(err);
        for (size_t o = 0; o < sizeof outputs / sizeof outputs[0]; o++) {
            rc = run_redirected(args, in, outputs[o].redirect, &err);
            char says[128];
            snprintf(says, sizeof says, "cannot write its output: %s", outputs[o].reason);
            cr_expect_eq(rc, 1, "`%s` %s exited %d (its output was lost): %s", args, outputs[o].redirect, rc, err);
            cr_expect(one_line(err) && strstr(err, says), "`%s` %s: stderr is not one line saying \"%s\":\n%s", args,
                      outputs[o].redirect, says, err);
            free(err);
        }
        /* a reader that closed the pipe had what it wanted: no error, nothing said */
        rc = run_into_a_closed_pipe(args, in, &err);
        cr_expect(rc == 0 && err[0] == '\0', "`%s | head` exited %d: %s", args, rc, err);
        free(err);
    }
    free(run), free(in);
}

/* Waits at most `seconds` for pid; its wait status, or -1 (then it is killed) when it is still running. */
static int wait_bounded(pid_t pid, int seconds) {
    for (int i = 0; i < seconds * 20; i++) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) return status;
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

/* chat --jsonl reading a pipe that stays open (a script with more to ask): the first reply cannot
 * be written, and chat ends there. Before, it went on to the next line and waited for more input,
 * so it would have answered every question of its input into the void. */
Test(outputs, chat_jsonl_stops_at_the_first_reply_it_cannot_write) {
    char *run = chat_run("run"), *err_path = datagen_path(dir, "stderr.txt");
    for (int closed = 0; closed < 2; closed++) {
        int in[2];
        cr_assert_eq(pipe(in), 0);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, in[0], 0);
        posix_spawn_file_actions_addclose(&fa, in[0]);
        posix_spawn_file_actions_addclose(&fa, in[1]);
        if (closed) posix_spawn_file_actions_addclose(&fa, 1);
        else posix_spawn_file_actions_addopen(&fa, 1, "/dev/full", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        char *args[] = {"tapegrad", "chat", "--run", run, "--jsonl", "--tokens", "4", "--threads", "1", NULL};
        pid_t pid;
        cr_assert_eq(posix_spawn(&pid, TAPEGRAD_BIN, &fa, NULL, args, environ), 0);
        posix_spawn_file_actions_destroy(&fa);
        close(in[0]);
        for (int i = 0; i < 3; i++) cr_assert_eq(write(in[1], question, strlen(question)), (ssize_t)strlen(question));
        int status = wait_bounded(pid, 60);
        close(in[1]);
        char *err = ckpt_read_text(err_path);
        cr_expect_neq(status, -1, "stdout %s: chat went on reading its input after a reply was lost", closed ? "closed" : "/dev/full");
        if (status != -1) {
            cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 1, "stdout %s: wait status %d", closed ? "closed" : "/dev/full",
                      status);
            cr_expect(one_line(err) && strstr(err, "tapegrad chat: cannot write its output: "), "%s", err);
        }
        free(err);
    }
    free(run), free(err_path);
}

/* The run's checkpoint with every weight of the final norm at 3e38: finite, so every reader loads
 * it, and the normalised activations times 3e38 overflow to infinities whose sums are NaN. */
static char *overflowing_run(void) {
    char *run = chat_run("huge"), ckpt[4200];
    cr_assert_eq(tg_checkpoint_resolve(run, ckpt, sizeof ckpt), TG_OK, "%s", tg_error_message());
    ckpt_plant_values(ckpt, "model.norm.weight", TG_CHECKPOINT_KIND_WEIGHT, 0, -1, 3e38f);
    return run;
}

Test(outputs, finite_weights_whose_activations_overflow_stop_every_generator) {
    char *run = overflowing_run(), *in = datagen_path(dir, "in.jsonl"), *out_path = datagen_path(dir, "out.jsonl"), ckpt[4200];
    cr_assert_eq(tg_checkpoint_resolve(run, ckpt, sizeof ckpt), TG_OK);
    char three[1024] = "";
    for (int i = 0; i < 3; i++) strcat(three, question);
    datagen_write(dir, "in.jsonl", three, strlen(three));
    char redirect[4400];
    snprintf(redirect, sizeof redirect, ">'%s'", out_path);
    const struct {
        const char *args, *says;
    } cases[] = {
        {"eval --run '%s' --threads 1", "the model's activations overflow float32"},
        {"sample --run '%s' --tokens 8 --threads 1", ": generated token 1 of 8: the logits hold "},
        {"sample --run '%s' --tokens 8 --temperature 0 --threads 1", ": generated token 1 of 8: the logits hold "},
        {"chat --run '%s' --message hi --tokens 8 --threads 1", ": token 1 of the reply: the logits hold "},
        {"chat --run '%s' --message hi --tokens 8 --temperature 0 --threads 1", ": token 1 of the reply: the logits hold "},
        {"chat --run '%s' --jsonl --tokens 8 --threads 1", ": line 1: token 1 of the reply: the logits hold "},
        {"chat --run '%s' --tokens 8 --threads 1", ": token 1 of the reply: the logits hold "}, /* lines from a pipe */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[4400], *err = NULL;
        snprintf(args, sizeof args, cases[i].args, run);
        int rc = run_redirected(args, in, redirect, &err);
        size_t printed_len;
        char *printed = (char *)ckpt_read_file(out_path, &printed_len);
        printed = realloc(printed, printed_len + 1);
        printed[printed_len] = '\0';
        cr_expect_eq(rc, 1, "`%s` exited %d; it printed:\n%s", args, rc, printed);
        cr_expect(one_line(err) && strstr(err, ckpt) && strstr(err, cases[i].says),
                  "`%s`: stderr is not one line naming %s and saying \"%s\":\n%s", args, ckpt, cases[i].says, err);
        if (strstr(args, "--jsonl")) {
            /* the line it could not answer says why, in its place, and the others wait for another model */
            cr_expect(one_line(printed) && strstr(printed, "{\"error\":\"line 1: token 1 of the reply: the logits hold "),
                      "%s", printed);
        } else if (strstr(args, "--message") == NULL && strncmp(args, "chat", 4) == 0) {
            /* lines from a pipe: the transcript marks the turn ("> TEXT") and holds nothing drawn */
            for (char *line = printed; *line; line = strchr(line, '\n') + 1) {
                cr_expect(strncmp(line, "> ", 2) == 0 && strchr(line, '\n'), "`%s` printed more than its turn:\n%s", args,
                          printed);
                if (strncmp(line, "> ", 2) != 0 || !strchr(line, '\n')) break;
            }
        } else {
            /* before, sample printed NUL bytes and chat \x01 bytes: ids drawn from NaN */
            cr_expect_eq(printed_len, 0, "`%s` printed %zu bytes: text drawn from logits that are not numbers", args,
                         printed_len);
        }
        free(printed), free(err);
    }
    free(run), free(in), free(out_path);
}

/* The JSON writer keeps every line UTF-8 whatever bytes a path or a message holds: a byte that is
 * not UTF-8, and a character cut short at the end, become U+FFFD; whole characters pass. */
Test(outputs, json_strings_stay_utf8_whatever_their_bytes) {
    char *path = datagen_path(dir, "s.json");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    tg_json_write_string(f, "caf\xc3\xa9 \xff \"q\" \xe2\x82"); /* é, a 0xff, a quote, the first 2 bytes of € */
    fclose(f);
    char *text = ckpt_read_text(path);
    cr_expect_str_eq(text, "\"caf\xc3\xa9 \\ufffd \\\"q\\\" \\ufffd\\ufffd\"");
    free(text), free(path);
}
