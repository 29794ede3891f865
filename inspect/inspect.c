#include "inspect/inspect.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad/engine.h"
#include "tapegrad/rng.h"
#include "support/atomic_file.h"
#include "support/json_write.h"
#include "support/path.h"

/* ---------------------------------------------------------------- FFN activation statistics */

void tg_ffn_stats_init(TgFfnActStats *s, int64_t hidden) {
    memset(s, 0, sizeof *s);
    s->hidden = hidden;
    s->alive = tg_calloc((size_t)hidden, sizeof *s->alive);
}

void tg_ffn_stats_free(TgFfnActStats *s) {
    free(s->alive);
    memset(s, 0, sizeof *s);
}

void tg_ffn_stats_reset(TgFfnActStats *s) {
    s->tokens = s->zeros = 0;
    s->sum = s->sum_sq = 0.0;
    memset(s->alive, 0, (size_t)s->hidden * sizeof *s->alive);
}

void tg_ffn_stats_add_rows(TgFfnActStats *s, const float *data, int64_t rows) {
    int64_t H = s->hidden, zeros = 0;
    double sum = 0.0, sum_sq = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        const float *row = data + r * H;
        for (int64_t j = 0; j < H; j++) {
            float v = row[j];
            /* exact zero on purpose: ReLU writes 0.0f, and a tiny SwiGLU value is still alive */
            if (v == 0.0f) zeros++;
            else s->alive[j] = true;
            sum += v;
            sum_sq += (double)v * v;
        }
    }
    s->tokens += rows;
    s->zeros += zeros;
    s->sum += sum;
    s->sum_sq += sum_sq;
}

void tg_ffn_stats_add(TgFfnActStats *s, const TgTensor *a) {
    char shape[64];
    TG_CHECK(a->ndim >= 1 && tg_tensor_dim(a, -1) == s->hidden, "ffn stats: activation '%s' %s has not %lld units",
             a->name, tg_tensor_shape_str(a, shape, sizeof shape), (long long)s->hidden);
    tg_ffn_stats_add_rows(s, a->data, tg_tensor_rows(a));
}

int64_t tg_ffn_stats_dead_units(const TgFfnActStats *s) {
    if (s->tokens == 0) return 0;
    int64_t dead = 0;
    for (int64_t j = 0; j < s->hidden; j++) dead += !s->alive[j];
    return dead;
}

double tg_ffn_stats_dead_fraction(const TgFfnActStats *s) {
    return s->tokens && s->hidden ? (double)tg_ffn_stats_dead_units(s) / (double)s->hidden : NAN;
}

static double element_count(const TgFfnActStats *s) { return (double)s->tokens * (double)s->hidden; }

double tg_ffn_stats_zero_fraction(const TgFfnActStats *s) {
    return s->tokens ? (double)s->zeros / element_count(s) : NAN;
}

double tg_ffn_stats_mean(const TgFfnActStats *s) { return s->tokens ? s->sum / element_count(s) : NAN; }

double tg_ffn_stats_std(const TgFfnActStats *s) {
    if (!s->tokens) return NAN;
    double mean = tg_ffn_stats_mean(s), var = s->sum_sq / element_count(s) - mean * mean;
    return sqrt(var > 0 ? var : 0);
}

/* ---------------------------------------------------------------- parameters */

TgParamStats tg_param_stats(const TgTensor *p) {
    double w2 = 0, g2 = 0, gmax = 0;
    for (int64_t i = 0; i < p->numel; i++) {
        double w = p->data[i], g = p->grad ? p->grad[i] : 0.0;
        w2 += w * w;
        g2 += g * g;
        if (fabs(g) > gmax) gmax = fabs(g);
    }
    return (TgParamStats){sqrt(w2), sqrt(g2), gmax};
}

double tg_zero_grad_row_fraction(const TgTensor *p) {
    if (p->ndim != 2 || p->shape[0] == 0 || !p->grad) return NAN;
    int64_t rows = p->shape[0], cols = p->shape[1], zero_rows = 0;
    for (int64_t r = 0; r < rows; r++) {
        const float *g = p->grad + r * cols;
        int64_t j = 0;
        while (j < cols && g[j] == 0.0f) j++;
        zero_rows += j == cols;
    }
    return (double)zero_rows / (double)rows;
}

