/* The GGUF writer (see export_gguf.h). Layout, all little-endian:
 *   "GGUF", version u32 = 3, tensor count u64, metadata count u64,
 *   metadata: key (u64 length + bytes), value type u32, value,
 *   tensor infos: name, n_dims u32, dims u64 (innermost first), ggml type u32, offset u64,
 *   padding to GGUF_ALIGNMENT, then each tensor's data at its offset (a multiple of it).
 */
#include "export/export_gguf.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/chat_tools.h"
#include "tokenizer/tokenizer_hf.h"
#include "support/atomic_file.h"
#include "export/export_hf.h"

enum { GGUF_VERSION = 3, GGUF_ALIGNMENT = 32 }; /* 32: the default of general.alignment */
enum { GGUF_TYPE_UINT32 = 4, GGUF_TYPE_INT32 = 5, GGUF_TYPE_FLOAT32 = 6, GGUF_TYPE_BOOL = 7, GGUF_TYPE_STRING = 8,
       GGUF_TYPE_ARRAY = 9 };
enum { GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1, GGML_TYPE_Q8_0 = 8 };
enum { Q8_0_BLOCK = 32 };
enum { TOKEN_NORMAL = 1, TOKEN_CONTROL = 3, TOKEN_USER_DEFINED = 4 }; /* tokenizer.ggml.token_type */

TG_ENUM_DEFINE(TgGgufWeights, tg_gguf_weights, TG_GGUF_WEIGHT_TYPES, TG_GGUF_WEIGHTS_COUNT, "GGUF weight type")

/* ---- the metadata, built in memory (its count comes first in the file) ---------------- */

typedef struct {
    uint8_t *data;
    size_t len, cap;
    uint64_t count; /* key-value pairs */
} Buf;

