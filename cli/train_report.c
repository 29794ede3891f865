#include "cli/train_report.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void cli_train_report_end(CliTrainReport *r) {
    if (!r->bar_shown) return;
    fputc('\n', stderr);
    r->bar_shown = false;
}

static void print_message(void *ctx, MessageLevel level, const char *text) {
    CliTrainReport *r = ctx;
    cli_train_report_end(r);
    if (level == MESSAGE_WARNING) {
        fflush(stdout);
        fprintf(stderr, "tapegrad %s: warning: %s\n", r->command, text);
        return;
    }
    printf("%s%s\n", level == MESSAGE_NOTE ? "note: " : "", text);
    fflush(stdout);
}

static void format_duration(double s, char *buf, size_t cap) {
    if (s < 0 || !isfinite(s)) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
}

static void print_progress(void *ctx, const TrainProgress *p) {
    CliTrainReport *r = ctx;
    char eta[32], val[48];
    format_duration(p->eta_s, eta, sizeof eta);
    if (isnan(p->val_loss)) snprintf(val, sizeof val, "-");
    else if (isnan(p->val_bpb)) snprintf(val, sizeof val, "%.4f", p->val_loss);
    else snprintf(val, sizeof val, "%.4f (%.3f bpb)", p->val_loss, p->val_bpb);
    if (r->tty) {
        enum { WIDTH = 30 };
        int filled = p->steps > 0 ? (int)((double)WIDTH * (double)p->step / (double)p->steps) : WIDTH;
        char bar[WIDTH + 1];
        for (int i = 0; i < WIDTH; i++) bar[i] = i < filled ? '#' : '.';
        bar[WIDTH] = '\0';
        fprintf(stderr, "\r[%s] step %lld/%lld | loss %.4f | val %s | %.0f tok/s | ETA %s   ", bar, (long long)p->step,
                (long long)p->steps, p->loss, val, p->tokens_per_s, eta);
        r->bar_shown = true;
        return;
    }
    printf("step %lld/%lld loss %.4f val %s lr %.2e grad_norm %.3f %.0f tok/s ETA %s\n", (long long)p->step,
           (long long)p->steps, p->loss, val, p->lr, p->grad_norm, p->tokens_per_s, eta);
    fflush(stdout);
}

/* Preparing data: a bar on a terminal, else a line at every tenth of the bytes and at the end. */
static void print_preparing(void *ctx, const PrepareProgress *p) {
    CliTrainReport *r = ctx;
    double mb = 1e6, frac = p->total ? (double)p->done / (double)p->total : 1.0;
    double rate = p->elapsed_s > 0 ? (double)p->done / mb / p->elapsed_s : 0;
    char eta[32];
    format_duration(rate > 0 ? ((double)p->total - (double)p->done) / mb / rate : 0, eta, sizeof eta);
    if (r->tty) {
        enum { WIDTH = 30 };
        int filled = (int)(WIDTH * frac);
        char bar[WIDTH + 1];
        for (int i = 0; i < WIDTH; i++) bar[i] = i < filled ? '#' : '.';
        bar[WIDTH] = '\0';
        fprintf(stderr, "\r[%s] %s %.1f/%.1f MB | %.1f MB/s | ETA %s   ", bar, p->phase, (double)p->done / mb,
                (double)p->total / mb, rate, eta);
        r->bar_shown = true;
        if (p->done >= p->total) cli_train_report_end(r);
        return;
    }
    int tenth = (int)(10 * frac);
    if (strcmp(r->phase, p->phase) == 0 && tenth <= r->tenth) return;
    snprintf(r->phase, sizeof r->phase, "%s", p->phase);
    r->tenth = tenth;
    printf("%s: %.1f/%.1f MB (%d%%), %.1f MB/s, %.1f s, ETA %s\n", p->phase, (double)p->done / mb, (double)p->total / mb,
           (int)(100 * frac), rate, p->elapsed_s, eta);
    fflush(stdout);
}

static void print_sample(void *ctx, const TrainSample *s) {
    CliTrainReport *r = ctx;
    cli_train_report_end(r);
    printf("\n--- sample (%lld tokens, temperature %g, top-k %d) ---\n", (long long)s->tokens, s->temperature, s->top_k);
    fwrite(s->prompt, 1, s->prompt_len, stdout);
    fwrite(s->text, 1, s->text_len, stdout);
    printf("\n---\n");
    fflush(stdout);
}

TrainReporter cli_train_reporter(CliTrainReport *r, const char *command) {
    *r = (CliTrainReport){.command = command, .tty = isatty(fileno(stderr))};
    return (TrainReporter){.ctx = r, .message = print_message, .progress = print_progress, .sample = print_sample,
                           .preparing = print_preparing};
}

PrepareReporter cli_prepare_reporter(CliTrainReport *r, const char *command) {
    *r = (CliTrainReport){.command = command, .tty = isatty(fileno(stderr))};
    return (PrepareReporter){.ctx = r, .message = print_message, .progress = print_preparing};
}

MessageSink cli_message_sink(CliTrainReport *r) { return (MessageSink){print_message, r}; }
