#include "data/fileutil.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

tg_status data_open_tmp(const char *path, char *tmp, size_t cap, FILE **f) {
    int n = snprintf(tmp, cap, "%s.tmp", path);
    if (n < 0 || (size_t)n >= cap) return tg_fail(TG_ERR_ARG, "path too long: %s", path);
    *f = fopen(tmp, "wb");
    if (!*f)
        return tg_fail(TG_ERR_IO, "cannot create %s: %s (does the folder exist and is it writable?)",
                       tmp, strerror(errno));
    return TG_OK;
}

void data_abandon_tmp(FILE *f, const char *tmp) {
    if (f) fclose(f);
    remove(tmp);
}

/* fsync of the folder makes the rename itself durable; failure here is not fatal for
 * correctness of the contents, so it is ignored. */
void data_sync_parent_dir(const char *path) {
    char copy[4096];
    size_t n = strlen(path);
    if (n >= sizeof copy) return;
    memcpy(copy, path, n + 1);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd < 0) return;
    (void)fsync(fd);
    close(fd);
}

tg_status data_commit_tmp(FILE *f, const char *tmp, const char *path) {
    int failed = ferror(f) || fflush(f) != 0 || fsync(fileno(f)) != 0;
    int err = errno;
    if (fclose(f) != 0 && !failed) {
        failed = 1;
        err = errno;
    }
    if (failed) {
        remove(tmp);
        return tg_fail(TG_ERR_IO, "cannot write %s: %s (disk full?)", tmp, strerror(err));
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        remove(tmp);
        return tg_fail(TG_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(err));
    }
    data_sync_parent_dir(path);
    return TG_OK;
}

tg_status data_mkdirs(const char *path) {
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
