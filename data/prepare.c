/* Sources -> a dataset's files, streamed (prepare.h). */
#include "data/prepare.h"
#include "tapegrad/limits.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/corpus.h"
#include "data/dataset.h"
#include "tokenizer/tokenizer_hf.h"
#include "tokenizer/tokenizer_internal.h"
#include "data/tokfile.h"
#include "support/atomic_file.h"
#include "support/atomic_folder.h"
#include "support/clock.h"
#include "support/hash.h"
#include "support/json_write.h"
#include "lib/memory.h"
#include "support/path.h"
#include "tapegrad/pool.h"

void tg_prepare_options_default(TgPrepareOptions *opt) {
    *opt = (TgPrepareOptions){
        .sources = NULL,
        .kind = TG_TOKENIZER_BPE,
        .vocab_size = 2048,
        .val_fraction = TG_PREPARE_DEFAULT_VAL_FRACTION,
        .seq_len = 256,
        .threads = 2,
    };
}

void tg_prepare_recipe(const TgPrepareOptions *opt, char *out, size_t cap) {
    size_t n;
    if (opt->tokenizer_file) {
        n = (size_t)snprintf(out, cap, "tokenizer %s", opt->tokenizer_file);
    } else if (opt->tokenizer_json) {
        const char *slash = strrchr(opt->tokenizer_json, '/');
        n = (size_t)snprintf(out, cap, "imported tokenizer %s", slash ? slash + 1 : opt->tokenizer_json);
    } else if (opt->kind == TG_TOKENIZER_CHAR) {
        n = (size_t)snprintf(out, cap, "char");
    } else {
        bool specials = opt->special_tokens && *opt->special_tokens;
        n = (size_t)snprintf(out, cap, "bpe vocab %" PRId32 "%s%s", opt->vocab_size, specials ? ", special tokens " : "",
                             specials ? opt->special_tokens : "");
    }
    if (n < cap)
        snprintf(out + n, cap - n, ", text field \"%s\", the last %g of the tokens for val, %s",
                 opt->text_field ? opt->text_field : TG_DOC_DEFAULT_TEXT_FIELD, opt->val_fraction,
                 opt->strict ? "strict" : "malformed lines skipped");
}

/* ---- reporting ------------------------------------------------------------------------------ */

typedef struct {
    const TgPrepareReporter *r;
    const char *phase;
    uint64_t total;
    double t0, last;
} Progress;

static void progress_begin(Progress *p, const TgPrepareReporter *r, const char *phase, uint64_t total) {
    *p = (Progress){r, phase, total, tg_clock_seconds(), 0};
}

static void progress_report(Progress *p, uint64_t done, bool final) {
    if (!p->r || !p->r->progress) return;
    double now = tg_clock_seconds();
    if (!final && now - p->last < 0.25) return;
    p->last = now;
    TgPrepareProgress pp = {p->phase, done, p->total, now - p->t0};
    p->r->progress(p->r->ctx, &pp);
}

/* The reporter's messages as a sink (support/messages.h). */
static TgMessageSink sink_of(const TgPrepareReporter *r) { return r ? (TgMessageSink){r->message, r->ctx} : (TgMessageSink){0}; }

/* ---- the tokenizer's pass ------------------------------------------------------------------- */

static TgDocOptions doc_options(const TgPrepareOptions *opt, bool whole) {
    return (TgDocOptions){.text_field = opt->text_field, .strict = opt->strict, .whole_documents = whole};
}

/* ChatML's markers (<|im_start|>, <|im_end|>) that the BPE being trained does not reserve, counted
 * in the text as it is read: without --special-tokens each is encoded as several byte-level ids.
 * A marker holds no '\n', so no cut between a text's pieces (sources.h) falls inside one, but
 * the cut of a 64 MiB stretch without a newline. */
typedef struct {
    char **names;
    int32_t n;
    bool watched[8];
    uint64_t found[8];
} Markers;

static TgStatus markers_begin(Markers *m, char *const *reserved, int32_t n_reserved) {
    memset(m, 0, sizeof *m);
    TG_TRY(tg_tokenizer_specials_parse("chatml", &m->names, &m->n));
    TG_CHECK(m->n <= 8, "ChatML has %d markers", (int)m->n);
    for (int32_t i = 0; i < m->n; i++) {
        m->watched[i] = true;
        for (int32_t k = 0; k < n_reserved; k++)
            if (strcmp(m->names[i], reserved[k]) == 0) m->watched[i] = false;
    }
    return TG_OK;
}

/* Each marker starts with '<': memchr finds the candidates, so text without '<' costs one scan. */
static void markers_count(Markers *m, const char *text, size_t len) {
    for (const char *p = text, *end = text + len; (p = memchr(p, '<', (size_t)(end - p))) != NULL; p++)
        for (int32_t i = 0; i < m->n; i++) {
            size_t n = strlen(m->names[i]);
            if (m->watched[i] && (size_t)(end - p) >= n && memcmp(p, m->names[i], n) == 0) m->found[i]++;
        }
}

