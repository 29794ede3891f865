#include "data/tokfile.h"

#include <errno.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/hash.h"
#include "lib/memory.h"

#include "support/atomic_file.h"
#include "support/file_read.h"
#include "tapegrad/limits.h"

static const unsigned char MAGIC[8] = {'T', 'G', 'T', 'O', 'K', 0, 0, 0};

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint32_t width_for(uint32_t vocab_size) { return vocab_size <= 65536u ? 2u : 4u; }

static void make_header(unsigned char *header, uint32_t vocab_size, uint64_t n, uint64_t fingerprint) {
    memset(header, 0, TG_TOKFILE_HEADER_BYTES);
    memcpy(header, MAGIC, sizeof MAGIC);
    put_u32(header + 8, TG_TOKFILE_VERSION);
    put_u32(header + 12, vocab_size);
    put_u32(header + 16, width_for(vocab_size));
    put_u64(header + 24, n);
    put_u64(header + 32, fingerprint);
}

/* ids[0..n) as `w`-byte little-endian tokens into out. */
static void pack_ids(const int32_t *ids, size_t n, uint32_t w, unsigned char *out) {
    for (size_t k = 0; k < n; k++) {
        uint32_t v = (uint32_t)ids[k];
        if (w == 2) {
            out[2 * k] = (unsigned char)v;
            out[2 * k + 1] = (unsigned char)(v >> 8);
        } else {
            put_u32(out + 4 * k, v);
        }
    }
}

TgStatus tg_tokfile_write_tagged(const char *path, const int32_t *ids, size_t n, uint32_t vocab_size,
                               uint64_t fingerprint) {
    if (vocab_size == 0 || vocab_size > (uint32_t)TG_MAX_VOCAB)
        return tg_fail(TG_ERR_ARG, "token file %s: vocab_size %" PRIu32 " is not in [1, %d]", path, vocab_size,
                       TG_MAX_VOCAB);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= vocab_size)
            return tg_fail(TG_ERR_ARG, "token file %s: token %" PRId32 " at index %zu is outside [0, %" PRIu32 ")",
                           path, ids[i], i, vocab_size);
    uint32_t w = width_for(vocab_size);
    unsigned char header[TG_TOKFILE_HEADER_BYTES];
    make_header(header, vocab_size, (uint64_t)n, fingerprint);
    TgAtomicFile af;
    TG_TRY(tg_atomic_file_open(&af, path));
    FILE *f = tg_atomic_file_stream(&af);
    if (fwrite(header, 1, sizeof header, f) != sizeof header) {
        TgStatus s = tg_fail(TG_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        tg_atomic_file_abandon(&af);
        return s;
    }
    enum { BLOCK = 1 << 14 };
    unsigned char buf[BLOCK * 4];
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        pack_ids(ids + i, m, w, buf);
        if (fwrite(buf, w, m, f) != m) {
            TgStatus s = tg_fail(TG_ERR_IO, "cannot write %s: %s (disk full?)", path, strerror(errno));
            tg_atomic_file_abandon(&af);
            return s;
        }
    }
    return tg_atomic_file_commit(&af);
}

TgStatus tg_tokfile_write(const char *path, const int32_t *ids, size_t n, uint32_t vocab_size) {
    return tg_tokfile_write_tagged(path, ids, n, vocab_size, 0);
}

