#include "data/file_stream.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "lib/file_read.h"

TgStatus file_stream_open(FileStream *fs, const char *path) {
    memset(fs, 0, sizeof *fs);
    fs->path = path;
    FILE *f = file_open_read(path);
    if (!f) return tg_fail(TG_ERR_IO, "cannot read %s: %s", path, file_open_error(errno));
    int fd = dup(fileno(f));
    fclose(f);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        int err = errno;
        if (fd >= 0) close(fd);
        return tg_fail(TG_ERR_IO, "cannot read %s: %s", path, strerror(err));
    }
    unsigned char magic[2] = {0, 0};
    fs->gzip = pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    fs->file_bytes = (uint64_t)sb.st_size;
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        close(fd);
        return tg_fail(TG_ERR_NOMEM, "cannot read %s: no memory for zlib's buffers", path);
    }
    gzbuffer(gz, 1 << 17);
    hash64_init(&fs->hash, 0);
    fs->gz = gz;
    return TG_OK;
}

TgStatus file_stream_read(FileStream *fs, void *buf, size_t cap, size_t *got) {
    *got = 0;
    if (cap > INT_MAX / 2) cap = INT_MAX / 2;
    int n = gzread((gzFile)fs->gz, buf, (unsigned)cap);
    if (n < 0 || (n == 0 && !gzeof((gzFile)fs->gz))) {
        int code;
        const char *why = gzerror((gzFile)fs->gz, &code);
        if (code == Z_ERRNO) why = strerror(errno);
        return tg_fail(TG_ERR_FORMAT, "cannot read %s%s: %s", fs->path, fs->gzip ? " (gzip)" : "", why);
    }
    int code;
    gzerror((gzFile)fs->gz, &code);
    if (n == 0 && code != Z_OK && code != Z_STREAM_END) /* a truncated gzip stream ends with Z_BUF_ERROR */
        return tg_fail(TG_ERR_FORMAT, "cannot read %s (gzip): %s: the file is truncated or corrupt", fs->path,
                       gzerror((gzFile)fs->gz, &code));
    *got = (size_t)n;
    fs->text_bytes += (uint64_t)n;
    hash64_update(&fs->hash, buf, (size_t)n);
    return TG_OK;
}

uint64_t file_stream_disk_offset(const FileStream *fs) {
    if (!fs->gz) return 0;
    if (!fs->gzip) return fs->text_bytes;
    z_off_t off = gzoffset((gzFile)fs->gz);
    return off > 0 ? (uint64_t)off : 0;
}

void file_stream_close(FileStream *fs) {
    if (fs->gz) gzclose((gzFile)fs->gz);
    fs->gz = NULL;
}
