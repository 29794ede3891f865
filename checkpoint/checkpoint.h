/* Checkpoint files: one gzip stream (zlib), little-endian fields.
 *
 *   "TGCKPT\r\n" magic, u32 format version (2), u32 flags (bit 0: float data byte-shuffled;
 *       bit 1: a parameter set's checkpoint, tapegrad/param_checkpoint.h)
 *   a model's: model config (i64 dim, layers, heads, kv_heads, hidden, vocab, seq; u32 ffn;
 *       f64 theta, eps), u64 tokenizer fingerprint
 *   a LoRA adapter's (flag bit 2): its base's model config and tokenizer fingerprint, then a tag as
 *       below naming the adapter and its base's weights (checkpoint/adapter.h); the tensors are the
 *       adapters' alone
 *   a parameter set's, instead: u16 tag length, the tag (1 to 63 bytes)
 *   u32 tensor count, then per tensor: u16 name length, name, u8 kind (0 weight, 1 AdamW m,
 *       2 AdamW v), u32 ndim, i64 shape[ndim], then numel float32s
 *   trainer state: i64 step, i64 tokens seen, 56-byte loader state, f64 best val loss,
 *       f64 elapsed seconds, u64 seed; with flag bit 3, then the best record (TgBestRecord):
 *       f64 best value, i64 its step, i64 evaluations since; with flag bit 4 too, u64 the
 *       fingerprint of what the value was measured on
 *   "TGEND\r\n\0" end marker
 *
 * Byte shuffling (flag bit 0) stores a tensor's n floats as four planes of n bytes: every
 * float's byte 0, then every byte 1, 2, 3. The sign/exponent bytes of nearby weights are alike,
 * so deflate finds runs it cannot see when they are interleaved with random mantissa bytes
 * (docs/results.md, 2026-11-29, has the figures). Version 1 files (no flags field, never shuffled) still load.
 *
 * gzip's own CRC32 and length trailer cover the whole stream, so `gzip -t` verifies a file, and
 * a flipped, missing or extra byte is refused on load with the file's name and what is wrong.
 * A file is read as hostile: a model config beyond tapegrad/model.h's limits, a header or a record
 * declaring more data than deflate's 1032:1 could fit in the file, more records than any model
 * has, or a trainer state no run could have written is refused before anything is allocated.
 * A write goes through support/atomic_file.h: a crash at any moment leaves the old file or the new
 * one, never a torn one under NAME.
 */
#ifndef TAPEGRAD_CHECKPOINT_H
#define TAPEGRAD_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>

#include "checkpoint/checkpoint_format.h"
#include "data/loader.h"
#include "tapegrad/error.h"
#include "tapegrad/version.h"
#include "tapegrad/model.h"

enum { TG_CHECKPOINT_VERSION = TG_CHECKPOINT_FORMAT };
enum {
    TG_CHECKPOINT_FLAG_SHUFFLED = 1u << 0,
    TG_CHECKPOINT_FLAG_PARAM_SET = 1u << 1,
    TG_CHECKPOINT_FLAG_ADAPTER = 1u << 2,
    TG_CHECKPOINT_FLAG_BEST = 1u << 3,
    TG_CHECKPOINT_FLAG_BEST_SOURCE = 1u << 4,
    TG_CHECKPOINT_FLAG_QK_NORM = 1u << 5, /* the model config's qk_norm */
};

/* Steps are written to metrics.jsonl as JSON numbers, exact up to 2^53; tokens seen stay far from
 * int64's end however long a run goes on. A checkpoint beyond either is refused. */
#define TG_CHECKPOINT_MAX_STEP ((int64_t)1 << 53)
#define TG_CHECKPOINT_MAX_TOKENS ((int64_t)1 << 62)

/* The best evaluation so far of the figure a run watches (--keep-best, --early-stop;
 * train/best.h), for a run that watches one. */
typedef struct TgBestRecord {
    bool kept;           /* the run watches a figure and the checkpoint holds this record (flag bit 3) */
    double value;        /* the best value; NaN before the first evaluation */
    int64_t step;        /* the step of that evaluation; -1 before the first */
    int64_t evals_since; /* evaluations after it, none better */
    uint64_t source;     /* a fingerprint of what the value was measured on (a task's file, for its
                          * accuracy; flag bit 4), so that a resume can tell it changed; 0: none */
} TgBestRecord;