/* One line, when the text held markers the tokenizer does not reserve. */
static void markers_report(const Markers *m, const TgPrepareOptions *opt, const TgMessageSink *sink) {
    char found[256] = "", missing[256] = "";
    size_t nf = 0, nm = 0;
    for (int32_t i = 0; i < m->n; i++) {
        if (!m->watched[i] || m->found[i] == 0) continue;
        nf += (size_t)snprintf(found + nf, nf < sizeof found ? sizeof found - nf : 0, "%s%" PRIu64 " %s", nf ? " and " : "",
                               m->found[i], m->names[i]);
        nm += (size_t)snprintf(missing + nm, nm < sizeof missing ? sizeof missing - nm : 0, ",%s", m->names[i]);
    }
    if (nf == 0) return;
    bool given = opt->special_tokens && *opt->special_tokens;
    tg_message_emit(sink, TG_MESSAGE_WARNING,
                 "the texts hold %s, which this BPE encodes as several byte-level ids each, not as markers: "
                 "%s%s%s%s makes each a single id",
                 found, given ? "`special_tokens` '" : "`special_tokens` chatml", given ? opt->special_tokens : "",
                 given ? missing : "", given ? "'" : "");
}

static void markers_end(Markers *m) { tg_tokenizer_specials_free(m->names, m->n); }

/* The BPE's counter of the texts (its special tokens reserved), and the markers to watch for. */
static TgStatus bpe_counter_open(const TgPrepareOptions *opt, TgBpeCounter **counter, Markers *markers) {
    char **names = NULL;
    int32_t n_names = 0;
    TG_TRY(tg_tokenizer_specials_parse(opt->special_tokens, &names, &n_names));
    TgStatus st = tg_bpe_counter_new(TG_TOKENIZER_SPLIT_GPT2, names, n_names, counter);
    if (st == TG_OK) st = markers_begin(markers, names, n_names);
    tg_tokenizer_specials_free(names, n_names);
    if (st != TG_OK) tg_bpe_counter_free(*counter);
    return st;
}

/* The counting pass: every piece into the BPE's counter and its markers, or (no counter: char)
 * its bytes into seen. Fails when the sources hold no document. */
static TgStatus count_sources(const TgPrepareOptions *opt, TgSourceList *list, const TgPrepareReporter *rep,
                              TgBpeCounter *counter, Markers *markers, bool seen[256], TgPrepareResult *res) {
    TgDocReader reader;
    TgDocOptions dopt = doc_options(opt, false);
    tg_doc_reader_open(&reader, list, &dopt);
    Progress progress;
    progress_begin(&progress, rep, "counting", list->file_bytes);
    TgStatus st = TG_OK;
    for (;;) {
        TgDocPiece piece;
        bool got;
        st = tg_doc_reader_next(&reader, &piece, &got);
        if (st != TG_OK || !got) break;
        if (counter) {
            tg_bpe_counter_add(counter, piece.text, piece.len);
            markers_count(markers, piece.text, piece.len);
        } else
            for (size_t i = 0; i < piece.len; i++) seen[(unsigned char)piece.text[i]] = true;
        progress_report(&progress, tg_doc_reader_disk_bytes(&reader), false);
    }
    progress_report(&progress, list->file_bytes, true);
    tg_doc_reader_close(&reader);
    res->count_seconds = tg_clock_seconds() - progress.t0;
    if (st == TG_OK && reader.documents == 0)
        st = tg_fail(TG_ERR_FORMAT,
                     "the sources hold no document to train on (%" PRIu64 " malformed lines, %" PRIu64 " empty texts, %" PRIu64
                     " binary files)%s%s; a JSONL file needs a string member \"%s\" on each line (`text_field`)",
                     reader.malformed_lines, reader.empty_texts, reader.files_binary,
                     reader.n_errors ? ": the first, " : "", reader.n_errors ? reader.errors[0] : "",
                     opt->text_field ? opt->text_field : TG_DOC_DEFAULT_TEXT_FIELD);
    return st;
}

/* The BPE learnt from the counted chunks, with a note when the word table was cut to its bounds. */
static TgStatus train_bpe(const TgPrepareOptions *opt, TgBpeCounter *counter, const TgMessageSink *sink,
                          TgPrepareResult *res, TgTokenizer *tok) {
    TgBpeCounterStats cs;
    tg_bpe_counter_stats(counter, &cs);
    res->words = cs.words;
    tg_message_emit(sink, TG_MESSAGE_INFO,
                    "counted %zu distinct chunks (%.1f MiB of word table) in %.1f s; training BPE to %" PRId32 " ids",
                    res->words, (double)cs.table_bytes / (1 << 20), res->count_seconds, opt->vocab_size);
    const TgBpeLimits *lim = tg_bpe_counter_limits(counter);
    if (cs.prunes)
        tg_message_emit(sink, TG_MESSAGE_NOTE,
                        "the word table reached its cap of %zu chunks or %zu MiB of them: %" PRIu64
                        " times its rarer half was dropped (%" PRIu64
                        " chunks), so the merges are learnt from the most "
                        "frequent chunks",
                        lim->max_words, lim->max_bytes >> 20, cs.prunes, cs.dropped);
    TgBpeTrainReport tr;
    TgStatus st = tg_bpe_counter_train(counter, opt->vocab_size, tok, &tr);
    if (st == TG_OK && tr.restarts)
        tg_message_emit(sink, TG_MESSAGE_NOTE,
                        "training would have needed more than its %zu MiB: the word table was halved %d times, to %zu "
                        "chunks",
                        lim->train_bytes >> 20, tr.restarts, tg_bpe_counter_words(counter));
    return st;
}

