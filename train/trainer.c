/* The training loop: data -> forward -> backward -> clip -> AdamW, with evaluation, metrics,
 * checkpoints and a progress line. */
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data/corpus.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "data/tokfile.h"
#include "lib/engine.h"
#include "lib/error.h"
#include "train/checkpoint.h"
#include "train/checkpoint_folder.h"
#include "train/run.h"
#include "train/sample.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Mean loss over fixed batches, nothing recorded. With a probe hook, each batch's FFN hidden
 * activations (into ffn_hidden, one per layer) go to hooks->after_probe_forward. */
static double forward_fixed_batches(Model *model, Tape *tape, const int32_t *inputs, const int32_t *targets,
                                    int64_t n_batches, int64_t batch, int64_t seq, Tensor **ffn_hidden,
                                    const TrainHooks *probe) {
    bool old = tape_set_grad_enabled(tape, false);
    double total = 0.0;
    for (int64_t b = 0; b < n_batches; b++) {
        size_t off = (size_t)(b * batch * seq);
        Tensor *loss = probe ? model_loss_inspected(model, tape, inputs + off, targets + off, batch, seq, ffn_hidden)
                             : model_loss(model, tape, inputs + off, targets + off, batch, seq, NULL);
        total += loss->data[0];
        if (probe) probe->after_probe_forward(probe->ctx, ffn_hidden);
        tape_reset(tape);
    }
    tape_set_grad_enabled(tape, old);
    return n_batches ? total / (double)n_batches : NAN;
}

double evaluate_loss(Model *model, Tape *tape, const int32_t *inputs, const int32_t *targets, int64_t n_batches,
                     int64_t batch, int64_t seq) {
    return forward_fixed_batches(model, tape, inputs, targets, n_batches, batch, seq, NULL, NULL);
}

/* Names the first parameter whose gradient is not finite (NULL if none). */
static const char *first_nonfinite_grad(const ParamStore *ps) {
    for (int i = 0; i < ps->count; i++) {
        const Tensor *t = ps->tensors[i];
        for (int64_t j = 0; j < t->numel; j++)
            if (!isfinite(t->grad[j])) return t->name;
    }
    return NULL;
}

static void format_duration(double s, char *buf, size_t cap) {
    if (s < 0 || !isfinite(s)) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
}

/* The progress line: a bar on a terminal, a log line otherwise. */
static void print_progress(bool tty, const TrainOptions *o, int64_t step, double loss, double last_val, double lr,
                           double grad_norm, double tok_s, double eta) {
    char eta_s[32], val_s[32];
    format_duration(eta, eta_s, sizeof eta_s);
    if (isnan(last_val)) snprintf(val_s, sizeof val_s, "-");
    else snprintf(val_s, sizeof val_s, "%.4f", last_val);
    int width = 30, filled = (int)((double)width * (double)step / (double)o->steps);
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
    bar[width] = '\0';
    if (tty)
        fprintf(stderr, "\r[%s] step %lld/%lld | loss %.4f | val %s | %.0f tok/s | ETA %s   ", bar, (long long)step,
                (long long)o->steps, loss, val_s, tok_s, eta_s);
    else
        printf("step %lld/%lld loss %.4f val %s lr %.2e grad_norm %.3f %.0f tok/s ETA %s\n", (long long)step,
               (long long)o->steps, loss, val_s, lr, grad_norm, tok_s, eta_s);
    fflush(stdout);
}

/* Once the first step is done, or the run stops before one, the run folder moves into place
 * (run.h) and checkpoints can go into it. Only the first call does anything. */
static tg_status commit_run(Run *run, CheckpointSaver *saver, int keep, bool *committed) {
    if (*committed) return TG_OK;
    TG_TRY(run_commit(run));
    checkpoint_saver_init(saver, run->dir, keep, &run->model);
    *committed = true;
    return TG_OK;
}

/* Everything one run holds while it trains. */
typedef struct Trainer {
    TrainOptions *o;
    Run run;
    Engine engine;
    CheckpointSaver saver;   /* set up by commit_run */
    bool committed;          /* the run folder is in place (commit_run) */
    Loader loader;
    int64_t batch, seq, tokens_per_step;
    int32_t *eval_in, *eval_tg;   /* (eval_batches, B, T): the same val batches at every evaluation */
    int32_t *probe_in, *probe_tg; /* (hooks.probe_batches, B, T), when the hooks ask for a probe */
    int32_t *inputs, *targets;    /* (B, T) */
    Tensor **ffn_hidden;          /* [layers], on watched steps */
    TrainHooks hooks;
    LrSchedule sched;
    bool tty;
    double t_start, elapsed_before, budget_s, last_val;
    double window_t;              /* tokens/s over the steps since the last progress line */
    int64_t window_tokens;
} Trainer;

