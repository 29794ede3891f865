/* A LoRA run merged into a whole model: `tapegrad ckpt merge RUN --out DIR`. */
#ifndef TAPEGRAD_EXPORT_MERGE_H
#define TAPEGRAD_EXPORT_MERGE_H

#include <stddef.h>

#include "tapegrad/error.h"
#include "tapegrad/model.h"

/* Opens the LoRA run `source` (a run folder or an adapter checkpoint in one, with the base its
 * run.txt names), folds its adapters into the base (W += (alpha / r) B A) and writes a new run
 * folder `out_dir` (run_folder.h: never a folder holding a run's files; nothing is left behind on
 * failure) with run.txt, the tokenizer, the val split and one checkpoint of the merged weights,
 * which every command reads as any run's. *merged receives the folder's path. A source without
 * adapters is refused (TG_ERR_ARG). */
TgStatus tg_run_merge_adapter(const char *source, const char *out_dir, char *merged, size_t cap);
/* Folds the model's adapters into its base (tg_lora_merge; nothing without adapters), then
 * refuses (TG_ERR_FORMAT, naming the tensor, an element and `source`) weights that are not
 * finite: adapters whose product overflows a float would give a model no command opens. */
TgStatus tg_run_merge_weights(TgModel *model, const char *source);

#endif
