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
#ifndef TG_MODEL_H
#define TG_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "tapegrad/error.h"
#include "tapegrad/limits.h"
#include "tapegrad/params.h"
#include "tapegrad/ops.h"

#pragma GCC visibility push(default)

/* The feed-forward blocks: X(ID, "name"), giving TG_FFN_<ID> (the numbers are stored in
 * checkpoints: new kinds go at the end). */
#define TG_FFN_KINDS(X) \
    X(SWIGLU, "swiglu") \
    X(RELU, "relu")

typedef enum {
#define TG_FFN_ENUM(id, name) TG_FFN_##id,
    TG_FFN_KINDS(TG_FFN_ENUM)
#undef TG_FFN_ENUM
    TG_FFN_KIND_COUNT
} TgFfnKind;

/* "swiglu|relu": the choices, for a flag's help */
#define TG_FFN_CHOICES TG_ENUM_CHOICES(TG_FFN_KINDS)

/* tg_ffn_kind_name: "swiglu" | "relu"; tg_ffn_kind_parse: the kind of a name (tapegrad/error.h) */
TG_ENUM_DECLARE(TgFfnKind, tg_ffn_kind);
/* Whether `kind` is one of the kinds above (a number read from a file may not be). */
bool tg_ffn_kind_valid(int64_t kind);

/* How a SwiGLU FFN's hidden size follows from the width when none is given: X(ID, "name"), giving
 * TG_FFN_HIDDEN_<ID>. EIGHT_THIRDS: 64 ceil((8 dim / 3) / 64), MiniMind2's (1408 at dim 512); PI:
 * 64 ceil(dim pi / 64), MiniMind-3's (2432 at 768, 1664 at 512). */
#define TG_FFN_HIDDEN_RULES(X)                                                                                         \
    X(EIGHT_THIRDS, "eight-thirds")                                                                                    \
    X(PI, "pi")

typedef enum {
#define TG_FFN_HIDDEN_ENUM(id, name) TG_FFN_HIDDEN_##id,
    TG_FFN_HIDDEN_RULES(TG_FFN_HIDDEN_ENUM)
#undef TG_FFN_HIDDEN_ENUM
        TG_FFN_HIDDEN_RULE_COUNT
} TgFfnHiddenRule;

/* "eight-thirds|pi": the choices, for a flag's help */
#define TG_FFN_HIDDEN_RULE_CHOICES TG_ENUM_CHOICES(TG_FFN_HIDDEN_RULES)
/* tg_ffn_hidden_rule_name: "eight-thirds" | "pi"; tg_ffn_hidden_rule_parse: the rule of a name */
TG_ENUM_DECLARE(TgFfnHiddenRule, tg_ffn_hidden_rule);

/* The largest model tapegrad builds. A config from flags or from a file (a checkpoint's header)
 * is refused beyond these by tg_model_config_validate before anything is allocated; with them, no
 * size computed from a config can wrap (tapegrad/limits.h has the tensor and vocabulary limits, and
 * the parameter count must stay within TG_MAX_ELEMENTS too). */
enum {
    TG_MODEL_MAX_DIM = 1 << 16,
    TG_MODEL_MAX_LAYERS = 1024,
    TG_MODEL_MAX_HEADS = 1024,   /* query heads, and key/value heads */
    TG_MODEL_MAX_HIDDEN = 1 << 18,
    TG_MODEL_MAX_SEQ = TG_MAX_CONTEXT,
};
/* positions x head size in the RoPE cos and sin tables: 2^24 floats for both, 64 MiB (a
 * 131,072-token context at head size 128); no file can make a model build a larger one */
#define TG_MODEL_MAX_ROPE_ENTRIES ((int64_t)1 << 24)

/* RMSNorm's eps: a normal float32 (the smallest is 2^-126; FTZ flushes smaller ones to 0) and at
 * most 1e-2, small beside the mean square of activations (1e-5 in every preset). */
#define TG_MODEL_MIN_NORM_EPS 1.1754943508222875e-38
#define TG_MODEL_MAX_NORM_EPS 1e-2

typedef struct TgModelConfig {
    int64_t dim, n_layers, n_heads, n_kv_heads, hidden, vocab, seq_len;
    TgFfnKind ffn;
    double rope_theta;
    double norm_eps;
    bool qk_norm; /* QK-norm: an RMSNorm over each head of q and of k (gains of head_dim), before RoPE */
} TgModelConfig;

typedef struct TgLayerParams {
    TgTensor *attn_norm, *wq, *wk, *wv, *wo; /* wq (D,D), wk/wv (KVH*hd, D), wo (D,D) */
    TgTensor *q_norm, *k_norm;               /* (hd) each with qk_norm, shared by the heads; else NULL */
    TgTensor *ffn_norm, *w1, *w2, *w3;       /* w1/w3 (H,D) gate/up, w2 (D,H) down; w3 NULL for ReLU */
} TgLayerParams;

