/* The weights a new run starts from (--init-from, run_internal.h): a run folder or a checkpoint in
 * one, whose shape the flags must keep and whose tokenizer the run takes; and what run.txt records
 * of them, the file and its weights' fingerprint, so that every later command finds them again. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/path.h"
#include "run/run_internal.h"

/* The shape flags given now must be the base's: a run started from it keeps its shape (--seq
 * aside: the weights do not depend on it) and its tokenizer. */
static TgStatus check_base_shape(const TgTrainOptions *o, const TgModelConfig *base_cfg, const TgTrainOptions *base_id,
                                 const char *base) {
    const TgOptTable *t = tg_train_option_table();
    TgTrainOptions stored = *o;
    stored.spec.model = *base_cfg;
    stored.spec.ffn = base_cfg->ffn;
    stored.spec.preset = base_id->spec.preset, stored.spec.tokenizer = base_id->spec.tokenizer;
    for (int i = 0; i < t->count; i++) {
        const TgOptSpec *spec = &t->specs[i];
        const char *setting = tg_opt_setting(spec);
        bool shape = (spec->group & TG_TRAIN_OPT_SHAPE) || strcmp(setting, "preset") == 0 ||
                     strcmp(setting, "tokenizer") == 0 || strcmp(setting, "ffn") == 0;
        if (!(o->given & TG_OPT_BIT(i)) || !shape || strcmp(setting, "seq_len") == 0 || tg_opt_equal(t, i, o, &stored))
            continue;
        char given[256], was[256];
        tg_opt_format(t, i, o, given, sizeof given);
        tg_opt_format(t, i, &stored, was, sizeof was);
        return tg_fail(TG_ERR_ARG,
                       "%s %s differs from the %s of `init_from` %s: a run started from it keeps the base model's shape "
                       "and tokenizer; drop %s",
                       spec->flag, given, was, base, spec->flag);
    }
    if (o->spec.special_tokens && *o->spec.special_tokens)
        return tg_fail(TG_ERR_ARG, "`special_tokens` reserves tokens in a BPE trained on the corpus; a run started from "
                                   "`init_from` %s encodes with its tokenizer: drop `special_tokens`",
                       base);
    return TG_OK;
}

TgStatus tg_run_base_find(const TgTrainOptions *o, TgRunBase *base) {
    memset(base, 0, sizeof *base);
    char ckpt[TG_PATH_CAP];
    TG_TRY(tg_run_folder_locate(o->spec.init_from, base->dir, sizeof base->dir));
    TG_TRY(tg_checkpoint_resolve(o->spec.init_from, ckpt, sizeof ckpt));
    /* run.txt names the checkpoint itself: the folder's latest moves on when the base trains further */
    char *real = realpath(ckpt, NULL);
    if (!real)
        return tg_fail(TG_ERR_IO, "`init_from` %s: cannot open %s: %s", o->spec.init_from, ckpt, strerror(errno));
    TgStatus s = tg_path_format(base->ckpt, sizeof base->ckpt, "%s", real);
    free(real);
    TG_TRY(s);
    uint64_t tokenizer_fingerprint;
    TG_TRY(tg_checkpoint_read_config(base->ckpt, &base->cfg, &tokenizer_fingerprint));
    base->trained_seq = base->cfg.seq_len;
    /* the base's run.txt: its preset and tokenizer, which the new run records */
    TG_TRY(tg_run_identity_read(base->dir, &base->id, &base->strings));
    TG_TRY(check_base_shape(o, &base->cfg, &base->id, o->spec.init_from));
    if (o->spec.model.seq_len > 0) base->cfg.seq_len = o->spec.model.seq_len;
    return tg_model_config_validate(&base->cfg);
}

void tg_run_base_free(TgRunBase *base) { tg_opt_strings_free(&base->strings); }

TgStatus tg_run_base_take(TgRun *run, const TgRunBase *base) {
    bool has_tokenizer = run->tok.vocab_size > 0;
    if (has_tokenizer) {
        TgModelConfig cfg;
        uint64_t tokenizer_fingerprint;
        TG_TRY(tg_checkpoint_read_config(base->ckpt, &cfg, &tokenizer_fingerprint));
        if (tokenizer_fingerprint != run->tok.fingerprint)
            return tg_fail(TG_ERR_MISMATCH,
                           "the data's tokenizer (fingerprint %016" PRIx64 ") is not the one of `init_from` %s (%016" PRIx64
                           "): a run started from it encodes its text with the base's tokenizer; give `data_path` to encode "
                           "it so, or a dataset prepared with that tokenizer",
                           run->tok.fingerprint, base->ckpt, tokenizer_fingerprint);
    }
    tg_model_build(&run->model, &base->cfg);
    run->model_built = true;
    uint64_t fingerprint;
    TgTokenizer tok;
    TG_TRY(tg_run_base_copy_weights(base->ckpt, &run->model, &fingerprint, has_tokenizer ? NULL : &tok));
    if (!has_tokenizer) run->tok = tok;
    run->initialized_from_file = true;
    /* what the base trained on, for the token rows LoRA trains (run_lora.c) */
    char path[TG_PATH_CAP];
    if (tg_path_join(path, sizeof path, base->id.spec.dataset ? base->id.spec.dataset : base->dir, "train.tok") ==
            TG_OK &&
        access(path, R_OK) == 0)
        snprintf(run->base_train_tokens, sizeof run->base_train_tokens, "%s", path);
    return TG_OK;
}

TgStatus tg_run_base_record(const TgRun *run, const TgTrainOptions *o, const char *file, TgTrainOptions *id, TgRunBaseRecord *rec) {
    uint64_t fingerprint = tg_model_weights_fingerprint(&run->model);
    snprintf(rec->fingerprint, sizeof rec->fingerprint, "%016" PRIx64, fingerprint);
    if (o->spec.init_fingerprint && strcmp(o->spec.init_fingerprint, rec->fingerprint) != 0)
        return tg_fail(TG_ERR_MISMATCH,
                       "`init_fingerprint` %s: the weights of `init_from` %s have fingerprint %s; give the base with "
                       "those weights, or drop `init_fingerprint`",
                       o->spec.init_fingerprint, o->spec.init_from, rec->fingerprint);
    char *real = realpath(file, NULL);
    if (!real) return tg_fail(TG_ERR_IO, "`init_from` %s: %s", file, strerror(errno));
    TgStatus s = tg_path_format(rec->path, sizeof rec->path, "%s", real);
    free(real);
    TG_TRY(s);
    id->spec.init_from = rec->path;
    id->spec.init_fingerprint = rec->fingerprint;
    return TG_OK;
}
