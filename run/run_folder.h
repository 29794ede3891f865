/* Where a new run is built before it becomes its run folder.
 *
 * A new run writes its files (tokenizer, token splits, run.txt, train_options.txt, metrics)
 * into a temporary folder, <name>.tmp-XXXXXX beside the run folder, and moves it into place in
 * one rename once the run has taken its first step (or stops before one and saves). A run that
 * fails before that removes the temporary folder and the parent folders it created, so a failed
 * start leaves nothing behind; a process killed before it leaves only the temporary folder,
 * named as such. A resumed run never uses one: its folder is in place and nothing removes it.
 *
 * --out may name a folder that already exists (made by the user, perhaps holding other files,
 * such as a job's log). The temporary folder is then made inside it, and its files are moved up
 * one by one at the commit: the folder and its other files stay as they were, on failure too.
 * A folder that already holds files of a run is refused, since two runs' files would mix.
 *
 * A run never goes among a project's sources: an existing folder inside a git work tree that
 * holds code files (.c, .h, .py, CMakeLists.txt, ...: tg_run_folder_code_file) is refused, and a
 * new folder made in such a folder is taken but noted (TgRunFolder.among_sources), for a warning.
 */
#ifndef TAPEGRAD_RUN_FOLDER_H
#define TAPEGRAD_RUN_FOLDER_H

#include <stdbool.h>

#include "tapegrad/error.h"
#include "tapegrad/limits.h"

/* What the run is (its shape, tokenizer and data) and how it trains, written by run/train_options.c */
#define TG_RUN_IDENTITY_FILE "run.txt"
#define TG_TRAIN_OPTIONS_FILE "train_options.txt"
/* The per-step metrics of a run folder */
#define TG_RUN_METRICS_FILE "metrics.jsonl"
/* The continuations of --probe-prompts at each evaluation (run.h: tg_run_log_probe) */
#define TG_RUN_PROBES_FILE "probes.jsonl"
/* What the run printed, every line, for a person (cli/train_report.h) */
#define TG_RUN_LOG_FILE "log.txt"
/* Locked (support/folder_lock.h) by the process training in the folder, from before it reads it. */
#define TG_RUN_LOCK_FILE "train.lock"

typedef struct TgRunFolder {
    char path[TG_PATH_CAP];        /* the run folder, as it will be named */
    char temp[TG_PATH_CAP];        /* where the run is built until the commit; "" when none */
    char made_parent[TG_PATH_CAP]; /* the outermost missing parent folder created for it; "" when none */
    char generated[TG_PATH_CAP];   /* without --out, the generated name: if taken, -2, -3, ... is appended */
    bool existed;           /* path was a folder before the run: files are moved into it */
    char among_sources[TG_PATH_CAP]; /* a new folder made in a folder of code files of a git work tree:
                                        "FOLDER holds FILE, in the git work tree ROOT"; "" otherwise */
    bool committed;
} TgRunFolder;

/* Whether a file of this name is source code (a project's files, where no run belongs). */
bool tg_run_folder_code_file(const char *name);

/* The run folder of `dir_or_file`: the folder itself, or the folder holding a checkpoint file.
 * TG_ERR_ARG when it does not fit cap. */
TgStatus tg_run_folder_of(const char *dir_or_file, char *out, size_t cap);

/* Whether `name` is the name of a file a run keeps in its folder: ckpt-*.tgck, latest,
 * tokenizer.txt, tokenizer.json, train.tok, val.tok, dataset.json, run.txt, train_options.txt, metrics.jsonl,
 * probes.jsonl, grads.jsonl, log.txt, best, train.lock. No command writes a file of that name into a run folder but the
 * trainer (run/output_check.h); *what (may be NULL) receives what the file is to the run ("the tokenizer"). */
bool tg_run_file_name(const char *name, const char **what);
/* Whether `dir` is a run folder. A run folder is known by its files, not its name: it holds
 * run.txt, tokenizer.txt, latest or a checkpoint. (train.lock alone does not make one: it is
 * the one file a command that failed on a folder could once leave there.) */
bool tg_run_folder_is_run(const char *dir);
/* What a user named as a run (`train --resume`, `sample --run`, `ckpt info`, `report`, ...): a
 * run folder, or a file inside one (a checkpoint). *dir receives the run folder. Anything else
 * is refused before anything is read, locked or created, with the one line every command gives:
 * "X is not a run folder or a checkpoint in one: a run folder holds ..." (TG_ERR_IO; TG_ERR_ARG
 * for an empty path). */
TgStatus tg_run_folder_locate(const char *given, char *dir, size_t cap);
/* Picks the folder of a new run, writing nothing: out_dir, or else the first free one of
 * `generated`, `generated`-2, -3, ... Refuses a path that is a file, a folder holding a run's
 * files, and a path whose nearest existing parent is not a writable folder. */
TgStatus tg_run_folder_choose(TgRunFolder *f, const char *out_dir, const char *generated);
/* Creates the missing parent folders and the temporary folder (f->temp). */
TgStatus tg_run_folder_begin(TgRunFolder *f);
/* Moves the temporary folder's contents to f->path (the path may change if a generated name
 * was taken meanwhile). Without a temporary folder (a resumed run) it does nothing. */
TgStatus tg_run_folder_commit(TgRunFolder *f);
/* Before the commit: removes the temporary folder and the parent folders begin made, if they are
 * empty. After it, or without a temporary folder: nothing. */
void tg_run_folder_discard(TgRunFolder *f);

#endif
