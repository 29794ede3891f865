/* `tapegrad compare-ffn`: the dying-ReLU experiment. Plans the runs (seed x learning rate x FFN),
 * trains those not yet done with the ordinary trainer (gradient logging with a probe set), then
 * has compare_results.c read them back and compare_report.c / compare_summary.c write the report
 * and the summaries. */
#include "cli/study/compare_ffn.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "data/corpus.h"
#include "data/dataset.h"
#include "cli/study/compare_results.h"
#include "inspect/inspect.h"
#include "support/atomic_file.h"
#include "support/clock.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_folder.h"
#include "run/output_check.h"
#include "tapegrad/tokenizer.h"
#include "run/memory_plan.h"
#include "run/run.h"
#include "train/trainer.h"
#include "support/path.h"

/* The file that marks a run whose loss or gradient became NaN or Inf (its message inside). */
#define DIVERGED_FILE "diverged.txt"

/* ---------------------------------------------------------------- the options */

#define C CompareFfnOptions
static const TgOptSpec specs[] = {
    TG_FLAG_PRESET(C, preset, "model preset", 0, NULL),
    TG_FLAG_STEPS(C, steps, "optimizer steps of every run", 0, NULL),
    TG_FLAG_PRECISION(C, precision, "the linear layers' products in every run: fp32, or bf16 (operands rounded, fp32 sums)",
                   0, "fp32"),
    TG_OPT(C, lrs, "--lrs", TG_OPT_STRING, "comma-separated peak learning rates; each trains both FFNs", TG_OPT_ANY, NULL, 0,
        NULL),
    TG_OPT(C, seeds, "--seeds", TG_OPT_STRING,
        "a count N (seeds --seed .. --seed+N-1) or a comma-separated list; each trains every (lr, FFN) pair",
        TG_OPT_ANY, NULL, 0, NULL),
    TG_FLAG_SEED(C, seed, "the first seed when --seeds is a count", 0, NULL),
    TG_OPT(C, relu_hidden, "--relu-hidden", TG_OPT_INT64, "ReLU hidden size (e.g. 4*dim: the classic pairing)",
        TG_OPT_BETWEEN(0, TG_MODEL_MAX_HIDDEN), NULL, 0, "3/2 of the SwiGLU hidden: equal parameters"),
    TG_OPT(C, probe_batches, "--probe-batches", TG_OPT_INT64, "fixed val batches on which dead units are also counted",
        TG_FLAG_RANGE_COUNT, NULL, 0, NULL),
    TG_FLAG_DATA(C, data, "text or JSONL file or folder, prepared by every run", 0, TG_CORPUS_DEFAULT_PATH),
    TG_FLAG_DATASET(C, dataset, "a dataset folder (tapegrad prepare) every run reads, instead of --data", 0, NULL),
    TG_FLAG_OUT(C, out, "folder for the runs and the report", 0, "checkpoints/compare-ffn-<time>"),
    TG_FLAG_LOG_GRADS(C, log_grads, "statistics every N steps", 0, "steps/30, at least 1"),
    TG_FLAG_EVAL_EVERY(C, eval_every, "val loss every N steps", 0, "steps/10, at least 1"),
    TG_FLAG_EVAL_BATCHES(C, eval_batches, "fixed val batches per evaluation", 0, NULL),
    TG_FLAG_BATCH(C, batch, "sequences per step", 0, NULL),
    TG_FLAG_THREADS(C, threads, "threads", 0, NULL),
    TG_OPT(C, reuse, "--reuse", TG_OPT_BOOL,
        "keep runs already in --out (finished or diverged), continue stopped ones, train the rest", TG_OPT_ANY, NULL, 0,
        NULL),
    TG_OPT(C, force, "--force", TG_OPT_BOOL, "replace the report and summaries in --out (--reuse replaces them too)", TG_OPT_ANY,
        NULL, 0, NULL),
};
#undef C
static const TgOptTable table = {"compare-ffn",
                               "[--preset NAME] [--steps N] [--lrs LR,LR,...] [--seeds N or S,S,...] [--data PATH] "
                               "[--out DIR]",
                               specs, (int)(sizeof specs / sizeof specs[0]), 0};

