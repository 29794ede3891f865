#include "support/file_read.h"

#include <stdbool.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

FILE *tg_file_open_read(const char *path) {
    /* O_NONBLOCK: opening a FIFO that no one writes returns at once instead of waiting */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    int err = fstat(fd, &st) != 0 ? errno : S_ISREG(st.st_mode) ? 0 : S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
    if (err) {
        close(fd);
        errno = err;
        return NULL;
    }
    /* back to blocking reads: a regular file never waits, and stdio expects them */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) close(fd);
    return f;
}

const char *tg_file_open_error(int err) {
    return err == EINVAL ? "not a regular file" : err == EISDIR ? "not a regular file (a directory)" : strerror(err);
}

TgStatus tg_file_read_all(const char *path, size_t max_bytes, char **contents, size_t *size) {
    *contents = NULL, *size = 0;
    FILE *f = tg_file_open_read(path);
    if (!f) return tg_fail(TG_ERR_IO, "cannot open: %s", tg_file_open_error(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        int err = errno;
        fclose(f);
        return tg_fail(TG_ERR_IO, "cannot stat: %s", strerror(err));
    }
    if ((uint64_t)st.st_size > max_bytes) {
        fclose(f);
        return tg_fail(TG_ERR_FORMAT, "%jd bytes, more than the %zu this file may hold", (intmax_t)st.st_size, max_bytes);
    }
    size_t expected = (size_t)st.st_size;
    /* plain malloc: a huge file is the user's to hear about, not a reason to abort */
    char *buf = malloc(expected + 1);
    if (!buf) {
        fclose(f);
        return tg_fail(TG_ERR_NOMEM, "cannot allocate %zu bytes to read the file", expected);
    }
    size_t got = fread(buf, 1, expected, f);
    bool failed = ferror(f);
    int err = errno;
    fclose(f);
    if (failed || got != expected) {
        free(buf);
        return failed ? tg_fail(TG_ERR_IO, "read failed: %s", strerror(err))
                      : tg_fail(TG_ERR_IO, "file shrank while being read (%zu of %zu bytes)", got, expected);
    }
    buf[expected] = '\0';
    *contents = buf, *size = expected;
    return TG_OK;
}
