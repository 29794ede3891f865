/* One split (train or val) of a run's data, as it was prepared: text, read as windows of tokens
 * (data/loader.h), or conversations, their tokens with a loss mask and where each starts, read as
 * packed rows (data/sft_loader.h). The batch sources of the trainer (train/batch_source.h) read
 * either through one interface. */
#ifndef TAPEGRAD_DATA_SPLIT_H
#define TAPEGRAD_DATA_SPLIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/tokfile.h"

typedef enum { TG_SPLIT_TEXT, TG_SPLIT_CONVERSATIONS } TgSplitKind;

typedef struct TgSplit {
    TgSplitKind kind;
    TgTokenStore tokens;   /* read a window at a time */
    /* conversations */
    TgTokenStore mask;     /* (data/sft_data.h: TG_SFT_MASK_*), beside each token */
    uint64_t *starts;      /* [n_conversations + 1]: conversation c is tokens [starts[c], starts[c + 1]) */
    size_t n_conversations;
    uint64_t trained;      /* tokens the loss predicts */
    bool pairs;            /* conversations two by two, preference pairs (data/pair_loader.h): a DPO run's */
} TgSplit;

/* An empty split (nothing open): what tg_split_close leaves. */
void tg_split_init(TgSplit *split);
/* A text split reading `tokens` (which it then owns). */
void tg_split_of_text(TgSplit *split, TgTokenStore tokens);
void tg_split_close(TgSplit *split);

#endif
