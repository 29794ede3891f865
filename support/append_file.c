#include "support/append_file.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Writes what waits; true when nothing does any more. */
static bool write_pending(TgAppendFile *af) {
    size_t done = 0;
    while (done < af->pending_len) {
        ssize_t n = write(af->fd, af->pending + done, af->pending_len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            af->error = n < 0 ? errno : EIO;
            break;
        }
        done += (size_t)n;
    }
    memmove(af->pending, af->pending + done, af->pending_len - done);
    af->pending_len -= done;
    if (af->pending_len == 0) af->error = 0;
    return af->pending_len == 0;
}

/* The stream's write: the text joins what waits, then as much as the file takes is written. It
 * always reports success to stdio, so the stream itself never enters an error state: the error is
 * af->error's to tell. */
static ssize_t stream_write(void *cookie, const char *buf, size_t n) {
    TgAppendFile *af = cookie;
    if (af->pending_len + n > TG_APPEND_FILE_PENDING_MAX) {
        af->dropped += n;
        return (ssize_t)n;
    }
    if (af->pending_len + n > af->pending_cap) {
        size_t cap = af->pending_cap ? af->pending_cap : 4096;
        while (cap < af->pending_len + n) cap *= 2;
        af->pending = tg_realloc(af->pending, cap);
        af->pending_cap = cap;
    }
    memcpy(af->pending + af->pending_len, buf, n);
    af->pending_len += n;
    write_pending(af);
    return (ssize_t)n;
}

static int stream_close(void *cookie) {
    (void)cookie;
    return 0;
}

TgStatus tg_append_file_open(TgAppendFile *af, const char *path) {
    memset(af, 0, sizeof *af);
    af->fd = -1;
    if (strlen(path) >= sizeof af->path) return tg_fail(TG_ERR_ARG, "path too long: %s", path);
    /* O_NONBLOCK: a FIFO in its place must not block the open (it is refused just below) */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ELOOP)
        return tg_fail(TG_ERR_IO, "%s is a symbolic link; tapegrad does not write through one (replace it by a file)", path);
    if (fd < 0) return tg_fail(TG_ERR_IO, "cannot write %s: %s; pass a writable `out_dir`", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return tg_fail(TG_ERR_IO, "%s is not a regular file; replace it by a file", path);
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    af->fd = fd;
    snprintf(af->path, sizeof af->path, "%s", path);
    af->f = fopencookie(af, "a", (cookie_io_functions_t){.write = stream_write, .close = stream_close});
    if (!af->f) tg_abort_at(__FILE__, __LINE__, "fopencookie for %s failed: %s", path, strerror(errno));
    return TG_OK;
}

/* Whether the folder of `path` is there. */
static bool folder_exists(const char *path) {
    char folder[sizeof ((TgAppendFile *)0)->path];
    snprintf(folder, sizeof folder, "%s", path);
    char *slash = strrchr(folder, '/');
    if (!slash) return true;
    if (slash == folder) slash++;
    *slash = '\0';
    struct stat st;
    return stat(folder, &st) == 0 && S_ISDIR(st.st_mode);
}

int tg_append_file_recheck(TgAppendFile *af) {
    if (!af->f) return 0;
    struct stat open_one, named;
    int named_ok = lstat(af->path, &named), named_err = named_ok ? errno : 0;
    if (fstat(af->fd, &open_one) == 0 && named_ok == 0 && open_one.st_ino == named.st_ino &&
        open_one.st_dev == named.st_dev)
        return 0;
    if (named_err == ENOENT && !folder_exists(af->path)) return 0; /* moved: tg_append_file_moved */
    fflush(af->f); /* what the stream holds belongs to the file it was written for */
    int fd = open(af->path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        close(fd);
        fd = -1, errno = EEXIST;
    }
    if (fd < 0) return -(errno ? errno : EIO);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    close(af->fd);
    af->fd = fd;
    return 1;
}

void tg_append_file_moved(TgAppendFile *af, const char *path) {
    if (af->f && strlen(path) < sizeof af->path) snprintf(af->path, sizeof af->path, "%s", path);
}

int tg_append_file_flush(TgAppendFile *af) {
    if (!af->f) return 0;
    fflush(af->f);
    if (af->pending_len) write_pending(af);
    return af->error;
}

int tg_append_file_error(const TgAppendFile *af) { return af->error; }

int tg_append_file_close(TgAppendFile *af) {
    if (!af->f) return 0;
    tg_append_file_flush(af);
    int err = af->pending_len ? af->error : 0;
    if (!err && af->dropped) err = ENOSPC;
    fclose(af->f);
    close(af->fd);
    free(af->pending);
    memset(af, 0, sizeof *af);
    af->fd = -1;
    return err;
}
