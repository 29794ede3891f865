/* LoRA adapters on a model's linears (tapegrad/model.h): their parameter store, the frozen base,
 * and folding them into it.
 *
 * Adapter tensors are named after the weight they adapt, as PEFT names them inside its model:
 * model.layers.{i}.self_attn.q_proj.weight gets model.layers.{i}.self_attn.q_proj.lora_A.weight
 * (r, in) and ...lora_B.weight (out, r). The forward (model/model.c) runs each adapted linear as
 * one lora_linear op. Trainable token rows are model.embed_tokens.trainable_tokens (K, dim), read
 * through one rows_replaced op by the embedding and the tied head alike. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/blas.h"
#include "lib/checked.h"
#include "support/hash.h"
#include "tapegrad/model.h"

TG_ENUM_DEFINE(TgLoraTarget, tg_lora_target, TG_LORA_TARGETS, TG_LORA_TARGET_COUNT, "LoRA target")

TgStatus tg_lora_targets_parse(const char *list, uint32_t *targets) {
    *targets = 0;
    const char *p = list;
    while (*p) {
        size_t len = strcspn(p, ",");
        char name[16];
        int hit = len < sizeof name ? (snprintf(name, sizeof name, "%.*s", (int)len, p),
                                       tg_enum_index(tg_lora_target_names_, TG_LORA_TARGET_COUNT, name))
                                    : -1;
        if (hit < 0)
            return tg_fail(TG_ERR_ARG, "`lora_targets`: unknown target '%.*s'; the targets are q,k,v,o,gate,up,down",
                           (int)len, p);
        *targets |= 1u << hit;
        p += len;
        if (*p == ',') p++;
    }
    if (!*targets) return tg_fail(TG_ERR_ARG, "`lora_targets` is empty; name some of q,k,v,o,gate,up,down");
    return TG_OK;
}

void tg_lora_targets_format(uint32_t targets, char *buf, size_t cap) {
    size_t n = 0;
    if (cap) buf[0] = '\0';
    for (int t = 0; t < TG_LORA_TARGET_COUNT && n < cap; t++)
        if (targets & (1u << t))
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? "," : "", tg_lora_target_names_[t]);
}

/* The (out, in) of the linear target t adapts in a model of config c (model/model.c builds them):
 * q and o dim x dim, k and v kv_dim x dim, gate and up hidden x dim, down dim x hidden. */
static void target_shape(const TgModelConfig *c, int t, int64_t *out, int64_t *in) {
    int64_t kv_dim = c->n_kv_heads * (c->dim / c->n_heads);
    bool ffn_in = t == TG_LORA_GATE || t == TG_LORA_UP;
    *out = t == TG_LORA_K || t == TG_LORA_V ? kv_dim : ffn_in ? c->hidden : c->dim;
    *in = t == TG_LORA_DOWN ? c->hidden : c->dim;
}

TgStatus tg_lora_config_validate(const TgLoraConfig *c, const TgModelConfig *model) {
    if (c->rank < 1 || c->rank > TG_LORA_MAX_RANK)
        return tg_fail(TG_ERR_ARG, "`lora_rank` must be in [1, %d], got %lld", TG_LORA_MAX_RANK, (long long)c->rank);
    if (!(c->alpha >= TG_LORA_MIN_ALPHA && c->alpha <= TG_LORA_MAX_ALPHA))
        return tg_fail(TG_ERR_ARG, "`lora_alpha` must be in [%g, %d] (the update is scaled by alpha / rank), got %g",
                       TG_LORA_MIN_ALPHA, TG_LORA_MAX_ALPHA, c->alpha);
    if (!c->targets || (c->targets & ~TG_LORA_ALL_TARGETS))
        return tg_fail(TG_ERR_ARG, "`lora_targets` must name some of q,k,v,o,gate,up,down");
    if (c->n_tokens < 0 || c->n_tokens > TG_LORA_MAX_TOKENS)
        return tg_fail(TG_ERR_ARG, "`lora_tokens` names %d tokens; at most %d", c->n_tokens, TG_LORA_MAX_TOKENS);
    for (int j = 0; j < c->n_tokens; j++)
        if (c->tokens[j] < 0 || (j > 0 && c->tokens[j] <= c->tokens[j - 1]) || (model && c->tokens[j] >= model->vocab))
            return tg_fail(TG_ERR_ARG, "`lora_tokens`: the token ids must be distinct, ascending and in the vocabulary; "
                                       "got %d at %d", (int)c->tokens[j], j);
    if (!model) return TG_OK;
    if (model->ffn != TG_FFN_SWIGLU && (c->targets & (1u << TG_LORA_UP)))
        return tg_fail(TG_ERR_ARG, "`lora_targets` up: a ReLU FFN has no up projection; drop it");
    /* the narrowest targeted linear bounds the rank */
    int narrowest = -1;
    int64_t side = 0, out = 0, in = 0;
    bool some_fit = false; /* a targeted linear wide enough for the rank */
    for (int t = 0; t < TG_LORA_TARGET_COUNT; t++) {
        int64_t o, i;
        target_shape(model, t, &o, &i);
        if (!(c->targets & (1u << t))) continue;
        some_fit |= c->rank <= (o < i ? o : i);
        if (narrowest < 0 || (o < i ? o : i) < side) narrowest = t, side = o < i ? o : i, out = o, in = i;
    }
    if (narrowest >= 0 && c->rank > side)
        return tg_fail(TG_ERR_ARG,
                       "`lora_rank` %lld is above %lld, the smaller side of the %s projection (%lld x %lld): B A has "
                       "rank %lld at most, so a larger rank adds parameters and nothing else; use a rank of at most "
                       "%lld%s",
                       (long long)c->rank, (long long)side, tg_lora_target_names_[narrowest], (long long)out,
                       (long long)in, (long long)side, (long long)side,
                       some_fit ? ", or leave the narrower projections out of `lora_targets`" : "");
    return TG_OK;
}

