/* Run folders: creating one (data preparation, model init), continuing one, reading one. */
#include "run/run.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data/chat_format.h"
#include "data/corpus.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "tokenizer/tokenizer_hf.h"
#include "lib/file_read.h"
#include "lib/atomic_file.h"
#include "lib/file_read.h"
#include "lib/gemm_plan.h"
#include "data/tokfile.h"
#include "model/weights_file.h"
#include "run/memory_plan.h"
#include "checkpoint/adapter.h"
#include "run/run_internal.h"
#include "tapegrad/sample.h"
#include "lib/path.h"

/* ---------------------------------------------------------------- identity of a run */

/* What must not change when a run continues: the TG_TRAIN_OPT_IDENTITY options, in DIR/run.txt. */
TgStatus tg_run_identity_write(const char *dir, const TgTrainOptions *id) {
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, dir, TG_RUN_IDENTITY_FILE));
    return tg_opt_write(tg_train_option_table(), id, TG_TRAIN_OPT_IDENTITY, path);
}

TgStatus tg_run_identity_read(const char *dir, TgTrainOptions *id, TgOptStrings *strings) {
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, dir, TG_RUN_IDENTITY_FILE));
    tg_train_options_defaults(id);
    id->seed = -1, id->tokenizer = NULL; /* the file must say both */
    TgStatus s = tg_opt_read(tg_train_option_table(), id, TG_TRAIN_OPT_IDENTITY, 0, path, NULL, strings);
    /* a bad value in the file is the file's fault, not a flag's: exit 1, not 2 */
    if (s != TG_OK) return tg_fail(s == TG_ERR_IO ? s : TG_ERR_FORMAT, "%s", tg_error_message());
    if (id->seed < 0 || !id->tokenizer)
        return tg_fail(TG_ERR_FORMAT, "%s: incomplete run description (seed or tokenizer missing)", path);
    return TG_OK;
}

/* ---------------------------------------------------------------- model config from flags */

TgStatus tg_run_resolve_config(const TgTrainOptions *o, int64_t vocab, TgModelConfig *out) {
    TgModelConfig c;
    TG_TRY(tg_model_preset(o->preset, &c));
    const TgModelConfig *m = &o->model;
    bool dim_changed = m->dim > 0 && m->dim != c.dim;
    if (m->dim > 0) c.dim = m->dim;
    if (m->n_layers > 0) c.n_layers = m->n_layers;
    if (m->n_heads > 0) c.n_heads = m->n_heads;
    if (m->n_kv_heads > 0) c.n_kv_heads = m->n_kv_heads;
    else if (m->n_heads > 0 && c.n_heads % c.n_kv_heads != 0) c.n_kv_heads = c.n_heads;
    if (m->seq_len > 0) c.seq_len = m->seq_len;
    if (m->rope_theta > 0) c.rope_theta = m->rope_theta;
    c.ffn = TG_FFN_SWIGLU;
    if (o->ffn) TG_TRY(tg_ffn_kind_parse(o->ffn, &c.ffn));
    if (m->hidden > 0) c.hidden = m->hidden;
    else if (c.ffn != TG_FFN_SWIGLU || dim_changed) c.hidden = tg_model_ffn_hidden(c.ffn, c.dim);
    c.vocab = vocab;
    *out = c;
    return tg_model_config_validate(&c);
}

/* ---------------------------------------------------------------- opening */

/* A token file of the run's folder into *store, checked against the run's tokenizer. */
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

/* Which dataset the run in run->dir trained on, from its run.txt ("" for one prepared into it),
 * whether it fine-tunes on conversations, and its precision. */
static TgStatus read_run_dataset(TgRun *run) {
    TgTrainOptions id;
    TgOptStrings strings = {0};
    TgStatus s = tg_run_identity_read(run->dir, &id, &strings);
    if (s == TG_OK && id.dataset) snprintf(run->dataset, sizeof run->dataset, "%s", id.dataset);
    if (s == TG_OK) run->sft = tg_train_options_sft(&id);
    if (s == TG_OK) s = tg_precision_parse(id.precision, &run->precision);
    tg_opt_strings_free(&strings);
    return s;
}

