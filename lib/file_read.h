/* Opening a file to read it, when it is one. A run folder from elsewhere may hold a FIFO where
 * a file should be (the open would block for good) or a symlink to a device such as /dev/zero
 * (a line reader would never reach the end of its first line); every reader of such a folder's
 * files opens them through here. */
#ifndef TAPEGRAD_FILE_READ_H
#define TAPEGRAD_FILE_READ_H

#include <stdio.h>

/* A stream to read `path` (symlinks followed) if it is a regular file; NULL with errno set
 * otherwise: EINVAL for a file of another kind, without ever blocking on it. */
FILE *file_open_read(const char *path);
/* Words the errno of a failed file_open_read: "not a regular file", or strerror's text. */
const char *file_open_error(int err);

#endif