/* Keys and values of earlier positions, for decoding one token at a time (batch 1). */
typedef struct TgKVCache {
    float *k, *v;        /* [layers][max_pos][kv_heads*hd] */
    int64_t max_pos;
    int64_t len;         /* positions filled */
} TgKVCache;

/* LoRA: the linears an adapter can target, X(ID, "name"), giving TG_LORA_<ID> (bit 1 << TG_LORA_<ID>
 * of a target mask; the numbers are stored in adapter checkpoints: new ones go at the end). */
#define TG_LORA_TARGETS(X) \
    X(Q, "q")              \
    X(K, "k")              \
    X(V, "v")              \
    X(O, "o")              \
    X(GATE, "gate")        \
    X(UP, "up")            \
    X(DOWN, "down")

typedef enum {
#define TG_LORA_ENUM(id, name) TG_LORA_##id,
    TG_LORA_TARGETS(TG_LORA_ENUM)
#undef TG_LORA_ENUM
    TG_LORA_TARGET_COUNT
} TgLoraTarget;

#define TG_LORA_ALL_TARGETS ((1u << TG_LORA_TARGET_COUNT) - 1u)
#define TG_LORA_MAX_RANK 4096
/* alpha's range. The update is scaled by alpha / r, B's gradient too: far below 1 the adapters
 * learn nothing (at alpha 1e-300 the scale is 0 in float), far above it every step of B is
 * amplified until products overflow (at 1e308 the first step is NaN). 8192 is the default
 * alpha (2 r) of the largest rank. */
#define TG_LORA_MIN_ALPHA 1e-3
#define TG_LORA_MAX_ALPHA 8192

/* Tokens whose embedding rows (the tied head's too) train beside the adapters, at most: */
#define TG_LORA_MAX_TOKENS 256

typedef struct TgLoraConfig {
    int64_t rank;        /* r, 1 .. TG_LORA_MAX_RANK */
    double alpha;        /* the update is scaled by alpha / r; TG_LORA_MIN_ALPHA .. TG_LORA_MAX_ALPHA */
    uint32_t targets;    /* bit 1 << TgLoraTarget per adapted linear */
    /* The trainable token rows (PEFT's trainable_token_indices): the ids, ascending, whose rows of
     * the frozen embedding are replaced by rows that train. A base pretrained on text never saw
     * the chat markers: their rows, and the head's logits of them, are all but one direction
     * shared with every other unseen token, which adapters alone cannot tell apart. */
    int32_t tokens[TG_LORA_MAX_TOKENS];
    int n_tokens;
} TgLoraConfig;

/* One adapted linear W (out, in): W + (alpha / r) B A, A (r, in), B (out, r). */
typedef struct TgLoraPair {
    TgTensor *a, *b;     /* NULL, NULL when the linear is not a target */
} TgLoraPair;

/* The adapters of a model: their own parameter store (the trainable one), and the base's
 * identity, the fingerprint of its weights when they were attached. */
typedef struct TgLora {
    TgLoraConfig cfg;
    TgParamStore params;
    TgLoraPair *pairs;              /* [n_layers][TG_LORA_TARGET_COUNT] */
    TgTensor *token_rows;           /* (n_tokens, dim): the rows of cfg.tokens, in params; NULL for none */
    uint64_t base_fingerprint;
} TgLora;

typedef struct TgModel {
    TgModelConfig cfg;
    TgParamStore params;
    TgTensor *embed, *final_norm;
    TgLayerParams *layers;
    TgRopeTable rope;
    TgLora *lora;        /* NULL: none; else the base (params) is frozen and the adapters train */
} TgModel;

/* The presets, one row each:
 *   X(ID, "name", dim, layers, heads, kv_heads, hidden, seq, vocab, hidden rule, qk_norm, norm eps)
 * giving TG_PRESET_<ID>; every one has SwiGLU and RoPE theta 1e6. vocab 0: the tokenizer's (a char
 * tokenizer's bytes, or --vocab); a preset with a vocabulary of its own trains a byte-level BPE of
 * that size unless told otherwise. The hidden rule sizes the FFN of another width of the preset.
 * minimind-26m is MiniMind2-small, 25,829,888 parameters at vocab 6400; minimind-3 is MiniMind-3's
 * dense model, 63,912,192. */