static TgStatus load_tokens(TgRun *run) {
    if (run->sft) return tg_run_open_sft_splits(run, run->dir, run->model.cfg.seq_len, true);
    if (run->dataset[0]) return open_run_dataset(run, true);
    TG_TRY(open_run_tokens(run, run->dir, TG_PREPARE_TRAIN_FILE, &run->train));
    return open_run_tokens(run, run->dir, TG_PREPARE_VAL_FILE, &run->val);
}

TgStatus tg_run_open_val(TgRun *run) {
    TG_TRY(read_run_dataset(run));
    if (run->sft) return tg_run_open_sft_splits(run, run->dir, run->model.cfg.seq_len, false);
    if (run->dataset[0]) return open_run_dataset(run, false);
    return open_run_tokens(run, run->dir, TG_PREPARE_VAL_FILE, &run->val);
}

/* A run killed after its last checkpoint logged steps the resume will train again: drop them,
 * so metrics.jsonl holds every step once. */
static TgStatus drop_metrics_after(const char *path, int64_t step, const TgMessageSink *messages) {
    FILE *in = tg_file_open_read(path);
    if (!in) return errno == ENOENT ? TG_OK : tg_fail(TG_ERR_IO, "cannot read %s: %s", path, tg_file_open_error(errno));
    TgAtomicFile af;
    TgStatus s = tg_atomic_file_open(&af, path);
    if (s != TG_OK) {
        fclose(in);
        return s;
    }
    FILE *out = tg_atomic_file_stream(&af);
    int64_t dropped = 0;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, in) >= 0) {
        const char *p = strstr(line, "\"step\":");
        if (p && strtoll(p + 7, NULL, 10) > step) dropped++;
        else fputs(line, out);
    }
    free(line);
    fclose(in);
    if (dropped == 0) {
        tg_atomic_file_abandon(&af);
        return TG_OK;
    }
    TG_TRY(tg_atomic_file_commit(&af));
    tg_message_emit(messages, TG_MESSAGE_NOTE, "dropped %lld lines of %s logged after step %lld, the checkpoint resumed from",
                 (long long)dropped, path, (long long)step);
    return TG_OK;
}