/* A char tokenizer of the bytes seen. */
static TgStatus train_chars(const bool seen[256], TgTokenizer *tok) {
    char bytes[256];
    int n = 0;
    for (int b = 0; b < 256; b++)
        if (seen[b]) bytes[n++] = (char)b;
    return tg_tokenizer_char_train(bytes, (size_t)n, tok);
}

/* Counts what the tokenizer is trained on, then trains it. */
static TgStatus train_tokenizer(const TgPrepareOptions *opt, TgSourceList *list, const TgPrepareReporter *rep,
                                TgPrepareResult *res, TgTokenizer *tok) {
    TgBpeCounter *counter = NULL;
    Markers markers = {0};
    if (opt->kind == TG_TOKENIZER_BPE) TG_TRY(bpe_counter_open(opt, &counter, &markers));
    bool seen[256] = {false};
    TgMessageSink sink = sink_of(rep);
    TgStatus st = count_sources(opt, list, rep, counter, &markers, seen, res);
    double t0 = tg_clock_seconds();
    if (st == TG_OK) st = counter ? train_bpe(opt, counter, &sink, res, tok) : train_chars(seen, tok);
    res->tokenizer_seconds = tg_clock_seconds() - t0;
    if (st == TG_OK) markers_report(&markers, opt, &sink);
    markers_end(&markers);
    tg_bpe_counter_free(counter);
    return st;
}

/* ---- the encoding pass ------------------------------------------------------------------------ */

typedef struct {
    size_t offset, len; /* in the batch's text */
    size_t out, n_out;  /* in the batch's ids */
    bool doc_start, doc_end;
} BatchPiece;

typedef struct {
    const TgTokenizer *tok;
    char *text;
    size_t text_len, text_cap;
    int32_t *ids;
    size_t ids_len, ids_cap;
    BatchPiece *pieces;
    size_t n, cap;
    atomic_size_t next;
    bool in_doc;                                  /* the last piece added did not end its document */
    TgChunkCache *caches[TG_PREPARE_MAX_THREADS]; /* one a thread, for the whole pass */
} Batch;

static TgStatus batch_add(Batch *b, const TgDocPiece *p) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 256;
        TG_TRY(tg_memory_grow((void **)&b->pieces, cap * sizeof *b->pieces, "a batch of documents"));
        b->cap = cap;
    }
    if (b->text_cap - b->text_len < p->len) {
        size_t cap = b->text_len + p->len > 2 * b->text_cap ? b->text_len + p->len : 2 * b->text_cap;
        TG_TRY(tg_memory_grow((void **)&b->text, cap, "a batch of documents"));
        b->text_cap = cap;
    }
    memcpy(b->text + b->text_len, p->text, p->len);
    size_t room = tg_tokenizer_max_ids(b->tok, p->len);
    b->pieces[b->n++] = (BatchPiece){b->text_len, p->len, b->ids_len, 0, !b->in_doc, p->doc_end};
    b->in_doc = !p->doc_end;
    b->text_len += p->len;
    b->ids_len += room;
    return TG_OK;
}

/* Each thread takes the batch's next piece until none is left; every piece writes its own ids. */
static void encode_pieces(void *ctx, int64_t begin, int64_t end, int thread) {
    Batch *b = ctx;
    for (;;) {
        size_t i = atomic_fetch_add(&b->next, 1);
        if (i >= b->n) return;
        BatchPiece *p = &b->pieces[i];
        TgStatus st = tg_tokenizer_encode_cached(b->tok, b->text + p->offset, p->len, b->ids + p->out,
                                              tg_tokenizer_max_ids(b->tok, p->len), &p->n_out, b->caches[thread]);
        /* the tokenizer was trained on these very bytes, or encodes any (BPE) */
        TG_CHECK(st == TG_OK, "encoding a prepared piece failed: %s", tg_error_message());
    }
}

/* Encodes the batch and appends its ids, an <eot> after each document that does not end in one
 * (and, with a tokenizer that frames documents, a BOS before each that does not start with it). */
