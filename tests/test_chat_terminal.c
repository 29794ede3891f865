/* `tapegrad chat` as a person meets it (cli/line_input.h, cli/cmd_chat.c): driven through a
 * pseudo-terminal, its line editing, history, slash commands, Ctrl-C during a reply and at the
 * prompt, and Ctrl-D; from a pipe, a transcript with each turn marked.
 *
 * Every wait has a bound: a chat that hangs fails the test by that bound. */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ckptutil.h"
#include "datagen.h"
#include "testutil.h"

CKPT_SCRATCH_FIXTURE

/* A pretrained run whose tokenizer has the ChatML markers, and a fine-tune of it. */
static void make_runs(char **base, char **tuned) { ckpt_chat_runs(dir, corpus, base, tuned); }

/* A program on a pseudo-terminal and all it has written so far. */
typedef struct {
    pid_t pid;
    int fd;
    char *seen;
    size_t len, cap, from; /* pty_wait_for searches seen[from, len) */
} Pty;

static void pty_start(Pty *p, char *const args[]) {
    *p = (Pty){.cap = 1 << 16};
    p->seen = calloc(1, p->cap);
    struct winsize ws = {.ws_row = 40, .ws_col = 200};
    p->pid = forkpty(&p->fd, NULL, NULL, &ws);
    cr_assert_geq(p->pid, 0, "forkpty: %s", strerror(errno));
    if (p->pid == 0) {
        setenv("TERM", "xterm", 1);
        setenv("HOME", dir, 1); /* no ~/.editrc of the person running the suite */
        execv(TAPEGRAD_BIN, args);
        _exit(127);
    }
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Reads what the program writes until `text` appears (after what earlier waits matched), at most
 * `seconds`; the search then goes on after it. */
static bool pty_wait_for(Pty *p, const char *text, double seconds) {
    double end = now_s() + seconds;
    for (;;) {
        char *hit = strstr(p->seen + p->from, text);
        if (hit) {
            p->from = (size_t)(hit - p->seen) + strlen(text);
            return true;
        }
        double left = end - now_s();
        if (left <= 0) return false;
        struct pollfd pfd = {.fd = p->fd, .events = POLLIN};
        if (poll(&pfd, 1, (int)(left * 1000) + 1) <= 0) continue;
        if (p->len + 4096 + 1 > p->cap) p->seen = realloc(p->seen, p->cap *= 2);
        ssize_t got = read(p->fd, p->seen + p->len, 4096);
        if (got <= 0) return strstr(p->seen + p->from, text) != NULL; /* the program is gone */
        p->len += (size_t)got;
        p->seen[p->len] = '\0';
    }
}

/* Waits at most `seconds` until the program waits at its prompt: what it wrote ends with "> " and
 * nothing has come for a while. The search goes on after it. */
static bool pty_wait_prompt(Pty *p, double seconds) {
    double end = now_s() + seconds;
    while (now_s() < end) {
        size_t len = p->len;
        pty_wait_for(p, "\x01never\x01", 0.2);
        if (p->len == len && len >= p->from + 2 && memcmp(p->seen + len - 2, "> ", 2) == 0) {
            p->from = len;
            return true;
        }
    }
    return false;
}

static void pty_send(Pty *p, const char *keys) {
    cr_assert_eq(write(p->fd, keys, strlen(keys)), (ssize_t)strlen(keys));
}

/* Its exit status (bounded wait), what it wrote drained first. */
static int pty_finish(Pty *p) {
    pty_wait_for(p, "\x01never\x01", 0.5);
    int status = ckpt_wait_at_most(p->pid, 30);
    close(p->fd);
    return status;
}

#define EXPECT_SEEN(p, text, seconds) \
    cr_expect(pty_wait_for(p, text, seconds), "no \"%s\" within %g s; the terminal shows:\n%s", text, (double)(seconds), (p)->seen + (p)->from)

#define EXPECT_PROMPT(p, seconds) \
    cr_expect(pty_wait_prompt(p, seconds), "no prompt within %g s; the terminal shows:\n%s", (double)(seconds), (p)->seen + (p)->from)

#define LEFT "\x1b[D"
#define UP "\x1b[A"
#define CTRL_A "\x01"
#define CTRL_C "\x03"
#define CTRL_D "\x04"

Test(chat_terminal, editing_history_commands_and_the_keys_that_stop_and_leave, .init = setup, .fini = teardown,
     .timeout = 180) {
    char *base, *tuned;
    make_runs(&base, &tuned);
    Pty p;
    char *args[] = {"tapegrad", "chat", "--run", tuned, "--threads", "1", "--temperature", "0", "--tokens", "4", NULL};
    pty_start(&p, args);
    EXPECT_SEEN(&p, "/help lists the commands", 60);
    EXPECT_PROMPT(&p, 10);
    /* a command is not a turn: /help lists the commands */
    pty_send(&p, "/help\r");
    EXPECT_SEEN(&p, "/system TEXT", 10);
    EXPECT_PROMPT(&p, 10);
    /* the arrow moves the cursor: "abd", left, "c" is "abcd" */
    pty_send(&p, "/system abd" LEFT "c\r");
    EXPECT_SEEN(&p, "its system turn: abcd)", 10);
    EXPECT_PROMPT(&p, 10);
    /* Ctrl-A goes to the line's start */
    pty_send(&p, "xyz" CTRL_A "/system \r");
    EXPECT_SEEN(&p, "its system turn: xyz)", 10);
    EXPECT_PROMPT(&p, 10);
    /* up twice: the line before last, again */
    pty_send(&p, UP UP "\r");
    EXPECT_SEEN(&p, "its system turn: abcd)", 10);
    EXPECT_PROMPT(&p, 10);
    pty_send(&p, "/reset\r");
    EXPECT_SEEN(&p, "(a new conversation; the system turn stays)", 10);
    EXPECT_PROMPT(&p, 10);
    pty_send(&p, "/system\r");
    EXPECT_SEEN(&p, "(a new conversation, with no system turn)", 10);
    EXPECT_PROMPT(&p, 10);
    pty_send(&p, "/nonsense here\r");
    EXPECT_SEEN(&p, "(unknown command /nonsense: /help lists the commands", 10);
    EXPECT_PROMPT(&p, 10);
    /* a turn gets a reply of at most 4 tokens */
    pty_send(&p, "hi\r");
    EXPECT_PROMPT(&p, 60);
    /* Ctrl-C on a line with text drops it; on an empty one it says how to leave */
    pty_send(&p, "/system dropped" CTRL_C);
    EXPECT_SEEN(&p, "^C", 10);
    EXPECT_PROMPT(&p, 10);
    cr_expect(strstr(p.seen, "(Ctrl-D or /exit leaves)") == NULL, "the hint after a line with text:\n%s", p.seen);
    pty_send(&p, CTRL_C);
    EXPECT_SEEN(&p, "(Ctrl-D or /exit leaves)", 10);
    EXPECT_PROMPT(&p, 10);
    cr_expect(strstr(p.seen, "its system turn: dropped") == NULL, "a dropped line ran:\n%s", p.seen);
    /* Ctrl-D on an empty line leaves, exit 0 */
    pty_send(&p, CTRL_D);
    int status = pty_finish(&p);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d; the terminal showed:\n%s", status, p.seen);
    free(p.seen);

    /* /exit leaves too */
    pty_start(&p, args);
    EXPECT_PROMPT(&p, 60);
    pty_send(&p, "/exit\r");
    status = pty_finish(&p);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d; the terminal showed:\n%s", status, p.seen);
    free(p.seen);
    free(base), free(tuned);
}

/* A reply long enough to be stopped: the pretrained run, never taught to end a turn, decoding
 * greedily without a penalty (it repeats one token) up to a million tokens. Ctrl-C stops it at its
 * next token, and the chat goes on. */
Test(chat_terminal, ctrl_c_stops_a_reply_and_the_chat_goes_on, .init = setup, .fini = teardown, .timeout = 180) {
    char *base, *tuned;
    make_runs(&base, &tuned);
    Pty p;
    char *args[] = {"tapegrad", "chat", "--run", base, "--threads", "1", "--tokens", "1000000", "--temperature", "0",
                    "--repetition-penalty", "1", NULL};
    pty_start(&p, args);
    EXPECT_PROMPT(&p, 60);
    size_t before = p.len;
    pty_send(&p, "tell me a long story\r");
    /* wait until the reply has written something past the echoed line */
    double end = now_s() + 60;
    while (p.len < before + 200 && now_s() < end) pty_wait_for(&p, "\x01never\x01", 0.1);
    cr_assert_geq(p.len, before + 200, "no reply is being written:\n%s", p.seen + before);
    pty_send(&p, CTRL_C);
    EXPECT_SEEN(&p, "(stopped by Ctrl-C; what it wrote stays in the conversation)", 30);
    EXPECT_PROMPT(&p, 10);
    pty_send(&p, "/exit\r");
    int status = pty_finish(&p);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    free(p.seen), free(base), free(tuned);
}

/* From a pipe: no prompt, no editing; each turn marked "> TEXT" before its reply; commands work. */
Test(chat_terminal, piped_lines_make_a_transcript, .init = setup, .fini = teardown, .timeout = 120) {
    char *base, *tuned;
    make_runs(&base, &tuned);
    const char *lines = "hi\n/system be brief\nhello\n//slash\n/exit\nnever read\n";
    datagen_write(dir, "in.txt", lines, strlen(lines));
    char *in = datagen_path(dir, "in.txt"), *out_path = datagen_path(dir, "out.txt"), cmd[8192];
    snprintf(cmd, sizeof cmd, "%s chat --run %s --threads 1 --temperature 0 --tokens 3 <%s >%s 2>&1", TAPEGRAD_BIN, tuned, in,
             out_path);
    int rc = test_run(cmd);
    char *out = ckpt_read_text(out_path);
    cr_expect_eq(rc, 0, "%s", out);
    const char *marks[] = {"> hi\n", "> /system be brief\n(a new conversation, its system turn: be brief)\n", "> hello\n",
                           "> //slash\n", "> /exit\n"};
    const char *at = out;
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
        const char *hit = strstr(at, marks[i]);
        cr_expect(hit, "no \"%s\" in order in:\n%s", marks[i], out);
        if (hit) at = hit + strlen(marks[i]);
    }
    cr_expect(strstr(out, "never read") == NULL, "%s", out);
    cr_expect(strstr(out, "\x1b") == NULL, "escape codes in a transcript:\n%s", out);
    free(out), free(in), free(out_path), free(base), free(tuned);
}
