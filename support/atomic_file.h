/* Replacing a file so that a crash at any moment leaves either the old file or the whole new
 * one, never a torn one: every file tapegrad writes (checkpoints, `latest`, tokenizers, token
 * files, safetensors, reports, run descriptions) goes through here.
 *
 *   1. the new contents go to a temporary file beside the target, "<path>.<pid>.tmp", created
 *      exclusively (O_CREAT | O_EXCL: never an existing file, never through a symlink);
 *   2. commit: flush, fsync the file, close, rename over <path>, fsync the folder so that the
 *      rename itself survives a power cut;
 *   3. any failure removes the temporary file and leaves <path> as it was.
 * The test variant of the program can make a commit fail as a full disk would (support/fault.h).
 * Names ending in ".tmp" are therefore only ever leftovers of a writer that died: the run folder
 * (locked by its trainer) sweeps them.
 */
#ifndef TAPEGRAD_SUPPORT_ATOMIC_FILE_H
#define TAPEGRAD_SUPPORT_ATOMIC_FILE_H

#include <stddef.h>
#include <stdio.h>

#include "tapegrad/error.h"

typedef struct TgAtomicFile {
    int fd;       /* the temporary file: write with write(2) ... */
    FILE *f;      /* ... or through this stream (tg_atomic_file_stream) */
    char *path;   /* the target */
    char *tmp;    /* the temporary file */
} TgAtomicFile;

/* Creates the temporary file for `path`. On failure nothing exists and *af needs no cleanup. */
TgStatus tg_atomic_file_open(TgAtomicFile *af, const char *path);
/* A stdio stream over the temporary file (created once; fprintf into it). */
FILE *tg_atomic_file_stream(TgAtomicFile *af);
/* Makes the new contents the file at `path` (steps 2 above). Whatever the result, af is spent. */
TgStatus tg_atomic_file_commit(TgAtomicFile *af);
/* Gives up: the temporary file goes, `path` stays as it was. */
void tg_atomic_file_abandon(TgAtomicFile *af);

/* (A log that grows line by line is appended to in place instead: support/append_file.h.) */

/* The whole file at once: tg_atomic_file_open, write `len` bytes, tg_atomic_file_commit. */
TgStatus tg_atomic_write(const char *path, const void *data, size_t len);
/* Creates a folder and its missing parents (as mkdir -p). */
TgStatus tg_make_folders(const char *path);
/* fsync of the folder holding `path` (after a rename or an unlink that must survive a crash). */
void tg_sync_parent_folder(const char *path);

#endif
