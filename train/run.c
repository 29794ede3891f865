/* Run folders: creating one (data preparation, model init), continuing one, reading one. */
#include "train/run.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data/prepare.h"
#include "lib/atomic_file.h"
#include "lib/file_read.h"
#include "lib/gemm_plan.h"
#include "data/tokfile.h"
#include "train/convert.h"
#include "train/memory_plan.h"
#include "tapegrad/sample.h"
#include "lib/path.h"

/* ---------------------------------------------------------------- identity of a run */

/* What must not change when a run continues: the TRAIN_OPT_IDENTITY options, in DIR/run.txt. */
static TgStatus identity_write(const char *dir, const TrainOptions *id) {
    char path[TG_PATH_CAP];
    TG_TRY(path_join(path, sizeof path, dir, RUN_IDENTITY_FILE));
    return opt_write(train_option_table(), id, TRAIN_OPT_IDENTITY, path);
}

TgStatus run_identity_read(const char *dir, TrainOptions *id, OptStrings *strings) {
    char path[TG_PATH_CAP];
    TG_TRY(path_join(path, sizeof path, dir, RUN_IDENTITY_FILE));
    train_options_defaults(id);
    id->seed = -1, id->tokenizer = NULL; /* the file must say both */
    TgStatus s = opt_read(train_option_table(), id, TRAIN_OPT_IDENTITY, 0, path, NULL, strings);
    /* a bad value in the file is the file's fault, not a flag's: exit 1, not 2 */
    if (s != TG_OK) return tg_fail(s == TG_ERR_IO ? s : TG_ERR_FORMAT, "%s", tg_error_message());
    if (id->seed < 0 || !id->tokenizer)
        return tg_fail(TG_ERR_FORMAT, "%s: incomplete run description (seed or tokenizer missing)", path);
    return TG_OK;
}

/* ---------------------------------------------------------------- model config from flags */

static TgStatus resolve_config(const TrainOptions *o, int64_t vocab, TgModelConfig *out) {
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

TgStatus run_read_tokens(const Run *run, const char *file, int32_t **ids, size_t *n) {
    char path[TG_PATH_CAP];
    TG_TRY(path_join(path, sizeof path, run->dir, file));
    return tokfile_read_for(path, (uint32_t)run->tok.vocab_size, run->tok.fingerprint, ids, n);
}

static TgStatus load_tokens(Run *run) {
    size_t n;
    TG_TRY(run_read_tokens(run, PREPARE_TRAIN_FILE, &run->train_tokens, &n));
    run->n_train = (int64_t)n;
    TG_TRY(run_read_tokens(run, PREPARE_VAL_FILE, &run->val_tokens, &n));
    run->n_val = (int64_t)n;
    return TG_OK;
}

/* A run killed after its last checkpoint logged steps the resume will train again: drop them,
 * so metrics.jsonl holds every step once. */
static TgStatus drop_metrics_after(const char *path, int64_t step, const MessageSink *messages) {
    FILE *in = file_open_read(path);
    if (!in) return errno == ENOENT ? TG_OK : tg_fail(TG_ERR_IO, "cannot read %s: %s", path, file_open_error(errno));
    AtomicFile af;
    TgStatus s = atomic_file_open(&af, path);
    if (s != TG_OK) {
        fclose(in);
        return s;
    }
    FILE *out = atomic_file_stream(&af);
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
        atomic_file_abandon(&af);
        return TG_OK;
    }
    TG_TRY(atomic_file_commit(&af));
    message_emit(messages, MESSAGE_NOTE, "dropped %lld lines of %s logged after step %lld, the checkpoint resumed from",
                 (long long)dropped, path, (long long)step);
    return TG_OK;
}

static TgStatus open_metrics(Run *run) {
    char path[TG_PATH_CAP];
    TG_TRY(path_join(path, sizeof path, run->dir, RUN_METRICS_FILE));
    if (run->resumed) TG_TRY(drop_metrics_after(path, run->state.step, &run->messages));
    return append_file_open(path, &run->metrics);
}

/* A failed load of DIR's latest checkpoint: say which older ones could be used instead. */
static TgStatus with_alternatives(TgStatus s, const char *dir, const char *ckpt_path) {
    char others[512], msg[2048];
    const char *slash = strrchr(ckpt_path, '/');
    checkpoint_folder_others(dir, slash ? slash + 1 : ckpt_path, others, sizeof others);
    if (!others[0]) return s;
    snprintf(msg, sizeof msg, "%s", tg_error_message());
    return tg_fail(s, "%s; the folder's other checkpoints (pass one's path to use it): %s", msg, others);
}

