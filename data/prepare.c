/* Sources -> a dataset's files, streamed (prepare.h). */
#include "data/prepare.h"

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
#include "data/tokenizer_hf.h"
#include "data/tokenizer_internal.h"
#include "data/tokfile.h"
#include "lib/atomic_file.h"
#include "lib/clock.h"
#include "lib/hash.h"
#include "lib/json_write.h"
#include "lib/memory.h"
#include "lib/path.h"
#include "tapegrad/pool.h"

void prepare_options_default(PrepareOptions *opt) {
    *opt = (PrepareOptions){
        .sources = NULL,
        .kind = TG_TOKENIZER_BPE,
        .vocab_size = 2048,
        .val_fraction = PREPARE_DEFAULT_VAL_FRACTION,
        .seq_len = 256,
        .threads = 2,
    };
}

TgStatus corpus_split(size_t n, double val_fraction, int64_t seq_len, size_t *n_train, size_t *n_val) {
    if (!(val_fraction > 0.0 && val_fraction < 1.0))
        return tg_fail(TG_ERR_ARG, "val_fraction %g is not in (0, 1): give e.g. 0.1 for the last 10%%",
                       val_fraction);
    if (seq_len < 1) return tg_fail(TG_ERR_ARG, "seq_len %" PRId64 " must be at least 1", seq_len);
    size_t val = (size_t)llround((double)n * val_fraction);
    if (val > n) val = n;
    size_t train = n - val, need = (size_t)seq_len + 1;
    if (train < need || val < need) {
        /* smallest total for which both splits reach `need`, give or take rounding */
        double frac = val_fraction < 0.5 ? val_fraction : 1.0 - val_fraction;
        size_t total = (size_t)ceil((double)need / frac);
        return tg_fail(TG_ERR_ARG,
                       "corpus too short: %zu tokens split into %zu train + %zu val (val_fraction "
                       "%g), but each split needs at least %zu tokens (one window of seq_len %" PRId64
                       " + 1), so about %zu tokens in all; use a larger corpus, a smaller "
                       "seq_len, or a val_fraction nearer 0.5",
                       n, train, val, val_fraction, need, seq_len, total);
    }
    *n_train = train;
    *n_val = val;
    return TG_OK;
}

void prepare_recipe(const PrepareOptions *opt, char *out, size_t cap) {
    size_t n;
    if (opt->tokenizer_json) {
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
                 opt->text_field ? opt->text_field : DOC_DEFAULT_TEXT_FIELD, opt->val_fraction,
                 opt->strict ? "strict" : "malformed lines skipped");
}

/* ---- reporting ------------------------------------------------------------------------------ */

typedef struct {
    const PrepareReporter *r;
    const char *phase;
    uint64_t total;
    double t0, last;
} Progress;

static void progress_begin(Progress *p, const PrepareReporter *r, const char *phase, uint64_t total) {
    *p = (Progress){r, phase, total, clock_seconds(), 0};
}

static void progress_report(Progress *p, uint64_t done, bool final) {
    if (!p->r || !p->r->progress) return;
    double now = clock_seconds();
    if (!final && now - p->last < 0.25) return;
    p->last = now;
    PrepareProgress pp = {p->phase, done, p->total, now - p->t0};
    p->r->progress(p->r->ctx, &pp);
}

/* The reporter's messages as a sink (lib/messages.h). */
static MessageSink sink_of(const PrepareReporter *r) { return r ? (MessageSink){r->message, r->ctx} : (MessageSink){0}; }

/* ---- the tokenizer's pass ------------------------------------------------------------------- */

static DocOptions doc_options(const PrepareOptions *opt, bool whole) {
    return (DocOptions){.text_field = opt->text_field, .strict = opt->strict, .whole_documents = whole};
}

