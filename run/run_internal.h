/* What the files of run/ share (and export/merge.c, which writes a run); nothing else includes it.
 * The files are layered, each calling only those above it in this list:
 *   run.c         the common part: run.txt, the model of the flags, the folder's life, metrics
 *   run_lora.c    LoRA options checked, adapters attached to a new run's model
 *   run_read.c    a run that exists read back (a LoRA run onto its base), a base's weights
 *   run_base.c    the base a new run starts from (--init-from RUN|CKPT)
 *   run_text.c    the text kind;  run_sft.c  the conversation kind
 *   run_open.c    opening for training or evaluation: the kind chosen, a resume checked */
#ifndef TAPEGRAD_RUN_INTERNAL_H
#define TAPEGRAD_RUN_INTERNAL_H

#include "run/run.h"

/* The run's TG_TRAIN_OPT_IDENTITY options into DIR/run.txt. */
TgStatus tg_run_identity_write(const char *dir, const TgRunSpec *id);
/* The model config of the spec (the preset's, overridden by the shape it gives) for a vocabulary. */
TgStatus tg_run_resolve_config(const TgRunSpec *spec, int64_t vocab, TgModelConfig *out);
/* The model of the flags and the tokenizer, its weights from --init-from's safetensors (checked)
 * or initialised from the seed. */
TgStatus tg_run_build_new_model(TgRun *run, const TgRunSpec *spec, uint64_t seed);
/* The new run's temporary folder, locked. */
TgStatus tg_run_begin_new_folder(TgRun *run);
/* The folder of a new run given no --out: checkpoints/<kind>-<local time>. */
void tg_run_generated_folder(char *out, size_t cap, const char *kind);
/* An empty run, nothing open. */
void tg_run_clear(TgRun *run);
/* Whether --init-from names a run folder or a checkpoint (not a safetensors file). */
bool tg_run_init_from_is_run(const char *path);

/* run_read.c: the tokenizer and checkpoint of a run folder (or of the checkpoint file given) into
 * run, its model built from the checkpoint; *ckpt_path receives the checkpoint. */
TgStatus tg_run_open_checkpointed(const char *dir_or_file, TgRun *run, char *ckpt_path, size_t cap);

/* run_base.c: the weights a new run starts from. */
/* A base named by --init-from RUN|CKPT, found and checked before anything is written: its
 * checkpoint (a folder's latest), its shape against the shape flags given (one that differs is
 * refused, naming both; --seq may change, and cfg takes it), and its run.txt. */
typedef struct TgRunBase {
    char dir[TG_PATH_CAP];   /* its run folder */
    char ckpt[TG_PATH_CAP];  /* the checkpoint, absolute */
    TgModelConfig cfg;       /* its shape, with the new run's --seq */
    int64_t trained_seq;     /* the context it was trained on */
    TgRunSpec id;            /* its run.txt (strings in `strings`) */
    TgOptStrings strings;
} TgRunBase;
TgStatus tg_run_base_find(const TgRunSpec *spec, TgOptSet given, TgRunBase *base);
void tg_run_base_free(TgRunBase *base);
/* The base's weights (a LoRA run's with its adapters folded in) into run->model, built with
 * base->cfg, and its tokenizer into run->tok; a run that has a tokenizer already (its data
 * prepared with the base's, or a dataset's) keeps it, refused unless it is the base's. */
TgStatus tg_run_base_take(TgRun *run, const TgRunBase *base);
/* run_read.c: the weights of the checkpoint `ckpt` (merged, if it is an adapter's) copied into
 * `model`, of the same shape, with their fingerprint; their tokenizer into *tok unless tok is NULL. */
TgStatus tg_run_base_copy_weights(const char *ckpt, TgModel *model, uint64_t *fingerprint, TgTokenizer *tok);
/* What run.txt records of the weights a new run starts from (run->model, no adapters yet, loaded
 * from `file`): the file made absolute and the weights' fingerprint, into id (its strings in
 * rec); refused when --init-fingerprint names another fingerprint. */
typedef struct TgRunBaseRecord {
    char path[TG_PATH_CAP];
    char fingerprint[17];
} TgRunBaseRecord;
TgStatus tg_run_base_record(const TgRun *run, const TgRunSpec *spec, const char *file, TgRunSpec *id,
                            TgRunBaseRecord *rec);

/* run_text.c: a new run on text (tg_run_open_for_training's, for --task pretrain), from `base`
 * (may be NULL) when --init-from names a run or checkpoint; and a text run's splits, the val
 * split alone unless want_train. */
TgStatus tg_run_open_new_text(const TgTrainRequest *req, bool writes, const TgPrepareReporter *preparing,
                              const TgRunBase *base, TgRun *run);
TgStatus tg_run_open_text_splits(TgRun *run, bool want_train);

/* run_sft.c: a new fine-tuning run (tg_run_open_for_training's, for --task sft); a fine-tuning run's
 * conversations in `dir`, for a window of seq_len (the val split alone unless want_train). */
TgStatus tg_run_open_new_sft(const TgTrainRequest *req, bool writes, const TgPrepareReporter *preparing, TgRun *run);
TgStatus tg_run_open_sft_splits(TgRun *run, const char *dir, int64_t seq_len, bool want_train);

/* run_lora.c: the LoRA options checked against the model they will adapt (of config cfg), before
 * the corpus is read; LoRA adapters on a new run's model when the options ask for them
 * (spec->lora_rank > 0), the base frozen; and a LoRA run's checkpoint (its adapters) opened onto the
 * base its run.txt names (run->model built with the checkpoint's config, run->dir and run->tok set). */
TgStatus tg_run_lora_check(const TgRunSpec *spec, const TgModelConfig *cfg);
TgStatus tg_run_attach_lora(TgRun *run, const TgRunSpec *spec);
TgStatus tg_run_open_adapter(TgRun *run, const char *ckpt_path, TgCheckpointInfo *info);

#endif
