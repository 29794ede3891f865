/* The training loop: data -> forward -> backward -> clip -> AdamW, with evaluation, metrics,
 * checkpoints and progress reports (trainer.h). */
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/corpus.h"
#include "data/loader.h"
#include "data/sft_loader.h"
#include "train/batch_source.h"
#include "train/best.h"
#include "train/dpo.h"
#include "train/evaluate.h"
#include "train/tasks.h"
#include "train/probe_prompts.h"
#include "tapegrad/tokenizer.h"
#include "data/tokfile.h"
#include "lib/cpu.h"
#include "lib/kernels.h"
#include "support/fault.h"
#include "tapegrad/engine.h"
#include "tapegrad/error.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_folder.h"
#include "lib/dist.h"
#include "run/memory_plan.h"
#include "run/run.h"
#include "tapegrad/sample.h"
#include "support/clock.h"

/* Names the first parameter whose gradient is not finite (NULL if none). */
static const char *first_nonfinite_grad(const TgParamStore *ps) {
    for (int i = 0; i < ps->count; i++) {
        const TgTensor *t = ps->tensors[i];
        for (int64_t j = 0; j < t->numel; j++)
            if (!isfinite(t->grad[j])) return t->name;
    }
    return NULL;
}

/* n batches of B x T token rows, one after the other: the step's micro-batches, the fixed val
 * batches of an evaluation, the probe's. */
typedef struct {
    int32_t *in, *tg; /* (n, B, T): tokens, and each position's target */
    int32_t *ks;      /* (n, B, T): each position's first visible one, for packed rows; NULL for others */
    int64_t n, B, T;
} BatchRows;

static void batch_rows_alloc(BatchRows *r, int64_t n, int64_t B, int64_t T, bool packed) {
    size_t cells = (size_t)(n * B * T);
    *r = (BatchRows){.n = n, .B = B, .T = T};
    if (n == 0) return;
    r->in = tg_malloc(cells * sizeof *r->in);
    r->tg = tg_malloc(cells * sizeof *r->tg);
    r->ks = packed ? tg_malloc(cells * sizeof *r->ks) : NULL;
}

static void batch_rows_free(BatchRows *r) { free(r->in), free(r->tg), free(r->ks); }

/* Batch b of them, to fill: its tokens, targets and (packed rows) first visible positions. */
typedef struct {
    int32_t *in, *tg, *ks;
} BatchCells;

static BatchCells batch_rows_cells(const BatchRows *r, int64_t b) {
    size_t off = (size_t)(b * r->B * r->T);
    return (BatchCells){r->in + off, r->tg + off, r->ks ? r->ks + off : NULL};
}

/* Batch b of them, as the model takes one. */
static TgBatch batch_rows_at(const BatchRows *r, int64_t b) {
    BatchCells c = batch_rows_cells(r, b);
    return (TgBatch){c.in, c.tg, c.ks, r->B, r->T};
}

/* A DPO batch's figures (train/dpo.h: TgDpoStats), each logged per step and per evaluation. */
enum { DPO_STATS = 4 };

/* Everything one run holds while it trains. */
typedef struct Trainer {
    const TgTrainRequest *request;   /* the options (run/train_options.h): to open the run, and its schedule to save */
    const TgTrainSchedule *schedule; /* how it trains */
    const TgTrainInvocation *invocation; /* what this invocation does: when it stops */
    TgRun run;
    TgEngine engine;
    TgCheckpointSaver saver;   /* set up by commit_run */
    bool committed;          /* the run folder is in place (commit_run) */
    int64_t failed_saves;    /* background saves that failed since the last that worked */
    TgBatchSource batches;   /* the train split's (train/batch_source.h), at this run's position */
    TgLossWeighting weighting; /* how micro-batches' and eval batches' losses make one */
    int rank, ranks;         /* this process's place in a data-parallel job (lib/dist.h): 0 of 1 alone */
    bool writer;             /* rank 0, the one that writes the run folder, metrics and checkpoints */
    int64_t batch, seq, tokens_per_step;
    int64_t micro_batches;        /* in one step, over all ranks: ranks x accum */
    double *micro_losses;         /* [micro_batches]: the step's losses, rank r's from r x accum on */
    double *eval_losses;          /* [eval_batches] */
    float *grad_scratch;          /* params.total floats when micro_batches > 1: one micro-batch's gradient, the
                                     gradient sum's exchange buffer */
    BatchRows step;               /* accum: the step's micro-batches of this rank */
    BatchRows eval;               /* eval_batches: the same val batches at every evaluation */
    BatchRows probe;              /* hooks.probe_batches (0: none), when the hooks ask for a probe */
    double *micro_counts;         /* [micro_batches]: targets in each micro-batch, the weights of a mean of targets */
    double *eval_counts;          /* [eval_batches] */
    TgTensor **ffn_hidden;          /* [layers], on watched steps */
    TgTrainHooks hooks;             /* rank 0's: the other ranks watch nothing */
    TgTrainReporter reporter;       /* rank 0's: the other ranks report nothing */
    TgMessageSink messages;         /* the reporter's messages, for the run folder's code (run.h) */
    TgLrSchedule sched;
    double t_start, elapsed_before, budget_s, last_val;
    bool val_before_training;     /* last_val is the loss of --init-from's weights, before any step */
    uint64_t eval_bytes;          /* the text bytes of the eval batches' targets: val loss -> bits per byte */
    double last_bpb;
    double window_t;              /* tokens/s over the steps since the last progress line */
    int64_t window_tokens;
    /* the ETA: the time per step after this invocation's first (which warms up), evaluations apart */
    double eta_t0, eta_excluded;  /* the end of the first step; evaluation time since */
    int64_t eta_step0;            /* the first step's number; 0 before it */
    double eval_s;                /* time in evaluations (with tasks and probes), over evals_timed */
    int64_t evals_timed;
    TgTaskSuite tasks; /* --eval-task's files, scored at every evaluation */
    TgEvalMetric watched;         /* the figure of the best record (train/best.h): none, or --keep-best's or val_loss */
    TgProbePrompts probe_prompts; /* rank 0's (--probe-prompts) */
    char stop_reason[256];        /* why the run stopped early (--early-stop) */
    int64_t first_step;           /* the step this invocation started at */
    volatile sig_atomic_t *stop;  /* the signal handler's flag (may be NULL) */
    bool tasks_interrupted;       /* the latest evaluation's task scoring gave up on a signal */
    uint64_t best_source;         /* the fingerprint of the task --keep-best names (0: none) */
    /* overfitting (note_overfitting): the train loss since the last evaluation, and the trend */
    double train_sum, prev_val, prev_train, rise_val, rise_train;
    int64_t train_n, rise_step, overfit_from; /* overfit_from: the step the rise said began (0: not said) */
    int rising;
    bool best_restarted;          /* its file changed since the resumed record: measured anew */
    bool discard;                 /* a new run stopped before its first step: its folder is not kept */
    /* DPO (train/dpo.h): a batch is P pairs in 2P rows (tr->batch counts the rows) */
    bool dpo;
    TgDpoReference reference;       /* the reference's log-probabilities of every train and val pair */
    float *step_ref, *eval_ref;     /* (accum, 2P), (eval_batches, 2P): the rows' reference, in their order */
    uint64_t *eval_which;           /* (eval_batches, P): the val pairs of the fixed batches */
    double *micro_dpo;              /* [DPO_STATS][micro_batches]: margin, accuracy, chosen, rejected of each */
    double *eval_dpo;               /* [DPO_STATS][eval_batches] */
    double step_dpo[DPO_STATS];     /* the step's means of those figures */
    double val_dpo[DPO_STATS];      /* the latest evaluation's (NaN before one) */
    TgRunMetric *extra;             /* a metrics line's figures besides the fixed ones (line_figures) */
} Trainer;

/* Their names in metrics.jsonl, in store_dpo_stats' order. */
static const char *const DPO_STEP_NAMES[DPO_STATS] = {"margin", "accuracy", "chosen_logp", "rejected_logp"};
static const char *const DPO_VAL_NAMES[DPO_STATS] = {"val_margin", "val_accuracy", "val_chosen_logp",
                                                     "val_rejected_logp"};

/* A metrics line's figures besides the fixed ones: a DPO run's of the step (step_figures) and of
 * the evaluation (eval_figures), then the tasks' of the evaluation. */
static void line_figures(Trainer *tr, TgRunMetrics *line, bool step_figures, bool eval_figures) {
    int n = 0;
    for (int j = 0; j < DPO_STATS && tr->dpo && step_figures; j++)
        tr->extra[n++] = (TgRunMetric){DPO_STEP_NAMES[j], tr->step_dpo[j]};
    for (int j = 0; j < DPO_STATS && tr->dpo && eval_figures; j++)
        tr->extra[n++] = (TgRunMetric){DPO_VAL_NAMES[j], tr->val_dpo[j]};
    if (eval_figures) {
        TgRunMetrics tasks = tg_run_metrics_at(0);
        tg_task_suite_add_metrics(&tr->tasks, &tasks);
        for (int i = 0; i < tasks.n_extra; i++) tr->extra[n++] = tasks.extra[i];
    }
    line->extra = tr->extra, line->n_extra = n;
}