static void trainer_close(Trainer *tr) {
    checkpoint_saver_free(&tr->saver);
    free(tr->ffn_hidden);
    free(tr->inputs);
    free(tr->targets);
    free(tr->eval_in);
    free(tr->eval_tg);
    free(tr->probe_in);
    free(tr->probe_tg);
    engine_close(&tr->engine);
    run_close(&tr->run);
}

/* Opens the run (every check first), the engine, the data and the logs. */
static tg_status trainer_open(Trainer *tr, TrainOptions *o, const TrainHooks *hooks) {
    memset(tr, 0, sizeof *tr);
    tr->o = o;
    if (hooks) tr->hooks = *hooks;
    TG_TRY(run_open_for_training(o, &tr->run));
    const ModelConfig *c = &tr->run.model.cfg;
    int64_t B = o->batch, T = c->seq_len;
    tr->batch = B, tr->seq = T, tr->tokens_per_step = B * T * o->accum;
    engine_open(&tr->engine, o->threads, 64u << 20);
    tr->eval_in = tg_malloc((size_t)(o->eval_batches * B * T) * sizeof(int32_t));
    tr->eval_tg = tg_malloc((size_t)(o->eval_batches * B * T) * sizeof(int32_t));
    tr->inputs = tg_malloc((size_t)(B * T) * sizeof(int32_t));
    tr->targets = tg_malloc((size_t)(B * T) * sizeof(int32_t));
    tr->ffn_hidden = tg_calloc((size_t)c->n_layers, sizeof *tr->ffn_hidden);
    TG_TRY(loader_init(&tr->loader, tr->run.train_tokens, (size_t)tr->run.n_train, B, T, tr->run.state.seed));
    TG_TRY(loader_fixed_batches(tr->run.val_tokens, (size_t)tr->run.n_val, B, T, o->eval_batches, tr->eval_in,
                                tr->eval_tg));
    if (tr->hooks.probe_batches > 0 && tr->hooks.after_probe_forward) {
        int64_t k = tr->hooks.probe_batches;
        tr->probe_in = tg_malloc((size_t)(k * B * T) * sizeof(int32_t));
        tr->probe_tg = tg_malloc((size_t)(k * B * T) * sizeof(int32_t));
        TG_TRY(loader_fixed_batches(tr->run.val_tokens, (size_t)tr->run.n_val, B, T, k, tr->probe_in, tr->probe_tg));
    }
    /* every check passed: from here on the run writes into its folder */
    TG_TRY(run_start(&tr->run));
    if (train_options_save(tr->run.dir, o) != TG_OK)
        fprintf(stderr, "tapegrad train: warning: %s\n", tg_error_message());
    if (tr->run.resumed) loader_set_state(&tr->loader, &tr->run.state.loader);
    if (tr->hooks.start) TG_TRY(tr->hooks.start(tr->hooks.ctx, tr->run.dir, &tr->run.model));
    tr->sched = (LrSchedule){o->lr, o->min_lr, o->warmup, o->steps};
    tr->budget_s = o->time_budget_min > 0 ? o->time_budget_min * 60.0 : INFINITY;
    tr->tty = isatty(fileno(stderr));
    tr->t_start = now_s();
    tr->elapsed_before = tr->run.state.elapsed_s;
    tr->last_val = NAN;
    return TG_OK;
}

static double evaluate(Trainer *tr) {
    return evaluate_loss(&tr->run.model, &tr->engine.tape, tr->eval_in, tr->eval_tg, tr->o->eval_batches, tr->batch,
                         tr->seq);
}

/* The first lines of the log: the model, the data, where the run starts. */
static void trainer_announce(Trainer *tr) {
    const ModelConfig *c = &tr->run.model.cfg;
    Run *run = &tr->run;
    printf("model: %lld parameters (dim %lld, %lld layers, %lld heads, %lld kv heads, %s hidden %lld, vocab %lld, seq %lld)\n",
           (long long)model_param_count(&run->model), (long long)c->dim, (long long)c->n_layers, (long long)c->n_heads,
           (long long)c->n_kv_heads, ffn_kind_name(c->ffn), (long long)c->hidden, (long long)c->vocab,
           (long long)c->seq_len);
    printf("data: %lld train tokens, %lld val tokens; batch %lld x %lld x accum %lld = %lld tokens/step; run folder %s\n",
           (long long)run->n_train, (long long)run->n_val, (long long)tr->batch, (long long)tr->seq,
           (long long)tr->o->accum, (long long)tr->tokens_per_step, run->folder.path[0] ? run->folder.path : run->dir);
    if (run->resumed) {
        printf("resuming at step %lld of %lld from %s\n", (long long)run->state.step, (long long)tr->o->steps,
               run->last_checkpoint);
    } else if (run->initialized_from_file) {
        /* where the imported weights start, on the same fixed val batches every evaluation uses */
        tr->last_val = evaluate(tr);
        run->state.best_val_loss = tr->last_val;
        run_log_metrics(run, 0, NAN, tr->last_val, NAN, NAN, NAN, 0);
        printf("weights from %s: val loss %.4f before training\n", tr->o->init_from, tr->last_val);
    } else {
        printf("initial loss should be near ln(vocab) = %.3f\n", log((double)c->vocab));
    }
    fflush(stdout);
}

