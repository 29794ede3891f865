#include "data/tokfile.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/atomic_file.h"
#include "lib/file_read.h"
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

TgStatus tokfile_write_tagged(const char *path, const int32_t *ids, size_t n, uint32_t vocab_size,
                               uint64_t fingerprint) {
    if (vocab_size == 0 || vocab_size > (uint32_t)TG_MAX_VOCAB)
        return tg_fail(TG_ERR_ARG, "token file %s: vocab_size %" PRIu32 " is not in [1, %d]", path, vocab_size,
                       TG_MAX_VOCAB);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= vocab_size)
            return tg_fail(TG_ERR_ARG, "token file %s: token %" PRId32 " at index %zu is outside [0, %" PRIu32 ")",
                           path, ids[i], i, vocab_size);
    uint32_t w = width_for(vocab_size);
    unsigned char header[TOKFILE_HEADER_BYTES] = {0};
    memcpy(header, MAGIC, sizeof MAGIC);
    put_u32(header + 8, TOKFILE_VERSION);
    put_u32(header + 12, vocab_size);
    put_u32(header + 16, w);
    put_u64(header + 24, (uint64_t)n);
    put_u64(header + 32, fingerprint);
    AtomicFile af;
    TG_TRY(atomic_file_open(&af, path));
    FILE *f = atomic_file_stream(&af);
    if (fwrite(header, 1, sizeof header, f) != sizeof header) {
        TgStatus s = tg_fail(TG_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        atomic_file_abandon(&af);
        return s;
    }
    enum { BLOCK = 1 << 14 };
    unsigned char buf[BLOCK * 4];
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        for (size_t k = 0; k < m; k++) {
            uint32_t v = (uint32_t)ids[i + k];
            if (w == 2) {
                buf[2 * k] = (unsigned char)v;
                buf[2 * k + 1] = (unsigned char)(v >> 8);
            } else {
                put_u32(buf + 4 * k, v);
            }
        }
        if (fwrite(buf, w, m, f) != m) {
            TgStatus s = tg_fail(TG_ERR_IO, "cannot write %s: %s (disk full?)", path, strerror(errno));
            atomic_file_abandon(&af);
            return s;
        }
    }
    return atomic_file_commit(&af);
}

TgStatus tokfile_write(const char *path, const int32_t *ids, size_t n, uint32_t vocab_size) {
    return tokfile_write_tagged(path, ids, n, vocab_size, 0);
}

/* Reads and checks the header; leaves f positioned at the first token. */
static TgStatus read_header(FILE *f, const char *path, TokfileHeader *h) {
    unsigned char raw[TOKFILE_HEADER_BYTES];
    size_t got = fread(raw, 1, sizeof raw, f);
    if (got < sizeof MAGIC || memcmp(raw, MAGIC, sizeof MAGIC) != 0)
        return tg_fail(TG_ERR_FORMAT,
                       "%s is not a tapegrad token file (wrong magic: expected \"TGTOK\"); "
                       "make it with tapegrad prepare",
                       path);
    if (got < sizeof raw)
        return tg_fail(TG_ERR_FORMAT, "token file %s is truncated: %zu bytes, shorter than the %d-byte header",
                       path, got, TOKFILE_HEADER_BYTES);
    h->version = get_u32(raw + 8);
    h->vocab_size = get_u32(raw + 12);
    h->token_bytes = get_u32(raw + 16);
    h->n_tokens = get_u64(raw + 24);
    h->tokenizer_fingerprint = get_u64(raw + 32);
    if (h->version != TOKFILE_VERSION)
        return tg_fail(TG_ERR_FORMAT,
                       "token file %s has format version %" PRIu32 ", this build reads version %d: "
                       "prepare the data again with this tapegrad",
                       path, h->version, TOKFILE_VERSION);
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
    uint64_t have = (uint64_t)sb.st_size - TOKFILE_HEADER_BYTES;
    if (h->n_tokens > (UINT64_MAX - TOKFILE_HEADER_BYTES) / h->token_bytes || h->n_tokens > SIZE_MAX / 4)
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
    FILE *f = file_open_read(path);
    if (!f) tg_fail(TG_ERR_IO, "cannot open token file %s: %s", path, file_open_error(errno));
    return f;
}

TgStatus tokfile_read_header(const char *path, TokfileHeader *header) {
    FILE *f = open_tokfile(path);
    if (!f) return TG_ERR_IO;
    TgStatus st = read_header(f, path, header);
    fclose(f);
    return st;
}

TgStatus tokfile_read_full(const char *path, int32_t **ids_out, size_t *n_out, TokfileHeader *header) {
    *ids_out = NULL;
    *n_out = 0;
    FILE *f = open_tokfile(path);
    if (!f) return TG_ERR_IO;
    TokfileHeader h;
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

TgStatus tokfile_read_for(const char *path, uint32_t vocab_size, uint64_t fingerprint, int32_t **ids, size_t *n) {
    TokfileHeader h;
    TG_TRY(tokfile_read_full(path, ids, n, &h));
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

TgStatus tokfile_read(const char *path, int32_t **ids, size_t *n, uint32_t *vocab_size) {
    TokfileHeader h;
    TG_TRY(tokfile_read_full(path, ids, n, &h));
    *vocab_size = h.vocab_size;
    return TG_OK;
}
