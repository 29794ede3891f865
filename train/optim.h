/* AdamW over the flat parameter store, global gradient-norm clipping, the LR schedule. */
#ifndef TAPEGRAD_OPTIM_H
#define TAPEGRAD_OPTIM_H

#include <stdint.h>

#include "lib/params.h"
#include "lib/pool.h"

#pragma GCC visibility push(default)

typedef struct AdamWConfig {
    double beta1, beta2, eps, weight_decay;
} AdamWConfig;

/* betas (0.9, 0.95), eps 1e-8, weight decay 0.1 */
AdamWConfig adamw_defaults(void);

/* One AdamW update with step number `step` (1-based, for the bias corrections):
 *   p -= lr * wd * p                       (decoupled decay, tensors with decay set only)
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * Elementwise, so a split over threads changes nothing: bitwise the same for any pool (NULL: the
 * caller's thread). Reads ps->grad and leaves it as it was (params_zero_grad clears it); aborts
 * on step < 1. */
void adamw_step(ParamStore *ps, const AdamWConfig *cfg, int64_t step, double lr, Pool *pool);

/* Global L2 norm of the gradients (double accumulation, fixed order). When max_norm > 0 and the
 * norm exceeds it, scales every gradient by max_norm / (norm + 1e-6). Returns the norm before. */
double clip_grad_norm(ParamStore *ps, double max_norm);
/* The same over the pool's threads: each sums its contiguous range of the flat gradient in
 * double, the partial sums are added in thread order, so the norm depends only on the thread
 * count (and equals clip_grad_norm's up to double rounding). */
double clip_grad_norm_pool(ParamStore *ps, double max_norm, Pool *pool);

/* Linear warmup from 0 over `warmup` steps, then cosine from lr to min_lr at step `total`. */
typedef struct LrSchedule {
    double lr, min_lr;
    int64_t warmup, total;
} LrSchedule;
/* The rate of step `step`, counted from 0 (so the update numbered step + 1 for adamw_step). */
double lr_at(const LrSchedule *s, int64_t step);

#pragma GCC visibility pop

#endif