typedef struct TgTrainerState {
    int64_t step;          /* optimizer steps done */
    int64_t tokens_seen;
    TgLoaderState loader;    /* where the batch loader is */
    double best_val_loss;  /* +inf when never evaluated */
    double elapsed_s;      /* training time before this checkpoint */
    uint64_t seed;
    TgBestRecord best; /* zeroed (not kept) in a run that watches no figure */
} TgTrainerState;

/* What a checkpoint holds. The float buffers are the model's own (a synchronous save) or a
 * snapshot of them (a background save); `layout` gives the tensors' names, shapes and offsets. */
typedef struct TgCheckpointSource {
    TgModelConfig cfg;
    uint64_t tokenizer_fingerprint;
    const TgParamStore *layout;
    const float *data, *m, *v; /* each layout->total floats */
    TgTrainerState state;
    const char *tag;           /* non-NULL: a parameter set's checkpoint (cfg and fingerprint unused) */
    char adapter[TG_CHECKPOINT_TAG_CAP]; /* non-empty: a LoRA adapter's tag (layout: the adapters) */
} TgCheckpointSource;

typedef struct TgCheckpointWriteOptions {
    int level;    /* deflate level 1..9 */
    bool shuffle; /* byte-plane shuffle the floats */
} TgCheckpointWriteOptions;

/* The options tg_checkpoint_write uses: level 1, shuffled. */
TgCheckpointWriteOptions tg_checkpoint_default_options(void);

typedef struct TgCheckpointInfo {
    TgModelConfig cfg;
    uint64_t tokenizer_fingerprint;
    char tag[TG_CHECKPOINT_TAG_CAP]; /* a parameter set's tag; "" for a model's checkpoint */
    TgTrainerState state;
    uint32_t version, flags;
    int n_tensors;
    int64_t raw_bytes;     /* the uncompressed stream */
    int64_t file_bytes;    /* the gzip file */
} TgCheckpointInfo;

/* One tensor record, as `tg_checkpoint_inspect` lists them. */
typedef struct TgCheckpointTensorInfo {
    char name[TG_NAME_CAP];
    int kind;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    double l2_norm;
} TgCheckpointTensorInfo;

/* What a checkpoint of the model holds: its weights and moments, or with LoRA its adapters' alone,
 * tagged with the adapters' configuration and their base's fingerprint (checkpoint/adapter.h). */
TgCheckpointSource tg_checkpoint_source_of(const TgModel *model, uint64_t tokenizer_fingerprint, const TgTrainerState *state);

/* Writes `src` atomically to `path` with the default options. */
TgStatus tg_checkpoint_write(const char *path, const TgCheckpointSource *src);
/* The same with explicit options; *file_bytes (may be NULL) receives the compressed size. */
TgStatus tg_checkpoint_write_with(const char *path, const TgCheckpointSource *src, const TgCheckpointWriteOptions *opts,
                                int64_t *file_bytes);
/* Reads only the header (config, tokenizer): to build the model before loading it. A parameter
 * set's checkpoint is refused here and by tg_checkpoint_load (TG_ERR_MISMATCH). */
TgStatus tg_checkpoint_read_config(const char *path, TgModelConfig *cfg, uint64_t *tokenizer_fingerprint);
/* Reads the header alone: config, tokenizer fingerprint, tag, version and flags (the tensor
 * count, state and sizes are left 0). */
TgStatus tg_checkpoint_read_header(const char *path, TgCheckpointInfo *info);
/* Loads into a model built with the checkpoint's config; checks every tensor's name and shape,
 * the end marker and the gzip CRC. The model is left unchanged on failure. */
TgStatus tg_checkpoint_load(const char *path, TgModel *model, TgCheckpointInfo *info);
/* Reads and verifies a whole checkpoint without a model (a model's or a parameter set's): its
 * header, state and every tensor record with its L2 norm. *tensors (malloc'ed, free it) holds
 * *n_tensors entries. */
TgStatus tg_checkpoint_inspect(const char *path, TgCheckpointInfo *info, TgCheckpointTensorInfo **tensors, int *n_tensors);

/* TG_ERR_FORMAT naming `path` unless the state is one a run can continue from: step and tokens
 * seen in [0, the limits above], best val loss a loss (>= 0, or +inf before any evaluation), a
 * finite non-negative elapsed time, a loader state the loader can have written, and a best record
 * (when kept) of a step in [-1, step] with a finite value (NaN at -1) and at most `step`
 * evaluations since. */
TgStatus tg_trainer_state_check(const TgTrainerState *state, const char *path);

#endif
