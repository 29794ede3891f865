/* The training loop: data -> forward -> backward -> clip -> AdamW, with evaluation, metrics,
 * checkpoints and a progress line. */
#include "trainer.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../data/corpus.h"
#include "../data/loader.h"
#include "../data/tokenizer.h"
#include "../data/tokfile.h"
#include "../lib/cpu.h"
#include "../lib/engine.h"
#include "../lib/error.h"
#include "checkpoint.h"
#include "inspect.h"
#include "checkpoint_folder.h"
#include "run.h"
#include "sample.h"

void train_options_defaults(TrainOptions *o) {
    memset(o, 0, sizeof *o);
    o->ffn = -1;
    o->seed = -1;
    o->steps = 1500;
    o->batch = 16;
    o->accum = 1;
    o->warmup = -1; /* 5% of the steps */
    o->lr = 3e-3;
    o->min_lr = -1; /* lr / 10 */
    o->clip = 1.0;
    o->adamw = adamw_defaults();
    o->eval_every = 100;
    o->eval_batches = 8;
    o->log_every = 10;
    o->ckpt_every = 200;
    o->keep = 3;
    o->sample_tokens = 300;
    o->threads = 2;
    o->stop_after = -1;
}

tg_status train_options_save(const char *dir, const TrainOptions *o) {
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/%s", dir, TRAIN_OPTIONS_FILE);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return tg_fail(TG_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    fprintf(f, "--steps %lld\n--batch %lld\n--accum %lld\n--warmup %lld\n", (long long)o->steps, (long long)o->batch,
            (long long)o->accum, (long long)o->warmup);
    fprintf(f, "--lr %.17g\n--min-lr %.17g\n--clip %.17g\n", o->lr, o->min_lr, o->clip);
    fprintf(f, "--weight-decay %.17g\n--beta1 %.17g\n--beta2 %.17g\n", o->adamw.weight_decay, o->adamw.beta1,
            o->adamw.beta2);
    fprintf(f, "--eval-every %lld\n--eval-batches %lld\n--log-every %lld\n--ckpt-every %lld\n--keep %d\n",
            (long long)o->eval_every, (long long)o->eval_batches, (long long)o->log_every, (long long)o->ckpt_every,
            o->keep);
    fprintf(f, "--sample-tokens %lld\n--threads %d\n", (long long)o->sample_tokens, o->threads);
    bool ok = fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return tg_fail(TG_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    }
    return TG_OK;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The first SIGINT/SIGTERM asks the loop to stop after the current step and save; the handler
 * is then reset (SA_RESETHAND), so a second one ends the process at once. That is safe too: a
 * checkpoint write never leaves `latest` naming a torn file. */
static volatile sig_atomic_t stop_requested = 0;
static void on_stop_signal(int sig) { stop_requested = sig; }