/* Reads and checks the header; leaves f positioned at the first token. */
static TgStatus read_header(FILE *f, const char *path, TgTokfileHeader *h) {
    unsigned char raw[TG_TOKFILE_HEADER_BYTES];
    size_t got = fread(raw, 1, sizeof raw, f);
    if (got == 0)
        return tg_fail(TG_ERR_FORMAT,
                       "token file %s is empty (0 bytes): it was cut off or never written; make it again with "
                       "tapegrad prepare",
                       path);
    if (memcmp(raw, MAGIC, got < sizeof MAGIC ? got : sizeof MAGIC) != 0)
        return tg_fail(TG_ERR_FORMAT,
                       "%s is not a tapegrad token file (wrong magic: expected \"TGTOK\"); "
                       "make it with tapegrad prepare",
                       path);
    if (got < sizeof raw)
        return tg_fail(TG_ERR_FORMAT,
                       "token file %s is truncated: %zu bytes, shorter than the %d-byte header; make it again with "
                       "tapegrad prepare",
                       path, got, TG_TOKFILE_HEADER_BYTES);
    h->version = get_u32(raw + 8);
    h->vocab_size = get_u32(raw + 12);
    h->token_bytes = get_u32(raw + 16);
    h->n_tokens = get_u64(raw + 24);
    h->tokenizer_fingerprint = get_u64(raw + 32);
    if (h->version != TG_TOKFILE_VERSION)
        return tg_fail(TG_ERR_FORMAT,
                       "token file %s has format version %" PRIu32 ", this build reads version %d: "
                       "prepare the data again with this tapegrad",
                       path, h->version, TG_TOKFILE_VERSION);
    if (h->vocab_size == 0 || h->vocab_size > (uint32_t)TG_MAX_VOCAB)
        return tg_fail(TG_ERR_FORMAT, "token file %s: vocab_size %" PRIu32 " is not in [1, %d]", path,
                       h->vocab_size, TG_MAX_VOCAB);
    if (h->token_bytes != width_for(h->vocab_size))
        return tg_fail(TG_ERR_FORMAT,
                       "token file %s: token width %" PRIu32 " bytes, but vocab_size %" PRIu32
                       " needs %" PRIu32 ": the header is corrupt",
                       path, h->token_bytes, h->vocab_size, width_for(h->vocab_size));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0)
        return tg_fail(TG_ERR_IO, "cannot stat token file %s: %s", path, strerror(errno));
    uint64_t have = (uint64_t)sb.st_size - TG_TOKFILE_HEADER_BYTES;
    if (h->n_tokens > (UINT64_MAX - TG_TOKFILE_HEADER_BYTES) / h->token_bytes || h->n_tokens > SIZE_MAX / 4)
        return tg_fail(TG_ERR_FORMAT, "token file %s: token count %" PRIu64 " is impossibly large: the header is corrupt",
                       path, h->n_tokens);
    uint64_t want = h->n_tokens * h->token_bytes;
    if (have < want)
        return tg_fail(TG_ERR_FORMAT,
                       "token file %s is truncated: its header announces %" PRIu64 " tokens (%" PRIu64
                       " bytes) but only %" PRIu64 " bytes of tokens follow; prepare the data again",
                       path, h->n_tokens, want, have);
    if (have > want)
        return tg_fail(TG_ERR_FORMAT,
                       "token file %s has %" PRIu64 " bytes after its %" PRIu64
                       " tokens: the file is corrupt; prepare the data again",
                       path, have - want, h->n_tokens);
    return TG_OK;
}

static FILE *open_tokfile(const char *path) {
    FILE *f = tg_file_open_read(path);
    if (!f) tg_fail(TG_ERR_IO, "cannot open token file %s: %s", path, tg_file_open_error(errno));
    return f;
}

TgStatus tg_tokfile_read_header(const char *path, TgTokfileHeader *header) {
    FILE *f = open_tokfile(path);
    if (!f) return TG_ERR_IO;
    TgStatus st = read_header(f, path, header);
    fclose(f);
    return st;
}

TgStatus tg_tokfile_read_full(const char *path, int32_t **ids_out, size_t *n_out, TgTokfileHeader *header) {
    *ids_out = NULL;
    *n_out = 0;
    FILE *f = open_tokfile(path);
    if (!f) return TG_ERR_IO;
    TgTokfileHeader h;
    TgStatus st = read_header(f, path, &h);
    if (st != TG_OK) {
        fclose(f);
        return st;
    }
    size_t n = (size_t)h.n_tokens, w = h.token_bytes;
    int32_t *ids = tg_malloc((n ? n : 1) * sizeof *ids);
    enum { BLOCK = 1 << 14 };
    unsigned char buf[BLOCK * 4];
    for (size_t i = 0; i < n && st == TG_OK; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        if (fread(buf, w, m, f) != m) {
            st = tg_fail(TG_ERR_IO, "cannot read token file %s: %s", path,
                         ferror(f) ? strerror(errno) : "it shrank while being read");
            break;
        }
        for (size_t k = 0; k < m; k++) {
            uint32_t v = w == 2 ? (uint32_t)buf[2 * k] | (uint32_t)buf[2 * k + 1] << 8 : get_u32(buf + 4 * k);
            if (v >= h.vocab_size) {
                st = tg_fail(TG_ERR_FORMAT,
                             "token file %s: token %" PRIu32 " at index %zu is >= vocab_size %" PRIu32
                             ": the file is corrupt or was not made for this vocabulary",
                             path, v, i + k, h.vocab_size);
                break;
            }
            ids[i + k] = (int32_t)v;
        }
    }
    fclose(f);
    if (st != TG_OK) {
        free(ids);
        return st;
    }
    *ids_out = ids;
    *n_out = n;
    if (header) *header = h;
    return TG_OK;
}

