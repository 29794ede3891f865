/* `tapegrad ckpt merge`: a LoRA run's adapters folded into its base, W += (alpha / r) B A, written
 * as a new run folder holding a whole model's checkpoint (export/merge.h). */
#include "export/merge.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/prepare.h"
#include "data/sft_data.h"
#include "support/atomic_file.h"
#include "support/file_read.h"
#include "support/path.h"
#include "run/run_internal.h"

/* What eval reads in a run folder: its val split (and mask), copied when the run has them. */
static TgStatus copy_val_files(const char *from, const char *to) {
    const char *files[] = {TG_PREPARE_VAL_FILE, TG_SFT_VAL_MASK_FILE};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char src[TG_PATH_CAP], dst[TG_PATH_CAP];
        TG_TRY(tg_path_join(src, sizeof src, from, files[i]));
        TG_TRY(tg_path_join(dst, sizeof dst, to, files[i]));
        if (access(src, F_OK) != 0) continue;
        char *bytes;
        size_t len;
        TG_TRY(tg_file_read_all(src, SIZE_MAX, &bytes, &len));
        TgStatus s = tg_atomic_write(dst, bytes, len);
        free(bytes);
        TG_TRY(s);
    }
    return TG_OK;
}

/* The merged run's files in dir: run.txt (the LoRA run's identity without its adapters),
 * tokenizer, val split, and the merged weights' checkpoint (AdamW moments zero: the base had none). */
static TgStatus write_merged(TgRun *run, const char *dir, char *ckpt_out, size_t cap) {
    TgRunSpec id;
    TgOptStrings strings = {0};
    TgStatus s = tg_run_identity_read(run->dir, &id, &strings);
    if (s == TG_OK) {
        id.lora_rank = 0, id.lora_alpha = 0, id.lora_targets = NULL;
        s = tg_run_identity_write(dir, &id);
    }
    tg_opt_strings_free(&strings);
    TG_TRY(s);
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, dir, TG_PREPARE_TOKENIZER_FILE));
    TG_TRY(tg_tokenizer_save(&run->tok, path));
    TG_TRY(copy_val_files(run->dir, dir));
    TG_TRY(tg_run_merge_weights(&run->model, run->last_checkpoint));
    TgCheckpointSource src = tg_checkpoint_source_of(&run->model, run->tok.fingerprint, &run->state);
    float *zeros = tg_calloc(src.layout->total + 1, sizeof(float));
    src.m = src.v = zeros;
    s = tg_checkpoint_save_in_folder(dir, &src, &(TgCheckpointKeep){0}, ckpt_out, cap);
    free(zeros);
    return s;
}

TgStatus tg_run_merge_weights(TgModel *model, const char *source) {
    if (!model->lora) return TG_OK;
    double scale = model->lora->cfg.alpha / (double)model->lora->cfg.rank;
    tg_lora_merge(model);
    for (int i = 0; i < model->params.count; i++) {
        const TgTensor *t = model->params.tensors[i];
        for (int64_t j = 0; j < t->numel; j++)
            if (!isfinite(t->data[j]))
                return tg_fail(TG_ERR_FORMAT,
                               "merging the adapters of %s gives %s[%lld] = %g: (alpha / rank = %g) B A overflows a "
                               "float there, so the merged model would hold non-finite weights; nothing was written "
                               "(the adapters were trained past what a float holds, or the file was altered)",
                               source, t->name, (long long)j, (double)t->data[j], scale);
    }
    return TG_OK;
}

/* The folder a merge writes: never a run's, the one it merges included (a merge writes nothing
 * into a run, so there is nothing to resume there). */
static TgStatus check_out(const char *out_dir, const char *source_dir) {
    if (!tg_run_folder_is_run(out_dir)) return TG_OK;
    char *a = realpath(out_dir, NULL), *b = realpath(source_dir, NULL);
    bool same = a && b && strcmp(a, b) == 0;
    free(a), free(b);
    size_t n = strlen(out_dir);
    while (n > 1 && out_dir[n - 1] == '/') n--;
    return tg_fail(TG_ERR_ARG,
                   "`out_dir` %s %s: ckpt merge writes the merged model into a new run folder and never into a run's "
                   "folder; name a new folder (`out_dir` %.*s-merged, say)",
                   out_dir, same ? "is the LoRA run being merged" : "holds another run", (int)n, out_dir);
}

TgStatus tg_run_merge_adapter(const char *source, const char *out_dir, char *merged, size_t cap) {
    char source_dir[TG_PATH_CAP];
    TG_TRY(tg_run_folder_locate(source, source_dir, sizeof source_dir));
    TG_TRY(check_out(out_dir, source_dir));
    TgRun run;
    TG_TRY(tg_run_open_existing(source, &run));
    TgStatus s = TG_OK;
    if (!run.model.lora)
        s = tg_fail(TG_ERR_ARG, "%s holds no LoRA adapters: its checkpoint is a whole model already (sample, eval or export "
                                "it as it is)",
                    source);
    TgRunFolder folder;
    memset(&folder, 0, sizeof folder);
    if (s == TG_OK) s = tg_run_folder_choose(&folder, out_dir, out_dir);
    if (s == TG_OK) s = tg_run_folder_begin(&folder);
    char ckpt[TG_PATH_CAP];
    if (s == TG_OK) s = write_merged(&run, folder.temp, ckpt, sizeof ckpt);
    if (s == TG_OK) s = tg_run_folder_commit(&folder);
    if (s == TG_OK) snprintf(merged, cap, "%s", folder.path);
    else tg_run_folder_discard(&folder);
    tg_run_close(&run);
    return s;
}