/* Counts what the tokenizer is trained on, then trains it. */
static TgStatus train_tokenizer(const PrepareOptions *opt, SourceList *list, const PrepareReporter *rep,
                                PrepareResult *res, TgTokenizer *tok) {
    char **names = NULL;
    int32_t n_names = 0;
    BpeCounter *counter = NULL;
    if (opt->kind == TG_TOKENIZER_BPE) {
        TG_TRY(tokenizer_specials_parse(opt->special_tokens, &names, &n_names));
        TgStatus st = bpe_counter_new(TG_TOKENIZER_SPLIT_GPT2, names, n_names, &counter);
        tokenizer_specials_free(names, n_names);
        TG_TRY(st);
    }
    bool seen[256] = {false};
    MessageSink sink = sink_of(rep);
    DocReader reader;
    DocOptions dopt = doc_options(opt, false);
    doc_reader_open(&reader, list, &dopt);
    Progress progress;
    progress_begin(&progress, rep, "counting", list->file_bytes);
    TgStatus st = TG_OK;
    for (;;) {
        DocPiece piece;
        bool got;
        st = doc_reader_next(&reader, &piece, &got);
        if (st != TG_OK || !got) break;
        if (counter) bpe_counter_add(counter, piece.text, piece.len);
        else
            for (size_t i = 0; i < piece.len; i++) seen[(unsigned char)piece.text[i]] = true;
        progress_report(&progress, doc_reader_disk_bytes(&reader), false);
    }
    progress_report(&progress, list->file_bytes, true);
    doc_reader_close(&reader);
    res->count_seconds = clock_seconds() - progress.t0;
    if (st == TG_OK && reader.documents == 0)
        st = tg_fail(TG_ERR_FORMAT,
                     "the sources hold no document to train on (%" PRIu64 " malformed lines, %" PRIu64 " empty texts, %" PRIu64
                     " binary files)%s%s; a JSONL file needs a string member \"%s\" on each line (--text-field)",
                     reader.malformed_lines, reader.empty_texts, reader.files_binary,
                     reader.n_errors ? ": the first, " : "", reader.n_errors ? reader.errors[0] : "",
                     opt->text_field ? opt->text_field : DOC_DEFAULT_TEXT_FIELD);
    double t0 = clock_seconds();
    if (st == TG_OK && counter) {
        BpeCounterStats cs;
        bpe_counter_stats(counter, &cs);
        res->words = cs.words;
        message_emit(&sink, MESSAGE_INFO,
                     "counted %zu distinct chunks (%.1f MiB of word table) in %.1f s; training BPE to %" PRId32 " ids",
                     res->words, (double)cs.table_bytes / (1 << 20), res->count_seconds, opt->vocab_size);
        const BpeLimits *lim = bpe_counter_limits(counter);
        if (cs.prunes)
            message_emit(&sink, MESSAGE_NOTE,
                         "the word table reached its cap of %zu chunks or %zu MiB of them: %" PRIu64 " times its rarer half was "
                         "dropped (%" PRIu64 " chunks), so the merges are learnt from the most frequent chunks",
                         lim->max_words, lim->max_bytes >> 20, cs.prunes, cs.dropped);
        BpeTrainReport tr;
        st = bpe_counter_train(counter, opt->vocab_size, tok, &tr);
        if (st == TG_OK && tr.restarts)
            message_emit(&sink, MESSAGE_NOTE,
                         "training would have needed more than its %zu MiB: the word table was halved %d times, to %zu chunks",
                         lim->train_bytes >> 20, tr.restarts, bpe_counter_words(counter));
    } else if (st == TG_OK) {
        char bytes[256];
        int n = 0;
        for (int b = 0; b < 256; b++)
            if (seen[b]) bytes[n++] = (char)b;
        st = tg_tokenizer_char_train(bytes, (size_t)n, tok);
    }
    res->tokenizer_seconds = clock_seconds() - t0;
    bpe_counter_free(counter);
    return st;
}

/* ---- the encoding pass ------------------------------------------------------------------------ */

typedef struct {
    size_t offset, len; /* in the batch's text */
    size_t out, n_out;  /* in the batch's ids */
    bool doc_end;
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
    ChunkCache *caches[PREPARE_MAX_THREADS]; /* one a thread, for the whole pass */
} Batch;

