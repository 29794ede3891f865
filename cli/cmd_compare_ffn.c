/* `tapegrad compare-ffn`: the dying-ReLU experiment (cli/study/compare_ffn.h). */
#include <signal.h>

#include "cli/cli.h"
#include "cli/output.h"
#include "cli/train_report.h"
#include "cli/study/compare_ffn.h"

/* Signals as `tapegrad train` takes them (cmd_train.c): SIGINT/SIGTERM stop after the step and
 * save, SIGHUP leaves the runs going. */
static volatile sig_atomic_t stop_requested, hangup_seen;
static void on_stop_signal(int sig) { stop_requested = sig; }
static void on_hangup(int sig) { hangup_seen = sig; }

static int run_compare_ffn(int argc, char **argv) {
    CompareFfnOptions o, defaults;
    compare_ffn_defaults(&defaults);
    o = defaults;
    int rc = cli_parse(compare_ffn_option_table(), &o, &defaults, NULL, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    struct sigaction sa = {0}, hup = {0}, old_int, old_term, old_hup;
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    hup.sa_handler = on_hangup;
    hup.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGHUP, &hup, &old_hup);
    cli_output_start();
    CliTrainReport report;
    TgTrainReporter reporter = cli_train_reporter(&report, "compare-ffn");
    report.hangup = &hangup_seen;
    TgStatus s = compare_ffn_run(&o, &stop_requested, &reporter);
    cli_train_report_close(&report, s);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGHUP, &old_hup, NULL);
    rc = cli_exit("compare-ffn", s);
    cli_output_finish(stop_requested ? 1.0 : -1);
    return rc;
}

CLI_ONE_TABLE(option_tables, compare_ffn_option_table())

const Subcommand cmd_compare_ffn = {"compare-ffn", "train ReLU-FFN and SwiGLU-FFN models side by side; dying-ReLU report",
                                    run_compare_ffn, option_tables};
