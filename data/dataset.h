/* Dataset folders: a corpus prepared once (`tapegrad prepare`) and read by any number of runs
 * (`train --dataset DIR`, eval, inspect, compare-ffn).
 *
 *   DIR/dataset.json    the manifest (below)
 *   DIR/tokenizer.txt   the tokenizer (tapegrad/tokenizer.h), and tokenizer.json beside it when imported
 *   DIR/train.tok       the train split (data/tokfile.h)
 *   DIR/val.tok         the val split: the last val_fraction of the token stream
 *
 * The manifest (JSON) records the sources (path, kind, bytes on disk and decompressed, a hash of
 * the decompressed bytes, documents, malformed lines), the recipe (tokenizer settings, text field,
 * split rule, strictness), the tokenizer's fingerprint, each split's token count and the hash of
 * its tokens (support/hash.h), the malformed lines' first examples, and two fingerprints:
 *   recipe_fingerprint  the recipe and every source's relative path, size and hash: what makes
 *                       `prepare` give this dataset (a second prepare of the same compares it);
 *   fingerprint         the tokenizer's fingerprint and both splits' counts and hashes: what a
 *                       run trained on the dataset records, and checks again on every resume.
 * Reading the manifest checks every member, fingerprinted or not, for its form and range (a split's
 * "file" is a plain name inside the folder, val_fraction in (0, 1), seq_len in [1,
 * TG_MODEL_MAX_SEQ], counts whole numbers in [0, 2^53], no member unknown, missing or twice) and
 * the members against each other (the fingerprint, the split's counts against val_fraction and
 * seq_len, the totals against the sources'), so an edited dataset.json is refused naming the
 * file and the member. Opening a dataset also reads its token files once (tg_token_store_open) and
 * refuses counts or hashes that differ from the manifest's, so a token file changed after
 * `prepare` is caught, and a tokenizer whose kind, size or special tokens are not the
 * manifest's. tg_dataset_open is the one test of "this folder holds a usable dataset": `prepare`
 * asks it too before it calls a folder done. */
#ifndef TAPEGRAD_DATA_DATASET_H
#define TAPEGRAD_DATA_DATASET_H

#include <stdint.h>

#include "data/tokfile.h"
#include "tapegrad/error.h"
#include "tapegrad/tokenizer.h"

/* A dataset folder's files (its prepared tokenizer and token splits, and the manifest) */
#define TG_PREPARE_TOKENIZER_FILE "tokenizer.txt"
#define TG_PREPARE_TRAIN_FILE "train.tok"
#define TG_PREPARE_VAL_FILE "val.tok"
#define TG_DATASET_MANIFEST_FILE "dataset.json"
#define TG_DATASET_FORMAT "tapegrad-dataset 1"
#define TG_DATASET_SPLIT_RULE "the last val_fraction of the token stream is val"
/* a recipe names at most TG_TOKENIZER_MAX_SPECIALS specials of TG_TOKENIZER_MAX_SPECIAL_BYTES, and a little more */
enum { TG_DATASET_RECIPE_CAP = 32 << 10, TG_DATASET_MANIFEST_MAX_BYTES = 64 << 20, TG_DATASET_FILE_NAME_CAP = 256 };

typedef struct TgDatasetSplit {
    uint64_t tokens, hash;
} TgDatasetSplit;

/* What a run and a second prepare need of a manifest, and what opening checks against the files. */
typedef struct TgDatasetManifest {
    uint64_t fingerprint, recipe_fingerprint, tokenizer_fingerprint;
    char recipe[TG_DATASET_RECIPE_CAP]; /* "bpe vocab 6400, special tokens chatml, ..." */
    TgDatasetSplit train, val;
    char train_file[TG_DATASET_FILE_NAME_CAP], val_file[TG_DATASET_FILE_NAME_CAP]; /* plain names in the folder */
    double val_fraction;
    int64_t seq_len;
    char tokenizer_kind[8];   /* tg_tokenizer_kind_name */
    int64_t vocab_size;
    int64_t n_special_tokens;
    uint64_t special_ids_hash; /* a hash of their ids, in order (compared with the tokenizer's) */
} TgDatasetManifest;

/* The dataset fingerprint of a tokenizer and two splits. */
uint64_t tg_dataset_fingerprint(uint64_t tokenizer_fingerprint, const TgDatasetSplit *train, const TgDatasetSplit *val);

/* Reads DIR/dataset.json (strict JSON, support/json_reader.h) and checks it (above); TG_ERR_FORMAT
 * names the file and the member. */
TgStatus tg_dataset_manifest_read(const char *dir, TgDatasetManifest *m);
/* Whether DIR holds a manifest. */
bool tg_dataset_is_dataset(const char *dir);

/* A dataset opened for reading: its manifest, tokenizer and token files, each checked against
 * the manifest (counts, hashes, the tokenizer's fingerprint). */
typedef struct TgDataset {
    char dir[TG_PATH_CAP];
    TgDatasetManifest manifest;
    TgTokenizer tok;
    TgTokenStore train, val;
} TgDataset;

/* Opens DIR. With want_train false only val.tok is read (eval, inspect). */
TgStatus tg_dataset_open(const char *dir, bool want_train, TgDataset *d);
void tg_dataset_close(TgDataset *d);

/* The split rule (TG_DATASET_SPLIT_RULE): how many of n tokens go to each split; refuses when either
 * is shorter than seq_len + 1 or val_fraction is not in (0, 1). */
TgStatus tg_corpus_split(size_t n, double val_fraction, int64_t seq_len, size_t *n_train, size_t *n_val);

#endif
