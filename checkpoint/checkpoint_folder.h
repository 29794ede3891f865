/* Checkpoints in a run folder, and saving them without stalling training.
 *
 * A run folder holds DIR/ckpt-<step, 8 digits>.tgck files and DIR/latest, a one-line file naming
 * the newest good one. A save writes the checkpoint (atomically: see checkpoint.h), then
 * rewrites `latest` the same way, then deletes all but the newest `keep` checkpoints. A save
 * killed at any moment leaves `latest` naming a complete checkpoint (the new one or the one
 * before), plus perhaps a stray *.tmp that the next run removes.
 *
 * A run that keeps its best checkpoint (--keep-best) also has DIR/best, naming the checkpoint
 * its trainer state's best record points at (TgBestRecord) on its first line, then the figure
 * and its value, then the step:
 *     ckpt-00000040.tgck
 *     val_loss 2.1234567890123457
 *     step 40
 * A save of that checkpoint rewrites `best` (atomically, after `latest`); no save deletes the
 * checkpoint the record names, nor the one `best` names (they differ when a best's save failed). A
 * save killed before `best` was rewritten leaves it naming the best before; the trainer writes
 * it again from the record of the checkpoint it resumes from (tg_checkpoint_write_best).
 *
 * The background saver copies the weights, AdamW moments and trainer state into a buffer it
 * allocated up front (the only pause training sees), then compresses and writes from that copy
 * on its own thread. At most one save is in flight: starting one waits for the previous. An
 * error of the background writer is returned by the next start or wait.
 */
#ifndef TAPEGRAD_CHECKPOINT_FOLDER_H
#define TAPEGRAD_CHECKPOINT_FOLDER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "checkpoint/checkpoint.h"

#define TG_CHECKPOINT_BEST_FILE "best"

/* What a save keeps: the newest `newest` checkpoints (0: all) and, with `best`, the one of the
 * state's best record, which DIR/best names with the figure `metric` ("val_loss"). */
typedef struct TgCheckpointKeep {
    int newest;
    bool best;
    char metric[32];
} TgCheckpointKeep;

/* Writes DIR/ckpt-<step>.tgck, points DIR/latest at it (and DIR/best, when it is the best kept),
 * deletes the checkpoints `keep` does not keep. path_out (may be NULL) receives the checkpoint's
 * path. */
TgStatus tg_checkpoint_save_in_folder(const char *dir, const TgCheckpointSource *src, const TgCheckpointKeep *keep,
                                      char *path_out, size_t path_cap);
/* Points DIR/best at the checkpoint of `record`, named with `metric`; removes it for a record of no
 * evaluation yet (step -1). Fails, leaving DIR/best as it was, when that checkpoint is not on disk. */
TgStatus tg_checkpoint_write_best(const char *dir, const char *metric, const TgBestRecord *record);
/* "ckpt-00000020.tgck": the checkpoint DIR/best names, when it is on disk; else "none". */
void tg_checkpoint_folder_best(const char *dir, char *buf, size_t cap);
/* A checkpoint file from DIR (via DIR/latest) or a file path as given. */
TgStatus tg_checkpoint_resolve(const char *dir_or_file, char *path_out, size_t path_cap);
/* Removes the *.tmp files a killed save can leave in DIR. */
void tg_checkpoint_folder_remove_stale(const char *dir);
/* "ckpt-00000010.tgck, ckpt-00000020.tgck" : the checkpoints in DIR other than `except` (a file
 * name or NULL), newest first; empty when there are none. */
void tg_checkpoint_folder_others(const char *dir, const char *except, char *buf, size_t cap);

typedef struct TgCheckpointSaver {
    char dir[TG_PATH_CAP];
    TgCheckpointKeep keep;
    TgParamStore *layout;        /* the model's: names, shapes and offsets (not owned) */
    float *snapshot;           /* 3 * layout->total floats: weights, m, v */
    TgCheckpointSource src;      /* points into snapshot */
    pthread_t thread;
    bool in_flight;
    TgStatus result;          /* of the save the thread last ran */
    char error[2048];
    char writing[TG_PATH_CAP];     /* the path the thread writes */
    char last_saved[TG_PATH_CAP];  /* the newest checkpoint known to be complete */
    int64_t saves;
    double pause_s;            /* training time spent copying into the snapshot, summed */
    double blocked_s;          /* training time spent waiting for the previous save to finish */
    double write_s;            /* background time compressing and writing, summed */
} TgCheckpointSaver;

/* Allocates the snapshot buffer for `model` (whose parameter store must outlive the saver). */
void tg_checkpoint_saver_init(TgCheckpointSaver *s, const char *dir, const TgCheckpointKeep *keep, TgModel *model);
/* Waits for the previous save (returning its error, if any, without starting a new one), then
 * snapshots the model and state and starts writing them in the background. */
TgStatus tg_checkpoint_saver_start(TgCheckpointSaver *s, const TgModel *model, uint64_t tokenizer_fingerprint,
                                 const TgTrainerState *state);
/* Waits for the save in flight, if any; returns its status (the message names the file). */
TgStatus tg_checkpoint_saver_wait(TgCheckpointSaver *s);
/* After a save failed (the status of a wait or start): writes the same snapshot again, here and
 * now. A save of a new best checkpoint is tried again so: its weights exist nowhere else. */
TgStatus tg_checkpoint_saver_retry(TgCheckpointSaver *s);
/* Waits, then frees the buffer. */
void tg_checkpoint_saver_free(TgCheckpointSaver *s);

#endif
