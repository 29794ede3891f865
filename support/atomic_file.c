#include "support/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/fault.h"
#include "support/path.h"

static char *copy_string(const char *s) {
    size_t n = strlen(s) + 1;
    char *c = tg_malloc(n);
    memcpy(c, s, n);
    return c;
}

static void release(TgAtomicFile *af) {
    free(af->path);
    free(af->tmp);
    af->path = af->tmp = NULL;
    af->f = NULL;
    af->fd = -1;
}

TgStatus tg_atomic_file_open(TgAtomicFile *af, const char *path) {
    memset(af, 0, sizeof *af);
    af->fd = -1;
    size_t cap = strlen(path) + 32;
    af->tmp = tg_malloc(cap);
    snprintf(af->tmp, cap, "%s.%ld.tmp", path, (long)getpid());
    af->path = copy_string(path);
    int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC; /* O_EXCL already fails on a link */
    af->fd = open(af->tmp, flags, 0644);
    if (af->fd < 0 && errno == EEXIST) {
        /* our pid's name: left by a writer that died with this pid before us, never a live one.
         * unlink removes a symlink itself, not its target, and O_EXCL then creates afresh. */
        unlink(af->tmp);
        af->fd = open(af->tmp, flags, 0644);
    }
    if (af->fd < 0) {
        TgStatus s = tg_fail(TG_ERR_IO, "cannot create %s: %s (does the folder exist and is it writable?)",
                              af->tmp, strerror(errno));
        release(af);
        return s;
    }
    return TG_OK;
}

FILE *tg_atomic_file_stream(TgAtomicFile *af) {
    if (!af->f) {
        af->f = fdopen(af->fd, "wb");
        if (!af->f) tg_abort_at(__FILE__, __LINE__, "fdopen of %s failed: %s", af->tmp, strerror(errno));
    }
    return af->f;
}

void tg_sync_parent_folder(const char *path) {
    size_t cap = strlen(path) + 2;
    char *dir = tg_malloc(cap);
    tg_path_folder(path, dir, cap);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    /* a folder we cannot open only loses the rename's durability, not the contents */
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

TgStatus tg_atomic_file_commit(TgAtomicFile *af) {
    int err = fault_write_fails(af->path) ? ENOSPC : 0; /* tests only: support/fault.h */
    if (af->f) {
        if (ferror(af->f) || fflush(af->f) != 0) err = errno ? errno : EIO;
    }
    if (!err && fsync(af->fd) != 0) err = errno;
    int closed = af->f ? fclose(af->f) : close(af->fd);
    if (closed != 0 && !err) err = errno;
    af->f = NULL;
    af->fd = -1;
    if (!err && rename(af->tmp, af->path) != 0) err = errno;
    TgStatus s = TG_OK;
    if (err) {
        unlink(af->tmp);
        s = tg_fail(TG_ERR_IO, "cannot write %s: %s; the previous %s is untouched", af->path, strerror(err),
                    af->path);
    } else {
        tg_sync_parent_folder(af->path);
    }
    release(af);
    return s;
}

void tg_atomic_file_abandon(TgAtomicFile *af) {
    if (af->f) fclose(af->f);
    else if (af->fd >= 0) close(af->fd);
    if (af->tmp) unlink(af->tmp);
    release(af);
}

TgStatus tg_atomic_write(const char *path, const void *data, size_t len) {
    TgAtomicFile af;
    TG_TRY(tg_atomic_file_open(&af, path));
    const char *p = data;
    while (len > 0) {
        ssize_t n = write(af.fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            TgStatus s = tg_fail(TG_ERR_IO, "cannot write %s: %s; the previous %s is untouched", path,
                                  n < 0 ? strerror(errno) : "no progress", path);
            tg_atomic_file_abandon(&af);
            return s;
        }
        p += n;
        len -= (size_t)n;
    }
    return tg_atomic_file_commit(&af);
}

TgStatus tg_make_folders(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0) return tg_fail(TG_ERR_ARG, "empty folder name");
    if (n >= sizeof buf) return tg_fail(TG_ERR_ARG, "path too long: %s", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return tg_fail(TG_ERR_IO, "cannot create folder %s: %s", buf, strerror(errno));
        buf[i] = saved;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return tg_fail(TG_ERR_IO, "%s exists and is not a folder", path);
    return TG_OK;
}
