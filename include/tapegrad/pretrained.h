/* A trained run read back for use: the tokenizer of a run folder written by `tapegrad train` and
 * the model of one of its checkpoints, checked against each other (the checkpoint records the
 * fingerprint of the tokenizer it was trained with).
 *
 *   TgPretrained p;
 *   if (tg_pretrained_open("checkpoints/notes", &p) != TG_OK) { puts(tg_error_message()); ... }
 *   ... tg_sample_text(&(TgSampler){.model = &p.model, .tape = tape, ...}, &p.tok, ...) ...
 *   tg_pretrained_close(&p);
 */
#ifndef TG_PRETRAINED_H
#define TG_PRETRAINED_H

#include <stdint.h>

#include "tapegrad/tokenizer.h"
#include "tapegrad/error.h"
#include "tapegrad/model.h"

#pragma GCC visibility push(default)

typedef struct TgPretrained {
    TgTokenizer tok;
    TgModel model;
    int64_t step;           /* optimizer steps the checkpoint had done */
    char checkpoint[TG_PATH_CAP]; /* the file loaded */
} TgPretrained;

/* dir_or_file: a run folder (its `latest` checkpoint) or a checkpoint file inside one (its
 * tokenizer.txt beside it). Builds the model from the checkpoint's config and loads its weights.
 * Refuses, naming the file: a folder without a usable checkpoint or tokenizer (TG_ERR_IO), a
 * damaged file (TG_ERR_FORMAT; the message lists the folder's other checkpoints), a checkpoint
 * trained with another tokenizer or a parameter set's checkpoint (TG_ERR_MISMATCH). Prints
 * nothing. On failure *p is left empty; tg_pretrained_close is safe either way. */
TgStatus tg_pretrained_open(const char *dir_or_file, TgPretrained *p);
/* Frees the model and the tokenizer. */
void tg_pretrained_close(TgPretrained *p);

#pragma GCC visibility pop

#endif
