#include "tape.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

void tape_init(Tape *tape, Arena *arena, Pool *pool) {
    memset(tape, 0, sizeof *tape);
    tape->arena = arena;
    tape->pool = pool;
    tape->grad_enabled = true;
}

void tape_free(Tape *tape) {
    free(tape->nodes);
    tape->nodes = NULL;
    tape->n_nodes = tape->cap_nodes = 0;
}

TapeNode *tape_record(Tape *tape, const char *op, tg_backward_fn backward, Tensor *out,
                      int n_in, Tensor *const *in) {
    TG_CHECK(n_in >= 0 && n_in <= TAPE_MAX_INPUTS, "op %s has %d inputs", op, n_in);
    if (!tape->grad_enabled) return NULL;
    bool any = false;
    for (int i = 0; i < n_in; i++) any |= in[i] && in[i]->requires_grad;
    if (!any) return NULL;
    if (tape->n_nodes == tape->cap_nodes) {
        /* grows during the first step only; later steps reuse the same array */
        tape->cap_nodes = tape->cap_nodes ? 2 * tape->cap_nodes : 256;
        tape->nodes = tg_realloc(tape->nodes, tape->cap_nodes * sizeof *tape->nodes);
    }
    TapeNode *node = &tape->nodes[tape->n_nodes++];
    memset(node, 0, sizeof *node);
    node->op = op;
    node->backward = backward;
    node->out = out;
    node->n_in = n_in;
    for (int i = 0; i < n_in; i++) node->in[i] = in[i];
    out->requires_grad = true;
    return node;
}

bool tape_set_grad_enabled(Tape *tape, bool enabled) {
    bool old = tape->grad_enabled;
    tape->grad_enabled = enabled;
    return old;
}

float *tensor_grad(Tape *tape, Tensor *t) {
    if (!t->grad) t->grad = arena_calloc(tape->arena, (size_t)t->numel * sizeof(float));
    return t->grad;
}

void tape_backward_from_seeded(Tape *tape) {
    for (size_t i = tape->n_nodes; i-- > 0;) {
        TapeNode *node = &tape->nodes[i];
        /* an output nothing depended on has no gradient: nothing flows back from it */
        if (!node->out->grad) continue;
        node->backward(tape, node);
    }
}

void tape_backward(Tape *tape, Tensor *loss) {
    TG_CHECK(loss->numel == 1, "backward from '%s' with %lld elements; expected a scalar",
             loss->name, (long long)loss->numel);
    TG_CHECK(loss->requires_grad, "backward from '%s', which depends on no parameter", loss->name);
    float *g = tensor_grad(tape, loss);
    g[0] += 1.0f;
    tape_backward_from_seeded(tape);
}

void tape_reset(Tape *tape) {
    tape->n_nodes = 0;
    arena_reset(tape->arena);
}