/* Why the loop should end before the next step, or NULL to go on. */
static const char *stop_reason(const Trainer *tr, volatile sig_atomic_t *stop) {
    if (stop && *stop) return *stop == SIGTERM ? "stopped by SIGTERM" : "interrupted";
    if (tr->o->stop_after >= 0 && tr->run.state.step >= tr->o->stop_after) return "stopped as asked (--stop-after)";
    if (now_s() - tr->t_start >= tr->budget_s) return "time budget reached";
    return NULL;
}

/* One optimizer step: accum micro-batches of forward and backward, clip, AdamW. */
static tg_status trainer_step(Trainer *tr, double *loss_out, double *lr_out, double *grad_norm_out) {
    TrainOptions *o = tr->o;
    Model *model = &tr->run.model;
    Tape *tape = &tr->engine.tape;
    int64_t step = tr->run.state.step;
    double lr = lr_at(&tr->sched, step);
    const TrainHooks *h = &tr->hooks;
    bool watched = h->watch_step && h->watch_step(h->ctx, step + 1);
    if (watched && tr->probe_in)
        forward_fixed_batches(model, tape, tr->probe_in, tr->probe_tg, h->probe_batches, tr->batch, tr->seq,
                              tr->ffn_hidden, h);
    params_zero_grad(&model->params);
    double loss_sum = 0.0;
    for (int64_t micro = 0; micro < o->accum; micro++) {
        loader_next(&tr->loader, tr->inputs, tr->targets);
        Tensor *loss = watched
                           ? model_loss_inspected(model, tape, tr->inputs, tr->targets, tr->batch, tr->seq, tr->ffn_hidden)
                           : model_loss(model, tape, tr->inputs, tr->targets, tr->batch, tr->seq, NULL);
        loss_sum += loss->data[0];
        if (!isfinite(loss->data[0])) {
            tape_reset(tape);
            return tg_fail(TG_ERR_NUMERIC, "step %lld: the loss is %s (lr %.3g); lower --lr or raise --warmup",
                           (long long)step, isnan(loss->data[0]) ? "NaN" : "Inf", lr);
        }
        if (watched && h->after_forward) h->after_forward(h->ctx, tr->ffn_hidden);
        /* each micro-batch contributes 1/accum of the mean gradient */
        tape_backward(tape, o->accum > 1 ? op_scale(tape, loss, 1.0f / (float)o->accum) : loss);
        tape_reset(tape);
    }
    double loss = loss_sum / (double)o->accum;
    if (watched && h->before_update) h->before_update(h->ctx, model);
    double grad_norm = clip_grad_norm_pool(&model->params, o->clip, tr->engine.pool);
    if (!isfinite(grad_norm)) {
        const char *bad = first_nonfinite_grad(&model->params);
        return tg_fail(TG_ERR_NUMERIC,
                       "step %lld: the gradient of '%s' holds NaN or Inf (loss %.4f, lr %.3g); lower --lr or --clip",
                       (long long)step, bad ? bad : "?", loss, lr);
    }
    adamw_step(&model->params, &o->adamw, step + 1, lr, tr->engine.pool);
    if (watched && h->after_update) TG_TRY(h->after_update(h->ctx, model, step + 1, lr, loss));
    tr->run.state.step = step + 1;
    tr->run.state.tokens_seen += tr->tokens_per_step;
    tr->window_tokens += tr->tokens_per_step;
    *loss_out = loss, *lr_out = lr, *grad_norm_out = grad_norm;
    return TG_OK;
}

