/* The checkpoint format's shared names (checkpoint_format.h). */
#include "checkpoint/checkpoint_format.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


const char *tg_checkpoint_kind_name(int kind) {
    return kind == TG_CHECKPOINT_KIND_WEIGHT ? "weight" : kind == TG_CHECKPOINT_KIND_ADAM_M ? "AdamW m"
                                                     : kind == TG_CHECKPOINT_KIND_ADAM_V ? "AdamW v" : "unknown";
}

void tg_adapter_tag(const TgLora *lora, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "lora r%" PRId64 " a%.17g t%" PRIx32 " b%016" PRIx64, lora->cfg.rank, lora->cfg.alpha,
                     lora->cfg.targets, lora->base_fingerprint);
    for (int j = 0; j < lora->cfg.n_tokens && n > 0 && (size_t)n < cap; j++)
        n += snprintf(buf + n, cap - (size_t)n, "%s%" PRId32, j ? "," : " k", lora->cfg.tokens[j]);
}

TgStatus tg_adapter_tag_parse(const char *tag, const char *path, TgLoraConfig *cfg, uint64_t *base_fingerprint) {
    TgLora lora;
    memset(&lora, 0, sizeof lora);
    char again[TG_CHECKPOINT_TAG_CAP];
    int used = 0;
    bool ok = sscanf(tag, "lora r%" SCNd64 " a%lf t%" SCNx32 " b%" SCNx64 "%n", &lora.cfg.rank, &lora.cfg.alpha,
                     &lora.cfg.targets, &lora.base_fingerprint, &used) == 4;
    /* the trainable token rows' ids: " k12,345" */
    const char *p = tag + used;
    if (ok && *p) {
        ok = strncmp(p, " k", 2) == 0;
        p += 2;
        while (ok) {
            char *end;
            long id = strtol(p, &end, 10);
            ok = *p >= '0' && *p <= '9' && id < (1L << 24) && lora.cfg.n_tokens < TG_LORA_MAX_TOKENS;
            if (!ok) break;
            lora.cfg.tokens[lora.cfg.n_tokens++] = (int32_t)id;
            p = end;
            if (*p == '\0') break;
            ok = *p++ == ',';
        }
    }
    if (ok) tg_adapter_tag(&lora, again, sizeof again);
    if (!ok || strcmp(again, tag) != 0 || tg_lora_config_validate(&lora.cfg, NULL) != TG_OK)
        return tg_fail(TG_ERR_FORMAT, "%s: the adapter tag '%s' is not one tapegrad writes; the file is corrupt", path, tag);
    *cfg = lora.cfg;
    *base_fingerprint = lora.base_fingerprint;
    return TG_OK;
}