const TgOptTable *compare_ffn_option_table(void) { return &table; }

void compare_ffn_defaults(CompareFfnOptions *o) {
    *o = (CompareFfnOptions){.preset = TG_TRAIN_DEFAULT_PRESET, .lrs = "1e-3,3e-3,1e-2,3e-2", .seeds = "5", .steps = 300,
                             .eval_batches = 8, .probe_batches = 4, .batch = 16, .seed = TG_TRAIN_DEFAULT_SEED,
                             .threads = TG_TRAIN_DEFAULT_THREADS};
}

/* ---------------------------------------------------------------- the plan */

/* A comma-separated list of values, each parsed and checked as `item`'s flag checks its value
 * (support/options.h), none twice, at most `max`, into out[] (elements of `size` bytes); TG_ERR_ARG
 * naming the bad item otherwise, with an example of a list. */
static TgStatus parse_list(const TgOptSpec *item, const char *text, const char *example, void *out, size_t size, int max,
                           int *n) {
    *n = 0;
    for (const char *p = text;;) {
        size_t len = strcspn(p, ",");
        char value[64];
        if (len >= sizeof value) len = sizeof value - 1; /* a longer item is no number: refused as it reads */
        memcpy(value, p, len);
        value[len] = '\0';
        char *slot = (char *)out + (size_t)*n * size;
        if (*n == max) return tg_fail(TG_ERR_ARG, "%s: at most %d values", item->flag, max);
        if (tg_opt_parse_value(item, slot, value) != TG_OK) {
            if (*n > 0 || p[len] == ',') /* say which item of a list */
                return tg_fail_context(TG_ERR_ARG, "item %d of %s %.200s", *n + 1, item->flag, text);
            /* not a number at all: perhaps not a list either */
            const char *m = tg_error_message();
            if (strncmp(m + strlen(item->flag), " expects", 8) == 0)
                return tg_fail(TG_ERR_ARG, "%s; give a comma-separated list like %s", m, example);
            return TG_ERR_ARG;
        }
        for (int i = 0; i < *n; i++)
            if (memcmp((char *)out + (size_t)i * size, slot, size) == 0)
                return tg_fail(TG_ERR_ARG, "%s: %s appears twice", item->flag, value);
        (*n)++;
        p += strcspn(p, ",");
        if (*p == '\0') return TG_OK;
        p++;
    }
}

/* A learning rate of --lrs is checked as --lr is, a seed of --seeds as --seed is. */
static const TgOptSpec lr_item = {"--lrs", TG_OPT_DOUBLE, 0, "a learning rate", TG_OPT_POSITIVE, NULL, 0, NULL, NULL, NULL, NULL};
static const TgOptSpec seed_item = {"--seeds", TG_OPT_INT64, 0, "a seed", TG_FLAG_RANGE_SEED, NULL, 0, NULL, NULL, NULL, NULL};

/* "--seeds 3": three seeds from --seed on; "--seeds 5,9": those two. */
static TgStatus parse_seeds(const CompareFfnOptions *o, CompareResults *r) {
    int64_t values[COMPARE_MAX_SEEDS];
    int n;
    TG_TRY(parse_list(&seed_item, o->seeds, "7,8,9", values, sizeof values[0], COMPARE_MAX_SEEDS, &n));
    if (strchr(o->seeds, ',') == NULL) {
        if (values[0] < 1 || values[0] > COMPARE_MAX_SEEDS)
            return tg_fail(TG_ERR_ARG, "--seeds %s: a count of seeds is 1 to %d (or give a list: --seeds 7,8)", o->seeds,
                           COMPARE_MAX_SEEDS);
        if (o->seed > INT64_MAX - COMPARE_MAX_SEEDS)
            return tg_fail(TG_ERR_ARG, "--seed %lld: too large to count %lld seeds from (at most %lld)",
                           (long long)o->seed, (long long)values[0], (long long)(INT64_MAX - COMPARE_MAX_SEEDS));
        r->n_seeds = (int)values[0];
        for (int s = 0; s < r->n_seeds; s++) r->seeds[s] = o->seed + s;
        return TG_OK;
    }
    r->n_seeds = n;
    for (int s = 0; s < n; s++) r->seeds[s] = values[s];
    return TG_OK;
}