/* After a step: evaluation, metrics, the progress line, the folder's commit, checkpoints. */
static tg_status trainer_after_step(Trainer *tr, double loss, double lr, double grad_norm) {
    TrainOptions *o = tr->o;
    TrainerState *st = &tr->run.state;
    bool eval_now = o->eval_every > 0 && (st->step % o->eval_every == 0 || st->step == o->steps);
    double val = NAN;
    if (eval_now) {
        val = tr->last_val = evaluate(tr);
        if (!(val >= st->best_val_loss)) st->best_val_loss = val;
    }
    double elapsed = tr->elapsed_before + (now_s() - tr->t_start);
    double dt = now_s() - tr->window_t;
    double tok_s = dt > 0 ? (double)tr->window_tokens / dt : 0;
    run_log_metrics(&tr->run, st->step, loss, val, lr, grad_norm, tok_s, elapsed);
    if (st->step % o->log_every == 0 || eval_now || st->step == o->steps || st->step == 1) {
        double eta = tok_s > 0 ? (double)(o->steps - st->step) * (double)tr->tokens_per_step / tok_s : 0;
        if (isfinite(tr->budget_s)) eta = fmin(eta, tr->budget_s - (now_s() - tr->t_start));
        print_progress(tr->tty, o, st->step, loss, tr->last_val, lr, grad_norm, tok_s, eta);
        tr->window_t = now_s();
        tr->window_tokens = 0;
    }
    if (!tr->committed) {
        TG_TRY(commit_run(&tr->run, &tr->saver, o->keep, &tr->committed));
        tr->window_t = now_s(); /* the saver's set-up is no training time */
    }
    if (o->ckpt_every > 0 && st->step % o->ckpt_every == 0 && st->step < o->steps && st->step != o->stop_after) {
        st->elapsed_s = elapsed;
        st->loader = loader_get_state(&tr->loader);
        /* returns the previous background save's error, if it failed */
        TG_TRY(checkpoint_saver_start(&tr->saver, &tr->run.model, tr->run.tok.fingerprint, st));
    }
    return TG_OK;
}

/* The last checkpoint, the final val loss, the summary and the sample. */
static tg_status trainer_finish(Trainer *tr, const char *reason, bool stopped_by_signal) {
    TrainOptions *o = tr->o;
    Run *run = &tr->run;
    TrainerState *st = &run->state;
    if (stopped_by_signal)
        printf("%s at step %lld: saving a checkpoint (interrupt again to quit at once)\n", reason, (long long)st->step);
    st->elapsed_s = tr->elapsed_before + (now_s() - tr->t_start);
    st->loader = loader_get_state(&tr->loader);
    TG_TRY(commit_run(run, &tr->saver, o->keep, &tr->committed)); /* stopped before a first step */
    TG_TRY(checkpoint_saver_start(&tr->saver, &run->model, run->tok.fingerprint, st));
    TG_TRY(checkpoint_saver_wait(&tr->saver));
    snprintf(run->last_checkpoint, sizeof run->last_checkpoint, "%s", tr->saver.last_saved);
    if (isnan(tr->last_val) && st->step > 0) {
        tr->last_val = evaluate(tr);
        run_log_metrics(run, st->step, NAN, tr->last_val, NAN, NAN, NAN, st->elapsed_s);
    }
    printf("%s at step %lld: val loss %.4f (ln vocab %.3f), %.1f s, checkpoint %s\n", reason, (long long)st->step,
           tr->last_val, log((double)run->model.cfg.vocab), st->elapsed_s, run->last_checkpoint);
    const CheckpointSaver *sv = &tr->saver;
    printf("checkpoints: %lld saved, %.2f s of writing in the background; training paused %.1f ms to snapshot them and "
           "%.2f s waiting for a save still writing%s\n",
           (long long)sv->saves, sv->write_s, 1e3 * sv->pause_s, sv->blocked_s,
           sv->blocked_s > 1 ? " (raise --ckpt-every)" : "");
    if (o->sample_tokens > 0 && st->step >= o->steps) {
        printf("\n--- sample (%lld tokens, temperature 0.8, top-k 40) ---\n", (long long)o->sample_tokens);
        fflush(stdout);
        run_print_sample(run, &tr->engine.tape, "\n", o->sample_tokens, 0.8, 40, st->seed);
        printf("\n---\n");
    }
    return TG_OK;
}

tg_status train_run(TrainOptions *o, volatile sig_atomic_t *stop, const TrainHooks *hooks) {
    Trainer tr;
    tg_status s = trainer_open(&tr, o, hooks);
    if (s == TG_OK) {
        trainer_announce(&tr);
        tr.window_t = now_s();
        const char *reason = NULL;
        while (s == TG_OK && tr.run.state.step < o->steps && !(reason = stop_reason(&tr, stop))) {
            double loss = NAN, lr = NAN, grad_norm = NAN;
            s = trainer_step(&tr, &loss, &lr, &grad_norm);
            if (s == TG_OK) s = trainer_after_step(&tr, loss, lr, grad_norm);
        }
        if (tr.tty) fputc('\n', stderr);
        if (s == TG_OK) s = trainer_finish(&tr, reason ? reason : "done", stop && *stop);
    }
    /* a background save still running finishes before the process ends; its failure fails the run */
    if (checkpoint_saver_wait(&tr.saver) != TG_OK && s == TG_OK) s = TG_ERR_IO;
    /* a new run that failed before its first step leaves nothing behind */
    if (s != TG_OK && !tr.committed) {
        char message[2048];
        snprintf(message, sizeof message, "%s", tg_error_message());
        run_discard(&tr.run);
        tg_fail(s, "%s", message);
    }
    trainer_close(&tr);
    return s;
}
