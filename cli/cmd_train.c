/* `tapegrad train`: its flags are the table of run/train_options.c. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/output.h"
#include "cli/train_report.h"
#include "inspect/inspect.h"
#include "lib/dist.h"
#include "support/path.h"
#include "run/run_folder.h"
#include "train/trainer.h"

/* The first SIGINT/SIGTERM asks the trainer to stop after the current step and save; the handler
 * is then reset (SA_RESETHAND), so a second one ends the process at once. That is safe too: a
 * checkpoint write never leaves `latest` naming a torn file. SIGUSR1 stops the same way: Open
 * MPI's mpirun passes it on to every rank and lets the job end by itself, where SIGINT/SIGTERM
 * make mpirun kill the ranks a moment (odls_base_sigkill_timeout) after passing SIGTERM on.
 *
 * SIGHUP (the terminal closed, an ssh session dropped) does not stop the run: it goes on as under
 * nohup, its terminal output is dropped from then on (cli/output.h), and RUN/log.txt keeps every
 * line and notes when the hangup came. To stop a run, send SIGINT, SIGTERM or SIGUSR1. */
static volatile sig_atomic_t stop_requested, hangup_seen;
static void on_stop_signal(int sig) { stop_requested = sig; }
static void on_hangup(int sig) { hangup_seen = sig; }
static const int stop_signals[] = {SIGINT, SIGTERM, SIGUSR1};
enum { N_STOP_SIGNALS = sizeof stop_signals / sizeof stop_signals[0] };

/* How long the output may take to reach the terminal once a signal stopped the run: a launcher
 * that sent it may have stopped reading, and kills the process a few seconds later. */
#define SIGNAL_OUTPUT_WAIT_S 1.0

/* On --resume, says which of the flags given now change the run's saved settings. */
static void note_changes(const TgTrainOptions *o, const TgTrainOptions *saved, TgOptSet given_on_command_line,
                         const TgMessageSink *notes) {
    const TgOptTable *t = tg_train_option_table();
    for (int i = 0; i < t->count; i++) {
        const TgOptSpec *s = &t->specs[i];
        if (!(given_on_command_line & TG_OPT_BIT(i)) || !(s->group & TG_TRAIN_OPT_SAVED) || tg_opt_equal(t, i, o, saved))
            continue;
        char was[256];
        tg_opt_format(t, i, saved, was, sizeof was);
        tg_message_emit(notes, TG_MESSAGE_NOTE, "%s applies from the resumed step on, instead of the run's %s%s", s->flag, was,
                     s->group & TG_TRAIN_OPT_NUMERIC ? " (the run is no longer bitwise the one it would have been)" : "");
    }
}

/* Whether RESUME (a run folder, or a checkpoint in one) is a run's: it holds run.txt. Anything
 * else the resume refuses on its own, with its own message. */
static bool resumes_a_run(const char *resume) {
    char dir[TG_PATH_CAP], path[TG_PATH_CAP];
    if (tg_run_folder_locate(resume, dir, sizeof dir) != TG_OK) {
        tg_error_clear();
        return false;
    }
    return tg_path_join(path, sizeof path, dir, TG_RUN_IDENTITY_FILE) == TG_OK && access(path, F_OK) == 0;
}

/* On --resume of a run folder without train_options.txt (deleted, or a run from before the file):
 * says exactly which values the options not given now take, since they are the defaults and not
 * the run's own. The run writes the file anew as it starts. */
static void note_missing_options(const TgTrainOptions *o, TgOptSet given_on_command_line, const TgMessageSink *notes) {
    const TgOptTable *t = tg_train_option_table();
    char list[4096] = "";
    size_t used = 0;
    for (int i = 0; i < t->count && used + 1 < sizeof list; i++) {
        const TgOptSpec *s = &t->specs[i];
        if ((given_on_command_line & TG_OPT_BIT(i)) || !(s->group & TG_TRAIN_OPT_SAVED)) continue;
        char value[256];
        tg_opt_format(t, i, o, value, sizeof value);
        if (s->type == TG_OPT_DOUBLE) snprintf(value, sizeof value, "%g", *(const double *)((const char *)o + s->offset));
        const char *shown = s->default_text ? s->default_text : value;
        if (!*shown) continue; /* unset */
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s %s", used ? ", " : "", s->flag, shown);
    }
    tg_message_emit(notes, TG_MESSAGE_WARNING,
                    "the run folder of %s has no %s (deleted, or written before the file existed): this resume takes "
                    "the defaults of "
                    "every option not given now, not the run's own: %s. If the run had others, stop it and resume "
                    "giving them as flags",
                    o->invocation.resume, TG_TRAIN_OPTIONS_FILE, list);
}

/* The paths of --eval-task and --probe-prompts given now, made absolute (when they name a file),
 * as --init-from's are: train_options.txt keeps them, and a resume from another folder must find
 * the same files. */
static void absolute_paths(TgTrainOptions *o, TgOptStrings *strings) {
    const TgOptTable *t = tg_train_option_table();
    char *real;
    if (o->given & TG_OPT_BIT(tg_opt_find(t, "--eval-task")))
        for (int i = 0; i < o->schedule.eval_tasks.count; i++)
            if ((real = realpath(o->schedule.eval_tasks.items[i], NULL))) {
                o->schedule.eval_tasks.items[i] = tg_opt_strings_keep(strings, real);
                free(real);
            }
    if ((o->given & TG_OPT_BIT(tg_opt_find(t, "--probe-prompts"))) && o->schedule.probe_prompts &&
        *o->schedule.probe_prompts && (real = realpath(o->schedule.probe_prompts, NULL))) {
        o->schedule.probe_prompts = tg_opt_strings_keep(strings, real);
        free(real);
    }
}

