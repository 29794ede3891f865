/* Flat parameter store.
 *
 * Parameters, their gradients and the two AdamW moments each live in ONE allocation; every
 * parameter tensor is a named view at an offset into them. Zeroing gradients, clipping, the
 * optimizer update and checkpoint writes are single loops over `total` floats.
 *
 * Use: params_add() for every tensor (shapes only), then params_finalize() allocates the
 * buffers and points the views into them.
 */
#ifndef TAPEGRAD_PARAMS_H
#define TAPEGRAD_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/tensor.h"

#pragma GCC visibility push(default)

/* How a parameter's values start (params_init_values). */
typedef enum { PARAM_ZEROS, PARAM_ONES, PARAM_NORMAL } ParamInitKind;
typedef struct {
    ParamInitKind kind;
    float std;   /* PARAM_NORMAL: N(0, std^2) */
} ParamInit;
#define PARAM_INIT_ZEROS ((ParamInit){PARAM_ZEROS, 0.0f})
#define PARAM_INIT_ONES ((ParamInit){PARAM_ONES, 0.0f})
#define PARAM_INIT_NORMAL(std) ((ParamInit){PARAM_NORMAL, (std)})

typedef struct ParamName {
    const char *name;
    int index;
} ParamName;

typedef struct ParamStore {
    float *data, *grad, *m, *v; /* each `total` floats, 64-byte aligned */
    size_t total;
    Tensor **tensors;           /* the views, in the order they were added */
    size_t *offsets;            /* offset of tensors[i] in the flat buffers */
    bool *decay;                /* weight decay applies to tensors[i] */
    ParamInit *init;            /* how tensors[i] starts */
    ParamName *by_name;         /* sorted by name (params_finalize), for params_index */
    int count, cap;
    bool finalized;
} ParamStore;

/* An empty store. */
void params_init(ParamStore *ps);
/* Frees the buffers and the views: every Tensor * params_add returned dies with them. */
void params_free(ParamStore *ps);
/* Declares a parameter; returns its view, owned by the store (data valid after params_finalize).
 * Names are unique (TG_NAME_CAP - 1 bytes at most; params_finalize aborts on a repeat); `decay`:
 * AdamW's weight decay applies to it. At most TG_MAX_TENSORS parameters of at most
 * TG_MAX_ELEMENTS floats in all (lib/limits.h; a model checks its config against them first).
 * Aborts after params_finalize. */
Tensor *params_add(ParamStore *ps, const char *name, int ndim, const int64_t *shape, bool decay, ParamInit init);
/* Allocates data (zeroed), grad (zeroed), m and v (zeroed), and sorts the names. */
void params_finalize(ParamStore *ps);
/* Sets every gradient to 0 (one loop over the flat buffer). */
void params_zero_grad(ParamStore *ps);
/* Points every parameter's gradient view into `grad` (total floats, laid out as ps->grad), or
 * back into ps->grad when grad is NULL. A backward then adds into that buffer: gradient
 * accumulation keeps a micro-batch's gradient apart this way before adding it to the others. */
void params_point_grads(ParamStore *ps, float *grad);
/* Sets every parameter as its ParamInit says, in the order they were added, drawing the normal
 * ones one after another from a single generator seeded with `seed`. */
void params_init_values(ParamStore *ps, uint64_t seed);
/* The parameter named `name`; NULL when absent. O(log n) once finalized: a checkpoint of
 * thousands of tensors looks up each of its records. */
Tensor *params_find(const ParamStore *ps, const char *name);
/* Its index in tensors[] (and offsets[], decay[]); -1 when absent. */
int params_index(const ParamStore *ps, const char *name);
/* L2 norm of all gradients (double accumulation). */
double params_grad_norm(const ParamStore *ps);

#pragma GCC visibility pop

#endif
