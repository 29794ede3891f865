/* The checkpoint format's shared names (checkpoint_format.h). */
#include "checkpoint/checkpoint_format.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "checkpoint/checkpoint.h"

const char *tg_checkpoint_kind_name(int kind) {
    return kind == TG_CHECKPOINT_KIND_WEIGHT ? "weight" : kind == TG_CHECKPOINT_KIND_ADAM_M ? "AdamW m"
                                                     : kind == TG_CHECKPOINT_KIND_ADAM_V ? "AdamW v" : "unknown";
}

void tg_adapter_tag(const TgLora *lora, char *buf, size_t cap) {
    snprintf(buf, cap, "lora r%" PRId64 " a%.17g t%" PRIx32 " b%016" PRIx64, lora->cfg.rank, lora->cfg.alpha,
             lora->cfg.targets, lora->base_fingerprint);
}

TgStatus tg_adapter_tag_parse(const char *tag, const char *path, TgLoraConfig *cfg, uint64_t *base_fingerprint) {
    TgLora lora;
    memset(&lora, 0, sizeof lora);
    char again[TG_CHECKPOINT_TAG_CAP];
    bool ok = sscanf(tag, "lora r%" SCNd64 " a%lf t%" SCNx32 " b%" SCNx64, &lora.cfg.rank, &lora.cfg.alpha,
                     &lora.cfg.targets, &lora.base_fingerprint) == 4;
    if (ok) tg_adapter_tag(&lora, again, sizeof again);
    if (!ok || strcmp(again, tag) != 0 || tg_lora_config_validate(&lora.cfg, NULL) != TG_OK)
        return tg_fail(TG_ERR_FORMAT, "%s: the adapter tag '%s' is not one tapegrad writes; the file is corrupt", path, tag);
    *cfg = lora.cfg;
    *base_fingerprint = lora.base_fingerprint;
    return TG_OK;
}
