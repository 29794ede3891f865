#include "cli/cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/flags.h"
#include "cli/output.h"
#include "lib/dist.h"
#include "support/setting_names.h"

const Subcommand *const cli_subcommands[] = {
    &cmd_prepare,
    &cmd_train,
    &cmd_sft,
    &cmd_dpo,
    &cmd_chat,
    &cmd_serve,
    &cmd_sample,
    &cmd_eval,
    &cmd_inspect,
    &cmd_report,
    &cmd_compare_ffn,
    &cmd_ckpt,
    &cmd_graph,
    &cmd_bench,
    &cmd_gradcheck,
    &cmd_selftest,
};
const int cli_subcommand_count = (int)(sizeof cli_subcommands / sizeof cli_subcommands[0]);

int cli_parse(const TgOptTable *t, void *opts, const void *defaults, TgOptSet *given, int argc, char **argv,
              const char **positional, int *n_positional) {
    bool help = false;
    TgStatus s = cli_flags_parse(t, opts, given, argc, argv, positional, n_positional, &help);
    if (s != TG_OK) return cli_exit(t->command, s);
    if (help) {
        cli_flags_print_help(stdout, t, defaults);
        return 0;
    }
    return -1;
}

static bool reader_gone; /* a write to stdout met EPIPE: its reader closed the pipe */

/* The flag of a setting the library's messages name (support/setting_names.h): the option of
 * train's table whose field it is, else the first such option of the subcommands in their order. */
const char *cli_flag_of_setting(const char *name, size_t len) {
    char setting[64];
    if (len >= sizeof setting) return NULL;
    snprintf(setting, sizeof setting, "%.*s", (int)len, name);
    for (int c = -1; c < cli_subcommand_count; c++) {
        const Subcommand *sub = c < 0 ? &cmd_train : cli_subcommands[c];
        for (int k = 0; sub->table && sub->table(k); k++) {
            const TgOptTable *t = sub->table(k);
            int i = tg_opt_find_setting(t, setting);
            if (i >= 0) return t->specs[i].flag;
        }
    }
    return NULL;
}

void cli_name_settings_by_flags(void) { tg_setting_namer_set(cli_flag_of_setting); }

int cli_exit(const char *command, TgStatus status) {
    if (status == TG_OK) return 0;
    /* `ckpt info RUN | head`: the reader had what it wanted; nothing to say, nothing failed */
    if (status == TG_ERR_INTERRUPTED && reader_gone) return 0;
    fflush(stdout);
    cli_output_printf(CLI_STDERR, "tapegrad %s: %s\n", command, tg_error_message());
    return status == TG_ERR_ARG ? 2 : 1;
}

/* A collective waited past --comm-timeout (lib/dist.h): this rank ends, and the launcher ends
 * the others. On the watchdog's thread, while the main thread is blocked in MPI. */
static void end_rank_on_timeout(const char *message) {
    cli_output_printf(CLI_STDERR, "tapegrad: %s\n", message);
    cli_output_finish(1.0); /* a launcher that stopped reading must not keep the rank from ending */
    _exit(1);
}

TgStatus cli_join_job(double timeout_s) {
    TG_TRY(tg_dist_open(timeout_s, end_rank_on_timeout));
    if (tg_dist_rank() > 0 && !freopen("/dev/null", "w", stdout))
        return tg_fail(TG_ERR_IO, "rank %d cannot silence its output", tg_dist_rank());
    return TG_OK;
}

bool cli_stdout_reader_gone(void) { return reader_gone; }

TgStatus cli_stdout_check(void) {
    if (fflush(stdout) == 0 && !ferror(stdout)) return TG_OK;
    if (errno == EPIPE || cli_output_error(CLI_STDOUT) == EPIPE) {
        reader_gone = true;
        return tg_fail(TG_ERR_INTERRUPTED, "its reader closed the pipe");
    }
    /* errno says why: the failed fflush set it, or the earlier write that failed (fflush then had
     * nothing left to write), since callers check after each line or reply */
    return tg_fail(TG_ERR_IO, "cannot write its output: %s",
                   cli_output_was_closed(CLI_STDOUT) ? "stdout is closed" : strerror(errno ? errno : EIO));
}

int cli_usage_error(const char *command, const char *fmt, ...) {
    char text[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fflush(stdout);
    cli_output_printf(CLI_STDERR, "tapegrad %s: %s\n", command, text);
    return 2;
}

const char *cli_shell_word(const char *text, char *buf, size_t cap) {
    bool plain = *text != '\0';
    for (const char *c = text; *c && plain; c++)
        plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                strchr("_./:-=+,@%", *c) != NULL;
    if (plain) {
        snprintf(buf, cap, "%s", text);
        return buf;
    }
    size_t n = 0;
    if (cap < 3) {
        if (cap) buf[0] = '\0';
        return buf;
    }
    buf[n++] = '\'';
    for (const char *c = text; *c && n + 6 < cap; c++) {
        if (*c == '\'') {
            memcpy(buf + n, "'\\''", 4); /* close, an escaped quote, open again */
            n += 4;
        } else {
            buf[n++] = *c;
        }
    }
    buf[n++] = '\'';
    buf[n] = '\0';
    return buf;
}

static char program[4096] = "tapegrad";

void cli_program_set(const char *argv0) {
    if (argv0 && strchr(argv0, '/')) cli_shell_word(argv0, program, sizeof program);
}

const char *cli_program(void) { return program; }
