#include "support/folder_lock.h"
#include "support/path.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

/* The PID a holder wrote into the lock file, or "another process" when it has not yet. */
static void read_holder(int fd, char *buf, size_t cap) {
    char text[32];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    text[n > 0 ? n : 0] = '\0';
    long pid = 0;
    if (sscanf(text, "%9ld", &pid) == 1 && pid > 0) snprintf(buf, cap, "process %ld", pid);
    else snprintf(buf, cap, "another process");
}

TgStatus tg_folder_lock_acquire(TgFolderLock *lock, const char *folder, const char *name) {
    *lock = (TgFolderLock){false, -1};
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, folder, name));
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return tg_fail(TG_ERR_IO, "cannot open the lock file %s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        char holder[64];
        read_holder(fd, holder, sizeof holder);
        close(fd);
        if (err == EWOULDBLOCK)
            return tg_fail(TG_ERR_IO, "%s is in use: %s trains in it (it holds %s); wait for it to end, or stop it",
                           folder, holder, path);
        return tg_fail(TG_ERR_IO, "cannot lock %s: %s", path, strerror(err));
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) {
        TgStatus s = tg_fail(TG_ERR_IO, "cannot write the lock file %s: %s", path, strerror(errno));
        close(fd);
        return s;
    }
    *lock = (TgFolderLock){true, fd};
    return TG_OK;
}

void tg_folder_lock_release(TgFolderLock *lock) {
    if (lock->held) close(lock->fd); /* closing the only descriptor drops the flock */
    *lock = (TgFolderLock){false, -1};
}
