/* `tapegrad eval`: the loss of a trained run on its val split, another dataset's val split or any
 * sources, in nats per token and in bits per byte, as JSON. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/eval_tasks.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "data/sources.h"
#include "support/json_write.h"
#include "tapegrad/engine.h"
#include "run/memory_plan.h"
#include "run/run.h"
#include "train/evaluate.h"
#include "train/trainer.h"

typedef struct {
    const char *run, *data, *dataset, *text_field;
    int threads;
    TgOptList tasks; /* --task: scored instead of the loss (cli/eval_tasks.c) */
    bool json;
} EvalFlags;

#define E EvalFlags
static const TgOptSpec specs[] = {
    TG_FLAG_RUN(E, run, "run folder (its latest checkpoint) or a checkpoint file", 0, "required"),
    TG_FLAG_DATA(E, data, "text or JSONL file (gzip-compressed or not) or a folder of them to evaluate on", 0,
              "the run's val split"),
    TG_FLAG_DATASET(E, dataset, "a dataset folder (tapegrad prepare) whose val split to evaluate on; its tokenizer must be the run's",
                 0, NULL),
    TG_FLAG_TEXT_FIELD(E, text_field, 0),
    TG_FLAG_THREADS(E, threads, "threads", 0, NULL),
    TG_OPT(E, tasks, "--task", TG_OPT_LIST,
        "a task file (JSONL of minimal pairs or multiple-choice items) to score instead of the loss: its accuracies, "
        "a line per file",
        TG_OPT_ANY, NULL, 0, NULL),
    TG_FLAG_JSON(E, json, "with --task: one JSON object (without --task eval always prints JSON)", 0, NULL),
};
#undef E
static const TgOptTable table = {"eval", "--run DIR [--data PATH | --dataset DIR | --task FILE.jsonl ...]", specs,
                               (int)(sizeof specs / sizeof specs[0]), 0};

enum { EVAL_MAX_BATCH = 8 };

/* The token stream cut into non-overlapping windows of seq + 1 tokens (window w: tokens
 * [w seq, (w + 1) seq]), evaluated EVAL_MAX_BATCH windows at a time as the tokens arrive, so
 * that no more than a batch of them is held. */
typedef struct {
    TgModel *model;
    TgTape *tape;
    const TgTokenizer *tok;
    int64_t seq;
    int32_t *tokens, *in, *tg;
    size_t n; /* buffered */
    double nats;
    uint64_t windows, bytes;
} Windows;

static void windows_open(Windows *w, TgModel *model, TgTape *tape, const TgTokenizer *tok) {
    *w = (Windows){.model = model, .tape = tape, .tok = tok, .seq = model->cfg.seq_len};
    size_t cap = (size_t)(EVAL_MAX_BATCH * w->seq + 1);
    w->tokens = tg_malloc(cap * sizeof(int32_t));
    w->in = tg_malloc(cap * sizeof(int32_t));
    w->tg = tg_malloc(cap * sizeof(int32_t));
}

/* Evaluates the whole windows buffered (all of them when they fill a batch), keeping the last
 * token, which starts the next window. */
static void windows_evaluate(Windows *w) {
    int64_t T = w->seq, b = w->n > 0 ? (int64_t)(w->n - 1) / T : 0;
    if (b == 0) return;
    for (int64_t i = 0; i < b; i++) {
        memcpy(w->in + i * T, w->tokens + i * T, (size_t)T * sizeof(int32_t));
        memcpy(w->tg + i * T, w->tokens + i * T + 1, (size_t)T * sizeof(int32_t));
    }
    w->nats += tg_evaluate_loss(w->model, w->tape, &(TgEvalBatches){w->in, w->tg, NULL, 1, b, T}) * (double)(b * T);
    w->bytes += tg_tokens_text_bytes(w->tok, w->tg, (size_t)(b * T));
    w->windows += (uint64_t)b;
    size_t used = (size_t)(b * T);
    memmove(w->tokens, w->tokens + used, (w->n - used) * sizeof(int32_t));
    w->n -= used;
}

static void windows_add(Windows *w, const int32_t *ids, size_t n) {
    size_t cap = (size_t)(EVAL_MAX_BATCH * w->seq + 1);
    while (n > 0) {
        size_t m = cap - w->n < n ? cap - w->n : n;
        memcpy(w->tokens + w->n, ids, m * sizeof(int32_t));
        w->n += m, ids += m, n -= m;
        if (w->n == cap) windows_evaluate(w);
    }
}