/* Once the first step is done, or the run stops before one, the run folder moves into place
 * (run.h) and checkpoints can go into it; the reporter hears of the folder's final path. Only the
 * first call does anything. */
static TgStatus commit_run(Trainer *tr) {
    if (tr->committed) return TG_OK;
    TG_TRY(tg_run_commit(&tr->run));
    TgCheckpointKeep keep = {.newest = tr->schedule->keep, .best = tr->run.keep_best.kind != TG_EVAL_METRIC_NONE};
    tg_best_metric_format(&tr->run.keep_best, keep.metric, sizeof keep.metric);
    tg_checkpoint_saver_init(&tr->saver, tr->run.dir, &keep, &tr->run.model);
    tr->committed = true;
    if (tr->reporter.folder) tr->reporter.folder(tr->reporter.ctx, tr->run.dir);
    return TG_OK;
}

static const char ANOTHER_RANK_FAILED[] = "stopped because another rank of the job failed (its message says why)";

static void trainer_close(Trainer *tr) {
    tg_checkpoint_saver_free(&tr->saver);
    tg_probe_prompts_free(&tr->probe_prompts);
    free(tr->ffn_hidden);
    batch_rows_free(&tr->step), batch_rows_free(&tr->eval), batch_rows_free(&tr->probe);
    free(tr->micro_losses);
    free(tr->eval_losses);
    free(tr->grad_scratch);
    free(tr->micro_counts), free(tr->eval_counts);
    free(tr->extra);
    free(tr->step_ref), free(tr->eval_ref), free(tr->eval_which), free(tr->micro_dpo), free(tr->eval_dpo);
    tg_dpo_reference_free(&tr->reference);
    tg_batch_source_close(&tr->batches);
    tg_task_suite_free(&tr->tasks);
    tg_engine_close(&tr->engine);
    tg_run_close(&tr->run);
}

/* Every rank learns whether every rank got here without failing. A rank that failed returns
 * its own error; the others TG_ERR_INTERRUPTED. */
static TgStatus agree_on_status(TgStatus s) {
    int any_failed = 0;
    TgStatus agreed = tg_dist_max_int(s != TG_OK, &any_failed);
    if (s != TG_OK) return s;
    if (agreed != TG_OK) return agreed;
    return any_failed ? tg_fail(TG_ERR_INTERRUPTED, "%s", ANOTHER_RANK_FAILED) : TG_OK;
}

/* The step's buffers, the train split's batch source (at the resumed position), and the fixed val
 * batches of every evaluation and of k probes; packed rows are padded with <eot>. */
static TgStatus open_batches(Trainer *tr, int64_t k) {
    const TgTrainSchedule *sch = tr->schedule;
    const TgSplit *train = &tr->run.train, *val = &tr->run.val;
    int64_t B = tr->batch, T = tr->seq;
    int32_t pad = tr->run.tok.eot_id;
    bool packed = tg_split_packed(train);
    size_t window = (size_t)(B * T);
    tr->weighting = tg_split_loss_weighting(train);
    batch_rows_alloc(&tr->step, sch->accum, B, T, packed);
    batch_rows_alloc(&tr->eval, sch->eval_batches, B, T, packed);
    batch_rows_alloc(&tr->probe, k, B, T, packed);
    tr->micro_counts = tg_calloc((size_t)tr->micro_batches, sizeof(double));
    tr->eval_losses = tg_calloc((size_t)sch->eval_batches, sizeof(double));
    tr->eval_counts = tg_calloc((size_t)sch->eval_batches, sizeof(double));
    TG_TRY(tg_batch_source_open(&tr->batches, train, B, T, tr->run.state.seed, pad));
    if (tr->dpo) tr->eval_which = tg_malloc((size_t)(sch->eval_batches * B / 2) * sizeof *tr->eval_which);
    TG_TRY(tg_split_fixed_batches(val, B, T, sch->eval_batches, pad, tr->eval.in, tr->eval.tg, tr->eval.ks,
                                  tr->eval_which));
    for (int64_t b = 0; b < sch->eval_batches; b++)
        tr->eval_counts[b] = (double)tg_count_targets(batch_rows_at(&tr->eval, b).targets, window);
    if (k) TG_TRY(tg_split_fixed_batches(val, B, T, k, pad, tr->probe.in, tr->probe.tg, tr->probe.ks, NULL));
    if (tr->run.resumed) tg_batch_source_set_state(&tr->batches, &tr->run.state.loader);
    return TG_OK;
}

/* The rows' reference log-probabilities of a batch of P pairs (`which` in `pairs`, 2 per pair in
 * the split's layout) in the rows' order: the chosen sides', then the rejected ones'. */
static void gather_reference(const float *pairs, const uint64_t *which, int64_t P, float *rows) {
    for (int64_t p = 0; p < P; p++) rows[p] = pairs[2 * which[p]], rows[P + p] = pairs[2 * which[p] + 1];
}

/* A DPO run's reference: computed from the weights it starts with (a new run), or read from the
 * run folder (a resume), and the fixed val batches' share of it. Every rank computes or reads its
 * own: the same floats. */
static TgStatus open_reference(Trainer *tr) {
    TgRun *run = &tr->run;
    int64_t P = tr->batch / 2, n = tr->schedule->eval_batches;
    double t0 = tg_clock_seconds();
    if (run->resumed) {
        TG_TRY(tg_dpo_reference_load(run->dir, &run->train, &run->val, &tr->reference));
    } else {
        TG_TRY(tg_dpo_reference_compute(&run->model, &tr->engine.tape, &run->train, &run->val, P, tr->seq,
                                        run->tok.eot_id, &tr->reference));
        tg_message_emit(&tr->messages, TG_MESSAGE_INFO,
                        "reference: both replies' log-probabilities of %zu train and %zu val pairs under the weights "
                        "the run starts from, computed once (%.1f s) and kept in the run folder as %s",
                        tr->reference.train_pairs, tr->reference.val_pairs, tg_clock_seconds() - t0,
                        TG_DPO_REFERENCE_FILE);
    }
    tr->step_ref = tg_malloc((size_t)(tr->schedule->accum * tr->batch) * sizeof(float));
    tr->eval_ref = tg_malloc((size_t)(n * tr->batch + 1) * sizeof(float));
    for (int64_t b = 0; b < n; b++)
        gather_reference(tr->reference.val, tr->eval_which + b * P, P, tr->eval_ref + b * tr->batch);
    tr->micro_dpo = tg_calloc((size_t)(DPO_STATS * tr->micro_batches), sizeof(double));
    tr->eval_dpo = tg_calloc((size_t)(DPO_STATS * n + 1), sizeof(double));
    for (int j = 0; j < DPO_STATS; j++) tr->val_dpo[j] = NAN;
    return TG_OK;
}

/* A task --keep-best names is one of the run's --eval-task files (on a resume too: the tasks may
 * have changed, the run's figure cannot). */
static TgStatus check_best_task(const Trainer *tr) {
    const TgBestMetric *m = &tr->run.keep_best;
    if (m->kind != TG_EVAL_METRIC_TASK_ACC && m->kind != TG_EVAL_METRIC_TASK_ACC_NORM) return TG_OK;
    return tg_task_check_name(m->task, tr->schedule->eval_tasks.items, tr->schedule->eval_tasks.count);
}

/* A record of a task's accuracy holds the task file's fingerprint: when the file of that name
 * changed since, its values are no longer comparable, and the record starts anew (said; `best`
 * keeps naming the checkpoint it named until a new best is saved). */
static void check_best_source(Trainer *tr) {
    const TgBestMetric *m = &tr->run.keep_best;
    if (m->kind != TG_EVAL_METRIC_TASK_ACC && m->kind != TG_EVAL_METRIC_TASK_ACC_NORM) return;
    tr->best_source = tg_task_suite_fingerprint(&tr->tasks, m->task);
    TgBestRecord *b = &tr->run.state.best;
    if (b->step < 0 || !b->source || b->source == tr->best_source) return;
    tg_message_emit(&tr->messages, TG_MESSAGE_WARNING,
                    "the task '%s' of `keep_best` is not the file it was when its best (%.6g at step %lld) was measured: "
                    "the best record starts anew with this file; %s/%s keeps naming that checkpoint until a new best",
                    m->task, b->value, (long long)b->step, tr->run.dir, TG_CHECKPOINT_BEST_FILE);
    *b = (TgBestRecord){.kept = true, .value = NAN, .step = -1};
    tr->best_restarted = true;
}

