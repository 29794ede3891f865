/* The options of a training run, described once (train_options.c): that table gives the flags
 * of `tapegrad train` and their help, the range of every value, the run's identity file run.txt,
 * its train_options.txt, and what a resume may and may not change.
 *
 * Groups of options:
 *   TG_TRAIN_OPT_IDENTITY  what the run is (preset, data, tokenizer, split, seed, weights it started
 *                       from): written to run.txt; a resume refuses a different value
 *   TG_TRAIN_OPT_SHAPE     the model's shape: compared with the checkpoint's on resume, refused if
 *                       different
 *   TG_TRAIN_OPT_SAVED     how it trains (steps, batch, lr, ...): written to train_options.txt at
 *                       every start, so `train --resume DIR` alone continues with the same
 *                       settings; a flag given again overrides its saved value
 *   TG_TRAIN_OPT_NUMERIC   (with SAVED) changes the weights a step computes: changing one on resume
 *                       makes the run another than the one that would have run on
 * Fields that are derived when left alone (the model shape from the preset, vocab from the
 * tokenizer, warmup and min_lr from steps and lr) start at a sentinel (0, NULL or -1).
 */
#ifndef TAPEGRAD_RUN_TRAIN_OPTIONS_H
#define TAPEGRAD_RUN_TRAIN_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "tapegrad/error.h"
#include "support/options.h"
#include "tapegrad/model.h"
#include "tapegrad/optim.h"
#include "tapegrad/tape.h"
#include "data/chat_format.h"
#include "data/task_file.h"
#include "run/run_folder.h"
#include "run/shared_flags.h"

enum { TG_TRAIN_OPT_IDENTITY = 1, TG_TRAIN_OPT_SHAPE = 2, TG_TRAIN_OPT_SAVED = 4, TG_TRAIN_OPT_NUMERIC = 8 };

/* Defaults that every subcommand training or running a model shares. */
#define TG_TRAIN_DEFAULT_PRESET TG_PRESET_SMALL
#define TG_TRAIN_DEFAULT_SEED 1337
#define TG_TRAIN_DEFAULT_THREADS 2
#define TG_TRAIN_DEFAULT_BPE_VOCAB 2048 /* --tokenizer bpe on a preset without a vocabulary of its own */
#define TG_TRAIN_MIN_BPE_VOCAB 257      /* a byte-level BPE's 256 bytes and <eot>, before any merge */
#define TG_TRAIN_MAX_PROBE_TOKENS 4096  /* --probe-tokens */
#define TG_DPO_DEFAULT_BETA 0.1         /* --beta of `tapegrad dpo` (train/dpo.h) */
#define TG_DPO_MAX_BETA 100.0
#define TG_DPO_DEFAULT_LR 1e-4          /* --lr of a new dpo run: DPO moves a model a little, or breaks it */

#define TG_TRAIN_DEFAULT_LORA_TARGETS "q,k,v,o,gate,up,down"
/* The tokens whose rows train beside LoRA adapters by default: the chat markers, and the tokens of
 * the run's data its base never trained on (run/run_lora.c) */
#define TG_TRAIN_DEFAULT_LORA_TOKENS "auto"

/* What a run trains on: text (pretraining) or conversations (supervised fine-tuning, `tapegrad
 * sft`: data/chat_format.h, data/sft_loader.h): X(ID, "name"), giving TG_TASK_<ID>. The names are
 * run.txt's and --task's. */
#define TG_TRAIN_TASKS(X)                                                                                              \
    X(PRETRAIN, "pretrain")                                                                                            \
    X(SFT, "sft")                                                                                                      \
    X(DPO, "dpo")

typedef enum {
#define TG_TRAIN_TASK_ENUM(id, name) TG_TASK_##id,
    TG_TRAIN_TASKS(TG_TRAIN_TASK_ENUM)
#undef TG_TRAIN_TASK_ENUM
        TG_TASK_COUNT
} TgTrainTask;
#define TG_TRAIN_TASK_CHOICES TG_ENUM_CHOICES(TG_TRAIN_TASKS)
/* tg_train_task_name: "pretrain", "sft", "dpo"; tg_train_task_parse: the task of a name (tapegrad/error.h) */
TG_ENUM_DECLARE(TgTrainTask, tg_train_task);
/* Whether a task's model talks in the chat template (sft and dpo: conversations), not in plain text. */
bool tg_train_task_chat(TgTrainTask task);