/* What a run's folder holds: nothing yet, a run stopped before --steps, a finished run, or a
 * diverged one. Anything but nothing is refused without --reuse, and a run of another model
 * (another preset's, say) or in another precision always: its layers could not be set beside the
 * others'. */
static TgStatus plan_run_state(CompareRun *run, const TgModelConfig *preset, int64_t steps, TgPrecision precision,
                               bool reuse) {
    char path[TG_PATH_CAP], ckpt[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, run->dir, DIVERGED_FILE));
    run->state = RUN_NEW;
    if (access(path, F_OK) == 0) {
        run->state = RUN_DIVERGED;
    } else {
        TG_TRY(tg_path_join(path, sizeof path, run->dir, "latest"));
        if (access(path, F_OK) != 0) return TG_OK;
        TgCheckpointInfo info;
        TgCheckpointTensorInfo *tensors;
        int n_tensors;
        TG_TRY(tg_checkpoint_resolve(run->dir, ckpt, sizeof ckpt));
        TG_TRY(tg_checkpoint_inspect(ckpt, &info, &tensors, &n_tensors));
        free(tensors);
        const TgModelConfig *c = &info.cfg;
        if (c->n_layers != preset->n_layers || c->dim != preset->dim || c->hidden != run->hidden || c->ffn != run->kind)
            return tg_fail(TG_ERR_MISMATCH,
                           "%s holds a %s model of %lld layers, dim %lld, hidden %lld; this experiment plans %s, "
                           "%lld layers, dim %lld, hidden %lld there: pass another --out",
                           run->dir, tg_ffn_kind_name(c->ffn), (long long)c->n_layers, (long long)c->dim,
                           (long long)c->hidden, tg_ffn_kind_name(run->kind), (long long)preset->n_layers,
                           (long long)preset->dim, (long long)run->hidden);
        if (info.state.step > steps)
            return tg_fail(TG_ERR_ARG, "%s holds a run of %lld steps; this one asks --steps %lld: pass another --out",
                           run->dir, (long long)info.state.step, (long long)steps);
        run->state = info.state.step == steps ? RUN_FINISHED : RUN_PARTIAL;
        TgRunSpec id;
        TgOptStrings strings = {0};
        TgStatus s = tg_run_identity_read(run->dir, &id, &strings);
        if (s == TG_OK && id.precision != precision)
            s = tg_fail(TG_ERR_MISMATCH, "%s holds a run in %s; this experiment trains in %s: pass another --out",
                        run->dir, tg_precision_name(id.precision), tg_precision_name(precision));
        tg_opt_strings_free(&strings);
        TG_TRY(s);
    }
    if (!reuse)
        return tg_fail(TG_ERR_ARG, "%s already holds a run; add --reuse to keep it, or pass another --out", run->dir);
    return TG_OK;
}

typedef struct {
    const CompareFfnOptions *o;
    const TgTrainReporter *reporter; /* every run's, and the experiment's own messages */
    TgMessageSink messages;
    TgModelConfig preset_cfg;
    char root[TG_PATH_CAP];
    CompareResults r;
} Experiment;

/* The files of the experiment's report, then the run reports and summaries */
#define COMPARE_REPORT_FILE "report.html"
#define COMPARE_SERIES_FILE "compare.jsonl"
#define COMPARE_SUMMARY_JSON_FILE "summary.json"
#define COMPARE_SUMMARY_MD_FILE "summary.md"

/* Two files the experiment writes into `folder`, through the one output check. */
static TgStatus plan_report_files(TgOutputPlan *plan, const char *folder, const char *a, const char *b, bool force) {
    const char *names[] = {a, b};
    for (int i = 0; i < 2; i++) {
        char path[TG_PATH_CAP];
        TG_TRY(tg_path_join(path, sizeof path, folder, names[i]));
        TG_TRY(tg_output_check(plan, "compare-ffn's output", path, force));
    }
    return TG_OK;
}

static void run_options(const Experiment *e, const CompareRun *run, TgTrainOptions *t_out);

/* What the runs of either FFN will allocate (one run at a time), before any is trained: the
 * trainer's own check (run/memory_plan.h), with the vocabulary of the preset or of a char
 * tokenizer, which the corpus cannot exceed. */
