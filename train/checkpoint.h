/* Checkpoints: one gzip stream (zlib) per file.
 *
 *   "TGCKPT\r\n" magic, u32 format version
 *   model config (i64 dim, layers, heads, kv_heads, hidden, vocab, seq; i32 ffn; f64 theta, eps)
 *   u64 tokenizer fingerprint
 *   u32 tensor count, then per tensor: u16 name length, name, u8 kind (0 weight, 1 AdamW m,
 *       2 AdamW v), u32 ndim, i64 shape[ndim], f32 data[numel] (little-endian)
 *   trainer state (TrainerState, field by field)
 *   "TGEND\r\n\0" end marker
 * gzip's own CRC32 and length trailer cover the whole stream, so `gzip -t` verifies a file
 * and a flipped or missing byte is refused on load.
 *
 * A write goes to NAME.tmp, is fsynced, then renamed over NAME, and the folder is fsynced: a
 * crash at any moment leaves either the old file or the new one, never a torn one.
 */
#ifndef TAPEGRAD_CHECKPOINT_H
#define TAPEGRAD_CHECKPOINT_H

#include <stdint.h>

#include "../lib/error.h"
#include "../data/loader.h"
#include "model.h"

enum { CHECKPOINT_VERSION = 1 };

typedef struct TrainerState {
    int64_t step;          /* optimizer steps done */
    int64_t tokens_seen;
    LoaderState loader;    /* where the batch loader is */
    double best_val_loss;  /* +inf when never evaluated */
    double elapsed_s;      /* training time before this checkpoint */
    uint64_t seed;
} TrainerState;

typedef struct CheckpointInfo {
    ModelConfig cfg;
    uint64_t tokenizer_fingerprint;
    TrainerState state;
    int n_tensors;
    int64_t raw_bytes;     /* uncompressed payload */
} CheckpointInfo;

/* Writes weights, AdamW moments and state atomically to `path`. */
tg_status checkpoint_write(const char *path, const Model *model, uint64_t tokenizer_fingerprint,
                           const TrainerState *state);
/* Reads only the header (config, tokenizer): to build the model before loading it. */
tg_status checkpoint_read_config(const char *path, ModelConfig *cfg, uint64_t *tokenizer_fingerprint);
/* Loads into a model built with the checkpoint's config; checks every tensor's name and shape,
 * the end marker and the gzip CRC. The model is left unchanged on failure. */
tg_status checkpoint_load(const char *path, Model *model, CheckpointInfo *info);

/* Run folders: checkpoints are DIR/ckpt-<step>.tgck and DIR/latest names the newest good one. */
tg_status checkpoint_save_in_run(const char *dir, const Model *model, uint64_t tokenizer_fingerprint,
                                 const TrainerState *state, int keep, char *path_out, size_t path_cap);
/* A checkpoint file path from DIR (via DIR/latest) or a file path as given. */
tg_status checkpoint_resolve(const char *dir_or_file, char *path_out, size_t path_cap);

#endif