static TgStatus batch_add(Batch *b, const DocPiece *p) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 256;
        TG_TRY(memory_grow((void **)&b->pieces, cap * sizeof *b->pieces, "a batch of documents"));
        b->cap = cap;
    }
    if (b->text_cap - b->text_len < p->len) {
        size_t cap = b->text_len + p->len > 2 * b->text_cap ? b->text_len + p->len : 2 * b->text_cap;
        TG_TRY(memory_grow((void **)&b->text, cap, "a batch of documents"));
        b->text_cap = cap;
    }
    memcpy(b->text + b->text_len, p->text, p->len);
    size_t room = tg_tokenizer_max_ids(b->tok, p->len);
    b->pieces[b->n++] = (BatchPiece){b->text_len, p->len, b->ids_len, 0, p->doc_end};
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
        TgStatus st = tokenizer_encode_cached(b->tok, b->text + p->offset, p->len, b->ids + p->out,
                                              tg_tokenizer_max_ids(b->tok, p->len), &p->n_out, b->caches[thread]);
        /* the tokenizer was trained on these very bytes, or encodes any (BPE) */
        TG_CHECK(st == TG_OK, "encoding a prepared piece failed: %s", tg_error_message());
    }
}

/* Encodes the batch and appends its ids, an <eot> after each document that does not end in one. */
static TgStatus flush_batch(Batch *b, TgPool *pool, TokfileWriter *w) {
    if (b->n == 0) return TG_OK;
    if (b->ids_cap < b->ids_len) {
        TG_TRY(memory_grow((void **)&b->ids, b->ids_len * sizeof *b->ids, "the tokens of a batch"));
        b->ids_cap = b->ids_len;
    }
    atomic_store(&b->next, 0);
    int threads = tg_pool_threads(pool);
    tg_pool_parallel_for(threads > 1 ? pool : NULL, threads, encode_pieces, b);
    const int32_t eot = b->tok->eot_id;
    for (size_t i = 0; i < b->n; i++) {
        const BatchPiece *p = &b->pieces[i];
        TG_TRY(tokfile_writer_append(w, b->ids + p->out, p->n_out));
        if (p->doc_end && (p->n_out == 0 || b->ids[p->out + p->n_out - 1] != eot)) TG_TRY(tokfile_writer_append(w, &eot, 1));
    }
    b->n = b->text_len = b->ids_len = 0;
    return TG_OK;
}

bool prepare_whole_documents(const TgTokenizer *tok) {
    for (int32_t k = 0; k < tok->n_added; k++) {
        size_t len;
        const uint8_t *t = tg_tokenizer_token_bytes(tok, tok->added[k].id, &len);
        if (memchr(t, '\n', len)) return true;
    }
    return false;
}

