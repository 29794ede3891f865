/* One process at a time in a folder: an exclusive flock(2) on a lock file inside it.
 *
 * A trainer holds its run folder's lock from before it reads the folder until it exits, so a
 * second trainer started on the same folder is refused at once (LOCK_NB), with the holder's PID
 * in the message, instead of training over the first one's checkpoints and sweeping its
 * in-flight temporary files. The kernel drops the lock when the holder closes it or dies, even
 * by SIGKILL: a lock is never stale.
 *
 * The lock file is the one file tapegrad does not write through support/atomic_file.h: a flock lives
 * on an inode, and replacing the file by a rename would let two processes lock two different
 * inodes under one name. It holds the holder's PID as text, for messages only; it is never
 * deleted (deleting a lock file races with a process that has just opened it).
 */
#ifndef TAPEGRAD_SUPPORT_FOLDER_LOCK_H
#define TAPEGRAD_SUPPORT_FOLDER_LOCK_H

#include <stdbool.h>

#include "tapegrad/error.h"

/* A zeroed TgFolderLock is not held. */
typedef struct TgFolderLock {
    bool held;
    int fd;
} TgFolderLock;

/* Creates FOLDER/NAME if missing (never through a symlink) and locks it, or fails: TG_ERR_IO
 * "FOLDER is in use by process PID ..." when another process holds it. */
TgStatus tg_folder_lock_acquire(TgFolderLock *lock, const char *folder, const char *name);
/* Releases a held lock (the file stays); nothing for an unheld one. */
void tg_folder_lock_release(TgFolderLock *lock);

#endif
