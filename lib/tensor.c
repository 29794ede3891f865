#include "tapegrad/tensor.h"

#include <stdio.h>
#include <string.h>

#include "lib/checked.h"
#include "tapegrad/error.h"

void tg_tensor_set_shape(TgTensor *t, int ndim, const int64_t *shape) {
    TG_CHECK(ndim >= 0 && ndim <= TG_MAX_DIMS, "ndim %d", ndim);
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < TG_MAX_DIMS; i++) {
        t->shape[i] = i < ndim ? shape[i] : 1;
        if (i < ndim) {
            TG_CHECK(shape[i] >= 0, "negative dim %lld", (long long)shape[i]);
            TG_CHECK(tg_mul_i64(t->numel, shape[i], &t->numel) && t->numel <= TG_MAX_ELEMENTS,
                     "dim %d (%lld) takes the tensor past %lld elements", i, (long long)shape[i],
                     (long long)TG_MAX_ELEMENTS);
        }
    }
}

void tg_tensor_set_name(TgTensor *t, const char *name) {
    snprintf(t->name, sizeof t->name, "%s", name ? name : "");
}

TgTensor *tg_tensor_view(TgArena *arena, const char *name, float *data, int ndim, const int64_t *shape) {
    TgTensor *t = tg_arena_alloc(arena, sizeof *t);
    memset(t, 0, sizeof *t);
    tg_tensor_set_shape(t, ndim, shape);
    tg_tensor_set_name(t, name);
    t->data = data;
    return t;
}

TgTensor *tg_tensor_new(TgArena *arena, const char *name, int ndim, const int64_t *shape) {
    TgTensor *t = tg_tensor_view(arena, name, NULL, ndim, shape);
    t->data = tg_arena_alloc(arena, (size_t)t->numel * sizeof(float)); /* numel <= TG_MAX_ELEMENTS: no wrap */
    return t;
}

TgTensor *tg_tensor_zeros(TgArena *arena, const char *name, int ndim, const int64_t *shape) {
    TgTensor *t = tg_tensor_new(arena, name, ndim, shape);
    memset(t->data, 0, (size_t)t->numel * sizeof(float));
    return t;
}

int64_t tg_tensor_dim(const TgTensor *t, int i) {
    if (i < 0) i += t->ndim;
    TG_CHECK(i >= 0 && i < t->ndim, "dim %d of a %d-d tensor '%s'", i, t->ndim, t->name);
    return t->shape[i];
}

int64_t tg_tensor_rows(const TgTensor *t) {
    if (t->ndim == 0) return 1;
    int64_t last = t->shape[t->ndim - 1];
    return last ? t->numel / last : 0;
}

bool tg_tensor_same_shape(const TgTensor *a, const TgTensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

const char *tg_tensor_shape_str(const TgTensor *t, char *buf, size_t cap) {
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (int i = 0; i < t->ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}
