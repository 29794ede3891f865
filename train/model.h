/* The MiniMind-style decoder-only transformer, built from ops.
 *
 *   x = embed[tokens]                                     (B,T,D)
 *   per layer:  h   = x + Wo attn(rope(Wq n1), rope(Wk n1), Wv n1),  n1 = rmsnorm(x)
 *               x   = h + ffn(rmsnorm(h))
 *   logits = rmsnorm(x) embed^T                           (B,T,V)   (head tied to the embedding)
 *
 * Parameter names follow the Llama/MiniMind safetensors convention, so a checkpoint exports
 * to and imports from PyTorch without a renaming table.
 */
#ifndef TAPEGRAD_MODEL_H
#define TAPEGRAD_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/error.h"
#include "lib/params.h"
#include "ops/ops.h"

#pragma GCC visibility push(default)

/* The feed-forward block (the numbers are stored in checkpoints). */
typedef enum { FFN_SWIGLU = 0, FFN_RELU = 1 } FfnKind;
/* "swiglu" | "relu" */
const char *ffn_kind_name(FfnKind kind);
/* The kind named `name`; TG_ERR_ARG naming the choices otherwise. */
tg_status ffn_kind_parse(const char *name, FfnKind *kind);
/* Whether `kind` is one of the kinds above (a number read from a file may not be). */
bool ffn_kind_valid(int64_t kind);

/* The largest model tapegrad builds. A config from flags or from a file (a checkpoint's header)
 * is refused beyond these by model_config_validate before anything is allocated; with them, no
 * size computed from a config can wrap (lib/limits.h has the tensor and vocabulary limits, and
 * the parameter count must stay within TG_MAX_ELEMENTS too). */
enum {
    MODEL_MAX_DIM = 1 << 16,
    MODEL_MAX_LAYERS = 1024,
    MODEL_MAX_HEADS = 1024,   /* query heads, and key/value heads */
    MODEL_MAX_HIDDEN = 1 << 18,
    MODEL_MAX_SEQ = 1 << 20,
};
/* positions x head size in the RoPE cos and sin tables: 2^24 floats for both, 64 MiB (a
 * 131,072-token context at head size 128); no file can make a model build a larger one */
#define MODEL_MAX_ROPE_ENTRIES ((int64_t)1 << 24)

typedef struct ModelConfig {
    int64_t dim, n_layers, n_heads, n_kv_heads, hidden, vocab, seq_len;
    FfnKind ffn;
    double rope_theta;
    double norm_eps;
} ModelConfig;

typedef struct LayerParams {
    Tensor *attn_norm, *wq, *wk, *wv, *wo; /* wq (D,D), wk/wv (KVH*hd, D), wo (D,D) */
    Tensor *ffn_norm, *w1, *w2, *w3;       /* w1/w3 (H,D) gate/up, w2 (D,H) down; w3 NULL for ReLU */
} LayerParams;

/* Keys and values of earlier positions, for decoding one token at a time (batch 1). */
typedef struct KVCache {
    float *k, *v;        /* [layers][max_pos][kv_heads*hd] */
    int64_t max_pos;
    int64_t len;         /* positions filled */
} KVCache;

typedef struct Model {
    ModelConfig cfg;
    ParamStore params;
    Tensor *embed, *final_norm;
    LayerParams *layers;
    RopeTable rope;
} Model;

/* SwiGLU hidden size of the presets: 64 * ceil((8*dim/3) / 64); 1408 at dim 512. */
int64_t model_swiglu_hidden(int64_t dim);
/* Fills a config from a preset name ("tiny", "small", "minimind-26m"); TG_ERR_ARG if unknown. */
tg_status model_preset(const char *name, ModelConfig *cfg);
/* Checks a config, with a message naming the bad field and how to fix it: every field positive
 * and within the limits above, the heads dividing as attention needs. */
tg_status model_config_validate(const ModelConfig *cfg);
/* Parameters of a model of this config, counted from the shapes alone (no allocation); -1 when
 * the count does not fit int64 (a config no one validated). */
int64_t model_config_param_count(const ModelConfig *cfg);
/* Builds the parameter store (zeroed) and the RoPE table; cfg must be valid. */
void model_build(Model *model, const ModelConfig *cfg);
/* Frees what model_build allocated. */
void model_free(Model *model);
/* Linear and embedding weights ~ N(0, 0.02), norm weights 1. */
void model_init_weights(Model *model, uint64_t seed);
/* Parameters counted once (the tied head adds none). */
int64_t model_param_count(const Model *model);

/* logits (B,T,V) for tokens (B,T). With a cache (B must be 1), the T tokens sit at positions
 * cache->len .. cache->len+T-1, their keys/values are appended, and attention sees all cached
 * positions: the prefix is never recomputed. */
Tensor *model_forward(Model *model, Tape *tape, const int32_t *tokens, int64_t batch, int64_t seq,
                      KVCache *cache);
/* Mean next-token cross-entropy; *logits_out (may be NULL) receives the logits. Without
 * logits_out the backward writes the logits' gradient over their values (one (B,T,V) buffer
 * less). */
Tensor *model_loss(Model *model, Tape *tape, const int32_t *tokens, const int32_t *targets,
                   int64_t batch, int64_t seq, Tensor **logits_out);

/* model_loss for inspection: ffn_hidden_out[l] (an array of n_layers) receives layer l's FFN
 * hidden activation, the input of w2 (B,T,hidden); valid until the tape is reset. */
Tensor *model_loss_inspected(Model *model, Tape *tape, const int32_t *tokens, const int32_t *targets,
                             int64_t batch, int64_t seq, Tensor **ffn_hidden_out);

/* An empty cache for up to max_pos positions of a model of config cfg (heap memory). */
void kv_cache_init(KVCache *cache, const ModelConfig *cfg, int64_t max_pos);
void kv_cache_free(KVCache *cache);

#pragma GCC visibility pop

#endif