/* `tapegrad train`, `tapegrad sft` (train --task sft) and `tapegrad dpo` (train --task dpo): one table of options. From
 * joining the job to the exit code, everything printed goes through cli/output.h and the run's log. */
static int run_training(const TgOptTable *table, TgTrainTask task, int argc, char **argv) {
    const char *command = table->command;
    TgTrainOptions o, defaults;
    tg_train_options_defaults(&defaults);
    defaults.spec.task = task;
    o = defaults;
    int rc = cli_parse(table, &o, &defaults, &o.given, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    TgOptStrings strings = {0};
    absolute_paths(&o, &strings);
    TgStatus s = cli_join_job(o.invocation.comm_timeout_s);
    cli_output_start();
    CliTrainReport report;
    TgTrainReporter reporter = cli_train_reporter(&report, command);
    if (tg_dist_rank() > 0) reporter = (TgTrainReporter){0}; /* rank 0 reports for the job */
    TgMessageSink notes = {reporter.message, reporter.ctx};
    if (s == TG_OK && o.invocation.resume) {
        TgOptSet given_now = o.given;
        TgTrainOptions saved;
        s = tg_train_options_restore(o.invocation.resume, &o, &saved, &strings);
        if (s == TG_OK) note_changes(&o, &saved, given_now, &notes);
        if (s == TG_OK && !o.options_file && resumes_a_run(o.invocation.resume))
            note_missing_options(&o, given_now, &notes);
    }
    if (s == TG_OK) {
        TgGradLogger grads;
        TgTrainHooks hooks = tg_grad_logger_hooks(&grads, o.schedule.log_grads, 0);
        struct sigaction sa = {0}, hup = {0}, old[N_STOP_SIGNALS], old_hup;
        sa.sa_handler = on_stop_signal;
        sa.sa_flags = SA_RESETHAND | SA_RESTART;
        hup.sa_handler = on_hangup;
        hup.sa_flags = SA_RESTART;
        stop_requested = hangup_seen = 0;
        for (int i = 0; i < N_STOP_SIGNALS; i++) sigaction(stop_signals[i], &sa, &old[i]);
        sigaction(SIGHUP, &hup, &old_hup);
        report.hangup = &hangup_seen;
        TgTrainRequest req;
        s = tg_train_options_request(&o, &req);
        if (s == TG_OK) s = tg_train_run(&req, &stop_requested, o.schedule.log_grads > 0 ? &hooks : NULL, &reporter);
        /* the next command, as it runs from here */
        if (s == TG_OK && tg_train_task_chat(o.spec.task) && !stop_requested && report.run_dir[0] && reporter.message) {
            char hint[3 * 4096 + 64], word[3 * 4096];
            snprintf(hint, sizeof hint, "talk to it: %s chat --run %s", cli_program(),
                     cli_shell_word(report.run_dir, word, sizeof word));
            reporter.message(reporter.ctx, TG_MESSAGE_INFO, hint);
        }
        for (int i = 0; i < N_STOP_SIGNALS; i++) sigaction(stop_signals[i], &old[i], NULL);
        sigaction(SIGHUP, &old_hup, NULL);
        tg_grad_logger_close(&grads);
    }
    if (s != TG_OK && tg_dist_ranks() > 1) s = tg_fail_context(s, "rank %d of %d", tg_dist_rank(), tg_dist_ranks());
    cli_train_report_close(&report, s);
    /* a launcher passes SIGINT/SIGTERM on when it ends the job; it passes SIGUSR1 on and waits */
    tg_dist_close(stop_requested == SIGINT || stop_requested == SIGTERM);
    tg_opt_strings_free(&strings);
    rc = cli_exit(command, s);
    cli_output_finish(stop_requested ? SIGNAL_OUTPUT_WAIT_S : -1);
    return rc;
}

static int run_train(int argc, char **argv) { return run_training(tg_train_option_table(), TG_TASK_PRETRAIN, argc, argv); }
static int run_sft(int argc, char **argv) { return run_training(tg_sft_option_table(), TG_TASK_SFT, argc, argv); }
static int run_dpo(int argc, char **argv) { return run_training(tg_dpo_option_table(), TG_TASK_DPO, argc, argv); }

CLI_ONE_TABLE(option_tables, tg_train_option_table())
CLI_ONE_TABLE(sft_option_tables, tg_sft_option_table())
CLI_ONE_TABLE(dpo_option_tables, tg_dpo_option_table())

const Subcommand cmd_train = {"train", "train a model (no flags: the small preset on the default corpus)",
                              run_train, option_tables};
const Subcommand cmd_sft = {"sft", "fine-tune a run on conversations (MiniMind's SFT JSONL): train --task sft",
                            run_sft, sft_option_tables};
const Subcommand cmd_dpo = {"dpo",
                            "train a fine-tuned run toward preferred replies (MiniMind's DPO JSONL): train --task dpo",
                            run_dpo, dpo_option_tables};
