#include "lib/file_read.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

FILE *file_open_read(const char *path) {
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

const char *file_open_error(int err) { return err == EINVAL ? "not a regular file" : strerror(err); }