#define TG_MODEL_PRESETS(X)                                                                                            \
    X(TINY, "tiny", 64, 2, 2, 2, 176, 32, 0, EIGHT_THIRDS, false, 1e-5)                                                \
    X(SMALL, "small", 128, 8, 4, 4, 352, 128, 0, EIGHT_THIRDS, false, 1e-5)                                            \
    X(MINIMIND_26M, "minimind-26m", 512, 8, 8, 2, 1408, 256, 6400, EIGHT_THIRDS, false, 1e-5)                          \
    X(MINIMIND_3, "minimind-3", 768, 8, 8, 4, 2432, 512, 6400, PI, true, 1e-6)

typedef enum {
#define TG_PRESET_ENUM(id, ...) TG_PRESET_##id,
    TG_MODEL_PRESETS(TG_PRESET_ENUM)
#undef TG_PRESET_ENUM
    TG_PRESET_COUNT
} TgPreset;

/* "tiny|small|minimind-26m|minimind-3": the choices, for a flag's help */
#define TG_PRESET_CHOICES TG_ENUM_CHOICES(TG_MODEL_PRESETS)

/* SwiGLU hidden size of a width by the eight-thirds rule: 64 * ceil((8*dim/3) / 64); 1408 at dim 512. */
int64_t tg_model_swiglu_hidden(int64_t dim);
/* The hidden size of an FFN of `kind` at width `dim` when none is given: SwiGLU's by `rule`, ReLU's
 * 4 * dim, which gives it the parameters of SwiGLU by the eight-thirds rule (2 x 4d^2 = 3 x (8/3) d^2);
 * tg_model_ffn_hidden is the eight-thirds rule's. */
int64_t tg_model_ffn_hidden_by(TgFfnKind kind, TgFfnHiddenRule rule, int64_t dim);
int64_t tg_model_ffn_hidden(TgFfnKind kind, int64_t dim);
/* The rule that sizes the FFN of another width of a preset (one below TG_PRESET_COUNT). */
TgFfnHiddenRule tg_model_preset_hidden_rule(TgPreset preset);
/* Fills a config from a preset name (TG_MODEL_PRESETS); TG_ERR_ARG naming the presets if unknown. */
TgStatus tg_model_preset(const char *name, TgModelConfig *cfg);
/* The config of a preset (one below TG_PRESET_COUNT). */
TgModelConfig tg_model_preset_config(TgPreset preset);
/* The preset named `name`, or TG_PRESET_COUNT. */
TgPreset tg_model_preset_find(const char *name);
/* tg_model_preset_name: "tiny", "small", ...; tg_model_preset_parse: the preset of a name */
TG_ENUM_DECLARE(TgPreset, tg_model_preset);
/* Checks a config, with a message naming the bad field and how to fix it: every field positive
 * and within the limits above, the heads dividing as attention needs, RoPE theta a finite number
 * above 1, norm eps within [TG_MODEL_MIN_NORM_EPS, TG_MODEL_MAX_NORM_EPS]. */
TgStatus tg_model_config_validate(const TgModelConfig *cfg);
/* Parameters of a model of this config, counted from the shapes alone (no allocation); -1 when
 * the count does not fit int64 (a config no one validated). */
int64_t tg_model_config_param_count(const TgModelConfig *cfg);
/* Builds the parameter store (zeroed) and the RoPE table; cfg must be valid. */
void tg_model_build(TgModel *model, const TgModelConfig *cfg);
/* Frees what tg_model_build allocated. */
void tg_model_free(TgModel *model);
/* Linear and embedding weights ~ N(0, 0.02), norm weights 1. */
void tg_model_init_weights(TgModel *model, uint64_t seed);
/* Parameters counted once (the tied head adds none). */
int64_t tg_model_param_count(const TgModel *model);

/* ---- LoRA (model/lora.c) ---- */

/* "q" ... "down"; "?" for a number that is no target. */
TG_ENUM_DECLARE(TgLoraTarget, tg_lora_target);
/* A comma-separated list of target names ("q,v", "q,k,v,o,gate,up,down") as a mask; TG_ERR_ARG
 * naming the unknown one and the choices otherwise. */
TgStatus tg_lora_targets_parse(const char *list, uint32_t *targets);
/* The mask as a list: "q,k,v,o,gate,up,down". */
void tg_lora_targets_format(uint32_t targets, char *buf, size_t cap);
/* TG_ERR_ARG unless rank in [1, TG_LORA_MAX_RANK], alpha in [TG_LORA_MIN_ALPHA, TG_LORA_MAX_ALPHA],
 * targets a non-empty subset of TG_LORA_ALL_TARGETS that the model has (ReLU FFNs have no up)
 * and, with a model, rank at most min(out, in) of every targeted linear (B A has no higher rank:
 * a larger r adds parameters, never expressiveness). */
