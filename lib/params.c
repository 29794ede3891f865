#include "tapegrad/params.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "lib/checked.h"
#include "tapegrad/error.h"
#include "tapegrad/rng.h"

/* n <= TG_MAX_ELEMENTS (tg_params_add), so the byte count cannot wrap */
static size_t flat_bytes(size_t n) {
    size_t bytes = ((n * sizeof(float)) + 63) & ~(size_t)63;
    return bytes ? bytes : 64;
}

/* From this size on a buffer is mapped: the kernel's zero pages, page-aligned, resident only once
 * written. A buffer nothing writes costs no memory: the gradient and moments of a store that is
 * frozen (a LoRA base) before its first step, or of a model opened only to be read. */
enum { FLAT_MAP_BYTES = 1 << 20 };

static float *flat_alloc(size_t n) {
    size_t bytes = flat_bytes(n);
    if (bytes >= FLAT_MAP_BYTES) {
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) tg_abort_at(__FILE__, __LINE__, "out of memory: %zu parameter floats", n);
        return p;
    }
    float *p = aligned_alloc(64, bytes);
    if (!p) tg_abort_at(__FILE__, __LINE__, "out of memory: %zu parameter floats", n);
    memset(p, 0, bytes);
    return p;
}

static void flat_free(float *p, size_t n) {
    if (!p) return;
    size_t bytes = flat_bytes(n);
    if (bytes >= FLAT_MAP_BYTES) munmap(p, bytes);
    else free(p);
}

void tg_params_init(TgParamStore *ps) { memset(ps, 0, sizeof *ps); }

void tg_params_free(TgParamStore *ps) {
    for (int i = 0; i < ps->count; i++) free(ps->tensors[i]);
    free(ps->tensors);
    free(ps->offsets);
    free(ps->decay);
    free(ps->init);
    free(ps->by_name);
    flat_free(ps->data, ps->total);
    flat_free(ps->grad, ps->total);
    flat_free(ps->m, ps->total);
    flat_free(ps->v, ps->total);
    memset(ps, 0, sizeof *ps);
}

TgTensor *tg_params_add(TgParamStore *ps, const char *name, int ndim, const int64_t *shape, bool decay, TgParamInit init) {
    TG_CHECK(!ps->finalized, "tg_params_add('%s') after tg_params_finalize", name);
    TG_CHECK(ps->count < TG_MAX_TENSORS, "more than %d parameters", TG_MAX_TENSORS);
    if (ps->count == ps->cap) {
        ps->cap = ps->cap ? 2 * ps->cap : 64;
        ps->tensors = tg_realloc(ps->tensors, (size_t)ps->cap * sizeof *ps->tensors);
        ps->offsets = tg_realloc(ps->offsets, (size_t)ps->cap * sizeof *ps->offsets);
        ps->decay = tg_realloc(ps->decay, (size_t)ps->cap * sizeof *ps->decay);
        ps->init = tg_realloc(ps->init, (size_t)ps->cap * sizeof *ps->init);
    }
    TgTensor *t = tg_calloc(1, sizeof *t);
    tg_tensor_set_shape(t, ndim, shape);
    tg_tensor_set_name(t, name);
    t->requires_grad = true;
    /* keep every view 16-float (64-byte) aligned so vector loops start on a cache line */
    size_t offset = (ps->total + 15) & ~(size_t)15;
    ps->tensors[ps->count] = t;
    ps->offsets[ps->count] = offset;
    ps->decay[ps->count] = decay;
    ps->init[ps->count] = init;
    ps->count++;
    TG_CHECK(tg_add_size(offset, (size_t)t->numel, &ps->total) && ps->total <= (size_t)TG_MAX_ELEMENTS,
             "parameter '%s' takes the store past %lld floats", name, (long long)TG_MAX_ELEMENTS);
    return t;
}

static int compare_names(const void *a, const void *b) {
    return strcmp(((const TgParamName *)a)->name, ((const TgParamName *)b)->name);
}