static TgStatus flush_batch(Batch *b, TgPool *pool, TgTokfileWriter *w) {
    if (b->n == 0) return TG_OK;
    if (b->ids_cap < b->ids_len) {
        TG_TRY(tg_memory_grow((void **)&b->ids, b->ids_len * sizeof *b->ids, "the tokens of a batch"));
        b->ids_cap = b->ids_len;
    }
    atomic_store(&b->next, 0);
    int threads = tg_pool_threads(pool);
    tg_pool_parallel_for(threads > 1 ? pool : NULL, threads, encode_pieces, b);
    const int32_t eot = b->tok->eot_id, bos = b->tok->bos_id;
    for (size_t i = 0; i < b->n; i++) {
        const BatchPiece *p = &b->pieces[i];
        if (b->tok->has_bos && p->doc_start && (p->n_out == 0 || b->ids[p->out] != bos))
            TG_TRY(tg_tokfile_writer_append(w, &bos, 1));
        TG_TRY(tg_tokfile_writer_append(w, b->ids + p->out, p->n_out));
        if (p->doc_end && (p->n_out == 0 || b->ids[p->out + p->n_out - 1] != eot)) TG_TRY(tg_tokfile_writer_append(w, &eot, 1));
    }
    b->n = b->text_len = b->ids_len = 0;
    return TG_OK;
}

bool tg_prepare_whole_documents(const TgTokenizer *tok) {
    for (int32_t k = 0; k < tok->n_added; k++) {
        size_t len;
        const uint8_t *t = tg_tokenizer_token_bytes(tok, tok->added[k].id, &len);
        if (memchr(t, '\n', len)) return true;
    }
    return false;
}

static TgStatus encode_sources(const TgPrepareOptions *opt, TgSourceList *list, const TgTokenizer *tok, TgTokfileWriter *w,
                               const TgPrepareReporter *rep, TgPrepareResult *res, TgDocReader *reader) {
    TgDocOptions dopt = doc_options(opt, tg_prepare_whole_documents(tok));
    tg_doc_reader_open(reader, list, &dopt);
    int threads = opt->threads < 1 ? 1 : opt->threads > TG_PREPARE_MAX_THREADS ? TG_PREPARE_MAX_THREADS : opt->threads;
    TgPool *pool = tg_pool_create(threads);
    Batch b = {.tok = tok};
    for (int t = 0; t < threads; t++) b.caches[t] = tg_chunk_cache_new();
    Progress progress;
    progress_begin(&progress, rep, "encoding", list->file_bytes);
    TgStatus st = TG_OK;
    for (;;) {
        TgDocPiece piece;
        bool got;
        st = tg_doc_reader_next(reader, &piece, &got);
        if (st != TG_OK) break;
        if (got) st = batch_add(&b, &piece);
        if (st != TG_OK) break;
        if (!got || b.text_len >= TG_PREPARE_BATCH_BYTES) {
            st = flush_batch(&b, pool, w);
            progress_report(&progress, tg_doc_reader_disk_bytes(reader), false);
        }
        if (st != TG_OK || !got) break;
    }
    progress_report(&progress, list->file_bytes, true);
    res->encode_seconds = tg_clock_seconds() - progress.t0;
    free(b.text), free(b.ids), free(b.pieces);
    for (int t = 0; t < threads; t++) tg_chunk_cache_free(b.caches[t]);
    tg_pool_destroy(pool);
    return st;
}

/* ---- the manifest ------------------------------------------------------------------------------ */

static void hex_field(FILE *f, const char *key, uint64_t v, bool comma) {
    fprintf(f, "%s\"%s\": \"%016" PRIx64 "\"", comma ? ", " : "", key, v);
}

