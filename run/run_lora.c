/* LoRA runs: adapters attached to a new run's base, and a LoRA run's checkpoints (its adapters
 * alone, checkpoint/adapter.h) opened on the base its run.txt names. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/path.h"
#include "checkpoint/adapter.h"
#include "model/weights_file.h"
#include "run/run_internal.h"

TgStatus tg_run_lora_check(const TgTrainOptions *o, const TgModelConfig *cfg) {
    if (o->lora_rank <= 0) return TG_OK;
    TgLoraConfig lora;
    TG_TRY(tg_train_options_lora(o, &lora));
    return tg_lora_config_validate(&lora, cfg);
}

TgStatus tg_run_attach_lora(TgRun *run, const TgTrainOptions *o) {
    if (o->lora_rank <= 0) return TG_OK;
    TgLoraConfig cfg;
    TG_TRY(tg_train_options_lora(o, &cfg));
    TG_TRY(tg_lora_config_validate(&cfg, &run->model.cfg));
    /* the adapters' own stream: their init does not depend on how the base was made */
    tg_lora_attach(&run->model, &cfg, (uint64_t)o->seed ^ 0x4c6f5241u);
    char targets[64];
    tg_lora_targets_format(cfg.targets, targets, sizeof targets);
    int64_t base = tg_model_param_count(&run->model), trained = (int64_t)0;
    for (int i = 0; i < run->model.lora->params.count; i++) trained += run->model.lora->params.tensors[i]->numel;
    tg_message_emit(&run->messages, TG_MESSAGE_INFO,
                 "LoRA rank %lld, alpha %g on %s: %lld trainable parameters (%.2f%% of the base's %lld, frozen; base "
                 "weights %016" PRIx64 ")",
                 (long long)cfg.rank, cfg.alpha, targets, (long long)trained, 100.0 * (double)trained / (double)base,
                 (long long)base, run->model.lora->base_fingerprint);
    return TG_OK;
}

