#include "train/train_options.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/corpus.h"
#include "data/prepare.h"
#include "lib/atomic_file.h"
#include "train/dist.h"
#include "train/checkpoint.h"
#include "train/run_folder.h"
#include "lib/path.h"

#define ID TRAIN_OPT_IDENTITY
#define SHAPE TRAIN_OPT_SHAPE
#define SAVED TRAIN_OPT_SAVED
#define NUM TRAIN_OPT_NUMERIC
#define T TrainOptions
#define COUNT_RANGE ((OptRange){0, TRAIN_MAX_COUNT, true, false})
#define STEP_RANGE ((OptRange){0, (double)CHECKPOINT_MAX_STEP, true, false})

static const OptSpec specs[] = {
    OPT(T, preset, "--preset", OPT_STRING, "model preset", OPT_ANY, TG_PRESET_CHOICES, ID, NULL),
    OPT(T, model.dim, "--dim", OPT_INT64, "model width", OPT_POSITIVE, NULL, SHAPE, "the preset's"),
    OPT(T, model.n_layers, "--layers", OPT_INT64, "transformer blocks", OPT_POSITIVE, NULL, SHAPE, "the preset's"),
    OPT(T, model.n_heads, "--heads", OPT_INT64, "query heads (must divide --dim)", OPT_POSITIVE, NULL, SHAPE,
        "the preset's"),
    OPT(T, model.n_kv_heads, "--kv-heads", OPT_INT64, "key/value heads (must divide --heads)", OPT_POSITIVE, NULL,
        SHAPE, "the preset's"),
    OPT(T, model.hidden, "--hidden", OPT_INT64, "FFN hidden size", OPT_POSITIVE, NULL, SHAPE,
        "the preset's; with another --dim or --ffn relu, the size giving SwiGLU's parameter count"),
    OPT(T, model.seq_len, "--seq", OPT_INT64, "context length in tokens", OPT_POSITIVE, NULL, SHAPE, "the preset's"),
    OPT(T, model.vocab, "--vocab", OPT_INT64, "BPE vocabulary size", OPT_BETWEEN(257, TG_MAX_VOCAB), NULL, SHAPE,
        "the preset's, else " OPT_STRINGIFY(TRAIN_DEFAULT_BPE_VOCAB)),
    OPT(T, ffn, "--ffn", OPT_STRING, "feed-forward block", OPT_ANY, TG_FFN_CHOICES, SHAPE, NULL),
    OPT(T, model.rope_theta, "--rope-theta", OPT_DOUBLE, "RoPE base", ((OptRange){1, INFINITY, true, false}), NULL,
        SHAPE, "the preset's"),
    OPT(T, data_path, "--data", OPT_STRING, "text file or folder of text files", OPT_ANY, NULL, ID,
        CORPUS_DEFAULT_PATH),
    OPT(T, tokenizer, "--tokenizer", OPT_STRING,
        "tokenizer: char, bpe (trained on the corpus) or hf:FILE (a Hugging Face byte-level BPE tokenizer.json)", OPT_ANY,
        NULL, ID, "bpe when the preset has a vocabulary of its own, else char"),
    OPT(T, val_fraction, "--val-fraction", OPT_DOUBLE, "last fraction of the tokens kept for validation",
        OPT_FRACTION, NULL, ID, NULL),
    OPT(T, seed, "--seed", OPT_INT64, "seed of init and data order", OPT_NON_NEGATIVE, NULL, ID, NULL),
    OPT(T, init_from, "--init-from", OPT_STRING,
        "start a new run from these safetensors weights (from `tapegrad ckpt export`)", OPT_ANY, NULL, ID, NULL),
    OPT(T, steps, "--steps", OPT_INT64, "optimizer steps; the LR schedule spans them", STEP_RANGE, NULL, SAVED | NUM, NULL),
    OPT(T, batch, "--batch", OPT_INT64, "sequences per micro-batch", COUNT_RANGE, NULL, SAVED | NUM, NULL),
    OPT(T, accum, "--accum", OPT_INT64, "micro-batches per step: gradient accumulation", COUNT_RANGE, NULL, SAVED | NUM,
        NULL),
    OPT(T, lr, "--lr", OPT_DOUBLE, "peak learning rate", OPT_POSITIVE, NULL, SAVED | NUM, NULL),
    OPT(T, min_lr, "--min-lr", OPT_DOUBLE, "final learning rate of the cosine", OPT_NON_NEGATIVE, NULL, SAVED | NUM,
        "lr/10"),
    OPT(T, warmup, "--warmup", OPT_INT64, "linear warmup steps", OPT_BETWEEN(0, (double)CHECKPOINT_MAX_STEP), NULL, SAVED | NUM, "5% of --steps"),
    OPT(T, adamw.weight_decay, "--weight-decay", OPT_DOUBLE, "AdamW decoupled decay; never on norm weights",
        OPT_NON_NEGATIVE, NULL, SAVED | NUM, NULL),
    OPT(T, adamw.beta1, "--beta1", OPT_DOUBLE, "AdamW beta1", ((OptRange){0, 1, false, true}), NULL, SAVED | NUM, NULL),
    OPT(T, adamw.beta2, "--beta2", OPT_DOUBLE, "AdamW beta2", ((OptRange){0, 1, false, true}), NULL, SAVED | NUM, NULL),
    OPT(T, clip, "--clip", OPT_DOUBLE, "global gradient-norm clip, 0 for none", OPT_NON_NEGATIVE, NULL, SAVED | NUM, NULL),
    OPT(T, eval_every, "--eval-every", OPT_INT64, "val loss every N steps, 0 for only at the end", OPT_NON_NEGATIVE,
        NULL, SAVED, NULL),
    OPT(T, eval_batches, "--eval-batches", OPT_INT64, "fixed val batches per evaluation", COUNT_RANGE, NULL, SAVED,
        NULL),
    OPT(T, log_every, "--log-every", OPT_INT64, "log line every N steps", OPT_POSITIVE, NULL, SAVED, NULL),
    OPT(T, log_grads, "--log-grads", OPT_INT64,
        "every N steps, per-tensor gradient and FFN activation statistics to grads.jsonl", OPT_POSITIVE, NULL, 0,
        "off"),
    OPT(T, ckpt_every, "--ckpt-every", OPT_INT64, "checkpoint every N steps, 0 for only at the end",
        OPT_NON_NEGATIVE, NULL, SAVED, NULL),
    OPT(T, keep, "--keep", OPT_INT, "checkpoints kept, newest first (0: all)", OPT_NON_NEGATIVE, NULL, SAVED, NULL),
    OPT(T, sample_tokens, "--sample-tokens", OPT_INT64, "tokens sampled at the end, 0 for none", OPT_BETWEEN(0, TRAIN_MAX_COUNT),
        NULL, SAVED, NULL),
    OPT(T, threads, "--threads", OPT_INT, "threads for the ops and OpenBLAS", OPT_BETWEEN(1, 256), NULL, SAVED | NUM, NULL),
    OPT(T, time_budget_min, "--time-budget", OPT_DOUBLE, "stop after this many minutes even if steps remain",
        OPT_NON_NEGATIVE, NULL, 0, "none"),
    OPT(T, out_dir, "--out", OPT_STRING, "run folder", OPT_ANY, NULL, 0, "checkpoints/<preset>-<tokenizer>-<time>"),
    OPT(T, resume, "--resume", OPT_STRING,
        "continue the run in this folder (or from this checkpoint file), bitwise as if it never stopped", OPT_ANY,
        NULL, 0, NULL),
    OPT(T, stop_after, "--stop-after", OPT_INT64,
        "stop after step N, save and exit 0; the LR schedule still spans --steps, so --resume continues exactly",
        OPT_NON_NEGATIVE, NULL, 0, "none"),
    OPT(T, comm_timeout_s, "--comm-timeout", OPT_DOUBLE,
        "under mpirun: seconds a rank waits for the others before it ends the job (a rank died or hangs)",
        OPT_POSITIVE, NULL, 0, NULL),
};

