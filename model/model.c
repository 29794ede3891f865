#include "tapegrad/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/checked.h"
#include "tapegrad/rng.h"

TG_ENUM_DEFINE(TgFfnKind, tg_ffn_kind, TG_FFN_KINDS, TG_FFN_KIND_COUNT, "FFN kind")
TG_ENUM_DEFINE(TgPreset, tg_model_preset, TG_MODEL_PRESETS, TG_PRESET_COUNT, "preset")

bool tg_ffn_kind_valid(int64_t kind) { return kind >= 0 && kind < TG_FFN_KIND_COUNT; }

int64_t tg_model_swiglu_hidden(int64_t dim) { return 64 * ((8 * dim / 3 + 63) / 64); }

TG_ENUM_DEFINE(TgFfnHiddenRule, tg_ffn_hidden_rule, TG_FFN_HIDDEN_RULES, TG_FFN_HIDDEN_RULE_COUNT, "FFN hidden rule")

int64_t tg_model_ffn_hidden_by(TgFfnKind kind, TgFfnHiddenRule rule, int64_t dim) {
    if (kind == TG_FFN_RELU) return 4 * dim;
    /* MiniMind-3's math.ceil(dim * math.pi / 64) * 64, in the same double arithmetic */
    const double pi = 3.14159265358979323846;
    return rule == TG_FFN_HIDDEN_PI ? 64 * (int64_t)ceil((double)dim * pi / 64) : tg_model_swiglu_hidden(dim);
}

int64_t tg_model_ffn_hidden(TgFfnKind kind, int64_t dim) {
    return tg_model_ffn_hidden_by(kind, TG_FFN_HIDDEN_EIGHT_THIRDS, dim);
}

static const struct {
    TgModelConfig cfg;
    TgFfnHiddenRule rule;
} presets[] = {
#define PRESET_ROW(id, name, dim_, layers_, heads_, kv_heads_, hidden_, seq_, vocab_, rule_, qk_norm_, eps_)           \
    [TG_PRESET_##id] = {{.dim = dim_,                                                                                  \
                         .n_layers = layers_,                                                                          \
                         .n_heads = heads_,                                                                            \
                         .n_kv_heads = kv_heads_,                                                                      \
                         .hidden = hidden_,                                                                            \
                         .vocab = vocab_,                                                                              \
                         .seq_len = seq_,                                                                              \
                         .ffn = TG_FFN_SWIGLU,                                                                         \
                         .rope_theta = 1e6,                                                                            \
                         .norm_eps = eps_,                                                                             \
                         .qk_norm = qk_norm_},                                                                         \
                        TG_FFN_HIDDEN_##rule_},
    TG_MODEL_PRESETS(PRESET_ROW)
#undef PRESET_ROW
};
_Static_assert(sizeof presets / sizeof presets[0] == TG_PRESET_COUNT, "one row per preset");

TgPreset tg_model_preset_find(const char *name) {
    int p = tg_enum_index(tg_model_preset_names_, TG_PRESET_COUNT, name);
    return p < 0 ? TG_PRESET_COUNT : (TgPreset)p;
}

TgModelConfig tg_model_preset_config(TgPreset preset) {
    TG_CHECK(preset >= 0 && preset < TG_PRESET_COUNT, "no preset %d", (int)preset);
    return presets[preset].cfg;
}

TgFfnHiddenRule tg_model_preset_hidden_rule(TgPreset preset) {
    TG_CHECK(preset >= 0 && preset < TG_PRESET_COUNT, "no preset %d", (int)preset);
    return presets[preset].rule;
}

TgStatus tg_model_preset(const char *name, TgModelConfig *cfg) {
    TgPreset p;
    TG_TRY(tg_model_preset_parse(name, &p));
    *cfg = presets[p].cfg;
    return TG_OK;
}