/* A source's path as the recipe knows it: relative to the path given (its name, for a file). */
static const char *relative_path(const char *root, const char *path) {
    size_t n = strlen(root);
    if (strncmp(path, root, n) == 0 && path[n] == '/') return path + n + 1;
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static uint64_t recipe_fingerprint(const char *recipe, const char *root, const TgSourceList *list) {
    TgHash64 h;
    tg_hash64_init(&h, 0);
    tg_hash64_update(&h, recipe, strlen(recipe) + 1);
    for (size_t i = 0; i < list->count; i++) {
        const TgSource *s = &list->items[i];
        const char *rel = relative_path(root, s->path);
        uint64_t v[3] = {s->file_bytes, s->binary ? 0 : s->text_bytes, s->binary ? 0 : s->hash};
        tg_hash64_update(&h, rel, strlen(rel) + 1);
        tg_hash64_update(&h, v, sizeof v);
    }
    uint64_t r = tg_hash64_final(&h);
    return r ? r : 1;
}

/* Text that may hold bytes that are not UTF-8 (a file's name) or be cut inside a character
 * (a kept message), as JSON a strict reader takes. */
static void write_text(FILE *f, const char *s) { tg_json_write_bytes(f, s, strlen(s)); }

static void write_split(FILE *f, const char *name, const char *file, const TgDatasetSplit *s) {
    fprintf(f, ",\n  \"%s\": {\"file\": \"%s\", \"tokens\": %" PRIu64, name, file, s->tokens);
    hex_field(f, "hash", s->hash, true);
    fputs("}", f);
}

/* What the manifest records of a preparation. */
typedef struct {
    const TgPrepareOptions *opt;
    const char *root; /* the sources as given: the recipe's paths are relative to it */
    const TgSourceList *list;
    const TgDocReader *reader; /* the encoding pass's counts */
    const TgTokenizer *tok;
    TgDatasetSplit train, val;
} Manifest;

static void write_tokenizer(FILE *f, const TgTokenizer *tok) {
    fprintf(f, ",\n  \"tokenizer\": {\"kind\": \"%s\", \"vocab_size\": %" PRId32, tg_tokenizer_kind_name(tok->kind),
            tok->vocab_size);
    hex_field(f, "fingerprint", tok->fingerprint, true);
    fputs(", \"special_tokens\": [", f);
    for (int32_t k = 0; k < tok->n_added; k++) {
        size_t len;
        const uint8_t *b = tg_tokenizer_token_bytes(tok, tok->added[k].id, &len);
        fprintf(f, "%s{\"id\": %" PRId32 ", \"text\": ", k ? ", " : "", tok->added[k].id);
        tg_json_write_bytes(f, (const char *)b, len);
        fputs("}", f);
    }
    fputs("]}", f);
}

/* What the encoding pass read, and the first malformed lines. */
static void write_counts(FILE *f, const Manifest *m, const TgPrepareResult *res) {
    const TgDocReader *reader = m->reader;
    fprintf(f,
            ",\n  \"documents\": %" PRIu64 ", \"text_bytes\": %" PRIu64 ", \"file_bytes\": %" PRIu64
            ", \"malformed_lines\": %" PRIu64 ", \"empty_texts\": %" PRIu64 ", \"binary_files\": %" PRIu64,
            reader->documents, res->text_bytes, m->list->file_bytes, reader->malformed_lines, reader->empty_texts,
            reader->files_binary);
    fputs(",\n  \"malformed_examples\": [", f);
    for (int i = 0; i < reader->n_errors; i++) {
        fputs(i ? ",\n    " : "\n    ", f);
        write_text(f, reader->errors[i]);
    }
    fputs("]", f);
}

static void write_sources(FILE *f, const TgSourceList *list) {
    fputs(",\n  \"sources\": [", f);
    for (size_t i = 0; i < list->count; i++) {
        const TgSource *s = &list->items[i];
        fputs(i ? ",\n    {\"path\": " : "\n    {\"path\": ", f);
        write_text(f, s->path);
        fprintf(f, ", \"kind\": \"%s\", \"file_bytes\": %" PRIu64 ", \"text_bytes\": %" PRIu64,
                s->binary ? "binary (skipped)" : s->kind == TG_SOURCE_JSONL ? "jsonl" : "text", s->file_bytes, s->text_bytes);
        hex_field(f, "hash", s->hash, true);
        fprintf(f, ", \"documents\": %" PRIu64 ", \"malformed_lines\": %" PRIu64 "}", s->documents, s->malformed_lines);
    }
    fputs("]", f);
}

/* The paths the listing left out, counted by why, and the first of each kind. */
static void write_skipped(FILE *f, const TgSourceList *list) {
    const TgSourceSkips *k = list->skipped;
    fprintf(f,
            ",\n  \"skipped\": {\"by_name\": %zu, \"not_files\": %zu, \"folders_again\": %zu, \"empty_files\": %zu, "
            "\"examples\": [",
            k[TG_SOURCE_SKIP_NAME].count, k[TG_SOURCE_SKIP_NOT_FILE].count, k[TG_SOURCE_SKIP_FOLDER_AGAIN].count,
            k[TG_SOURCE_SKIP_EMPTY].count);
    int examples = 0;
    for (int kind = 0; kind < TG_SOURCE_SKIP_KINDS; kind++)
        for (size_t i = 0; i < k[kind].count && i < TG_SOURCE_SKIPS_NAMED; i++) {
            fputs(examples++ ? ", " : "", f);
            write_text(f, k[kind].first[i]);
        }
    fputs("]}", f);
}

static TgStatus write_manifest(const char *dir, const Manifest *m, TgPrepareResult *res) {
    char recipe[TG_DATASET_RECIPE_CAP], path[TG_PATH_CAP];
    tg_prepare_recipe(m->opt, recipe, sizeof recipe);
    res->recipe_fingerprint = recipe_fingerprint(recipe, m->root, m->list);
    res->fingerprint = tg_dataset_fingerprint(m->tok->fingerprint, &m->train, &m->val);
    TG_TRY(tg_path_join(path, sizeof path, dir, TG_DATASET_MANIFEST_FILE));
    TgAtomicFile af;
    TG_TRY(tg_atomic_file_open(&af, path));
    FILE *f = tg_atomic_file_stream(&af);
    fprintf(f, "{\"format\": \"%s\"", TG_DATASET_FORMAT);
    fputs(",\n  ", f);
    hex_field(f, "fingerprint", res->fingerprint, false);
    fputs(",\n  \"recipe\": ", f);
    write_text(f, recipe);
    fputs(",\n  ", f);
    hex_field(f, "recipe_fingerprint", res->recipe_fingerprint, false);
    write_tokenizer(f, m->tok);
    fprintf(f, ",\n  \"split\": {\"rule\": \"%s\", \"val_fraction\": %.17g, \"seq_len\": %" PRId64 "}",
            TG_DATASET_SPLIT_RULE, m->opt->val_fraction, m->opt->seq_len);
    write_split(f, "train", TG_PREPARE_TRAIN_FILE, &m->train);
    write_split(f, "val", TG_PREPARE_VAL_FILE, &m->val);
    write_counts(f, m, res);
    write_sources(f, m->list);
    write_skipped(f, m->list);
    fputs("}\n", f);
    return tg_atomic_file_commit(&af);
}

/* ---- the whole ------------------------------------------------------------------------------------ */

static TgStatus check_options(const TgPrepareOptions *opt) {
    if (opt->kind != TG_TOKENIZER_CHAR && opt->kind != TG_TOKENIZER_BPE)
        return tg_fail(TG_ERR_ARG, "unknown tokenizer kind %d: use char or bpe", (int)opt->kind);
    if (!(opt->val_fraction > 0.0 && opt->val_fraction < 1.0) || opt->seq_len < 1) {
        size_t a, b; /* refuse bad split settings before the slow part */
        return tg_corpus_split(0, opt->val_fraction, opt->seq_len, &a, &b);
    }
    if (opt->seq_len > TG_MAX_CONTEXT) /* what a manifest may record (dataset.h) */
        return tg_fail(TG_ERR_ARG, "seq_len %" PRId64 " is past the longest context, %d", opt->seq_len, (int)TG_MAX_CONTEXT);
    bool given = opt->tokenizer_json || opt->tokenizer_file;
    if (opt->special_tokens && *opt->special_tokens && (opt->kind != TG_TOKENIZER_BPE || given))
        return tg_fail(TG_ERR_ARG, "`special_tokens` reserves tokens in a BPE that tapegrad trains; an imported "
                                   "tokenizer has its own added tokens, a char tokenizer none");
    char **names;
    int32_t n;
    TG_TRY(tg_tokenizer_specials_parse(opt->special_tokens, &names, &n));
    tg_tokenizer_specials_free(names, n);
    if (opt->kind == TG_TOKENIZER_BPE && !given && opt->vocab_size < TG_TOKENIZER_BPE_FIRST_MERGE + n)
        return tg_fail(TG_ERR_ARG, "vocab_size %" PRId32 " is too small for a byte-level BPE tokenizer: it needs at least %" PRId32
                                   " (256 bytes + <eot>%s)",
                       opt->vocab_size, TG_TOKENIZER_BPE_FIRST_MERGE + n, n ? " + the special tokens" : "");
    return TG_OK;
}

/* The tokenizer given (a tokenizer file or a tokenizer.json) or one trained on the sources, saved
 * into the dataset folder. */
static TgStatus make_tokenizer(const TgPrepareOptions *opt, TgSourceList *list, const char *dir,
                               const TgPrepareReporter *rep, TgPrepareResult *res, TgTokenizer *tok) {
    if (opt->tokenizer_json || opt->tokenizer_file) {
        double t0 = tg_clock_seconds();
        TG_TRY(opt->tokenizer_file ? tg_tokenizer_load(opt->tokenizer_file, tok) : tg_tokenizer_hf_load(opt->tokenizer_json, tok));
        res->tokenizer_seconds = tg_clock_seconds() - t0;
    } else {
        TG_TRY(train_tokenizer(opt, list, rep, res, tok));
    }
    res->vocab_size = tok->vocab_size;
    res->tokenizer_fingerprint = tok->fingerprint;
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, dir, TG_PREPARE_TOKENIZER_FILE));
    return tg_tokenizer_save(tok, path);
}

