#include "tapegrad/pretrained.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/run.h"

TgStatus tg_pretrained_open(const char *dir_or_file, TgPretrained *p) {
    memset(p, 0, sizeof *p);
    /* a Run opened read-only holds exactly this; its tokenizer and model move out of it (they
     * point to the heap, never into the Run) */
    TgRun *run = tg_malloc(sizeof *run);
    TgStatus s = tg_run_open_existing(dir_or_file, run);
    if (s == TG_OK) {
        p->tok = run->tok;
        p->model = run->model;
        p->step = run->state.step;
        snprintf(p->checkpoint, sizeof p->checkpoint, "%s", run->last_checkpoint);
        memset(&run->tok, 0, sizeof run->tok);
        run->model_built = false;
    }
    tg_run_close(run);
    free(run);
    return s;
}

void tg_pretrained_close(TgPretrained *p) {
    if (p->model.params.finalized) tg_model_free(&p->model);
    tg_tokenizer_free(&p->tok);
    memset(p, 0, sizeof *p);
}