static TgStatus plan_memory(const Experiment *e) {
    for (int k = 0; k < COMPARE_KINDS; k++) {
        const CompareRun *run = &e->r.runs[k];
        TgTrainOptions t;
        run_options(e, run, &t);
        t.invocation.resume = NULL;
        TgModelConfig c = e->preset_cfg;
        c.ffn = run->kind, c.hidden = run->hidden;
        if (!c.vocab) c.vocab = TG_TOKENIZER_BPE_FIRST_MERGE; /* a char tokenizer has at most 256 bytes and <eot> */
        TG_TRY(tg_model_config_validate(&c));
        TG_TRY(tg_train_memory_check(&t.schedule, t.invocation.resume, t.spec.model.seq_len > 0, &c, e->o->probe_batches, 0));
    }
    return TG_OK;
}

/* The learning rates, each a run folder of its own: two that print alike would share one. */
static TgStatus plan_lrs(CompareResults *r, const CompareFfnOptions *o) {
    TG_TRY(parse_list(&lr_item, o->lrs, "1e-3,3e-3,1e-2", r->lrs, sizeof r->lrs[0], COMPARE_MAX_LRS, &r->n_lrs));
    for (int i = 0; i < r->n_lrs; i++)
        for (int j = 0; j < i; j++) {
            char a[32], b[32]; /* as the run folders name them */
            snprintf(a, sizeof a, "%g", r->lrs[i]);
            snprintf(b, sizeof b, "%g", r->lrs[j]);
            if (!strcmp(a, b))
                return tg_fail(TG_ERR_ARG, "--lrs: %.17g and %.17g would share the run folders lr%s; make them differ "
                               "within 6 significant digits", r->lrs[j], r->lrs[i], a);
        }
    return TG_OK;
}

/* --data or --dataset, checked now: a missing corpus would otherwise surface inside the first
 * training run. */
static TgStatus check_data(const CompareFfnOptions *o) {
    if (o->data && access(o->data, R_OK) != 0) return tg_fail(TG_ERR_ARG, "--data %s: %s", o->data, strerror(errno));
    if (o->data && o->dataset) return tg_fail(TG_ERR_ARG, "give --data or --dataset, not both");
    if (o->dataset && !tg_dataset_is_dataset(o->dataset))
        return tg_fail(TG_ERR_ARG, "--dataset %s is not a dataset folder: make one with tapegrad prepare", o->dataset);
    return TG_OK;
}

/* The experiment's folder: --out, or one named by the time. */
static TgStatus plan_root(Experiment *e, const CompareFfnOptions *o) {
    if (o->out) {
        TG_TRY(tg_output_check_folder("--out", o->out));
        return tg_path_format(e->root, sizeof e->root, "%s", o->out);
    }
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    snprintf(e->root, sizeof e->root, "checkpoints/compare-ffn-%s", stamp);
    return TG_OK;
}

/* Every (seed, lr, FFN) run: its settings, its folder, what the folder holds already. */
static TgStatus plan_runs(Experiment *e, const CompareFfnOptions *o) {
    CompareResults *r = &e->r;
    /* equal parameters: 2 d h_relu = 3 d h_swiglu */
    int64_t swiglu_hidden = e->preset_cfg.hidden;
    int64_t relu_hidden = o->relu_hidden > 0 ? o->relu_hidden : 3 * swiglu_hidden / 2;
    r->n_runs = r->n_seeds * r->n_lrs * COMPARE_KINDS;
    r->runs = tg_calloc((size_t)r->n_runs, sizeof *r->runs);
    for (int s = 0; s < r->n_seeds; s++)
        for (int l = 0; l < r->n_lrs; l++)
            for (int k = 0; k < COMPARE_KINDS; k++) {
                CompareRun *run = compare_run_at(r, s, l, k);
                run->lr = r->lrs[l], run->kind = compare_kinds[k], run->seed = r->seeds[s];
                run->hidden = run->kind == TG_FFN_RELU ? relu_hidden : swiglu_hidden;
                char name[128];
                snprintf(name, sizeof name, "lr%g-%s-s%lld", run->lr, tg_ffn_kind_name(run->kind), (long long)run->seed);
                TG_TRY(tg_path_join(run->dir, sizeof run->dir, e->root, name));
                TG_TRY(plan_run_state(run, &e->preset_cfg, o->steps, o->precision, o->reuse));
                /* each run's own report: the experiment's to replace, but never through a link */
                TG_TRY(plan_report_files(NULL, run->dir, "report.html", "report.jsonl", true));
            }
    return TG_OK;
}