/* Loads tokenizer and checkpoint from a run folder; the model is built from the checkpoint. */
static TgStatus open_checkpointed(const char *dir_or_file, Run *run, char *ckpt_path, size_t cap) {
    char dir[TG_PATH_CAP];
    TG_TRY(run_folder_locate(dir_or_file, dir, sizeof dir));
    TG_TRY(checkpoint_resolve(dir_or_file, ckpt_path, cap));
    path_folder(ckpt_path, run->dir, sizeof run->dir);
    char tok_path[TG_PATH_CAP];
    TG_TRY(path_join(tok_path, sizeof tok_path, run->dir, PREPARE_TOKENIZER_FILE));
    TG_TRY(tg_tokenizer_load(tok_path, &run->tok));
    TgModelConfig cfg;
    uint64_t fingerprint = 0;
    TgStatus s = checkpoint_read_config(ckpt_path, &cfg, &fingerprint);
    if (s != TG_OK) return with_alternatives(s, run->dir, ckpt_path);
    if (fingerprint != run->tok.fingerprint)
        return with_alternatives(tg_fail(TG_ERR_MISMATCH, "%s was trained with another tokenizer than %s", ckpt_path, tok_path),
                                 run->dir, ckpt_path);
    if (cfg.vocab != run->tok.vocab_size)
        return with_alternatives(tg_fail(TG_ERR_MISMATCH, "%s: its model has a vocabulary of %lld tokens, the run's tokenizer "
                                                          "%s has %lld",
                                         ckpt_path, (long long)cfg.vocab, tok_path, (long long)run->tok.vocab_size),
                                 run->dir, ckpt_path);
    TG_TRY(checkpoint_model_memory_check(&cfg, ckpt_path));
    tg_model_build(&run->model, &cfg);
    run->model_built = true;
    CheckpointInfo info;
    s = checkpoint_load(ckpt_path, &run->model, &info);
    if (s != TG_OK) return with_alternatives(s, run->dir, ckpt_path);
    run->state = info.state;
    snprintf(run->last_checkpoint, sizeof run->last_checkpoint, "%s", ckpt_path);
    return TG_OK;
}

TgStatus run_open_existing(const char *dir_or_file, Run *run) {
    memset(run, 0, sizeof *run);
    char ckpt[TG_PATH_CAP];
    return open_checkpointed(dir_or_file, run, ckpt, sizeof ckpt);
}

/* Every identity or shape option given now must equal the run's: `stored` holds run.txt's
 * values and the checkpoint's model shape. */
static TgStatus check_resume_flags(const TrainOptions *o, const TrainOptions *stored) {
    const OptTable *t = train_option_table();
    for (int i = 0; i < t->count; i++) {
        if (!(o->given & OPT_BIT(i)) || !(t->specs[i].group & (TRAIN_OPT_IDENTITY | TRAIN_OPT_SHAPE))) continue;
        if (opt_equal(t, i, o, stored)) continue;
        char given[2048], was[2048];
        opt_format(t, i, o, given, sizeof given);
        opt_format(t, i, stored, was, sizeof was);
        return tg_fail(TG_ERR_ARG,
                       "%s %s differs from the resumed run's %s; drop the flag or start a new run with another --out",
                       t->specs[i].flag, given, was);
    }
    return TG_OK;
}

/* A resumed run is only read here: its folder changes in run_start, once every check passed. */
static TgStatus open_resumed(const TrainOptions *o, bool writes, Run *run) {
    char ckpt[TG_PATH_CAP], dir[TG_PATH_CAP];
    /* a run folder, or a file in one, before anything is created there; then locked before
     * anything is read: another trainer may be saving into it. A replica writes nothing and
     * takes no lock: rank 0 holds it for the job. */
    TG_TRY(run_folder_locate(o->resume, dir, sizeof dir));
    if (writes) TG_TRY(folder_lock_acquire(&run->lock, dir, RUN_LOCK_FILE));
    TG_TRY(open_checkpointed(o->resume, run, ckpt, sizeof ckpt));
    TrainOptions stored;
    OptStrings strings = {0};
    TgStatus s = run_identity_read(run->dir, &stored, &strings);
    if (s == TG_OK) {
        const TgModelConfig *c = &run->model.cfg;
        stored.model = *c;
        stored.ffn = tg_ffn_kind_name(c->ffn);
        s = check_resume_flags(o, &stored);
    }
    /* the k slice it trained with (a run.txt written before --gemm-kc records none: this CPU's) */
    if (s == TG_OK) s = tg_gemm_plan_set_kc(stored.gemm_kc);
    opt_strings_free(&strings);
    TG_TRY(s);
    TG_TRY(load_tokens(run));
    run->resumed = true;
    if (run->state.step >= o->steps)
        message_emit(&run->messages, MESSAGE_NOTE, "the run already did %lld steps; raise --steps to train further",
                     (long long)run->state.step);
    return TG_OK;
}

