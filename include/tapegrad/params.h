/* Flat parameter store.
 *
 * Parameters, their gradients and the two AdamW moments each live in ONE allocation; every
 * parameter tensor is a named view at an offset into them. Zeroing gradients, clipping, the
 * optimizer update and checkpoint writes are single loops over `total` floats.
 *
 * Use: tg_params_add() for every tensor (shapes only), then tg_params_finalize() allocates the
 * buffers and points the views into them.
 */
#ifndef TG_PARAMS_H
#define TG_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tapegrad/tensor.h"

#pragma GCC visibility push(default)

/* How a parameter's values start (tg_params_init_values). */
typedef enum { TG_PARAM_ZEROS, TG_PARAM_ONES, TG_PARAM_NORMAL, TG_PARAM_UNIFORM } TgParamInitKind;
typedef struct {
    TgParamInitKind kind;
    float std;   /* TG_PARAM_NORMAL: N(0, std^2); TG_PARAM_UNIFORM: U(-std, std) */
} TgParamInit;
#define TG_PARAM_INIT_ZEROS ((TgParamInit){TG_PARAM_ZEROS, 0.0f})
#define TG_PARAM_INIT_ONES ((TgParamInit){TG_PARAM_ONES, 0.0f})
#define TG_PARAM_INIT_NORMAL(std) ((TgParamInit){TG_PARAM_NORMAL, (std)})
#define TG_PARAM_INIT_UNIFORM(bound) ((TgParamInit){TG_PARAM_UNIFORM, (bound)})

typedef struct TgParamName {
    const char *name;
    int index;
} TgParamName;

typedef struct TgParamStore {
    float *data, *grad, *m, *v; /* each `total` floats, 64-byte aligned */
    size_t total;
    TgTensor **tensors;           /* the views, in the order they were added */
    size_t *offsets;            /* offset of tensors[i] in the flat buffers */
    bool *decay;                /* weight decay applies to tensors[i] */
    TgParamInit *init;            /* how tensors[i] starts */
    TgParamName *by_name;         /* sorted by name (tg_params_finalize), for tg_params_index */
    int count, cap;
    bool finalized;
} TgParamStore;

/* An empty store. */
void tg_params_init(TgParamStore *ps);
/* Frees the buffers and the views: every TgTensor * tg_params_add returned dies with them. */
void tg_params_free(TgParamStore *ps);
/* Declares a parameter; returns its view, owned by the store (data valid after tg_params_finalize).
 * Names are unique (TG_NAME_CAP - 1 bytes at most; tg_params_finalize aborts on a repeat); `decay`:
 * AdamW's weight decay applies to it. At most TG_MAX_TENSORS parameters of at most
 * TG_MAX_ELEMENTS floats in all (tapegrad/limits.h; a model checks its config against them first).
 * Aborts after tg_params_finalize. */
TgTensor *tg_params_add(TgParamStore *ps, const char *name, int ndim, const int64_t *shape, bool decay, TgParamInit init);
/* Allocates data (zeroed), grad (zeroed), m and v (zeroed), and sorts the names. */
void tg_params_finalize(TgParamStore *ps);
/* Freezes a finalized store: its gradient and AdamW buffers are freed (grad, m, v NULL) and no
 * tensor requires a gradient any more, so no backward computes one for them (a LoRA base). */
void tg_params_freeze(TgParamStore *ps);
/* Sets every gradient to 0 (one loop over the flat buffer; nothing for a frozen store). */
void tg_params_zero_grad(TgParamStore *ps);
/* Points every parameter's gradient view into `grad` (total floats, laid out as ps->grad), or
 * back into ps->grad when grad is NULL. A backward then adds into that buffer: gradient
 * accumulation keeps a micro-batch's gradient apart this way before adding it to the others. */
void tg_params_point_grads(TgParamStore *ps, float *grad);
/* Sets every parameter as its TgParamInit says, in the order they were added, drawing the normal
 * ones one after another from a single generator seeded with `seed`. */
void tg_params_init_values(TgParamStore *ps, uint64_t seed);
/* The parameter named `name`; NULL when absent. O(log n) once finalized: a checkpoint of
 * thousands of tensors looks up each of its records. */
TgTensor *tg_params_find(const TgParamStore *ps, const char *name);
/* Its index in tensors[] (and offsets[], decay[]); -1 when absent. */
int tg_params_index(const TgParamStore *ps, const char *name);
/* L2 norm of all gradients (double accumulation; 0 for a frozen store). */
double tg_params_grad_norm(const TgParamStore *ps);

#pragma GCC visibility pop

#endif
