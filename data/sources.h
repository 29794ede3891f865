/* The sources of a dataset, read as a stream of documents.
 *
 * A source path is a file or a folder; a folder is walked as data/corpus.h says (name order,
 * symbolic links followed, each folder once; hidden files, *.dat and *.u8 skipped; FIFOs, sockets
 * and devices never opened; a link whose target is missing an error), so a folder of several
 * files is a mixture. Every entry left out is counted and named (TgSourceList.skipped). Each file is
 *   - JSON Lines when its name ends in .jsonl or .ndjson (with .gz after it or not): one document
 *     per line, the string member `text_field` of each line's object (data/jsonl.h's rules; a
 *     line without it, or one that is not a JSON object, is malformed);
 *   - text otherwise: the whole file is one document. A text file that looks binary in its first
 *     block (data/corpus.h's rule, on the first TG_JSONL_BLOCK_BYTES) is skipped and counted.
 * Either may be gzip-compressed (data/file_stream.h); the name does not have to say so.
 *
 * Documents come out in pieces (TgDocPiece), the last piece of each marked doc_end. A JSONL
 * document is one piece. A text document is cut after a '\n' that a printable ASCII character
 * (0x21-0x7e) follows: the pre-split rules of every tokenizer cut there too, so encoding the
 * pieces one by one gives the tokens of encoding the whole, unless an added token holds a '\n'
 * (the caller then asks for whole documents: TgDocOptions.whole_documents). A piece is about
 * TG_DOC_PIECE_BYTES; a stretch of TG_DOC_MAX_PIECE_BYTES without such a '\n' is cut at a UTF-8
 * character boundary after that many bytes (where the tokens may differ from the whole's).
 * Memory: at most TG_DOC_MAX_PIECE_BYTES + a block for text, and data/jsonl.h's bound for JSONL.
 *
 * Malformed JSONL lines are counted and the first TG_DOC_REPORTED_ERRORS kept with their file and
 * line numbers; with `strict` the first one stops the reading (TG_ERR_FORMAT). Empty texts ("")
 * are skipped and counted. */
#ifndef TAPEGRAD_DATA_SOURCES_H
#define TAPEGRAD_DATA_SOURCES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/file_stream.h"
#include "data/jsonl.h"
#include "support/messages.h"
#include "tapegrad/error.h"

enum { TG_DOC_PIECE_BYTES = 1 << 20, TG_DOC_MAX_PIECE_BYTES = 64 << 20, TG_DOC_REPORTED_ERRORS = 5 };
#define TG_DOC_DEFAULT_TEXT_FIELD "text"

typedef enum { TG_SOURCE_TEXT, TG_SOURCE_JSONL } TgSourceKind;

typedef struct TgSource {
    char *path;
    TgSourceKind kind;
    uint64_t file_bytes;   /* on disk */
    /* filled as it is read */
    uint64_t text_bytes;   /* after decompression */
    uint64_t hash;         /* hash64 of those bytes */
    uint64_t documents, malformed_lines, empty_lines;
    bool binary, read;     /* skipped as binary; read to its end */
} TgSource;

/* Why an entry of a folder is not in the list (data/corpus.h's TgCorpusSkip, then empty files). */
typedef enum {
    TG_SOURCE_SKIP_NAME,         /* a hidden name, *.dat or *.u8 */
    TG_SOURCE_SKIP_NOT_FILE,     /* a FIFO, socket or device, or a link to one */
    TG_SOURCE_SKIP_FOLDER_AGAIN, /* a folder reached a second time, through a link (a cycle) */
    TG_SOURCE_SKIP_EMPTY,        /* an empty file */
    TG_SOURCE_SKIP_KINDS
} TgSourceSkip;
enum { TG_SOURCE_SKIPS_NAMED = 3 };

typedef struct TgSourceSkips {
    size_t count;
    char first[TG_SOURCE_SKIPS_NAMED][512]; /* "DIR/pipe (a FIFO)": the first ones, for messages */
} TgSourceSkips;

typedef struct TgSourceList {
    TgSource *items;
    size_t count, cap;
    uint64_t file_bytes;   /* the sum over the files */
    size_t files_empty;    /* empty files, not listed (skipped[TG_SOURCE_SKIP_EMPTY].count) */
    TgSourceSkips skipped[TG_SOURCE_SKIP_KINDS];
} TgSourceList;

/* Lists the files of `path` (a file or a folder; symbolic links followed as data/corpus.h's
 * tg_corpus_walk says), counting and naming every entry it leaves out in list->skipped. Refuses a
 * missing path, a folder with no non-empty file, an empty file and a link whose target is
 * missing, naming them. */
TgStatus tg_sources_list(const char *path, TgSourceList *list);
void tg_sources_free(TgSourceList *list);
/* The entries list->skipped holds, one message each through sink (support/messages.h): a warning
 * for what could have been data (a FIFO, a device, a folder linked twice), a note for empty
 * files and the names the folder rule skips. `path` is the path given to tg_sources_list. */
void tg_sources_report_skips(const TgSourceList *list, const char *path, const TgMessageSink *sink);
/* Whether a file of this name is read as JSON Lines. */
bool tg_sources_name_is_jsonl(const char *name);

typedef struct TgDocOptions {
    const char *text_field; /* TG_DOC_DEFAULT_TEXT_FIELD when NULL */
    bool strict;            /* a malformed JSONL line stops the reading */
    bool whole_documents;   /* never cut a text document into pieces */
} TgDocOptions;

typedef struct TgDocPiece {
    const char *text;       /* valid until the next call */
    size_t len;
    bool doc_end;           /* the last piece of its document */
} TgDocPiece;

typedef struct TgDocReader {
    TgSourceList *list;
    TgDocOptions opt;
    size_t current;         /* the source being read */
    bool open;
    TgFileStream fs;          /* a text source */
    TgJsonlReader jsonl;      /* a JSONL source */
    char *buf;
    size_t cap, start, end;
    bool at_eof, checked_binary;
    uint64_t bytes_before;  /* on disk, of the sources before the current one */
    /* totals */
    uint64_t documents, malformed_lines, empty_texts, files_binary;
    char errors[TG_DOC_REPORTED_ERRORS][320]; /* "FILE: line 12 is not valid JSON: ..." */
    int n_errors;
    char first_binary[320];
} TgDocReader;

TgStatus tg_doc_reader_open(TgDocReader *r, TgSourceList *list, const TgDocOptions *opt);
/* The next piece; *got false after the last one. */
TgStatus tg_doc_reader_next(TgDocReader *r, TgDocPiece *piece, bool *got);
/* Bytes read so far, on disk (for progress against list->file_bytes). */
uint64_t tg_doc_reader_disk_bytes(const TgDocReader *r);
void tg_doc_reader_close(TgDocReader *r);

#endif
