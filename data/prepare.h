/* Corpus preparation: text -> tokens -> out_dir/{train.tok, val.tok} (+ tokenizer.txt).
 *
 * The whole text is encoded as one token stream; the LAST `val_fraction` of the stream
 * (rounded to the nearest token) is the validation split, the rest is the training split. Each
 * split must hold at least one training window, seq_len + 1 tokens, or preparation is refused
 * with a message giving the counts. The tokenizer is trained on the whole text (both splits),
 * as is usual for small corpora.
 */
#ifndef TAPEGRAD_DATA_PREPARE_H
#define TAPEGRAD_DATA_PREPARE_H

#include <stddef.h>
#include <stdint.h>

#include "data/corpus.h"
#include "tapegrad/tokenizer.h"
#include "tapegrad/error.h"

#define PREPARE_TOKENIZER_FILE "tokenizer.txt"
#define PREPARE_TRAIN_FILE "train.tok"
#define PREPARE_VAL_FILE "val.tok"
#define PREPARE_DEFAULT_VAL_FRACTION 0.1

typedef struct PrepareOptions {
    const char *corpus_path; /* text file or folder; NULL means corpus_default_path() */
    const char *out_dir;     /* created when missing */
    TgTokenizerKind kind;      /* TG_TOKENIZER_CHAR or TG_TOKENIZER_BPE */
    const char *tokenizer_json; /* not NULL: import this Hugging Face tokenizer.json instead of training */
    int32_t vocab_size;      /* BPE only (>= 257) */
    double val_fraction;     /* in (0, 1) */
    int64_t seq_len;         /* each split needs seq_len + 1 tokens */
} PrepareOptions;

/* BPE, vocab 2048, val_fraction 0.1, seq_len 256, the default corpus; out_dir "data". */
void prepare_options_default(PrepareOptions *opt);

typedef struct PrepareResult {
    size_t corpus_bytes;
    size_t n_tokens, n_train, n_val;
    int32_t vocab_size;
    uint64_t tokenizer_fingerprint;
    CorpusInfo corpus;          /* filled by prepare_run only */
    double tokenizer_seconds;   /* training the tokenizer (prepare_run only) */
    double encode_seconds;
} PrepareResult;

/* How many of n tokens go to each split; refuses when either is shorter than seq_len + 1 or
 * val_fraction is not in (0, 1). */
TgStatus corpus_split(size_t n, double val_fraction, int64_t seq_len, size_t *n_train, size_t *n_val);

/* Encodes text with tok, splits it and writes out_dir/train.tok and out_dir/val.tok (tagged
 * with the tokenizer's fingerprint). `result` may be NULL. */
TgStatus corpus_prepare(const TgTokenizer *tok, const char *text, size_t len, const char *out_dir,
                         double val_fraction, int64_t seq_len, PrepareResult *result);

/* A corpus read, tokenized and split in memory: every check passed, nothing written yet. */
typedef struct PreparedCorpus {
    TgTokenizer tok;
    int32_t *ids;          /* the whole stream, train split first */
    size_t n_train, n_val;
} PreparedCorpus;

/* Reads the corpus, trains the tokenizer, encodes and splits: every check preparation makes,
 * and no file written, so a caller can refuse a corpus before it creates anything. */
TgStatus prepare_corpus(const PrepareOptions *opt, PreparedCorpus *out, PrepareResult *result);
/* Writes out_dir/{tokenizer.txt, train.tok, val.tok}, creating out_dir when missing. */
TgStatus prepare_write(const PreparedCorpus *p, const char *out_dir);
void prepared_corpus_free(PreparedCorpus *p);

/* The whole pipeline: prepare_corpus, then prepare_write into opt->out_dir. `tok` (may be NULL)
 * receives the tokenizer (caller frees). */
TgStatus prepare_run(const PrepareOptions *opt, TgTokenizer *tok, PrepareResult *result);

#endif
