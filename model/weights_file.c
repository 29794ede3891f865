/* Model weights to and from safetensors files (weights_file.h). */
#include "model/weights_file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/path.h"
#include "tokenizer/tokenizer_hf.h"

static void set_fingerprint(TgStWriter *w, const char *key, uint64_t fingerprint) {
    char hex[32];
    if (!fingerprint) return;
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fingerprint);
    tg_st_writer_set_metadata(w, key, hex);
}

TgStatus tg_model_write_weights(const TgModel *model, const char *path, const char *source_note, TgWeightsTokenizer tok) {
    const TgParamStore *ps = &model->params;
    TgStWriter *w = tg_st_writer_begin();
    for (int i = 0; i < ps->count; i++) {
        const TgTensor *t = ps->tensors[i];
        TgStatus s = tg_st_writer_add_f32(w, t->name, t->ndim, t->shape, t->data);
        if (s != TG_OK) {
            tg_st_writer_free(w);
            return s;
        }
    }
    tg_st_writer_set_metadata(w, "format", "pt");
    if (source_note) tg_st_writer_set_metadata(w, "source", source_note);
    set_fingerprint(w, TG_WEIGHTS_TOKENIZER_KEY, tok.fingerprint);
    set_fingerprint(w, TG_WEIGHTS_TOKENIZER_JSON_KEY, tok.json_fingerprint);
    return tg_st_writer_finish(w, path);
}

static TgStatus read_fingerprint(const TgStFile *f, const char *key, uint64_t *out) {
    *out = 0;
    const char *v = tg_st_metadata(f, key);
    if (!v) return TG_OK;
    uint64_t x = 0;
    size_t n = 0;
    for (; v[n] && n < 17; n++) {
        char c = v[n];
        int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (digit < 0) break;
        x = x << 4 | (uint64_t)digit;
    }
    if (n != 16 || v[n] != '\0' || x == 0)
        return tg_fail(TG_ERR_FORMAT, "%s: metadata %s '%.40s' is not a tokenizer fingerprint (16 hex digits)", tg_st_path(f), key, v);
    *out = x;
    return TG_OK;
}

TgStatus tg_weights_tokenizer_read(const TgStFile *f, TgWeightsTokenizer *out) {
    TG_TRY(read_fingerprint(f, TG_WEIGHTS_TOKENIZER_KEY, &out->fingerprint));
    return read_fingerprint(f, TG_WEIGHTS_TOKENIZER_JSON_KEY, &out->json_fingerprint);
}

/* Weights trained with another tokenizer of the same size load without a shape error and mean
 * nothing: the ids of one tokenizer are not the other's. */
static TgStatus check_tokenizer(const TgStFile *f, const TgTokenizer *tok, const TgMessageSink *messages) {
    TgWeightsTokenizer rec = {0};
    TG_TRY(tg_weights_tokenizer_read(f, &rec));
    if (!rec.fingerprint && !rec.json_fingerprint) {
        tg_message_emit(messages, TG_MESSAGE_NOTE,
                     "%s records no tokenizer fingerprint (weights from another program or an older tapegrad): nothing "
                     "checks that they were trained with this run's tokenizer",
                     tg_st_path(f));
        return TG_OK;
    }
    if (!tok) return TG_OK;
    uint64_t fingerprint = tok->fingerprint;
    if (fingerprint == rec.fingerprint || fingerprint == rec.json_fingerprint) return TG_OK;
    char ours[96];
    snprintf(ours, sizeof ours, "this run's %s tokenizer of %d ids is %016llx", tg_tokenizer_kind_name(tok->kind),
             (int)tok->vocab_size, (unsigned long long)fingerprint);
    if (rec.json_fingerprint) { /* a Hugging Face folder: its tokenizer.json is theirs */
        char folder[TG_PATH_CAP];
        tg_path_folder(tg_st_path(f), folder, sizeof folder);
        return tg_fail(TG_ERR_MISMATCH,
                       "%s was trained with another tokenizer: it records tokenizer %016llx, %s; train with its own: "
                       "`tokenizer` hf:%s/" TG_TOKENIZER_HF_FILE,
                       tg_st_path(f), (unsigned long long)rec.json_fingerprint, ours, folder);
    }
    return tg_fail(TG_ERR_MISMATCH,
                   "%s was trained with another tokenizer: it records tokenizer %016llx, %s; train with the tokenizer "
                   "it was trained with (the `data_path` and `tokenizer` of the run it was exported from, or export that "
                   "run as a Hugging Face folder and give `tokenizer` hf:FOLDER/" TG_TOKENIZER_HF_FILE ")",
                   tg_st_path(f), (unsigned long long)rec.fingerprint, ours);
}

TgStatus tg_model_import_safetensors(TgModel *model, const char *path, const TgTokenizer *tok, const TgMessageSink *messages) {
    TgStFile *f = NULL;
    TG_TRY(tg_st_open(path, &f));
    const TgParamStore *ps = &model->params;
    const TgModelConfig *c = &model->cfg;
    TgStatus s = check_tokenizer(f, tok, messages);
    /* the file may hold nothing the model lacks: an ignored tensor is a silent mistake */
    for (size_t i = 0; i < tg_st_count(f) && s == TG_OK; i++) {
        const TgStEntry *e = tg_st_entry_at(f, i);
        if (tg_params_index(ps, e->name) < 0)
            s = tg_fail(TG_ERR_MISMATCH, "%s: tensor '%s' is not part of this model (tapegrad names its weights the Llama/MiniMind "
                                         "way and ties the output head to model.embed_tokens.weight)",
                        path, e->name);
    }
    float *staged = s == TG_OK ? tg_malloc(ps->total * sizeof(float) + 4) : NULL;
    for (int i = 0; i < ps->count && s == TG_OK; i++) {
        const TgTensor *t = ps->tensors[i];
        const TgStEntry *e = tg_st_find(f, t->name);
        if (!e) {
            s = tg_fail(TG_ERR_MISMATCH, "%s: tensor '%s' is missing; the model (dim %lld, %lld layers) needs it", path, t->name,
                        (long long)c->dim, (long long)c->n_layers);
            break;
        }
        bool same = e->ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = e->shape[d] == t->shape[d];
        if (!same) {
            char found[160], want[160];
            s = tg_fail(TG_ERR_MISMATCH,
                        "%s: tensor '%s' has shape %s, but the model built from the flags and the data's tokenizer "
                        "(dim %lld, layers %lld, heads %lld/%lld, hidden %lld, vocab %lld) needs %s; give the flags "
                        "of the file's config.json",
                        path, t->name, tg_st_shape_str(e->ndim, e->shape, found, sizeof found), (long long)c->dim,
                        (long long)c->n_layers, (long long)c->n_heads, (long long)c->n_kv_heads, (long long)c->hidden,
                        (long long)c->vocab, tg_tensor_shape_str(t, want, sizeof want));
            break;
        }
        s = tg_st_read_f32(f, t->name, staged + ps->offsets[i], t->numel);
        for (int64_t j = 0; s == TG_OK && j < t->numel; j++)
            if (!isfinite(staged[ps->offsets[i] + (size_t)j]))
                s = tg_fail(TG_ERR_FORMAT, "%s: tensor '%s' holds %s at index %lld; weights must be finite numbers", path,
                            t->name, isnan(staged[ps->offsets[i] + (size_t)j]) ? "NaN" : "Inf", (long long)j);
    }
    if (s == TG_OK) memcpy(ps->data, staged, ps->total * sizeof(float));
    free(staged);
    tg_st_close(f);
    return s;
}
