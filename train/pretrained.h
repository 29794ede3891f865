/* A trained run read back for use: the tokenizer of a run folder written by `tapegrad train` and
 * the model of one of its checkpoints, checked against each other (the checkpoint records the
 * fingerprint of the tokenizer it was trained with).
 *
 *   Pretrained p;
 *   if (pretrained_open("checkpoints/notes", &p) != TG_OK) { puts(tg_error_message()); ... }
 *   ... sample_text(&p.model, &p.tok, tape, ...) ...
 *   pretrained_close(&p);
 */
#ifndef TAPEGRAD_TRAIN_PRETRAINED_H
#define TAPEGRAD_TRAIN_PRETRAINED_H

#include <stdint.h>

#include "data/tokenizer.h"
#include "lib/error.h"
#include "train/model.h"

#pragma GCC visibility push(default)

typedef struct Pretrained {
    Tokenizer tok;
    Model model;
    int64_t step;           /* optimizer steps the checkpoint had done */
    char checkpoint[4200];  /* the file loaded */
} Pretrained;

/* dir_or_file: a run folder (its `latest` checkpoint) or a checkpoint file inside one (its
 * tokenizer.txt beside it). Builds the model from the checkpoint's config and loads its weights.
 * Refuses, naming the file: a folder without a usable checkpoint or tokenizer (TG_ERR_IO), a
 * damaged file (TG_ERR_FORMAT; the message lists the folder's other checkpoints), a checkpoint
 * trained with another tokenizer or a parameter set's checkpoint (TG_ERR_MISMATCH). Prints
 * nothing. On failure *p is left empty; pretrained_close is safe either way. */
tg_status pretrained_open(const char *dir_or_file, Pretrained *p);
/* Frees the model and the tokenizer. */
void pretrained_close(Pretrained *p);

#pragma GCC visibility pop

#endif