/* The figures of an evaluation a run can keep its best checkpoint by (--keep-best) and stop early
 * on (--early-stop): X(ID, "name", maximised), giving TG_EVAL_METRIC_<ID>; NONE, first, is no
 * figure. The names are run.txt's and --keep-best's; train/best.h compares the values. */
#define TG_EVAL_METRICS(X)                                                                                             \
    X(NONE, "none", false)                                                                                             \
    X(VAL_LOSS, "val_loss", false)                                                                                     \
    X(VAL_BPB, "val_bpb", false)                                                                                      \
    X(TASK_ACC, "task", true)                                                                                          \
    X(TASK_ACC_NORM, "task_norm", true)

typedef enum {
#define TG_EVAL_METRIC_ENUM(id, name, maximised) TG_EVAL_METRIC_##id,
    TG_EVAL_METRICS(TG_EVAL_METRIC_ENUM)
#undef TG_EVAL_METRIC_ENUM
        TG_EVAL_METRIC_COUNT
} TgEvalMetric;

/* "none|val_loss|val_bpb": the choices, for the flag */
#define TG_EVAL_METRIC_CHOICES TG_ENUM_CHOICES(TG_EVAL_METRICS)
/* tg_eval_metric_name: "val_loss", ...; tg_eval_metric_parse: the figure of a name; and whether a
 * larger value is the better one */
TG_ENUM_DECLARE(TgEvalMetric, tg_eval_metric);
bool tg_eval_metric_maximised(TgEvalMetric metric);

/* --keep-best's figure: none, val_loss, val_bpb, or a task's accuracy (`task:NAME`, the summed
 * scoring's, or `task:NAME:acc_norm`, the normalised one's; NAME an --eval-task file's name,
 * train/tasks.h). */
typedef struct TgBestMetric {
    TgEvalMetric kind;
    char task[TG_TASK_NAME_CAP]; /* TG_EVAL_METRIC_TASK_*: the task's name */
} TgBestMetric;
/* Its text as --keep-best and run.txt write it: "val_loss", "task:NAME", "task:NAME:acc_norm". */
void tg_best_metric_format(const TgBestMetric *m, char *buf, size_t cap);
extern const TgOptCodec tg_best_metric_codec;

/* The tokenizer a new run makes: from the preset (a BPE when it has a vocabulary of its own,
 * else char), char, a BPE trained on the corpus, or a Hugging Face tokenizer.json. --tokenizer
 * and run.txt write it as char, bpe or hf:FILE. */
typedef enum { TG_TOKENIZER_FROM_PRESET, TG_TOKENIZER_USE_CHAR, TG_TOKENIZER_USE_BPE, TG_TOKENIZER_USE_HF } TgTokenizerSource;
typedef struct TgTokenizerChoice {
    TgTokenizerSource source;
    const char *hf_file; /* TG_TOKENIZER_USE_HF: the tokenizer.json */
} TgTokenizerChoice;
/* "char", "bpe" or "hf:FILE" (the text of run.txt; "" for TG_TOKENIZER_FROM_PRESET). */
void tg_tokenizer_choice_format(const TgTokenizerChoice *c, char *buf, size_t cap);

/* What the run is: fixed for its life (run.txt records it, a resume refuses another value). Read by
 * run/ as it opens the run and by model/ for the shape. */
