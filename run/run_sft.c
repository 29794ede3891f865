/* A new fine-tuning run (run.h, --task sft): its base (--init-from a run or checkpoint, or
 * --tokenizer hf:FILE), its conversations prepared into the folder (data/sft_data.h), and reading
 * them back. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/chat_format.h"
#include "data/pair_loader.h"
#include "tokenizer/tokenizer_hf.h"
#include "lib/gemm_plan.h"
#include "support/path.h"
#include "run/memory_plan.h"
#include "run/run.h"
#include "run/run_internal.h"

static void report_sft_data(TgRun *run, const TgSftPrepareOptions *opt, const TgSftPrepareResult *r) {
    const TgMessageSink *m = &run->messages;
    tg_message_emit(m, TG_MESSAGE_INFO,
                 "conversations: %" PRIu64 " from %zu file%s (%.1f MiB, %.1f s): %" PRIu64 " train + %" PRIu64
                 " val, %" PRIu64 " + %" PRIu64 " tokens, %" PRIu64 " of them trained (assistant replies and their "
                 TG_CHAT_IM_END ")",
                 r->conversations, r->files, r->files == 1 ? "" : "s", (double)r->file_bytes / (1 << 20), r->seconds,
                 r->train_conversations, r->val_conversations, r->train_tokens, r->val_tokens, r->trained_tokens);
    if (r->truncated)
        tg_message_emit(m, TG_MESSAGE_NOTE, "%" PRIu64 " conversation%s longer than `seq_len` %lld tokens cut to the window",
                     r->truncated, r->truncated == 1 ? "" : "s", (long long)opt->seq_len);
    if (opt->pairs && (r->identical_pairs || r->prompts_differ))
        tg_message_emit(m, TG_MESSAGE_NOTE,
                        "left out: %" PRIu64 " pair%s whose chosen and rejected replies are the same, %" PRIu64
                        " whose two sides have different prompts (`strict` stops at the first instead)",
                        r->identical_pairs, r->identical_pairs == 1 ? "" : "s", r->prompts_differ);
    if (r->without_reply || r->without_reply_in_window)
        tg_message_emit(m, TG_MESSAGE_NOTE,
                     "left out: %" PRIu64 " conversation%s without an assistant turn, %" PRIu64 " without one within the window",
                     r->without_reply, r->without_reply == 1 ? "" : "s", r->without_reply_in_window);
    if (r->files_skipped)
        tg_message_emit(m, TG_MESSAGE_WARNING, "%zu file%s that are not JSONL skipped (first: %s)", r->files_skipped,
                     r->files_skipped == 1 ? "" : "s", r->first_skipped);
    if (r->malformed_lines) {
        tg_message_emit(m, TG_MESSAGE_WARNING, "%" PRIu64 " malformed line%s skipped; the first:", r->malformed_lines,
                     r->malformed_lines == 1 ? "" : "s");
        for (int i = 0; i < r->n_errors; i++) tg_message_emit(m, TG_MESSAGE_WARNING, "  %s", r->errors[i]);
    }
}

/* The conversations of --data prepared into `dir` with the run's tokenizer, then opened. A
 * replica (dir NULL) prepares them in a folder of its own, keeps the files open and removes it. */
