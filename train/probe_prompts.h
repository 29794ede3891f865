/* Probe prompts (--probe-prompts FILE, --probe-tokens N): fixed prompts, one a line of a text
 * file, whose greedy continuations a run writes at every evaluation, to see what the model makes
 * of them as it trains. Each becomes a line {"step": N, "prompt": ..., "text": ...} of the run's
 * probes.jsonl (run.h: tg_run_log_probe), in the file's order. A fine-tuning run gives each
 * prompt to the model through the chat template, as a user turn, and continues after the
 * generation prompt (data/chat_format.h); a continuation ends at N tokens or before <eot> (and
 * <|im_end|>). Greedy decoding draws nothing at random, so the lines of one step are the same
 * whenever the weights are: a resumed run writes what one that never stopped writes.
 *
 * The file is read and every prompt encoded before the run starts: a line that is empty, holds a
 * NUL byte, has text the tokenizer cannot encode or more tokens than the model's context (with
 * the chat template's) is refused with the file and the line. */
#ifndef TAPEGRAD_TRAIN_PROBE_PROMPTS_H
#define TAPEGRAD_TRAIN_PROBE_PROMPTS_H

#include <stddef.h>
#include <stdint.h>

#include "run/run.h"
#include "tapegrad/error.h"
#include "tapegrad/tape.h"

enum { TG_PROBE_MAX_PROMPTS = 256 };
#define TG_PROBE_MAX_FILE_BYTES ((size_t)1 << 20)

typedef struct TgProbePrompt {
    const char *text; /* the line as the file has it, without its line break */
    size_t len;
    int line;
    size_t first_id; /* its ids: ids[first_id, first_id + n_ids) of TgProbePrompts */
    int64_t n_ids;
} TgProbePrompt;

typedef struct TgProbePrompts {
    char *file; /* the file's bytes; the prompts' texts point into it */
    TgProbePrompt *prompts;
    int64_t n;
    int32_t *ids; /* every prompt's ids, as the model is given them */
    size_t n_ids;
    int64_t tokens; /* of each continuation */
} TgProbePrompts;

/* Reads and encodes the prompts of `path` for `run` (its tokenizer, context and task), each to be
 * continued by `tokens` tokens. TG_ERR_IO for a file that cannot be read; TG_ERR_FORMAT naming
 * the file and line for a prompt it cannot take (above), and for a file of no prompt or more than
 * TG_PROBE_MAX_PROMPTS. Free p on failure too. */
TgStatus tg_probe_prompts_load(TgProbePrompts *p, const char *path, int64_t tokens, const TgRun *run);
/* Every prompt's continuation through the run's model now, as probes.jsonl lines of `step`.
 * Nothing for no prompts. */
TgStatus tg_probe_prompts_write(const TgProbePrompts *p, TgRun *run, TgTape *tape, int64_t step);
void tg_probe_prompts_free(TgProbePrompts *p);

#endif