TgStatus tg_model_config_validate(const TgModelConfig *c) {
    struct { const char *setting; int64_t value, max; } sizes[] = {
        {"`dim`", c->dim, TG_MODEL_MAX_DIM}, {"`n_layers`", c->n_layers, TG_MODEL_MAX_LAYERS},
        {"`n_heads`", c->n_heads, TG_MODEL_MAX_HEADS}, {"`n_kv_heads`", c->n_kv_heads, TG_MODEL_MAX_HEADS},
        {"`hidden`", c->hidden, TG_MODEL_MAX_HIDDEN}, {"`vocab`", c->vocab, TG_MAX_VOCAB},
        {"`seq_len`", c->seq_len, TG_MODEL_MAX_SEQ},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (sizes[i].value <= 0)
            return tg_fail(TG_ERR_ARG, "%s must be positive, got %lld", sizes[i].setting, (long long)sizes[i].value);
        if (sizes[i].value > sizes[i].max)
            return tg_fail(TG_ERR_ARG, "%s %lld is above %lld, the largest tapegrad builds", sizes[i].setting,
                           (long long)sizes[i].value, (long long)sizes[i].max);
    }
    if (c->dim % c->n_heads != 0)
        return tg_fail(TG_ERR_ARG, "`n_heads` %lld does not divide `dim` %lld; pick heads so dim/heads is a whole even number",
                       (long long)c->n_heads, (long long)c->dim);
    if ((c->dim / c->n_heads) % 2 != 0)
        return tg_fail(TG_ERR_ARG, "head size dim/heads = %lld is odd; RoPE needs an even head size",
                       (long long)(c->dim / c->n_heads));
    if (c->n_heads % c->n_kv_heads != 0)
        return tg_fail(TG_ERR_ARG, "`n_kv_heads` %lld does not divide `n_heads` %lld", (long long)c->n_kv_heads,
                       (long long)c->n_heads);
    if (!(c->rope_theta > 1.0) || !isfinite(c->rope_theta))
        return tg_fail(TG_ERR_ARG, "`rope_theta` must be a finite number above 1, got %g", c->rope_theta);
    if (!(c->norm_eps >= TG_MODEL_MIN_NORM_EPS && c->norm_eps <= TG_MODEL_MAX_NORM_EPS))
        return tg_fail(TG_ERR_ARG,
                       "norm eps must be in [%g, %g], got %g: RMSNorm computes x / sqrt(mean(x^2) + eps) in float32, "
                       "so eps must be a normal float32 (smaller ones flush to 0) and small beside mean(x^2) (a large "
                       "one makes every output 0)",
                       TG_MODEL_MIN_NORM_EPS, TG_MODEL_MAX_NORM_EPS, c->norm_eps);
    if (!tg_ffn_kind_valid(c->ffn)) return tg_fail(TG_ERR_ARG, "unknown FFN kind %d", (int)c->ffn);
    int64_t rope_entries;
    if (!tg_mul_i64(c->seq_len, c->dim / c->n_heads, &rope_entries) || rope_entries > TG_MODEL_MAX_ROPE_ENTRIES)
        return tg_fail(TG_ERR_ARG, "`seq_len` %lld x head size %lld needs a RoPE table of more than %lld entries; shorten `seq_len`",
                       (long long)c->seq_len, (long long)(c->dim / c->n_heads), (long long)TG_MODEL_MAX_ROPE_ENTRIES);
    /* each of the store's tensors may start up to 15 floats later, for its 64-byte alignment */
    int64_t params = tg_model_config_param_count(c), max_params = TG_MAX_ELEMENTS - 16 * (int64_t)TG_MAX_TENSORS;
    if (params < 0 || params > max_params)
        return tg_fail(TG_ERR_ARG, "the model would have more than %lld parameters; make it smaller", (long long)max_params);
    return TG_OK;
}

/* *count += rows * cols * times, false when any step overflows */
static bool add_matrices(int64_t *count, int64_t times, int64_t rows, int64_t cols) {
    int64_t n;
    return tg_mul_i64(rows, cols, &n) && tg_mul_i64(n, times, &n) && tg_add_i64(*count, n, count);
}

