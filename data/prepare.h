/* Preparing a corpus: sources (data/sources.h) -> tokenizer -> tokens -> a dataset's files
 * (data/dataset.h): tokenizer.txt, train.tok, val.tok and dataset.json.
 *
 * It streams. A first pass over the sources counts what the tokenizer is trained on (BPE: each
 * distinct pre-split chunk once, with its count; char: the bytes seen); a second pass encodes the
 * documents in batches of about TG_PREPARE_BATCH_BYTES, the pieces of a batch spread over `threads`
 * (the output does not depend on their number: each piece is encoded alone and the results are
 * joined in order; each thread keeps the ids of the chunks it merged, about 8,000 of the first it
 * meets, and copies them when they come again), and appends them to train.tok as they come. An imported tokenizer
 * (tokenizer_json, or a run's tokenizer_file) needs only the second pass. Each document ends with exactly one <eot>: it
 * is appended unless the document's own last token already is one (a text ending in
 * "<|endoftext|>"); named special tokens in the text are single ids. An imported tokenizer that
 * frames documents (tokenizer/tokenizer_hf.h: MiniMind's, with its tokenizer_config.json) puts its
 * BOS before each document too, unless the text starts with it: BOS + text + EOS, its <eot> the EOS.
 *
 * The split: the LAST val_fraction of the token stream (rounded to the nearest token) is val.tok,
 * the rest train.tok; each must hold at least seq_len + 1 tokens, or preparation is refused with
 * the counts. The tokenizer is trained on the whole corpus (both splits), as is usual.
 *
 * Memory (peak RSS above the program's own): the word table of BPE training (the distinct chunks'
 * bytes, 32 bytes a chunk for the table at most half full, then the trainer's ~40 bytes a chunk
 * plus 4 a byte of them); one batch of text, TG_PREPARE_BATCH_BYTES, with its ids (4 bytes a byte
 * of text at most, 12 for an imported tokenizer); the longest document piece (sources.h:
 * TG_DOC_MAX_PIECE_BYTES) and the longest JSONL line (jsonl.h); 1 MiB of output buffer. None of it
 * grows with the corpus except the word table, which grows with its vocabulary of distinct chunks. */
#ifndef TAPEGRAD_DATA_PREPARE_H
#define TAPEGRAD_DATA_PREPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/dataset.h"
#include "data/sources.h"
#include "support/messages.h"
#include "tapegrad/error.h"
#include "tapegrad/tokenizer.h"

#define TG_PREPARE_DEFAULT_VAL_FRACTION 0.1
enum { TG_PREPARE_BATCH_BYTES = 8 << 20, TG_PREPARE_MAX_THREADS = 256 };

typedef struct TgPrepareOptions {
    const char *sources;          /* file or folder; NULL means tg_corpus_default_path() */
    TgTokenizerKind kind;         /* TG_TOKENIZER_CHAR or TG_TOKENIZER_BPE */
    const char *tokenizer_json;   /* not NULL: import this Hugging Face tokenizer.json instead of training */
    const char *tokenizer_file;   /* not NULL: encode with this tokenizer.txt (a run's) instead of training */
    int32_t vocab_size;           /* BPE only (>= 257 + the specials) */
    const char *special_tokens;   /* BPE only: "chatml" or a comma list (tokenizer.h), or NULL */
    const char *text_field;       /* JSONL: the member holding each document (NULL: "text") */
    bool strict;                  /* a malformed JSONL line stops the preparation */
    double val_fraction;          /* in (0, 1) */
    int64_t seq_len;              /* each split needs seq_len + 1 tokens */
    int threads;                  /* encoding threads (1 or more) */
} TgPrepareOptions;

/* BPE, vocab 2048, val_fraction 0.1, seq_len 256, 2 threads, the default corpus. */
void tg_prepare_options_default(TgPrepareOptions *opt);

/* What a long preparation reports as it goes (every member may be NULL). */
typedef struct TgPrepareProgress {
    const char *phase;            /* "counting" (the tokenizer's pass), "encoding" */
    uint64_t done, total;         /* bytes of the sources on disk */
    double elapsed_s;             /* in this phase */
} TgPrepareProgress;

typedef struct TgPrepareReporter {
    void *ctx;
    void (*message)(void *ctx, TgMessageLevel level, const char *text);
    void (*progress)(void *ctx, const TgPrepareProgress *p);
} TgPrepareReporter;

typedef struct TgPrepareResult {
    uint64_t file_bytes, text_bytes;  /* the sources on disk, and decompressed */
    size_t files, files_binary, files_empty;
    uint64_t documents, malformed_lines, empty_texts;
    uint64_t n_tokens, n_train, n_val;
    int32_t vocab_size;
    uint64_t tokenizer_fingerprint, fingerprint, recipe_fingerprint;
    size_t words;                     /* BPE: distinct chunks counted */
    double count_seconds, tokenizer_seconds, encode_seconds;
} TgPrepareResult;


/* Prepares the sources into `dir`, an existing folder the caller owns (a run's temporary folder,
 * or tg_prepare_dataset's): its files are written there, each atomically; on failure some may be
 * left, for the caller to remove with the folder. *tok (may be NULL) receives the tokenizer.
 * `result` may be NULL. */
TgStatus tg_prepare_into(const TgPrepareOptions *opt, const char *dir, const TgPrepareReporter *reporter, TgPrepareResult *result,
                      TgTokenizer *tok);

/* `tapegrad prepare`: the sources into the dataset folder out_dir, made whole or not at all (a
 * temporary folder beside it, renamed into place). An out_dir that exists is refused unless it
 * is an empty folder, or a dataset of the same recipe and sources: then nothing is done, and
 * *already is set (already may be NULL). */
TgStatus tg_prepare_dataset(const TgPrepareOptions *opt, const char *out_dir, const TgPrepareReporter *reporter,
                         TgPrepareResult *result, bool *already);

/* Whether documents must be encoded whole with tok (an added token holds a '\n': sources.h). */
bool tg_prepare_whole_documents(const TgTokenizer *tok);

/* The recipe of opt as text ("bpe vocab 6400, special tokens chatml, text field \"text\", val
 * fraction 0.1, lenient"), as the manifest records it. */
void tg_prepare_recipe(const TgPrepareOptions *opt, char *out, size_t cap);

#endif