/* Opens this rank's run (every check first), the engine and the data; nothing is written. */
static TgStatus trainer_open(Trainer *tr, const TgTrainRequest *req, const TgTrainHooks *hooks,
                             const TgTrainReporter *reporter) {
    memset(tr, 0, sizeof *tr);
    tr->request = req, tr->schedule = req->schedule, tr->invocation = req->invocation;
    const TgTrainSchedule *sch = tr->schedule;
    tr->rank = tg_dist_rank(), tr->ranks = tg_dist_ranks();
    tr->writer = tr->rank == 0;
    if (hooks && tr->writer) tr->hooks = *hooks;
    if (reporter && tr->writer) tr->reporter = *reporter;
    tr->messages = (TgMessageSink){tr->reporter.message, tr->reporter.ctx};
    TgPrepareReporter preparing = {tr->reporter.ctx, tr->reporter.message, tr->reporter.preparing};
    TG_TRY(tg_run_open_for_training(req, tr->writer, &tr->messages, &preparing, &tr->run));
    TgTaskEncoding tasks = tg_task_encoding_of(&tr->run);
    TgStatus opened =
        tg_task_suite_open(&tr->tasks, sch->eval_tasks.items, sch->eval_tasks.count, &tasks);
    if (opened == TG_ERR_IO && req->eval_tasks_origin[0])
        return tg_fail_context(opened,
                               "`eval_tasks`%s, saved by the run: give `eval_tasks` again with a path that "
                               "exists from here (each file of the run's as it was)",
                               req->eval_tasks_origin);
    TG_TRY(opened);
    TG_TRY(check_best_task(tr));
    tr->extra = tg_calloc((size_t)(2 * DPO_STATS + TG_TASK_METRICS * tr->tasks.n + 1), sizeof *tr->extra);
    tr->watched = tg_best_watched(tr->run.keep_best.kind, sch->early_stop);
    tg_best_record_start(&tr->run.state.best, tr->watched);
    check_best_source(tr);
    if (tr->writer && sch->probe_prompts && *sch->probe_prompts)
        TG_TRY(
            tg_probe_prompts_load(&tr->probe_prompts, sch->probe_prompts, sch->probe_tokens, &tr->run));
    const TgModelConfig *c = &tr->run.model.cfg;
    tr->dpo = tr->run.task == TG_TASK_DPO;
    /* DPO: --batch counts pairs, each two rows */
    int64_t B = sch->batch * (tr->dpo ? 2 : 1), T = c->seq_len;
    tr->batch = B, tr->seq = T;
    tr->micro_batches = sch->accum * tr->ranks;
    tr->tokens_per_step = B * T * tr->micro_batches;
    /* the model and its tokens are here; nothing else large is, yet */
    TgTrainSchedule rows = *sch;
    rows.batch = B;
    TG_TRY(tg_train_memory_check(&rows, req->invocation->resume, req->spec->model.seq_len > 0, c,
                                 tr->hooks.after_probe_forward ? tr->hooks.probe_batches : 0, 0));
    /* the arena at the step's size at once: no chunk added and coalesced during the first step */
    tg_engine_open(&tr->engine, sch->threads, 0);
    tg_tape_set_precision(&tr->engine.tape, tr->run.precision);
    TG_TRY(tg_arena_reserve(&tr->engine.arena, (size_t)tg_model_activation_bytes(c, B, T, sch->threads, true)));
    TG_TRY(
        open_batches(tr, tr->hooks.probe_batches > 0 && tr->hooks.after_probe_forward ? tr->hooks.probe_batches : 0));
    if (tr->dpo) TG_TRY(open_reference(tr));
    size_t window = (size_t)(B * T);
    tr->ffn_hidden = tg_calloc((size_t)c->n_layers, sizeof *tr->ffn_hidden);
    tr->micro_losses = tg_calloc((size_t)tr->micro_batches, sizeof(double));
    if (tr->micro_batches > 1) tr->grad_scratch = tg_malloc(tg_model_trainable(&tr->run.model)->total * sizeof(float));
    tr->eval_bytes = tg_tokens_text_bytes(&tr->run.tok, tr->eval.tg, (size_t)sch->eval_batches * window);
    tr->sched = (TgLrSchedule){sch->lr, sch->min_lr, sch->warmup, sch->steps};
    tr->budget_s = tr->invocation->time_budget_min > 0 ? tr->invocation->time_budget_min * 60.0 : INFINITY;
    tr->t_start = tg_clock_seconds();
    tr->elapsed_before = tr->run.state.elapsed_s;
    tr->last_val = tr->last_bpb = NAN;
    tr->first_step = tr->run.state.step;
    return TG_OK;
}

/* Rank 0, once every rank passed every check: from here on the run writes into its folder. */
static TgStatus trainer_open_files(Trainer *tr) {
    TG_TRY(tg_run_start(&tr->run));
    if (tr->dpo && !tr->run.resumed)
        TG_TRY(tg_dpo_reference_save(tr->run.dir, &tr->run.train, &tr->run.val, &tr->reference));
    /* every file the run appends to is open before its first step */
    if (tr->probe_prompts.n > 0) TG_TRY(tg_run_open_probes(&tr->run));
    if (tr->reporter.folder) tr->reporter.folder(tr->reporter.ctx, tr->run.dir);
    if (tg_train_schedule_save(tr->run.dir, tr->schedule) != TG_OK)
        tg_message_emit(&tr->messages, TG_MESSAGE_WARNING, "%s", tg_error_message());
    /* `best` as the record resumed from says: a save killed before it rewrote `best`, or a resume
     * from an older checkpoint, leaves another there */
    if (tr->run.resumed && tr->run.keep_best.kind != TG_EVAL_METRIC_NONE && !tr->best_restarted) {
        char metric[TG_TASK_NAME_CAP + 16];
        tg_best_metric_format(&tr->run.keep_best, metric, sizeof metric);
        /* a record whose checkpoint was never saved leaves `best` naming the best on disk */
        if (tg_checkpoint_write_best(tr->run.dir, metric, &tr->run.state.best) != TG_OK)
            tg_message_emit(&tr->messages, TG_MESSAGE_WARNING, "%s", tg_error_message());
    }
    if (tr->hooks.start) TG_TRY(tr->hooks.start(tr->hooks.ctx, tr->run.dir, &tr->run.model));
    return TG_OK;
}

/* The ranks must hold the same weights, and at the start also the same moments, tokens and
 * trainer state: a checksum of them is compared across the ranks. Replicas that differ are a
 * fault (ranks that read different data or folders, a bad machine), and the run stops. */
static TgStatus check_replicas(Trainer *tr, bool at_start) {
    if (tr->ranks == 1) return TG_OK;
    const TgRun *run = &tr->run;
    const TgParamStore *ps = tg_model_trainable(&tr->run.model);
    size_t bytes = ps->total * sizeof(float);
    uint64_t h = tg_dist_checksum(0, ps->data, bytes);
    if (at_start) {
        uint8_t loader[TG_LOADER_STATE_BYTES];
        TgLoaderState state = tg_batch_source_state(&tr->batches);
        tg_loader_state_pack(&state, loader);
        int64_t counters[2] = {run->state.step, run->state.tokens_seen};
        h = tg_dist_checksum(tg_dist_checksum(h, ps->m, bytes), ps->v, bytes);
        const TgTokenStore *train = &run->train.tokens, *val = &run->val.tokens;
        uint64_t tokens[4] = {train->n, train->hash, val->n, val->hash};
        h = tg_dist_checksum(h, tokens, sizeof tokens);
        h = tg_dist_checksum(tg_dist_checksum(h, loader, sizeof loader), counters, sizeof counters);
    }
    int differing;
    TG_TRY(tg_dist_compare_u64(h, &differing));
    if (differing < 0) return TG_OK;
    if (at_start)
        return tg_fail(TG_ERR_MISMATCH,
                       "rank %d does not hold what rank 0 holds (its tokens, weights or trainer state differ): every "
                       "rank must read the same `data_path`, or the same run folder on `resume`",
                       differing);
    return tg_fail(TG_ERR_MISMATCH,
                   "after step %lld the weights of rank %d differ from rank 0's: the ranks no longer train one model "
                   "(a fault on that rank's machine?). Stopped without saving this step; resume from the run's latest "
                   "checkpoint",
                   (long long)run->state.step, differing);
}

/* Every rank opens its run; once all did, they check that they hold the same data and model,
 * then rank 0 readies the folder. A failure anywhere stops every rank before anything is written
 * (or, for rank 0's own files, before the first step). */
static TgStatus trainer_start(Trainer *tr, const TgTrainRequest *req, const TgTrainHooks *hooks,
                              const TgTrainReporter *reporter) {
    TG_TRY(agree_on_status(trainer_open(tr, req, hooks, reporter)));
    TG_TRY(check_replicas(tr, true));
    return agree_on_status(tr->writer ? trainer_open_files(tr) : TG_OK);
}

/* A batch's DPO figures into column i of `columns`, DPO_STATS rows of `n` each (the trainer's
 * micro_dpo and eval_dpo). */
static void store_dpo_stats(double *columns, int64_t n, int64_t i, const TgDpoStats *st) {
    const double figures[DPO_STATS] = {st->margin, st->accuracy, st->chosen, st->rejected};
    for (int j = 0; j < DPO_STATS; j++) columns[j * n + i] = figures[j];
}

