/* The `tapegrad` program: its subcommands (one file each, cli/cmd_*.c) and what they share.
 *
 * Each subcommand describes its flags once, as an TgOptTable (support/options.h), and parses them with
 * cli_parse. Library calls return a TgStatus; cli_exit maps it to the exit code: 0 for TG_OK,
 * 2 for a bad flag or value (TG_ERR_ARG), 1 for everything about files and data. */
#ifndef TAPEGRAD_CLI_H
#define TAPEGRAD_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "tapegrad/error.h"
#include "support/options.h"
#include "tapegrad/version.h"

typedef struct {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand's name */
    /* its option tables, the i-th for i = 0, 1, ... until NULL (ckpt has two: info and export):
     * for the test that a flag several subcommands share has one range everywhere */
    const TgOptTable *(*table)(int i);
} Subcommand;

extern const Subcommand cmd_prepare, cmd_train, cmd_sft, cmd_dpo, cmd_chat, cmd_serve, cmd_sample, cmd_eval, cmd_graph,
    cmd_inspect, cmd_report, cmd_compare_ffn, cmd_ckpt, cmd_bench, cmd_gradcheck, cmd_selftest;

/* Every subcommand, in the order `tapegrad --help` lists them. */
extern const Subcommand *const cli_subcommands[];
extern const int cli_subcommand_count;

/* The `table` of a subcommand with one TgOptTable `t`: CLI_ONE_TABLE(name_of_function, &t). */
#define CLI_ONE_TABLE(fn, t) \
    static const TgOptTable *fn(int i) { return i == 0 ? (t) : NULL; }

/* Parses argv with table t into opts (and *given, which may be NULL). Returns -1 when the
 * subcommand should go on; otherwise the exit code to return at once: 0 after printing --help
 * (defaults from `defaults`), 2 after printing the parse error. */
int cli_parse(const TgOptTable *t, void *opts, const void *defaults, TgOptSet *given, int argc, char **argv,
              const char **positional, int *n_positional);
/* The library's messages name settings by their fields (`n_heads`, support/setting_names.h); from
 * this call on they name them by their flags (--heads), as the option tables pair them. */
void cli_name_settings_by_flags(void);
/* The flag of the setting named by the `len` bytes at `name`, or NULL. */
const char *cli_flag_of_setting(const char *name, size_t len);
/* 0 for TG_OK; otherwise prints "tapegrad <command>: <message>" and returns 2 for TG_ERR_ARG,
 * 1 for anything else. */
int cli_exit(const char *command, TgStatus status);
/* For a subcommand that runs data-parallel under mpirun (lib/dist.h): joins the job (tg_dist_open)
 * and silences stdout on every rank but 0, so the job prints one report; errors still go to
 * stderr from any rank. A rank whose collective waits past timeout_s prints why and exits 1. */
TgStatus cli_join_job(double timeout_s);
/* Whether what the command printed so far reached its stdout: flushes it, then reads the
 * stream's error flag (set by any write that failed since, its bytes dropped). A failure is
 * TG_ERR_IO "cannot write its output: REASON" (a full disk, a closed stdout or pipe), for
 * cli_exit to print once; a command that prints as it goes checks after each reply or line, and
 * stops at the first that was lost. */
TgStatus cli_stdout_check(void);
/* Whether stdout's reader closed the pipe (EPIPE): cli_stdout_check then returns TG_ERR_INTERRUPTED,
 * and cli_exit makes that a quiet exit 0, as `| head` expects of a printing command. */
bool cli_stdout_reader_gone(void);
/* The program as this process was started, for the commands a hint prints ("talk to it: PROGRAM
 * chat --run RUN"), so that they run as printed: argv[0] when it names a path (./build/tapegrad),
 * else "tapegrad" (found on the PATH); quoted for a POSIX shell when it needs it. main sets it. */
void cli_program_set(const char *argv0);
const char *cli_program(void);
/* `text` as one word of a POSIX shell command: as it is when it needs no quoting, else in single
 * quotes ('\'' for a quote inside). Into buf (cut to cap). */
const char *cli_shell_word(const char *text, char *buf, size_t cap);
/* A usage error: prints "tapegrad <command>: <message>" and returns 2. */
int cli_usage_error(const char *command, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
