/* A log that grows line by line in a folder of the user's (metrics.jsonl, grads.jsonl, log.txt):
 * appended to in place, never replaced, and never lost to a full disk.
 *
 * The file is opened for appending, created when missing, and never through a symlink (a run
 * folder from elsewhere could point metrics.jsonl at any file of the user's) nor onto anything
 * but a regular file. Text goes in through a stdio stream; tg_append_file_flush hands it to write(2). What
 * the file refuses (a full disk, a quota) waits in memory and goes out, in order, with the next
 * flush that can write it, so a run that outlives a full disk keeps every line once space is
 * free again; tg_append_file_error says whether anything waits. Beyond TG_APPEND_FILE_PENDING_MAX
 * bytes waiting, newer text is dropped and counted instead (a disk that never frees up must not
 * take all the memory). */
#ifndef TAPEGRAD_SUPPORT_APPEND_FILE_H
#define TAPEGRAD_SUPPORT_APPEND_FILE_H

#include <stdint.h>
#include <stdio.h>

#include "tapegrad/error.h"

#define TG_APPEND_FILE_PENDING_MAX ((size_t)64 << 20)

typedef struct TgAppendFile {
    FILE *f;          /* fprintf into it; fflush(f) hands the text to the file */
    int fd;
    char path[4096];
    char *pending;    /* text the file refused, oldest first */
    size_t pending_len, pending_cap;
    int error;        /* errno of the last write the file refused; 0 while nothing waits */
    uint64_t dropped; /* bytes given up because TG_APPEND_FILE_PENDING_MAX were waiting */
} TgAppendFile;

/* Opens `path` for appending (its address must stay put while open: the stream points at it). */
TgStatus tg_append_file_open(TgAppendFile *af, const char *path);
/* Whether the file at the path is still the one open: 0 when it is; 1 when it was removed or
 * replaced (by a rename, or by anything but a regular file) and a new file was created there, to
 * which the lines go from now on; -errno when none could be (they go on to the one open, which is
 * no longer at the path). A run calls it before each line, so that a log removed while it trains
 * comes back at its next line. A path whose folder is gone is left alone (0): the folder moved, and
 * its owner says where (tg_append_file_moved). */
int tg_append_file_recheck(TgAppendFile *af);
/* The open file is now at `path` (its folder was renamed). */
void tg_append_file_moved(TgAppendFile *af, const char *path);
/* Hands what the stream holds, and what waits, to the file. Returns tg_append_file_error. */
int tg_append_file_flush(TgAppendFile *af);
/* 0 when the file holds everything flushed so far; else the errno of the write it refused (the
 * text waits for the next flush). */
int tg_append_file_error(const TgAppendFile *af);
/* Flushes (one more try for what waits), closes, and frees. Returns the errno of what could not
 * be written in the end, 0 when nothing was lost. Nothing when af was never opened. */
int tg_append_file_close(TgAppendFile *af);

#endif