/* A replica (writes == false) keeps the prepared tokens in memory instead of reading them back. */
static void keep_tokens(Run *run, PreparedCorpus *corpus) {
    run->n_train = (int64_t)corpus->n_train;
    run->n_val = (int64_t)corpus->n_val;
    run->val_tokens = tg_malloc((corpus->n_val ? corpus->n_val : 1) * sizeof(int32_t));
    memcpy(run->val_tokens, corpus->ids + corpus->n_train, corpus->n_val * sizeof(int32_t));
    run->train_tokens = corpus->ids; /* the train split comes first; run_close frees it */
    corpus->ids = NULL;
}

/* The corpus read, tokenized and split in memory; the tokenizer moves to run->tok. */
static TgStatus prepare_in_memory(Run *run, const PrepareOptions *prep, const char *tokenizer, PreparedCorpus *corpus) {
    PrepareResult prepared;
    message_emit(&run->messages, MESSAGE_INFO, "preparing %s with a %s tokenizer into %s ...", prep->corpus_path, tokenizer,
                 run->folder.path);
    TG_TRY(prepare_corpus(prep, corpus, &prepared));
    message_emit(&run->messages, MESSAGE_INFO, "corpus: %zu bytes from %zu files -> %zu tokens (vocab %d; tokenizer %.1f s)",
                 prepared.corpus_bytes, prepared.corpus.files_read, prepared.n_tokens, (int)prepared.vocab_size,
                 prepared.tokenizer_seconds);
    run->tok = corpus->tok; /* run_close frees it */
    memset(&corpus->tok, 0, sizeof corpus->tok);
    return TG_OK;
}

/* The model of the flags and the tokenizer: its weights from --init-from (checked against the
 * tokenizer, every shape, every value) or initialised from the seed. */
static TgStatus build_new_model(Run *run, const TrainOptions *o, uint64_t seed) {
    TgModelConfig cfg;
    TG_TRY(resolve_config(o, run->tok.vocab_size, &cfg));
    tg_model_build(&run->model, &cfg);
    run->model_built = true;
    if (o->init_from) {
        TG_TRY(model_import_safetensors(&run->model, o->init_from, &run->tok, &run->messages));
        run->initialized_from_file = true;
    } else {
        tg_model_init_weights(&run->model, seed);
    }
    return TG_OK;
}

/* Only once every check passed: the run's temporary folder, locked, with its tokenizer, token
 * files and run.txt (run_folder.h). */
static TgStatus write_new_folder(Run *run, const PreparedCorpus *corpus, const TrainOptions *id) {
    TG_TRY(run_folder_begin(&run->folder));
    snprintf(run->dir, sizeof run->dir, "%s", run->folder.temp);
    TG_TRY(folder_lock_acquire(&run->lock, run->dir, RUN_LOCK_FILE));
    PreparedCorpus written = *corpus; /* the tokens, with the tokenizer that now lives in run->tok */
    written.tok = run->tok;
    TG_TRY(prepare_write(&written, run->dir));
    return identity_write(run->dir, id);
}

/* A new run: every check that needs no corpus, then the corpus and the model in memory, then the
 * files (run_folder.h). */
static TgStatus open_new(TrainOptions *o, bool writes, Run *run) {
    TgModelConfig preset_cfg;
    TG_TRY(tg_model_preset(o->preset, &preset_cfg));
    /* the identity with every default filled in, as run.txt records it */
    TrainOptions id = *o;
    id.tokenizer = o->tokenizer ? o->tokenizer : preset_cfg.vocab > 0 ? "bpe" : "char";
    id.data_path = o->data_path ? o->data_path : corpus_default_path();
    TG_TRY(tg_gemm_plan_set_kc(o->gemm_kc));
    id.gemm_kc = tg_gemm_plan().kc;

    const char *tokenizer = id.tokenizer;
    bool bpe = strcmp(tokenizer, "bpe") == 0, hf = strncmp(tokenizer, "hf:", 3) == 0;
    if (!bpe && o->model.vocab > 0)
        return tg_fail(TG_ERR_ARG, "--vocab sets the BPE vocabulary; the char tokenizer's vocabulary is the corpus's "
                                   "distinct bytes. Add --tokenizer bpe or drop --vocab");
    int64_t vocab = o->model.vocab > 0 ? o->model.vocab : preset_cfg.vocab > 0 ? preset_cfg.vocab : TRAIN_DEFAULT_BPE_VOCAB;
    TgModelConfig cfg;
    /* a char or imported tokenizer's vocabulary is known once it is read; 256 stands in for it */
    TG_TRY(resolve_config(o, bpe ? vocab : 256, &cfg));
    /* what the run will allocate, before the corpus is read (the trainer checks again with the
     * tokenizer's vocabulary and the probe, if any) */
    TG_TRY(train_memory_check(o, &cfg, 0, 0));
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[32], generated[256];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    snprintf(generated, sizeof generated, "checkpoints/%.64s-%s-%s", o->preset, hf ? "hf" : tokenizer, stamp);
    if (writes) TG_TRY(run_folder_choose(&run->folder, o->out_dir, generated));
    if (o->init_from && access(o->init_from, R_OK) != 0)
        return tg_fail(TG_ERR_IO, "--init-from %s: cannot read it: %s", o->init_from, strerror(errno));

    PrepareOptions prep;
    prepare_options_default(&prep);
    prep.corpus_path = id.data_path;
    prep.kind = bpe || hf ? TG_TOKENIZER_BPE : TG_TOKENIZER_CHAR;
    prep.tokenizer_json = hf ? tokenizer + 3 : NULL;
    prep.vocab_size = (int32_t)vocab;
    prep.val_fraction = id.val_fraction;
    prep.seq_len = cfg.seq_len;
    PreparedCorpus corpus;
    TG_TRY(prepare_in_memory(run, &prep, tokenizer, &corpus));
    TgStatus s = build_new_model(run, o, (uint64_t)id.seed);
    if (s == TG_OK && writes) s = write_new_folder(run, &corpus, &id);
    else if (s == TG_OK) keep_tokens(run, &corpus);
    prepared_corpus_free(&corpus);
    /* read back from the files written (the corpus is freed first: a large one is held once) */
    if (s == TG_OK && writes) s = load_tokens(run);
    TG_TRY(s);
    run->state.seed = (uint64_t)id.seed;
    run->state.best_val_loss = INFINITY;
    return TG_OK;
}