static void windows_close(Windows *w) {
    free(w->tokens), free(w->in), free(w->tg);
}

/* A token file, a batch at a time. */
static TgStatus windows_from_store(Windows *w, const TgTokenStore *s) {
    size_t block = (size_t)(EVAL_MAX_BATCH * w->seq);
    int32_t *ids = tg_malloc(block * sizeof(int32_t));
    TgStatus st = TG_OK;
    for (uint64_t at = 0; at < s->n && st == TG_OK; at += block) {
        size_t m = s->n - at < block ? (size_t)(s->n - at) : block;
        st = tg_token_store_read(s, at, m, ids);
        if (st == TG_OK) windows_add(w, ids, m);
    }
    free(ids);
    windows_evaluate(w);
    return st;
}

/* Any sources, encoded with the run's tokenizer document by document as prepare frames them: <eot>
 * after each (and the BOS before each, with a tokenizer that has one). */
static TgStatus windows_from_sources(Windows *w, const char *path, const char *text_field) {
    TgSourceList list;
    TG_TRY(tg_sources_list(path, &list));
    TgDocReader reader;
    TgDocOptions dopt = {.text_field = text_field, .whole_documents = tg_prepare_whole_documents(w->tok)};
    tg_doc_reader_open(&reader, &list, &dopt);
    int32_t *ids = NULL;
    size_t cap = 0;
    bool in_doc = false;
    TgStatus st;
    for (;;) {
        TgDocPiece piece;
        bool got;
        st = tg_doc_reader_next(&reader, &piece, &got);
        if (st != TG_OK || !got) break;
        size_t need = tg_tokenizer_max_ids(w->tok, piece.len) + 2, n;
        if (need > cap) ids = tg_realloc(ids, (cap = need) * sizeof *ids);
        int32_t *doc = ids + 1; /* ids[0]: room for the BOS */
        st = tg_tokenizer_encode(w->tok, piece.text, piece.len, doc, need - 1, &n);
        if (st != TG_OK) {
            st = tg_fail_context(st, "%s cannot be encoded with the run's tokenizer", path);
            break;
        }
        if (w->tok->has_bos && !in_doc && (n == 0 || doc[0] != w->tok->bos_id)) *--doc = w->tok->bos_id, n++;
        if (piece.doc_end && (n == 0 || doc[n - 1] != w->tok->eot_id)) doc[n++] = w->tok->eot_id;
        in_doc = !piece.doc_end;
        windows_add(w, doc, n);
    }
    free(ids);
    tg_doc_reader_close(&reader);
    tg_sources_free(&list);
    if (st == TG_OK) windows_evaluate(w);
    return st;
}

/* What --dataset names (with the run's tokenizer) or, without --data, the run's val split. */
static TgStatus open_eval_data(const EvalFlags *o, TgRun *run, TgDataset *dataset) {
    if (o->dataset) {
        TG_TRY(tg_dataset_open(o->dataset, false, dataset));
        if (dataset->tok.fingerprint != run->tok.fingerprint)
            return tg_fail(TG_ERR_MISMATCH,
                           "the dataset %s was prepared with another tokenizer than the run's: evaluate it with --data "
                           "on its sources",
                           o->dataset);
        return TG_OK;
    }
    return o->data ? TG_OK : tg_run_open_val(run);
}

/* The batches of up to 8 windows, each a forward without a tape, before the arena grows. */
static TgStatus eval_memory_check(const EvalFlags *o, const TgRun *run) {
    TgMemoryPlan plan = {0};
    tg_memory_plan_add(&plan, tg_model_memory_bytes(&run->model.cfg), NULL, NULL, "for the model");
    tg_memory_plan_add_activations(&plan, &run->model.cfg, EVAL_MAX_BATCH, run->model.cfg.seq_len, o->threads, false,
                                   run->last_checkpoint, NULL);
    return tg_memory_plan_check(&plan);
}

/* The summed loss over what is evaluated, into w; *targets: the tokens it is summed over. A
 * fine-tuned run's own val split is conversations: the loss per assistant token. */
