/* The Hugging Face model folder (see export_hf.h). */
#include "export/export_hf.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_hf.h"
#include "lib/atomic_file.h"
#include "export/convert.h"
#include "lib/path.h"

TgStatus tg_export_check_llama(const TgModelConfig *cfg) {
    if (cfg->ffn != TG_FFN_SWIGLU)
        return tg_fail(TG_ERR_MISMATCH,
                       "this model's feed-forward block is %s, w2(relu(w1 x)); the Llama architecture that "
                       "transformers and llama.cpp run has SwiGLU, w2(silu(w1 x) * w3 x), so no Llama config can "
                       "describe it; export its weights with --safetensors instead",
                       tg_ffn_kind_name(cfg->ffn));
    return TG_OK;
}

/* A folder `flag` names, new or empty (or with --force), and the files a writer puts in it. */
static TgStatus folder_check(TgOutputPlan *plan, const char *flag, const char *dir, const char *const *files, size_t n,
                             bool force) {
    TG_TRY(tg_output_check_folder(flag, dir));
    DIR *d = opendir(dir);
    if (d) { /* an empty folder is as good as a new one; one with files needs --force */
        const struct dirent *e;
        bool empty = true;
        while (empty && (e = readdir(d)))
            empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
        closedir(d);
        if (!empty && !force)
            return tg_fail(TG_ERR_ARG,
                           "%s is not empty; give an empty or new folder, or --force to replace the model files in it", dir);
    }
    for (size_t i = 0; i < n; i++) {
        char path[TG_PATH_CAP], what[64];
        TG_TRY(tg_path_join(path, sizeof path, dir, files[i]));
        snprintf(what, sizeof what, "the %s of %s", files[i], flag);
        TG_TRY(tg_output_check(plan, what, path, force));
    }
    return TG_OK;
}

TgStatus tg_model_export_hf_check(TgOutputPlan *plan, const char *dir, bool force) {
    static const char *const files[] = TG_EXPORT_HF_FILES;
    return folder_check(plan, "--hf", dir, files, sizeof files / sizeof files[0], force);
}

TgStatus tg_model_export_peft_check(TgOutputPlan *plan, const char *dir, bool force) {
    static const char *const files[] = TG_EXPORT_PEFT_FILES;
    return folder_check(plan, "--peft", dir, files, sizeof files / sizeof files[0], force);
}

static TgStatus write_json(const char *dir, const char *name, cJSON *root) {
    char path[TG_PATH_CAP], *text = cJSON_Print(root);
    cJSON_Delete(root);
    TG_CHECK(text, "out of memory printing %s", name);
    TgStatus s = tg_path_join(path, sizeof path, dir, name);
    if (s != TG_OK) {
        free(text);
        return s;
    }
    size_t len = strlen(text);
    text[len] = '\n'; /* cJSON_Print leaves no final newline; the NUL is not written */
    s = tg_atomic_write(path, text, len + 1);
    free(text);
    return s;
}

