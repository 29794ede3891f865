/* LoRA runs: adapters attached to a new run's base, and a LoRA run's checkpoints (its adapters
 * alone, train/adapter.h) opened on the base its run.txt names. */
#include <inttypes.h>
#include <string.h>

#include "train/adapter.h"
#include "train/convert.h"
#include "train/run_internal.h"

TgStatus run_attach_lora(Run *run, const TrainOptions *o) {
    if (o->lora_rank <= 0) return TG_OK;
    TgLoraConfig cfg;
    TG_TRY(train_options_lora(o, &cfg));
    TG_TRY(tg_lora_config_validate(&cfg, &run->model.cfg));
    /* the adapters' own stream: their init does not depend on how the base was made */
    tg_lora_attach(&run->model, &cfg, (uint64_t)o->seed ^ 0x4c6f5241u);
    char targets[64];
    tg_lora_targets_format(cfg.targets, targets, sizeof targets);
    int64_t base = tg_model_param_count(&run->model), trained = (int64_t)0;
    for (int i = 0; i < run->model.lora->params.count; i++) trained += run->model.lora->params.tensors[i]->numel;
    message_emit(&run->messages, MESSAGE_INFO,
                 "LoRA rank %lld, alpha %g on %s: %lld trainable parameters (%.2f%% of the base's %lld, frozen; base "
                 "weights %016" PRIx64 ")",
                 (long long)cfg.rank, cfg.alpha, targets, (long long)trained, 100.0 * (double)trained / (double)base,
                 (long long)base, run->model.lora->base_fingerprint);
    return TG_OK;
}

TgStatus run_load_base_weights(TgModel *model, const char *init_from, const TgTokenizer *tok, const MessageSink *messages) {
    if (!run_init_from_is_run(init_from)) return model_import_safetensors(model, init_from, tok, messages);
    Run base;
    TgStatus s = run_open_existing(init_from, &base);
    if (s == TG_OK) tg_lora_merge(&base.model);   /* a LoRA run as a base: its adapters folded in */
    if (s == TG_OK && base.model.params.total != model->params.total)
        s = tg_fail(TG_ERR_MISMATCH, "the base %s does not have the run's shape", init_from);
    if (s == TG_OK) memcpy(model->params.data, base.model.params.data, model->params.total * sizeof(float));
    run_close(&base);
    return s;
}

TgStatus run_open_adapter(Run *run, const char *ckpt_path, CheckpointInfo *info) {
    TrainOptions id;
    OptStrings strings = {0};
    TgStatus s = run_identity_read(run->dir, &id, &strings);
    if (s == TG_OK && !id.init_from)
        s = tg_fail(TG_ERR_FORMAT, "%s holds LoRA adapters, but its run's run.txt names no base (--init-from)", ckpt_path);
    if (s == TG_OK) s = run_load_base_weights(&run->model, id.init_from, &run->tok, &run->messages);
    if (s == TG_OK) s = adapter_load(ckpt_path, &run->model, id.init_from, run->tok.fingerprint, info);
    opt_strings_free(&strings);
    return s;
}
