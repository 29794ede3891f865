/* A run on text (run_internal.h): a new one's corpus prepared into its folder, or a dataset
 * folder's token files, a copy of its manifest kept; and the token splits of one that exists. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/corpus.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "lib/gemm_plan.h"
#include "support/path.h"
#include "run/memory_plan.h"
#include "support/atomic_file.h"
#include "support/file_read.h"
#include "tokenizer/tokenizer_hf.h"
#include "run/run_internal.h"

/* A text split of the run's folder or of a dataset folder. */
static TgStatus open_run_tokens(const TgRun *run, const char *dir, const char *file, TgSplit *split) {
    char path[TG_PATH_CAP];
    TgTokenStore tokens;
    TG_TRY(tg_path_join(path, sizeof path, dir, file));
    TG_TRY(tg_token_store_open(&tokens, path, (uint32_t)run->tok.vocab_size, run->tok.fingerprint));
    tg_split_of_text(split, tokens);
    return TG_OK;
}

/* The dataset the run records (run.txt's --dataset), opened and checked against the copy of its
 * manifest the run keeps: another dataset in its place is refused. */
static TgStatus open_run_dataset(TgRun *run, bool want_train) {
    TgDatasetManifest mine;
    TgStatus s = tg_dataset_manifest_read(run->dir, &mine);
    if (s != TG_OK) return tg_fail(s, "the run %s trained on the dataset %s, but %s", run->dir, run->dataset, tg_error_message());
    TgDataset d;
    s = tg_dataset_open(run->dataset, want_train, &d);
    if (s != TG_OK) return tg_fail(s, "the run %s trained on the dataset %s, which cannot be read: %s", run->dir, run->dataset,
                                   tg_error_message());
    if (d.manifest.fingerprint != mine.fingerprint || d.tok.fingerprint != run->tok.fingerprint)
        s = tg_fail(TG_ERR_MISMATCH,
                    "%s is not the dataset the run %s trained on: its fingerprint is %016" PRIx64 " (%s), the run's %s "
                    "records %016" PRIx64 " (%s); put that dataset back at %s, or start a new run",
                    run->dataset, run->dir, d.manifest.fingerprint, d.manifest.recipe, TG_DATASET_MANIFEST_FILE, mine.fingerprint,
                    mine.recipe, run->dataset);
    if (s == TG_OK) {
        tg_split_of_text(&run->train, d.train), tg_split_of_text(&run->val, d.val);
        d.train.fd = d.val.fd = -1; /* now the run's */
    }
    tg_dataset_close(&d);
    return s;
}

/* --data prepared into `dir` (the run's temporary folder, or a replica's own), then its token files
 * opened; `with` names the tokenizer for the message ("a bpe tokenizer"). */
static TgStatus prepare_data(TgRun *run, const TgPrepareOptions *prep, const char *with, const char *dir,
                             const TgPrepareReporter *preparing) {
    tg_message_emit(&run->messages, TG_MESSAGE_INFO, "preparing %s with %s into %s ...", prep->sources, with,
                 run->folder.path[0] ? run->folder.path : dir);
    TgPrepareReporter rep = {run->messages.ctx, run->messages.emit, preparing ? preparing->progress : NULL};
    if (preparing) rep.ctx = preparing->ctx, rep.message = preparing->message;
    TgPrepareResult prepared;
    TG_TRY(tg_prepare_into(prep, dir, &rep, &prepared, &run->tok));
    tg_message_emit(&run->messages, TG_MESSAGE_INFO,
                 "corpus: %" PRIu64 " bytes from %zu files, %" PRIu64 " documents -> %" PRIu64 " tokens (vocab %d; tokenizer %.1f s, encoding %.1f s)",
                 prepared.text_bytes, prepared.files, prepared.documents, prepared.n_tokens, (int)prepared.vocab_size,
                 prepared.count_seconds + prepared.tokenizer_seconds, prepared.encode_seconds);
    TG_TRY(open_run_tokens(run, dir, TG_PREPARE_TRAIN_FILE, &run->train));
    return open_run_tokens(run, dir, TG_PREPARE_VAL_FILE, &run->val);
}

/* A replica prepares --data in a folder of its own, keeps the token files open and removes the folder. */
static TgStatus prepare_replica_data(TgRun *run, const TgPrepareOptions *prep, const char *with) {
    const char *tmp = getenv("TMPDIR");
    char dir[TG_PATH_CAP];
    TG_TRY(tg_path_format(dir, sizeof dir, "%s/tapegrad-replica-XXXXXX", tmp && *tmp ? tmp : "/tmp"));
    if (!mkdtemp(dir)) return tg_fail(TG_ERR_IO, "cannot create a folder in %s: %s", tmp && *tmp ? tmp : "/tmp", strerror(errno));
    TgStatus s = prepare_data(run, prep, with, dir, NULL);
    const char *files[] = {TG_PREPARE_TOKENIZER_FILE, TG_TOKENIZER_HF_FILE, TG_PREPARE_TRAIN_FILE, TG_PREPARE_VAL_FILE, TG_DATASET_MANIFEST_FILE};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[TG_PATH_CAP];
        if (tg_path_join(path, sizeof path, dir, files[i]) == TG_OK) (void)unlink(path); /* the open files stay readable */
    }
    (void)rmdir(dir);
    return s;
}