/* DPO: batches [begin, end) of the fixed val ones, their losses and figures, no gradients. */
static void evaluate_pairs(Trainer *tr, int64_t begin, int64_t end) {
    int64_t n = tr->schedule->eval_batches;
    TgTape *tape = &tr->engine.tape;
    bool old = tg_tape_set_grad_enabled(tape, false);
    for (int64_t b = begin; b < end; b++) {
        TgBatch batch = batch_rows_at(&tr->eval, b);
        TgDpoStats st;
        TgTensor *loss =
            tg_dpo_batch_loss(&tr->run.model, tape, &batch, tr->eval_ref + b * tr->batch, tr->run.dpo_beta, &st);
        tr->eval_losses[b] = loss->data[0];
        store_dpo_stats(tr->eval_dpo, n, b, &st);
        tg_tape_reset(tape);
    }
    tg_tape_set_grad_enabled(tape, old);
}

/* The mean loss over the fixed val batches, split over the ranks (rank r evaluates its block of
 * them); every rank sums all the losses in batch order, so the mean is bitwise what one process
 * computes. */
static TgStatus evaluate(Trainer *tr, double *val_out) {
    int64_t n = tr->schedule->eval_batches, begin, end;
    tg_dist_block(n, tr->rank, &begin, &end);
    TgEvalBatches batches = {tr->eval.in, tr->eval.tg, tr->eval.ks, n, tr->batch, tr->seq};
    if (tr->dpo)
        evaluate_pairs(tr, begin, end);
    else
        tg_eval_batch_losses(&tr->run.model, &tr->engine.tape, &batches, begin, end, tr->eval_losses);
    TG_TRY(tg_dist_share_blocks(tr->eval_losses, n));
    if (tr->dpo) { /* the DPO loss: a mean over pairs, no bits per byte */
        for (int j = 0; j < DPO_STATS; j++) {
            TG_TRY(tg_dist_share_blocks(tr->eval_dpo + j * n, n));
            tr->val_dpo[j] = tg_mean_in_order(tr->eval_dpo + j * n, n);
        }
        *val_out = tg_mean_in_order(tr->eval_losses, n);
        tr->last_bpb = NAN;
    } else {
        /* conversations: per target (an assistant token), whatever the batches' shares of them */
        uint64_t targets = (uint64_t)(n * tr->batch * tr->seq);
        if (tr->weighting == TG_LOSS_MEAN_OF_TARGETS) {
            *val_out = tg_mean_over_targets(tr->eval_losses, tr->eval_counts, n);
            targets = tg_count_targets(tr->eval.tg, (size_t)(n * tr->batch * tr->seq));
        } else {
            *val_out = tg_mean_in_order(tr->eval_losses, n);
        }
        tr->last_bpb = tg_bits_per_byte(*val_out, targets, tr->eval_bytes);
    }
    /* a signal stops the task scoring between batches (one process: ranks must score alike) */
    tr->tasks_interrupted =
        !tg_task_suite_score(&tr->tasks, &tr->run.model, &tr->engine.tape, tr->ranks == 1 ? tr->stop : NULL);
    if (tr->tasks_interrupted)
        tg_message_emit(&tr->messages, TG_MESSAGE_NOTE,
                        "the task scoring of step %lld stopped at the signal: its task figures are not logged nor counted "
                        "for `keep_best` and `early_stop` (a resumed run does not score step %lld again)",
                        (long long)tr->run.state.step, (long long)tr->run.state.step);
    return TG_OK;
}

/* The latest evaluation's bits per byte in `format`, or "" for a DPO run's (whose loss is no text's). */
static const char *bpb_text(const Trainer *tr, const char *format, char *buf, size_t cap) {
    if (tr->dpo) return "";
    snprintf(buf, cap, format, tr->last_bpb);
    return buf;
}

/* The first lines of the log: the model, the data, where the run starts. */
static TgStatus trainer_announce(Trainer *tr) {
    const TgModelConfig *c = &tr->run.model.cfg;
    TgRun *run = &tr->run;
    const TgMessageSink *m = &tr->messages;
    tg_message_emit(m, TG_MESSAGE_INFO, "model: %lld parameters (dim %lld, %lld layers, %lld heads, %lld kv heads, %s hidden %lld, vocab %lld, seq %lld)",
           (long long)tg_model_param_count(&run->model), (long long)c->dim, (long long)c->n_layers, (long long)c->n_heads,
           (long long)c->n_kv_heads, tg_ffn_kind_name(c->ffn), (long long)c->hidden, (long long)c->vocab,
           (long long)c->seq_len);
    char ranks[32] = "";
    if (tr->ranks > 1) snprintf(ranks, sizeof ranks, " x %d ranks", tr->ranks);
    if (tr->dpo)
        tg_message_emit(m, TG_MESSAGE_INFO,
                        "data: %zu train preference pairs (%llu tokens, %llu trained), %zu val; batch %lld pairs (%lld "
                        "rows) x %lld x accum %lld%s = %lld positions/step; the loss is DPO's, beta %g, against the "
                        "weights the run started from; run folder %s",
                        run->train.n_conversations / 2, (unsigned long long)run->train.tokens.n,
                        (unsigned long long)run->train.trained, run->val.n_conversations / 2, (long long)tr->batch / 2,
                        (long long)tr->batch, (long long)tr->seq, (long long)tr->schedule->accum, ranks,
                        (long long)tr->tokens_per_step, run->dpo_beta,
                        run->folder.path[0] ? run->folder.path : run->dir);
    else if (tg_split_packed(&run->train))
        tg_message_emit(
            m, TG_MESSAGE_INFO,
            "data: %zu train conversations (%llu tokens, %llu trained), %zu val; rows of packed conversations, "
            "batch %lld x %lld x accum %lld%s = %lld positions/step; the loss is per trained token; run folder %s",
            run->train.n_conversations, (unsigned long long)run->train.tokens.n, (unsigned long long)run->train.trained,
            run->val.n_conversations, (long long)tr->batch, (long long)tr->seq, (long long)tr->schedule->accum, ranks,
            (long long)tr->tokens_per_step, run->folder.path[0] ? run->folder.path : run->dir);
    else
        tg_message_emit(m, TG_MESSAGE_INFO,
                        "data: %lld train tokens, %lld val tokens; batch %lld x %lld x accum %lld%s = %lld "
                        "tokens/step; run folder %s",
                        (long long)run->train.tokens.n, (long long)run->val.tokens.n, (long long)tr->batch,
                        (long long)tr->seq, (long long)tr->schedule->accum, ranks, (long long)tr->tokens_per_step,
                        run->folder.path[0] ? run->folder.path : run->dir);
    if (run->folder.among_sources[0])
        tg_message_emit(m, TG_MESSAGE_WARNING,
                        "the run folder %s is made among source files (%s); a run's files belong in a folder of their own, "
                        "such as checkpoints/NAME",
                        run->folder.path, run->folder.among_sources);
    tg_message_emit(m, TG_MESSAGE_INFO, "kernels: %s on %s; %d thread%s; precision %s", tg_isa_name(tg_isa_active()),
                    tg_cpu_name(), tr->schedule->threads, tr->schedule->threads == 1 ? "" : "s",
                    tg_precision_name(run->precision));
    if (run->precision == TG_PRECISION_BF16 && !tg_kernels()->bf16_native)
        tg_message_emit(m, TG_MESSAGE_NOTE, "bf16 on the %s path, which has no bf16 instructions: the products round their "
                                      "operands and run the fp32 kernel, slower than fp32",
                     tg_isa_name(tg_isa_active()));
    if (run->resumed) {
        tg_message_emit(m, TG_MESSAGE_INFO, "resuming at step %lld of %lld from %s", (long long)run->state.step,
                        (long long)tr->schedule->steps, run->last_checkpoint);
        int64_t before = run->state.step > 0 ? run->state.tokens_seen / run->state.step : tr->tokens_per_step;
        if (before != tr->tokens_per_step)
            tg_message_emit(m, TG_MESSAGE_NOTE, "%lld tokens per step from here on, %lld before: the data order continues, grouped "
                   "into other steps",
                   (long long)tr->tokens_per_step, (long long)before);
    } else if (run->initialized_from_file) {
        /* where the imported weights start, on the same fixed val batches every evaluation uses */
        TG_TRY(evaluate(tr, &tr->last_val));
        tr->val_before_training = true;
        run->state.best_val_loss = tr->last_val;
        TgRunMetrics before = tg_run_metrics_at(0);
        before.val_loss = tr->last_val, before.val_bpb = tr->last_bpb, before.elapsed_s = 0;
        line_figures(tr, &before, false, true);
        tg_run_log_metrics(run, &before);
        char bpb[64];
        tg_message_emit(m, TG_MESSAGE_INFO, "weights from %s: val loss %.4f%s before training",
                        tr->request->spec->init_from, tr->last_val,
                        bpb_text(tr, " (%.4f bits per byte)", bpb, sizeof bpb));
    } else {
        tg_message_emit(m, TG_MESSAGE_INFO, "initial loss should be near ln(vocab) = %.3f", log((double)c->vocab));
    }
    return TG_OK;
}