void tg_params_finalize(TgParamStore *ps) {
    TG_CHECK(!ps->finalized, "tg_params_finalize called twice");
    ps->data = flat_alloc(ps->total);
    ps->grad = flat_alloc(ps->total);
    ps->m = flat_alloc(ps->total);
    ps->v = flat_alloc(ps->total);
    for (int i = 0; i < ps->count; i++) ps->tensors[i]->data = ps->data + ps->offsets[i];
    ps->by_name = tg_malloc((size_t)(ps->count + 1) * sizeof *ps->by_name);
    for (int i = 0; i < ps->count; i++) ps->by_name[i] = (TgParamName){ps->tensors[i]->name, i};
    qsort(ps->by_name, (size_t)ps->count, sizeof *ps->by_name, compare_names);
    for (int i = 1; i < ps->count; i++)
        TG_CHECK(strcmp(ps->by_name[i - 1].name, ps->by_name[i].name) != 0, "parameter '%s' added twice",
                 ps->by_name[i].name);
    ps->finalized = true;
    tg_params_point_grads(ps, NULL);
}

void tg_params_point_grads(TgParamStore *ps, float *grad) {
    TG_CHECK(ps->finalized, "tg_params_point_grads before tg_params_finalize");
    if (!grad) grad = ps->grad;
    for (int i = 0; i < ps->count; i++) ps->tensors[i]->grad = grad + ps->offsets[i];
}

void tg_params_freeze(TgParamStore *ps) {
    TG_CHECK(ps->finalized, "tg_params_freeze before tg_params_finalize");
    flat_free(ps->grad, ps->total);
    flat_free(ps->m, ps->total);
    flat_free(ps->v, ps->total);
    ps->grad = ps->m = ps->v = NULL;
    for (int i = 0; i < ps->count; i++) {
        ps->tensors[i]->grad = NULL;
        ps->tensors[i]->requires_grad = false;
    }
}

void tg_params_zero_grad(TgParamStore *ps) {
    if (ps->grad) memset(ps->grad, 0, ps->total * sizeof(float)); /* a frozen store has none */
}

int tg_params_index(const TgParamStore *ps, const char *name) {
    if (ps->finalized) {
        const TgParamName key = {name, 0};
        const TgParamName *hit = bsearch(&key, ps->by_name, (size_t)ps->count, sizeof key, compare_names);
        return hit ? hit->index : -1;
    }
    for (int i = 0; i < ps->count; i++)
        if (strcmp(ps->tensors[i]->name, name) == 0) return i;
    return -1;
}

TgTensor *tg_params_find(const TgParamStore *ps, const char *name) {
    int i = tg_params_index(ps, name);
    return i < 0 ? NULL : ps->tensors[i];
}

double tg_params_grad_norm(const TgParamStore *ps) {
    double sum = 0.0;
    for (size_t i = 0; ps->grad && i < ps->total; i++) sum += (double)ps->grad[i] * ps->grad[i];
    return sqrt(sum);
}

void tg_params_init_values(TgParamStore *ps, uint64_t seed) {
    TG_CHECK(ps->finalized, "tg_params_init_values before tg_params_finalize");
    TgRng rng;
    tg_rng_seed(&rng, seed);
    for (int i = 0; i < ps->count; i++) {
        TgTensor *t = ps->tensors[i];
        switch (ps->init[i].kind) {
        case TG_PARAM_ZEROS: memset(t->data, 0, (size_t)t->numel * sizeof(float)); break;
        case TG_PARAM_ONES:
            for (int64_t j = 0; j < t->numel; j++) t->data[j] = 1.0f;
            break;
        case TG_PARAM_NORMAL: tg_rng_fill_normal(&rng, t->data, (size_t)t->numel, 0.0f, ps->init[i].std); break;
        case TG_PARAM_UNIFORM:
            tg_rng_fill_uniform(&rng, t->data, (size_t)t->numel, -ps->init[i].std, ps->init[i].std);
            break;
        }
    }
}