typedef struct TgRunSpec {
    TgTrainTask task;          /* TG_TASK_PRETRAIN */
    TgPreset preset;           /* TG_TRAIN_DEFAULT_PRESET */
    TgModelConfig model;       /* 0 fields: from the preset; vocab: from the tokenizer */
    TgFfnKind ffn;             /* TG_FFN_SWIGLU */
    TgFfnHiddenRule ffn_hidden_rule; /* the preset's (tg_train_options_derive) unless given */
    const char *data_path;     /* NULL: the default corpus */
    const char *dataset;       /* a dataset folder (data/dataset.h) instead of --data; NULL: none */
    TgTokenizerChoice tokenizer; /* TG_TOKENIZER_FROM_PRESET */
    const char *special_tokens; /* BPE trained on --data: named special tokens (tapegrad/tokenizer.h) */
    const char *text_field;    /* JSONL sources of --data: the member holding the text */
    double val_fraction;       /* TG_PREPARE_DEFAULT_VAL_FRACTION */
    int64_t seed;              /* TG_TRAIN_DEFAULT_SEED */
    const char *init_from;     /* weights to start a new run from: a run folder or checkpoint, a safetensors file; NULL.
                                * run.txt records the file: the checkpoint of a folder, made absolute */
    const char *init_fingerprint; /* those weights' tg_model_weights_fingerprint, 16 hex digits; NULL: any */
    int64_t gemm_kc;           /* the GEMMs' k slice (lib/gemm_plan.h); 0: this CPU's */
    int64_t lora_rank;         /* 0: full fine-tuning; else LoRA adapters of this rank on a frozen base */
    double lora_alpha;         /* 0: 2 * lora_rank (run.txt records the resolved value) */
    const char *lora_targets;  /* NULL: TG_TRAIN_DEFAULT_LORA_TARGETS (run.txt records them in their canonical order) */
    const char *lora_tokens;   /* NULL: TG_TRAIN_DEFAULT_LORA_TOKENS; "auto", "chat", "none" or a list of tokens (run_lora.c) */
    TgPrecision precision;     /* of the linear layers' products (tg_tape_set_precision) */
    TgBestMetric keep_best;    /* the figure whose best checkpoint is kept beside the newest; NONE: none.
                                * Fixed for the run: its checkpoints' best record is of this figure */
    double dpo_beta;           /* dpo: the loss's beta (train/dpo.h); 0: not dpo, or TG_DPO_DEFAULT_BETA before
                                * tg_train_options_derive fills it in, which run.txt then records */
    TgChatTemplate chat_template; /* sft: how its conversations render (data/chat_format.h); run.txt records
                                   * it when not ChatML */
} TgRunSpec;

/* How it trains: train_options.txt keeps it, and a resume may change it. Read by train/. */
typedef struct TgTrainSchedule {
    int64_t steps, batch, accum;
    int64_t warmup;            /* -1: 5% of steps */
    double lr, min_lr, clip;   /* min_lr -1: lr / 10 */
    TgAdamWConfig adamw;
    int64_t eval_every, eval_batches, log_every, ckpt_every, sample_tokens;
    TgOptList eval_tasks;      /* task files (data/task_file.h) scored at every evaluation; none by default */
    int64_t log_grads;         /* 0: off; else gradient/activation statistics to grads.jsonl every N steps */
    int keep;
    int64_t early_stop;        /* 0: off; else stop after this many evaluations without a better --keep-best figure
                                * (val_loss without --keep-best) */
    const char *probe_prompts; /* a text file of prompts, one a line, continued at every evaluation; NULL: none */
    int64_t probe_tokens;      /* the tokens of each continuation */
    int threads;
} TgTrainSchedule;

/* What this invocation does: never saved. Read by the CLI and run/ (the folder), and by train/ for
 * when to stop. */
typedef struct TgTrainInvocation {
    double time_budget_min;    /* 0: none */
    const char *out_dir;
    const char *resume;        /* run folder or checkpoint file to continue, or NULL */
    int64_t stop_after;        /* -1: none; else stop (and checkpoint) after this step, schedule unchanged */
    double comm_timeout_s;     /* data-parallel runs: the longest a rank waits for the others (lib/dist.h) */
    bool strict;               /* preparing --data: the first malformed line (dpo: or pair that teaches nothing)
                                * stops it, instead of being skipped and counted */
} TgTrainInvocation;

/* The options as the table (train_options.c) reads, checks and saves them: the three concerns, and
 * the record of where each value came from, which only this options layer reads. */
typedef struct TgTrainOptions {
    TgRunSpec spec;
    TgTrainSchedule schedule;
    TgTrainInvocation invocation;
    TgOptSet given; /* options set by the caller (the CLI: the flags given); see tg_train_run */
    /* where saved options came from on --resume (tg_train_options_restore): messages name the line */
    const char *options_file;  /* NULL: none was read */
    TgOptFileRead from_file;
} TgTrainOptions;

