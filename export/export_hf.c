/* The Hugging Face model folder (see export_hf.h). */
#include "export/export_hf.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/chat_tools.h"
#include "tokenizer/tokenizer_hf.h"
#include "support/atomic_file.h"
#include "support/json_write.h"
#include "export/convert.h"
#include "support/path.h"

TgStatus tg_export_check_llama(const TgModelConfig *cfg) {
    if (cfg->ffn != TG_FFN_SWIGLU)
        return tg_fail(TG_ERR_MISMATCH,
                       "this model's feed-forward block is %s, w2(relu(w1 x)); the Llama architecture that "
                       "transformers and llama.cpp run has SwiGLU, w2(silu(w1 x) * w3 x), so no Llama config can "
                       "describe it; export its weights with `safetensors` instead",
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
                           "%s is not empty; give an empty or new folder, or `force` to replace the model files in it", dir);
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
    return folder_check(plan, "`hf`", dir, files, sizeof files / sizeof files[0], force);
}

TgStatus tg_model_export_peft_check(TgOutputPlan *plan, const char *dir, bool force) {
    static const char *const files[] = TG_EXPORT_PEFT_FILES;
    return folder_check(plan, "`peft`", dir, files, sizeof files / sizeof files[0], force);
}

/* DIR/NAME as an indented JSON document: json_file_open gives the writer, json_file_commit ends
 * the text with a newline and puts the file in place. */
static TgStatus json_file_open(const char *dir, const char *name, TgAtomicFile *af, TgJsonWriter *w) {
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, dir, name));
    TG_TRY(tg_atomic_file_open(af, path));
    *w = tg_json_writer(tg_atomic_file_stream(af), TG_JSON_INDENTED, false);
    return TG_OK;
}

static TgStatus json_file_commit(TgAtomicFile *af, TgJsonWriter *w) {
    fputc('\n', w->f);
    return tg_atomic_file_commit(af);
}

/* Llama's config, or Qwen3's for a model with QK-norm (MiniMind-3's: the same keys, q_norm and
 * k_norm in every layer, no sliding window). */
static void llama_config(TgJsonWriter *w, const TgModelConfig *c, int32_t bos, int32_t eos) {
    tg_json_open_object(w, NULL);
    tg_json_open_array(w, "architectures");
    tg_json_put_string(w, NULL, c->qk_norm ? "Qwen3ForCausalLM" : "LlamaForCausalLM");
    tg_json_close(w);
    tg_json_put_string(w, "model_type", c->qk_norm ? "qwen3" : "llama");
    tg_json_put_number(w, "hidden_size", (double)c->dim);
    tg_json_put_number(w, "intermediate_size", (double)c->hidden);
    tg_json_put_number(w, "num_hidden_layers", (double)c->n_layers);
    tg_json_put_number(w, "num_attention_heads", (double)c->n_heads);
    tg_json_put_number(w, "num_key_value_heads", (double)c->n_kv_heads);
    tg_json_put_number(w, "head_dim", (double)(c->dim / c->n_heads));
    tg_json_put_string(w, "hidden_act", "silu");
    tg_json_put_number(w, "vocab_size", (double)c->vocab);
    tg_json_put_number(w, "max_position_embeddings", (double)c->seq_len);
    tg_json_put_number(w, "rope_theta", c->rope_theta);
    tg_json_put_null(w, "rope_scaling");
    tg_json_put_number(w, "rms_norm_eps", c->norm_eps);
    tg_json_put_bool(w, "tie_word_embeddings", true);
    tg_json_put_bool(w, "attention_bias", false);
    if (!c->qk_norm) tg_json_put_bool(w, "mlp_bias", false);
    if (c->qk_norm) tg_json_put_bool(w, "use_sliding_window", false);
    tg_json_put_number(w, "attention_dropout", 0.0);
    tg_json_put_number(w, "initializer_range", 0.02);
    tg_json_put_number(w, "bos_token_id", bos);
    tg_json_put_number(w, "eos_token_id", eos);
    tg_json_put_bool(w, "use_cache", true);
    tg_json_put_string(w, "torch_dtype", "float32");
    tg_json_close(w);
}

/* A chat model stops at <|im_end|>, and at <eot> too. */
static void generation_config(TgJsonWriter *w, int32_t bos, int32_t eot, const TgChatTokens *chat) {
    tg_json_open_object(w, NULL);
    tg_json_put_bool(w, "_from_model_config", true);
    tg_json_put_number(w, "bos_token_id", bos);
    if (chat && chat->im_end != eot) {
        tg_json_open_array(w, "eos_token_id");
        tg_json_put_number(w, NULL, chat->im_end);
        tg_json_put_number(w, NULL, eot);
        tg_json_close(w);
    } else {
        tg_json_put_number(w, "eos_token_id", eot); /* the EOS of a tokenizer that frames documents is <|im_end|> */
    }
    tg_json_close(w);
}