double tg_ffn_zero_fraction_at_init(const TgModelConfig *cfg, uint64_t seed, int64_t rows, int threads) {
    TgModel m;
    tg_model_build(&m, cfg);
    tg_model_init_weights(&m, seed);
    TgEngine e;
    tg_engine_open(&e, threads, (size_t)rows * (size_t)(cfg->dim + 3 * cfg->hidden) * sizeof(float));
    tg_tape_set_grad_enabled(&e.tape, false);
    TgTensor *x = tg_tensor_new(&e.arena, "random_input", 2, (int64_t[]){rows, cfg->dim});
    TgRng rng;
    tg_rng_seed(&rng, seed ^ 0x9e3779b97f4a7c15u); /* inputs drawn apart from the weights' stream */
    tg_rng_fill_normal(&rng, x->data, (size_t)x->numel, 0.0f, 1.0f);
    TgFfnActStats stats;
    tg_ffn_stats_init(&stats, cfg->hidden);
    for (int64_t l = 0; l < cfg->n_layers; l++) {
        const TgLayerParams *p = &m.layers[l];
        TgTensor *hidden = NULL;
        if (cfg->ffn == TG_FFN_SWIGLU) tg_ffn_swiglu(&e.tape, x, p->w1, p->w3, p->w2, NULL, &hidden);
        else tg_ffn_relu(&e.tape, x, p->w1, p->w2, NULL, &hidden);
        tg_ffn_stats_add(&stats, hidden);
    }
    double zeros = tg_ffn_stats_zero_fraction(&stats);
    tg_ffn_stats_free(&stats);
    tg_engine_close(&e);
    tg_model_free(&m);
    return zeros;
}

int64_t tg_model_config_ffn_param_count(const TgModelConfig *c) {
    return c->n_layers * (c->ffn == TG_FFN_SWIGLU ? 3 : 2) * c->dim * c->hidden;
}


/* ---------------------------------------------------------------- a whole model */

void tg_model_inspection_init(TgModelInspection *mi, const TgModel *m) {
    memset(mi, 0, sizeof *mi);
    mi->n_params = m->params.count;
    mi->params = tg_calloc((size_t)mi->n_params, sizeof *mi->params);
    mi->n_layers = m->cfg.n_layers;
    mi->ffn = tg_calloc((size_t)mi->n_layers, sizeof *mi->ffn);
    mi->w1_zero_grad_rows = tg_calloc((size_t)mi->n_layers, sizeof *mi->w1_zero_grad_rows);
    for (int64_t l = 0; l < mi->n_layers; l++) {
        tg_ffn_stats_init(&mi->ffn[l], m->cfg.hidden);
        mi->w1_zero_grad_rows[l] = NAN;
    }
}

void tg_model_inspection_free(TgModelInspection *mi) {
    for (int64_t l = 0; l < mi->n_layers; l++) tg_ffn_stats_free(&mi->ffn[l]);
    free(mi->ffn);
    free(mi->params);
    free(mi->w1_zero_grad_rows);
    memset(mi, 0, sizeof *mi);
}

void tg_model_inspection_reset_activations(TgModelInspection *mi) {
    for (int64_t l = 0; l < mi->n_layers; l++) tg_ffn_stats_reset(&mi->ffn[l]);
}

void tg_model_inspection_add_activations(TgModelInspection *mi, TgTensor *const *ffn_hidden) {
    for (int64_t l = 0; l < mi->n_layers; l++) {
        TG_CHECK(ffn_hidden[l] != NULL, "layer %lld has no FFN activation: inspect after a forward",
                 (long long)l);
        tg_ffn_stats_add(&mi->ffn[l], ffn_hidden[l]);
    }
}

void tg_model_inspection_read_gradients(TgModelInspection *mi, const TgModel *m) {
    for (int i = 0; i < mi->n_params; i++) mi->params[i] = tg_param_stats(m->params.tensors[i]);
    for (int64_t l = 0; l < mi->n_layers; l++) mi->w1_zero_grad_rows[l] = tg_zero_grad_row_fraction(m->layers[l].w1);
}

