/* Splits of a run's data (split.h). */
#include "data/split.h"

#include <stdlib.h>
#include <string.h>

void tg_split_init(TgSplit *split) {
    memset(split, 0, sizeof *split);
    split->tokens.fd = split->mask.fd = -1;
}

void tg_split_of_text(TgSplit *split, TgTokenStore tokens) {
    tg_split_init(split);
    split->tokens = tokens;
}

void tg_split_close(TgSplit *split) {
    tg_token_store_close(&split->tokens);
    tg_token_store_close(&split->mask);
    free(split->starts);
    tg_split_init(split);
}
