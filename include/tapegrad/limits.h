/* The largest sizes tapegrad accepts, written once. Every size read from a file (checkpoint,
 * safetensors, tokenizer, token file) or a flag is checked against these before anything is
 * allocated for it, and the arithmetic on them goes through lib/checked.h. They are far above
 * any model this CPU trainer is for, and far below where int64/size_t arithmetic could wrap:
 * 2^34 float32s are 64 GiB, and 2^34 * 4 bytes * 4 buffers (weights, gradients, AdamW m, v)
 * still fits 2^40. The model's own limits (width, layers, heads, hidden, context) sit beside its
 * config in tapegrad/model.h, since lib knows nothing about transformers.
 */
#ifndef TG_LIMITS_H
#define TG_LIMITS_H

#include <stdint.h>

enum {
    TG_MAX_DIMS = 4,          /* dims of a tensor */
    TG_NAME_CAP = 64,         /* a tensor name is at most TG_NAME_CAP - 1 bytes */
    TG_MAX_TENSORS = 65536,   /* tensors in a parameter store, records in a checkpoint, entries in a safetensors file */
    TG_MAX_VOCAB = 1 << 24,   /* token ids are below this: tokenizers, token files, models */
    TG_PATH_CAP = 4096,       /* a path is at most TG_PATH_CAP - 1 bytes (Linux's PATH_MAX with its NUL) */
    TG_MAX_CONTEXT = 1 << 20, /* tokens in one window: a dataset's seq_len, a model's context (TG_MODEL_MAX_SEQ) */
};

/* Elements of one tensor, and of a whole parameter store. */
#define TG_MAX_ELEMENTS ((int64_t)1 << 34)

#endif