int64_t tg_model_config_param_count(const TgModelConfig *c) {
    if (c->n_heads <= 0) return -1;
    int64_t kv_dim, n = 0;
    bool ok = tg_mul_i64(c->n_kv_heads, c->dim / c->n_heads, &kv_dim) &&
              add_matrices(&n, 1, c->vocab, c->dim) &&    /* the embedding, also the head: once */
              add_matrices(&n, c->n_layers, 2, c->dim) && /* the two norm gains of each layer */
              add_matrices(&n, 1, 1, c->dim) &&           /* the final norm */
              add_matrices(&n, c->n_layers, c->qk_norm ? 2 : 0, c->dim / c->n_heads); /* QK-norm's gains */
    for (int i = 0; ok && i < 2; i++) /* q and o, k and v */
        ok = add_matrices(&n, c->n_layers, c->dim, c->dim) && add_matrices(&n, c->n_layers, kv_dim, c->dim);
    for (int i = 0; ok && i < (c->ffn == TG_FFN_SWIGLU ? 3 : 2); i++) /* w1, w3 (SwiGLU only), w2 */
        ok = add_matrices(&n, c->n_layers, c->hidden, c->dim);
    return ok ? n : -1;
}

/* A weight matrix (rows, cols): N(0, 0.02), with weight decay. */
static TgTensor *add_matrix(TgModel *m, const char *name, int64_t rows, int64_t cols) {
    return tg_params_add(&m->params, name, 2, (int64_t[]){rows, cols}, true, TG_PARAM_INIT_NORMAL(0.02f));
}
/* An RMSNorm gain (dim): 1, without weight decay, as is usual for gains. */
static TgTensor *add_gain(TgModel *m, const char *name, int64_t dim) {
    return tg_params_add(&m->params, name, 1, (int64_t[]){dim}, false, TG_PARAM_INIT_ONES);
}

void tg_model_build(TgModel *m, const TgModelConfig *cfg) {
    TG_CHECK(tg_model_config_validate(cfg) == TG_OK, "%s", tg_error_message());
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    const TgModelConfig *c = &m->cfg;
    int64_t hd = c->dim / c->n_heads, kv_dim = c->n_kv_heads * hd;
    tg_params_init(&m->params);
    m->embed = add_matrix(m, "model.embed_tokens.weight", c->vocab, c->dim);
    m->layers = tg_calloc((size_t)c->n_layers, sizeof *m->layers);
    char name[128]; /* layer names stay far below TG_NAME_CAP; the slack quiets -Wformat-truncation */
#define LAYER_NAME(suffix) (snprintf(name, sizeof name, "model.layers.%lld." suffix, (long long)i), name)
    for (int64_t i = 0; i < c->n_layers; i++) {
        TgLayerParams *L = &m->layers[i];
        L->attn_norm = add_gain(m, LAYER_NAME("input_layernorm.weight"), c->dim);
        L->wq = add_matrix(m, LAYER_NAME("self_attn.q_proj.weight"), c->dim, c->dim);
        L->wk = add_matrix(m, LAYER_NAME("self_attn.k_proj.weight"), kv_dim, c->dim);
        L->wv = add_matrix(m, LAYER_NAME("self_attn.v_proj.weight"), kv_dim, c->dim);
        L->wo = add_matrix(m, LAYER_NAME("self_attn.o_proj.weight"), c->dim, c->dim);
        if (c->qk_norm) {
            L->q_norm = add_gain(m, LAYER_NAME("self_attn.q_norm.weight"), hd);
            L->k_norm = add_gain(m, LAYER_NAME("self_attn.k_norm.weight"), hd);
        }
        L->ffn_norm = add_gain(m, LAYER_NAME("post_attention_layernorm.weight"), c->dim);
        L->w1 = add_matrix(m, LAYER_NAME("mlp.gate_proj.weight"), c->hidden, c->dim);
        if (c->ffn == TG_FFN_SWIGLU) {
            L->w3 = add_matrix(m, LAYER_NAME("mlp.up_proj.weight"), c->hidden, c->dim);
        }
        L->w2 = add_matrix(m, LAYER_NAME("mlp.down_proj.weight"), c->dim, c->hidden);
    }
#undef LAYER_NAME
    m->final_norm = add_gain(m, "model.norm.weight", c->dim);
    tg_params_finalize(&m->params);
    tg_rope_table_init(&m->rope, c->seq_len, hd, c->rope_theta);
}

void tg_model_free(TgModel *m) {
    tg_lora_free(m);
    tg_params_free(&m->params);
    tg_rope_table_free(&m->rope);
    free(m->layers);
    memset(m, 0, sizeof *m);
}

void tg_model_init_weights(TgModel *m, uint64_t seed) { tg_params_init_values(&m->params, seed); }

