#include "tapegrad/tape.h"

#include <stdlib.h>
#include <string.h>

#include "tapegrad/error.h"

void tg_tape_init(TgTape *tape, TgArena *arena, TgPool *pool) {
    memset(tape, 0, sizeof *tape);
    tape->arena = arena;
    tape->pool = pool;
    tape->grad_enabled = true;
    tape->precision = TG_PRECISION_FP32;
    tape->gemm_mode = TG_GEMM_POOL;
    tape->saved_probs_limit = TG_TAPE_SAVED_PROBS_LIMIT;
}

TG_ENUM_DEFINE(TgPrecision, tg_precision, TG_PRECISIONS, TG_PRECISION_COUNT, "precision")

void tg_tape_set_precision(TgTape *tape, TgPrecision precision) {
    TG_CHECK((unsigned)precision < TG_PRECISION_COUNT, "tg_tape_set_precision: precision %d", (int)precision);
    tape->precision = precision;
}

void tg_tape_set_gemm_mode(TgTape *tape, TgGemmMode mode) {
    TG_CHECK((unsigned)mode < TG_GEMM_MODE_COUNT, "tg_tape_set_gemm_mode: mode %d", (int)mode);
    tape->gemm_mode = mode;
}

void tg_tape_set_saved_probs_limit(TgTape *tape, size_t bytes) { tape->saved_probs_limit = bytes; }

void tg_tape_free(TgTape *tape) {
    free(tape->nodes);
    free(tape->free_lists);
    tape->nodes = NULL;
    tape->free_lists = NULL;
    tape->n_nodes = tape->cap_nodes = 0;
    tape->n_free_lists = tape->cap_free_lists = 0;
}

/* ---- activation gradients: arena memory recycled through per-size free lists ---- */

static TgGradFreeList *free_list_of(TgTape *tape, size_t bytes, bool create) {
    for (int i = 0; i < tape->n_free_lists; i++)
        if (tape->free_lists[i].bytes == bytes) return &tape->free_lists[i];
    if (!create) return NULL;
    if (tape->n_free_lists == tape->cap_free_lists) {
        tape->cap_free_lists = tape->cap_free_lists ? 2 * tape->cap_free_lists : 16;
        tape->free_lists = tg_realloc(tape->free_lists, (size_t)tape->cap_free_lists * sizeof *tape->free_lists);
    }
    TgGradFreeList *list = &tape->free_lists[tape->n_free_lists++];
    list->bytes = bytes;
    list->head = NULL;
    return list;
}

static float *grad_alloc(TgTape *tape, size_t bytes) {
    TgGradFreeList *list = free_list_of(tape, bytes, false);
    if (list && list->head) {
        void *block = list->head;
        list->head = *(void **)block;
        return block;
    }
    return tg_arena_alloc(tape->arena, bytes);
}

static void grad_release(TgTape *tape, TgTensor *t) {
    size_t bytes = (size_t)t->numel * sizeof(float);
    if (bytes < sizeof(void *)) return;   /* too small to link; the arena reset reclaims it */
    TgGradFreeList *list = free_list_of(tape, bytes, true);
    *(void **)t->grad = list->head;
    list->head = t->grad;
    t->grad = NULL;
}

void tg_tensor_retain_grad(TgTensor *t) { t->retain_grad = true; }

TgTapeNode *tg_tape_record(TgTape *tape, const char *op, TgBackwardFn backward, TgTensor *out,
                      int n_in, TgTensor *const *in) {
    TG_CHECK(n_in >= 0 && n_in <= TG_TAPE_MAX_INPUTS, "op %s has %d inputs", op, n_in);
    if (!tape->grad_enabled) return NULL;
    bool any = false;
    for (int i = 0; i < n_in; i++) any |= in[i] && in[i]->requires_grad;
    if (!any) return NULL;
    if (tape->n_nodes == tape->cap_nodes) {
        /* grows during the first step only; later steps reuse the same array */
        tape->cap_nodes = tape->cap_nodes ? 2 * tape->cap_nodes : 256;
        tape->nodes = tg_realloc(tape->nodes, tape->cap_nodes * sizeof *tape->nodes);
    }
    TgTapeNode *node = &tape->nodes[tape->n_nodes++];
    memset(node, 0, sizeof *node);
    node->op = op;
    node->backward = backward;
    node->out = out;
    node->n_in = n_in;
    for (int i = 0; i < n_in; i++) node->in[i] = in[i];
    node->arena_used = tape->arena ? tape->arena->used : 0;
    out->requires_grad = true;
    return node;
}

const TgTapeNode *tg_tape_find_reader(const TgTape *tape, const float *data) {
    for (size_t i = 0; i < tape->n_nodes; i++) {
        const TgTapeNode *node = &tape->nodes[i];
        if (node->reads_out && node->out->data == data) return node;
        for (int k = 0; k < node->n_in; k++)
            if (node->in[k] && node->in[k]->data == data) return node;
    }
    return NULL;
}

const TgTapeNode *tg_tape_find_producer(const TgTape *tape, const TgTensor *t) {
    for (size_t i = tape->n_nodes; i-- > 0;)
        if (tape->nodes[i].out == t) return &tape->nodes[i];
    return NULL;
}

bool tg_tape_set_grad_enabled(TgTape *tape, bool enabled) {
    bool old = tape->grad_enabled;
    tape->grad_enabled = enabled;
    return old;
}

float *tg_tensor_grad(TgTape *tape, TgTensor *t) {
    if (!t->grad) {
        size_t bytes = (size_t)t->numel * sizeof(float);
        t->grad = grad_alloc(tape, bytes);
        memset(t->grad, 0, bytes);
    }
    return t->grad;
}

float *tg_tensor_grad_for_write(TgTape *tape, TgTensor *t, bool *accumulate) {
    *accumulate = t->grad != NULL;
    if (!t->grad) t->grad = grad_alloc(tape, (size_t)t->numel * sizeof(float));
    return t->grad;
}

void tg_tape_backward_from_seeded(TgTape *tape) {
    for (size_t i = tape->n_nodes; i-- > 0;) {
        TgTapeNode *node = &tape->nodes[i];
        /* an output nothing depended on has no gradient: nothing flows back from it */
        if (!node->out->grad) continue;
        node->backward(tape, node);
        /* every consumer of out came later on the tape and has run: its gradient is spent */
        if (node->out->grad && !node->out->retain_grad) grad_release(tape, node->out);
    }
}

void tg_tape_backward(TgTape *tape, TgTensor *loss) {
    TG_CHECK(loss->numel == 1, "backward from '%s' with %lld elements; expected a scalar",
             loss->name, (long long)loss->numel);
    TG_CHECK(loss->requires_grad, "backward from '%s', which depends on no parameter", loss->name);
    float *g = tg_tensor_grad(tape, loss);
    g[0] += 1.0f;
    tg_tape_backward_from_seeded(tape);
}

void tg_tape_reset(TgTape *tape) {
    tape->n_nodes = 0;
    for (int i = 0; i < tape->n_free_lists; i++) tape->free_lists[i].head = NULL;
    tg_arena_reset(tape->arena);
}