static TgStatus encode_sources(const PrepareOptions *opt, SourceList *list, const TgTokenizer *tok, TokfileWriter *w,
                               const PrepareReporter *rep, PrepareResult *res, DocReader *reader) {
    DocOptions dopt = doc_options(opt, prepare_whole_documents(tok));
    doc_reader_open(reader, list, &dopt);
    int threads = opt->threads < 1 ? 1 : opt->threads > PREPARE_MAX_THREADS ? PREPARE_MAX_THREADS : opt->threads;
    TgPool *pool = tg_pool_create(threads);
    Batch b = {.tok = tok};
    for (int t = 0; t < threads; t++) b.caches[t] = chunk_cache_new();
    Progress progress;
    progress_begin(&progress, rep, "encoding", list->file_bytes);
    TgStatus st = TG_OK;
    for (;;) {
        DocPiece piece;
        bool got;
        st = doc_reader_next(reader, &piece, &got);
        if (st != TG_OK) break;
        if (got) st = batch_add(&b, &piece);
        if (st != TG_OK) break;
        if (!got || b.text_len >= PREPARE_BATCH_BYTES) {
            st = flush_batch(&b, pool, w);
            progress_report(&progress, doc_reader_disk_bytes(reader), false);
        }
        if (st != TG_OK || !got) break;
    }
    progress_report(&progress, list->file_bytes, true);
    res->encode_seconds = clock_seconds() - progress.t0;
    free(b.text), free(b.ids), free(b.pieces);
    for (int t = 0; t < threads; t++) chunk_cache_free(b.caches[t]);
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

static uint64_t recipe_fingerprint(const char *recipe, const char *root, const SourceList *list) {
    Hash64 h;
    hash64_init(&h, 0);
    hash64_update(&h, recipe, strlen(recipe) + 1);
    for (size_t i = 0; i < list->count; i++) {
        const Source *s = &list->items[i];
        const char *rel = relative_path(root, s->path);
        uint64_t v[3] = {s->file_bytes, s->binary ? 0 : s->text_bytes, s->binary ? 0 : s->hash};
        hash64_update(&h, rel, strlen(rel) + 1);
        hash64_update(&h, v, sizeof v);
    }
    uint64_t r = hash64_final(&h);
    return r ? r : 1;
}

static void write_split(FILE *f, const char *name, const char *file, const DatasetSplit *s) {
    fprintf(f, ",\n  \"%s\": {\"file\": \"%s\", \"tokens\": %" PRIu64, name, file, s->tokens);
    hex_field(f, "hash", s->hash, true);
    fputs("}", f);
}

static TgStatus write_manifest(const char *dir, const PrepareOptions *opt, const char *root, const SourceList *list,
                               const DocReader *reader, const TgTokenizer *tok, const DatasetSplit *train,
                               const DatasetSplit *val, PrepareResult *res) {
    char recipe[DATASET_RECIPE_CAP], path[TG_PATH_CAP];
    prepare_recipe(opt, recipe, sizeof recipe);
    res->recipe_fingerprint = recipe_fingerprint(recipe, root, list);
    res->fingerprint = dataset_fingerprint(tok->fingerprint, train, val);
    TG_TRY(path_join(path, sizeof path, dir, DATASET_MANIFEST_FILE));
    AtomicFile af;
    TG_TRY(atomic_file_open(&af, path));
    FILE *f = atomic_file_stream(&af);
    fprintf(f, "{\"format\": \"%s\"", DATASET_FORMAT);
    fputs(",\n  ", f);
    hex_field(f, "fingerprint", res->fingerprint, false);
    fputs(",\n  \"recipe\": ", f);
    json_write_string(f, recipe);
    fputs(",\n  ", f);
    hex_field(f, "recipe_fingerprint", res->recipe_fingerprint, false);
    fprintf(f, ",\n  \"tokenizer\": {\"kind\": \"%s\", \"vocab_size\": %" PRId32, tg_tokenizer_kind_name(tok->kind),
            tok->vocab_size);
    hex_field(f, "fingerprint", tok->fingerprint, true);
    fputs(", \"special_tokens\": [", f);
    for (int32_t k = 0; k < tok->n_added; k++) {
        size_t len;
        const uint8_t *b = tg_tokenizer_token_bytes(tok, tok->added[k].id, &len);
        char name[TG_TOKENIZER_MAX_SPECIAL_BYTES + 1];
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name - 1 ? len : sizeof name - 1), (const char *)b);
        fprintf(f, "%s{\"id\": %" PRId32 ", \"text\": ", k ? ", " : "", tok->added[k].id);
        json_write_string(f, name);
        fputs("}", f);
    }
    fputs("]}", f);
    fprintf(f, ",\n  \"split\": {\"rule\": \"the last val_fraction of the token stream is val\", \"val_fraction\": %.17g, "
               "\"seq_len\": %" PRId64 "}",
            opt->val_fraction, opt->seq_len);
    write_split(f, "train", PREPARE_TRAIN_FILE, train);
    write_split(f, "val", PREPARE_VAL_FILE, val);
    fprintf(f, ",\n  \"documents\": %" PRIu64 ", \"text_bytes\": %" PRIu64 ", \"file_bytes\": %" PRIu64
               ", \"malformed_lines\": %" PRIu64 ", \"empty_texts\": %" PRIu64 ", \"binary_files\": %" PRIu64,
            reader->documents, res->text_bytes, list->file_bytes, reader->malformed_lines, reader->empty_texts,
            reader->files_binary);
    fputs(",\n  \"malformed_examples\": [", f);
    for (int i = 0; i < reader->n_errors; i++) {
        fputs(i ? ",\n    " : "\n    ", f);
        json_write_string(f, reader->errors[i]);
    }
    fputs("],\n  \"sources\": [", f);
    for (size_t i = 0; i < list->count; i++) {
        const Source *s = &list->items[i];
        fputs(i ? ",\n    {\"path\": " : "\n    {\"path\": ", f);
        json_write_string(f, s->path);
        fprintf(f, ", \"kind\": \"%s\", \"file_bytes\": %" PRIu64 ", \"text_bytes\": %" PRIu64,
                s->binary ? "binary (skipped)" : s->kind == SOURCE_JSONL ? "jsonl" : "text", s->file_bytes, s->text_bytes);
        hex_field(f, "hash", s->hash, true);
        fprintf(f, ", \"documents\": %" PRIu64 ", \"malformed_lines\": %" PRIu64 "}", s->documents, s->malformed_lines);
    }
    fputs("]}\n", f);
    return atomic_file_commit(&af);
}