/* Every check before anything is written: the lists, the preset, the corpus, the run folders,
 * the outputs. */
static TgStatus experiment_plan(Experiment *e, const CompareFfnOptions *o) {
    CompareResults *r = &e->r;
    TG_TRY(plan_lrs(r, o));
    TG_TRY(parse_seeds(o, r));
    e->preset_cfg = tg_model_preset_config(o->preset);
    TG_TRY(check_data(o));
    r->preset = tg_model_preset_name(o->preset), r->data = o->dataset ? o->dataset : o->data ? o->data : TG_CORPUS_DEFAULT_PATH;
    r->steps = o->steps, r->batch = o->batch, r->probe_batches = o->probe_batches;
    r->log_grads = o->log_grads > 0 ? o->log_grads : o->steps / 30 > 0 ? o->steps / 30 : 1;
    r->eval_every = o->eval_every > 0 ? o->eval_every : o->steps / 10 > 0 ? o->steps / 10 : 1;
    TG_TRY(plan_root(e, o));
    TG_TRY(plan_runs(e, o));
    /* the experiment's report and summaries: an earlier experiment's are replaced only with
     * --force, or --reuse (the same experiment, reported again) */
    TgOutputPlan *plan = tg_malloc(sizeof *plan);
    tg_output_plan_init(plan);
    TgStatus s = plan_report_files(plan, e->root, COMPARE_REPORT_FILE, COMPARE_SERIES_FILE, o->force || o->reuse);
    if (s == TG_OK) s = plan_report_files(plan, e->root, COMPARE_SUMMARY_JSON_FILE, COMPARE_SUMMARY_MD_FILE, o->force || o->reuse);
    free(plan);
    if (s == TG_OK) s = plan_memory(e);
    return s;
}

/* ---------------------------------------------------------------- training */

/* A run whose loss or gradient became NaN or Inf is a result (this learning rate is too high for
 * it), not a failure of the experiment: its folder gets the marker and the message. */
static TgStatus mark_diverged(const Experiment *e, CompareRun *run, const char *message) {
    char path[TG_PATH_CAP], text[2200];
    TG_TRY(tg_path_join(path, sizeof path, run->dir, DIVERGED_FILE));
    int n = snprintf(text, sizeof text, "%s\n", message);
    TG_TRY(tg_make_folders(run->dir)); /* a run that diverged at its first step left no folder */
    TG_TRY(tg_atomic_write(path, text, (size_t)(n < (int)sizeof text ? n : (int)sizeof text - 1)));
    run->state = RUN_DIVERGED;
    tg_message_emit(&e->messages, TG_MESSAGE_INFO, "== %s diverged: %s", run->dir, message);
    return TG_OK;
}

/* The options one run trains with. */
static void run_options(const Experiment *e, const CompareRun *run, TgTrainOptions *t_out) {
    const CompareFfnOptions *o = e->o;
    TgTrainOptions t;
    tg_train_options_defaults(&t);
    t.spec.preset = o->preset;
    t.spec.data_path = o->data;
    t.spec.dataset = o->dataset;
    t.spec.seed = run->seed;
    t.schedule.steps = o->steps;
    t.schedule.lr = run->lr;
    t.schedule.batch = o->batch;
    t.schedule.eval_every = e->r.eval_every;
    t.schedule.eval_batches = o->eval_batches;
    t.schedule.log_grads = e->r.log_grads;
    t.schedule.sample_tokens = 0;
    t.schedule.keep = 1; /* the newest checkpoint only: what --reuse continues a killed run from */
    t.schedule.threads = o->threads;
    t.spec.precision = o->precision;
    /* a stopped run continues in its own folder */
    t.invocation.resume = run->state == RUN_PARTIAL ? run->dir : NULL;
    t.invocation.out_dir = t.invocation.resume ? NULL : run->dir;
    t.spec.ffn = run->kind;
    t.spec.model.hidden = run->hidden;
    *t_out = t;
}