#undef ID
#undef SHAPE
#undef SAVED
#undef NUM
#undef T
#undef COUNT_RANGE
#undef STEP_RANGE

static const OptTable table = {"train", "[flags]   (no flags: the small preset on the default corpus)", specs,
                               (int)(sizeof specs / sizeof specs[0]), 0};

const OptTable *train_option_table(void) { return &table; }

void train_options_defaults(TrainOptions *o) {
    memset(o, 0, sizeof *o);
    o->preset = TRAIN_DEFAULT_PRESET;
    o->ffn = tg_ffn_kind_name(TG_FFN_SWIGLU);
    o->val_fraction = PREPARE_DEFAULT_VAL_FRACTION;
    o->seed = TRAIN_DEFAULT_SEED;
    o->steps = 1500;
    o->batch = 16;
    o->accum = 1;
    o->warmup = -1;
    o->lr = 3e-3;
    o->min_lr = -1;
    o->clip = 1.0;
    o->adamw = tg_adamw_defaults();
    o->eval_every = 100;
    o->eval_batches = 8;
    o->log_every = 10;
    o->ckpt_every = 200;
    o->keep = 3;
    o->sample_tokens = 300;
    o->threads = TRAIN_DEFAULT_THREADS;
    o->stop_after = -1;
    o->comm_timeout_s = DIST_DEFAULT_TIMEOUT_S;
}

