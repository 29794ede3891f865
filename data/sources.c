/* Sources -> documents, in pieces (sources.h). */
#include "data/sources.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/corpus.h"
#include "lib/memory.h"

/* ---- listing ------------------------------------------------------------------------------- */

/* path inside root, as a message shows it: "sub/x" for root "DIR" and path "DIR/sub/x" */
static const char *relative_name(const char *root, const char *path) {
    size_t n = strlen(root);
    return strncmp(path, root, n) == 0 && path[n] == '/' ? path + n + 1 : path;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

bool tg_sources_name_is_jsonl(const char *name) {
    return ends_with(name, ".jsonl") || ends_with(name, ".jsonl.gz") || ends_with(name, ".ndjson") ||
           ends_with(name, ".ndjson.gz");
}

static void note_skip(TgSourceList *l, TgSourceSkip why, const char *path, const char *what) {
    TgSourceSkips *k = &l->skipped[why];
    if (k->count < TG_SOURCE_SKIPS_NAMED)
        snprintf(k->first[k->count], sizeof k->first[0], "%s%s%s%s", path, *what ? " (" : "", what, *what ? ")" : "");
    k->count++;
}

static void skipped_entry(void *ctx, const char *path, TgCorpusSkip why, const char *what) {
    _Static_assert(TG_SOURCE_SKIP_NAME == (int)TG_CORPUS_SKIP_NAME && TG_SOURCE_SKIP_NOT_FILE == (int)TG_CORPUS_SKIP_NOT_FILE &&
                       TG_SOURCE_SKIP_FOLDER_AGAIN == (int)TG_CORPUS_SKIP_FOLDER_AGAIN && TG_SOURCE_SKIP_EMPTY == (int)TG_CORPUS_SKIP_KINDS,
                   "SourceSkip begins with CorpusSkip's kinds");
    note_skip(ctx, (TgSourceSkip)why, path, what);
}

static TgStatus add_source(void *ctx, const char *path) {
    TgSourceList *l = ctx;
    struct stat sb;
    if (stat(path, &sb) != 0) return tg_fail(TG_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) /* replaced since the walk saw it */
        return tg_fail(TG_ERR_IO, "corpus entry %s is no longer a regular file", path);
    if (sb.st_size == 0) {
        l->files_empty++;
        note_skip(l, TG_SOURCE_SKIP_EMPTY, path, "");
        return TG_OK;
    }
    if (l->count == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->items = tg_realloc(l->items, l->cap * sizeof *l->items);
    }
    const char *slash = strrchr(path, '/');
    size_t len = strlen(path) + 1;
    TgSource *s = &l->items[l->count++];
    *s = (TgSource){.path = tg_malloc(len), .file_bytes = (uint64_t)sb.st_size};
    memcpy(s->path, path, len);
    s->kind = tg_sources_name_is_jsonl(slash ? slash + 1 : path) ? TG_SOURCE_JSONL : TG_SOURCE_TEXT;
    l->file_bytes += s->file_bytes;
    return TG_OK;
}

TgStatus tg_sources_list(const char *path, TgSourceList *l) {
    memset(l, 0, sizeof *l);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return tg_fail(TG_ERR_IO,
                       "corpus path %s: %s; give a text or JSONL file (gzip-compressed or not) or a folder of them",
                       path, strerror(errno));
    TgStatus s;
    if (S_ISDIR(sb.st_mode)) s = tg_corpus_walk(path, add_source, skipped_entry, l);
    else if (S_ISREG(sb.st_mode)) s = add_source(l, path);
    else s = tg_fail(TG_ERR_ARG, "corpus path %s is neither a regular file nor a folder", path);
    if (s == TG_OK && l->count == 0)
        s = S_ISDIR(sb.st_mode) ? tg_fail(TG_ERR_FORMAT,
                                          "corpus folder %s is empty: it holds no non-empty files (hidden files "
                                          "and names ending in .dat or .u8 are skipped)",
                                          path)
                                : tg_fail(TG_ERR_FORMAT, "corpus file %s is empty: give a file with some text in it", path);
    if (s != TG_OK) tg_sources_free(l);
    return s;
}

void tg_sources_report_skips(const TgSourceList *l, const char *path, const TgMessageSink *sink) {
    static const struct {
        TgMessageLevel level;
        const char *what, *rule;
    } kinds[TG_SOURCE_SKIP_KINDS] = {
        [TG_SOURCE_SKIP_NAME] = {TG_MESSAGE_NOTE, "by name", "hidden names, *.dat and *.u8 are not read"},
        [TG_SOURCE_SKIP_NOT_FILE] = {TG_MESSAGE_WARNING, "neither files nor folders",
                                  "FIFOs, sockets and devices are never opened: copy the data into a file"},
        [TG_SOURCE_SKIP_FOLDER_AGAIN] = {TG_MESSAGE_WARNING, "folders reached a second time", "each folder is read once"},
        [TG_SOURCE_SKIP_EMPTY] = {TG_MESSAGE_NOTE, "empty files", "they hold no document"},
    };
    for (int k = 0; k < TG_SOURCE_SKIP_KINDS; k++) {
        const TgSourceSkips *s = &l->skipped[k];
        if (s->count == 0) continue;
        char names[3 * sizeof s->first[0] + 32] = "";
        size_t n = 0, shown = s->count < TG_SOURCE_SKIPS_NAMED ? s->count : TG_SOURCE_SKIPS_NAMED;
        for (size_t i = 0; i < shown && n < sizeof names; i++)
            n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "", relative_name(path, s->first[i]));
        if (s->count > shown && n < sizeof names) snprintf(names + n, sizeof names - n, ", and %zu more", s->count - shown);
        tg_message_emit(sink, kinds[k].level, "%s: %zu entr%s skipped, %s: %s; %s", path, s->count, s->count == 1 ? "y" : "ies",
                     kinds[k].what, names, kinds[k].rule);
    }
}

