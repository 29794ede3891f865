#include "train/pretrained.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/run.h"

tg_status pretrained_open(const char *dir_or_file, Pretrained *p) {
    memset(p, 0, sizeof *p);
    /* a Run opened read-only holds exactly this; its tokenizer and model move out of it (they
     * point to the heap, never into the Run) */
    Run *run = tg_malloc(sizeof *run);
    tg_status s = run_open_existing(dir_or_file, run);
    if (s == TG_OK) {
        p->tok = run->tok;
        p->model = run->model;
        p->step = run->state.step;
        snprintf(p->checkpoint, sizeof p->checkpoint, "%s", run->last_checkpoint);
        memset(&run->tok, 0, sizeof run->tok);
        run->model_built = false;
    }
    run_close(run);
    free(run);
    return s;
}

void pretrained_close(Pretrained *p) {
    if (p->model.params.finalized) model_free(&p->model);
    tokenizer_free(&p->tok);
    memset(p, 0, sizeof *p);
}