static TgStatus open_metrics(TgRun *run) {
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, run->dir, TG_RUN_METRICS_FILE));
    if (run->resumed) TG_TRY(drop_metrics_after(path, run->state.step, &run->messages));
    return tg_append_file_open(&run->metrics, path);
}

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
static TgStatus open_checkpointed(const char *dir_or_file, TgRun *run, char *ckpt_path, size_t cap) {
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

static void run_clear(TgRun *run) {
    memset(run, 0, sizeof *run);
    tg_split_init(&run->train);
    tg_split_init(&run->val);
}

TgStatus tg_run_open_existing(const char *dir_or_file, TgRun *run) {
    run_clear(run);
    char ckpt[TG_PATH_CAP];
    return open_checkpointed(dir_or_file, run, ckpt, sizeof ckpt);
}

/* Every identity or shape option given now must equal the run's: `stored` holds run.txt's
 * values and the checkpoint's model shape. Values are compared as a new run records them
 * (tg_train_options_resolve_lora): alpha 8 is a rank-4 run's default, and targets v,q are its q,v;
 * a run.txt written before runs recorded them holds alpha 0 and no targets for the defaults. */
static TgStatus check_resume_flags(const TgTrainOptions *o, const TgTrainOptions *stored_as_read) {
    const TgOptTable *t = tg_train_option_table();
    TgTrainOptions now = *o, stored = *stored_as_read;
    char now_targets[64], stored_targets[64];
    if (!(o->given & TG_OPT_BIT(tg_opt_find(t, "--lora-rank")))) now.lora_rank = stored.lora_rank;
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
                       "%s %s differs from the resumed run's %s; drop the flag or start a new run with another --out",
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
    TG_TRY(tg_run_folder_locate(o->resume, dir, sizeof dir));
    if (writes) TG_TRY(tg_folder_lock_acquire(&run->lock, dir, TG_RUN_LOCK_FILE));
    TG_TRY(open_checkpointed(o->resume, run, ckpt, sizeof ckpt));
    TgTrainOptions stored;
    TgOptStrings strings = {0};
    TgStatus s = tg_run_identity_read(run->dir, &stored, &strings);
    if (s == TG_OK) {
        const TgModelConfig *c = &run->model.cfg;
        stored.model = *c;
        stored.ffn = tg_ffn_kind_name(c->ffn);
        s = check_resume_flags(o, &stored);
    }
    /* the k slice it trained with (a run.txt written before --gemm-kc records none: this CPU's) */
    if (s == TG_OK) s = tg_gemm_plan_set_kc(stored.gemm_kc);
    /* and the precision (a run.txt written before --precision records none: fp32) */
    if (s == TG_OK) s = tg_precision_parse(stored.precision, &run->precision);
    if (s == TG_OK && stored.dataset) snprintf(run->dataset, sizeof run->dataset, "%s", stored.dataset);
    if (s == TG_OK) run->sft = tg_train_options_sft(&stored);
    tg_opt_strings_free(&strings);
    TG_TRY(s);
    TG_TRY(load_tokens(run));
    run->resumed = true;
    if (run->state.step >= o->steps)
        tg_message_emit(&run->messages, TG_MESSAGE_NOTE, "the run already did %lld steps; raise --steps to train further",
                     (long long)run->state.step);
    return TG_OK;
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
    if (!real) return tg_fail(TG_ERR_IO, "--dataset %s: %s (make one with tapegrad prepare)", dir, strerror(errno));
    int fits = snprintf(run->dataset, sizeof run->dataset, "%s", real) < (int)sizeof run->dataset;
    free(real);
    if (!fits) return tg_fail(TG_ERR_ARG, "--dataset %s: the path is too long", dir);
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

/* The model of the flags and the tokenizer: its weights from --init-from (checked against the
 * tokenizer, every shape, every value) or initialised from the seed. */
TgStatus tg_run_build_new_model(TgRun *run, const TgTrainOptions *o, uint64_t seed) {
    TgModelConfig cfg;
    TG_TRY(tg_run_resolve_config(o, run->tok.vocab_size, &cfg));
    tg_model_build(&run->model, &cfg);
    run->model_built = true;
    if (o->init_from) {
        TG_TRY(tg_model_import_safetensors(&run->model, o->init_from, &run->tok, &run->messages));
        run->initialized_from_file = true;
    } else {
        tg_model_init_weights(&run->model, seed);
    }
    return TG_OK;
}

/* The new run's temporary folder, locked (run_folder.h). */
TgStatus tg_run_begin_new_folder(TgRun *run) {
    TG_TRY(tg_run_folder_begin(&run->folder));
    snprintf(run->dir, sizeof run->dir, "%s", run->folder.temp);
    return tg_folder_lock_acquire(&run->lock, run->dir, TG_RUN_LOCK_FILE);
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

/* ---------------------------------------------------------------- a new run */

/* The folder of a new run given no --out: checkpoints/<kind>-<local time>. */
void tg_run_generated_folder(char *out, size_t cap, const char *kind) {
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    snprintf(out, cap, "checkpoints/%s-%s", kind, stamp);
}

/* A new pretraining run: every check that needs no corpus, then the corpus and the model in
 * memory, then the files (run_folder.h). With a base (--init-from RUN|CKPT, found and checked) it
 * takes the base's shape, weights and tokenizer, and its text is encoded with that tokenizer. */
static TgStatus open_new_text(TgTrainOptions *o, bool writes, const TgPrepareReporter *preparing, const TgRunBase *base,
                              TgRun *run) {
    TgModelConfig preset_cfg;
    TG_TRY(tg_model_preset(o->preset, &preset_cfg));
    /* the identity with every default filled in, as run.txt records it */
    TgTrainOptions id = *o;
    char targets[64];
    TG_TRY(tg_train_options_resolve_lora(&id, targets, sizeof targets));
    if (base) id.preset = base->id.preset;
    id.tokenizer = base ? base->id.tokenizer : o->tokenizer ? o->tokenizer : preset_cfg.vocab > 0 ? "bpe" : "char";
    id.data_path = o->data_path ? o->data_path : tg_corpus_default_path();
    TG_TRY(tg_gemm_plan_set_kc(o->gemm_kc));
    id.gemm_kc = tg_gemm_plan().kc;

    const char *tokenizer = id.tokenizer;
    bool bpe = strcmp(tokenizer, "bpe") == 0, hf = strncmp(tokenizer, "hf:", 3) == 0;
    if (!base && !bpe && o->model.vocab > 0)
        return tg_fail(TG_ERR_ARG, "--vocab sets the BPE vocabulary; the char tokenizer's vocabulary is the corpus's "
                                   "distinct bytes. Add --tokenizer bpe or drop --vocab");
    int64_t vocab = o->model.vocab > 0 ? o->model.vocab : preset_cfg.vocab > 0 ? preset_cfg.vocab : TG_TRAIN_DEFAULT_BPE_VOCAB;
    TgModelConfig cfg;
    /* a char or imported tokenizer's vocabulary is known once it is read; 256 stands in for it */
    if (base) cfg = base->cfg;
    else TG_TRY(tg_run_resolve_config(o, bpe ? vocab : 256, &cfg));
    /* what the run will allocate, before the corpus is read (the trainer checks again with the
     * tokenizer's vocabulary and the probe, if any) */
    TG_TRY(tg_train_memory_check(o, &cfg, 0, 0));
    TG_TRY(tg_run_lora_check(o, &cfg));
    char generated[256], kind[128];
    snprintf(kind, sizeof kind, "%.64s-%s", id.preset, base ? "continued" : o->dataset ? "dataset" : hf ? "hf" : tokenizer);
    tg_run_generated_folder(generated, sizeof generated, kind);
    if (writes) TG_TRY(tg_run_folder_choose(&run->folder, o->out_dir, generated));
    if (!base && o->init_from && access(o->init_from, R_OK) != 0)
        return tg_fail(TG_ERR_IO, "--init-from %s: cannot read it: %s", o->init_from, strerror(errno));

    if (writes) TG_TRY(tg_run_begin_new_folder(run));
    if (o->dataset) {
        TG_TRY(open_given_dataset(run, o->dataset));
        id.dataset = run->dataset;
        id.data_path = NULL;
        id.tokenizer = tg_tokenizer_kind_name(run->tok.kind);
        if (writes) TG_TRY(write_dataset_copy(run));
    } else {
        if (o->special_tokens && *o->special_tokens && !bpe)
            return tg_fail(TG_ERR_ARG, "--special-tokens reserves tokens in a BPE trained on the corpus: add --tokenizer bpe");
        char base_tokenizer[TG_PATH_CAP], how[TG_PATH_CAP + 32];
        TgPrepareOptions prep;
        tg_prepare_options_default(&prep);
        prep.sources = id.data_path;
        prep.kind = bpe || hf ? TG_TOKENIZER_BPE : TG_TOKENIZER_CHAR;
        prep.tokenizer_json = hf && !base ? tokenizer + 3 : NULL;
        if (base) TG_TRY(tg_path_join(base_tokenizer, sizeof base_tokenizer, base->dir, TG_PREPARE_TOKENIZER_FILE));
        prep.tokenizer_file = base ? base_tokenizer : NULL;
        prep.vocab_size = (int32_t)vocab;
        prep.special_tokens = o->special_tokens;
        prep.text_field = o->text_field;
        prep.val_fraction = id.val_fraction;
        prep.seq_len = cfg.seq_len;
        prep.threads = o->threads;
        if (base) snprintf(how, sizeof how, "the tokenizer of %s", base->ckpt);
        else snprintf(how, sizeof how, "a %s tokenizer", tokenizer);
        TG_TRY(writes ? prepare_data(run, &prep, how, run->dir, preparing) : prepare_replica_data(run, &prep, how));
    }
    TG_TRY(base ? tg_run_base_take(run, base) : tg_run_build_new_model(run, o, (uint64_t)id.seed));
    TgRunBaseRecord rec;
    if (o->init_from) TG_TRY(tg_run_base_record(run, o, base ? base->ckpt : o->init_from, &id, &rec));
    if (writes) TG_TRY(tg_run_identity_write(run->dir, &id));
    run->state.seed = (uint64_t)id.seed;
    run->state.best_val_loss = INFINITY;
    return TG_OK;
}

static TgStatus open_new(TgTrainOptions *o, bool writes, const TgPrepareReporter *preparing, TgRun *run) {
    if (tg_train_options_sft(o)) return tg_run_open_new_sft(o, writes, preparing, run);
    if (!o->init_from || !tg_run_init_from_is_run(o->init_from)) return open_new_text(o, writes, preparing, NULL, run);
    TgRunBase base;
    TgStatus s = tg_run_base_find(o, &base);
    if (s == TG_OK) s = open_new_text(o, writes, preparing, &base, run);
    tg_run_base_free(&base);
    return s;
}

TgStatus tg_run_open_for_training(TgTrainOptions *o, bool writes, const TgMessageSink *messages,
                               const TgPrepareReporter *preparing, TgRun *run) {
    run_clear(run);
    if (messages) run->messages = *messages;
    TG_TRY(tg_train_options_validate(o));
    tg_train_options_derive(o);
    if (o->resume) return open_resumed(o, writes, run);
    TG_TRY(tg_precision_parse(o->precision, &run->precision));
    TG_TRY(open_new(o, writes, preparing, run));
    return tg_run_attach_lora(run, o);
}

TgStatus tg_run_start(TgRun *run) {
    if (run->resumed) tg_checkpoint_folder_remove_stale(run->dir);
    return open_metrics(run);
}

TgStatus tg_run_commit(TgRun *run) {
    if (!run->folder.temp[0]) return TG_OK;
    char asked[TG_PATH_CAP];
    memcpy(asked, run->folder.path, sizeof asked);
    TG_TRY(tg_run_folder_commit(&run->folder));
    if (strcmp(asked, run->folder.path) != 0)
        tg_message_emit(&run->messages, TG_MESSAGE_NOTE, "%s was taken by another run meanwhile; this run is in %s", asked,
                     run->folder.path);
    snprintf(run->dir, sizeof run->dir, "%s", run->folder.path);
    return TG_OK;
}

void tg_run_discard(TgRun *run) {
    tg_append_file_close(&run->metrics);
    tg_run_folder_discard(&run->folder);
}

void tg_run_close(TgRun *run) {
    if (tg_append_file_close(&run->metrics) != 0)
        tg_message_emit(&run->messages, TG_MESSAGE_WARNING, "%s/%s lacks its last lines: %s", run->dir, TG_RUN_METRICS_FILE,
                     strerror(run->metrics_error ? run->metrics_error : ENOSPC));
    tg_folder_lock_release(&run->lock);
    if (run->model_built) tg_model_free(&run->model);
    tg_tokenizer_free(&run->tok);
    tg_split_close(&run->train);
    tg_split_close(&run->val);
    run_clear(run);
}

/* ---------------------------------------------------------------- during training */

/* Losses, lr and gradient norm with 9 significant digits, enough to tell any two floats apart,
 * so that comparing the metrics of a resumed run with an uninterrupted one is meaningful. */
static void json_number(FILE *f, const char *key, double v, int digits) {
    if (isfinite(v)) fprintf(f, ",\"%s\":%.*g", key, digits, v);
}

void tg_run_log_metrics(TgRun *run, int64_t step, double loss, double val_loss, double val_bpb, double lr, double grad_norm,
                     double tokens_per_s, double elapsed_s) {
    FILE *f = run->metrics.f;
    if (!f) return;
    fprintf(f, "{\"step\":%lld", (long long)step);
    json_number(f, "loss", loss, 9);
    json_number(f, "val_loss", val_loss, 9);
    json_number(f, "val_bpb", val_bpb, 9);
    json_number(f, "lr", lr, 9);
    json_number(f, "grad_norm", grad_norm, 9);
    json_number(f, "tokens_per_s", tokens_per_s, 6);
    json_number(f, "elapsed_s", elapsed_s, 6);
    fputs("}\n", f);
    /* a full disk loses no line: it waits (lib/append_file.h), and the person is told once */
    int err = tg_append_file_flush(&run->metrics);
    if (err && !run->metrics_error)
        tg_message_emit(&run->messages, TG_MESSAGE_WARNING,
                     "cannot write %s/%s (%s): its lines wait in memory and are written once there is space",
                     run->dir, TG_RUN_METRICS_FILE, strerror(err));
    else if (!err && run->metrics_error)
        tg_message_emit(&run->messages, TG_MESSAGE_NOTE, "%s/%s is written again; no line was lost", run->dir,
                     TG_RUN_METRICS_FILE);
    run->metrics_error = err;
}

TgStatus tg_run_sample(TgRun *run, TgTape *tape, const char *prompt, int64_t n, const TgSampleOptions *sampling, uint64_t seed,
                    char **text, size_t *text_len) {
    TgRng rng;
    tg_rng_seed(&rng, seed);
    return tg_sample_text(&run->model, &run->tok, tape, prompt, strlen(prompt), n, sampling, &rng, text, text_len);
}
