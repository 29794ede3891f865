/* File helpers shared by the data module; not part of the public API. */
#ifndef TAPEGRAD_DATA_FILEUTIL_H
#define TAPEGRAD_DATA_FILEUTIL_H

#include <stdio.h>

#include "lib/error.h"

/* Opens "<path>.tmp" for writing; the name goes into tmp (cap bytes). */
tg_status data_open_tmp(const char *path, char *tmp, size_t cap, FILE **f);

/* Flushes, fsyncs and closes f, renames tmp to path and fsyncs the folder, so a crash leaves
 * either the old file or the whole new one. On any failure removes tmp. f is always closed. */
tg_status data_commit_tmp(FILE *f, const char *tmp, const char *path);

/* Closes f and removes tmp (the error path of a writer). */
void data_abandon_tmp(FILE *f, const char *tmp);

/* Makes a rename into path's folder durable (fsync of the folder; failures ignored). */
void data_sync_parent_dir(const char *path);

/* Creates a folder and its missing parents (like mkdir -p). */
tg_status data_mkdirs(const char *path);

#endif