static void put(Buf *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = b->len + n > 2 * b->cap ? b->len + n : 2 * b->cap;
        b->data = tg_realloc(b->data, b->cap);
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}
static void put_u32(Buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(Buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(Buf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void key(Buf *b, const char *k, uint32_t type) {
    put_str(b, k);
    put_u32(b, type);
    b->count++;
}
static void kv_u32(Buf *b, const char *k, uint32_t v) { key(b, k, GGUF_TYPE_UINT32), put_u32(b, v); }
static void kv_f32(Buf *b, const char *k, float v) { key(b, k, GGUF_TYPE_FLOAT32), put(b, &v, 4); }
static void kv_bool(Buf *b, const char *k, bool v) { key(b, k, GGUF_TYPE_BOOL), put(b, &(uint8_t){v}, 1); }
static void kv_str(Buf *b, const char *k, const char *v) { key(b, k, GGUF_TYPE_STRING), put_str(b, v); }
static void array_head(Buf *b, const char *k, uint32_t elem_type, uint64_t n) {
    key(b, k, GGUF_TYPE_ARRAY);
    put_u32(b, elem_type);
    put_u64(b, n);
}

/* llama.cpp's architecture of the model: llama, or qwen3 for one with QK-norm (MiniMind-3's),
 * whose RoPE llama.cpp applies to the halves (i, i + hd/2) as tapegrad does (NEOX order): its q
 * and k rows stay as they are, where llama's are permuted into pairs (2i, 2i + 1). */
static const char *architecture(const TgModelConfig *c) { return c->qk_norm ? "qwen3" : "llama"; }

static void put_model_metadata(Buf *b, const TgModelConfig *c, TgGgufWeights weights) {
    static const uint32_t file_types[] = {[TG_GGUF_WEIGHTS_F32] = 0, [TG_GGUF_WEIGHTS_F16] = 1, [TG_GGUF_WEIGHTS_Q8_0] = 7};
    const char *arch = architecture(c);
    char k[96];
#define ARCH_KEY(name) (snprintf(k, sizeof k, "%s." name, arch), k)
    kv_str(b, "general.architecture", arch);
    kv_str(b, "general.name", "tapegrad");
    kv_u32(b, "general.file_type", file_types[weights]);
    kv_u32(b, ARCH_KEY("context_length"), (uint32_t)c->seq_len);
    kv_u32(b, ARCH_KEY("embedding_length"), (uint32_t)c->dim);
    kv_u32(b, ARCH_KEY("block_count"), (uint32_t)c->n_layers);
    kv_u32(b, ARCH_KEY("feed_forward_length"), (uint32_t)c->hidden);
    kv_u32(b, ARCH_KEY("attention.head_count"), (uint32_t)c->n_heads);
    kv_u32(b, ARCH_KEY("attention.head_count_kv"), (uint32_t)c->n_kv_heads);
    if (c->qk_norm) { /* qwen3: the head size, which need not be embedding_length / head_count */
        kv_u32(b, ARCH_KEY("attention.key_length"), (uint32_t)(c->dim / c->n_heads));
        kv_u32(b, ARCH_KEY("attention.value_length"), (uint32_t)(c->dim / c->n_heads));
    }
    kv_u32(b, ARCH_KEY("rope.dimension_count"), (uint32_t)(c->dim / c->n_heads));
    kv_f32(b, ARCH_KEY("rope.freq_base"), (float)c->rope_theta);
    kv_f32(b, ARCH_KEY("attention.layer_norm_rms_epsilon"), (float)c->norm_eps);
    kv_u32(b, ARCH_KEY("vocab_size"), (uint32_t)c->vocab);
#undef ARCH_KEY
}

static void put_tokenizer_metadata(Buf *b, const TgTokenizer *tok, const TgChatTokens *chat,
                                   TgChatTemplate chat_template) {
    kv_str(b, "tokenizer.ggml.model", "gpt2");
    kv_str(b, "tokenizer.ggml.pre", "gpt-2");
    array_head(b, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, (uint64_t)tok->vocab_size);
    for (int32_t id = 0; id < tok->vocab_size; id++) {
        char *text = tg_tokenizer_hf_token_text(tok, id);
        put_str(b, text);
        free(text);
    }
    array_head(b, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, (uint64_t)tok->vocab_size);
    for (int32_t id = 0; id < tok->vocab_size; id++) {
        bool special;
        int32_t type = !tg_tokenizer_hf_is_added(tok, id, &special) ? TOKEN_NORMAL : special ? TOKEN_CONTROL : TOKEN_USER_DEFINED;
        put(b, &type, 4);
    }
    array_head(b, "tokenizer.ggml.merges", GGUF_TYPE_STRING, (uint64_t)tok->n_merges);
    for (int32_t i = 0; i < tok->n_merges; i++) {
        char *l = tg_tokenizer_hf_token_text(tok, tok->merges[i].left), *r = tg_tokenizer_hf_token_text(tok, tok->merges[i].right);
        put_u64(b, strlen(l) + 1 + strlen(r));
        put(b, l, strlen(l));
        put(b, " ", 1);
        put(b, r, strlen(r));
        free(l), free(r);
    }
    kv_u32(b, "tokenizer.ggml.bos_token_id", (uint32_t)tg_tokenizer_doc_start(tok));
    kv_u32(b, "tokenizer.ggml.eos_token_id", (uint32_t)(chat ? chat->im_end : tok->eot_id));
    kv_bool(b, "tokenizer.ggml.add_bos_token", false);
    kv_bool(b, "tokenizer.ggml.add_eos_token", false);
    if (chat) kv_str(b, "tokenizer.chat_template", tg_chat_template_text(chat_template));
}

/* ---- tensors -------------------------------------------------------------------------- */

typedef struct {
    char name[64];
    const TgTensor *t;
    int64_t heads; /* > 0: permute rows for llama.cpp's RoPE pairs, with this many heads */
    uint32_t type;
    uint64_t offset, bytes;
} GgufTensor;

static uint64_t tensor_bytes(uint32_t type, int64_t numel) {
    if (type == GGML_TYPE_F32) return (uint64_t)numel * 4;
    if (type == GGML_TYPE_F16) return (uint64_t)numel * 2;
    return (uint64_t)(numel / Q8_0_BLOCK) * (2 + Q8_0_BLOCK);
}

static uint32_t type_for(const TgTensor *t, TgGgufWeights weights) {
    if (t->ndim == 1 || weights == TG_GGUF_WEIGHTS_F32) return GGML_TYPE_F32;
    if (weights == TG_GGUF_WEIGHTS_Q8_0 && t->shape[1] % Q8_0_BLOCK == 0) return GGML_TYPE_Q8_0;
    return GGML_TYPE_F16;
}

/* Each tensor's type and offset in the data section, in file order. */
static void place_tensors(GgufTensor *ts, int n, TgGgufWeights weights) {
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        ts[i].type = type_for(ts[i].t, weights);
        ts[i].offset = offset;
        ts[i].bytes = tensor_bytes(ts[i].type, ts[i].t->numel);
        offset += (ts[i].bytes + GGUF_ALIGNMENT - 1) / GGUF_ALIGNMENT * GGUF_ALIGNMENT;
    }
}

/* The tensors in file order, with their types and offsets; returns their number. */
static int plan_tensors(const TgModel *m, TgGgufWeights weights, GgufTensor *out) {
    int n = 0;
#define ADD(tensor, heads_, ...) \
    (snprintf(out[n].name, sizeof out[n].name, __VA_ARGS__), out[n].t = (tensor), out[n].heads = (heads_), n++)
    bool pairs = !m->cfg.qk_norm; /* llama's RoPE pairs (architecture above) */
    ADD(m->embed, 0, "token_embd.weight");
    for (int64_t l = 0; l < m->cfg.n_layers; l++) {
        const TgLayerParams *p = &m->layers[l];
        ADD(p->attn_norm, 0, "blk.%lld.attn_norm.weight", (long long)l);
        ADD(p->wq, pairs ? m->cfg.n_heads : 0, "blk.%lld.attn_q.weight", (long long)l);
        ADD(p->wk, pairs ? m->cfg.n_kv_heads : 0, "blk.%lld.attn_k.weight", (long long)l);
        ADD(p->wv, 0, "blk.%lld.attn_v.weight", (long long)l);
        ADD(p->wo, 0, "blk.%lld.attn_output.weight", (long long)l);
        if (p->q_norm) ADD(p->q_norm, 0, "blk.%lld.attn_q_norm.weight", (long long)l);
        if (p->k_norm) ADD(p->k_norm, 0, "blk.%lld.attn_k_norm.weight", (long long)l);
        ADD(p->ffn_norm, 0, "blk.%lld.ffn_norm.weight", (long long)l);
        ADD(p->w1, 0, "blk.%lld.ffn_gate.weight", (long long)l);
        ADD(p->w3, 0, "blk.%lld.ffn_up.weight", (long long)l);
        ADD(p->w2, 0, "blk.%lld.ffn_down.weight", (long long)l);
    }
    ADD(m->final_norm, 0, "output_norm.weight");
#undef ADD
    place_tensors(out, n, weights);
    return n;
}

static void put_tensor_infos(Buf *b, const GgufTensor *ts, int n) {
    for (int i = 0; i < n; i++) {
        const TgTensor *t = ts[i].t;
        put_str(b, ts[i].name);
        put_u32(b, (uint32_t)t->ndim);
        for (int d = t->ndim - 1; d >= 0; d--) put_u64(b, (uint64_t)t->shape[d]);
        put_u32(b, ts[i].type);
        put_u64(b, ts[i].offset);
    }
}

/* IEEE half precision, rounding to nearest even (as the hardware conversions ggml uses). */
static uint16_t half_of(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, mant = x & 0x7FFFFFu;
    int exp = (int)((x >> 23) & 0xFF);
    if (exp == 0xFF) return (uint16_t)(sign | 0x7C00u | (mant ? 0x200u : 0));
    int e = exp - 127 + 15;
    if (e >= 0x1F) return (uint16_t)(sign | 0x7C00u);
    uint32_t shift = 13, bits;
    if (e <= 0) { /* a subnormal half: the implicit 1 joins the mantissa */
        if (e < -10) return (uint16_t)sign;
        mant |= 0x800000u;
        shift = (uint32_t)(14 - e);
        bits = mant >> shift;
    } else {
        bits = ((uint32_t)e << 10) | (mant >> 13);
    }
    uint32_t rest = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (bits & 1))) bits++; /* a carry may reach the exponent: right */
    return (uint16_t)(sign | bits);
}

