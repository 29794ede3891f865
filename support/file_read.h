/* Opening a file to read it, when it is one. A run folder from elsewhere may hold a FIFO where
 * a file should be (the open would block for good) or a symlink to a device such as /dev/zero
 * (a line reader would never reach the end of its first line); every reader of such a folder's
 * files opens them through here, and every reader of a whole file reads it with tg_file_read_all. */
#ifndef TAPEGRAD_SUPPORT_FILE_READ_H
#define TAPEGRAD_SUPPORT_FILE_READ_H

#include <stddef.h>
#include <stdio.h>

#include "tapegrad/error.h"

/* A stream to read `path` (symlinks followed) if it is a regular file; NULL with errno set
 * otherwise: EINVAL for a file of another kind, without ever blocking on it. */
FILE *tg_file_open_read(const char *path);
/* Words the errno of a failed tg_file_open_read: "not a regular file" (for a folder too), or strerror's text. */
const char *tg_file_open_error(int err);

/* The whole of the regular file `path`, at most max_bytes of it, into *contents (malloc'ed, the
 * caller frees it; a NUL follows the *size bytes, for text). Never aborts, whatever the size:
 * TG_ERR_IO for a missing, unreadable or irregular file or a failed read, TG_ERR_FORMAT for a file
 * larger than max_bytes, TG_ERR_NOMEM when its memory cannot be had. The message says what, not
 * which file: the caller names it (tg_fail_context). */
TgStatus tg_file_read_all(const char *path, size_t max_bytes, char **contents, size_t *size);

#endif
