/* How the program shows a training run (train/trainer.h's TgTrainReporter): what every
 * subcommand that trains (train, sft, compare-ffn) prints, written once.
 *
 *   messages   on stdout; notes as "note: ...", warnings on stderr as "tapegrad CMD: warning: ..."
 *   progress   a bar redrawn on stderr when stderr is a terminal, else one line per report on stdout:
 *              "step 50/1500 loss 3.2933 val 3.3415 (1.581 bpb) lr 3.03e-04 grad_norm 0.313 4405 tok/s ETA 0m00s"
 *              (bpb: the val loss in bits per byte, docs/data.md)
 *   preparing  (data/prepare.h) the same bar, "[###...] encoding 120.4/200.0 MB | 24.1 MB/s | ETA 0m03s",
 *              or without a terminal a line at every tenth of the bytes
 *   sample     between a "--- sample (N tokens, temperature T, top-k K) ---" line and "---"
 *
 * The run's log: every line the run prints without a terminal also goes to RUN/log.txt (the
 * run's folder, TG_RUN_LOG_FILE), whatever the terminal does: the lines printed before the folder
 * exists wait until the trainer names it, a resumed run appends, and each session begins with a
 * "--- DATE tapegrad CMD (pid N) ---" line. So a closed terminal, a pipe nobody read or a
 * launcher that stopped reading loses no message. The terminal itself is written through
 * cli/output.h once cli_output_start ran, so it never blocks training. */
#ifndef TAPEGRAD_CLI_TRAIN_REPORT_H
#define TAPEGRAD_CLI_TRAIN_REPORT_H

#include <signal.h>
#include <stdbool.h>

#include "support/append_file.h"
#include "train/trainer.h"

typedef struct CliTrainReport {
    const char *command; /* "train": warnings read "tapegrad train: warning: ..." */
    bool tty;            /* stderr is a terminal: progress is a bar */
    bool bar_shown;      /* the bar holds the cursor's line: anything else printed starts a new one */
    char phase[16];      /* preparing data: the phase and tenth last logged */
    int tenth;
    bool keeps_log;      /* a training run's reporter (not prepare's) */
    TgAppendFile log;      /* RUN/log.txt, once the trainer named the run's folder */
    int log_error;       /* the errno the log last reported on the terminal (0: none) */
    int log_gone;        /* the errno of a failed recreation of the log, said once (0: none) */
    char run_dir[4096];  /* the run's folder, as the trainer last named it ("" before) */
    char *early;         /* the lines before that, for the log */
    size_t early_len, early_cap;
    volatile sig_atomic_t *hangup; /* SIGHUP's flag (may be NULL): noted once in the log */
    bool hangup_noted;
} CliTrainReport;

/* A reporter printing as above, its state in *report. */
TgTrainReporter cli_train_reporter(CliTrainReport *report, const char *command);
/* Ends the bar's line, if one is shown (after the run). */
void cli_train_report_end(CliTrainReport *report);
/* After the run: logs how it ended (the error's message when status is not TG_OK, and what the
 * terminal lost) and closes the log. */
void cli_train_report_close(CliTrainReport *report, TgStatus status);
/* The messages and the preparing bar for `tapegrad prepare`. */
TgPrepareReporter cli_prepare_reporter(CliTrainReport *report, const char *command);
/* The same messages for a caller with a TgMessageSink (support/messages.h). */
TgMessageSink cli_message_sink(CliTrainReport *report);

#endif
