/* Task files: JSON Lines of items a model is scored on, each a few candidate texts of which one is
 * right, read into the token ids the scorer (train/tasks.h) runs the model over.
 *
 * Two formats, one per file (the first item decides; a line of the other format is refused):
 *   minimal pairs     {"sentence_good": "...", "sentence_bad": "..."}   (BLiMP's names): the good
 *                     sentence should be the more likely one;
 *   multiple choice   {"context": "...", "choices": ["...", "..."], "label": i}: choice i is the
 *                     right continuation of the context.
 * Other members of a line (BLiMP's "UID", "pair_id", ...) are ignored. Lines are read with the
 * JSON Lines rules of data/jsonl.h (strict JSON, bounded memory per line, blank lines skipped).
 *
 * A candidate is a row of ids and the part of it that is scored (the continuation):
 *   a sentence of a pair:   <eot> sentence                 (the sentence scored, after the start
 *                            every document of a pretraining window has: the <eot> before it,
 *                            or the BOS of a tokenizer that frames documents, tg_tokenizer_doc_start)
 *   a choice, plain text:   <eot> context choice           (the choice scored; context and choice
 *                            are encoded apart, so a choice's ids do not depend on the context:
 *                            the space between them belongs at the start of the choice, " runs")
 *   a choice, ChatML:       <|im_start|>user\ncontext<|im_end|>\n<|im_start|>assistant\nchoice<|im_end|>
 *                            (TG_TASK_CHATML, for a fine-tuned run: the reply and its <|im_end|>
 *                            scored, the ids fine-tuning trains on, data/chat_format.h)
 * Minimal pairs are plain text under either template. Each candidate keeps the UTF-8 bytes of its
 * continuation's text (the sentence, the choice; not <|im_end|>), by which the scorer normalises.
 *
 * Refused, in one line naming the file and the line (TG_ERR_FORMAT): a line that is not JSON or
 * not an object, a member missing, given twice or of the wrong type, a line of the other format
 * or of neither, fewer than two choices or more than TG_TASK_MAX_CHOICES, a label that is not a
 * whole number in [0, choices), an empty sentence or choice, a text the tokenizer cannot encode,
 * a candidate longer than the model's context (TgTaskEncoding.max_tokens), a file past
 * TG_TASK_MAX_IDS ids, and a file with no item. */
#ifndef TAPEGRAD_DATA_TASK_FILE_H
#define TAPEGRAD_DATA_TASK_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tapegrad/error.h"
#include "tapegrad/limits.h"
#include "tapegrad/tokenizer.h"

enum {
    TG_TASK_MAX_CHOICES = 64,
    TG_TASK_MAX_IDS = 1 << 26, /* the ids of every candidate of a file: 256 MiB */
    TG_TASK_NAME_CAP = 65,     /* a task's name: up to 64 bytes */
};

typedef enum { TG_TASK_MINIMAL_PAIRS, TG_TASK_MULTIPLE_CHOICE } TgTaskFormat;
/* "minimal_pairs", "multiple_choice" */
const char *tg_task_format_name(TgTaskFormat format);

/* How a multiple-choice candidate is rendered (see above). */
typedef enum { TG_TASK_PLAIN_TEXT, TG_TASK_CHATML } TgTaskTemplate;

typedef struct TgTaskEncoding {
    const TgTokenizer *tok;
    int64_t max_tokens; /* the most ids a candidate may have: the model's context + 1 */
    TgTaskTemplate rendering;
} TgTaskEncoding;

typedef struct TgTaskCandidate {
    int64_t offset; /* its ids: file->ids[offset, offset + len) */
    int32_t len;
    int32_t scored_from; /* ids [scored_from, len) are the continuation, each scored given those before */
    int64_t bytes;       /* the continuation's text in UTF-8 bytes */
} TgTaskCandidate;

typedef struct TgTaskItem {
    int64_t line;         /* its line in the file */
    int64_t first;        /* its candidates: file->candidates[first, first + count) */
    int32_t count, label; /* label: the right one (a pair's good sentence: 0) */
} TgTaskItem;

typedef struct TgTaskFile {
    char path[TG_PATH_CAP];
    char name[TG_TASK_NAME_CAP]; /* tg_task_file_name */
    TgTaskFormat format;
    TgTaskItem *items;
    int64_t n_items;
    TgTaskCandidate *candidates;
    int64_t n_candidates;
    int32_t *ids;
    int64_t n_ids;
    int32_t pad_id; /* <eot>, which a scorer pads rows with */
} TgTaskFile;

/* Whether name[0, len) is a task's name: 1 to 64 bytes of letters, digits, '-', '_' and '.'. */
bool tg_task_name_valid(const char *name, size_t len);
/* The task's name: the file's name without its folder, a ".gz" and then its last extension
 * ("blimp/anaphor.jsonl.gz" -> "anaphor"), as metrics name it ("task/anaphor/acc"). TG_ERR_ARG
 * unless it is 1 to 64 bytes of letters, digits, '-', '_' and '.'. */
TgStatus tg_task_file_name(const char *path, char *name, size_t cap);
/* Reads and encodes a whole task file (see above); on failure `out` is left empty. */
TgStatus tg_task_file_read(const char *path, const TgTaskEncoding *enc, TgTaskFile *out);
void tg_task_file_free(TgTaskFile *file);

#endif