/* Why the run stops before its next step, as a number the ranks agree on by taking the largest:
 * a failure on any rank stops them all, then a signal that reached any rank, then --stop-after,
 * then --early-stop (whose record every rank holds alike), then the time budget (whose clock each
 * rank reads for itself). */
enum {
    GO_ON = 0,
    STOP_TIME_BUDGET = 1,
    STOP_EARLY = 2,
    STOP_AFTER = 3,
    STOP_SIGNAL = 4 /* + the signal's number */,
    STOP_FAILED = 1000
};

static int local_stop_code(const Trainer *tr, volatile sig_atomic_t *stop, TgStatus s) {
    if (s != TG_OK) return STOP_FAILED;
    if (stop && *stop) return STOP_SIGNAL + (int)*stop;
    if (tr->invocation->stop_after >= 0 && tr->run.state.step >= tr->invocation->stop_after) return STOP_AFTER;
    if (tg_best_record_exhausted(&tr->run.state.best, tr->schedule->early_stop)) return STOP_EARLY;
    if (tg_clock_seconds() - tr->t_start >= tr->budget_s) return STOP_TIME_BUDGET;
    return GO_ON;
}

static const char *stop_text(int code) {
    switch (code) {
    case STOP_TIME_BUDGET: return "time budget reached";
    case STOP_AFTER: return "stopped as asked (`stop_after`)";
    case STOP_SIGNAL + SIGTERM: return "stopped by SIGTERM";
    case STOP_SIGNAL + SIGUSR1: return "stopped by SIGUSR1";
    default: return "interrupted";
    }
}

/* Why --early-stop ended the run, in tr->stop_reason. */
static const char *early_stop_text(Trainer *tr) {
    const TgBestRecord *b = &tr->run.state.best;
    const char *name = tg_eval_metric_name(tr->watched);
    if (b->step < 0)
        snprintf(tr->stop_reason, sizeof tr->stop_reason,
                 "stopped early (`early_stop` %lld: %lld evaluations gave no %s)",
                 (long long)tr->schedule->early_stop, (long long)b->evals_since, name);
    else
        snprintf(tr->stop_reason, sizeof tr->stop_reason,
                 "stopped early (`early_stop` %lld: %s %.6g of step %lld not bettered in %lld evaluations)",
                 (long long)tr->schedule->early_stop, name, b->value, (long long)b->step, (long long)b->evals_since);
    return tr->stop_reason;
}

/* The probe (TgTrainHooks): the fixed val batches forward with nothing recorded, through the weights
 * the step starts from; each batch's FFN hidden activations go to the hook. */
static void run_probe(Trainer *tr) {
    const TgTrainHooks *h = &tr->hooks;
    TgTape *tape = &tr->engine.tape;
    bool old = tg_tape_set_grad_enabled(tape, false);
    for (int64_t b = 0; b < h->probe_batches; b++) {
        TgBatch batch = batch_rows_at(&tr->probe, b);
        tg_model_loss(&tr->run.model, tape, &batch, &(TgModelOutputs){.ffn_hidden = tr->ffn_hidden});
        h->after_probe_forward(h->ctx, tr->ffn_hidden);
        tg_tape_reset(tape);
    }
    tg_tape_set_grad_enabled(tape, old);
}

/* Before micro-batch k's forward: from the second on, its gradient goes to a zeroed buffer of its
 * own (micro_batch_end adds it to the sum). */
static void micro_batch_begin(Trainer *tr, int64_t k) {
    TgParamStore *ps = tg_model_trainable(&tr->run.model);
    if (k == 0) return;
    memset(tr->grad_scratch, 0, ps->total * sizeof(float));
    tg_params_point_grads(ps, tr->grad_scratch);
}

/* After micro-batch k's forward (of this rank's first + k): its loss recorded, the hook called,
 * its backward from the loss scaled by `scale` (not scaled when 1, no backward when 0), and its
 * gradient added to the sum of those before it, g = g0 + g1 + .... False, the tape reset, when
 * the loss is not finite. */
static bool micro_batch_end(Trainer *tr, int64_t first, int64_t k, TgTensor *loss, float scale, bool watched) {
    TgParamStore *ps = tg_model_trainable(&tr->run.model);
    TgTape *tape = &tr->engine.tape;
    const TgTrainHooks *h = &tr->hooks;
    tr->micro_losses[first + k] = loss->data[0];
    if (!isfinite(loss->data[0])) {
        tg_tape_reset(tape);
        tg_params_point_grads(ps, NULL);
        return false;
    }
    /* a DPO forward hands back no activations (train/dpo.h): the hook sees none */
    if (watched && h->after_forward && !tr->dpo) h->after_forward(h->ctx, tr->ffn_hidden);
    if (scale != 0.0f) tg_tape_backward(tape, scale != 1.0f ? tg_scale(tape, loss, scale) : loss);
    tg_tape_reset(tape);
    if (k > 0) {
        tg_params_point_grads(ps, NULL);
        tg_dist_add_floats(ps->grad, tr->grad_scratch, ps->total, tr->engine.pool);
    }
    return true;
}

/* The scale of micro-batch i's loss before its backward, so that the gradients add up to those of
 * the step's loss: 1 / micro_batches for a mean of batches; count_i / total for a mean of targets
 * (the sum of every target's loss over the total). 1 for a step of one micro-batch, whose own
 * mean is the step's loss. */
static float micro_batch_weight(const Trainer *tr, int64_t i, double total) {
    if (tr->weighting == TG_LOSS_MEAN_OF_TARGETS) {
        double count = tr->micro_counts[i];
        return count == total ? 1.0f : (float)(count / total);
    }
    return tr->micro_batches > 1 ? 1.0f / (float)tr->micro_batches : 1.0f;
}

/* This rank's micro-batches of the step into tr->step, and how many targets each holds. The source
 * draws the global batch, ranks x accum micro-batches, from its one stream; rank r takes
 * micro-batches r x accum ... (r + 1) x accum - 1 and skips the others' draws, so the data order
 * does not depend on the number of ranks. A micro-batch that could not be read counts NaN. */
static TgStatus draw_micro_batches(Trainer *tr, int64_t first) {
    const size_t window = (size_t)(tr->batch * tr->seq);
    int64_t accum = tr->schedule->accum, drawn = 0;
    TgStatus read = TG_OK;
    tg_batch_source_skip(&tr->batches, first);
    for (int64_t k = 0; k < accum && read == TG_OK; k++, drawn++) {
        BatchCells c = batch_rows_cells(&tr->step, k);
        read = tg_batch_source_next(&tr->batches, c.in, c.tg, c.ks);
        tr->micro_counts[first + k] = read == TG_OK ? (double)tg_count_targets(c.tg, window) : NAN;
        if (read == TG_OK && tr->dpo)
            gather_reference(tr->reference.train, tr->batches.which, tr->batch / 2, tr->step_ref + k * tr->batch);
    }
    for (int64_t k = drawn; k < accum; k++) tr->micro_counts[first + k] = NAN;
    tg_batch_source_skip(&tr->batches, tr->micro_batches - first - drawn);
    return read;
}

/* The data-parallel agreement before the backward: for a mean of targets, every rank learns how
 * many targets each micro-batch of the step holds, and *total is their sum (NaN when a rank could
 * not read one); 0 for a mean of batches, which needs none. */
static TgStatus agree_on_targets(Trainer *tr, double *total) {
    *total = 0.0;
    if (tr->weighting != TG_LOSS_MEAN_OF_TARGETS) return TG_OK;
    TG_TRY(tg_dist_share_blocks(tr->micro_counts, tr->micro_batches));
    for (int64_t i = 0; i < tr->micro_batches; i++) *total += tr->micro_counts[i];
    return TG_OK;
}

/* This rank's share of a step's gradient, into the trainable parameters' grad, and its
 * micro-batches' losses. Each micro-batch's gradient is computed alone (into zeroed buffers, its
 * loss scaled by its weight, micro_batch_weight) and added to the sum of those before it,
 * g = g0 + g1 + ...: so with accum 1 on N ranks, tg_dist_sum_floats makes the very additions one
 * process with accum N makes. Stops at a non-finite loss (the step fails once every rank knows,
 * agree_on_step). */