double tg_model_inspect_batches(TgModel *m, TgTape *tape, const TgEvalBatches *batches, TgModelInspection *mi) {
    const int64_t k = batches->n, batch = batches->batch, seq = batches->seq;
    bool old = tg_tape_set_grad_enabled(tape, true);
    tg_params_zero_grad(&m->params);
    tg_model_inspection_reset_activations(mi);
    TgTensor **hidden = tg_calloc((size_t)m->cfg.n_layers, sizeof *hidden);
    double total = 0.0;
    for (int64_t b = 0; b < k; b++) {
        size_t off = (size_t)(b * batch * seq);
        TgTensor *loss = tg_model_loss(m, tape,
                                       &(TgBatch){.tokens = batches->tokens + off,
                                                  .targets = batches->targets + off,
                                                  .key_start = batches->key_start ? batches->key_start + off : NULL,
                                                  .batch = batch,
                                                  .seq = seq},
                                       &(TgModelOutputs){.ffn_hidden = hidden});
        total += loss->data[0];
        tg_model_inspection_add_activations(mi, hidden);
        /* each batch adds 1/k: the gradient of the mean loss over the k batches */
        tg_tape_backward(tape, k > 1 ? tg_scale(tape, loss, 1.0f / (float)k) : loss);
        tg_tape_reset(tape);
    }
    free(hidden);
    tg_tape_set_grad_enabled(tape, old);
    tg_model_inspection_read_gradients(mi, m);
    return k ? total / (double)k : NAN;
}

/* ---------------------------------------------------------------- JSON */

/* statistics with 6 significant digits, null when not finite (support/json_write.h) */
static void json_field(FILE *f, const char *key, double v) { tg_json_write_field(f, key, v, 6); }

void tg_model_inspection_write_json(FILE *f, const TgModelInspection *mi, const TgModel *m, const double *update_ratio,
                                 const TgFfnActStats *probe) {
    fputs("\"params\":[", f);
    for (int i = 0; i < mi->n_params; i++) {
        const TgTensor *t = m->params.tensors[i];
        const TgParamStats *p = &mi->params[i];
        /* parameter names are [a-z0-9_.] by construction (model.c): no escaping needed */
        fprintf(f, "%s{\"name\":\"%s\",\"shape\":[", i ? "," : "", t->name);
        for (int d = 0; d < t->ndim; d++) fprintf(f, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        fputc(']', f);
        json_field(f, "weight_norm", p->weight_norm);
        json_field(f, "grad_norm", p->grad_norm);
        json_field(f, "grad_max", p->grad_max_abs);
        json_field(f, "grad_to_weight", p->weight_norm > 0 ? p->grad_norm / p->weight_norm : NAN);
        if (update_ratio) json_field(f, "update_ratio", update_ratio[i]);
        fputc('}', f);
    }
    fputs("],\"ffn\":[", f);
    for (int64_t l = 0; l < mi->n_layers; l++) {
        const TgFfnActStats *s = &mi->ffn[l];
        fprintf(f, "%s{\"layer\":%lld,\"kind\":\"%s\",\"hidden\":%lld,\"tokens\":%lld,\"dead_units\":%lld",
                l ? "," : "", (long long)l, tg_ffn_kind_name(m->cfg.ffn), (long long)s->hidden, (long long)s->tokens,
                (long long)tg_ffn_stats_dead_units(s));
        json_field(f, "dead_frac", tg_ffn_stats_dead_fraction(s));
        json_field(f, "zero_frac", tg_ffn_stats_zero_fraction(s));
        json_field(f, "mean", tg_ffn_stats_mean(s));
        json_field(f, "std", tg_ffn_stats_std(s));
        json_field(f, "w1_zero_grad_rows", mi->w1_zero_grad_rows[l]);
        if (probe) {
            const TgFfnActStats *p = &probe[l];
            fprintf(f, ",\"probe_tokens\":%lld,\"probe_dead_units\":%lld", (long long)p->tokens,
                    (long long)tg_ffn_stats_dead_units(p));
            json_field(f, "probe_dead_frac", tg_ffn_stats_dead_fraction(p));
            json_field(f, "probe_zero_frac", tg_ffn_stats_zero_fraction(p));
        }
        fputc('}', f);
    }
    fputc(']', f);
}

/* ---------------------------------------------------------------- grads.jsonl */

TgStatus tg_grad_logger_open(TgGradLogger *g, const char *run_dir, const TgModel *m, int64_t every,
                           int64_t probe_batches) {
    memset(g, 0, sizeof *g);
    g->requested_every = every;
    g->probe_batches = probe_batches;
    if (every <= 0) return TG_OK;
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, run_dir, "grads.jsonl"));
    TG_TRY(tg_append_file_open(&g->out, path));
    g->every = every;
    tg_model_inspection_init(&g->mi, m);
    g->weights_before = tg_malloc(m->params.total * sizeof(float));
    g->update_ratio = tg_calloc((size_t)m->params.count, sizeof *g->update_ratio);
    if (probe_batches > 0) {
        g->probe = tg_calloc((size_t)m->cfg.n_layers, sizeof *g->probe);
        for (int64_t l = 0; l < m->cfg.n_layers; l++) tg_ffn_stats_init(&g->probe[l], m->cfg.hidden);
    }
    return TG_OK;
}

