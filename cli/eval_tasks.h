/* `tapegrad eval --task FILE ...`: a trained run scored on task files (train/tasks.h), a line per
 * file or one JSON object. */
#ifndef TAPEGRAD_CLI_EVAL_TASKS_H
#define TAPEGRAD_CLI_EVAL_TASKS_H

#include <stdbool.h>

#include "support/options.h"

typedef struct CliTaskEval {
    const char *run;        /* --run */
    const TgOptList *tasks; /* --task, given at least once */
    int threads;
    bool json;
    bool other_data; /* --data or --dataset was given too (refused) */
} CliTaskEval;

/* The exit code of `tapegrad eval` with --task. */
int cli_eval_tasks(const CliTaskEval *e);

#endif