static TgStatus local_gradients(Trainer *tr, bool watched) {
    int64_t first = tr->rank * tr->schedule->accum;
    double total;
    tg_params_zero_grad(tg_model_trainable(&tr->run.model));
    TgStatus read = draw_micro_batches(tr, first);
    TG_TRY(agree_on_targets(tr, &total));
    if (read != TG_OK || !isfinite(total)) { /* the step fails once every rank has its losses */
        for (int64_t k = 0; k < tr->schedule->accum; k++) tr->micro_losses[first + k] = NAN;
        return read;
    }
    for (int64_t k = 0; k < tr->schedule->accum; k++) {
        micro_batch_begin(tr, k);
        TgBatch b = batch_rows_at(&tr->step, k);
        TgTensor *loss;
        if (tr->dpo) {
            TgDpoStats st;
            loss = tg_dpo_batch_loss(&tr->run.model, &tr->engine.tape, &b, tr->step_ref + k * tr->batch,
                                     tr->run.dpo_beta, &st);
            store_dpo_stats(tr->micro_dpo, tr->micro_batches, first + k, &st);
        } else {
            loss = tg_model_loss(&tr->run.model, &tr->engine.tape, &b,
                                 &(TgModelOutputs){.ffn_hidden = watched ? tr->ffn_hidden : NULL});
        }
        if (!micro_batch_end(tr, first, k, loss, micro_batch_weight(tr, first + k, total), watched)) break;
    }
    return TG_OK;
}

/* The data-parallel agreement after the backward: every rank gets every micro-batch's loss and
 * adds them in the micro-batches' order into *loss, the step's; the ranks' gradients are summed
 * (the same sum on every rank). Fails, on every rank alike, when one could not read its data
 * (`read`) or a loss is not finite. */
static TgStatus agree_on_step(Trainer *tr, TgStatus read, int64_t step, double lr, double *loss) {
    TG_TRY(tg_dist_share_blocks(tr->micro_losses, tr->micro_batches));
    if (read != TG_OK) return read;
    for (int64_t i = 0; i < tr->micro_batches; i++)
        if (!isfinite(tr->micro_losses[i]))
            return tg_fail(TG_ERR_NUMERIC, "step %lld: the loss is %s (lr %.3g); lower `lr` or raise `warmup`",
                           (long long)step, isnan(tr->micro_losses[i]) ? "NaN" : "Inf", lr);
    *loss = tr->weighting == TG_LOSS_MEAN_OF_TARGETS
                ? tg_mean_over_targets(tr->micro_losses, tr->micro_counts, tr->micro_batches)
                : tg_mean_in_order(tr->micro_losses, tr->micro_batches);
    for (int j = 0; j < DPO_STATS && tr->dpo; j++) {
        double *figure = tr->micro_dpo + j * tr->micro_batches;
        TG_TRY(tg_dist_share_blocks(figure, tr->micro_batches));
        tr->step_dpo[j] = tg_mean_in_order(figure, tr->micro_batches);
    }
    TgParamStore *trainable = tg_model_trainable(&tr->run.model);
    return tg_dist_sum_floats(trainable->grad, trainable->total, tr->grad_scratch, tr->engine.pool);
}

/* For the test of the replica check (support/fault.h; nothing outside the test variant): the last
 * rank's weights drift by 1e-3 after update `step`, as on a faulty machine (a change of one ulp
 * could be rounded away by the next update). */
static void inject_replica_fault(Trainer *tr, int64_t step) {
    if (tr->ranks > 1 && tr->rank == tr->ranks - 1 && fault_replica_drifts(step)) tg_model_trainable(&tr->run.model)->data[0] += 1e-3f;
}

/* One optimizer step: every rank's micro-batches, the gradients summed over the ranks, clip,
 * AdamW (the same update on every rank). */
static TgStatus trainer_step(Trainer *tr, double *loss_out, double *lr_out, double *grad_norm_out) {
    const TgTrainSchedule *sch = tr->schedule;
    TgModel *model = &tr->run.model;
    int64_t step = tr->run.state.step;
    double lr = tg_lr_at(&tr->sched, step);
    const TgTrainHooks *h = &tr->hooks;
    bool watched = h->watch_step && h->watch_step(h->ctx, step + 1);
    if (watched && tr->probe.n > 0) run_probe(tr);
    double loss = NAN;
    TG_TRY(agree_on_step(tr, local_gradients(tr, watched), step, lr, &loss));
    TgParamStore *trainable = tg_model_trainable(model);
    if (watched && h->before_update) h->before_update(h->ctx, model);
    double grad_norm = tg_clip_grad_norm_pool(trainable, sch->clip, tr->engine.pool);
    if (!isfinite(grad_norm)) {
        const char *bad = first_nonfinite_grad(trainable);
        return tg_fail(TG_ERR_NUMERIC,
                       "step %lld: the gradient of '%s' holds NaN or Inf (loss %.4f, lr %.3g); lower `lr` or `clip`",
                       (long long)step, bad ? bad : "?", loss, lr);
    }
    tg_adamw_step(trainable, &sch->adamw, step + 1, lr, tr->engine.pool);
    inject_replica_fault(tr, step + 1);
    if (watched && h->after_update) TG_TRY(h->after_update(h->ctx, model, step + 1, lr, loss));
    tr->run.state.step = step + 1;
    tr->run.state.tokens_seen += tr->tokens_per_step;
    tr->window_tokens += tr->tokens_per_step;
    *loss_out = loss, *lr_out = lr, *grad_norm_out = grad_norm;
    return TG_OK;
}

/* A failed save of a new best checkpoint: its weights exist only in the saver's snapshot, so it
 * is tried again now, before the next snapshot replaces them. Said either way; when the second try
 * fails too, `best` keeps naming the best checkpoint on disk. True when the failed save was a
 * best's (and said), *saved whether the second try saved it. */
static bool retry_best_save(Trainer *tr, bool *saved) {
    const TgTrainerState *failed = &tr->saver.src.state;
    *saved = false;
    if (!tr->saver.keep.best || !failed->best.kept || failed->best.step != failed->step) return false;
    char first[1024], metric[TG_TASK_NAME_CAP + 16], named[64];
    snprintf(first, sizeof first, "%s", tg_error_message());
    tg_best_metric_format(&tr->run.keep_best, metric, sizeof metric);
    if (tg_checkpoint_saver_retry(&tr->saver) == TG_OK) {
        tg_message_emit(&tr->messages, TG_MESSAGE_NOTE, "%s; the best checkpoint (%s %.6g at step %lld) was saved at a second try: %s",
                        first, metric, failed->best.value, (long long)failed->step, tr->saver.last_saved);
        *saved = true;
        return true;
    }
    tg_checkpoint_folder_best(tr->run.dir, named, sizeof named);
    tg_message_emit(&tr->messages, TG_MESSAGE_WARNING,
                    "the best checkpoint (%s %.6g at step %lld) could not be saved, twice: %s; %s/%s still names %s, "
                    "training goes on and each checkpoint tries again",
                    metric, failed->best.value, (long long)failed->step, tg_error_message(), tr->run.dir,
                    TG_CHECKPOINT_BEST_FILE, named);
    return true;
}

/* A background save that failed (a full disk, say) stops no run: the weights are still here, and
 * the next save tries again. The person hears of the first failure, with the newest checkpoint on
 * disk, and of the first save that works again. A new best is tried again at once (retry_best_save). */
static void report_failed_save(Trainer *tr) {
    bool was_saving = tr->saver.in_flight;
    if (tg_checkpoint_saver_wait(&tr->saver) == TG_OK) {
        if (was_saving && tr->failed_saves)
            tg_message_emit(&tr->messages, TG_MESSAGE_NOTE, "checkpoints are saved again (%lld saves failed before): %s",
                         (long long)tr->failed_saves, tr->saver.last_saved);
        if (was_saving) tr->failed_saves = 0;
        return;
    }
    bool saved;
    if (retry_best_save(tr, &saved)) {
        tr->failed_saves += !saved;
        return;
    }
    if (tr->failed_saves++) return;
    const char *newest = tr->saver.last_saved[0] ? tr->saver.last_saved : tr->run.last_checkpoint;
    tg_message_emit(&tr->messages, TG_MESSAGE_WARNING,
                 "%s; training goes on and each checkpoint tries again (the newest on disk: %s)", tg_error_message(),
                 newest[0] ? newest : "none");
}

/* The evaluation just made (val, tr->last_bpb) into the best record of the watched figure: true
 * when it is the best so far. */
static bool note_best(Trainer *tr, double val) {
    TgEvalFigures figures = {.val_loss = val, .val_bpb = tr->last_bpb, .task = NAN};
    const TgBestMetric *m = &tr->run.keep_best;
    bool task = m->kind == TG_EVAL_METRIC_TASK_ACC || m->kind == TG_EVAL_METRIC_TASK_ACC_NORM;
    if (task && tr->tasks_interrupted) return false; /* an evaluation that did not finish counts for nothing */
    if (task) {
        TgTaskScoring scoring = m->kind == TG_EVAL_METRIC_TASK_ACC_NORM ? TG_TASK_NORMALISED : TG_TASK_SUMMED;
        if (tg_task_suite_accuracy(&tr->tasks, m->task, scoring, &figures.task) != TG_OK)
            figures.task = NAN; /* its name was checked at the start */
    }
    double value = tg_best_metric_value(tr->watched, &figures);
    bool better = tg_best_record_update(&tr->run.state.best, tr->watched, value, tr->run.state.step);
    if (better) tr->run.state.best.source = tr->best_source;
    return better;
}

/* Overfitting: the val loss rising at OVERFIT_EVALS evaluations in a row while the mean train loss
 * between them falls. Said once, with the figures and what keeps the best model; the summary says
 * it again. A message only: nothing the run does depends on it. */
