/* LoRA runs: adapters attached to a new run's base, and a LoRA run's checkpoints (its adapters
 * alone, train/adapter.h) opened on the base its run.txt names. */
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

/* The checkpoint of the base's weights among the other checkpoints of its folder (a base that
 * trained on since, or whose named file holds other weights now), into run->model; *found is
 * left "" when none has them. */
static TgStatus find_in_folder(TgRun *run, const char *folder, const char *tried, uint64_t want, char *found, size_t cap) {
    char others[8192];
    const char *slash = strrchr(tried, '/');
    tg_checkpoint_folder_others(folder, slash ? slash + 1 : tried, others, sizeof others);
    found[0] = '\0';
    char *rest = NULL;
    for (char *name = strtok_r(others, ", ", &rest); name; name = strtok_r(NULL, ", ", &rest)) {
        char path[TG_PATH_CAP];
        uint64_t have = 0;
        TG_TRY(tg_path_join(path, sizeof path, folder, name));
        if (tg_run_base_copy_weights(path, &run->model, &have, NULL) == TG_OK && have == want)
            return tg_path_format(found, cap, "%s", path);
        tg_error_clear(); /* a checkpoint that does not open is not the base */
    }
    return TG_OK;
}

/* The base run.txt names, into run->model: a safetensors file; a checkpoint (what run.txt records
 * since it names the file); or, in a run.txt written before that, the base's folder, whose latest
 * checkpoint is the base unless the folder trained on. The base is the checkpoint whose weights
 * have the fingerprint `want` the adapter records: found among the folder's other checkpoints when
 * the named one holds others. `used` receives the file loaded. */
static TgStatus load_base(TgRun *run, const char *named, uint64_t want, const char *adapter, char *used, size_t cap) {
    TG_TRY(tg_path_format(used, cap, "%s", named));
    struct stat st;
    bool folder = stat(named, &st) == 0 && S_ISDIR(st.st_mode);
    if (!folder && access(named, F_OK) != 0)
        return tg_fail(TG_ERR_IO,
                       "%s is missing: it is the base of the LoRA run %s, named in its %s (--init-from); put that "
                       "file back (its weights have fingerprint %016" PRIx64 "), or train the adapters again on a "
                       "base that exists",
                       named, run->dir, TG_RUN_IDENTITY_FILE, want);
    if (!tg_run_init_from_is_run(named)) return tg_model_import_safetensors(&run->model, named, &run->tok, &run->messages);
    if (folder) TG_TRY(tg_checkpoint_resolve(named, used, cap));
    uint64_t have = 0;
    TG_TRY(tg_run_base_copy_weights(used, &run->model, &have, NULL));
    if (have == want) return TG_OK;
    char dir[TG_PATH_CAP], found[TG_PATH_CAP];
    if (folder) TG_TRY(tg_path_format(dir, sizeof dir, "%s", named));
    else tg_path_folder(named, dir, sizeof dir);
    TG_TRY(find_in_folder(run, dir, used, want, found, sizeof found));
    if (found[0]) {
        tg_message_emit(&run->messages, TG_MESSAGE_NOTE,
                     "%s holds other weights than the base the adapters were trained on; %s has them", used, found);
        return tg_path_format(used, cap, "%s", found);
    }
    return tg_fail(TG_ERR_MISMATCH,
                   "the adapter %s was trained on a base whose weights have fingerprint %016" PRIx64 "; the base %s "
                   "has %016" PRIx64 ", and no other checkpoint in %s has them: load the adapter onto the base it "
                   "was trained on",
                   adapter, want, used, have, dir);
}

TgStatus tg_run_open_adapter(TgRun *run, const char *ckpt_path, TgCheckpointInfo *info) {
    TgTrainOptions id;
    TgOptStrings strings = {0};
    TgCheckpointInfo h;
    TgLoraConfig cfg;
    uint64_t trained_on = 0;
    TgStatus s = tg_run_identity_read(run->dir, &id, &strings);
    if (s == TG_OK && !id.init_from)
        s = tg_fail(TG_ERR_FORMAT, "%s holds LoRA adapters, but its run's run.txt names no base (--init-from)", ckpt_path);
    if (s == TG_OK) s = tg_checkpoint_read_header(ckpt_path, &h);
    if (s == TG_OK) s = tg_adapter_tag_parse(h.tag, ckpt_path, &cfg, &trained_on);
    if (s == TG_OK && id.init_fingerprint && strtoull(id.init_fingerprint, NULL, 16) != trained_on)
        s = tg_fail(TG_ERR_FORMAT,
                    "%s/%s records base weights %s, but its adapter %s was trained on weights %016" PRIx64
                    ": the file was edited; put back --init-fingerprint %016" PRIx64,
                    run->dir, TG_RUN_IDENTITY_FILE, id.init_fingerprint, ckpt_path, trained_on, trained_on);
    char base[TG_PATH_CAP];
    if (s == TG_OK) s = load_base(run, id.init_from, trained_on, ckpt_path, base, sizeof base);
    if (s == TG_OK) s = tg_adapter_load(ckpt_path, &run->model, base, run->tok.fingerprint, info);
    tg_opt_strings_free(&strings);
    return s;
}
