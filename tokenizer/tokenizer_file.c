/* The tokenizer file, tokenizer.txt (tokenizer.h): saving and loading it. */
#include "tapegrad/tokenizer.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/atomic_file.h"
#include "support/file_read.h"
#include "support/path.h"
#include "tapegrad/limits.h"
#include "tokenizer/tokenizer_hf.h"
#include "tokenizer/tokenizer_internal.h"

static const char MAGIC[] = "tapegrad-tokenizer";

/* ---- saving ---------------------------------------------------------------------------- */

static void write_escaped(FILE *f, const uint8_t *b, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        uint8_t c = b[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c >= 0x20 && c < 0x7f) fputc(c, f);
        else fprintf(f, "\\x%02x", c);
    }
    fputc('"', f);
}

/* The sizes and the char table or the merges of a tokenizer file. */
static void save_entries(FILE *f, const TgTokenizer *tok) {
    fprintf(f, "vocab_size %" PRId32 "\neot_id %" PRId32 "\n", tok->vocab_size, tok->eot_id);
    if (tok->n_specials > 0) {
        fprintf(f, "special_tokens %" PRId32 "\n", tok->n_specials);
        for (int32_t k = 0; k < tok->n_specials; k++) fprintf(f, "%s\n", tok->specials[k]);
    }
    if (tok->kind == TG_TOKENIZER_CHAR) {
        fprintf(f, "chars %" PRId32 "\n", tok->n_chars);
        for (int32_t i = 0; i < tok->n_chars; i++) {
            fprintf(f, "%u\t# ", tok->chars[i]);
            write_escaped(f, &tok->chars[i], 1);
            fputc('\n', f);
        }
        return;
    }
    fprintf(f, "merges %" PRId32 "\n", tok->n_merges);
    for (int32_t i = 0; i < tok->n_merges; i++) {
        size_t l;
        const uint8_t *b = tg_tokenizer_token_bytes(tok, tokenizer_first_merge(tok) + i, &l);
        fprintf(f, "%" PRId32 " %" PRId32 "\t# ", tok->merges[i].left, tok->merges[i].right);
        write_escaped(f, b, l);
        fputc('\n', f);
    }
}

TgStatus tg_tokenizer_save(const TgTokenizer *tok, const char *path) {
    TG_CHECK(tok->kind == TG_TOKENIZER_CHAR || tok->kind == TG_TOKENIZER_BPE, "saving an empty tokenizer");
    bool gpt2 = tok->kind == TG_TOKENIZER_BPE && tok->split == TG_TOKENIZER_SPLIT_GPT2;
    if (tok->hf) {
        char folder[TG_PATH_CAP], json[TG_PATH_CAP];
        tg_path_folder(path, folder, sizeof folder);
        TG_TRY(tg_path_join(json, sizeof json, folder, TG_TOKENIZER_HF_FILE));
        TG_TRY(tg_tokenizer_hf_save(tok, json));
    }
    TgAtomicFile af;
    TG_TRY(tg_atomic_file_open(&af, path));
    FILE *f = tg_atomic_file_stream(&af);
    int version = tok->n_specials > 0 ? TG_TOKENIZER_FILE_VERSION : gpt2 ? 2 : 1;
    fprintf(f, "%s %d\nkind %s\n", MAGIC, version, tg_tokenizer_kind_name(tok->kind));
    if (gpt2) fputs("split gpt2\n", f);
    if (tok->hf) fprintf(f, "file %s\n", TG_TOKENIZER_HF_FILE);
    else save_entries(f, tok);
    fprintf(f, "fingerprint %016" PRIx64 "\n", tok->fingerprint);
    TgStatus st = tg_atomic_file_commit(&af);
    if (st != TG_OK) return tg_fail_context(st, "saving tokenizer");
    return TG_OK;
}

/* ---- loading --------------------------------------------------------------------------- */

typedef struct {
    FILE *f;
    const char *path;
    char *line;
    size_t cap;
    int64_t lineno;
} LineReader;

