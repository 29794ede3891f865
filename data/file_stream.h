/* Reading a source file in blocks, plain or gzip-compressed alike: zlib's gz* functions read a
 * file that starts with gzip's magic (1f 8b) as gzip, concatenated members included, and any
 * other file as it is. Memory: zlib's buffers (about 300 KiB), whatever the file's size.
 *
 * A truncated or corrupt gzip file is an error naming the file and zlib's reason, after the
 * bytes that did decompress have been handed out. */
#ifndef TAPEGRAD_DATA_FILE_STREAM_H
#define TAPEGRAD_DATA_FILE_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/hash.h"
#include "tapegrad/error.h"

typedef struct FileStream {
    void *gz;              /* gzFile */
    const char *path;      /* not owned */
    uint64_t file_bytes;   /* the file's size on disk */
    uint64_t text_bytes;   /* bytes handed out so far (after decompression) */
    bool gzip;             /* the file is gzip-compressed */
    Hash64 hash;           /* of the bytes handed out (lib/hash.h): the same for a file and its gzip */
} FileStream;

/* Opens `path` (a regular file, symlinks followed: lib/file_read.h's rule). TG_ERR_IO naming it. */
TgStatus file_stream_open(FileStream *fs, const char *path);
/* Up to cap bytes into buf; *got 0 at the end. */
TgStatus file_stream_read(FileStream *fs, void *buf, size_t cap, size_t *got);
/* How far into the file on disk the reading is (for progress: compressed bytes for gzip). */
uint64_t file_stream_disk_offset(const FileStream *fs);
void file_stream_close(FileStream *fs);

#endif