/* The dataset's two token files. */
typedef struct {
    char train[TG_PATH_CAP], val[TG_PATH_CAP];
} SplitPaths;

static TgStatus split_paths(const char *dir, SplitPaths *paths) {
    TG_TRY(tg_path_join(paths->train, sizeof paths->train, dir, TG_PREPARE_TRAIN_FILE));
    return tg_path_join(paths->val, sizeof paths->val, dir, TG_PREPARE_VAL_FILE);
}

/* The encoding pass into the train file, then cut into train and val at the split; *reader keeps
 * the pass's counts. */
static TgStatus write_tokens(const TgPrepareOptions *opt, TgSourceList *list, const TgTokenizer *tok,
                             const TgPrepareReporter *rep, const SplitPaths *paths, TgPrepareResult *res,
                             TgDocReader *reader) {
    TgTokfileWriter w;
    TG_TRY(tg_tokfile_writer_open(&w, paths->train, (uint32_t)tok->vocab_size, tok->fingerprint));
    TgStatus st = encode_sources(opt, list, tok, &w, rep, res, reader);
    tg_doc_reader_close(reader);
    res->documents = reader->documents, res->malformed_lines = reader->malformed_lines;
    res->empty_texts = reader->empty_texts, res->files_binary = reader->files_binary;
    for (size_t i = 0; i < list->count; i++) res->text_bytes += list->items[i].text_bytes;
    res->n_tokens = w.n;
    size_t n_train = 0, n_val = 0;
    if (st == TG_OK) st = tg_corpus_split((size_t)w.n, opt->val_fraction, opt->seq_len, &n_train, &n_val);
    if (st == TG_OK)
        st = tg_tokfile_writer_commit_split(&w, n_train, paths->val);
    else
        tg_tokfile_writer_abandon(&w);
    if (st == TG_OK) res->n_train = n_train, res->n_val = n_val;
    return st;
}

