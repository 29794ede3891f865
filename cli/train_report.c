#include "cli/train_report.h"
#include "support/utf8.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/output.h"
#include "support/path.h"
#include "run/run_folder.h"

/* The lines kept for the log before the run's folder exists: what preparing a corpus says. */
enum { EARLY_MAX = 1 << 20 };

static void warn(CliTrainReport *r, const char *fmt, const char *path, int err) {
    cli_output_printf(CLI_STDERR, "tapegrad %s: warning: ", r->command);
    cli_output_printf(CLI_STDERR, fmt, path, strerror(err));
    cli_output_write(CLI_STDERR, "\n", 1);
}

/* A line for the log: into RUN/log.txt, or kept until the folder is named. A full disk loses no
 * line (support/append_file.h); the terminal hears of it once, and once more when it is over. */
static void log_text(CliTrainReport *r, const char *text, size_t len) {
    if (!r->keeps_log) return;
    if (!r->log.f) {
        if (r->early_len + len > EARLY_MAX) return;
        if (r->early_len + len > r->early_cap) {
            r->early_cap = r->early_cap ? 2 * r->early_cap : 4096;
            while (r->early_cap < r->early_len + len) r->early_cap *= 2;
            r->early = tg_realloc(r->early, r->early_cap);
        }
        memcpy(r->early + r->early_len, text, len);
        r->early_len += len;
        return;
    }
    /* a log removed or replaced while the run trains comes back, with a word of it in both places */
    int again = tg_append_file_recheck(&r->log);
    if (again > 0) {
        r->log_gone = 0;
        const char *what = "was removed or replaced while the run trained: written anew from here on (the lines "
                           "before are not in it)";
        cli_output_printf(CLI_STDERR, "tapegrad %s: warning: %s %s\n", r->command, r->log.path, what);
        fprintf(r->log.f, "note: this log %s\n", what);
    } else if (again < 0 && !r->log_gone) {
        r->log_gone = -again;
        cli_output_printf(CLI_STDERR,
                          "tapegrad %s: warning: %s was removed or replaced while the run trained and cannot be made "
                          "again (%s): its lines from here on are lost\n",
                          r->command, r->log.path, strerror(-again));
    }
    fwrite(text, 1, len, r->log.f);
    int err = tg_append_file_flush(&r->log);
    if (err && !r->log_error)
        warn(r, "cannot write %s (%s): its lines wait in memory and are written once there is space", r->log.path, err);
    else if (!err && r->log_error)
        cli_output_printf(CLI_STDERR, "tapegrad %s: note: %s is written again; no line was lost\n", r->command,
                          r->log.path);
    r->log_error = err;
}