void tg_sources_free(TgSourceList *l) {
    for (size_t i = 0; i < l->count; i++) free(l->items[i].path);
    free(l->items);
    memset(l, 0, sizeof *l);
}

/* ---- reading documents -------------------------------------------------------------------- */

TgStatus tg_doc_reader_open(TgDocReader *r, TgSourceList *list, const TgDocOptions *opt) {
    memset(r, 0, sizeof *r);
    r->list = list;
    r->opt = *opt;
    if (!r->opt.text_field) r->opt.text_field = TG_DOC_DEFAULT_TEXT_FIELD;
    for (size_t i = 0; i < list->count; i++) {
        TgSource *s = &list->items[i];
        s->text_bytes = s->hash = s->documents = s->malformed_lines = s->empty_lines = 0;
        s->binary = s->read = false;
    }
    return TG_OK;
}

static void close_current(TgDocReader *r, bool finished) {
    TgSource *s = &r->list->items[r->current];
    TgFileStream *fs = s->kind == TG_SOURCE_JSONL ? &r->jsonl.fs : &r->fs;
    if (finished) {
        s->text_bytes = fs->text_bytes;
        s->hash = tg_hash64_final(&fs->hash);
        s->read = true;
        if (s->kind == TG_SOURCE_JSONL) s->empty_lines = (uint64_t)r->jsonl.empty_lines;
    }
    if (s->kind == TG_SOURCE_JSONL) tg_jsonl_close(&r->jsonl);
    else tg_file_stream_close(&r->fs);
    r->open = false;
    r->bytes_before += s->file_bytes;
    r->current++;
}

void tg_doc_reader_close(TgDocReader *r) {
    if (r->open) close_current(r, false);
    free(r->buf);
    r->buf = NULL;
}

uint64_t tg_doc_reader_disk_bytes(const TgDocReader *r) {
    if (!r->open) return r->bytes_before;
    const TgSource *s = &r->list->items[r->current];
    return r->bytes_before + tg_file_stream_disk_offset(s->kind == TG_SOURCE_JSONL ? &r->jsonl.fs : &r->fs);
}

static TgStatus reserve(TgDocReader *r, size_t need) {
    if (r->cap >= need) return TG_OK;
    size_t cap = r->cap ? r->cap : 1 << 16;
    while (cap < need) cap *= 2;
    TG_TRY(tg_memory_grow((void **)&r->buf, cap, "a document's text"));
    r->cap = cap;
    return TG_OK;
}

/* Reads until at least `want` unread bytes are buffered or the file ends. */
static TgStatus fill_text(TgDocReader *r, size_t want) {
    if (r->start > 0) {
        memmove(r->buf, r->buf + r->start, r->end - r->start);
        r->end -= r->start, r->start = 0;
    }
    while (!r->at_eof && r->end < want) {
        TG_TRY(reserve(r, r->end + TG_JSONL_BLOCK_BYTES));
        size_t got;
        TG_TRY(tg_file_stream_read(&r->fs, r->buf + r->end, TG_JSONL_BLOCK_BYTES, &got));
        r->end += got;
        if (got == 0) r->at_eof = true;
    }
    return TG_OK;
}

/* Where a piece of buf[start, end) may end: after the last '\n' a printable ASCII byte follows,
 * or 0 when there is none. */