static bool given(const TrainOptions *o, const char *flag) {
    int i = opt_find(&table, flag);
    return i >= 0 && (o->given & OPT_BIT(i));
}

TgStatus train_options_validate(const TrainOptions *o) {
    TG_TRY(opt_check(&table, o, o->given));
    /* the options against each other */
    if (o->resume && o->out_dir) return tg_fail(TG_ERR_ARG, "--resume continues in the resumed run's folder; drop --out");
    if (o->resume && o->init_from)
        return tg_fail(TG_ERR_ARG,
                       "--init-from starts a new run from a safetensors file; --resume continues one: give one of them");
    if (o->stop_after >= 0 && o->stop_after > o->steps)
        return tg_fail(TG_ERR_ARG, "--stop-after %lld is past --steps %lld", (long long)o->stop_after,
                       (long long)o->steps);
    if (o->min_lr > o->lr)
        return tg_fail(TG_ERR_ARG, "--min-lr %g is above --lr %g", o->min_lr, o->lr);
    if (o->tokenizer && strcmp(o->tokenizer, "char") != 0 && strcmp(o->tokenizer, "bpe") != 0 &&
        (strncmp(o->tokenizer, "hf:", 3) != 0 || !o->tokenizer[3]))
        return tg_fail(TG_ERR_ARG, "--tokenizer must be char, bpe or hf:PATH/tokenizer.json, got '%s'", o->tokenizer);
    if (!o->resume && given(o, "--vocab") && o->tokenizer && strncmp(o->tokenizer, "hf:", 3) == 0)
        return tg_fail(TG_ERR_ARG, "--vocab sets the size of a BPE trained on the corpus; the vocabulary of --tokenizer "
                                   "hf:FILE is the file's. Drop --vocab");
    if (!o->resume && given(o, "--vocab") && o->tokenizer && strcmp(o->tokenizer, "char") == 0)
        return tg_fail(TG_ERR_ARG, "--vocab sets the BPE vocabulary; the char tokenizer's vocabulary is the corpus's "
                                   "distinct bytes. Add --tokenizer bpe or drop --vocab");
    return TG_OK;
}

void train_options_derive(TrainOptions *o) {
    if (o->warmup < 0) o->warmup = o->steps / 20;
    if (o->min_lr < 0) o->min_lr = o->lr / 10;
}

TgStatus train_options_save(const char *dir, const TrainOptions *o) {
    char path[TG_PATH_CAP];
    TG_TRY(path_join(path, sizeof path, dir, TRAIN_OPTIONS_FILE));
    return opt_write(&table, o, TRAIN_OPT_SAVED, path);
}

TgStatus train_options_restore(const char *resume, TrainOptions *o, TrainOptions *saved, OptStrings *strings) {
    /* the run folder: RESUME itself, or the folder of a checkpoint file */
    char dir[TG_PATH_CAP], path[TG_PATH_CAP];
    TG_TRY(run_folder_locate(resume, dir, sizeof dir));
    TG_TRY(path_join(path, sizeof path, dir, TRAIN_OPTIONS_FILE));
    if (saved) *saved = *o;
    if (access(path, F_OK) != 0) return TG_OK; /* a run from before the file existed */
    OptSet read = 0;
    TgStatus s = opt_read(&table, o, TRAIN_OPT_SAVED, o->given, path, &read, strings);
    if (s == TG_OK && saved) s = opt_read(&table, saved, TRAIN_OPT_SAVED, 0, path, NULL, strings);
    if (s != TG_OK) return tg_fail(TG_ERR_FORMAT, "%s; fix or delete the file and give the flags", tg_error_message());
    o->given |= read;
    return TG_OK;
}
