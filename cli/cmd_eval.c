/* `tapegrad eval`: the val loss of a trained run (or its loss on any text), as JSON. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "data/corpus.h"
#include "data/prepare.h"
#include "lib/json_write.h"
#include "tapegrad/engine.h"
#include "train/memory_plan.h"
#include "train/run.h"
#include "train/trainer.h"

typedef struct {
    const char *run, *data;
    int threads;
} EvalFlags;

#define E EvalFlags
static const OptSpec specs[] = {
    FLAG_RUN(E, run, "run folder (its latest checkpoint) or a checkpoint file", 0, "required"),
    FLAG_DATA(E, data, "text file or folder to evaluate on", 0, "the run's val split"),
    FLAG_THREADS(E, threads, "threads", 0, NULL),
};
#undef E
static const OptTable table = {"eval", "--run DIR [--data PATH]", specs, (int)(sizeof specs / sizeof specs[0]), 0};

enum { EVAL_MAX_BATCH = 8 };

/* Mean loss over every non-overlapping window of `tokens`, in batches of up to EVAL_MAX_BATCH windows. */
static double loss_over_windows(TgModel *model, TgTape *tape, const int32_t *tokens, int64_t n, int64_t *n_windows) {
    int64_t T = model->cfg.seq_len, windows = (n - 1) / T, max_batch = EVAL_MAX_BATCH;
    int32_t *in = tg_malloc((size_t)(max_batch * T) * sizeof(int32_t));
    int32_t *tg = tg_malloc((size_t)(max_batch * T) * sizeof(int32_t));
    double total = 0.0;
    for (int64_t w = 0; w < windows; w += max_batch) {
        int64_t b = windows - w < max_batch ? windows - w : max_batch;
        for (int64_t i = 0; i < b; i++) {
            memcpy(in + i * T, tokens + (w + i) * T, (size_t)T * sizeof(int32_t));
            memcpy(tg + i * T, tokens + (w + i) * T + 1, (size_t)T * sizeof(int32_t));
        }
        total += evaluate_loss(model, tape, in, tg, 1, b, T) * (double)b;
    }
    free(in);
    free(tg);
    *n_windows = windows;
    return windows ? total / (double)windows : NAN;
}

/* The tokens to evaluate on: `data` encoded with the run's tokenizer, or the run's val split. */
static TgStatus eval_tokens(Run *run, const char *data, int32_t **tokens, size_t *n) {
    if (!data) {
        TG_TRY(run_read_tokens(run, PREPARE_VAL_FILE, tokens, n));
    } else {
        char *text = NULL;
        size_t len = 0;
        TG_TRY(corpus_read(data, &text, &len));
        size_t cap = tg_tokenizer_max_ids(&run->tok, len);
        *tokens = tg_malloc((cap + 1) * sizeof(int32_t));
        TgStatus s = tg_tokenizer_encode(&run->tok, text, len, *tokens, cap, n);
        free(text);
        if (s != TG_OK) return tg_fail_context(s, "%s cannot be encoded with the run's tokenizer", data);
    }
    if ((int64_t)*n < run->model.cfg.seq_len + 1)
        return tg_fail(TG_ERR_FORMAT, "%s holds %zu tokens, fewer than one window of %lld; give more text",
                       data ? data : "the val split", *n, (long long)run->model.cfg.seq_len + 1);
    return TG_OK;
}

static int run_eval(int argc, char **argv) {
    const EvalFlags defaults = {.threads = TRAIN_DEFAULT_THREADS};
    EvalFlags o = defaults;
    int rc = cli_parse(&table, &o, &defaults, NULL, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    if (!o.run) return cli_usage_error("eval", "--run DIR is required (a folder written by `tapegrad train`)");
    Run run;
    int32_t *tokens = NULL;
    size_t n = 0;
    TgStatus s = run_open_existing(o.run, &run);
    if (s == TG_OK) s = eval_tokens(&run, o.data, &tokens, &n);
    int64_t windows_per_batch = 0;
    if (s == TG_OK) {
        /* the batches of up to 8 windows, each a forward without a tape, before the arena grows */
        int64_t windows = ((int64_t)n - 1) / run.model.cfg.seq_len;
        windows_per_batch = windows < EVAL_MAX_BATCH ? windows : EVAL_MAX_BATCH;
        MemoryPlan plan = {0};
        memory_plan_add(&plan, model_memory_bytes(&run.model.cfg) + (double)n * sizeof(int32_t), NULL, NULL,
                        "for the model and the tokens");
        memory_plan_add_activations(&plan, &run.model.cfg, windows_per_batch, run.model.cfg.seq_len, o.threads, false,
                                    run.last_checkpoint, NULL);
        s = memory_plan_check(&plan);
    }
    if (s == TG_OK) {
        TgEngine engine;
        tg_engine_open(&engine, o.threads, 0);
        s = tg_arena_reserve(&engine.arena, (size_t)tg_model_activation_bytes(&run.model.cfg, windows_per_batch,
                                                                              run.model.cfg.seq_len, o.threads, false));
        int64_t windows = 0;
        double loss = s == TG_OK ? loss_over_windows(&run.model, &engine.tape, tokens, (int64_t)n, &windows) : NAN;
        if (s != TG_OK) {
            /* the arena could not be had */
        } else if (!isfinite(loss)) {
            /* JSON has no NaN: refused rather than printed */
            s = tg_fail(TG_ERR_NUMERIC,
                        "%s: the loss on %s is %s although every weight is finite: the model's activations overflow "
                        "float32",
                        run.last_checkpoint, o.data ? o.data : "the val split", isnan(loss) ? "NaN" : "infinite");
        } else {
            printf("{\"val_loss\":%.9g,\"tokens\":%lld,\"windows\":%lld,\"step\":%lld,\"checkpoint\":", loss,
                   (long long)(windows * run.model.cfg.seq_len), (long long)windows, (long long)run.state.step);
            json_write_string(stdout, run.last_checkpoint);
            printf("}\n");
        }
        tg_engine_close(&engine);
    }
    free(tokens);
    run_close(&run);
    return cli_exit("eval", s);
}

CLI_ONE_TABLE(option_tables, &table)

const Subcommand cmd_eval = {"eval", "val loss of a trained run, as JSON", run_eval, option_tables};