/* Reads the next line without its newline; false at end of file. */
static bool next_line(LineReader *r) {
    ssize_t n = getline(&r->line, &r->cap, r->f);
    if (n < 0) return false;
    r->lineno++;
    while (n > 0 && (r->line[n - 1] == '\n' || r->line[n - 1] == '\r')) r->line[--n] = '\0';
    return true;
}

static TgStatus need_line(LineReader *r, const char *what) {
    if (next_line(r)) return TG_OK;
    return tg_fail(TG_ERR_FORMAT,
                   "tokenizer file %s is truncated: it ends after line %" PRId64 " where %s "
                   "should follow; save the tokenizer again (tapegrad prepare)",
                   r->path, r->lineno, what);
}

/* Parses up to `count` integers from s, then allows only blanks or a '#' comment. */
static bool parse_ints(const char *s, int64_t *vals, int count) {
    for (int i = 0; i < count; i++) {
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (end == s || errno) return false;
        vals[i] = v;
        s = end;
    }
    while (*s == ' ' || *s == '\t') s++;
    return *s == '\0' || *s == '#';
}

/* "key N" with lo <= N <= hi, on the line just read. */
static TgStatus parse_field_here(LineReader *r, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    size_t kl = strlen(key);
    if (strncmp(r->line, key, kl) != 0 || (r->line[kl] != ' ' && r->line[kl] != '\t') ||
        !parse_ints(r->line + kl, out, 1))
        return tg_fail(TG_ERR_FORMAT, "tokenizer file %s, line %" PRId64 ": expected \"%s N\", found \"%.80s\"",
                       r->path, r->lineno, key, r->line);
    if (*out < lo || *out > hi)
        return tg_fail(TG_ERR_FORMAT,
                       "tokenizer file %s, line %" PRId64 ": %s %" PRId64 " is outside [%" PRId64
                       ", %" PRId64 "]",
                       r->path, r->lineno, key, *out, lo, hi);
    return TG_OK;
}

/* "key N" with lo <= N <= hi, on the next line. */
static TgStatus parse_field(LineReader *r, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    TG_TRY(need_line(r, key));
    return parse_field_here(r, key, lo, hi, out);
}

/* The char table or the merges of a tokenizer file. */
/* "special_tokens K" and K names (version 3). */
static TgStatus load_specials(LineReader *r, TgTokenizer *tok) {
    int64_t count;
    TG_TRY(parse_field(r, "special_tokens", 1, TG_TOKENIZER_MAX_SPECIALS, &count));
    tok->specials = tg_calloc((size_t)count, sizeof *tok->specials);
    for (int64_t k = 0; k < count; k++) {
        TG_TRY(need_line(r, "a special token"));
        size_t len = strlen(r->line);
        char origin[TG_PATH_CAP + 48];
        snprintf(origin, sizeof origin, "tokenizer file %s, line %" PRId64, r->path, r->lineno);
        if (tg_tokenizer_special_check(r->line, len, origin) != TG_OK) return tg_fail(TG_ERR_FORMAT, "%s", tg_error_message());
        tok->specials[k] = strdup(r->line);
        tok->n_specials = (int32_t)(k + 1);
    }
    return TG_OK;
}

