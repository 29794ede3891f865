/* What the checkpoint reader and writer share; not part of the public interface. */
#ifndef TAPEGRAD_CHECKPOINT_INTERNAL_H
#define TAPEGRAD_CHECKPOINT_INTERNAL_H

#include "checkpoint/checkpoint.h"

static const char CHECKPOINT_MAGIC[8] = {'T', 'G', 'C', 'K', 'P', 'T', '\r', '\n'};
static const char CHECKPOINT_END_MARK[8] = {'T', 'G', 'E', 'N', 'D', '\r', '\n', '\0'};
/* I/O buffer size; zlib's windowBits 15 + 16 selects the gzip wrapper (header, CRC32, length) */
enum { TG_CHECKPOINT_IO_CHUNK = 1 << 18, TG_CHECKPOINT_GZIP_WINDOW_BITS = 15 + 16 };

/* Loads weights and AdamW moments into ps from a checkpoint whose header holds `cfg` (a model's)
 * or, when cfg is NULL, a parameter set's tag equal to `tag` (NULL: any tag). Checks every
 * tensor's name and shape, the end marker and the gzip CRC; ps is unchanged on failure. */
TgStatus tg_checkpoint_load_store(const char *path, const TgParamStore *ps, const TgModelConfig *cfg, const char *tag,
                                TgCheckpointInfo *info);

#endif