/* Row r of tensor ts as llama.cpp wants it (the RoPE permutation of attn_q / attn_k). */
static const float *row_of(const GgufTensor *ts, int64_t r) {
    const TgTensor *t = ts->t;
    int64_t cols = t->ndim == 1 ? t->numel : t->shape[1];
    if (ts->heads <= 0) return t->data + r * cols;
    int64_t hd = t->shape[0] / ts->heads, h = r / hd, j = (r % hd) / 2, s = r % 2;
    return t->data + (h * hd + s * (hd / 2) + j) * cols;
}

static void write_row(FILE *f, uint32_t type, const float *x, int64_t n) {
    if (type == GGML_TYPE_F32) {
        fwrite(x, 4, (size_t)n, f);
        return;
    }
    if (type == GGML_TYPE_F16) {
        for (int64_t i = 0; i < n; i++) fwrite(&(uint16_t){half_of(x[i])}, 2, 1, f);
        return;
    }
    for (int64_t b = 0; b < n; b += Q8_0_BLOCK) {
        float amax = 0;
        for (int i = 0; i < Q8_0_BLOCK; i++) amax = fmaxf(amax, fabsf(x[b + i]));
        float d = amax / 127, id = d ? 1 / d : 0;
        int8_t q[Q8_0_BLOCK];
        for (int i = 0; i < Q8_0_BLOCK; i++) q[i] = (int8_t)roundf(x[b + i] * id);
        fwrite(&(uint16_t){half_of(d)}, 2, 1, f);
        fwrite(q, 1, Q8_0_BLOCK, f);
    }
}