static TgStatus prepare_sft_data(TgRun *run, const TgRunSpec *spec, bool strict, int64_t seq_len, const char *dir,
                                 const TgPrepareReporter *preparing) {
    char own[TG_PATH_CAP];
    const char *tmp = getenv("TMPDIR");
    if (!dir) {
        TG_TRY(tg_path_format(own, sizeof own, "%s/tapegrad-replica-XXXXXX", tmp && *tmp ? tmp : "/tmp"));
        if (!mkdtemp(own)) return tg_fail(TG_ERR_IO, "cannot create a folder in %s: %s", tmp && *tmp ? tmp : "/tmp", strerror(errno));
    }
    const char *into = dir ? dir : own;
    TgSftPrepareOptions opt = {.sources = spec->data_path,
                               .tok = &run->tok,
                               .seq_len = seq_len,
                               .val_fraction = spec->val_fraction,
                               .pairs = spec->task == TG_TASK_DPO,
                               .chat_template = spec->chat_template,
                               .strict = strict};
    TgPrepareReporter rep = {run->messages.ctx, run->messages.emit, preparing ? preparing->progress : NULL};
    if (preparing) rep.ctx = preparing->ctx, rep.message = preparing->message;
    TgSftPrepareResult result;
    TgStatus s = tg_sft_prepare(&opt, into, &rep, &result);
    if (s == TG_OK) s = tg_run_open_sft_splits(run, into, seq_len, true);
    if (s == TG_OK) report_sft_data(run, &opt, &result);
    if (!dir) {
        const char *files[] = {TG_PREPARE_TRAIN_FILE, TG_PREPARE_VAL_FILE, TG_SFT_TRAIN_MASK_FILE, TG_SFT_VAL_MASK_FILE};
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            char path[TG_PATH_CAP];
            if (tg_path_join(path, sizeof path, own, files[i]) == TG_OK) (void)unlink(path); /* the open files stay readable */
        }
        (void)rmdir(own);
    }
    return s;
}

TgStatus tg_run_open_new_sft(const TgTrainRequest *req, bool writes, const TgPrepareReporter *preparing, TgRun *run) {
    const TgRunSpec *spec = req->spec;
    TgRunSpec id = *spec;
    run->task = spec->task; /* its splits open as pairs for dpo */
    char targets[64];
    TG_TRY(tg_run_spec_resolve_lora(&id, targets, sizeof targets));
    TG_TRY(tg_gemm_plan_set_kc(spec->gemm_kc));
    id.gemm_kc = tg_gemm_plan().kc;
    bool from_run = tg_run_init_from_is_run(spec->init_from ? spec->init_from : "");
    TgRunBase base;
    memset(&base, 0, sizeof base);
    TgModelConfig cfg;
    TgStatus s = TG_OK;
    if (from_run) {
        s = tg_run_base_find(spec, req->given, &base);
        cfg = base.cfg;
        id.preset = base.id.preset, id.tokenizer = base.id.tokenizer;
        id.ffn_hidden_rule = base.id.ffn_hidden_rule;
    } else if (spec->tokenizer.source != TG_TOKENIZER_USE_HF) {
        s = tg_fail(TG_ERR_ARG, "tapegrad sft fine-tunes a model: give `init_from` RUN (a run or checkpoint of "
                                "tapegrad train, whose tokenizer has " TG_CHAT_IM_START " and " TG_CHAT_IM_END
                                "), or `tokenizer` hf:FILE (with `init_from` WEIGHTS.safetensors, or from scratch)");
    } else {
        s = tg_run_resolve_config(spec, 256, &cfg); /* the tokenizer's vocabulary is known once it is read */
    }
    TgTrainSchedule rows = *req->schedule;
    rows.batch *= spec->task == TG_TASK_DPO ? 2 : 1; /* DPO: --batch counts pairs, two rows each */
    if (s == TG_OK) s = tg_train_memory_check(&rows, req->invocation->resume, spec->model.seq_len > 0, &cfg, 0, 0);
    if (s == TG_OK) s = tg_run_lora_check(spec, &cfg);
    char generated[256];
    tg_run_generated_folder(generated, sizeof generated, tg_train_task_name(spec->task));
    if (s == TG_OK && writes) s = tg_run_folder_choose(&run->folder, req->invocation->out_dir, generated);
    if (s == TG_OK && !from_run && spec->init_from && access(spec->init_from, R_OK) != 0)
        s = tg_fail(TG_ERR_IO, "`init_from` %s: cannot read it: %s", spec->init_from, strerror(errno));
    if (s == TG_OK && writes) s = tg_run_begin_new_folder(run);
    if (s == TG_OK)
        s = from_run ? tg_run_base_take(run, &base) : tg_tokenizer_hf_load(spec->tokenizer.hf_file, &run->tok);
    TgChatTokens ct;
    if (s == TG_OK) s = tg_chat_tokens_find(&run->tok, from_run ? spec->init_from : spec->tokenizer.hf_file, &ct);
    char path[TG_PATH_CAP];
    if (s == TG_OK && writes) s = tg_path_join(path, sizeof path, run->dir, TG_PREPARE_TOKENIZER_FILE);
    if (s == TG_OK && writes) s = tg_tokenizer_save(&run->tok, path);
    if (s == TG_OK)
        s = prepare_sft_data(run, spec, req->invocation->strict, cfg.seq_len, writes ? run->dir : NULL, preparing);
    if (s == TG_OK && !from_run) s = tg_run_build_new_model(run, spec, (uint64_t)id.seed);
    if (s == TG_OK && from_run && spec->model.seq_len > base.trained_seq)
        tg_message_emit(
            &run->messages, TG_MESSAGE_NOTE,
            "`seq_len` %lld is longer than the %lld tokens %s was trained on: positions past those are new to it",
            (long long)spec->model.seq_len, (long long)base.trained_seq, spec->init_from);
    TgRunBaseRecord rec;
    if (s == TG_OK && spec->init_from)
        s = tg_run_base_record(run, spec, from_run ? base.ckpt : spec->init_from, &id, &rec);
    if (s == TG_OK && writes) s = tg_run_identity_write(run->dir, &id);
    tg_run_base_free(&base);
    TG_TRY(s);
    run->dpo_beta = id.dpo_beta;
    run->chat_template = id.chat_template;
    run->state.seed = (uint64_t)id.seed;
    run->state.best_val_loss = INFINITY;
    return TG_OK;
}

