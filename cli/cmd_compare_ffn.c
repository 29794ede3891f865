/* `tapegrad compare-ffn`: the dying-ReLU experiment (inspect/compare_ffn.h). */
#include <signal.h>

#include "cli/cli.h"
#include "cli/train_report.h"
#include "inspect/compare_ffn.h"

static volatile sig_atomic_t stop_requested;
static void on_stop_signal(int sig) { stop_requested = sig; }

static int run_compare_ffn(int argc, char **argv) {
    CompareFfnOptions o, defaults;
    compare_ffn_defaults(&defaults);
    o = defaults;
    int rc = cli_parse(compare_ffn_option_table(), &o, &defaults, NULL, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    struct sigaction sa = {0}, old_int, old_term;
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    CliTrainReport report;
    TrainReporter reporter = cli_train_reporter(&report, "compare-ffn");
    TgStatus s = compare_ffn_run(&o, &stop_requested, &reporter);
    cli_train_report_end(&report);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    return cli_exit("compare-ffn", s);
}

CLI_ONE_TABLE(option_tables, compare_ffn_option_table())

const Subcommand cmd_compare_ffn = {"compare-ffn", "train ReLU-FFN and SwiGLU-FFN models side by side; dying-ReLU report",
                                    run_compare_ffn, option_tables};