static size_t safe_cut(const TgDocReader *r) {
    for (size_t p = r->end - 1; p > r->start; p--)
        if (r->buf[p - 1] == '\n' && r->buf[p] >= 0x21 && r->buf[p] <= 0x7e) return p;
    return 0;
}

static void note_error(TgDocReader *r, const char *fmt, const char *a, const char *b) {
    if (r->n_errors < TG_DOC_REPORTED_ERRORS) snprintf(r->errors[r->n_errors++], sizeof r->errors[0], fmt, a, b);
}

/* The next piece of the open text source; *got false when it has none left. */
static TgStatus next_text_piece(TgDocReader *r, TgDocPiece *piece, bool *got) {
    TgSource *s = &r->list->items[r->current];
    *got = false;
    TG_TRY(fill_text(r, TG_DOC_PIECE_BYTES));
    if (!r->checked_binary) {
        r->checked_binary = true;
        size_t n = r->end - r->start < TG_JSONL_BLOCK_BYTES ? r->end - r->start : TG_JSONL_BLOCK_BYTES;
        if (tg_corpus_is_binary(r->buf + r->start, n)) {
            s->binary = true;
            if (r->files_binary++ == 0) snprintf(r->first_binary, sizeof r->first_binary, "%s", s->path);
            return TG_OK;
        }
    }
    for (;;) {
        size_t have = r->end - r->start;
        if (have == 0) return TG_OK;
        if (r->at_eof && have <= TG_DOC_MAX_PIECE_BYTES) {
            *piece = (TgDocPiece){r->buf + r->start, have, true};
            r->start = r->end;
            *got = true;
            return TG_OK;
        }
        size_t cut = r->opt.whole_documents ? 0 : safe_cut(r);
        if (cut == 0 && have >= TG_DOC_MAX_PIECE_BYTES) {
            cut = r->start + TG_DOC_MAX_PIECE_BYTES;
            while (cut > r->start + 1 && ((unsigned char)r->buf[cut] & 0xC0) == 0x80) cut--; /* a character's start */
        }
        if (cut > r->start) {
            *piece = (TgDocPiece){r->buf + r->start, cut - r->start, false};
            r->start = cut;
            *got = true;
            return TG_OK;
        }
        TG_TRY(fill_text(r, have + TG_DOC_PIECE_BYTES));
    }
}

/* The next document of the open JSONL source; *got false at its end. */
static TgStatus next_jsonl_piece(TgDocReader *r, TgDocPiece *piece, bool *got) {
    TgSource *s = &r->list->items[r->current];
    *got = false;
    for (;;) {
        TgJsonlLine line;
        TG_TRY(tg_jsonl_next(&r->jsonl, &line));
        if (line.kind == TG_JSONL_END) return TG_OK;
        TgJsonString value;
        if (line.kind == TG_JSONL_OBJECT &&
            !tg_jsonl_string_member(&line, r->opt.text_field, &value, line.why, sizeof line.why))
            line.kind = TG_JSONL_MALFORMED;
        if (line.kind == TG_JSONL_MALFORMED) {
            s->malformed_lines++, r->malformed_lines++;
            note_error(r, "%s: %s", s->path, line.why);
            if (r->opt.strict)
                return tg_fail(TG_ERR_FORMAT, "%s: %s (`strict` stops at the first malformed line)", s->path, line.why);
            continue;
        }
        TG_TRY(reserve(r, value.raw_len + 1));
        size_t len = tg_json_decode(value, r->buf);
        if (len == 0) {
            r->empty_texts++;
            continue;
        }
        *piece = (TgDocPiece){r->buf, len, true};
        *got = true;
        return TG_OK;
    }
}

TgStatus tg_doc_reader_next(TgDocReader *r, TgDocPiece *piece, bool *got) {
    *got = false;
    while (r->current < r->list->count) {
        TgSource *s = &r->list->items[r->current];
        if (!r->open) {
            TG_TRY(s->kind == TG_SOURCE_JSONL ? tg_jsonl_open(&r->jsonl, s->path) : tg_file_stream_open(&r->fs, s->path));
            r->open = true;
            r->start = r->end = 0;
            r->at_eof = r->checked_binary = false;
        }
        TgStatus st = s->kind == TG_SOURCE_JSONL ? next_jsonl_piece(r, piece, got) : next_text_piece(r, piece, got);
        if (st != TG_OK) return st;
        if (*got) {
            if (piece->doc_end) s->documents++, r->documents++;
            return TG_OK;
        }
        close_current(r, !s->binary);
    }
    return TG_OK;
}
