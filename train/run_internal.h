/* What train/run.c and train/run_sft.c (a new fine-tuning run) share; nothing else includes it. */
#ifndef TAPEGRAD_TRAIN_RUN_INTERNAL_H
#define TAPEGRAD_TRAIN_RUN_INTERNAL_H

#include "train/run.h"

/* The run's TRAIN_OPT_IDENTITY options into DIR/run.txt. */
TgStatus run_identity_write(const char *dir, const TrainOptions *id);
/* The model config of the flags (the preset's, overridden by the shape flags) for a vocabulary. */
TgStatus run_resolve_config(const TrainOptions *o, int64_t vocab, TgModelConfig *out);
/* The model of the flags and the tokenizer, its weights from --init-from's safetensors (checked)
 * or initialised from the seed. */
TgStatus run_build_new_model(Run *run, const TrainOptions *o, uint64_t seed);
/* The new run's temporary folder, locked. */
TgStatus run_begin_new_folder(Run *run);
/* The folder of a new run given no --out: checkpoints/<kind>-<local time>. */
void run_generated_folder(char *out, size_t cap, const char *kind);

/* run_sft.c: whether --init-from names a run folder or a checkpoint (not a safetensors file); a
 * new fine-tuning run (run_open_for_training's, for --task sft); a fine-tuning run's
 * conversations in `dir`, for a window of seq_len (the val split alone unless want_train). */
bool run_init_from_is_run(const char *path);
TgStatus run_open_new_sft(TrainOptions *o, bool writes, const PrepareReporter *preparing, Run *run);
TgStatus run_open_sft_splits(Run *run, const char *dir, int64_t seq_len, bool want_train);

/* run_lora.c: LoRA adapters on a new run's model when the options ask for them (o->lora_rank > 0),
 * the base frozen; a base's weights (a run folder or checkpoint, whose own adapters are folded in,
 * or a safetensors file) copied into `model`, built with its shape; and a LoRA run's checkpoint
 * (its adapters) opened onto the base its run.txt names (run->model built with the checkpoint's
 * config, run->dir and run->tok set). */
TgStatus run_attach_lora(Run *run, const TrainOptions *o);
TgStatus run_load_base_weights(TgModel *model, const char *init_from, const TgTokenizer *tok, const MessageSink *messages);
TgStatus run_open_adapter(Run *run, const char *ckpt_path, CheckpointInfo *info);

#endif
