/* AdamW over the flat parameter store, global gradient-norm clipping, the LR schedule. */
#ifndef TG_OPTIM_H
#define TG_OPTIM_H

#include <stdint.h>

#include "tapegrad/params.h"
#include "tapegrad/pool.h"

#pragma GCC visibility push(default)

typedef struct TgAdamWConfig {
    double beta1, beta2, eps, weight_decay;
} TgAdamWConfig;

/* betas (0.9, 0.95), eps 1e-8, weight decay 0.1 */
TgAdamWConfig tg_adamw_defaults(void);

/* One AdamW update with step number `step` (1-based, for the bias corrections):
 *   p -= lr * wd * p                       (decoupled decay, tensors with decay set only)
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * Elementwise, so a split over threads changes nothing: bitwise the same for any pool (NULL: the
 * caller's thread). Reads ps->grad and leaves it as it was (tg_params_zero_grad clears it); aborts
 * on step < 1. */
void tg_adamw_step(TgParamStore *ps, const TgAdamWConfig *cfg, int64_t step, double lr, TgPool *pool);

/* Global L2 norm of the gradients (double accumulation, fixed order). When max_norm > 0 and the
 * norm exceeds it, scales every gradient by max_norm / (norm + 1e-6). Returns the norm before. */
double tg_clip_grad_norm(TgParamStore *ps, double max_norm);
/* The same over the pool's threads: each sums its contiguous range of the flat gradient in
 * double, the partial sums are added in thread order, so the norm depends only on the thread
 * count (and equals tg_clip_grad_norm's up to double rounding). */
double tg_clip_grad_norm_pool(TgParamStore *ps, double max_norm, TgPool *pool);

/* Linear warmup from 0 over `warmup` steps, then cosine from lr to min_lr at step `total`. */
typedef struct TgLrSchedule {
    double lr, min_lr;
    int64_t warmup, total;
} TgLrSchedule;
/* The rate of step `step`, counted from 0 (so the update numbered step + 1 for tg_adamw_step). */
double tg_lr_at(const TgLrSchedule *s, int64_t step);

#pragma GCC visibility pop

#endif
