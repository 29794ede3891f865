/* The names the checkpoint reader and writer share: what a record's kind is called, and the tag
 * of a LoRA adapter checkpoint (checkpoint/adapter.h),
 *
 *   lora r<rank> a<alpha, %.17g> t<target mask, hex> b<base weights fingerprint, 16 hex digits>
 *
 * followed, when token rows train beside the adapters, by " k<id>,<id>,..." (ascending).
 */
#ifndef TAPEGRAD_CHECKPOINT_FORMAT_H
#define TAPEGRAD_CHECKPOINT_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "tapegrad/error.h"
#include "tapegrad/model.h"

/* Tags, with their NUL: a parameter set's 1 to 63 bytes; an adapter's longer (its token ids) */
enum { TG_CHECKPOINT_PARAM_TAG_CAP = 64, TG_CHECKPOINT_TAG_CAP = 2560 };
/* What a tensor record holds: the weights, or one of AdamW's moments. */
enum { TG_CHECKPOINT_KIND_WEIGHT = 0, TG_CHECKPOINT_KIND_ADAM_M = 1, TG_CHECKPOINT_KIND_ADAM_V = 2 };
/* "weight", "AdamW m", "AdamW v" for TG_CHECKPOINT_KIND_*, "unknown" otherwise. */
const char *tg_checkpoint_kind_name(int kind);
/* The tag of the model's adapters (lora non-NULL). */
void tg_adapter_tag(const TgLora *lora, char *buf, size_t cap);
/* The adapters' config and base fingerprint of a tag; TG_ERR_FORMAT naming `path` when the tag is
 * not one tg_adapter_tag writes. */
TgStatus tg_adapter_tag_parse(const char *tag, const char *path, TgLoraConfig *cfg, uint64_t *base_fingerprint);
#endif