int64_t tg_model_param_count(const TgModel *m) {
    int64_t n = 0;
    for (int i = 0; i < m->params.count; i++) n += m->params.tensors[i]->numel;
    return n;
}

void tg_kv_cache_init(TgKVCache *cache, const TgModelConfig *cfg, int64_t max_pos) {
    int64_t kv_dim = cfg->n_kv_heads * (cfg->dim / cfg->n_heads);
    size_t n = (size_t)cfg->n_layers * (size_t)max_pos * (size_t)kv_dim;
    cache->k = tg_calloc(n, sizeof(float));
    cache->v = tg_calloc(n, sizeof(float));
    cache->max_pos = max_pos;
    cache->len = 0;
}

void tg_kv_cache_free(TgKVCache *cache) {
    free(cache->k);
    free(cache->v);
    memset(cache, 0, sizeof *cache);
}

/* Appends the new keys/values (1,T,KVH*hd) of `layer` to the cache and returns views of all
 * cached positions (1, len+T, KVH*hd). */
static void cache_append(TgTape *tape, TgKVCache *cache, const TgModelConfig *c, int64_t layer, TgTensor **k,
                         TgTensor **v) {
    int64_t kv_dim = (*k)->shape[2], T = (*k)->shape[1];
    TG_CHECK(cache->len + T <= cache->max_pos, "KV cache full: %lld + %lld > %lld", (long long)cache->len,
             (long long)T, (long long)cache->max_pos);
    size_t base = (size_t)layer * (size_t)cache->max_pos * (size_t)kv_dim;
    float *kdst = cache->k + base, *vdst = cache->v + base;
    memcpy(kdst + (size_t)cache->len * kv_dim, (*k)->data, (size_t)(T * kv_dim) * sizeof(float));
    memcpy(vdst + (size_t)cache->len * kv_dim, (*v)->data, (size_t)(T * kv_dim) * sizeof(float));
    int64_t shape[3] = {1, cache->len + T, kv_dim};
    *k = tg_tensor_view(tape->arena, "k_cache", kdst, 3, shape);
    *v = tg_tensor_view(tape->arena, "v_cache", vdst, 3, shape);
}

/* W x (or residual + W x) of layer l's linear `target`: a lora_linear when the model adapts it. */
static TgTensor *project(const TgModel *m, TgTape *tape, int64_t l, TgLoraTarget target, TgTensor *x, TgTensor *w,
                         TgTensor *residual) {
    const TgLoraPair *pair = m->lora ? &m->lora->pairs[l * TG_LORA_TARGET_COUNT + target] : NULL;
    if (pair && pair->a)
        return tg_lora_linear(tape, x, w, pair->a, pair->b, (float)(m->lora->cfg.alpha / (double)m->lora->cfg.rank),
                              residual);
    return residual ? tg_linear_residual(tape, x, w, residual) : tg_linear(tape, x, w);
}

/* An FFN product of layer l through project(): the LoRA target of each of tg_ffn's products. */
typedef struct {
    const TgModel *m;
    int64_t layer;
} FfnProjection;

static TgTensor *ffn_product(void *ctx, TgTape *tape, TgFfnProduct which, TgTensor *x, TgTensor *w,
                             TgTensor *residual) {
    const FfnProjection *p = ctx;
    static const TgLoraTarget target[] = {
        [TG_FFN_GATE] = TG_LORA_GATE, [TG_FFN_UP] = TG_LORA_UP, [TG_FFN_DOWN] = TG_LORA_DOWN};
    return project(p->m, tape, p->layer, target[which], x, w, residual);
}

/* key_start (B,T) or NULL: packed rows (tg_attention_segmented). RoPE needs nothing for them: a
 * sequence packed at position p of a row has its queries and keys rotated by p more than alone,
 * and a rotated query-key product depends only on the difference of their positions, so the
 * scores within the sequence are those it has alone (up to rounding); positions never restart. */