/* The lines the encoding pass skipped: the malformed ones (the first few quoted) and binary files. */
static void report_skipped(const TgDocReader *reader, const TgMessageSink *sink) {
    if (reader->malformed_lines > 0) {
        tg_message_emit(sink, TG_MESSAGE_WARNING,
                        "%" PRIu64 " malformed line%s skipped (`strict` stops at the first); the first:",
                        reader->malformed_lines, reader->malformed_lines == 1 ? "" : "s");
        for (int i = 0; i < reader->n_errors; i++) tg_message_emit(sink, TG_MESSAGE_WARNING, "  %s", reader->errors[i]);
    }
    if (reader->files_binary > 0)
        tg_message_emit(sink, TG_MESSAGE_WARNING, "%" PRIu64 " binary file%s skipped (first: %s)", reader->files_binary,
                        reader->files_binary == 1 ? "" : "s", reader->first_binary);
}

/* The splits as a run will read them: every id checked, the tokens hashed. */
static TgStatus read_splits(const SplitPaths *paths, const TgTokenizer *tok, TgDatasetSplit *train,
                            TgDatasetSplit *val) {
    TgDataset d = {0};
    TG_TRY(tg_token_store_open(&d.train, paths->train, (uint32_t)tok->vocab_size, tok->fingerprint));
    TgStatus st = tg_token_store_open(&d.val, paths->val, (uint32_t)tok->vocab_size, tok->fingerprint);
    *train = (TgDatasetSplit){d.train.n, d.train.hash};
    *val = (TgDatasetSplit){d.val.n, d.val.hash};
    tg_token_store_close(&d.train);
    tg_token_store_close(&d.val);
    return st;
}

/* The manifest read back by the reader every run uses, so a manifest prepare writes is one it accepts. */
static TgStatus read_manifest_back(const char *dir) {
    TgDatasetManifest *back = malloc(sizeof *back);
    if (!back) return tg_fail(TG_ERR_NOMEM, "no memory to read the manifest back");
    TgStatus st = tg_dataset_manifest_read(dir, back);
    free(back);
    return st;
}

static TgStatus prepare_sources(const TgPrepareOptions *opt, const char *sources, const char *dir,
                                const TgPrepareReporter *rep, TgPrepareResult *res, TgTokenizer *tok,
                                TgSourceList *list) {
    TgMessageSink sink = sink_of(rep);
    TG_TRY(tg_sources_list(sources, list));
    res->files = list->count, res->files_empty = list->files_empty, res->file_bytes = list->file_bytes;
    tg_message_emit(&sink, TG_MESSAGE_INFO, "preparing %s: %zu file%s, %.1f MiB", sources, list->count,
                    list->count == 1 ? "" : "s", (double)list->file_bytes / (1 << 20));
    tg_sources_report_skips(list, sources, &sink);
    TG_TRY(make_tokenizer(opt, list, dir, rep, res, tok));
    if (tok->has_bos) {
        char *bos = tg_tokenizer_hf_token_text(tok, tok->bos_id), *eos = tg_tokenizer_hf_token_text(tok, tok->eot_id);
        tg_message_emit(&sink, TG_MESSAGE_NOTE,
                        "each document framed as %s + text + %s, the BOS and EOS of the %s beside the tokenizer", bos,
                        eos, TG_TOKENIZER_HF_CONFIG_FILE);
        free(bos), free(eos);
    }
    SplitPaths paths;
    TG_TRY(split_paths(dir, &paths));
    TgDocReader reader;
    TG_TRY(write_tokens(opt, list, tok, rep, &paths, res, &reader));
    report_skipped(&reader, &sink);
    Manifest m = {.opt = opt, .root = sources, .list = list, .reader = &reader, .tok = tok};
    TG_TRY(read_splits(&paths, tok, &m.train, &m.val));
    TG_TRY(write_manifest(dir, &m, res));
    return read_manifest_back(dir);
}

TgStatus tg_prepare_into(const TgPrepareOptions *opt, const char *dir, const TgPrepareReporter *rep, TgPrepareResult *result,
                      TgTokenizer *tok_out) {
    TgPrepareResult local;
    TgPrepareResult *res = result ? result : &local;
    memset(res, 0, sizeof *res);
    if (tok_out) memset(tok_out, 0, sizeof *tok_out);
    TG_TRY(check_options(opt));
    const char *sources = opt->sources ? opt->sources : tg_corpus_default_path();
    TgSourceList list;
    TgTokenizer tok = {0};
    TgStatus st = prepare_sources(opt, sources, dir, rep, res, &tok, &list);
    tg_sources_free(&list);
    if (st == TG_OK && tok_out) *tok_out = tok;
    else tg_tokenizer_free(&tok);
    if (st != TG_OK) return tg_fail_context(st, "preparing %s", sources);
    return TG_OK;
}

/* ---- a dataset folder, whole or not at all ----------------------------------------------------- */

