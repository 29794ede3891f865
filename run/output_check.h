/* Where a command may write: the one check of every path a user points a writer at.
 *
 * Every file a command writes to a path named on its command line goes through tg_output_check
 * before the command reads or computes anything: `ckpt export --safetensors` (and the
 * config.json beside it), `--hf` (the folder's five files), `--gguf`, `report --out` (and the
 * series .jsonl beside it), `inspect --dump-grads`, `compare-ffn --out` (its report and
 * summaries). A path is refused, with one line naming it and what is wrong (TG_ERR_ARG), when it
 *   - is empty, or ends in '/', '.' or '..' (no file name);
 *   - names a file of a run folder (tg_run_file_name, in a folder tg_run_folder_is_run recognises by
 *     its files): always, even with --force: no command but the trainer writes a run's
 *     checkpoints, `latest`, tokenizer, token files, settings, metrics or lock;
 *   - is a symbolic link, a FIFO, a device, a socket or a folder (lstat: a link there is never
 *     followed, whatever it points to);
 *   - is a file the command reads (tg_output_plan_input), or another output of the same command
 *     (two outputs that would be one file);
 *   - is an existing file, unless `force` (--force).
 * A folder the command writes into (tg_output_check_folder) may be a link to a folder; each file
 * written inside it is checked as above.
 *
 * The write that follows goes through support/atomic_file.h: a temporary file created with O_EXCL
 * (never through a link) is renamed over the path, and rename(2) replaces a link that appeared
 * there after the check, never the file it points to.
 */
#ifndef TAPEGRAD_RUN_OUTPUT_CHECK_H
#define TAPEGRAD_RUN_OUTPUT_CHECK_H

#include <stdbool.h>
#include <sys/types.h>

#include "tapegrad/error.h"
#include "tapegrad/limits.h"

enum { TG_OUTPUT_PLAN_MAX_OUTPUTS = 8, TG_OUTPUT_PLAN_MAX_INPUTS = 4 };

/* The outputs and inputs of one command, so that no two of them are one file. A zeroed plan is
 * empty (tg_output_plan_init). */
typedef struct TgOutputPlan {
    int n_outputs, n_inputs;
    struct {
        char what[64];              /* "--gguf", "the config.json beside --safetensors" */
        char path[TG_PATH_CAP];     /* as given */
        char canonical[TG_PATH_CAP]; /* its folder resolved (realpath), then its name */
    } outputs[TG_OUTPUT_PLAN_MAX_OUTPUTS];
    struct {
        dev_t dev;
        ino_t ino;
        char path[TG_PATH_CAP];
    } inputs[TG_OUTPUT_PLAN_MAX_INPUTS];
} TgOutputPlan;

/* plan is malloc'ed by the caller or static: it is about 80 kB. */
void tg_output_plan_init(TgOutputPlan *plan);
/* A file the command reads (its checkpoint, say): no output may be that file. A path that does
 * not exist is ignored. */
void tg_output_plan_input(TgOutputPlan *plan, const char *path);

/* The check of one output file (see above). `what` names it in messages: the flag ("--gguf") or
 * what the file is to it ("the config.json beside --safetensors"). plan may be NULL (no other
 * outputs to compare with); a path that passes is added to it. */
TgStatus tg_output_check(TgOutputPlan *plan, const char *what, const char *path, bool force);
/* A folder the command writes its files into (`--hf DIR`, `compare-ffn --out DIR`): refused when
 * empty, when something other than a folder (or a link to one) is there, and when it is a run
 * folder. It need not exist. */
TgStatus tg_output_check_folder(const char *what, const char *path);

#endif