/* What run.txt in dir says of its task and template (a folder without one pretrains, in ChatML). */
static TgStatus chat_identity(const char *dir, TgTrainTask *task, TgChatTemplate *t) {
    char path[TG_PATH_CAP];
    *task = TG_TASK_PRETRAIN, *t = TG_CHAT_TEMPLATE_CHATML;
    TG_TRY(tg_path_join(path, sizeof path, dir, TG_RUN_IDENTITY_FILE));
    if (access(path, F_OK) != 0) return TG_OK;
    TgRunSpec id;
    TgOptStrings strings = {0};
    TgStatus s = tg_run_identity_read(dir, &id, &strings);
    if (s == TG_OK) *task = id.task, *t = id.chat_template;
    tg_opt_strings_free(&strings);
    return s;
}

TgStatus tg_run_task(const char *dir, TgTrainTask *task) {
    TgChatTemplate t;
    return chat_identity(dir, task, &t);
}

TgStatus tg_run_chat_template(const char *dir, TgChatTemplate *t) {
    TgTrainTask task;
    return chat_identity(dir, &task, t);
}

/* A fine-tuning run's conversations in `dir` (its folder, or a replica's own), for a window of
 * seq_len tokens; the val split alone unless want_train. */
TgStatus tg_run_open_sft_splits(TgRun *run, const char *dir, int64_t seq_len, bool want_train) {
    uint32_t vocab = (uint32_t)run->tok.vocab_size;
    uint64_t fingerprint = run->tok.fingerprint;
    size_t n_pairs;
    if (want_train) {
        TG_TRY(tg_sft_split_open(&run->train, dir, TG_PREPARE_TRAIN_FILE, TG_SFT_TRAIN_MASK_FILE, vocab, fingerprint, seq_len));
        run->train.pairs = run->task == TG_TASK_DPO;
        if (run->train.pairs) TG_TRY(tg_pair_split_count(&run->train, &n_pairs));
    }
    TG_TRY(tg_sft_split_open(&run->val, dir, TG_PREPARE_VAL_FILE, TG_SFT_VAL_MASK_FILE, vocab, fingerprint, seq_len));
    run->val.pairs = run->task == TG_TASK_DPO;
    return run->val.pairs ? tg_pair_split_count(&run->val, &n_pairs) : TG_OK;
}

