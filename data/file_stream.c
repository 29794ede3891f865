/* Source files, plain or gzip, read in blocks (file_stream.h). zlib's gz* functions are not used:
 * they name a file opened by descriptor "<fd:N>" in their messages, and they silently ignore
 * whatever follows the last gzip member, which `gzip -t` refuses. */
#include "data/file_stream.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "support/file_read.h"

typedef struct {
    int fd;
    uint64_t disk_offset;    /* bytes read from the file */
    bool gzip, z_ready;      /* z: an inflater initialised */
    bool between_members;    /* gzip: the last member ended (or none began): the file may end here */
    bool padding;            /* gzip: zeros after the last member, which must run to the end */
    bool ended;              /* nothing more to hand out */
    z_stream z;
    unsigned char in[TG_FILE_STREAM_IN_BYTES];
} Stream;

TgStatus tg_file_stream_open(TgFileStream *fs, const char *path) {
    memset(fs, 0, sizeof *fs);
    fs->path = path;
    FILE *f = tg_file_open_read(path);
    if (!f) return tg_fail(TG_ERR_IO, "cannot read %s: %s", path, tg_file_open_error(errno));
    int fd = dup(fileno(f));
    fclose(f);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        int err = errno;
        if (fd >= 0) close(fd);
        return tg_fail(TG_ERR_IO, "cannot read %s: %s", path, strerror(err));
    }
    Stream *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        return tg_fail(TG_ERR_NOMEM, "cannot read %s: no memory for its input buffer", path);
    }
    s->fd = fd;
    unsigned char magic[2] = {0, 0};
    s->gzip = fs->gzip = pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (s->gzip) {
        if (inflateInit2(&s->z, 16 + MAX_WBITS) != Z_OK) { /* 16: a gzip wrapper, and nothing else */
            close(fd);
            free(s);
            return tg_fail(TG_ERR_NOMEM, "cannot read %s: no memory for zlib's inflater", path);
        }
        s->z_ready = true;
        s->between_members = true;
    }
    fs->file_bytes = (uint64_t)sb.st_size;
    tg_hash64_init(&fs->hash, 0);
    fs->impl = s;
    return TG_OK;
}

/* read(2) without EINTR; *n 0 at the end of the file. */
static TgStatus read_some(TgFileStream *fs, Stream *s, void *buf, size_t cap, size_t *n) {
    ssize_t got;
    do got = read(s->fd, buf, cap);
    while (got < 0 && errno == EINTR);
    if (got < 0) return tg_fail(TG_ERR_IO, "cannot read %s: %s", fs->path, strerror(errno));
    *n = (size_t)got;
    s->disk_offset += (uint64_t)got;
    return TG_OK;
}

/* The offset in the file of the next byte inflate has not consumed. */
static uint64_t consumed(const Stream *s) { return s->disk_offset - s->z.avail_in; }

/* Inflates into buf until some bytes came out or the file ended. */
static TgStatus inflate_some(TgFileStream *fs, Stream *s, unsigned char *buf, size_t cap, size_t *got) {
    s->z.next_out = buf;
    s->z.avail_out = (uInt)cap;
    while (s->z.avail_out == cap) {
        if (s->z.avail_in == 0) {
            size_t n = 0;
            TG_TRY(read_some(fs, s, s->in, sizeof s->in, &n));
            if (n == 0) {
                if (s->between_members) {
                    s->ended = true;
                    break;
                }
                return tg_fail(TG_ERR_FORMAT,
                               "cannot read %s (gzip): the file ends inside its compressed data, after %" PRIu64
                               " bytes: it is truncated (an unfinished download or copy?); get the whole file again",
                               fs->path, s->disk_offset);
            }
            s->z.next_in = s->in;
            s->z.avail_in = (uInt)n;
        }
        if (s->between_members && (s->padding || s->z.next_in[0] == 0)) {
            /* zeros to the end of the file (a tape's or a tool's padding) end it, as gzip -t allows */
            s->padding = true;
            while (s->z.avail_in > 0 && s->z.next_in[0] == 0) s->z.next_in++, s->z.avail_in--;
            if (s->z.avail_in == 0) continue;
        }
        if (s->between_members) {
            /* another member must begin here: gzip's magic, or the file is not gzip from here on */
            bool magic = !s->padding && s->z.next_in[0] == 0x1f && (s->z.avail_in < 2 || s->z.next_in[1] == 0x8b);
            if (!magic)
                return tg_fail(TG_ERR_FORMAT,
                               "cannot read %s (gzip): %" PRIu64 " bytes after the end of its gzip data (from byte %" PRIu64
                               ") are not another gzip member (gzip -t calls them trailing garbage): the file is "
                               "damaged or two files were joined; recompress it",
                               fs->path, fs->file_bytes > consumed(s) ? fs->file_bytes - consumed(s) : 0, consumed(s));
            if (inflateReset(&s->z) != Z_OK) return tg_fail(TG_ERR_FORMAT, "cannot read %s (gzip): zlib's state", fs->path);
            s->between_members = false;
        }
        int r = inflate(&s->z, Z_NO_FLUSH);
        if (r == Z_STREAM_END) {
            s->between_members = true;
        } else if (r == Z_MEM_ERROR) {
            return tg_fail(TG_ERR_NOMEM, "cannot read %s (gzip): out of memory", fs->path);
        } else if (r != Z_OK) {
            return tg_fail(TG_ERR_FORMAT, "cannot read %s (gzip): corrupt compressed data near byte %" PRIu64 " (%s)", fs->path,
                           consumed(s), s->z.msg ? s->z.msg : "zlib cannot inflate it");
        }
    }
    *got = cap - s->z.avail_out;
    return TG_OK;
}

TgStatus tg_file_stream_read(TgFileStream *fs, void *buf, size_t cap, size_t *got) {
    *got = 0;
    Stream *s = fs->impl;
    if (!s || s->ended || cap == 0) return TG_OK;
    if (cap > INT_MAX / 2) cap = INT_MAX / 2;
    size_t n = 0;
    if (s->gzip) {
        TG_TRY(inflate_some(fs, s, buf, cap, &n));
    } else {
        TG_TRY(read_some(fs, s, buf, cap, &n));
        if (n == 0) s->ended = true;
    }
    *got = n;
    fs->text_bytes += (uint64_t)n;
    tg_hash64_update(&fs->hash, buf, n);
    return TG_OK;
}

uint64_t tg_file_stream_disk_offset(const TgFileStream *fs) {
    const Stream *s = fs->impl;
    if (!s) return 0;
    return s->gzip ? consumed(s) : s->disk_offset;
}

void tg_file_stream_close(TgFileStream *fs) {
    Stream *s = fs->impl;
    if (!s) return;
    if (s->z_ready) inflateEnd(&s->z);
    close(s->fd);
    free(s);
    fs->impl = NULL;
}