static TgStatus train_one(const Experiment *e, CompareRun *run, volatile sig_atomic_t *stop) {
    const CompareFfnOptions *o = e->o;
    TgTrainOptions t;
    run_options(e, run, &t);
    TgGradLogger grads;
    TgTrainHooks hooks = tg_grad_logger_hooks(&grads, t.schedule.log_grads, o->probe_batches);
    TgTrainRequest req;
    TgStatus s = tg_train_options_request(&t, &req);
    if (s == TG_OK) s = tg_train_run(&req, stop, &hooks, e->reporter);
    tg_grad_logger_close(&grads);
    if (s == TG_ERR_NUMERIC) {
        char message[2048];
        snprintf(message, sizeof message, "%s", tg_error_message());
        return mark_diverged(e, run, message);
    }
    if (s != TG_OK) return tg_fail(s, "training %s failed: %s", run->dir, tg_error_message());
    run->state = RUN_FINISHED;
    return TG_OK;
}

/* Trains, seed by seed, every run not already finished or diverged; a stopped one continues. Each
 * run's header says how long the study has left: the runs still to train at the mean time of those
 * trained so far (from the second run on). */
static TgStatus experiment_train(Experiment *e, volatile sig_atomic_t *stop) {
    CompareResults *r = &e->r;
    int left = 0, timed = 0;
    for (int i = 0; i < r->n_runs; i++) left += r->runs[i].state != RUN_FINISHED && r->runs[i].state != RUN_DIVERGED;
    double spent = 0;
    for (int i = 0; i < r->n_runs; i++) {
        CompareRun *run = &r->runs[i];
        if (run->state == RUN_FINISHED || run->state == RUN_DIVERGED) {
            tg_message_emit(&e->messages, TG_MESSAGE_INFO, "== %s: already %s, reused (--reuse)", run->dir,
                         run->state == RUN_FINISHED ? "trained" : "diverged");
            r->reused++;
            continue;
        }
        char eta[96] = "";
        if (timed > 0) {
            double s = spent / timed * left;
            snprintf(eta, sizeof eta, " (the study: about %.0fh%02.0fm left, %d run%s at %.0f s each)", floor(s / 3600),
                     floor(fmod(s, 3600) / 60), left, left == 1 ? "" : "s", spent / timed);
        }
        tg_message_emit(&e->messages, TG_MESSAGE_INFO, "\n== run %d/%d: %s FFN (hidden %lld), lr %g, seed %lld%s -> %s%s", i + 1,
                     r->n_runs, tg_ffn_kind_name(run->kind), (long long)run->hidden, run->lr, (long long)run->seed,
                     run->state == RUN_PARTIAL ? ", continuing" : "", run->dir, eta);
        double t0 = tg_clock_seconds();
        TG_TRY(train_one(e, run, stop));
        spent += tg_clock_seconds() - t0, timed++, left--;
        r->trained++;
        if (stop && *stop) return tg_fail(TG_ERR_INTERRUPTED, "stopped during %s; run again with --reuse to go on", run->dir);
    }
    return TG_OK;
}

/* ---------------------------------------------------------------- the outputs */

/* The options of this experiment as flags, for summary.md: enough to run it again. */
static void format_command(const CompareFfnOptions *o, const CompareResults *r, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "tapegrad compare-ffn");
    for (int i = 0; i < table.count && n < cap; i++) {
        const char *flag = table.specs[i].flag;
        if (!strcmp(flag, "--reuse") || !strcmp(flag, "--force") || !strcmp(flag, "--threads") || !strcmp(flag, "--out"))
            continue;
        if ((!strcmp(flag, "--data") && o->dataset) || (!strcmp(flag, "--dataset") && !o->dataset)) continue;
        char value[1024];
        if (!strcmp(flag, "--log-grads")) snprintf(value, sizeof value, "%lld", (long long)r->log_grads);
        else if (!strcmp(flag, "--eval-every")) snprintf(value, sizeof value, "%lld", (long long)r->eval_every);
        else if (!strcmp(flag, "--relu-hidden")) snprintf(value, sizeof value, "%lld", (long long)r->runs[0].hidden);
        else if (!strcmp(flag, "--data")) snprintf(value, sizeof value, "%s", r->data);
        else tg_opt_format(&table, i, o, value, sizeof value);
        n += (size_t)snprintf(buf + n, cap - n, " %s %s", flag, value);
    }
}