double evaluate_loss(Model *model, Tape *tape, const int32_t *inputs, const int32_t *targets, int64_t n_batches,
                     int64_t batch, int64_t seq) {
    bool old = tape_set_grad_enabled(tape, false);
    double total = 0.0;
    for (int64_t b = 0; b < n_batches; b++) {
        size_t off = (size_t)(b * batch * seq);
        Tensor *loss = model_loss(model, tape, inputs + off, targets + off, batch, seq, NULL);
        total += loss->data[0];
        tape_reset(tape);
    }
    tape_set_grad_enabled(tape, old);
    return n_batches ? total / (double)n_batches : NAN;
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

int train_run(TrainOptions *o) {
    int exit_code = 1;
    Run run;
    if (run_open_for_training(o, &run) != TG_OK) {
        fprintf(stderr, "tapegrad train: %s\n", tg_error_message());
        int code = run.usage_error ? 2 : 1;
        run_discard(&run);
        run_close(&run);
        return code;
    }
    const ModelConfig *c = &run.model.cfg;
    Model *model = &run.model;
    int64_t B = o->batch, T = c->seq_len;

    Engine engine;
    engine_open(&engine, o->threads, 64u << 20);
    Tape *tape = &engine.tape;
    Pool *pool = engine.pool;
    CheckpointSaver saver; /* set up by commit_run */
    memset(&saver, 0, sizeof saver);
    bool committed = false;

    Loader loader;
    int64_t n_eval = o->eval_batches;
    int32_t *eval_in = tg_malloc((size_t)(n_eval * B * T) * sizeof(int32_t));
    int32_t *eval_tg = tg_malloc((size_t)(n_eval * B * T) * sizeof(int32_t));
    int32_t *inputs = tg_malloc((size_t)(B * T) * sizeof(int32_t));
    int32_t *targets = tg_malloc((size_t)(B * T) * sizeof(int32_t));
    Tensor **ffn_hidden = tg_calloc((size_t)c->n_layers, sizeof *ffn_hidden);
    GradLogger grad_log = {0};
    struct sigaction sa = {0}, old_int, old_term;
    sigaction(SIGINT, NULL, &old_int);
    sigaction(SIGTERM, NULL, &old_term);
    if (loader_init(&loader, run.train_tokens, (size_t)run.n_train, B, T, run.state.seed) != TG_OK ||
        loader_fixed_batches(run.val_tokens, (size_t)run.n_val, B, T, n_eval, eval_in, eval_tg) != TG_OK) {
        fprintf(stderr, "tapegrad train: %s\n", tg_error_message());
        goto out;
    }
    /* every check passed: from here on the run writes into its folder */
    if (run_start(&run) != TG_OK) {
        fprintf(stderr, "tapegrad train: %s\n", tg_error_message());
        goto out;
    }
    if (train_options_save(run.dir, o) != TG_OK) fprintf(stderr, "tapegrad train: warning: %s\n", tg_error_message());
    if (run.resumed) loader_set_state(&loader, &run.state.loader);
    if (grad_logger_open(&grad_log, run.dir, model, o->log_grads) != TG_OK) {
        fprintf(stderr, "tapegrad train: %s\n", tg_error_message());
        goto out;
    }

    LrSchedule sched = {o->lr, o->min_lr, o->warmup, o->steps};
    TrainerState *st = &run.state;
    double budget_s = o->time_budget_min > 0 ? o->time_budget_min * 60.0 : INFINITY;
    bool tty = isatty(fileno(stderr));
    double t_start = now_s(), elapsed_before = st->elapsed_s;
    double last_val = NAN;
    int64_t tokens_per_step = B * T * o->accum;
    stop_requested = 0;
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);

    printf("model: %lld parameters (dim %lld, %lld layers, %lld heads, %lld kv heads, %s hidden %lld, vocab %lld, seq %lld)\n",
           (long long)model_param_count(model), (long long)c->dim, (long long)c->n_layers, (long long)c->n_heads,
           (long long)c->n_kv_heads, c->ffn == FFN_SWIGLU ? "SwiGLU" : "ReLU", (long long)c->hidden,
           (long long)c->vocab, (long long)c->seq_len);
    printf("data: %lld train tokens, %lld val tokens; batch %lld x %lld x accum %lld = %lld tokens/step; run folder %s\n",
           (long long)run.n_train, (long long)run.n_val, (long long)B, (long long)T, (long long)o->accum,
           (long long)tokens_per_step, run.folder.path[0] ? run.folder.path : run.dir);
    printf("kernels: %s on %s; %d threads\n", tg_isa_name(tg_isa_active()), tg_cpu_name(), o->threads);
    if (run.resumed) {
        printf("resuming at step %lld of %lld from %s\n", (long long)st->step, (long long)o->steps, run.last_checkpoint);
    } else if (run.initialized_from_file) {
        /* where the imported weights start, on the same fixed val batches every evaluation uses */
        last_val = evaluate_loss(model, tape, eval_in, eval_tg, n_eval, B, T);
        st->best_val_loss = last_val;
        run_log_metrics(&run, 0, NAN, last_val, NAN, NAN, NAN, 0);
        printf("weights from %s: val loss %.4f before training\n", o->init_from, last_val);
    } else {
        printf("initial loss should be near ln(vocab) = %.3f\n", log((double)c->vocab));
    }
    fflush(stdout);

    double window_t = now_s();
    int64_t window_tokens = 0;
    const char *stop_reason = "done";
    while (st->step < o->steps) {
        if (stop_requested) {
            stop_reason = stop_requested == SIGTERM ? "stopped by SIGTERM" : "interrupted";
            break;
        }
        if (o->stop_after >= 0 && st->step >= o->stop_after) {
            stop_reason = "stopped as asked (--stop-after)";
            break;
        }
        if (now_s() - t_start >= budget_s) {
            stop_reason = "time budget reached";
            break;
        }
        int64_t step = st->step;
        double lr = lr_at(&sched, step);
        bool log_grads_now = grad_logger_due(&grad_log, step + 1);
        params_zero_grad(&model->params);
        double loss_sum = 0.0;
        for (int64_t micro = 0; micro < o->accum; micro++) {
            loader_next(&loader, inputs, targets);
            Tensor *loss = log_grads_now ? model_loss_inspected(model, tape, inputs, targets, B, T, ffn_hidden)
                                         : model_loss(model, tape, inputs, targets, B, T, NULL);
            loss_sum += loss->data[0];
            if (!isfinite(loss->data[0])) {
                fprintf(stderr, "\ntapegrad train: step %lld: the loss is %s (lr %.3g); lower --lr or raise --warmup\n",
                        (long long)step, isnan(loss->data[0]) ? "NaN" : "Inf", lr);
                goto out;
            }
            if (log_grads_now) grad_logger_add_activations(&grad_log, ffn_hidden);
            /* each micro-batch contributes 1/accum of the mean gradient */
            tape_backward(tape, o->accum > 1 ? op_scale(tape, loss, 1.0f / (float)o->accum) : loss);
            tape_reset(tape);
        }
        double loss = loss_sum / (double)o->accum;
        if (log_grads_now) grad_logger_before_update(&grad_log, model);
        double grad_norm = clip_grad_norm_pool(&model->params, o->clip, pool);
        if (!isfinite(grad_norm)) {
            const char *bad = first_nonfinite_grad(&model->params);
            fprintf(stderr, "\ntapegrad train: step %lld: the gradient of '%s' holds NaN or Inf (loss %.4f, lr %.3g); lower --lr or --clip\n",
                    (long long)step, bad ? bad : "?", loss, lr);
            goto out;
        }
        adamw_step(&model->params, &o->adamw, step + 1, lr, pool);
        if (log_grads_now && grad_logger_write(&grad_log, model, step + 1, lr, loss) != TG_OK) {
            fprintf(stderr, "\ntapegrad train: %s\n", tg_error_message());
            goto out;
        }
        st->step = step + 1;
        st->tokens_seen += tokens_per_step;
        window_tokens += tokens_per_step;

        bool eval_now = o->eval_every > 0 && (st->step % o->eval_every == 0 || st->step == o->steps);
        double val = NAN;
        if (eval_now) {
            val = evaluate_loss(model, tape, eval_in, eval_tg, n_eval, B, T);
            last_val = val;
            if (!(val >= st->best_val_loss)) st->best_val_loss = val;
        }
        double elapsed = elapsed_before + (now_s() - t_start);
        double dt = now_s() - window_t;
        double tok_s = dt > 0 ? (double)window_tokens / dt : 0;
        run_log_metrics(&run, st->step, loss, val, lr, grad_norm, tok_s, elapsed);
        if (st->step % o->log_every == 0 || eval_now || st->step == o->steps || st->step == 1) {
            double eta = tok_s > 0 ? (double)(o->steps - st->step) * (double)tokens_per_step / tok_s : 0;
            if (isfinite(budget_s)) eta = fmin(eta, budget_s - (now_s() - t_start));
            print_progress(tty, o, st->step, loss, last_val, lr, grad_norm, tok_s, eta);
            window_t = now_s();
            window_tokens = 0;
        }
        if (!committed) {
            if (commit_run(&run, &saver, o->keep, &committed) != TG_OK) {
                fprintf(stderr, "\ntapegrad train: %s\n", tg_error_message());
                goto out;
            }
            window_t = now_s(); /* the saver's set-up is no training time */
        }
        if (o->ckpt_every > 0 && st->step % o->ckpt_every == 0 && st->step < o->steps && st->step != o->stop_after) {
            st->elapsed_s = elapsed;
            st->loader = loader_get_state(&loader);
            /* returns the previous background save's error, if it failed */
            if (checkpoint_saver_start(&saver, model, run.tok.fingerprint, st) != TG_OK) {
                fprintf(stderr, "\ntapegrad train: %s\n", tg_error_message());
                goto out;
            }
        }
    }
    if (tty) fputc('\n', stderr);
    if (stop_requested) printf("%s at step %lld: saving a checkpoint (interrupt again to quit at once)\n", stop_reason,
                               (long long)st->step);
    st->elapsed_s = elapsed_before + (now_s() - t_start);
    st->loader = loader_get_state(&loader);
    if (commit_run(&run, &saver, o->keep, &committed) != TG_OK || /* stopped before a first step */
        checkpoint_saver_start(&saver, model, run.tok.fingerprint, st) != TG_OK ||
        checkpoint_saver_wait(&saver) != TG_OK) {
        fprintf(stderr, "tapegrad train: %s\n", tg_error_message());
        goto out;
    }
    snprintf(run.last_checkpoint, sizeof run.last_checkpoint, "%s", saver.last_saved);
    if (isnan(last_val) && st->step > 0) {
        last_val = evaluate_loss(model, tape, eval_in, eval_tg, n_eval, B, T);
        run_log_metrics(&run, st->step, NAN, last_val, NAN, NAN, NAN, st->elapsed_s);
    }
    printf("%s at step %lld: val loss %.4f (ln vocab %.3f), %.1f s, checkpoint %s\n", stop_reason,
           (long long)st->step, last_val, log((double)c->vocab), st->elapsed_s, run.last_checkpoint);
    printf("checkpoints: %lld saved, %.2f s of writing in the background; training paused %.1f ms to snapshot them and "
           "%.2f s waiting for a save still writing%s\n",
           (long long)saver.saves, saver.write_s, 1e3 * saver.pause_s, saver.blocked_s,
           saver.blocked_s > 1 ? " (raise --ckpt-every)" : "");
    bool stopped_early = st->step < o->steps;
    if (o->sample_tokens > 0 && !stopped_early) {
        printf("\n--- sample (%lld tokens, temperature 0.8, top-k 40) ---\n", (long long)o->sample_tokens);
        fflush(stdout);
        run_print_sample(&run, tape, "\n", o->sample_tokens, 0.8, 40, run.state.seed);
        printf("\n---\n");
    }
    exit_code = 0;
out:
    /* a background save still running finishes before the process ends; its failure fails the run */
    if (checkpoint_saver_wait(&saver) != TG_OK) {
        fprintf(stderr, "tapegrad train: %s\n", tg_error_message());
        exit_code = 1;
    }
    checkpoint_saver_free(&saver);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    grad_logger_close(&grad_log);
    free(ffn_hidden);
    /* a new run that failed before its first step leaves nothing behind */
    if (exit_code != 0 && !committed) run_discard(&run);
    free(inputs);
    free(targets);
    free(eval_in);
    free(eval_tg);
    engine_close(&engine);
    run_close(&run);
    return exit_code;
}