/* The recipe fingerprint the sources would give now: every source read once and hashed. */
static TgStatus current_recipe_fingerprint(const TgPrepareOptions *opt, const char *sources, uint64_t *fp) {
    TgSourceList list;
    TG_TRY(tg_sources_list(sources, &list));
    TgDocReader reader;
    TgDocOptions dopt = {.text_field = opt->text_field};
    tg_doc_reader_open(&reader, &list, &dopt);
    TgStatus st;
    for (;;) {
        TgDocPiece piece;
        bool got;
        st = tg_doc_reader_next(&reader, &piece, &got);
        if (st != TG_OK || !got) break;
    }
    tg_doc_reader_close(&reader);
    char recipe[TG_DATASET_RECIPE_CAP];
    tg_prepare_recipe(opt, recipe, sizeof recipe);
    if (st == TG_OK) *fp = recipe_fingerprint(recipe, sources, &list);
    tg_sources_free(&list);
    return st;
}

static bool folder_is_empty(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return false;
    struct dirent *e;
    bool empty = true;
    while (empty && (e = readdir(d))) empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    closedir(d);
    return empty;
}

/* An existing out_dir: the same dataset, whole (*same, its manifest in *m), an empty folder, or
 * refused. "Whole" is what a run opening it would find: tg_dataset_open, the one check. */
static TgStatus check_existing(const TgPrepareOptions *opt, const char *sources, const char *out_dir, bool *same,
                               TgDatasetManifest *m) {
    *same = false;
    struct stat sb;
    if (stat(out_dir, &sb) != 0) return TG_OK;
    if (S_ISDIR(sb.st_mode) && folder_is_empty(out_dir)) return TG_OK;
    if (!S_ISDIR(sb.st_mode) || !tg_dataset_is_dataset(out_dir))
        return tg_fail(TG_ERR_IO, "%s exists and is not a dataset folder: give `out_dir` a new path (or an empty folder)", out_dir);
    TgDataset d;
    TgStatus st = tg_dataset_manifest_read(out_dir, &d.manifest);
    if (st == TG_OK) {
        char recipe[TG_DATASET_RECIPE_CAP];
        tg_prepare_recipe(opt, recipe, sizeof recipe);
        if (strcmp(recipe, d.manifest.recipe) != 0)
            return tg_fail(TG_ERR_IO,
                           "%s holds another dataset, prepared with %s; this asks for %s: give `out_dir` another path, or remove it",
                           out_dir, d.manifest.recipe, recipe);
        st = tg_dataset_open(out_dir, true, &d);
        if (st == TG_OK) {
            *m = d.manifest;
            tg_dataset_close(&d);
        }
    }
    if (st != TG_OK) /* prepare writes a folder whole or not at all, never into one: the user removes it */
        return tg_fail(st, "%s holds a dataset that cannot be opened: %s. prepare writes no file into an existing folder: "
                           "remove %s and prepare again, or give `out_dir` another path",
                       out_dir, tg_error_message(), out_dir);
    uint64_t fp;
    TG_TRY(current_recipe_fingerprint(opt, sources, &fp));
    if (fp != m->recipe_fingerprint)
        return tg_fail(TG_ERR_IO,
                       "%s holds a dataset of the same recipe but other sources (the files under %s differ from those "
                       "it was prepared from: see its %s): give `out_dir` another path, or remove it",
                       out_dir, sources, TG_DATASET_MANIFEST_FILE);
    *same = true;
    return TG_OK;
}

TgStatus tg_prepare_dataset(const TgPrepareOptions *opt, const char *out_dir, const TgPrepareReporter *rep,
                         TgPrepareResult *result, bool *already) {
    TgPrepareResult local;
    TgPrepareResult *res = result ? result : &local;
    memset(res, 0, sizeof *res);
    if (already) *already = false;
    if (!out_dir || !*out_dir) return tg_fail(TG_ERR_ARG, "no output folder given for the dataset: pass `out_dir` DIR");
    TG_TRY(check_options(opt));
    const char *sources = opt->sources ? opt->sources : tg_corpus_default_path();
    bool same;
    TgDatasetManifest *m = malloc(sizeof *m); /* 32 KiB of recipe: not on the stack */
    if (!m) return tg_fail(TG_ERR_NOMEM, "no memory to read %s's manifest", out_dir);
    TgStatus st = check_existing(opt, sources, out_dir, &same, m);
    if (st == TG_OK && same) {
        res->fingerprint = m->fingerprint, res->recipe_fingerprint = m->recipe_fingerprint;
        res->n_train = m->train.tokens, res->n_val = m->val.tokens, res->n_tokens = m->train.tokens + m->val.tokens;
        if (already) *already = true;
    }
    free(m);
    if (st != TG_OK || same) return st;
    char parent[TG_PATH_CAP];
    tg_path_folder(out_dir, parent, sizeof parent);
    TG_TRY(tg_make_folders(parent));
    TgAtomicFolder folder; /* an empty folder given as --out is replaced by the commit */
    TG_TRY(tg_atomic_folder_open(&folder, out_dir));
    st = tg_prepare_into(opt, folder.temp, rep, res, NULL);
    if (st == TG_OK) st = tg_atomic_folder_commit(&folder, NULL, NULL);
    tg_atomic_folder_abandon(&folder); /* nothing once committed */
    return st;
}
