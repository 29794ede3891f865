/* A run folder: tokenizer.txt, train.tok, val.tok, run.txt, train_options.txt, metrics.jsonl,
 * probes.jsonl, ckpt-*.tgck, latest, best. Opening one for training prepares the data and builds
 * (or restores) the model; opening one for sampling or evaluation loads the tokenizer and the
 * newest checkpoint.
 *
 * Training one goes in four stages, so that a run that fails before its first step leaves no
 * trace: tg_run_open_for_training checks everything and, for a new run, builds it in a temporary
 * folder (run_folder.h) while a resumed run's folder is only read; tg_run_start readies the folder
 * once the trainer's own checks passed too; tg_run_commit moves a new run's folder into place after
 * the first step; tg_run_discard, on a failure before that, removes what the new run created. */
#ifndef TAPEGRAD_RUN_H
#define TAPEGRAD_RUN_H

#include <stdbool.h>
#include <stdio.h>

#include "tapegrad/tokenizer.h"
#include "data/prepare.h"
#include "data/sft_data.h"
#include "data/split.h"
#include "data/tokfile.h"
#include "support/append_file.h"
#include "support/folder_lock.h"
#include "support/messages.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_folder.h"
#include "tapegrad/model.h"
#include "run/run_folder.h"
#include "run/train_options.h"
#include "tapegrad/sample.h"

typedef struct TgRun {
    char dir[TG_PATH_CAP]; /* where its files are now: a new run's temporary folder until tg_run_commit */
    TgRunFolder folder; /* a new run's; zeroed for a resumed or read-only run */
    TgFolderLock lock;  /* a run opened for training holds its folder's TG_RUN_LOCK_FILE */
    TgTokenizer tok;
    TgModel model;
    bool model_built;
    TgSplit train, val;     /* its data (data/split.h): text from the run folder or its dataset, or conversations */
    char dataset[TG_PATH_CAP]; /* the dataset folder it trains on (--dataset), "" when prepared into the run */
    char base_train_tokens[TG_PATH_CAP]; /* a new run from a base run: the base's train tokens ("" unknown) */
    TgTrainTask task;       /* what it trains on: text, conversations to fine-tune on, or preference pairs */
    double dpo_beta;        /* a dpo run's beta: from --beta (its default filled in), or from run.txt on a resume */
    TgChatTemplate chat_template; /* how its conversations render: from --chat-template, or run.txt */
    TgTrainerState state;
    bool resumed;
    TgPrecision precision;  /* its linear layers' products: from --precision, or from run.txt on a resume */
    TgBestMetric keep_best; /* the figure its best checkpoint is kept by: from --keep-best, or from run.txt on a resume */
    bool initialized_from_file; /* --init-from: weights from a safetensors file, a run or a checkpoint */
    TgAppendFile metrics;     /* metrics.jsonl, once tg_run_start opened it */
    int metrics_error;      /* the errno its writes last reported to `messages` (0: none) */
    int metrics_gone;       /* the errno of a failed recreation of it, said once (0: none) */
    TgAppendFile probes;    /* probes.jsonl, opened before the first step (tg_run_open_probes) */
    int probes_error, probes_gone;
    char last_checkpoint[TG_PATH_CAP];
    TgMessageSink messages; /* what the run says while it opens, starts and commits (support/messages.h) */
} TgRun;

/* Prepares a new run of the request's spec in its temporary folder (or reads the invocation's
 * resume, changing nothing in it). The run folder is locked first (a new run's temporary one,
 * whose lock moves with it); a folder another process trains in is refused with its PID. A resume
 * refuses identity and shape settings given now that differ from the run's. On
 * failure, tg_run_discard removes what the new run created.
 * writes == false opens a replica, for the ranks of a data-parallel run other than rank 0
 * (lib/dist.h): a new run's corpus is prepared in memory and no folder is chosen, made or
 * locked, a resumed run is read as always; either way nothing is written, and tg_run_start is not
 * called. What it prepares, and notes, go to `messages` (may be NULL), kept for tg_run_start and
 * tg_run_commit; the progress of preparing --data to `preparing` (may be NULL).
 *
 * The data: with --dataset the run reads that dataset folder's token files and keeps a copy of its
 * tokenizer and manifest (dataset.json) in the run folder; run.txt records the dataset's path, and
 * a resume refuses a dataset whose fingerprint is not the one the copy records. Without it, --data
 * is prepared into the run folder itself (data/prepare.h), which then holds a dataset's files.
 *
 * --init-from a run or checkpoint: the new run takes its weights, shape and tokenizer (a shape
 * flag that differs is refused, naming both; --seq may change), and its --data is encoded with
 * that tokenizer (a --dataset must have been prepared with it). run.txt records the checkpoint
 * (absolute) and its weights' fingerprint.
 *
 * Fine-tuning (--task sft): the conversations of --data are prepared into the run folder
 * (data/sft_data.h) with the tokenizer of the run or checkpoint --init-from names, or of
 * --tokenizer hf:FILE. */