static TgStatus load_entries(LineReader *r, TgTokenizer *tok, int64_t vocab, int64_t version) {
    int64_t count;
    if (tok->kind == TG_TOKENIZER_CHAR) {
        TG_TRY(parse_field(r, "chars", 1, 256, &count));
        tok->n_chars = (int32_t)count;
        for (int64_t i = 0; i < count; i++) {
            int64_t b;
            TG_TRY(need_line(r, "a char byte"));
            if (!parse_ints(r->line, &b, 1) || b < 0 || b > 255)
                return tg_fail(TG_ERR_FORMAT,
                               "tokenizer file %s, line %" PRId64 ": expected a byte value 0..255, "
                               "found \"%.60s\"",
                               r->path, r->lineno, r->line);
            tok->chars[i] = (uint8_t)b;
        }
        return TG_OK;
    }
    if (vocab < TG_TOKENIZER_BPE_FIRST_MERGE)
        return tg_fail(TG_ERR_FORMAT,
                       "tokenizer file %s: a BPE vocab_size is at least %d, not %" PRId64,
                       r->path, TG_TOKENIZER_BPE_FIRST_MERGE, vocab);
    if (version >= 3) TG_TRY(load_specials(r, tok));
    int64_t first_merge = TG_TOKENIZER_BPE_FIRST_MERGE + tok->n_specials;
    if (vocab < first_merge)
        return tg_fail(TG_ERR_FORMAT, "tokenizer file %s: vocab_size %" PRId64 " is below the %" PRId64 " ids of its bytes, <eot> and special tokens",
                       r->path, vocab, first_merge);
    TG_TRY(parse_field(r, "merges", vocab - first_merge, vocab - first_merge, &count));
    /* grown as lines arrive, so a corrupt count cannot ask for a huge block up front */
    int64_t cap = 0;
    for (int64_t i = 0; i < count; i++) {
        if (i == cap) {
            cap = cap ? 2 * cap : 1024;
            tok->merges = tg_realloc(tok->merges, (size_t)cap * sizeof *tok->merges);
        }
        int64_t lr[2];
        TG_TRY(need_line(r, "a merge line"));
        if (!parse_ints(r->line, lr, 2) || lr[0] < 0 || lr[1] < 0 || lr[0] > INT32_MAX ||
            lr[1] > INT32_MAX)
            return tg_fail(TG_ERR_FORMAT,
                           "tokenizer file %s, line %" PRId64 ": expected a merge \"left right\", "
                           "found \"%.60s\"",
                           r->path, r->lineno, r->line);
        tok->merges[i] = (TgTokenPair){(int32_t)lr[0], (int32_t)lr[1]};
        tok->n_merges = (int32_t)(i + 1);
    }
    return TG_OK;
}

/* "file NAME": an imported tokenizer's tokenizer.json, which must sit beside the file. */
static TgStatus load_imported(LineReader *r, TgTokenizer *tok) {
    const char *name = r->line + 5;
    if (strcmp(name, TG_TOKENIZER_HF_FILE) != 0)
        return tg_fail(TG_ERR_FORMAT, "tokenizer file %s, line %" PRId64 ": expected \"file %s\", found \"%.60s\"",
                       r->path, r->lineno, TG_TOKENIZER_HF_FILE, r->line);
    char folder[TG_PATH_CAP], json[TG_PATH_CAP];
    tg_path_folder(r->path, folder, sizeof folder);
    TG_TRY(tg_path_join(json, sizeof json, folder, TG_TOKENIZER_HF_FILE));
    return tg_tokenizer_hf_load(json, tok);
}

/* The header of a tokenizer file: the magic line with the format version, the kind, and from
 * version 2 the split. */
static TgStatus load_header(LineReader *r, TgTokenizer *tok, int64_t *version) {
    TG_TRY(need_line(r, "the magic line"));
    size_t ml = strlen(MAGIC);
    if (strncmp(r->line, MAGIC, ml) != 0 || r->line[ml] != ' ' || !parse_ints(r->line + ml, version, 1))
        return tg_fail(TG_ERR_FORMAT,
                       "%s is not a tapegrad tokenizer file: its first line is \"%.60s\", expected "
                       "\"%s %d\"",
                       r->path, r->line, MAGIC, TG_TOKENIZER_FILE_VERSION);
    if (*version < 1 || *version > TG_TOKENIZER_FILE_VERSION)
        return tg_fail(TG_ERR_FORMAT,
                       "tokenizer file %s has format version %" PRId64 ", this build reads "
                       "versions 1 to %d: use a matching tapegrad or prepare the data again",
                       r->path, *version, TG_TOKENIZER_FILE_VERSION);
    TG_TRY(need_line(r, "\"kind char|bpe\""));
    if (strcmp(r->line, "kind char") == 0) tok->kind = TG_TOKENIZER_CHAR;
    else if (strcmp(r->line, "kind bpe") == 0) tok->kind = TG_TOKENIZER_BPE;
    else
        return tg_fail(TG_ERR_FORMAT,
                       "tokenizer file %s, line %" PRId64 ": expected \"kind char\" or \"kind bpe\", "
                       "found \"%.60s\"",
                       r->path, r->lineno, r->line);
    if (*version >= 2) {
        TG_TRY(need_line(r, "\"split gpt2\""));
        if (tok->kind != TG_TOKENIZER_BPE || strcmp(r->line, "split gpt2") != 0)
            return tg_fail(TG_ERR_FORMAT, "tokenizer file %s, line %" PRId64 ": expected \"split gpt2\" after \"kind bpe\", found \"%.60s\"",
                           r->path, r->lineno, r->line);
        tok->split = TG_TOKENIZER_SPLIT_GPT2;
    }
    return TG_OK;
}

