/* TgTensor: float32, contiguous, row-major, up to 4 dims.
 *
 * A tensor does not own its memory. Activations point into the step arena; parameters point
 * into the flat buffers of a TgParamStore. `grad` is NULL until something writes a gradient.
 */
#ifndef TG_TENSOR_H
#define TG_TENSOR_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#include "tapegrad/arena.h"
#include "tapegrad/limits.h"

#pragma GCC visibility push(default)

typedef struct TgTensor {
    float *data;
    float *grad;
    int64_t shape[TG_MAX_DIMS];
    int ndim;             /* 0 means a scalar (numel 1) */
    int64_t numel;
    bool requires_grad;
    bool retain_grad;     /* keep `grad` after the backward of the op that produced this tensor */
    char name[TG_NAME_CAP];
} TgTensor;

/* Fills the shape fields of `t` (no allocation). Aborts on a negative dim, ndim > 4 or more than
 * TG_MAX_ELEMENTS elements: shapes from files are checked against tapegrad/limits.h before they get here. */
void tg_tensor_set_shape(TgTensor *t, int ndim, const int64_t *shape);
/* A tensor whose header and data come from `arena` (data uninitialised), living until the arena
 * is reset; requires no gradient. Aborts as tg_tensor_set_shape does. */
TgTensor *tg_tensor_new(TgArena *arena, const char *name, int ndim, const int64_t *shape);
/* tg_tensor_new, zeroed. */
TgTensor *tg_tensor_zeros(TgArena *arena, const char *name, int ndim, const int64_t *shape);
/* A header from the arena viewing `data` owned by someone else (a batch of inputs, say), who
 * keeps it alive and unchanged while the tape may read it. */
TgTensor *tg_tensor_view(TgArena *arena, const char *name, float *data, int ndim, const int64_t *shape);
/* Copies name into t->name, cut to TG_NAME_CAP - 1 bytes. */
void tg_tensor_set_name(TgTensor *t, const char *name);

/* dim(i) with negative i counting from the end, as in Python. */
int64_t tg_tensor_dim(const TgTensor *t, int i);
/* Product of all dims but the last: the number of rows of a [rows, last] view. */
int64_t tg_tensor_rows(const TgTensor *t);
/* Same ndim and the same size in every dim. */
bool tg_tensor_same_shape(const TgTensor *a, const TgTensor *b);
/* "[3, 5, 7]" into buf; returns buf. */
const char *tg_tensor_shape_str(const TgTensor *t, char *buf, size_t cap);

#define TG_SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define TG_NDIM(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
/* TG_TENSOR(arena, "name", 4, 8) : a 2-d tensor [4, 8] from the arena. */
#define TG_TENSOR(arena, name, ...) tg_tensor_new((arena), (name), TG_NDIM(__VA_ARGS__), TG_SHAPE(__VA_ARGS__))

#pragma GCC visibility pop

#endif