TgStatus tg_lora_config_validate(const TgLoraConfig *cfg, const TgModelConfig *model);
/* The fingerprint of a model's weights (a 64-bit hash of every parameter's name, shape and
 * values): the identity of a LoRA base. */
uint64_t tg_model_weights_fingerprint(const TgModel *model);
/* Attaches adapters to every targeted linear of every layer: A ~ U(-1/sqrt(in), 1/sqrt(in))
 * (PyTorch's Kaiming-uniform init of a linear) from `seed`, B = 0, and the token rows of
 * cfg.tokens as copies of the base's (model.embed_tokens.trainable_tokens), so the model's outputs
 * are unchanged; the base is frozen (tg_params_freeze: no gradients, no AdamW moments for it) and
 * its fingerprint kept. cfg must be valid; the model must have no adapters yet. */
void tg_lora_attach(TgModel *model, const TgLoraConfig *cfg, uint64_t seed);
/* Folds the adapters into the base, W += (alpha / r) B A, and the token rows into the embedding, frees them and leaves the model as one
 * without adapters (its base still frozen: no gradient buffers). */
void tg_lora_merge(TgModel *model);
/* Writes the token rows (cfg.tokens) into the embedding, adapters kept: the base as the adapters
 * go on it, for an export of the two apart. */
void tg_lora_place_token_rows(TgModel *model);
/* Frees the adapters (tg_model_free does it too). */
void tg_lora_free(TgModel *model);
/* The parameters an optimizer updates: the adapters' store with LoRA, else the model's. */
TgParamStore *tg_model_trainable(TgModel *model);

/* A batch of token rows for the model. A row may hold several sequences one after the other
 * (conversations packed into a training window), none of which sees another: key_start (B,T)
 * gives each token's first visible position, the start of its own sequence, within [0, t] and
 * never decreasing along a row (tg_attention_segmented); NULL is one sequence per row. Positions
 * are not restarted: RoPE scores depend on relative positions alone. The arrays must stay valid
 * until the backward ran. */
typedef struct TgBatch {
    const int32_t *tokens;    /* (batch, seq) */
    const int32_t *targets;   /* (batch, seq): each position's next token, TG_IGNORE_INDEX for none;
                                 tg_model_loss only */
    const int32_t *key_start; /* (batch, seq), or NULL */
    int64_t batch, seq;
} TgBatch;

/* What tg_model_loss hands back besides the loss (each member may be NULL). */
typedef struct TgModelOutputs {
    TgTensor **logits;     /* receives the logits (B,T,V); without it the backward writes the logits'
                              gradient over their values (one (B,T,V) buffer less) */
    TgTensor **ffn_hidden; /* [n_layers]: layer l's FFN hidden activation, the input of w2 (B,T,hidden),
                              for inspection; valid until the tape is reset */
} TgModelOutputs;

/* logits (B,T,V) for the batch's tokens. With a cache (batch 1, no key_start), the T tokens sit
 * at positions cache->len .. cache->len+T-1, their keys/values are appended, and attention sees
 * all cached positions: the prefix is never recomputed. */
TgTensor *tg_model_forward(TgModel *model, TgTape *tape, const TgBatch *batch, TgKVCache *cache);
/* The mean next-token cross-entropy over the targets that are not TG_IGNORE_INDEX (0 when there
 * are none); `out` (may be NULL) says what else to hand back. */
TgTensor *tg_model_loss(TgModel *model, TgTape *tape, const TgBatch *batch, const TgModelOutputs *out);

/* The step arena's bytes (an upper bound: a double, as a hostile shape may exceed any integer) that
 * one tg_model_loss of (batch, seq) tokens takes, with its backward when
 * `training` (without: a forward with the tape not recording, as evaluation runs it), on a pool of
 * `threads`, for a tape whose attention keeps what a new tape keeps (TG_TAPE_SAVED_PROBS_LIMIT).
 * From the shapes alone (model/model_memory.c says how): a caller checks it against the
 * machine's memory before the arena grows, and may reserve it at once. */
double tg_model_activation_bytes(const TgModelConfig *cfg, int64_t batch, int64_t seq, int threads, bool training);
/* The same for a tape whose saved-P limit is `saved_probs_limit` (tg_tape_set_saved_probs_limit). */
double tg_model_activation_bytes_for(const TgModelConfig *cfg, int64_t batch, int64_t seq, int threads, bool training,
                                     size_t saved_probs_limit);

/* An empty cache for up to max_pos positions of a model of config cfg (heap memory). */
void tg_kv_cache_init(TgKVCache *cache, const TgModelConfig *cfg, int64_t max_pos);
void tg_kv_cache_free(TgKVCache *cache);

#pragma GCC visibility pop

#endif