/* Each run's own report, then the combined report, its series and the two summaries. */
static TgStatus experiment_report(Experiment *e) {
    CompareResults *r = &e->r;
    TG_TRY(compare_results_load(r, e->o->threads));
    for (int i = 0; i < r->n_runs; i++) {
        char html[TG_PATH_CAP], jsonl[TG_PATH_CAP];
        if (!r->runs[i].loaded) continue;
        TG_TRY(tg_path_join(html, sizeof html, r->runs[i].dir, "report.html"));
        TG_TRY(tg_path_join(jsonl, sizeof jsonl, r->runs[i].dir, "report.jsonl"));
        TG_TRY(tg_run_report_write(r->runs[i].dir, &r->runs[i].h, html, jsonl));
    }
    char html[TG_PATH_CAP], jsonl[TG_PATH_CAP], summary[TG_PATH_CAP], markdown[TG_PATH_CAP], command[4096];
    TG_TRY(tg_path_join(html, sizeof html, e->root, COMPARE_REPORT_FILE));
    TG_TRY(tg_path_join(jsonl, sizeof jsonl, e->root, COMPARE_SERIES_FILE));
    TG_TRY(tg_path_join(summary, sizeof summary, e->root, COMPARE_SUMMARY_JSON_FILE));
    TG_TRY(tg_path_join(markdown, sizeof markdown, e->root, COMPARE_SUMMARY_MD_FILE));
    format_command(e->o, r, command, sizeof command);
    TgReport *report = compare_report_build(r);
    TgStatus s = tg_report_write_html(report, html);
    if (s == TG_OK) s = tg_report_write_series_jsonl(report, jsonl);
    tg_report_free(report);
    if (s == TG_OK) s = compare_summary_json_write(r, summary);
    /* the tables of summary.md are also the experiment's last message */
    char *tables = NULL;
    size_t tables_len = 0;
    FILE *mem = open_memstream(&tables, &tables_len);
    if (!mem) s = tg_fail(TG_ERR_NOMEM, "no memory for the summary's tables");
    if (s == TG_OK) s = compare_summary_md_write(r, command, markdown, mem);
    if (mem) fclose(mem);
    if (s == TG_OK) {
        while (tables_len > 0 && tables[tables_len - 1] == '\n') tables[--tables_len] = '\0';
        tg_message_emit(&e->messages, TG_MESSAGE_INFO, "\n%s", tables);
        tg_message_emit(&e->messages, TG_MESSAGE_INFO,
                     "\nreport: %s\nseries: %s\nsummary: %s and %s\nruns: %s/lr*-{relu,swiglu}-s* (tapegrad inspect, "
                     "sample, eval and report work on each)",
                     html, jsonl, summary, markdown, e->root);
    }
    free(tables);
    return s;
}

static double load_average(void) {
    double load;
    return getloadavg(&load, 1) == 1 ? load : NAN;
}

TgStatus compare_ffn_run(const CompareFfnOptions *o, volatile sig_atomic_t *stop, const TgTrainReporter *reporter) {
    TG_TRY(tg_opt_check(&table, o, ~(TgOptSet)0));
    double start = tg_clock_seconds();
    Experiment *e = tg_calloc(1, sizeof *e);
    e->o = o;
    e->reporter = reporter;
    if (reporter) e->messages = (TgMessageSink){reporter->message, reporter->ctx};
    e->r.load_start = load_average();
    TgStatus s = experiment_plan(e, o);
    if (s == TG_OK) s = tg_make_folders(e->root);
    if (s == TG_OK) s = experiment_train(e, stop);
    e->r.wall_s = tg_clock_seconds() - start, e->r.load_end = load_average();
    if (s == TG_OK) s = experiment_report(e);
    compare_results_free(&e->r);
    free(e);
    return s;
}