static cJSON *llama_config(const TgModelConfig *c, int32_t bos, int32_t eos) {
    cJSON *root = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(root, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddStringToObject(root, "model_type", "llama");
    cJSON_AddNumberToObject(root, "hidden_size", (double)c->dim);
    cJSON_AddNumberToObject(root, "intermediate_size", (double)c->hidden);
    cJSON_AddNumberToObject(root, "num_hidden_layers", (double)c->n_layers);
    cJSON_AddNumberToObject(root, "num_attention_heads", (double)c->n_heads);
    cJSON_AddNumberToObject(root, "num_key_value_heads", (double)c->n_kv_heads);
    cJSON_AddNumberToObject(root, "head_dim", (double)(c->dim / c->n_heads));
    cJSON_AddStringToObject(root, "hidden_act", "silu");
    cJSON_AddNumberToObject(root, "vocab_size", (double)c->vocab);
    cJSON_AddNumberToObject(root, "max_position_embeddings", (double)c->seq_len);
    cJSON_AddNumberToObject(root, "rope_theta", c->rope_theta);
    cJSON_AddNullToObject(root, "rope_scaling");
    cJSON_AddNumberToObject(root, "rms_norm_eps", c->norm_eps);
    cJSON_AddBoolToObject(root, "tie_word_embeddings", true);
    cJSON_AddBoolToObject(root, "attention_bias", false);
    cJSON_AddBoolToObject(root, "mlp_bias", false);
    cJSON_AddNumberToObject(root, "attention_dropout", 0.0);
    cJSON_AddNumberToObject(root, "initializer_range", 0.02);
    cJSON_AddNumberToObject(root, "bos_token_id", bos);
    cJSON_AddNumberToObject(root, "eos_token_id", eos);
    cJSON_AddBoolToObject(root, "use_cache", true);
    cJSON_AddStringToObject(root, "torch_dtype", "float32");
    return root;
}

/* A chat model stops at <|im_end|>, and at <eot> too. */
static cJSON *generation_config(int32_t eot, const TgChatTokens *chat) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddBoolToObject(root, "_from_model_config", true);
    cJSON_AddNumberToObject(root, "bos_token_id", eot);
    if (chat) cJSON_AddItemToObject(root, "eos_token_id", cJSON_CreateIntArray((const int[]){chat->im_end, eot}, 2));
    else cJSON_AddNumberToObject(root, "eos_token_id", eot);
    return root;
}

static cJSON *tokenizer_config(const TgTokenizer *tok, const TgChatTokens *chat, int64_t seq_len) {
    cJSON *root = cJSON_CreateObject();
    char *eot = tg_tokenizer_hf_token_text(tok, tok->eot_id);
    cJSON_AddStringToObject(root, "tokenizer_class", "PreTrainedTokenizerFast");
    cJSON_AddStringToObject(root, "bos_token", eot);
    cJSON_AddStringToObject(root, "eos_token", chat ? TG_CHAT_IM_END : eot);
    cJSON_AddStringToObject(root, "pad_token", eot);
    cJSON_AddBoolToObject(root, "add_bos_token", false);
    cJSON_AddBoolToObject(root, "add_eos_token", false);
    cJSON_AddBoolToObject(root, "clean_up_tokenization_spaces", false);
    cJSON_AddNumberToObject(root, "model_max_length", (double)seq_len);
    cJSON *decoder = cJSON_AddObjectToObject(root, "added_tokens_decoder");
    for (int32_t id = 0; id < tok->vocab_size; id++) {
        bool special;
        if (!tg_tokenizer_hf_is_added(tok, id, &special)) continue;
        char key[16], *text = tg_tokenizer_hf_token_text(tok, id);
        snprintf(key, sizeof key, "%d", (int)id);
        cJSON *entry = cJSON_AddObjectToObject(decoder, key);
        cJSON_AddStringToObject(entry, "content", text);
        cJSON_AddBoolToObject(entry, "lstrip", false);
        cJSON_AddBoolToObject(entry, "normalized", false);
        cJSON_AddBoolToObject(entry, "rstrip", false);
        cJSON_AddBoolToObject(entry, "single_word", false);
        cJSON_AddBoolToObject(entry, "special", special);
        free(text);
    }
    if (chat) cJSON_AddStringToObject(root, "chat_template", tg_chat_template_jinja);
    free(eot);
    return root;
}

