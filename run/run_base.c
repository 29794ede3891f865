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

TgStatus tg_run_base_find(const TgRunSpec *spec, TgOptSet given, TgRunBase *base) {
    memset(base, 0, sizeof *base);
    char ckpt[TG_PATH_CAP];
    TG_TRY(tg_run_folder_locate(spec->init_from, base->dir, sizeof base->dir));
    TG_TRY(tg_checkpoint_resolve(spec->init_from, ckpt, sizeof ckpt));
    /* run.txt names the checkpoint itself: the folder's latest moves on when the base trains further */
    char *real = realpath(ckpt, NULL);
    if (!real) return tg_fail(TG_ERR_IO, "`init_from` %s: cannot open %s: %s", spec->init_from, ckpt, strerror(errno));
    TgStatus s = tg_path_format(base->ckpt, sizeof base->ckpt, "%s", real);
    free(real);
    TG_TRY(s);
    uint64_t tokenizer_fingerprint;
    TG_TRY(tg_checkpoint_read_config(base->ckpt, &base->cfg, &tokenizer_fingerprint));
    base->trained_seq = base->cfg.seq_len;
    /* the base's run.txt: its preset and tokenizer, which the new run records */
    TG_TRY(tg_run_identity_read(base->dir, &base->id, &base->strings));
    /* a run started from it keeps its shape (seq_len aside: the weights do not depend on it) and
     * its tokenizer */
    TG_TRY(tg_run_spec_check_base(spec, given, &base->id, &base->cfg, spec->init_from));
    if (spec->special_tokens && *spec->special_tokens)
        return tg_fail(TG_ERR_ARG,
                       "`special_tokens` reserves tokens in a BPE trained on the corpus; a run started from "
                       "`init_from` %s encodes with its tokenizer: drop `special_tokens`",
                       spec->init_from);
    if (spec->model.seq_len > 0) base->cfg.seq_len = spec->model.seq_len;
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
    if (tg_path_join(path, sizeof path, base->id.dataset ? base->id.dataset : base->dir, "train.tok") == TG_OK &&
        access(path, R_OK) == 0)
        snprintf(run->base_train_tokens, sizeof run->base_train_tokens, "%s", path);
    return TG_OK;
}

TgStatus tg_run_base_record(const TgRun *run, const TgRunSpec *spec, const char *file, TgRunSpec *id,
                            TgRunBaseRecord *rec) {
    uint64_t fingerprint = tg_model_weights_fingerprint(&run->model);
    snprintf(rec->fingerprint, sizeof rec->fingerprint, "%016" PRIx64, fingerprint);
    if (spec->init_fingerprint && strcmp(spec->init_fingerprint, rec->fingerprint) != 0)
        return tg_fail(TG_ERR_MISMATCH,
                       "`init_fingerprint` %s: the weights of `init_from` %s have fingerprint %s; give the base with "
                       "those weights, or drop `init_fingerprint`",
                       spec->init_fingerprint, spec->init_from, rec->fingerprint);
    char *real = realpath(file, NULL);
    if (!real) return tg_fail(TG_ERR_IO, "`init_from` %s: %s", file, strerror(errno));
    TgStatus s = tg_path_format(rec->path, sizeof rec->path, "%s", real);
    free(real);
    TG_TRY(s);
    id->init_from = rec->path;
    id->init_fingerprint = rec->fingerprint;
    return TG_OK;
}