/* The base weight a target adapts in layer L (NULL: the model has none, a ReLU FFN's up). */
static TgTensor *target_weight(const TgLayerParams *L, int t) {
    TgTensor *const w[TG_LORA_TARGET_COUNT] = {[TG_LORA_Q] = L->wq,     [TG_LORA_K] = L->wk,  [TG_LORA_V] = L->wv,
                                               [TG_LORA_O] = L->wo,     [TG_LORA_GATE] = L->w1, [TG_LORA_UP] = L->w3,
                                               [TG_LORA_DOWN] = L->w2};
    return w[t];
}

uint64_t tg_model_weights_fingerprint(const TgModel *m) {
    TgHash64 h;
    tg_hash64_init(&h, 0x4c6f5241u /* "LoRA" */);
    for (int i = 0; i < m->params.count; i++) {
        const TgTensor *t = m->params.tensors[i];
        tg_hash64_update(&h, t->name, strlen(t->name) + 1);
        tg_hash64_update(&h, t->shape, (size_t)t->ndim * sizeof t->shape[0]);
        tg_hash64_update(&h, t->data, (size_t)t->numel * sizeof(float));
    }
    return tg_hash64_final(&h);
}

void tg_lora_attach(TgModel *m, const TgLoraConfig *cfg, uint64_t seed) {
    TG_CHECK(!m->lora, "tg_lora_attach: the model has adapters already");
    TG_CHECK(tg_lora_config_validate(cfg, &m->cfg) == TG_OK, "%s", tg_error_message());
    TgLora *lora = tg_calloc(1, sizeof *lora);
    lora->cfg = *cfg;
    lora->base_fingerprint = tg_model_weights_fingerprint(m);
    lora->pairs = tg_calloc((size_t)m->cfg.n_layers * TG_LORA_TARGET_COUNT, sizeof *lora->pairs);
    tg_params_init(&lora->params);
    char name[TG_NAME_CAP + 16];
    for (int64_t l = 0; l < m->cfg.n_layers; l++)
        for (int t = 0; t < TG_LORA_TARGET_COUNT; t++) {
            const TgTensor *w = target_weight(&m->layers[l], t);
            if (!(cfg->targets & (1u << t)) || !w) continue;
            int64_t out = w->shape[0], in = w->shape[1];
            size_t stem = strlen(w->name) - strlen(".weight");   /* model.layers.0.self_attn.q_proj */
            TgLoraPair *pair = &lora->pairs[l * TG_LORA_TARGET_COUNT + t];
            snprintf(name, sizeof name, "%.*s.lora_A.weight", (int)stem, w->name);
            pair->a = tg_params_add(&lora->params, name, 2, (int64_t[]){cfg->rank, in}, false,
                                    TG_PARAM_INIT_UNIFORM(1.0f / sqrtf((float)in)));
            snprintf(name, sizeof name, "%.*s.lora_B.weight", (int)stem, w->name);
            pair->b = tg_params_add(&lora->params, name, 2, (int64_t[]){out, cfg->rank}, false, TG_PARAM_INIT_ZEROS);
        }
    if (cfg->n_tokens > 0)
        lora->token_rows = tg_params_add(&lora->params, "model.embed_tokens.trainable_tokens", 2,
                                         (int64_t[]){cfg->n_tokens, m->cfg.dim}, false, TG_PARAM_INIT_ZEROS);
    tg_params_finalize(&lora->params);
    tg_params_init_values(&lora->params, seed);
    /* the rows start as the base's: the model is unchanged until they train */
    for (int j = 0; j < cfg->n_tokens; j++)
        memcpy(lora->token_rows->data + (int64_t)j * m->cfg.dim, m->embed->data + (int64_t)cfg->tokens[j] * m->cfg.dim,
               (size_t)m->cfg.dim * sizeof(float));
    if (m->params.grad) tg_params_freeze(&m->params);
    m->lora = lora;
}

void tg_lora_free(TgModel *m) {
    if (!m->lora) return;
    tg_params_free(&m->lora->params);
    free(m->lora->pairs);
    free(m->lora);
    m->lora = NULL;
}

/* W += s B A: (out, in) += s (out, r) (r, in) */
void tg_lora_place_token_rows(TgModel *m) {
    const TgLora *lora = m->lora;
    if (!lora) return;
    for (int j = 0; j < lora->cfg.n_tokens; j++)
        memcpy(m->embed->data + (int64_t)lora->cfg.tokens[j] * m->cfg.dim, lora->token_rows->data + (int64_t)j * m->cfg.dim,
               (size_t)m->cfg.dim * sizeof(float));
}

void tg_lora_merge(TgModel *m) {
    TgLora *lora = m->lora;
    if (!lora) return;
    float s = (float)(lora->cfg.alpha / (double)lora->cfg.rank);
    for (int64_t l = 0; l < m->cfg.n_layers; l++)
        for (int t = 0; t < TG_LORA_TARGET_COUNT; t++) {
            const TgLoraPair *pair = &lora->pairs[l * TG_LORA_TARGET_COUNT + t];
            if (!pair->a) continue;
            TgTensor *w = target_weight(&m->layers[l], t);
            int64_t out = w->shape[0], in = w->shape[1], r = lora->cfg.rank;
            tg_sgemm(false, false, out, in, r, s, pair->b->data, r, pair->a->data, in, 1.0f, w->data, in);
        }
    tg_lora_place_token_rows(m);
    tg_lora_free(m);
}

TgParamStore *tg_model_trainable(TgModel *m) { return m->lora ? &m->lora->params : &m->params; }