const TgOptTable *tg_train_option_table(void);
/* The same options under `tapegrad sft` and `tapegrad dpo`, whose --task is sft and dpo. */
const TgOptTable *tg_sft_option_table(void);
const TgOptTable *tg_dpo_option_table(void);
void tg_train_options_defaults(TgTrainOptions *o);
/* Checks every given value's range and the options against each other; the one validation,
 * done before anything is read or written. TG_ERR_ARG with a message naming the flag. */
TgStatus tg_train_options_validate(const TgTrainOptions *o);
/* The LoRA configuration a run spec asks for (lora_rank > 0), defaults filled in. */
TgStatus tg_run_spec_lora(const TgRunSpec *spec, TgLoraConfig *cfg);
/* The LoRA settings as a run records them and a resume compares them (spec->lora_rank > 0;
 * nothing otherwise): lora_alpha resolved (2 x rank when 0), lora_targets in their canonical order
 * (all seven when NULL), its text in `targets` (cap 64 holds every target). */
TgStatus tg_run_spec_resolve_lora(TgRunSpec *spec, char *targets, size_t cap);
/* Fills warmup, min_lr and the FFN hidden rule (the preset's) when they were left to their defaults. */
void tg_train_options_derive(TgTrainOptions *o);

/* The options as the rooms below the CLI read them, once validated and their defaults derived
 * (tg_train_options_request): each concern const, and of the record of where values came from
 * only what they need: which settings of the spec were given, for the checks against a base's or
 * a resumed run's (tg_run_spec_check_*), and where eval_tasks came from, for a message. */
typedef struct TgTrainRequest {
    const TgRunSpec *spec;
    const TgTrainSchedule *schedule;
    const TgTrainInvocation *invocation;
    TgOptSet given;                           /* the settings given (bits of tg_train_option_table) */
    char eval_tasks_origin[TG_PATH_CAP + 32]; /* " (RUN/train_options.txt line 7)" when the run's file gave them; "" */
} TgTrainRequest;
/* Validates o (tg_train_options_validate), derives its defaults (tg_train_options_derive) and
 * fills *req, which points into o. */
TgStatus tg_train_options_request(TgTrainOptions *o, TgTrainRequest *req);

/* A run's spec in its run.txt at `path` (its TG_TRAIN_OPT_IDENTITY settings), and read back: every
 * value range-checked, string values in `strings`; seed -1 and tokenizer TG_TOKENIZER_FROM_PRESET
 * when the file does not say them. */
TgStatus tg_run_spec_write(const char *path, const TgRunSpec *spec);
TgStatus tg_run_spec_read(const char *path, TgRunSpec *spec, TgOptStrings *strings);
/* Every identity or shape setting given now (`given`) must equal the resumed run's (`stored`: its
 * run.txt, with the checkpoint's model shape). Values are compared as a new run records them
 * (tg_run_spec_resolve_lora): alpha 8 is a rank-4 run's default, and targets v,q are its q,v; a
 * run.txt written before runs recorded them holds alpha 0 and no targets for the defaults. */
TgStatus tg_run_spec_check_resumed(const TgRunSpec *now, TgOptSet given, const TgRunSpec *stored);
/* The shape settings given now (`given`), its preset, tokenizer and ffn among them, must be the
 * base's (`base`: its run.txt, with its checkpoint's shape `base_cfg`), which a run started from it
 * keeps; seq_len may change. `name` is the base as --init-from gave it. */
TgStatus tg_run_spec_check_base(const TgRunSpec *now, TgOptSet given, const TgRunSpec *base,
                                const TgModelConfig *base_cfg, const char *name);

/* " (RUN/train_options.txt line 7)" when the value of a setting ("eval_tasks") came from that file on
 * a resume; else "". */
const char *tg_train_options_origin(const TgTrainOptions *o, const char *setting, char *buf, size_t cap);
/* Writes the schedule (the TG_TRAIN_OPT_SAVED options) to DIR/train_options.txt. */
TgStatus tg_train_schedule_save(const char *dir, const TgTrainSchedule *schedule);
/* For `train --resume RUN`: reads RUN's train_options.txt into every saved option not given now
 * (each value range-checked). *saved (may be NULL) receives the file's values, so the caller can
 * say which given flags change them. A run without the file keeps o as it is. */
TgStatus tg_train_options_restore(const char *resume, TgTrainOptions *o, TgTrainOptions *saved, TgOptStrings *strings);

#endif
