#include "tapegrad/optim.h"

#include <math.h>

#include "tapegrad/error.h"
#include "lib/kernels.h"

TgAdamWConfig tg_adamw_defaults(void) {
    TgAdamWConfig c = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    return c;
}

/* the update of lib/kernels.h (TgAdamW), on the active kernel path */
static void adamw_range(void *ctx, int64_t begin, int64_t end, int thread) {
    tg_kernels()->adamw(ctx, begin, end);
}

void tg_adamw_step(TgParamStore *ps, const TgAdamWConfig *cfg, int64_t step, double lr, TgPool *pool) {
    TG_CHECK(step >= 1, "AdamW step numbers start at 1, got %lld", (long long)step);
    double bias1 = 1.0 - pow(cfg->beta1, (double)step);
    double bias2 = 1.0 - pow(cfg->beta2, (double)step);
    for (int i = 0; i < ps->count; i++) {
        size_t off = ps->offsets[i];
        TgAdamW job = {
            .p = ps->data + off, .g = ps->grad + off, .m = ps->m + off, .v = ps->v + off,
            .beta1 = (float)cfg->beta1, .beta2 = (float)cfg->beta2,
            .step_size = (float)(lr / bias1), .bias2_sqrt = (float)sqrt(bias2), .eps = (float)cfg->eps,
            .decay = ps->decay[i] ? (float)(lr * cfg->weight_decay) : 0.0f,
        };
        int64_t n = ps->tensors[i]->numel;
        /* small tensors (norm gains) are not worth waking the pool for */
        tg_pool_parallel_for(n >= 65536 ? pool : NULL, n, adamw_range, &job);
    }
}

double tg_clip_grad_norm(TgParamStore *ps, double max_norm) { return tg_clip_grad_norm_pool(ps, max_norm, NULL); }

enum { CLIP_MAX_THREADS = 64 };

typedef struct {
    float *g;
    float scale;
    double partial[CLIP_MAX_THREADS];
} ClipJob;

static void sum_squares_range(void *ctx, int64_t begin, int64_t end, int thread) {
    ClipJob *j = ctx;
    double sum = 0.0;
    for (int64_t i = begin; i < end; i++) sum += (double)j->g[i] * j->g[i];
    j->partial[thread] = sum;
}

static void scale_range(void *ctx, int64_t begin, int64_t end, int thread) {
    ClipJob *j = ctx;
    for (int64_t i = begin; i < end; i++) j->g[i] *= j->scale;
}

double tg_clip_grad_norm_pool(TgParamStore *ps, double max_norm, TgPool *pool) {
    if (tg_pool_threads(pool) > CLIP_MAX_THREADS) pool = NULL;
    ClipJob job = {.g = ps->grad};
    tg_pool_parallel_for(pool, (int64_t)ps->total, sum_squares_range, &job);
    double sum = 0.0;
    for (int t = 0; t < tg_pool_threads(pool); t++) sum += job.partial[t];
    double norm = sqrt(sum);
    if (max_norm > 0 && norm > max_norm) {
        job.scale = (float)(max_norm / (norm + 1e-6));
        tg_pool_parallel_for(pool, (int64_t)ps->total, scale_range, &job);
    }
    return norm;
}

double tg_lr_at(const TgLrSchedule *s, int64_t step) {
    if (step < s->warmup) return s->lr * (double)(step + 1) / (double)s->warmup;
    if (step >= s->total) return s->min_lr;
    double span = (double)(s->total - s->warmup);
    double progress = span > 0 ? (double)(step - s->warmup) / span : 1.0;
    return s->min_lr + 0.5 * (s->lr - s->min_lr) * (1.0 + cos(M_PI * progress));
}