enum { OVERFIT_EVALS = 3 };
static void note_overfitting(Trainer *tr, double val) {
    double train = tr->train_n ? tr->train_sum / (double)tr->train_n : NAN;
    tr->train_sum = 0, tr->train_n = 0;
    bool rose = tr->prev_val > 0 && val > tr->prev_val && train < tr->prev_train;
    if (rose && tr->rising == 0)
        tr->rise_val = tr->prev_val, tr->rise_train = tr->prev_train,
        tr->rise_step = tr->run.state.step - tr->schedule->eval_every;
    tr->rising = rose ? tr->rising + 1 : 0;
    tr->prev_val = val, tr->prev_train = train;
    if (tr->rising < OVERFIT_EVALS || tr->overfit_from) return;
    tr->overfit_from = tr->rise_step > 0 ? tr->rise_step : 1;
    tg_message_emit(&tr->messages, TG_MESSAGE_WARNING,
                    "the val loss rose at %d evaluations in a row, from %.4f at step %lld to %.4f, while the train loss "
                    "fell from %.4f to %.4f: the model is overfitting its train split (too few tokens for its size, or "
                    "too many passes over them); `keep_best` val_loss keeps its best checkpoint, `early_stop` N ends "
                    "such a run",
                    OVERFIT_EVALS, tr->rise_val, (long long)tr->rise_step, val, tr->rise_train, train);
}

/* The evaluations a run of `steps` does after `step`: every eval_every, and at the last step. */
static int64_t evals_after(int64_t step, int64_t steps, int64_t eval_every) {
    if (eval_every <= 0 || step >= steps) return 0;
    return steps / eval_every - step / eval_every + (steps % eval_every != 0);
}

/* Seconds to the end: the steps left at the time per step measured since this invocation's first
 * step (the first allocates and warms its caches: timed alone it misleads tenfold), evaluations
 * apart, plus the evaluations left at the time they took (before the first: a forward pass of
 * --eval-batches batches, a third of a step each). NaN at the first step: nothing measured yet. */
static double trainer_eta(Trainer *tr, double now) {
    const TgTrainSchedule *sch = tr->schedule;
    int64_t step = tr->run.state.step;
    if (tr->eta_step0 == 0 || step <= tr->eta_step0) return NAN;
    double per_step = (now - tr->eta_t0 - tr->eta_excluded) / (double)(step - tr->eta_step0);
    double per_eval = tr->evals_timed ? tr->eval_s / (double)tr->evals_timed
                                      : per_step * (double)sch->eval_batches / (3.0 * (double)sch->accum);
    double eta = (double)(sch->steps - step) * per_step +
                 (double)evals_after(step, sch->steps, sch->eval_every) * per_eval;
    return eta > 0 ? eta : 0;
}

/* After a step: evaluation (the best record, the probe prompts), metrics, the progress line, the
 * folder's commit, checkpoints (every --ckpt-every, and at a new best the run keeps). What the
 * ranks do together comes first: a rank's own failure must not make it skip a collective. */
static TgStatus trainer_after_step(Trainer *tr, double loss, double lr, double grad_norm) {
    const TgTrainSchedule *sch = tr->schedule;
    TgTrainerState *st = &tr->run.state;
    bool eval_now =
        sch->eval_every > 0 && (st->step % sch->eval_every == 0 || st->step == sch->steps);
    double val = NAN;
    bool best_now = false; /* a checkpoint the best record names, kept by --keep-best */
    if (isfinite(loss)) tr->train_sum += loss, tr->train_n++;
    double t_eval = tg_clock_seconds();
    if (eval_now) {
        TG_TRY(evaluate(tr, &val));
        tr->last_val = val;
        tr->val_before_training = false;
        if (!(val >= st->best_val_loss)) st->best_val_loss = val;
        best_now = note_best(tr, val) && tr->run.keep_best.kind != TG_EVAL_METRIC_NONE;
        if (tr->writer) note_overfitting(tr, val);
    }
    bool ckpt_now = (best_now || (sch->ckpt_every > 0 && st->step % sch->ckpt_every == 0)) &&
                    st->step < sch->steps && st->step != tr->invocation->stop_after;
    if (ckpt_now) TG_TRY(check_replicas(tr, false));
    if (!tr->writer) return TG_OK;
    double elapsed = tr->elapsed_before + (tg_clock_seconds() - tr->t_start);
    double dt = tg_clock_seconds() - tr->window_t;
    double tok_s = dt > 0 ? (double)tr->window_tokens / dt : 0;
    TgRunMetrics line = {st->step, loss, val, eval_now ? tr->last_bpb : NAN, lr, grad_norm, tok_s, elapsed, NULL, 0};
    line_figures(tr, &line, true, eval_now);
    tg_run_log_metrics(&tr->run, &line);
    if (eval_now) TG_TRY(tg_probe_prompts_write(&tr->probe_prompts, &tr->run, &tr->engine.tape, st->step));
    double now = tg_clock_seconds();
    if (eval_now) {
        tr->eval_s += now - t_eval, tr->evals_timed++;
        if (tr->eta_step0) tr->eta_excluded += now - t_eval;
    }
    if (tr->eta_step0 == 0) tr->eta_step0 = st->step, tr->eta_t0 = now, tr->eta_excluded = 0;
    if (st->step % sch->log_every == 0 || eval_now || st->step == sch->steps || st->step == 1) {
        double eta = trainer_eta(tr, now);
        if (isfinite(tr->budget_s)) eta = fmin(eta, tr->budget_s - (now - tr->t_start));
        if (tr->reporter.progress) {
            /* the val loss of --init-from's weights is no measure of the steps since: shown from the
             * first evaluation of this run on */
            double shown_val = tr->val_before_training ? NAN : tr->last_val;
            TgTrainProgress p = {.step = st->step,
                                 .steps = sch->steps,
                                 .loss = loss,
                                 .val_loss = shown_val,
                                 .val_bpb = tr->val_before_training ? NAN : tr->last_bpb,
                                 .lr = lr,
                                 .grad_norm = grad_norm,
                                 .tokens_per_s = tok_s,
                                 .eta_s = eta};
            tr->reporter.progress(tr->reporter.ctx, &p);
        }
        tr->window_t = tg_clock_seconds();
        tr->window_tokens = 0;
    }
    if (!tr->committed) {
        TG_TRY(commit_run(tr));
        tr->window_t = tg_clock_seconds(); /* the saver's set-up is no training time */
    }
    if (ckpt_now) {
        st->elapsed_s = elapsed;
        st->loader = tg_batch_source_state(&tr->batches);
        report_failed_save(tr);
        TG_TRY(tg_checkpoint_saver_start(&tr->saver, &tr->run.model, tr->run.tok.fingerprint, st));
    }
    return TG_OK;
}

/* Steps until --steps, a stop or a failure. Before every step the ranks agree whether to take
 * it (local_stop_code), so they all stop after the same one. *reason is left alone when the run
 * did all its steps. */
static TgStatus trainer_loop(Trainer *tr, volatile sig_atomic_t *stop, const char **reason, bool *by_signal) {
    TgStatus s = TG_OK;
    for (;;) {
        int code = GO_ON;
        TgStatus agreed = tg_dist_max_int(local_stop_code(tr, stop, s), &code);
        if (s != TG_OK) return s;
        if (agreed != TG_OK) return agreed;
        if (code == STOP_FAILED) return tg_fail(TG_ERR_INTERRUPTED, "%s", ANOTHER_RANK_FAILED);
        *by_signal = code >= STOP_SIGNAL;
        if (*by_signal && stop) *stop = (sig_atomic_t)(code - STOP_SIGNAL);
        if (tr->run.state.step >= tr->schedule->steps) return TG_OK;
        if (code != GO_ON) {
            *reason = code == STOP_EARLY ? early_stop_text(tr) : stop_text(code);
            return TG_OK;
        }
        double loss = NAN, lr = NAN, grad_norm = NAN;
        s = trainer_step(tr, &loss, &lr, &grad_norm);
        if (s == TG_OK) s = trainer_after_step(tr, loss, lr, grad_norm);
    }
}

/* The best checkpoint a run keeps (--keep-best), for the summary. */
static void report_best(Trainer *tr) {
    const TgBestRecord *b = &tr->run.state.best;
    if (tr->run.keep_best.kind == TG_EVAL_METRIC_NONE) return;
    char metric[TG_TASK_NAME_CAP + 16];
    tg_best_metric_format(&tr->run.keep_best, metric, sizeof metric);
    if (b->step < 0) {
        tg_message_emit(&tr->messages, TG_MESSAGE_INFO, "best checkpoint: none yet (no evaluation of `eval_every`)");
        return;
    }
    char named[64], own[64];
    tg_checkpoint_folder_best(tr->run.dir, named, sizeof named);
    snprintf(own, sizeof own, "ckpt-%08lld.tgck", (long long)b->step);
    if (strcmp(named, own) != 0) {
        tg_message_emit(&tr->messages, TG_MESSAGE_WARNING,
                        "best checkpoint: %s %.6g at step %lld was never saved (its save failed); %s/%s names %s", metric,
                        b->value, (long long)b->step, tr->run.dir, TG_CHECKPOINT_BEST_FILE, named);
        return;
    }
    tg_message_emit(&tr->messages, TG_MESSAGE_INFO,
                    "best checkpoint: %s %.6g at step %lld, %s/ckpt-%08lld.tgck (named by %s/%s)", metric, b->value, (long long)b->step, tr->run.dir,
                    (long long)b->step, tr->run.dir, TG_CHECKPOINT_BEST_FILE);
}