static void write_tensor_data(FILE *f, const GgufTensor *ts, int n) {
    static const uint8_t zeros[GGUF_ALIGNMENT];
    for (int i = 0; i < n; i++) {
        const TgTensor *t = ts[i].t;
        int64_t rows = t->ndim == 1 ? 1 : t->shape[0], cols = t->ndim == 1 ? t->numel : t->shape[1];
        for (int64_t r = 0; r < rows; r++) write_row(f, ts[i].type, row_of(&ts[i], r), cols);
        fwrite(zeros, 1, (size_t)((GGUF_ALIGNMENT - ts[i].bytes % GGUF_ALIGNMENT) % GGUF_ALIGNMENT), f);
    }
}

static TgStatus write_gguf(const char *path, Buf *meta, const GgufTensor *ts, int n_tensors);

TgStatus tg_model_export_gguf(const TgModel *model, const TgTokenizer *tok, const TgChatTokens *chat,
                              TgChatTemplate chat_template, const char *path, TgGgufWeights weights) {
    const TgModelConfig *c = &model->cfg;
    TG_TRY(tg_export_check_llama(c));
    TG_TRY(tg_tokenizer_hf_check_exportable(tok));
    if (tok->vocab_size != c->vocab)
        return tg_fail(TG_ERR_MISMATCH, "the tokenizer has %d ids, the model %lld", (int)tok->vocab_size, (long long)c->vocab);
    int n_tensors = (int)(2 + (c->qk_norm ? 11 : 9) * c->n_layers);
    GgufTensor *ts = tg_calloc((size_t)n_tensors, sizeof *ts);
    TG_CHECK(plan_tensors(model, weights, ts) == n_tensors, "tensor count");
    Buf meta = {0};
    put_model_metadata(&meta, c, weights);
    put_tokenizer_metadata(&meta, tok, chat, chat_template);
    TgStatus s = write_gguf(path, &meta, ts, n_tensors);
    free(ts);
    return s;
}