static TgTensor *forward(TgModel *m, TgTape *tape, const int32_t *tokens, int64_t B, int64_t T, TgKVCache *cache,
                       const int32_t *key_start, TgTensor **ffn_hidden_out) {
    const TgModelConfig *c = &m->cfg;
    float eps = (float)c->norm_eps;
    int64_t pos = cache ? cache->len : 0;
    TG_CHECK(!cache || B == 1, "KV-cache decoding runs batch 1");
    TG_CHECK(pos + T <= c->seq_len, "positions %lld..%lld exceed the context %lld", (long long)pos,
             (long long)(pos + T - 1), (long long)c->seq_len);
    /* LoRA's trainable token rows in the frozen table, for the embedding and the tied head */
    TgTensor *table = m->lora && m->lora->token_rows
                          ? tg_rows_replaced(tape, m->embed, m->lora->token_rows, m->lora->cfg.tokens) /* (V,D) */
                          : m->embed;
    TgTensor *x = tg_embedding(tape, table, tokens, 2, (int64_t[]){B, T}); /* (B,T,D) */
    for (int64_t l = 0; l < c->n_layers; l++) {
        TgLayerParams *L = &m->layers[l];
        /* attention sub-block: x = x + Wo attn(rope(q), rope(k), v), with QK-norm
         * rope(rmsnorm(q) per head). RoPE overwrites its input (the projection, or the norm's
         * output: their backwards do not read it) and the residual add is fused into Wo's
         * product: neither keeps a tensor of its own for the backward. */
        TgTensor *n1 = tg_rmsnorm(tape, x, L->attn_norm, eps);                   /* (B,T,D) */
        TgTensor *q = project(m, tape, l, TG_LORA_Q, n1, L->wq, NULL);           /* (B,T,H*hd) */
        TgTensor *k = project(m, tape, l, TG_LORA_K, n1, L->wk, NULL);           /* (B,T,KVH*hd) */
        if (c->qk_norm) q = tg_rmsnorm(tape, q, L->q_norm, eps), k = tg_rmsnorm(tape, k, L->k_norm, eps);
        q = tg_rope_inplace(tape, q, c->n_heads, &m->rope, pos);
        k = tg_rope_inplace(tape, k, c->n_kv_heads, &m->rope, pos);
        TgTensor *v = project(m, tape, l, TG_LORA_V, n1, L->wv, NULL);          /* (B,T,KVH*hd) */
        if (cache) cache_append(tape, cache, c, l, &k, &v);                   /* (1,pos+T,KVH*hd) */
        TgTensor *a = tg_attention_segmented(tape, q, k, v, c->n_heads, c->n_kv_heads, key_start); /* (B,T,D) */
        x = project(m, tape, l, TG_LORA_O, a, L->wo, x);
        /* feed-forward sub-block: x = x + w2(ffn hidden(rmsnorm(x))), w2 fused with the add */
        TgTensor *n2 = tg_rmsnorm(tape, x, L->ffn_norm, eps);                   /* (B,T,D) */
        TgTensor **hidden = ffn_hidden_out ? &ffn_hidden_out[l] : NULL;          /* (B,T,hidden) */
        FfnProjection projection = {m, l};
        TgFfn ffn = {.w1 = L->w1,
                     .w3 = c->ffn == TG_FFN_SWIGLU ? L->w3 : NULL,
                     .w2 = L->w2,
                     .project = m->lora ? ffn_product : NULL,
                     .ctx = &projection};
        x = tg_ffn(tape, &ffn, n2, x, hidden);
    }
    if (cache) cache->len += T;
    TgTensor *xn = tg_rmsnorm(tape, x, m->final_norm, eps);
    return tg_linear(tape, xn, table); /* (B,T,V): the head is the embedding, tied */
}

TgTensor *tg_model_forward(TgModel *m, TgTape *tape, const TgBatch *b, TgKVCache *cache) {
    TG_CHECK(!cache || !b->key_start, "a KV cache holds one sequence: no packed rows");
    return forward(m, tape, b->tokens, b->batch, b->seq, cache, b->key_start, NULL);
}

TgTensor *tg_model_loss(TgModel *m, TgTape *tape, const TgBatch *b, const TgModelOutputs *out) {
    TgTensor *logits = forward(m, tape, b->tokens, b->batch, b->seq, NULL, b->key_start, out ? out->ffn_hidden : NULL);
    if (out && out->logits) {
        *out->logits = logits;
        return tg_cross_entropy(tape, logits, b->targets, TG_IGNORE_INDEX);
    }
    /* no one else sees the logits: the backward may overwrite them with their gradient */
    return tg_cross_entropy_consuming(tape, logits, b->targets, TG_IGNORE_INDEX);
}