/* The last line, "fingerprint HEX", into *stored; nothing but blank lines may follow it. */
static TgStatus load_fingerprint(LineReader *r, uint64_t *stored) {
    TG_TRY(need_line(r, "the fingerprint line"));
    char extra;
    if (sscanf(r->line, "fingerprint %16" SCNx64 " %c", stored, &extra) != 1)
        return tg_fail(TG_ERR_FORMAT,
                       "tokenizer file %s, line %" PRId64 ": expected \"fingerprint HEX\", found "
                       "\"%.60s\" (more entries than the header announced?)",
                       r->path, r->lineno, r->line);
    while (next_line(r))
        if (r->line[strspn(r->line, " \t")] != '\0')
            return tg_fail(TG_ERR_FORMAT,
                           "tokenizer file %s, line %" PRId64 ": unexpected text after the fingerprint: \"%.60s\"",
                           r->path, r->lineno, r->line);
    return TG_OK;
}

/* The body of a tokenizer file, read top to bottom in the file's own order (kind, split,
 * sizes, the char table or the merges, the fingerprint). */
static TgStatus load_body(LineReader *r, TgTokenizer *tok) {
    int64_t version = 0;
    TG_TRY(load_header(r, tok, &version));
    TG_TRY(need_line(r, "vocab_size"));
    if (version >= 2 && strncmp(r->line, "file ", 5) == 0) {
        TG_TRY(load_imported(r, tok));
    } else {
        int64_t vocab, eot;
        TG_TRY(parse_field_here(r, "vocab_size", 2, TG_MAX_VOCAB, &vocab));
        TG_TRY(parse_field(r, "eot_id", 0, vocab - 1, &eot));
        tok->vocab_size = (int32_t)vocab;
        tok->eot_id = (int32_t)eot;
        TG_TRY(load_entries(r, tok, vocab, version));
    }
    uint64_t stored;
    TG_TRY(load_fingerprint(r, &stored));
    char origin[TG_PATH_CAP + 32];
    snprintf(origin, sizeof origin, "tokenizer file %s", r->path);
    if (!tok->hf) { /* tg_tokenizer_hf_load finished it */
        TgStatus st = tg_tokenizer_finish(tok, origin);
        if (st == TG_ERR_NOMEM) return tg_fail(st, "out of memory reading %s (%s)", origin, tg_error_message());
        TG_TRY(st);
    }
    if (tok->fingerprint != stored)
        return tg_fail(TG_ERR_FORMAT,
                       "tokenizer file %s is corrupt or was edited: its contents hash to "
                       "%016" PRIx64 " but it records fingerprint %016" PRIx64
                       "; prepare the data again to get a consistent tokenizer",
                       r->path, tok->fingerprint, stored);
    return TG_OK;
}

TgStatus tg_tokenizer_load(const char *path, TgTokenizer *tok) {
    memset(tok, 0, sizeof *tok);
    LineReader r = {.path = path};
    r.f = tg_file_open_read(path);
    if (!r.f) return tg_fail(TG_ERR_IO, "cannot open tokenizer file %s: %s", path, tg_file_open_error(errno));
    TgStatus st = load_body(&r, tok);
    free(r.line);
    fclose(r.f);
    if (st != TG_OK) tg_tokenizer_free(tok);
    return st;
}
