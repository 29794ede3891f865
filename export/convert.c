/* Safetensors export: the weights (model/weights_file.h) and config.json beside them. */
#include "export/convert.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/atomic_file.h"
#include "support/file_read.h"
#include "model/safetensors.h"
#include "support/path.h"

static void config_json_text(const TgModelConfig *c, uint64_t tokenizer_fingerprint, char *buf, size_t cap) {
    char fingerprint[64] = "";
    if (tokenizer_fingerprint)
        snprintf(fingerprint, sizeof fingerprint, "  \"tokenizer_fingerprint\": \"%016llx\",\n",
                 (unsigned long long)tokenizer_fingerprint);
    snprintf(buf, cap,
             "{\n"
             "  \"dim\": %lld,\n  \"n_layers\": %lld,\n  \"n_heads\": %lld,\n  \"n_kv_heads\": %lld,\n"
             "  \"hidden_dim\": %lld,\n  \"vocab_size\": %lld,\n  \"max_seq_len\": %lld,\n"
             "  \"rope_theta\": %.17g,\n  \"norm_eps\": %.17g,\n  \"ffn\": \"%s\",\n"
             "%s  \"tie_word_embeddings\": true,\n%s  \"torch_dtype\": \"float32\"\n"
             "}\n",
             (long long)c->dim, (long long)c->n_layers, (long long)c->n_heads, (long long)c->n_kv_heads,
             (long long)c->hidden, (long long)c->vocab, (long long)c->seq_len, c->rope_theta, c->norm_eps,
             tg_ffn_kind_name(c->ffn), c->qk_norm ? "  \"qk_norm\": true,\n" : "", fingerprint);
}

/* config.json already beside the export may stay, without --force, only if it says what this
 * export writes: it describes other weights in that folder otherwise. */
static bool config_says(const char *path, const char *text) {
    FILE *f = tg_file_open_read(path);
    if (!f) return false;
    char old[4096];
    size_t n = fread(old, 1, sizeof old, f);
    fclose(f);
    return n == strlen(text) && memcmp(old, text, n) == 0;
}

static TgStatus config_path_of(const char *path, char *config, size_t cap) {
    char folder[TG_PATH_CAP];
    tg_path_folder(path, folder, sizeof folder);
    return tg_path_join(config, cap, folder, "config.json");
}

TgStatus tg_model_export_safetensors_check(TgOutputPlan *plan, const char *path, const TgModelConfig *cfg,
                                        uint64_t tokenizer_fingerprint, bool force) {
    char config[TG_PATH_CAP], text[1024];
    TG_TRY(tg_output_check(plan, "`safetensors`", path, force));
    TG_TRY(config_path_of(path, config, sizeof config));
    config_json_text(cfg, tokenizer_fingerprint, text, sizeof text);
    TgStatus s = tg_output_check(plan, "the config.json beside `safetensors`", config, force || config_says(config, text));
    if (s != TG_OK && strstr(tg_error_message(), " exists; add "))
        return tg_fail(TG_ERR_ARG, "%s already exists and describes another model; add `force` to replace it, or export into "
                                   "another folder",
                       config);
    return s;
}

TgStatus tg_model_export_safetensors(const TgModel *model, const char *path, const char *source_note,
                                  uint64_t tokenizer_fingerprint, char *config_path_out, size_t cap) {
    char config[TG_PATH_CAP], folder[TG_PATH_CAP], text[1024];
    tg_path_folder(path, folder, sizeof folder);
    TG_TRY(config_path_of(path, config, sizeof config));
    config_json_text(&model->cfg, tokenizer_fingerprint, text, sizeof text);
    TG_TRY(tg_make_folders(folder));
    TG_TRY(tg_model_write_weights(model, path, source_note, (TgWeightsTokenizer){.fingerprint = tokenizer_fingerprint}));
    TG_TRY(tg_atomic_write(config, text, strlen(text)));
    if (config_path_out) TG_TRY(tg_path_format(config_path_out, cap, "%s", config));
    return TG_OK;
}

