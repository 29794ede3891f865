#include "checkpoint/adapter.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "checkpoint/checkpoint_internal.h"

bool tg_adapter_is_checkpoint(const char *path) {
    TgCheckpointInfo h;
    bool yes = tg_checkpoint_read_header(path, &h) == TG_OK && (h.flags & TG_CHECKPOINT_FLAG_ADAPTER);
    tg_error_clear();
    return yes;
}

TgStatus tg_adapter_load(const char *path, TgModel *model, const char *base_name, uint64_t tokenizer_fingerprint,
                      TgCheckpointInfo *info) {
    TgCheckpointInfo h;
    TG_TRY(tg_checkpoint_read_header(path, &h));
    if (!(h.flags & TG_CHECKPOINT_FLAG_ADAPTER))
        return tg_fail(TG_ERR_MISMATCH, "%s is not a LoRA adapter's checkpoint", path);
    TgLoraConfig cfg;
    uint64_t trained_on;
    TG_TRY(tg_adapter_tag_parse(h.tag, path, &cfg, &trained_on));
    uint64_t base = tg_model_weights_fingerprint(model);
    if (base != trained_on)
        return tg_fail(TG_ERR_MISMATCH,
                       "the adapter %s was trained on a base whose weights have fingerprint %016" PRIx64 "; the base %s "
                       "has %016" PRIx64 ": load the adapter onto the base it was trained on",
                       path, trained_on, base_name, base);
    if (h.tokenizer_fingerprint != tokenizer_fingerprint)
        return tg_fail(TG_ERR_MISMATCH,
                       "the adapter %s was trained with tokenizer %016" PRIx64 "; the base %s has tokenizer %016" PRIx64,
                       path, h.tokenizer_fingerprint, base_name, tokenizer_fingerprint);
    if (tg_lora_config_validate(&cfg, &model->cfg) != TG_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", tg_error_message());
        return tg_fail(TG_ERR_FORMAT, "%s: its tag '%s' does not fit its base (%s); the file is corrupt", path, h.tag, why);
    }
    tg_lora_attach(model, &cfg, 0);
    TgStatus s = tg_checkpoint_load_store(path, &model->lora->params, &model->cfg, h.tag, info);
    if (s != TG_OK) tg_lora_free(model);
    return s;
}