TgStatus tg_run_open_for_training(const TgTrainRequest *req, bool writes, const TgMessageSink *messages,
                                  const TgPrepareReporter *preparing, TgRun *run);
/* Readies the folder for training: a resumed run's stale temporary files are removed and the
 * metrics and probe continuations it logged after its checkpoint dropped; metrics.jsonl is
 * opened. */
TgStatus tg_run_start(TgRun *run);
/* Moves a new run's folder into place (run->dir is then its path); nothing for a resumed run. */
TgStatus tg_run_commit(TgRun *run);
/* A new run not yet committed removes its temporary folder and the parents it made; a resumed
 * run's folder, or a committed one, is never touched. */
void tg_run_discard(TgRun *run);
/* For sample/eval/inspect: DIR (its latest checkpoint) or a checkpoint file inside a run folder.
 * The run's tokenizer must match the checkpoint's. */
TgStatus tg_run_open_existing(const char *dir_or_file, TgRun *run);
/* What the run in DIR is (DIR/run.txt: its TG_TRAIN_OPT_IDENTITY options), every value range-checked;
 * TG_ERR_FORMAT for a bad or incomplete file. String values live in `strings`. */
TgStatus tg_run_identity_read(const char *dir, TgRunSpec *id, TgOptStrings *strings);
/* Frees everything and releases the folder's lock. */
void tg_run_close(TgRun *run);
/* The val split of an opened run (tg_run_open_existing), from its folder or its dataset, refused unless
 * every id is one the run's tokenizer, and so its model, knows; into run->val (text windows, or
 * the conversations of a fine-tuning run). */
TgStatus tg_run_open_val(TgRun *run);
/* What the run in DIR trains on (its run.txt's --task; a run folder without run.txt pretrains). */
TgStatus tg_run_task(const char *dir, TgTrainTask *task);
/* How the run in DIR renders its conversations (its run.txt's --chat-template; ChatML when it
 * records none). */
TgStatus tg_run_chat_template(const char *dir, TgChatTemplate *t);

/* A figure of a metrics line besides the fixed ones: a task's accuracy ("task/NAME/acc"). */
typedef struct TgRunMetric {
    const char *name;
    double value;
} TgRunMetric;

/* One line of metrics.jsonl. A field that is not a finite number is left out of the line: a step
 * without an evaluation has no val_loss, an evaluation alone no loss. The `extra` figures follow
 * the fixed ones, in their order. */
typedef struct TgRunMetrics {
    int64_t step;
    double loss, val_loss, val_bpb, lr, grad_norm, tokens_per_s, elapsed_s;
    const TgRunMetric *extra; /* n_extra of them, or NULL */
    int n_extra;
} TgRunMetrics;
/* A line of `step` with every field left out, for the caller to fill. */
TgRunMetrics tg_run_metrics_at(int64_t step);
void tg_run_log_metrics(TgRun *run, const TgRunMetrics *m);
/* The prompt with which a run's sample starts (`tapegrad sample`, and the sample a finished run
 * ends with): a newline, where a record of the corpus begins. */
#define TG_RUN_SAMPLE_PROMPT "\n"

/* Encodes prompt (empty: the <eot> token), generates up to n tokens (tg_sample_text) as `sampling`
 * says with a generator seeded with `seed`, and returns their text (*text malloc'ed, the caller
 * frees it). */
TgStatus tg_run_sample(TgRun *run, TgTape *tape, const char *prompt, int64_t n, const TgSampleOptions *sampling, uint64_t seed,
                    char **text, size_t *text_len);
/* The greedy continuation (the most likely token each time) of the prompt ids[0..n), 1 <= n <=
 * the context, by up to n_new tokens: *text (malloc'ed, the caller frees it) receives its text up
 * to the first <eot> (in a fine-tuning run, <|im_end|> too), which is left out. */
TgStatus tg_run_continue_greedily(TgRun *run, TgTape *tape, const int32_t *ids, int64_t n, int64_t n_new, char **text,
                                  size_t *text_len);

/* Opens probes.jsonl (TG_RUN_PROBES_FILE) for appending, as metrics.jsonl is: before the first step
 * of a run with probe prompts, so that a file it cannot write (a symlink planted there, a folder
 * it may not write) stops the run before it trained, never after. */
TgStatus tg_run_open_probes(TgRun *run);
/* A line {"step":N,"prompt":"...","text":"..."} of probes.jsonl (opened by tg_run_open_probes;
 * nothing when it is not open): the continuation `text` of the probe prompt `prompt` at `step`
 * (train/probe_prompts.h). A full disk is waited out as metrics.jsonl's is. */
void tg_run_log_probe(TgRun *run, int64_t step, const char *prompt, size_t prompt_len, const char *text,
                      size_t text_len);

#endif