/* --dataset: its tokenizer and token files, checked against its manifest. */
static TgStatus open_given_dataset(TgRun *run, const char *dir) {
    char *real = realpath(dir, NULL);
    if (!real) return tg_fail(TG_ERR_IO, "`dataset` %s: %s (make one with tapegrad prepare)", dir, strerror(errno));
    int fits = snprintf(run->dataset, sizeof run->dataset, "%s", real) < (int)sizeof run->dataset;
    free(real);
    if (!fits) return tg_fail(TG_ERR_ARG, "`dataset` %s: the path is too long", dir);
    TgDataset d;
    TG_TRY(tg_dataset_open(run->dataset, true, &d));
    run->tok = d.tok;
    tg_split_of_text(&run->train, d.train), tg_split_of_text(&run->val, d.val);
    memset(&d.tok, 0, sizeof d.tok);
    d.train.fd = d.val.fd = -1;
    tg_dataset_close(&d);
    tg_message_emit(&run->messages, TG_MESSAGE_INFO, "dataset %s: %s; %" PRIu64 " train + %" PRIu64 " val tokens", run->dataset,
                 d.manifest.recipe, run->train.tokens.n, run->val.tokens.n);
    return TG_OK;
}

/* A dataset run keeps its tokenizer and a copy of the dataset's manifest. */
static TgStatus write_dataset_copy(TgRun *run) {
    char path[TG_PATH_CAP], copy[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, run->dir, TG_PREPARE_TOKENIZER_FILE));
    TG_TRY(tg_tokenizer_save(&run->tok, path));
    TG_TRY(tg_path_join(path, sizeof path, run->dataset, TG_DATASET_MANIFEST_FILE));
    TG_TRY(tg_path_join(copy, sizeof copy, run->dir, TG_DATASET_MANIFEST_FILE));
    char *text;
    size_t len;
    TgStatus s = tg_file_read_all(path, TG_DATASET_MANIFEST_MAX_BYTES, &text, &len);
    if (s != TG_OK) return tg_fail_context(s, "reading %s", path);
    s = tg_atomic_write(copy, text, len);
    free(text);
    return s;
}

/* The identity of a new text run with every default filled in, as run.txt records it: the
 * preset and tokenizer of the base or the preset's, the corpus, this CPU's k slice. */
static TgStatus new_text_identity(const TgRunSpec *spec, const TgRunBase *base, const TgModelConfig *preset_cfg,
                                  TgRunSpec *id, char *targets, size_t cap) {
    *id = *spec;
    TG_TRY(tg_run_spec_resolve_lora(id, targets, cap));
    if (base) {
        id->preset = base->id.preset;
        id->tokenizer = base->id.tokenizer;
        id->ffn_hidden_rule = base->id.ffn_hidden_rule;
    } else if (spec->tokenizer.source == TG_TOKENIZER_FROM_PRESET) {
        id->tokenizer.source = preset_cfg->vocab > 0 ? TG_TOKENIZER_USE_BPE : TG_TOKENIZER_USE_CHAR;
    }
    id->data_path = spec->data_path ? spec->data_path : tg_corpus_default_path();
    TG_TRY(tg_gemm_plan_set_kc(spec->gemm_kc));
    id->gemm_kc = tg_gemm_plan().kc;
    return TG_OK;
}

/* --data prepared into the run (a replica reads it into its own folder) with the tokenizer of
 * `id`, the run's identity: a char or BPE one made from the corpus, the file's, or the base's;
 * `threads` of them. */
static TgStatus prepare_text(TgRun *run, const TgRunBase *base, const TgRunSpec *id, int64_t vocab, int64_t seq_len,
                             int threads, bool strict, bool writes, const TgPrepareReporter *preparing) {
    TgTokenizerSource source = id->tokenizer.source;
    bool bpe = source == TG_TOKENIZER_USE_BPE, hf = source == TG_TOKENIZER_USE_HF;
    if (id->special_tokens && *id->special_tokens && !bpe)
        return tg_fail(TG_ERR_ARG, "`special_tokens` reserves tokens in a BPE trained on the corpus: add `tokenizer` bpe");
    char base_tokenizer[TG_PATH_CAP], how[TG_PATH_CAP + 32], name[TG_PATH_CAP + 8];
    TgPrepareOptions prep;
    tg_prepare_options_default(&prep);
    prep.sources = id->data_path;
    prep.kind = bpe || hf ? TG_TOKENIZER_BPE : TG_TOKENIZER_CHAR;
    prep.tokenizer_json = hf && !base ? id->tokenizer.hf_file : NULL;
    if (base) TG_TRY(tg_path_join(base_tokenizer, sizeof base_tokenizer, base->dir, TG_PREPARE_TOKENIZER_FILE));
    prep.tokenizer_file = base ? base_tokenizer : NULL;
    prep.vocab_size = (int32_t)vocab;
    prep.special_tokens = id->special_tokens;
    prep.text_field = id->text_field;
    prep.val_fraction = id->val_fraction;
    prep.seq_len = seq_len;
    prep.threads = threads;
    prep.strict = strict;
    tg_tokenizer_choice_format(&id->tokenizer, name, sizeof name);
    if (base) snprintf(how, sizeof how, "the tokenizer of %s", base->ckpt);
    else snprintf(how, sizeof how, "a %s tokenizer", name);
    return writes ? prepare_data(run, &prep, how, run->dir, preparing) : prepare_replica_data(run, &prep, how);
}

