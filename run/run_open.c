/* Opening a run for training (run.h): a new one of its kind (text, or conversations to
 * fine-tune on), or a resumed one, each flag checked against what it recorded; and the val split
 * of a run opened to evaluate it. The kinds sit below (run_text.c, run_sft.c). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/gemm_plan.h"
#include "support/path.h"
#include "run/run_internal.h"

/* Which dataset the run in run->dir trained on, from its run.txt ("" for one prepared into it),
 * whether it fine-tunes on conversations, and its precision. */
static TgStatus read_run_dataset(TgRun *run) {
    TgTrainOptions id;
    TgOptStrings strings = {0};
    TgStatus s = tg_run_identity_read(run->dir, &id, &strings);
    if (s == TG_OK && id.spec.dataset) snprintf(run->dataset, sizeof run->dataset, "%s", id.spec.dataset);
    if (s == TG_OK) run->task = id.spec.task, run->precision = id.spec.precision;
    tg_opt_strings_free(&strings);
    return s;
}

/* A token file of the run's folder into *store, checked against the run's tokenizer. */
static TgStatus load_tokens(TgRun *run) {
    if (run->task == TG_TASK_SFT) return tg_run_open_sft_splits(run, run->dir, run->model.cfg.seq_len, true);
    return tg_run_open_text_splits(run, true);
}

/* ---------------------------------------------------------------- opening */

TgStatus tg_run_open_val(TgRun *run) {
    TG_TRY(read_run_dataset(run));
    if (run->task == TG_TASK_SFT) return tg_run_open_sft_splits(run, run->dir, run->model.cfg.seq_len, false);
    return tg_run_open_text_splits(run, false);
}

/* Every identity or shape option given now must equal the run's: `stored` holds run.txt's
 * values and the checkpoint's model shape. Values are compared as a new run records them
 * (tg_train_options_resolve_lora): alpha 8 is a rank-4 run's default, and targets v,q are its q,v;
 * a run.txt written before runs recorded them holds alpha 0 and no targets for the defaults. */
static TgStatus check_resume_flags(const TgTrainOptions *o, const TgTrainOptions *stored_as_read) {
    const TgOptTable *t = tg_train_option_table();
    TgTrainOptions now = *o, stored = *stored_as_read;
    char now_targets[64], stored_targets[64];
    if (!(o->given & TG_OPT_BIT(tg_opt_find_setting(t, "lora_rank")))) now.spec.lora_rank = stored.spec.lora_rank;
    TG_TRY(tg_train_options_resolve_lora(&now, now_targets, sizeof now_targets));
    TG_TRY(tg_train_options_resolve_lora(&stored, stored_targets, sizeof stored_targets));
    for (int i = 0; i < t->count; i++) {
        if (!(o->given & TG_OPT_BIT(i)) || !(t->specs[i].group & (TG_TRAIN_OPT_IDENTITY | TG_TRAIN_OPT_SHAPE))) continue;
        if (tg_opt_equal(t, i, &now, &stored)) continue;
        char given[2048], was[2048];
        tg_opt_format(t, i, &now, given, sizeof given);
        tg_opt_format(t, i, &stored, was, sizeof was);
        if (!was[0]) snprintf(was, sizeof was, "(none)");
        return tg_fail(TG_ERR_ARG,
                       "%s %s differs from the resumed run's %s; drop the flag or start a new run with another `out_dir`",
                       t->specs[i].flag, given, was);
    }
    return TG_OK;
}

/* A resumed run is only read here: its folder changes in tg_run_start, once every check passed. */
static TgStatus open_resumed(const TgTrainOptions *o, bool writes, TgRun *run) {
    char ckpt[TG_PATH_CAP], dir[TG_PATH_CAP];
    /* a run folder, or a file in one, before anything is created there; then locked before
     * anything is read: another trainer may be saving into it. A replica writes nothing and
     * takes no lock: rank 0 holds it for the job. */
    TG_TRY(tg_run_folder_locate(o->invocation.resume, dir, sizeof dir));
    if (writes) TG_TRY(tg_folder_lock_acquire(&run->lock, dir, TG_RUN_LOCK_FILE));
    TG_TRY(tg_run_open_checkpointed(o->invocation.resume, run, ckpt, sizeof ckpt));
    TgTrainOptions stored;
    TgOptStrings strings = {0};
    TgStatus s = tg_run_identity_read(run->dir, &stored, &strings);
    if (s == TG_OK) {
        const TgModelConfig *c = &run->model.cfg;
        stored.spec.model = *c;
        stored.spec.ffn = c->ffn;
        s = check_resume_flags(o, &stored);
    }
    /* the k slice it trained with (a run.txt written before --gemm-kc records none: this CPU's) */
    if (s == TG_OK) s = tg_gemm_plan_set_kc(stored.spec.gemm_kc);
    /* and the precision (a run.txt written before --precision records none: fp32) */
    if (s == TG_OK) run->precision = stored.spec.precision;
    if (s == TG_OK && stored.spec.dataset) snprintf(run->dataset, sizeof run->dataset, "%s", stored.spec.dataset);
    if (s == TG_OK) run->task = stored.spec.task, run->keep_best = stored.spec.keep_best;
    tg_opt_strings_free(&strings);
    TG_TRY(s);
    TG_TRY(load_tokens(run));
    run->resumed = true;
    if (run->state.step >= o->schedule.steps)
        tg_message_emit(&run->messages, TG_MESSAGE_NOTE, "the run already did %lld steps; raise `steps` to train further",
                     (long long)run->state.step);
    return TG_OK;
}

static TgStatus open_new(TgTrainOptions *o, bool writes, const TgPrepareReporter *preparing, TgRun *run) {
    if (o->spec.task == TG_TASK_SFT) return tg_run_open_new_sft(o, writes, preparing, run);
    if (!o->spec.init_from || !tg_run_init_from_is_run(o->spec.init_from))
        return tg_run_open_new_text(o, writes, preparing, NULL, run);
    TgRunBase base;
    TgStatus s = tg_run_base_find(o, &base);
    if (s == TG_OK) s = tg_run_open_new_text(o, writes, preparing, &base, run);
    tg_run_base_free(&base);
    return s;
}

TgStatus tg_run_open_for_training(TgTrainOptions *o, bool writes, const TgMessageSink *messages,
                               const TgPrepareReporter *preparing, TgRun *run) {
    tg_run_clear(run);
    if (messages) run->messages = *messages;
    TG_TRY(tg_train_options_validate(o));
    tg_train_options_derive(o);
    if (o->invocation.resume) return open_resumed(o, writes, run);
    run->precision = o->spec.precision, run->keep_best = o->spec.keep_best;
    TG_TRY(open_new(o, writes, preparing, run));
    return tg_run_attach_lora(run, &o->spec);
}

