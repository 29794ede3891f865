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
    TgRunSpec id;
    TgOptStrings strings = {0};
    TgStatus s = tg_run_identity_read(run->dir, &id, &strings);
    if (s == TG_OK && id.dataset) snprintf(run->dataset, sizeof run->dataset, "%s", id.dataset);
    if (s == TG_OK) run->task = id.task, run->precision = id.precision, run->dpo_beta = id.dpo_beta;
    if (s == TG_OK) run->chat_template = id.chat_template;
    tg_opt_strings_free(&strings);
    return s;
}

/* A token file of the run's folder into *store, checked against the run's tokenizer. */
static TgStatus load_tokens(TgRun *run) {
    if (tg_train_task_chat(run->task)) return tg_run_open_sft_splits(run, run->dir, run->model.cfg.seq_len, true);
    return tg_run_open_text_splits(run, true);
}

/* ---------------------------------------------------------------- opening */

TgStatus tg_run_open_val(TgRun *run) {
    TG_TRY(read_run_dataset(run));
    if (tg_train_task_chat(run->task)) return tg_run_open_sft_splits(run, run->dir, run->model.cfg.seq_len, false);
    return tg_run_open_text_splits(run, false);
}

/* A resumed run is only read here: its folder changes in tg_run_start, once every check passed.
 * Every identity or shape setting given now must be the run's (tg_run_spec_check_resumed). */
static TgStatus open_resumed(const TgTrainRequest *req, bool writes, TgRun *run) {
    const char *resume = req->invocation->resume;
    char ckpt[TG_PATH_CAP], dir[TG_PATH_CAP];
    /* a run folder, or a file in one, before anything is created there; then locked before
     * anything is read: another trainer may be saving into it. A replica writes nothing and
     * takes no lock: rank 0 holds it for the job. */
    TG_TRY(tg_run_folder_locate(resume, dir, sizeof dir));
    if (writes) TG_TRY(tg_folder_lock_acquire(&run->lock, dir, TG_RUN_LOCK_FILE));
    TG_TRY(tg_run_open_checkpointed(resume, run, ckpt, sizeof ckpt));
    TgRunSpec stored;
    TgOptStrings strings = {0};
    TgStatus s = tg_run_identity_read(run->dir, &stored, &strings);
    if (s == TG_OK) {
        const TgModelConfig *c = &run->model.cfg;
        stored.model = *c;
        stored.ffn = c->ffn;
        s = tg_run_spec_check_resumed(req->spec, req->given, &stored);
    }
    /* the k slice it trained with (a run.txt written before --gemm-kc records none: this CPU's) */
    if (s == TG_OK) s = tg_gemm_plan_set_kc(stored.gemm_kc);
    /* and the precision (a run.txt written before --precision records none: fp32) */
    if (s == TG_OK) run->precision = stored.precision;
    if (s == TG_OK && stored.dataset) snprintf(run->dataset, sizeof run->dataset, "%s", stored.dataset);
    if (s == TG_OK) run->task = stored.task, run->keep_best = stored.keep_best, run->dpo_beta = stored.dpo_beta;
    if (s == TG_OK) run->chat_template = stored.chat_template;
    if (s == TG_OK && run->task == TG_TASK_DPO && !(run->dpo_beta > 0))
        s = tg_fail(TG_ERR_FORMAT, "%s/%s records no `beta` for its dpo run: add the `beta` it trained with", run->dir,
                    TG_RUN_IDENTITY_FILE);
    tg_opt_strings_free(&strings);
    TG_TRY(s);
    TG_TRY(load_tokens(run));
    run->resumed = true;
    if (run->state.step >= req->schedule->steps)
        tg_message_emit(&run->messages, TG_MESSAGE_NOTE, "the run already did %lld steps; raise `steps` to train further",
                     (long long)run->state.step);
    return TG_OK;
}

static TgStatus open_new(const TgTrainRequest *req, bool writes, const TgPrepareReporter *preparing, TgRun *run) {
    const TgRunSpec *spec = req->spec;
    if (tg_train_task_chat(spec->task)) return tg_run_open_new_sft(req, writes, preparing, run);
    if (!spec->init_from || !tg_run_init_from_is_run(spec->init_from))
        return tg_run_open_new_text(req, writes, preparing, NULL, run);
    TgRunBase base;
    TgStatus s = tg_run_base_find(spec, req->given, &base);
    if (s == TG_OK) s = tg_run_open_new_text(req, writes, preparing, &base, run);
    tg_run_base_free(&base);
    return s;
}

TgStatus tg_run_open_for_training(const TgTrainRequest *req, bool writes, const TgMessageSink *messages,
                                  const TgPrepareReporter *preparing, TgRun *run) {
    tg_run_clear(run);
    if (messages) run->messages = *messages;
    if (req->invocation->resume) return open_resumed(req, writes, run);
    run->precision = req->spec->precision, run->keep_best = req->spec->keep_best;
    TG_TRY(open_new(req, writes, preparing, run));
    return tg_run_attach_lora(run, req->spec);
}
