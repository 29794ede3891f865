/* Reading a run that exists (run_internal.h): its tokenizer and newest checkpoint, a LoRA run's
 * adapters onto the base its run.txt names, and a base's weights for a new run. The three call
 * each other (a LoRA run's base may be a LoRA run), so they sit in one file. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/adapter.h"
#include "checkpoint/checkpoint_folder.h"
#include "support/path.h"
#include "model/weights_file.h"
#include "run/memory_plan.h"
#include "run/run_internal.h"

/* A failed load of DIR's latest checkpoint: say which older ones could be used instead. */
static TgStatus with_alternatives(TgStatus s, const char *dir, const char *ckpt_path) {
    char others[512], msg[2048];
    const char *slash = strrchr(ckpt_path, '/');
    tg_checkpoint_folder_others(dir, slash ? slash + 1 : ckpt_path, others, sizeof others);
    if (!others[0]) return s;
    snprintf(msg, sizeof msg, "%s", tg_error_message());
    return tg_fail(s, "%s; the folder's other checkpoints (pass one's path to use it): %s", msg, others);
}

/* Loads tokenizer and checkpoint from a run folder; the model is built from the checkpoint. */
TgStatus tg_run_open_checkpointed(const char *dir_or_file, TgRun *run, char *ckpt_path, size_t cap) {
    char dir[TG_PATH_CAP];
    TG_TRY(tg_run_folder_locate(dir_or_file, dir, sizeof dir));
    TG_TRY(tg_checkpoint_resolve(dir_or_file, ckpt_path, cap));
    tg_path_folder(ckpt_path, run->dir, sizeof run->dir);
    char tok_path[TG_PATH_CAP];
    TG_TRY(tg_path_join(tok_path, sizeof tok_path, run->dir, TG_PREPARE_TOKENIZER_FILE));
    TG_TRY(tg_tokenizer_load(tok_path, &run->tok));
    TgModelConfig cfg;
    uint64_t fingerprint = 0;
    TgStatus s = tg_checkpoint_read_config(ckpt_path, &cfg, &fingerprint);
    if (s != TG_OK) return with_alternatives(s, run->dir, ckpt_path);
    if (fingerprint != run->tok.fingerprint)
        return with_alternatives(tg_fail(TG_ERR_MISMATCH, "%s was trained with another tokenizer than %s", ckpt_path, tok_path),
                                 run->dir, ckpt_path);
    if (cfg.vocab != run->tok.vocab_size)
        return with_alternatives(tg_fail(TG_ERR_MISMATCH, "%s: its model has a vocabulary of %lld tokens, the run's tokenizer "
                                                          "%s has %lld",
                                         ckpt_path, (long long)cfg.vocab, tok_path, (long long)run->tok.vocab_size),
                                 run->dir, ckpt_path);
    TG_TRY(tg_checkpoint_model_memory_check(&cfg, ckpt_path));
    tg_model_build(&run->model, &cfg);
    run->model_built = true;
    TgCheckpointInfo info;
    s = tg_adapter_is_checkpoint(ckpt_path) ? tg_run_open_adapter(run, ckpt_path, &info) : tg_checkpoint_load(ckpt_path, &run->model, &info);
    if (s != TG_OK) return with_alternatives(s, run->dir, ckpt_path);
    run->state = info.state;
    snprintf(run->last_checkpoint, sizeof run->last_checkpoint, "%s", ckpt_path);
    return TG_OK;
}

TgStatus tg_run_open_existing(const char *dir_or_file, TgRun *run) {
    tg_run_clear(run);
    char ckpt[TG_PATH_CAP];
    TgStatus s = tg_run_open_checkpointed(dir_or_file, run, ckpt, sizeof ckpt);
    if (s != TG_OK) tg_run_close(run); /* a run that did not open holds nothing */
    return s;
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
                       "%s is missing: it is the base of the LoRA run %s, named in its %s (`init_from`); put that "
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
    TgRunSpec id;
    TgOptStrings strings = {0};
    TgCheckpointInfo h;
    TgLoraConfig cfg;
    uint64_t trained_on = 0;
    TgStatus s = tg_run_identity_read(run->dir, &id, &strings);
    if (s == TG_OK && !id.init_from)
        s = tg_fail(TG_ERR_FORMAT, "%s holds LoRA adapters, but its run's run.txt names no base (`init_from`)", ckpt_path);
    if (s == TG_OK) s = tg_checkpoint_read_header(ckpt_path, &h);
    if (s == TG_OK) s = tg_adapter_tag_parse(h.tag, ckpt_path, &cfg, &trained_on);
    if (s == TG_OK && id.init_fingerprint && strtoull(id.init_fingerprint, NULL, 16) != trained_on)
        s = tg_fail(TG_ERR_FORMAT,
                    "%s/%s records base weights %s, but its adapter %s was trained on weights %016" PRIx64
                    ": the file was edited; put back `init_fingerprint` %016" PRIx64,
                    run->dir, TG_RUN_IDENTITY_FILE, id.init_fingerprint, ckpt_path, trained_on, trained_on);
    char base[TG_PATH_CAP];
    if (s == TG_OK) s = load_base(run, id.init_from, trained_on, ckpt_path, base, sizeof base);
    if (s == TG_OK) s = tg_adapter_load(ckpt_path, &run->model, base, run->tok.fingerprint, info);
    tg_opt_strings_free(&strings);
    return s;
}

TgStatus tg_run_base_copy_weights(const char *ckpt, TgModel *model, uint64_t *fingerprint, TgTokenizer *tok) {
    TgRun *from = tg_malloc(sizeof *from);
    TgStatus s = tg_run_open_existing(ckpt, from);
    if (s == TG_OK) tg_lora_merge(&from->model); /* a LoRA run as a base: its adapters folded in */
    if (s == TG_OK && from->model.params.total != model->params.total)
        s = tg_fail(TG_ERR_MISMATCH, "the base %s does not have the run's shape", ckpt);
    if (s == TG_OK) {
        memcpy(model->params.data, from->model.params.data, model->params.total * sizeof(float));
        *fingerprint = tg_model_weights_fingerprint(&from->model);
        if (tok) {
            *tok = from->tok;
            memset(&from->tok, 0, sizeof from->tok);
        }
    }
    tg_run_close(from);
    free(from);
    return s;
}

