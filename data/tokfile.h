/* Token files: a tokenized corpus (train.tok, val.tok), read whole into memory for training.
 *
 * Layout (all integers little-endian), a 64-byte header then the tokens:
 *
 *   offset  size  field
 *        0     8  magic "TGTOK\0\0\0"
 *        8     4  u32 version (1)
 *       12     4  u32 vocab_size: every token is < vocab_size
 *       16     4  u32 token width in bytes: 2 if vocab_size <= 65536, else 4
 *       20     4  u32 reserved, 0
 *       24     8  u64 token count n
 *       32     8  u64 tokenizer fingerprint (tg_tokenizer_fingerprint; 0 = not recorded)
 *       40    24  reserved, 0
 *       64   n*w  the tokens, unsigned, `w` bytes each
 *
 * Writers go through "<path>.tmp", fsync and rename, so a file is either whole or absent.
 * Readers refuse a wrong magic, an unknown version, a bad width, a size that does not match the
 * header (truncated or trailing bytes) and any token >= vocab_size, saying which; a vocab_size
 * above TG_MAX_VOCAB (tapegrad/limits.h) is refused too.
 */
#ifndef TAPEGRAD_DATA_TOKFILE_H
#define TAPEGRAD_DATA_TOKFILE_H

#include <stddef.h>
#include <stdint.h>

#include "support/atomic_file.h"
#include "tapegrad/error.h"
#include "tapegrad/limits.h"
#include "tapegrad/version.h"

enum { TG_TOKFILE_VERSION = TG_TOKFILE_FORMAT, TG_TOKFILE_HEADER_BYTES = 64 };

typedef struct TgTokfileHeader {
    uint32_t version;
    uint32_t vocab_size;
    uint32_t token_bytes; /* 2 or 4 */
    uint64_t n_tokens;
    uint64_t tokenizer_fingerprint;
} TgTokfileHeader;

/* Writes ids[0..n) (each in [0, vocab_size), checked: TG_ERR_ARG otherwise). */
TgStatus tg_tokfile_write(const char *path, const int32_t *ids, size_t n, uint32_t vocab_size);
/* Same, recording which tokenizer made the tokens. */
TgStatus tg_tokfile_write_tagged(const char *path, const int32_t *ids, size_t n, uint32_t vocab_size,
                               uint64_t tokenizer_fingerprint);

/* Reads a whole token file: *ids is malloc'ed (caller frees; NULL on failure). `header` may be
 * NULL; when given it receives the header (e.g. to check the tokenizer fingerprint). */
TgStatus tg_tokfile_read(const char *path, int32_t **ids, size_t *n, uint32_t *vocab_size);
TgStatus tg_tokfile_read_header(const char *path, TgTokfileHeader *header);
TgStatus tg_tokfile_read_full(const char *path, int32_t **ids, size_t *n, TgTokfileHeader *header);
/* tg_tokfile_read_full for a model of `vocab_size` ids and the tokenizer `fingerprint`: also refuses
 * (TG_ERR_MISMATCH) a file whose ids may reach past vocab_size (its header's vocab_size is larger)
 * and one that records another tokenizer's fingerprint, so no id a model cannot embed gets in. */
TgStatus tg_tokfile_read_for(const char *path, uint32_t vocab_size, uint64_t fingerprint, int32_t **ids, size_t *n);

/* A token file read in bounded pieces (pread), never held whole: what training and evaluation
 * read, so their memory does not grow with the dataset. Opening one checks what
 * tg_tokfile_read_for checks, then reads it once, a block at a time, checking that every id is below
 * its vocab_size and hashing the tokens as stored (support/hash.h; `hash`, to tell whether two files
 * hold the same tokens). Each later read checks its ids again: a file changed in place while in
 * use gives an error, never an id a model cannot embed. A store over tokens in memory (tests)
 * reads them from there. */
typedef struct TgTokenStore {
    int fd;               /* -1 for tokens in memory */
    const int32_t *ids;   /* tokens in memory (not owned) */
    uint32_t width, vocab_size;
    uint64_t n;
    uint64_t hash;
    uint64_t tokenizer_fingerprint;
    char path[TG_PATH_CAP];
} TgTokenStore;

TgStatus tg_token_store_open(TgTokenStore *s, const char *path, uint32_t vocab_size, uint64_t fingerprint);
void tg_token_store_from_memory(TgTokenStore *s, const int32_t *ids, size_t n);
/* Tokens [start, start + n) into out. */
TgStatus tg_token_store_read(const TgTokenStore *s, uint64_t start, size_t n, int32_t *out);
void tg_token_store_close(TgTokenStore *s);

/* A token file written as a stream (prepare): tokens are appended as they are made, and at the end
 * the file is cut in two, the first n_first tokens staying in it and the rest going to a second
 * file, each then committed (support/atomic_file.h). Memory: one buffer of TG_TOKFILE_WRITER_BUFFER. */
enum { TG_TOKFILE_WRITER_BUFFER = 1 << 20 };
typedef struct TgTokfileWriter {
    TgAtomicFile af;
    uint32_t vocab_size, width;
    uint64_t n, fingerprint;
    unsigned char *buf;
    size_t buf_len;
} TgTokfileWriter;

TgStatus tg_tokfile_writer_open(TgTokfileWriter *w, const char *path, uint32_t vocab_size, uint64_t fingerprint);
TgStatus tg_tokfile_writer_append(TgTokfileWriter *w, const int32_t *ids, size_t n);
/* Keeps tokens [0, n_first) in the file and moves the rest to rest_path (NULL: n_first must be
 * all), then commits both. Whatever the result, w is spent. */
TgStatus tg_tokfile_writer_commit_split(TgTokfileWriter *w, uint64_t n_first, const char *rest_path);
void tg_tokfile_writer_abandon(TgTokfileWriter *w);

#endif