TgStatus tg_model_export_hf(const TgModel *model, const TgTokenizer *tok, const TgChatTokens *chat, const char *dir,
                         const char *source_note) {
    const TgModelConfig *c = &model->cfg;
    TG_TRY(tg_export_check_llama(c));
    TG_TRY(tg_tokenizer_hf_check_exportable(tok));
    if (tok->vocab_size != c->vocab)
        return tg_fail(TG_ERR_MISMATCH, "the tokenizer has %d ids, the model %lld", (int)tok->vocab_size, (long long)c->vocab);
    TG_TRY(tg_make_folders(dir));
    char path[TG_PATH_CAP];
    /* the tokenizer first: the weights record what it is when a run imports it (a char
     * tokenizer's, which lacks tokens for the bytes its corpus never held, is not importable) */
    TG_TRY(tg_path_join(path, sizeof path, dir, TG_TOKENIZER_HF_FILE));
    TG_TRY(tg_tokenizer_hf_save(tok, path));
    TgWeightsTokenizer recorded = {.fingerprint = tok->fingerprint};
    TgTokenizer imported;
    if (tg_tokenizer_hf_load(path, &imported) == TG_OK) {
        recorded.json_fingerprint = imported.fingerprint;
        tg_tokenizer_free(&imported);
    }
    tg_error_clear();
    TG_TRY(tg_path_join(path, sizeof path, dir, "model.safetensors"));
    TG_TRY(tg_model_write_weights(model, path, source_note, recorded));
    TG_TRY(write_json(dir, "config.json", llama_config(c, tok->eot_id, chat ? chat->im_end : tok->eot_id)));
    TG_TRY(write_json(dir, "generation_config.json", generation_config(tok->eot_id, chat)));
    return write_json(dir, "tokenizer_config.json", tokenizer_config(tok, chat, c->seq_len));
}

/* PEFT's names: its model wraps the transformers model as base_model.model */
TgStatus tg_model_export_peft(const TgModel *model, const char *dir) {
    const TgLora *lora = model->lora;
    if (!lora) return tg_fail(TG_ERR_ARG, "the run has no LoRA adapters to export as a PEFT adapter");
    TG_TRY(tg_make_folders(dir));
    TgStWriter *w = tg_st_writer_begin();
    char name[TG_NAME_CAP + 32];
    for (int i = 0; i < lora->params.count; i++) {
        const TgTensor *t = lora->params.tensors[i];
        snprintf(name, sizeof name, "base_model.model.%s", t->name);
        TgStatus s = tg_st_writer_add_f32(w, name, t->ndim, t->shape, t->data);
        if (s != TG_OK) {
            tg_st_writer_free(w);
            return s;
        }
    }
    tg_st_writer_set_metadata(w, "format", "pt");
    char path[TG_PATH_CAP];
    TgStatus s = tg_path_join(path, sizeof path, dir, "adapter_model.safetensors");
    if (s == TG_OK) s = tg_st_writer_finish(w, path);
    else tg_st_writer_free(w);
    TG_TRY(s);
    static const char *const modules[TG_LORA_TARGET_COUNT] = {
        [TG_LORA_Q] = "q_proj",       [TG_LORA_K] = "k_proj",   [TG_LORA_V] = "v_proj",      [TG_LORA_O] = "o_proj",
        [TG_LORA_GATE] = "gate_proj", [TG_LORA_UP] = "up_proj", [TG_LORA_DOWN] = "down_proj"};
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "peft_type", "LORA");
    cJSON_AddStringToObject(root, "task_type", "CAUSAL_LM");
    cJSON_AddNullToObject(root, "base_model_name_or_path");
    cJSON_AddNumberToObject(root, "r", (double)lora->cfg.rank);
    cJSON_AddNumberToObject(root, "lora_alpha", lora->cfg.alpha);
    cJSON_AddNumberToObject(root, "lora_dropout", 0.0);
    cJSON_AddStringToObject(root, "bias", "none");
    cJSON_AddBoolToObject(root, "fan_in_fan_out", false);
    cJSON_AddBoolToObject(root, "use_rslora", false);
    cJSON_AddBoolToObject(root, "inference_mode", true);
    cJSON *targets = cJSON_AddArrayToObject(root, "target_modules");
    for (int t = 0; t < TG_LORA_TARGET_COUNT; t++)
        if (lora->cfg.targets & (1u << t)) cJSON_AddItemToArray(targets, cJSON_CreateString(modules[t]));
    return write_json(dir, "adapter_config.json", root);
}