/* ---- the whole ------------------------------------------------------------------------------------ */

static TgStatus check_options(const PrepareOptions *opt) {
    if (opt->kind != TG_TOKENIZER_CHAR && opt->kind != TG_TOKENIZER_BPE)
        return tg_fail(TG_ERR_ARG, "unknown tokenizer kind %d: use char or bpe", (int)opt->kind);
    if (!(opt->val_fraction > 0.0 && opt->val_fraction < 1.0) || opt->seq_len < 1) {
        size_t a, b; /* refuse bad split settings before the slow part */
        return corpus_split(0, opt->val_fraction, opt->seq_len, &a, &b);
    }
    if (opt->special_tokens && *opt->special_tokens && (opt->kind != TG_TOKENIZER_BPE || opt->tokenizer_json))
        return tg_fail(TG_ERR_ARG, "--special-tokens reserves tokens in a BPE that tapegrad trains; an imported "
                                   "tokenizer has its own added tokens, a char tokenizer none");
    char **names;
    int32_t n;
    TG_TRY(tokenizer_specials_parse(opt->special_tokens, &names, &n));
    tokenizer_specials_free(names, n);
    if (opt->kind == TG_TOKENIZER_BPE && !opt->tokenizer_json && opt->vocab_size < TG_TOKENIZER_BPE_FIRST_MERGE + n)
        return tg_fail(TG_ERR_ARG, "vocab_size %" PRId32 " is too small for a byte-level BPE tokenizer: it needs at least %" PRId32
                                   " (256 bytes + <eot>%s)",
                       opt->vocab_size, TG_TOKENIZER_BPE_FIRST_MERGE + n, n ? " + the special tokens" : "");
    return TG_OK;
}