/* The file: header, the metadata `meta` holds, the tensors' infos, their data (aligned). */
static TgStatus write_gguf(const char *path, Buf *meta_buf, const GgufTensor *ts, int n_tensors) {
    Buf meta = *meta_buf, infos = {0};
    put_tensor_infos(&infos, ts, n_tensors);
    Buf head = {0};
    put(&head, "GGUF", 4);
    put_u32(&head, GGUF_VERSION);
    put_u64(&head, (uint64_t)n_tensors);
    put_u64(&head, meta.count);
    TgAtomicFile af;
    TgStatus s = tg_atomic_file_open(&af, path);
    if (s == TG_OK) {
        FILE *f = tg_atomic_file_stream(&af);
        fwrite(head.data, 1, head.len, f);
        fwrite(meta.data, 1, meta.len, f);
        fwrite(infos.data, 1, infos.len, f);
        size_t at = head.len + meta.len + infos.len;
        for (; at % GGUF_ALIGNMENT; at++) fputc(0, f);
        write_tensor_data(f, ts, n_tensors);
        s = tg_atomic_file_commit(&af);
    }
    free(head.data), free(meta.data), free(infos.data);
    return s;
}

/* llama.cpp's name of the weight a LoRA target adapts, after "blk.N." */
static const char *gguf_target_name(int target) {
    static const char *const names[TG_LORA_TARGET_COUNT] = {
        [TG_LORA_Q] = "attn_q",      [TG_LORA_K] = "attn_k",  [TG_LORA_V] = "attn_v",     [TG_LORA_O] = "attn_output",
        [TG_LORA_GATE] = "ffn_gate", [TG_LORA_UP] = "ffn_up", [TG_LORA_DOWN] = "ffn_down"};
    return names[target];
}

TgStatus tg_model_export_gguf_adapter(const TgModel *model, const char *path, bool base_has_rows) {
    const TgModelConfig *c = &model->cfg;
    const TgLora *lora = model->lora;
    if (!lora) return tg_fail(TG_ERR_ARG, "the run has no LoRA adapters to export as a GGUF adapter");
    if (!base_has_rows) TG_TRY(tg_export_adapter_check(lora, "a llama.cpp LoRA adapter cannot hold", "`gguf`"));
    TG_TRY(tg_export_check_llama(c));
    GgufTensor *ts = tg_calloc((size_t)(2 * TG_LORA_TARGET_COUNT * c->n_layers), sizeof *ts);
    int n = 0;
    for (int64_t l = 0; l < c->n_layers; l++)
        for (int t = 0; t < TG_LORA_TARGET_COUNT; t++) {
            const TgLoraPair *pair = &lora->pairs[l * TG_LORA_TARGET_COUNT + t];
            if (!pair->a) continue;
            /* B's rows are the weight's output rows: q and k take the base export's RoPE permutation */
            int64_t heads = c->qk_norm ? 0 : t == TG_LORA_Q ? c->n_heads : t == TG_LORA_K ? c->n_kv_heads : 0;
            snprintf(ts[n].name, sizeof ts[n].name, "blk.%lld.%s.weight.lora_a", (long long)l, gguf_target_name(t));
            ts[n++].t = pair->a;
            snprintf(ts[n].name, sizeof ts[n].name, "blk.%lld.%s.weight.lora_b", (long long)l, gguf_target_name(t));
            ts[n].heads = heads;
            ts[n++].t = pair->b;
        }
    place_tensors(ts, n, TG_GGUF_WEIGHTS_F32);
    Buf meta = {0};
    kv_str(&meta, "general.architecture", architecture(c));
    kv_str(&meta, "general.type", "adapter");
    kv_str(&meta, "general.name", "tapegrad LoRA");
    kv_str(&meta, "adapter.type", "lora");
    kv_f32(&meta, "adapter.lora.alpha", (float)lora->cfg.alpha);
    TgStatus s = write_gguf(path, &meta, ts, n);
    free(ts);
    return s;
}