static void log_printf(CliTrainReport *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_printf(CliTrainReport *r, const char *fmt, ...) {
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0) log_text(r, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* SIGHUP leaves the run going (cmd_train.c); the log says when the terminal went. */
static void note_hangup(CliTrainReport *r) {
    if (!r->hangup || !*r->hangup || r->hangup_noted) return;
    r->hangup_noted = true;
    log_printf(r, "note: the terminal hung up (SIGHUP); training goes on, and this log keeps what it prints\n");
}

void cli_train_report_end(CliTrainReport *r) {
    if (!r->bar_shown) return;
    cli_output_write(CLI_STDERR, "\n", 1);
    r->bar_shown = false;
}

static void print_message(void *ctx, TgMessageLevel level, const char *text) {
    CliTrainReport *r = ctx;
    note_hangup(r);
    const char *prefix = level == TG_MESSAGE_NOTE ? "note: " : level == TG_MESSAGE_WARNING ? "warning: " : "";
    log_printf(r, "%s%s\n", prefix, text);
    cli_train_report_end(r);
    if (level == TG_MESSAGE_WARNING) cli_output_printf(CLI_STDERR, "tapegrad %s: warning: %s\n", r->command, text);
    else cli_output_printf(CLI_STDOUT, "%s%s\n", prefix, text);
}

static void format_duration(double s, char *buf, size_t cap) {
    if (isnan(s)) {
        snprintf(buf, cap, "?"); /* not measured yet */
        return;
    }
    if (s < 0 || !isfinite(s)) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
}

enum { BAR_WIDTH = 30 };

static void draw_bar(char bar[BAR_WIDTH + 1], double frac) {
    int filled = (int)(BAR_WIDTH * (frac < 0 ? 0 : frac > 1 ? 1 : frac));
    for (int i = 0; i < BAR_WIDTH; i++) bar[i] = i < filled ? '#' : '.';
    bar[BAR_WIDTH] = '\0';
}

static void print_progress(void *ctx, const TgTrainProgress *p) {
    CliTrainReport *r = ctx;
    note_hangup(r);
    char eta[32], val[48], line[512];
    format_duration(p->eta_s, eta, sizeof eta);
    if (isnan(p->val_loss)) snprintf(val, sizeof val, "-");
    else if (isnan(p->val_bpb)) snprintf(val, sizeof val, "%.4f", p->val_loss);
    else snprintf(val, sizeof val, "%.4f (%.3f bpb)", p->val_loss, p->val_bpb);
    snprintf(line, sizeof line, "step %lld/%lld loss %.4f val %s lr %.2e grad_norm %.3f %.0f tok/s ETA %s\n",
             (long long)p->step, (long long)p->steps, p->loss, val, p->lr, p->grad_norm, p->tokens_per_s, eta);
    log_text(r, line, strlen(line));
    if (!r->tty) {
        cli_output_write(CLI_STDOUT, line, strlen(line));
        return;
    }
    char bar[BAR_WIDTH + 1];
    draw_bar(bar, p->steps > 0 ? (double)p->step / (double)p->steps : 1.0);
    cli_output_printf(CLI_STDERR, "\r[%s] step %lld/%lld | loss %.4f | val %s | %.0f tok/s | ETA %s   ", bar,
                      (long long)p->step, (long long)p->steps, p->loss, val, p->tokens_per_s, eta);
    r->bar_shown = true;
}

/* Preparing data: a bar on a terminal, else a line at every tenth of the bytes and at the end
 * (the log gets those lines either way). */
static void print_preparing(void *ctx, const TgPrepareProgress *p) {
    CliTrainReport *r = ctx;
    double mb = 1e6, frac = p->total ? (double)p->done / (double)p->total : 1.0;
    double rate = p->elapsed_s > 0 ? (double)p->done / mb / p->elapsed_s : 0;
    char eta[32];
    format_duration(rate > 0 ? ((double)p->total - (double)p->done) / mb / rate : 0, eta, sizeof eta);
    if (r->tty) {
        char bar[BAR_WIDTH + 1];
        draw_bar(bar, frac);
        cli_output_printf(CLI_STDERR, "\r[%s] %s %.1f/%.1f MB | %.1f MB/s | ETA %s   ", bar, p->phase,
                          (double)p->done / mb, (double)p->total / mb, rate, eta);
        r->bar_shown = true;
        if (p->done >= p->total) cli_train_report_end(r);
    }
    int tenth = (int)(10 * frac);
    if (strcmp(r->phase, p->phase) == 0 && tenth <= r->tenth) return;
    snprintf(r->phase, sizeof r->phase, "%s", p->phase);
    r->tenth = tenth;
    char line[256];
    snprintf(line, sizeof line, "%s: %.1f/%.1f MB (%d%%), %.1f MB/s, %.1f s, ETA %s\n", p->phase,
             (double)p->done / mb, (double)p->total / mb, (int)(100 * frac), rate, p->elapsed_s, eta);
    log_text(r, line, strlen(line));
    if (!r->tty) cli_output_write(CLI_STDOUT, line, strlen(line));
}

static void print_sample(void *ctx, const TgTrainSample *s) {
    CliTrainReport *r = ctx;
    cli_train_report_end(r);
    char head[160];
    int n = snprintf(head, sizeof head, "\n--- sample (%lld tokens, temperature %g, top-k %d) ---\n",
                     (long long)s->tokens, s->temperature, s->top_k);
    char *text = tg_malloc(3 * s->text_len + 1); /* a character the draw cut shows as U+FFFD */
    const char *parts[] = {head, s->prompt, text, "\n---\n"};
    size_t lens[] = {(size_t)n, s->prompt_len, tg_utf8_mark_invalid(s->text, s->text_len, text), 5};
    for (int i = 0; i < 4; i++) {
        log_text(r, parts[i], lens[i]);
        cli_output_write(CLI_STDOUT, parts[i], lens[i]);
    }
    free(text);
}

/* The run's folder is there: its log opens (appending on a resume), the waiting lines go in. */
static void open_log(void *ctx, const char *run_dir) {
    CliTrainReport *r = ctx;
    snprintf(r->run_dir, sizeof r->run_dir, "%s", run_dir);
    char path[TG_PATH_CAP];
    if (tg_path_join(path, sizeof path, run_dir, TG_RUN_LOG_FILE) == TG_OK && r->log.f) {
        struct stat open_one, named;
        if (fstat(r->log.fd, &open_one) == 0 && stat(path, &named) == 0 && open_one.st_ino == named.st_ino &&
            open_one.st_dev == named.st_dev) {
            snprintf(r->log.path, sizeof r->log.path, "%s", path); /* the run's folder moved into place */
            return;
        }
    }
    if (r->log.f) tg_append_file_close(&r->log); /* compare-ffn: the next of its runs */
    r->log_error = r->log_gone = 0;
    if (tg_path_join(path, sizeof path, run_dir, TG_RUN_LOG_FILE) != TG_OK || tg_append_file_open(&r->log, path) != TG_OK) {
        cli_output_printf(CLI_STDERR, "tapegrad %s: warning: %s; the run goes on without its log\n", r->command,
                          tg_error_message());
        return;
    }
    char when[64] = "?";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    log_printf(r, "--- %s tapegrad %s (pid %ld) ---\n", when, r->command, (long)getpid());
    if (r->early_len) log_text(r, r->early, r->early_len);
    r->early_len = 0;
}

void cli_train_report_close(CliTrainReport *r, TgStatus status) {
    cli_train_report_end(r);
    if (status != TG_OK) log_printf(r, "error: %s\n", tg_error_message());
    for (int i = 0; i < CLI_STREAMS; i++) {
        uint64_t lost = cli_output_lost((CliStream)i);
        int err = cli_output_error((CliStream)i);
        if (!lost && !err) continue;
        const char *name = i == CLI_STDOUT ? "stdout" : "stderr";
        const char *why = cli_output_was_closed((CliStream)i) ? "it is closed" : err ? strerror(err) : NULL;
        log_printf(r, "note: %s lost %llu bytes of what this log holds%s%s\n", name, (unsigned long long)lost,
                   why ? ": " : " (its reader fell behind)", why ? why : "");
        if (i == CLI_STDOUT && r->log.f)
            cli_output_printf(CLI_STDERR, "tapegrad %s: note: %s lost %llu bytes of the run's output%s%s; %s has all of it\n",
                              r->command, name, (unsigned long long)lost, why ? ": " : "", why ? why : "", r->log.path);
    }
    if (r->log.f) {
        char path[TG_PATH_CAP];
        snprintf(path, sizeof path, "%s", r->log.path);
        int err = tg_append_file_close(&r->log);
        if (err) warn(r, "%s lacks its last lines: %s", path, err);
    }
    free(r->early);
    r->early = NULL;
    r->early_len = r->early_cap = 0;
}

TgTrainReporter cli_train_reporter(CliTrainReport *r, const char *command) {
    *r = (CliTrainReport){.command = command, .tty = isatty(fileno(stderr)), .keeps_log = true};
    return (TgTrainReporter){.ctx = r, .message = print_message, .progress = print_progress, .sample = print_sample,
                           .preparing = print_preparing, .folder = open_log};
}

TgPrepareReporter cli_prepare_reporter(CliTrainReport *r, const char *command) {
    *r = (CliTrainReport){.command = command, .tty = isatty(fileno(stderr))};
    return (TgPrepareReporter){.ctx = r, .message = print_message, .progress = print_preparing};
}

TgMessageSink cli_message_sink(CliTrainReport *r) { return (TgMessageSink){print_message, r}; }