static TgStatus prepare_sources(const PrepareOptions *opt, const char *sources, const char *dir,
                                const PrepareReporter *rep, PrepareResult *res, TgTokenizer *tok, SourceList *list) {
    MessageSink sink = sink_of(rep);
    TG_TRY(sources_list(sources, list));
    res->files = list->count, res->files_empty = list->files_empty, res->file_bytes = list->file_bytes;
    message_emit(&sink, MESSAGE_INFO, "preparing %s: %zu file%s, %.1f MiB", sources, list->count, list->count == 1 ? "" : "s",
        (double)list->file_bytes / (1 << 20));
    if (opt->tokenizer_json) {
        double t0 = clock_seconds();
        TG_TRY(tokenizer_hf_load(opt->tokenizer_json, tok));
        res->tokenizer_seconds = clock_seconds() - t0;
    } else {
        TG_TRY(train_tokenizer(opt, list, rep, res, tok));
    }
    res->vocab_size = tok->vocab_size;
    res->tokenizer_fingerprint = tok->fingerprint;
    char path[TG_PATH_CAP], val_path[TG_PATH_CAP];
    TG_TRY(path_join(path, sizeof path, dir, PREPARE_TOKENIZER_FILE));
    TG_TRY(tg_tokenizer_save(tok, path));
    TG_TRY(path_join(path, sizeof path, dir, PREPARE_TRAIN_FILE));
    TG_TRY(path_join(val_path, sizeof val_path, dir, PREPARE_VAL_FILE));
    TokfileWriter w;
    TG_TRY(tokfile_writer_open(&w, path, (uint32_t)tok->vocab_size, tok->fingerprint));
    DocReader reader;
    TgStatus st = encode_sources(opt, list, tok, &w, rep, res, &reader);
    doc_reader_close(&reader);
    res->documents = reader.documents, res->malformed_lines = reader.malformed_lines;
    res->empty_texts = reader.empty_texts, res->files_binary = reader.files_binary;
    for (size_t i = 0; i < list->count; i++) res->text_bytes += list->items[i].text_bytes;
    res->n_tokens = w.n;
    size_t n_train = 0, n_val = 0;
    if (st == TG_OK) st = corpus_split((size_t)w.n, opt->val_fraction, opt->seq_len, &n_train, &n_val);
    if (st != TG_OK) {
        tokfile_writer_abandon(&w);
        return st;
    }
    TG_TRY(tokfile_writer_commit_split(&w, n_train, val_path));
    res->n_train = n_train, res->n_val = n_val;
    if (reader.malformed_lines > 0) {
        message_emit(&sink, MESSAGE_WARNING, "%" PRIu64 " malformed line%s skipped (--strict stops at the first); the first:",
            reader.malformed_lines, reader.malformed_lines == 1 ? "" : "s");
        for (int i = 0; i < reader.n_errors; i++) message_emit(&sink, MESSAGE_WARNING, "  %s", reader.errors[i]);
    }
    if (reader.files_binary > 0)
        message_emit(&sink, MESSAGE_WARNING, "%" PRIu64 " binary file%s skipped (first: %s)", reader.files_binary,
            reader.files_binary == 1 ? "" : "s", reader.first_binary);
    /* the splits as a run will read them: every id checked, the tokens hashed */
    Dataset d = {0};
    TG_TRY(token_store_open(&d.train, path, (uint32_t)tok->vocab_size, tok->fingerprint));
    st = token_store_open(&d.val, val_path, (uint32_t)tok->vocab_size, tok->fingerprint);
    DatasetSplit train = {d.train.n, d.train.hash}, val = {d.val.n, d.val.hash};
    token_store_close(&d.train);
    token_store_close(&d.val);
    TG_TRY(st);
    return write_manifest(dir, opt, sources, list, &reader, tok, &train, &val, res);
}

TgStatus prepare_into(const PrepareOptions *opt, const char *dir, const PrepareReporter *rep, PrepareResult *result,
                      TgTokenizer *tok_out) {
    PrepareResult local;
    PrepareResult *res = result ? result : &local;
    memset(res, 0, sizeof *res);
    if (tok_out) memset(tok_out, 0, sizeof *tok_out);
    TG_TRY(check_options(opt));
    const char *sources = opt->sources ? opt->sources : corpus_default_path();
    SourceList list;
    TgTokenizer tok = {0};
    TgStatus st = prepare_sources(opt, sources, dir, rep, res, &tok, &list);
    sources_free(&list);
    if (st == TG_OK && tok_out) *tok_out = tok;
    else tg_tokenizer_free(&tok);
    if (st != TG_OK) return tg_fail_context(st, "preparing %s", sources);
    return TG_OK;
}

/* ---- a dataset folder, whole or not at all ----------------------------------------------------- */

/* The recipe fingerprint the sources would give now: every source read once and hashed. */
static TgStatus current_recipe_fingerprint(const PrepareOptions *opt, const char *sources, uint64_t *fp) {
    SourceList list;
    TG_TRY(sources_list(sources, &list));
    DocReader reader;
    DocOptions dopt = {.text_field = opt->text_field};
    doc_reader_open(&reader, &list, &dopt);
    TgStatus st;
    for (;;) {
        DocPiece piece;
        bool got;
        st = doc_reader_next(&reader, &piece, &got);
        if (st != TG_OK || !got) break;
    }
    doc_reader_close(&reader);
    char recipe[DATASET_RECIPE_CAP];
    prepare_recipe(opt, recipe, sizeof recipe);
    if (st == TG_OK) *fp = recipe_fingerprint(recipe, sources, &list);
    sources_free(&list);
    return st;
}