/* The tokenizer a dataset's files were made with, as run.txt names it. */
static TgTokenizerChoice dataset_tokenizer(const TgTokenizer *tok) {
    return (TgTokenizerChoice){tok->kind == TG_TOKENIZER_CHAR ? TG_TOKENIZER_USE_CHAR : TG_TOKENIZER_USE_BPE, NULL};
}

/* A new pretraining run: every check that needs no corpus, then the corpus and the model in
 * memory, then the files (run_folder.h). With a base (--init-from RUN|CKPT, found and checked) it
 * takes the base's shape, weights and tokenizer, and its text is encoded with that tokenizer. */
TgStatus tg_run_open_new_text(const TgTrainRequest *req, bool writes, const TgPrepareReporter *preparing,
                              const TgRunBase *base, TgRun *run) {
    const TgRunSpec *spec = req->spec;
    TgModelConfig preset_cfg = tg_model_preset_config(spec->preset), cfg;
    TgRunSpec id;
    char targets[64];
    TG_TRY(new_text_identity(spec, base, &preset_cfg, &id, targets, sizeof targets));
    bool bpe = id.tokenizer.source == TG_TOKENIZER_USE_BPE;
    if (!base && !bpe && spec->model.vocab > 0)
        return tg_fail(TG_ERR_ARG, "`vocab` sets the BPE vocabulary; the char tokenizer's vocabulary is the corpus's "
                                   "distinct bytes. Add `tokenizer` bpe or drop `vocab`");
    int64_t vocab = spec->model.vocab > 0  ? spec->model.vocab
                    : preset_cfg.vocab > 0 ? preset_cfg.vocab
                                           : TG_TRAIN_DEFAULT_BPE_VOCAB;
    /* a char or imported tokenizer's vocabulary is known once it is read; 256 stands in for it */
    if (base) cfg = base->cfg;
    else
        TG_TRY(tg_run_resolve_config(spec, bpe ? vocab : 256, &cfg));
    /* what the run will allocate, before the corpus is read (the trainer checks again with the
     * tokenizer's vocabulary and the probe, if any) */
    TG_TRY(tg_train_memory_check(req->schedule, req->invocation->resume, spec->model.seq_len > 0, &cfg, 0, 0));
    TG_TRY(tg_run_lora_check(spec, &cfg));
    char generated[256], kind[128], name[16];
    tg_tokenizer_choice_format(&id.tokenizer, name, sizeof name);
    const char *what = base                                         ? "continued"
                       : spec->dataset                              ? "dataset"
                       : id.tokenizer.source == TG_TOKENIZER_USE_HF ? "hf"
                                                                    : name;
    snprintf(kind, sizeof kind, "%.64s-%s", tg_model_preset_name(id.preset), what);
    tg_run_generated_folder(generated, sizeof generated, kind);
    if (writes) TG_TRY(tg_run_folder_choose(&run->folder, req->invocation->out_dir, generated));
    if (!base && spec->init_from && access(spec->init_from, R_OK) != 0)
        return tg_fail(TG_ERR_IO, "`init_from` %s: cannot read it: %s", spec->init_from, strerror(errno));

    if (writes) TG_TRY(tg_run_begin_new_folder(run));
    if (spec->dataset) {
        TG_TRY(open_given_dataset(run, spec->dataset));
        id.dataset = run->dataset;
        id.data_path = NULL;
        id.tokenizer = dataset_tokenizer(&run->tok);
        if (writes) TG_TRY(write_dataset_copy(run));
    } else {
        TG_TRY(prepare_text(run, base, &id, vocab, cfg.seq_len, req->schedule->threads, req->invocation->strict, writes,
                            preparing));
    }
    TG_TRY(base ? tg_run_base_take(run, base) : tg_run_build_new_model(run, spec, (uint64_t)id.seed));
    TgRunBaseRecord rec;
    if (spec->init_from) TG_TRY(tg_run_base_record(run, spec, base ? base->ckpt : spec->init_from, &id, &rec));
    if (writes) TG_TRY(tg_run_identity_write(run->dir, &id));
    run->state.seed = (uint64_t)id.seed;
    run->state.best_val_loss = INFINITY;
    return TG_OK;
}

TgStatus tg_run_open_text_splits(TgRun *run, bool want_train) {
    if (run->dataset[0]) return open_run_dataset(run, want_train);
    if (want_train) TG_TRY(open_run_tokens(run, run->dir, TG_PREPARE_TRAIN_FILE, &run->train));
    return open_run_tokens(run, run->dir, TG_PREPARE_VAL_FILE, &run->val);
}