static void tokenizer_config(TgJsonWriter *w, const TgTokenizer *tok, const TgChatTokens *chat,
                             TgChatTemplate chat_template, int64_t seq_len) {
    char *eot = tg_tokenizer_hf_token_text(tok, tok->eot_id),
         *bos = tg_tokenizer_hf_token_text(tok, tg_tokenizer_doc_start(tok));
    tg_json_open_object(w, NULL);
    tg_json_put_string(w, "tokenizer_class", "PreTrainedTokenizerFast");
    tg_json_put_string(w, "bos_token", bos);
    tg_json_put_string(w, "eos_token", chat ? TG_CHAT_IM_END : eot);
    tg_json_put_string(w, "pad_token", eot);
    tg_json_put_bool(w, "add_bos_token", false);
    tg_json_put_bool(w, "add_eos_token", false);
    tg_json_put_bool(w, "clean_up_tokenization_spaces", false);
    tg_json_put_number(w, "model_max_length", (double)seq_len);
    tg_json_open_object(w, "added_tokens_decoder");
    for (int32_t id = 0; id < tok->vocab_size; id++) {
        bool special;
        if (!tg_tokenizer_hf_is_added(tok, id, &special)) continue;
        char key[16], *text = tg_tokenizer_hf_token_text(tok, id);
        snprintf(key, sizeof key, "%d", (int)id);
        tg_json_open_object(w, key);
        tg_json_put_string(w, "content", text);
        tg_json_put_bool(w, "lstrip", false);
        tg_json_put_bool(w, "normalized", false);
        tg_json_put_bool(w, "rstrip", false);
        tg_json_put_bool(w, "single_word", false);
        tg_json_put_bool(w, "special", special);
        tg_json_close(w);
        free(text);
    }
    tg_json_close(w);
    if (chat) tg_json_put_string(w, "chat_template", tg_chat_template_text(chat_template));
    tg_json_close(w);
    free(eot), free(bos);
}

TgStatus tg_model_export_hf(const TgModel *model, const TgTokenizer *tok, const TgChatTokens *chat,
                            TgChatTemplate chat_template, const char *dir, const char *source_note) {
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
    TgAtomicFile af;
    TgJsonWriter w;
    TG_TRY(json_file_open(dir, "config.json", &af, &w));
    llama_config(&w, c, tg_tokenizer_doc_start(tok), chat ? chat->im_end : tok->eot_id);
    TG_TRY(json_file_commit(&af, &w));
    TG_TRY(json_file_open(dir, "generation_config.json", &af, &w));
    generation_config(&w, tg_tokenizer_doc_start(tok), tok->eot_id, chat);
    TG_TRY(json_file_commit(&af, &w));
    TG_TRY(json_file_open(dir, "tokenizer_config.json", &af, &w));
    tokenizer_config(&w, tok, chat, chat_template, c->seq_len);
    return json_file_commit(&af, &w);
}

TgStatus tg_export_adapter_check(const TgLora *lora, const char *why, const char *merged_flag) {
    if (lora->cfg.n_tokens == 0) return TG_OK;
    return tg_fail(TG_ERR_ARG,
                   "the run trains the embedding rows of %d tokens beside its adapters (`lora_tokens`), which %s: "
                   "export the merged model instead (ckpt merge, then %s), or train with `lora_tokens` none",
                   lora->cfg.n_tokens, why, merged_flag);
}

/* PEFT's names: its model wraps the transformers model as base_model.model. The token rows are
 * PEFT's trainable tokens (LoraConfig.trainable_token_indices): the rows themselves, which its
 * TrainableTokensLayer writes over the embedding's (index_copy; the name says delta, the values
 * are whole rows), and, the head being tied, over the head's too. */
#define PEFT_TOKEN_ROWS "base_model.model.model.embed_tokens.token_adapter.trainable_tokens_delta"

TgStatus tg_model_export_peft(const TgModel *model, const char *dir) {
    const TgLora *lora = model->lora;
    if (!lora) return tg_fail(TG_ERR_ARG, "the run has no LoRA adapters to export as a PEFT adapter");
    TG_TRY(tg_make_folders(dir));
    TgStWriter *w = tg_st_writer_begin();
    char name[TG_NAME_CAP + 32];
    for (int i = 0; i < lora->params.count; i++) {
        const TgTensor *t = lora->params.tensors[i];
        if (t == lora->token_rows) snprintf(name, sizeof name, "%s", PEFT_TOKEN_ROWS);
        else snprintf(name, sizeof name, "base_model.model.%s", t->name);
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
    TgAtomicFile af;
    TgJsonWriter json;
    TG_TRY(json_file_open(dir, "adapter_config.json", &af, &json));
    tg_json_open_object(&json, NULL);
    tg_json_put_string(&json, "peft_type", "LORA");
    tg_json_put_string(&json, "task_type", "CAUSAL_LM");
    tg_json_put_null(&json, "base_model_name_or_path");
    tg_json_put_number(&json, "r", (double)lora->cfg.rank);
    tg_json_put_number(&json, "lora_alpha", lora->cfg.alpha);
    tg_json_put_number(&json, "lora_dropout", 0.0);
    tg_json_put_string(&json, "bias", "none");
    tg_json_put_bool(&json, "fan_in_fan_out", false);
    tg_json_put_bool(&json, "use_rslora", false);
    tg_json_put_bool(&json, "inference_mode", true);
    tg_json_open_array(&json, "target_modules");
    for (int t = 0; t < TG_LORA_TARGET_COUNT; t++)
        if (lora->cfg.targets & (1u << t)) tg_json_put_string(&json, NULL, modules[t]);
    tg_json_close(&json);
    if (lora->cfg.n_tokens > 0) {
        tg_json_open_object(&json, "trainable_token_indices");
        tg_json_open_array(&json, "embed_tokens");
        for (int j = 0; j < lora->cfg.n_tokens; j++) tg_json_put_number(&json, NULL, lora->cfg.tokens[j]);
        tg_json_close(&json);
        tg_json_close(&json);
    }
    tg_json_close(&json);
    return json_file_commit(&af, &json);
}