TgStatus tg_tokfile_read_for(const char *path, uint32_t vocab_size, uint64_t fingerprint, int32_t **ids, size_t *n) {
    TgTokfileHeader h;
    TG_TRY(tg_tokfile_read_full(path, ids, n, &h));
    TgStatus s = TG_OK;
    if (h.vocab_size > vocab_size)
        s = tg_fail(TG_ERR_MISMATCH,
                    "token file %s holds ids below %" PRIu32 ", past the model's vocabulary of %" PRIu32
                    " ids: it was made by another tokenizer; prepare the data again",
                    path, h.vocab_size, vocab_size);
    else if (h.tokenizer_fingerprint && fingerprint && h.tokenizer_fingerprint != fingerprint)
        s = tg_fail(TG_ERR_MISMATCH, "token file %s was made by another tokenizer than the run's", path);
    if (s != TG_OK) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    return s;
}

TgStatus tg_tokfile_read(const char *path, int32_t **ids, size_t *n, uint32_t *vocab_size) {
    TgTokfileHeader h;
    TG_TRY(tg_tokfile_read_full(path, ids, n, &h));
    *vocab_size = h.vocab_size;
    return TG_OK;
}

/* ---- token stores: read in bounded pieces ---------------------------------------------------- */

static TgStatus store_refused(TgTokenStore *s, TgStatus st) {
    tg_token_store_close(s);
    return st;
}

TgStatus tg_token_store_open(TgTokenStore *s, const char *path, uint32_t vocab_size, uint64_t fingerprint) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    if (snprintf(s->path, sizeof s->path, "%s", path) >= (int)sizeof s->path)
        return tg_fail(TG_ERR_ARG, "path too long: %s", path);
    FILE *f = open_tokfile(path);
    if (!f) return TG_ERR_IO;
    TgTokfileHeader h;
    TgStatus st = read_header(f, path, &h);
    s->fd = st == TG_OK ? dup(fileno(f)) : -1;
    fclose(f);
    if (st != TG_OK) return st;
    if (s->fd < 0) return tg_fail(TG_ERR_IO, "cannot open token file %s: %s", path, strerror(errno));
    s->width = h.token_bytes, s->vocab_size = h.vocab_size, s->n = h.n_tokens;
    s->tokenizer_fingerprint = h.tokenizer_fingerprint;
    if (h.vocab_size > vocab_size)
        return store_refused(s, tg_fail(TG_ERR_MISMATCH,
                                        "token file %s holds ids below %" PRIu32 ", past the model's vocabulary of %" PRIu32
                                        " ids: it was made by another tokenizer; prepare the data again",
                                        path, h.vocab_size, vocab_size));
    if (h.tokenizer_fingerprint && fingerprint && h.tokenizer_fingerprint != fingerprint)
        return store_refused(s, tg_fail(TG_ERR_MISMATCH, "token file %s was made by another tokenizer than the run's", path));
    /* every id checked and the tokens hashed, a block at a time */
    enum { BLOCK = 1 << 16 };
    int32_t *ids = NULL;
    unsigned char *raw = NULL;
    st = tg_memory_grow((void **)&ids, BLOCK * sizeof *ids, "reading a token file");
    if (st == TG_OK) st = tg_memory_grow((void **)&raw, BLOCK * 4, "reading a token file");
    TgHash64 hash;
    tg_hash64_init(&hash, 0);
    for (uint64_t i = 0; i < s->n && st == TG_OK; i += BLOCK) {
        size_t m = s->n - i < BLOCK ? (size_t)(s->n - i) : BLOCK;
        st = tg_token_store_read(s, i, m, ids);
        if (st == TG_OK) {
            pack_ids(ids, m, s->width, raw);
            tg_hash64_update(&hash, raw, m * s->width);
        }
    }
    free(ids);
    free(raw);
    if (st != TG_OK) return store_refused(s, st);
    s->hash = tg_hash64_final(&hash);
    return TG_OK;
}