static void remove_folder(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[TG_PATH_CAP];
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 && path_join(path, sizeof path, dir, e->d_name) == TG_OK)
            (void)unlink(path);
    if (d) closedir(d);
    (void)rmdir(dir);
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

/* An existing out_dir: the same dataset (*same), an empty folder, or refused. */
static TgStatus check_existing(const PrepareOptions *opt, const char *sources, const char *out_dir, bool *same) {
    *same = false;
    struct stat sb;
    if (stat(out_dir, &sb) != 0) return TG_OK;
    if (S_ISDIR(sb.st_mode) && folder_is_empty(out_dir)) return TG_OK;
    if (!S_ISDIR(sb.st_mode) || !dataset_is_dataset(out_dir))
        return tg_fail(TG_ERR_IO, "%s exists and is not a dataset folder: give --out a new path (or an empty folder)", out_dir);
    DatasetManifest m;
    TG_TRY(dataset_manifest_read(out_dir, &m));
    char recipe[DATASET_RECIPE_CAP];
    prepare_recipe(opt, recipe, sizeof recipe);
    if (strcmp(recipe, m.recipe) != 0)
        return tg_fail(TG_ERR_IO, "%s holds another dataset, prepared with %s; this asks for %s: give --out another path, or remove it",
                       out_dir, m.recipe, recipe);
    uint64_t fp;
    TG_TRY(current_recipe_fingerprint(opt, sources, &fp));
    if (fp != m.recipe_fingerprint)
        return tg_fail(TG_ERR_IO,
                       "%s holds a dataset of the same recipe but other sources (the files under %s differ from those "
                       "it was prepared from: see its %s): give --out another path, or remove it",
                       out_dir, sources, DATASET_MANIFEST_FILE);
    *same = true;
    return TG_OK;
}

TgStatus prepare_dataset(const PrepareOptions *opt, const char *out_dir, const PrepareReporter *rep,
                         PrepareResult *result, bool *already) {
    PrepareResult local;
    PrepareResult *res = result ? result : &local;
    memset(res, 0, sizeof *res);
    if (already) *already = false;
    if (!out_dir || !*out_dir) return tg_fail(TG_ERR_ARG, "no output folder given for the dataset: pass --out DIR");
    TG_TRY(check_options(opt));
    const char *sources = opt->sources ? opt->sources : corpus_default_path();
    bool same;
    TG_TRY(check_existing(opt, sources, out_dir, &same));
    if (same) {
        DatasetManifest m;
        TG_TRY(dataset_manifest_read(out_dir, &m));
        res->fingerprint = m.fingerprint, res->recipe_fingerprint = m.recipe_fingerprint;
        res->n_train = m.train.tokens, res->n_val = m.val.tokens, res->n_tokens = m.train.tokens + m.val.tokens;
        if (already) *already = true;
        return TG_OK;
    }
    char parent[TG_PATH_CAP], temp[TG_PATH_CAP];
    path_folder(out_dir, parent, sizeof parent);
    TG_TRY(make_folders(parent));
    TG_TRY(path_format(temp, sizeof temp, "%s.tmp-XXXXXX", out_dir));
    if (!mkdtemp(temp)) return tg_fail(TG_ERR_IO, "cannot create a folder beside %s: %s", out_dir, strerror(errno));
    TgStatus st = prepare_into(opt, temp, rep, res, NULL);
    if (st == TG_OK) {
        mode_t mask = umask(0);
        umask(mask);
        (void)chmod(temp, 0777 & ~mask); /* mkdtemp made it 0700 */
        (void)rmdir(out_dir); /* an empty folder given as --out */
        if (rename(temp, out_dir) != 0)
            st = tg_fail(TG_ERR_IO, "cannot rename %s to %s: %s", temp, out_dir, strerror(errno));
        else
            sync_parent_folder(out_dir);
    }
    if (st != TG_OK) remove_folder(temp);
    return st;
}