TgStatus run_open_for_training(TrainOptions *o, bool writes, const MessageSink *messages, Run *run) {
    memset(run, 0, sizeof *run);
    if (messages) run->messages = *messages;
    TG_TRY(train_options_validate(o));
    train_options_derive(o);
    return o->resume ? open_resumed(o, writes, run) : open_new(o, writes, run);
}

TgStatus run_start(Run *run) {
    if (run->resumed) checkpoint_folder_remove_stale(run->dir);
    return open_metrics(run);
}

TgStatus run_commit(Run *run) {
    if (!run->folder.temp[0]) return TG_OK;
    char asked[TG_PATH_CAP];
    memcpy(asked, run->folder.path, sizeof asked);
    TG_TRY(run_folder_commit(&run->folder));
    if (strcmp(asked, run->folder.path) != 0)
        message_emit(&run->messages, MESSAGE_NOTE, "%s was taken by another run meanwhile; this run is in %s", asked,
                     run->folder.path);
    snprintf(run->dir, sizeof run->dir, "%s", run->folder.path);
    return TG_OK;
}

void run_discard(Run *run) {
    if (run->metrics) fclose(run->metrics);
    run->metrics = NULL;
    run_folder_discard(&run->folder);
}

void run_close(Run *run) {
    if (run->metrics) fclose(run->metrics);
    folder_lock_release(&run->lock);
    if (run->model_built) tg_model_free(&run->model);
    tg_tokenizer_free(&run->tok);
    free(run->train_tokens);
    free(run->val_tokens);
    memset(run, 0, sizeof *run);
}

/* ---------------------------------------------------------------- during training */

/* Losses, lr and gradient norm with 9 significant digits, enough to tell any two floats apart,
 * so that comparing the metrics of a resumed run with an uninterrupted one is meaningful. */
static void json_number(FILE *f, const char *key, double v, int digits) {
    if (isfinite(v)) fprintf(f, ",\"%s\":%.*g", key, digits, v);
}

void run_log_metrics(Run *run, int64_t step, double loss, double val_loss, double lr, double grad_norm,
                     double tokens_per_s, double elapsed_s) {
    if (!run->metrics) return;
    fprintf(run->metrics, "{\"step\":%lld", (long long)step);
    json_number(run->metrics, "loss", loss, 9);
    json_number(run->metrics, "val_loss", val_loss, 9);
    json_number(run->metrics, "lr", lr, 9);
    json_number(run->metrics, "grad_norm", grad_norm, 9);
    json_number(run->metrics, "tokens_per_s", tokens_per_s, 6);
    json_number(run->metrics, "elapsed_s", elapsed_s, 6);
    fputs("}\n", run->metrics);
    fflush(run->metrics);
}

TgStatus run_sample(Run *run, TgTape *tape, const char *prompt, int64_t n, double temperature, int top_k, uint64_t seed,
                    char **text, size_t *text_len) {
    TgRng rng;
    tg_rng_seed(&rng, seed);
    TgSampleOptions so = tg_sample_defaults();
    so.temperature = temperature, so.top_k = top_k;
    return tg_sample_text(&run->model, &run->tok, tape, prompt, strlen(prompt), n, &so, &rng, text, text_len);
}