static TgStatus eval_loss(const EvalFlags *o, TgRun *run, TgDataset *dataset, bool conversations, Windows *w,
                          uint64_t *targets) {
    if (conversations) {
        TgSplitEval e = {.loss = NAN};
        TgStatus s = tg_evaluate_conversations(&run->model, w->tape, &run->tok, &run->val, EVAL_MAX_BATCH, &e);
        *targets = e.targets, w->bytes = e.bytes;
        w->windows = e.rows, w->nats = e.loss * (double)*targets;
        return s;
    }
    TgStatus s = o->data ? windows_from_sources(w, o->data, o->text_field)
                         : windows_from_store(w, o->dataset ? &dataset->val : &run->val.tokens);
    *targets = w->windows * (uint64_t)w->seq;
    return s;
}

/* The result as one JSON line, or why there is none. */
static TgStatus eval_print(const TgRun *run, const char *what, const Windows *w, uint64_t targets) {
    double loss = targets ? w->nats / (double)targets : NAN;
    if (w->windows == 0)
        return tg_fail(TG_ERR_FORMAT, "%s holds fewer tokens than one window of %lld; give more text", what,
                       (long long)run->model.cfg.seq_len + 1);
    /* JSON has no NaN: refused rather than printed */
    if (!isfinite(loss))
        return tg_fail(TG_ERR_NUMERIC,
                       "%s: the loss on %s is %s although every weight is finite: the model's activations overflow "
                       "float32",
                       run->last_checkpoint, what, isnan(loss) ? "NaN" : "infinite");
    printf("{\"val_loss\":%.9g", loss);
    tg_json_write_field(stdout, "bits_per_byte", tg_bits_per_byte(loss, targets, w->bytes), 9);
    printf(",\"tokens\":%llu,\"bytes\":%llu,\"windows\":%llu,\"step\":%lld,\"data\":", (unsigned long long)targets,
           (unsigned long long)w->bytes, (unsigned long long)w->windows, (long long)run->state.step);
    tg_json_write_string(stdout, what);
    printf(",\"checkpoint\":");
    tg_json_write_string(stdout, run->last_checkpoint);
    printf("}\n");
    return cli_stdout_check();
}

/* The evaluation on its own engine, and its result. */
static TgStatus evaluate(const EvalFlags *o, TgRun *run, TgDataset *dataset) {
    bool conversations = tg_train_task_chat(run->task) && !o->data && !o->dataset;
    const char *what = conversations ? "the val split's conversations (the loss per assistant token)"
                       : o->data     ? o->data
                       : o->dataset  ? o->dataset
                                     : "the val split";
    TgEngine engine;
    tg_engine_open(&engine, o->threads, 0);
    TgStatus s =
        tg_arena_reserve(&engine.arena, (size_t)tg_model_activation_bytes(&run->model.cfg, EVAL_MAX_BATCH,
                                                                          run->model.cfg.seq_len, o->threads, false));
    Windows w;
    windows_open(&w, &run->model, &engine.tape, &run->tok);
    uint64_t targets = 0;
    if (s == TG_OK) s = eval_loss(o, run, dataset, conversations, &w, &targets);
    if (s == TG_OK) s = eval_print(run, what, &w, targets);
    windows_close(&w);
    tg_engine_close(&engine);
    return s;
}

static int run_eval(int argc, char **argv) {
    const EvalFlags defaults = {.threads = TG_TRAIN_DEFAULT_THREADS};
    EvalFlags o = defaults;
    int rc = cli_parse(&table, &o, &defaults, NULL, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    if (!o.run) return cli_usage_error("eval", "--run DIR is required (a folder written by `tapegrad train`)");
    if (o.tasks.count > 0)
        return cli_eval_tasks(&(CliTaskEval){o.run, &o.tasks, o.threads, o.json, o.data || o.dataset});
    if (o.data && o.dataset) return cli_usage_error("eval", "give --data or --dataset, not both");
    TgRun run;
    TgDataset dataset = {.train.fd = -1, .val.fd = -1};
    TgStatus s = tg_run_open_existing(o.run, &run);
    if (s == TG_OK) s = open_eval_data(&o, &run, &dataset);
    if (s == TG_OK) s = eval_memory_check(&o, &run);
    if (s == TG_OK) s = evaluate(&o, &run, &dataset);
    tg_dataset_close(&dataset);
    tg_run_close(&run);
    return cli_exit("eval", s);
}

CLI_ONE_TABLE(option_tables, &table)

const Subcommand cmd_eval = {"eval", "loss (nats per token) and bits per byte of a trained run, as JSON", run_eval,
                             option_tables};