/* Rank 0 at the end: the last checkpoint and the summary. */
static TgStatus trainer_save_last(Trainer *tr, const char *reason, bool evaluated_now) {
    TgRun *run = &tr->run;
    TgTrainerState *st = &run->state;
    TG_TRY(commit_run(tr)); /* stopped before a first step */
    report_failed_save(tr);
    TgStatus s = tg_checkpoint_saver_start(&tr->saver, &run->model, run->tok.fingerprint, st);
    if (s == TG_OK) s = tg_checkpoint_saver_wait(&tr->saver);
    if (s != TG_OK) {
        const char *newest = tr->saver.last_saved[0] ? tr->saver.last_saved : run->last_checkpoint;
        return tg_fail(s, "%s; the run's newest checkpoint is %s", tg_error_message(),
                       newest[0] ? newest : "none (it never saved one)");
    }
    snprintf(run->last_checkpoint, sizeof run->last_checkpoint, "%s", tr->saver.last_saved);
    if (evaluated_now) {
        TgRunMetrics last = tg_run_metrics_at(st->step);
        last.val_loss = tr->last_val, last.val_bpb = tr->last_bpb, last.elapsed_s = st->elapsed_s;
        line_figures(tr, &last, false, true);
        tg_run_log_metrics(run, &last);
    }
    /* ln vocab, the loss of a uniform guess, is a yardstick for a model trained from random weights only */
    char yardstick[64] = "", bpb[64];
    if (run->task == TG_TASK_PRETRAIN && !run->initialized_from_file)
        snprintf(yardstick, sizeof yardstick, " (ln vocab %.3f)", log((double)run->model.cfg.vocab));
    tg_message_emit(&tr->messages, TG_MESSAGE_INFO, "%s at step %lld: val loss %.4f%s%s, %.1f s, checkpoint %s", reason,
                    (long long)st->step, tr->last_val, yardstick, bpb_text(tr, ", %.4f bits per byte", bpb, sizeof bpb),
                    st->elapsed_s, run->last_checkpoint);
    if (tr->dpo)
        tg_message_emit(&tr->messages, TG_MESSAGE_INFO,
                        "val preference pairs: %.1f%% with the chosen reply ahead (margin %.4f; log p chosen %.3f, "
                        "rejected %.3f)",
                        100 * tr->val_dpo[1], tr->val_dpo[0], tr->val_dpo[2], tr->val_dpo[3]);
    tg_task_suite_report(&tr->tasks, &tr->messages);
    if (tr->overfit_from && tr->last_val > st->best_val_loss)
        tg_message_emit(&tr->messages, TG_MESSAGE_WARNING,
                        "overfitting: the val loss ended at %.4f, above its best of %.4f; it rose while the train loss "
                        "fell from step %lld on (see `keep_best` and `early_stop`)",
                        tr->last_val, st->best_val_loss, (long long)tr->overfit_from);
    report_best(tr);
    const TgCheckpointSaver *sv = &tr->saver;
    tg_message_emit(&tr->messages, TG_MESSAGE_INFO,
                 "checkpoints: %lld saved, %.2f s of writing in the background; training paused %.1f ms to snapshot them "
                 "and %.2f s waiting for a save still writing%s",
           (long long)sv->saves, sv->write_s, 1e3 * sv->pause_s, sv->blocked_s,
           sv->blocked_s > 1 ? " (raise `ckpt_every`)" : "");
    return TG_OK;
}

/* A run that stops before it took a step (and not at --stop-after) changes nothing: a resumed run
 * that was already done (or had stopped early) says so, and one stopped by a signal says nothing
 * was trained; a new run's folder is not kept. Nothing is evaluated, logged or saved. */
static void trainer_finish_untrained(Trainer *tr, const char *reason, bool stopped_by_signal) {
    TgRun *run = &tr->run;
    long long step = (long long)run->state.step;
    if (!run->resumed) {
        tr->discard = true;
        tg_message_emit(&tr->messages, TG_MESSAGE_INFO, "%s before the first step: nothing was trained, and no run folder is kept",
                        reason);
    } else if (stopped_by_signal) {
        tg_message_emit(&tr->messages, TG_MESSAGE_INFO,
                        "%s at step %lld before a step of its own: nothing was trained, nothing saved; the run's newest "
                        "checkpoint is %s",
                        reason, step, run->last_checkpoint[0] ? run->last_checkpoint : run->dir);
    } else {
        tg_message_emit(&tr->messages, TG_MESSAGE_INFO, "%s at step %lld, as the run already was: nothing to train, nothing changed",
                        reason, step);
    }
}

/* The final val loss, the last checkpoint (rank 0), the summary and the sample. */
static TgStatus trainer_finish(Trainer *tr, const char *reason, bool stopped_by_signal) {
    const TgTrainSchedule *sch = tr->schedule;
    TgRun *run = &tr->run;
    TgTrainerState *st = &run->state;
    /* --stop-after at the step it starts at is a checkpoint asked for (of --init-from's weights, say) */
    if (st->step == tr->first_step && (stopped_by_signal || (run->resumed && tr->invocation->stop_after != st->step))) {
        if (tr->writer) trainer_finish_untrained(tr, reason, stopped_by_signal);
        return TG_OK;
    }
    if (stopped_by_signal)
        tg_message_emit(&tr->messages, TG_MESSAGE_INFO, "%s at step %lld: saving a checkpoint (interrupt again to quit at once)",
                     reason, (long long)st->step);
    st->elapsed_s = tr->elapsed_before + (tg_clock_seconds() - tr->t_start);
    st->loader = tg_batch_source_state(&tr->batches);
    /* together first: the val loss, if the last step had none, and the replica check */
    bool evaluate_now = (isnan(tr->last_val) || tr->val_before_training) && st->step > 0;
    if (evaluate_now) TG_TRY(evaluate(tr, &tr->last_val));
    TG_TRY(check_replicas(tr, false));
    /* a failed last save fails every rank */
    TG_TRY(agree_on_status(tr->writer ? trainer_save_last(tr, reason, evaluate_now) : TG_OK));
    if (tr->writer && tr->run.task == TG_TASK_PRETRAIN && sch->sample_tokens > 0 &&
        st->step >= sch->steps && tr->reporter.sample) {
        const TgSampleOptions defaults = tg_sample_defaults();
        TgTrainSample sample = {.prompt = TG_RUN_SAMPLE_PROMPT,
                                .prompt_len = strlen(TG_RUN_SAMPLE_PROMPT),
                                .tokens = sch->sample_tokens,
                                .temperature = defaults.temperature,
                                .top_k = defaults.top_k};
        char *text = NULL;
        TG_TRY(tg_run_sample(run, &tr->engine.tape, sample.prompt, sample.tokens, &defaults, st->seed, &text,
                          &sample.text_len));
        sample.text = text;
        tr->reporter.sample(tr->reporter.ctx, &sample);
        free(text);
    }
    return TG_OK;
}

TgStatus tg_train_run(const TgTrainRequest *req, volatile sig_atomic_t *stop, const TgTrainHooks *hooks,
                      const TgTrainReporter *reporter) {
    Trainer tr;
    TgStatus s = trainer_start(&tr, req, hooks, reporter);
    tr.stop = stop;
    if (s == TG_OK) s = trainer_announce(&tr);
    /* the evaluation of --init-from's weights, before any step, has its probe lines too */
    if (s == TG_OK && tr.val_before_training)
        s = tg_probe_prompts_write(&tr.probe_prompts, &tr.run, &tr.engine.tape, 0);
    if (s == TG_OK) {
        tr.window_t = tg_clock_seconds();
        const char *reason = "done";
        bool by_signal = false;
        s = trainer_loop(&tr, stop, &reason, &by_signal);
        if (s == TG_OK) s = trainer_finish(&tr, reason, by_signal);
    }
    /* a background save still running finishes before the process ends; its failure fails the run */
    if (tg_checkpoint_saver_wait(&tr.saver) != TG_OK && s == TG_OK) s = TG_ERR_IO;
    /* a new run that failed or stopped before its first step leaves nothing behind */
    if ((s != TG_OK || tr.discard) && !tr.committed) {
        char message[2048];
        snprintf(message, sizeof message, "%s", tg_error_message());
        tg_run_discard(&tr.run);
        if (s != TG_OK) tg_fail(s, "%s", message);
    }
    trainer_close(&tr);
    return s;
}
