/* LoRA adapter checkpoints: a checkpoint file (checkpoint/checkpoint.h) with flag bit 2, whose header
 * holds the base's model config and tokenizer fingerprint and a tag
 *
 *   lora r<rank> a<alpha, %.17g> t<target mask, hex> b<base weights fingerprint, 16 hex digits>
 *
 * and whose tensors are the adapters alone (weights and AdamW moments), with the trainer state. */
#ifndef TAPEGRAD_CHECKPOINT_ADAPTER_H
#define TAPEGRAD_CHECKPOINT_ADAPTER_H

#include <stddef.h>
#include <stdint.h>

#include "tapegrad/model.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_format.h"

/* Loads the adapter checkpoint `path` onto `model`, a base without adapters (its weights loaded,
 * its config the checkpoint's) known to the user as `base_name`: refused, naming both, when the
 * base's weights or tokenizer are not the ones the adapters were trained on. The adapters are
 * attached (the base frozen), then filled with the file's weights and moments; *info (may be
 * NULL) receives the file's header and trainer state. On failure the model has no adapters. */
TgStatus tg_adapter_load(const char *path, TgModel *model, const char *base_name, uint64_t tokenizer_fingerprint,
                      TgCheckpointInfo *info);
/* Whether `path` is an adapter's checkpoint (false for any other file, readable or not). */
bool tg_adapter_is_checkpoint(const char *path);

#endif