void tg_token_store_from_memory(TgTokenStore *s, const int32_t *ids, size_t n) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->ids = ids;
    s->n = n;
}

TgStatus tg_token_store_read(const TgTokenStore *s, uint64_t start, size_t n, int32_t *out) {
    TG_CHECK(start <= s->n && n <= s->n - start, "reading tokens [%" PRIu64 ", +%zu) of %" PRIu64, start, n, s->n);
    if (s->ids) {
        memcpy(out, s->ids + start, n * sizeof *out);
        return TG_OK;
    }
    /* the packed tokens go to the end of `out` and are widened front to back: a 2- or 4-byte token
     * at packed offset k*w never lies before the int32 written at 4*k */
    unsigned char *raw = (unsigned char *)out + n * (4 - s->width);
    size_t want = n * s->width, got = 0;
    off_t at = (off_t)(TG_TOKFILE_HEADER_BYTES + start * s->width);
    while (got < want) {
        ssize_t r = pread(s->fd, raw + got, want - got, at + (off_t)got);
        if (r <= 0)
            return tg_fail(TG_ERR_IO, "cannot read token file %s: %s", s->path, r < 0 ? strerror(errno) : "it shrank while in use");
        got += (size_t)r;
    }
    for (size_t k = 0; k < n; k++) {
        uint32_t v = s->width == 2 ? (uint32_t)raw[2 * k] | (uint32_t)raw[2 * k + 1] << 8 : get_u32(raw + 4 * k);
        if (v >= s->vocab_size)
            return tg_fail(TG_ERR_FORMAT,
                           "token file %s: token %" PRIu32 " at index %" PRIu64 " is >= vocab_size %" PRIu32
                           ": the file is corrupt or was changed while in use",
                           s->path, v, start + k, s->vocab_size);
        out[k] = (int32_t)v;
    }
    return TG_OK;
}

void tg_token_store_close(TgTokenStore *s) {
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
    s->ids = NULL;
}

/* ---- writing a stream of tokens --------------------------------------------------------------- */

TgStatus tg_tokfile_writer_open(TgTokfileWriter *w, const char *path, uint32_t vocab_size, uint64_t fingerprint) {
    memset(w, 0, sizeof *w);
    if (vocab_size == 0 || vocab_size > (uint32_t)TG_MAX_VOCAB)
        return tg_fail(TG_ERR_ARG, "token file %s: vocab_size %" PRIu32 " is not in [1, %d]", path, vocab_size,
                       TG_MAX_VOCAB);
    w->vocab_size = vocab_size, w->width = width_for(vocab_size), w->fingerprint = fingerprint;
    TG_TRY(tg_memory_grow((void **)&w->buf, TG_TOKFILE_WRITER_BUFFER, "writing a token file"));
    TgStatus st = tg_atomic_file_open(&w->af, path);
    if (st != TG_OK) {
        free(w->buf);
        w->buf = NULL;
        return st;
    }
    unsigned char header[TG_TOKFILE_HEADER_BYTES];
    make_header(header, vocab_size, 0, fingerprint); /* the count is written at the end */
    memcpy(w->buf, header, sizeof header);
    w->buf_len = sizeof header;
    return TG_OK;
}

static TgStatus write_all(int fd, const void *data, size_t len, off_t at, const char *path) {
    const unsigned char *p = data;
    while (len > 0) {
        ssize_t n = at >= 0 ? pwrite(fd, p, len, at) : write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return tg_fail(TG_ERR_IO, "cannot write %s: %s (disk full?)", path, n < 0 ? strerror(errno) : "no progress");
        p += n, len -= (size_t)n;
        if (at >= 0) at += n;
    }
    return TG_OK;
}