void tg_grad_logger_close(TgGradLogger *g) {
    tg_append_file_close(&g->out);
    if (g->probe)
        for (int64_t l = 0; l < g->mi.n_layers; l++) tg_ffn_stats_free(&g->probe[l]);
    free(g->probe);
    if (g->every > 0) tg_model_inspection_free(&g->mi);
    free(g->weights_before);
    free(g->update_ratio);
    memset(g, 0, sizeof *g);
}

void tg_grad_logger_add_activations(TgGradLogger *g, TgTensor *const *ffn_hidden) {
    if (g->every > 0) tg_model_inspection_add_activations(&g->mi, ffn_hidden);
}

void tg_grad_logger_add_probe_activations(TgGradLogger *g, TgTensor *const *ffn_hidden) {
    if (!g->probe) return;
    for (int64_t l = 0; l < g->mi.n_layers; l++) tg_ffn_stats_add(&g->probe[l], ffn_hidden[l]);
}

void tg_grad_logger_before_update(TgGradLogger *g, const TgModel *m) {
    if (g->every <= 0) return;
    /* before clipping: the raw gradient is what the model produced; the clip scale is the global
     * grad_norm of metrics.jsonl */
    tg_model_inspection_read_gradients(&g->mi, m);
    memcpy(g->weights_before, m->params.data, m->params.total * sizeof(float));
}

TgStatus tg_grad_logger_write(TgGradLogger *g, const TgModel *m, int64_t step, double lr, double loss) {
    if (g->every <= 0) return TG_OK;
    const TgParamStore *ps = &m->params;
    for (int i = 0; i < ps->count; i++) {
        const float *before = g->weights_before + ps->offsets[i], *after = ps->data + ps->offsets[i];
        double d2 = 0.0, w2 = 0.0;
        for (int64_t j = 0; j < ps->tensors[i]->numel; j++) {
            double d = (double)after[j] - before[j];
            d2 += d * d;
            w2 += (double)before[j] * before[j];
        }
        g->update_ratio[i] = w2 > 0 ? sqrt(d2 / w2) : NAN;
    }
    FILE *f = g->out.f;
    fprintf(f, "{\"step\":%lld", (long long)step);
    json_field(f, "lr", lr);
    json_field(f, "loss", loss);
    fputc(',', f);
    tg_model_inspection_write_json(f, &g->mi, m, g->update_ratio, g->probe);
    fputs("}\n", f);
    tg_model_inspection_reset_activations(&g->mi);
    if (g->probe)
        for (int64_t l = 0; l < g->mi.n_layers; l++) tg_ffn_stats_reset(&g->probe[l]);
    /* a full disk stops no run: the lines wait (support/append_file.h), and metrics.jsonl, on the
     * same disk, tells the person */
    tg_append_file_flush(&g->out);
    return TG_OK;
}

/* ---------------------------------------------------------------- as the trainer's hooks */

static TgStatus hook_start(void *ctx, const char *run_dir, const TgModel *m) {
    TgGradLogger *g = ctx;
    return tg_grad_logger_open(g, run_dir, m, g->requested_every, g->probe_batches);
}
static bool hook_watch(void *ctx, int64_t step) { return grad_logger_due(ctx, step); }
static void hook_after_probe_forward(void *ctx, TgTensor *const *ffn_hidden) {
    tg_grad_logger_add_probe_activations(ctx, ffn_hidden);
}
static void hook_after_forward(void *ctx, TgTensor *const *ffn_hidden) { tg_grad_logger_add_activations(ctx, ffn_hidden); }
static void hook_before_update(void *ctx, const TgModel *m) { tg_grad_logger_before_update(ctx, m); }
static TgStatus hook_after_update(void *ctx, const TgModel *m, int64_t step, double lr, double loss) {
    return tg_grad_logger_write(ctx, m, step, lr, loss);
}

TgTrainHooks tg_grad_logger_hooks(TgGradLogger *g, int64_t every, int64_t probe_batches) {
    memset(g, 0, sizeof *g);
    g->requested_every = every;
    g->probe_batches = probe_batches > 0 ? probe_batches : 0;
    return (TgTrainHooks){g,
                        hook_start,
                        hook_watch,
                        g->probe_batches,
                        hook_after_probe_forward,
                        hook_after_forward,
                        hook_before_update,
                        hook_after_update};
}
