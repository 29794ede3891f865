/* Reading a source file in blocks, plain or gzip-compressed alike. A file that starts with gzip's
 * magic (1f 8b) is gzip and is inflated here (zlib's inflate, each member's CRC and length
 * checked); any other file is read as it is. Memory: zlib's inflate state and window (about
 * 40 KiB) and a block of input (TG_FILE_STREAM_IN_BYTES), whatever the file's size.
 *
 * A gzip file is what `gzip -t` accepts: one member or several concatenated (read one after the
 * other, as gzip does), and after the last one nothing, or zeros to the end (padding, which gzip
 * ignores). Each of these is an error naming the file, after the bytes that did decompress have
 * been handed out:
 *   - the file ends inside a member (truncated): the bytes it holds are given;
 *   - a member is corrupt (a bad header, block or CRC): zlib's reason and the byte offset;
 *   - bytes after the last member that neither start another one nor are zeros to the end
 *     (gzip's "trailing garbage"): their count and offset. */
#ifndef TAPEGRAD_DATA_FILE_STREAM_H
#define TAPEGRAD_DATA_FILE_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "support/hash.h"
#include "tapegrad/error.h"

enum { TG_FILE_STREAM_IN_BYTES = 1 << 17 };

typedef struct TgFileStream {
    void *impl;            /* the open file and, for gzip, the inflater; NULL when closed */
    const char *path;      /* not owned */
    uint64_t file_bytes;   /* the file's size on disk */
    uint64_t text_bytes;   /* bytes handed out so far (after decompression) */
    bool gzip;             /* the file is gzip-compressed */
    TgHash64 hash;           /* of the bytes handed out (support/hash.h): the same for a file and its gzip */
} TgFileStream;

/* Opens `path` (a regular file, symlinks followed: support/file_read.h's rule). TG_ERR_IO naming it. */
TgStatus tg_file_stream_open(TgFileStream *fs, const char *path);
/* Up to cap bytes into buf; *got 0 at the end. TG_ERR_FORMAT for a gzip file that is not whole. */
TgStatus tg_file_stream_read(TgFileStream *fs, void *buf, size_t cap, size_t *got);
/* How far into the file on disk the reading is (for progress: compressed bytes for gzip). */
uint64_t tg_file_stream_disk_offset(const TgFileStream *fs);
void tg_file_stream_close(TgFileStream *fs);

#endif
