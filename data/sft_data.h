/* The data of supervised fine-tuning: conversations (data/chat_format.h) encoded into a run
 * folder, and read back for the packing loader (data/sft_loader.h).
 *
 *   DIR/train.tok, DIR/val.tok    the conversations' token ids, one after the other (data/tokfile.h)
 *   DIR/train.mask, DIR/val.mask  a token file of the same length whose "ids" say what each token
 *                                 is: TG_SFT_MASK_START (a conversation's first token), TG_SFT_MASK_TRAINED
 *                                 (a token the loss predicts: assistant content and its <|im_end|>),
 *                                 TG_SFT_MASK_CONTEXT (anything else)
 *
 * Preparing streams the sources (a JSONL file, gzip-compressed or not, read as conversations
 * whatever its name; or a folder, whose .jsonl/.ndjson files are read in name order): each line
 * is parsed, rendered and encoded by chat_format.h's rules; a line that is no conversation is
 * malformed, counted and skipped (the first TG_SFT_REPORTED_ERRORS kept with file and line), or,
 * with `strict`, stops the preparation. A conversation without an assistant turn trains nothing
 * and is left out (counted). One longer than seq_len tokens is cut to its first seq_len
 * (counted); if no trained token is left in them it is left out too (counted). The last
 * val_fraction of the conversations kept (at least one) are the val split, the rest train.
 * Memory: one line (data/jsonl.h's bound), its ids, 1 MiB of output buffers, and 8 bytes per
 * conversation for where each starts.
 *
 * Preference pairs (`pairs`, DPO) are prepared into the same files: each pair kept is two
 * conversations, its chosen side then its rejected one, encoded by data/preference.h (the prompt
 * once). A pair whose last turns are not both the assistant's (counted as without_reply), whose
 * replies are the same, or whose prompts differ is left out, counted and named among the errors,
 * or stops the preparation with `strict`; a pair with a side left without a predicted token by
 * the window's cut is left out (without_reply_in_window). The val split is the last val_fraction
 * of the pairs. */
#ifndef TAPEGRAD_DATA_SFT_DATA_H
#define TAPEGRAD_DATA_SFT_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/chat_format.h"
#include "data/prepare.h"
#include "data/split.h"
#include "data/tokfile.h"
#include "tapegrad/error.h"
#include "tapegrad/tokenizer.h"

#define TG_SFT_TRAIN_MASK_FILE "train.mask"
#define TG_SFT_VAL_MASK_FILE "val.mask"
enum { TG_SFT_MASK_CONTEXT = 0, TG_SFT_MASK_TRAINED = 1, TG_SFT_MASK_START = 2, TG_SFT_MASK_VALUES = 3 };
enum { TG_SFT_REPORTED_ERRORS = 5 };

typedef struct TgSftPrepareOptions {
    const char *sources;       /* a JSONL file or a folder of them */
    const TgTokenizer *tok;    /* with the ChatML markers (tg_chat_tokens_find) */
    int64_t seq_len;           /* conversations are cut to this many tokens */
    double val_fraction;       /* of the conversations, in (0, 1) */
    bool strict;               /* a malformed line (or a pair DPO cannot learn from) stops the preparation */
    bool pairs;                /* each line a preference pair (data/preference.h), not a conversation */
    TgChatTemplate chat_template; /* MINIMIND3: conversations with tools and thinking (data/chat_tools.h) */
} TgSftPrepareOptions;

typedef struct TgSftPrepareResult {
    size_t files, files_skipped;       /* read; in a folder, not JSONL */
    char first_skipped[320];
    uint64_t file_bytes;
    uint64_t lines, malformed_lines, without_reply, truncated, without_reply_in_window;
    uint64_t identical_pairs, prompts_differ; /* pairs: left out, as without_reply is */
    uint64_t conversations;                   /* kept (pairs: two a pair, the chosen side first) */
    uint64_t train_conversations, val_conversations, train_tokens, val_tokens;
    uint64_t trained_tokens;           /* targets of the loss, both splits */
    char errors[TG_SFT_REPORTED_ERRORS][320]; /* "FILE: line 12 ..." */
    int n_errors;
    double seconds;
} TgSftPrepareResult;

/* Prepares the sources into the existing folder `dir` (its four files, each written atomically;
 * on failure the caller removes the folder). TG_ERR_FORMAT when no conversation is left to train
 * on, or fewer than two (one for each split); TG_ERR_IO for a source that cannot be read. */
TgStatus tg_sft_prepare(const TgSftPrepareOptions *opt, const char *dir, const TgPrepareReporter *reporter, TgSftPrepareResult *res);

/* Opens a split of conversations (data/split.h): DIR/<tokens_file> and DIR/<mask_file> for a model of `vocab` ids and the tokenizer
 * `fingerprint`: refused (TG_ERR_FORMAT, naming the file) unless both hold the same number of
 * tokens, the mask holds only the values above, starts with TG_SFT_MASK_START, and no conversation
 * is longer than seq_len. */
TgStatus tg_sft_split_open(TgSplit *split, const char *dir, const char *tokens_file, const char *mask_file, uint32_t vocab,
                        uint64_t fingerprint, int64_t seq_len);

#endif