static TgStatus writer_flush(TgTokfileWriter *w) {
    TgStatus st = write_all(w->af.fd, w->buf, w->buf_len, -1, w->af.path);
    w->buf_len = 0;
    return st;
}

TgStatus tg_tokfile_writer_append(TgTokfileWriter *w, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= w->vocab_size)
            return tg_fail(TG_ERR_ARG, "token file %s: token %" PRId32 " is outside [0, %" PRIu32 ")", w->af.path, ids[i],
                           w->vocab_size);
    while (n > 0) {
        size_t room = (TG_TOKFILE_WRITER_BUFFER - w->buf_len) / w->width, m = n < room ? n : room;
        pack_ids(ids, m, w->width, w->buf + w->buf_len);
        w->buf_len += m * w->width;
        w->n += m, ids += m, n -= m;
        if (w->buf_len + w->width > TG_TOKFILE_WRITER_BUFFER) TG_TRY(writer_flush(w));
    }
    return TG_OK;
}

void tg_tokfile_writer_abandon(TgTokfileWriter *w) {
    if (w->buf) tg_atomic_file_abandon(&w->af);
    free(w->buf);
    w->buf = NULL;
}

TgStatus tg_tokfile_writer_commit_split(TgTokfileWriter *w, uint64_t n_first, const char *rest_path) {
    TG_CHECK(n_first <= w->n, "splitting %" PRIu64 " tokens after %" PRIu64, w->n, n_first);
    uint64_t n_rest = w->n - n_first;
    TgStatus st = writer_flush(w);
    TgAtomicFile rest = {.fd = -1};
    bool rest_open = false;
    if (st == TG_OK && rest_path) {
        st = tg_atomic_file_open(&rest, rest_path);
        rest_open = st == TG_OK;
    }
    if (st == TG_OK && rest_path) {
        /* the tail of the stream, copied from the file being written into the second file */
        unsigned char header[TG_TOKFILE_HEADER_BYTES];
        make_header(header, w->vocab_size, n_rest, w->fingerprint);
        st = write_all(rest.fd, header, sizeof header, -1, rest_path);
        int in = open(w->af.tmp, O_RDONLY | O_CLOEXEC);
        if (in < 0 && st == TG_OK) st = tg_fail(TG_ERR_IO, "cannot read back %s: %s", w->af.tmp, strerror(errno));
        off_t at = (off_t)(TG_TOKFILE_HEADER_BYTES + n_first * w->width), end = at + (off_t)(n_rest * w->width);
        while (st == TG_OK && at < end) {
            size_t want = (size_t)(end - at) < TG_TOKFILE_WRITER_BUFFER ? (size_t)(end - at) : TG_TOKFILE_WRITER_BUFFER;
            ssize_t r = pread(in, w->buf, want, at);
            if (r <= 0) st = tg_fail(TG_ERR_IO, "cannot read back %s: %s", w->af.tmp, r < 0 ? strerror(errno) : "short file");
            else st = write_all(rest.fd, w->buf, (size_t)r, -1, rest_path), at += r;
        }
        if (in >= 0) close(in);
    }
    unsigned char header[TG_TOKFILE_HEADER_BYTES];
    make_header(header, w->vocab_size, n_first, w->fingerprint);
    if (st == TG_OK && ftruncate(w->af.fd, (off_t)(TG_TOKFILE_HEADER_BYTES + n_first * w->width)) != 0)
        st = tg_fail(TG_ERR_IO, "cannot write %s: %s", w->af.path, strerror(errno));
    if (st == TG_OK) st = write_all(w->af.fd, header, sizeof header, 0, w->af.path);
    if (st == TG_OK && rest_open) {
        st = tg_atomic_file_commit(&rest);
        rest_open = false;
    }
    if (st == TG_OK) {
        st = tg_atomic_file_commit(&w->af);
        free(w->buf);
        w->buf = NULL;
        return st;
    }
    if (rest_open) tg_atomic_file_abandon(&rest);
    tg_tokfile_writer_abandon(w);
    return st;
}
