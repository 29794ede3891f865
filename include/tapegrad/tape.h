/* The tape: an append-only record of the ops of one forward pass, replayed backwards.
 *
 * A forward op computes its output, then calls tg_tape_record(); when the tape is recording and
 * some input requires a gradient, a node {op, inputs, output, backward, saved} is appended.
 * tg_tape_backward(loss) seeds dloss = 1 and walks the nodes in reverse; every backward *adds*
 * into its inputs' gradients (a tensor used twice receives both contributions).
 *
 * The tape also carries what every op needs: the step arena (outputs, saved values, gradients
 * of activations) and the thread pool. tg_tape_reset() empties the tape and resets the arena.
 *
 * Gradients of activations are short-lived: the gradient of a node's output is complete once
 * every later node has run its backward, and is read by that node's backward alone. So after a
 * node's backward its output's gradient goes back to the tape (out->grad = NULL), onto a free
 * list by size, and the next gradient of that size reuses the memory: the step needs about one
 * layer's worth of activation gradients instead of all of them, and the reused pages are
 * already resident. As in PyTorch, tg_tensor_retain_grad() keeps the gradient of a tensor one
 * wants to read after the backward (leaves, such as parameters, always keep theirs).
 */
#ifndef TG_TAPE_H
#define TG_TAPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tapegrad/arena.h"
#include "tapegrad/error.h"
#include "tapegrad/pool.h"
#include "tapegrad/tensor.h"

#pragma GCC visibility push(default)

/* The precision of the tape's matrix products (tg_tape_set_precision): X(ID, "name"), giving
 * TG_PRECISION_<ID>. FP32: fp32 operands, fp32 sums, the default; BF16: operands rounded to bf16
 * (to nearest even), fp32 sums. */
#define TG_PRECISIONS(X) \
    X(FP32, "fp32")      \
    X(BF16, "bf16")

typedef enum {
#define TG_PRECISION_ENUM(id, name) TG_PRECISION_##id,
    TG_PRECISIONS(TG_PRECISION_ENUM)
#undef TG_PRECISION_ENUM
        TG_PRECISION_COUNT
} TgPrecision;

/* Who computes and who threads the tape's fp32 matrix products (tg_tape_set_gemm_mode). */
typedef enum {
    TG_GEMM_POOL = 0,          /* tapegrad's kernel of the active path (lib/cpu.h), split over the tape's pool */
    TG_GEMM_OPENBLAS = 1,      /* OpenBLAS's kernel, threaded by OpenBLAS (the first design) */
    TG_GEMM_POOL_OPENBLAS = 2, /* OpenBLAS's kernel on one thread, split over the tape's pool */
} TgGemmMode;
enum { TG_GEMM_MODE_COUNT = 3 };

/* The bytes of softmax probabilities attention keeps for its backward on a new tape
 * (tg_tape_set_saved_probs_limit). */
#define TG_TAPE_SAVED_PROBS_LIMIT ((size_t)8 << 20)

typedef struct TgTape TgTape;
typedef struct TgTapeNode TgTapeNode;
typedef void (*TgBackwardFn)(TgTape *tape, TgTapeNode *node);

enum { TG_TAPE_MAX_INPUTS = 6 };

struct TgTapeNode {
    const char *op;            /* "linear", "rmsnorm", ... for inspection and error messages */
    TgBackwardFn backward;
    TgTensor *out;
    TgTensor *in[TG_TAPE_MAX_INPUTS];
    int n_in;
    void *saved;               /* op-specific values kept for the backward (arena memory) */
    bool reads_out;            /* the backward reads out->data, not only out->grad */
    size_t arena_used;         /* the step arena's bytes in use when the node was recorded */
    double fparam[4];          /* op scalars (eps, scale, ...) */
    int64_t iparam[6];         /* op integers (heads, positions, ...) */
};

typedef struct TgGradFreeList {
    size_t bytes;
    void *head;   /* singly linked through the first pointer of each free block */
} TgGradFreeList;

struct TgTape {
    TgTapeNode *nodes;
    size_t n_nodes, cap_nodes;
    TgArena *arena;
    TgPool *pool;
    bool grad_enabled;
    TgPrecision precision;        /* of every linear layer's products, forward and backward */
    TgGemmMode gemm_mode;         /* who computes and threads them */
    size_t saved_probs_limit;     /* attention keeps P for its backward up to this many bytes */
    TgGradFreeList *free_lists;   /* released activation gradients, one list per size */
    int n_free_lists, cap_free_lists;
};

/* An empty, recording tape over `arena` (outputs, saved values and activation gradients come from
 * it) and `pool` (may be NULL: everything on the caller). Both stay the caller's. Its settings
 * start as TG_PRECISION_FP32, TG_GEMM_POOL and TG_TAPE_SAVED_PROBS_LIMIT; each tape keeps its own,
 * so two tapes in one process may differ. */
void tg_tape_init(TgTape *tape, TgArena *arena, TgPool *pool);
/* Frees the node list; the arena and the pool are left to their owner. */
void tg_tape_free(TgTape *tape);
/* Appends a node if the tape records and any input requires grad; marks `out` as requiring
 * grad in that case. Returns the node (to fill saved/params) or NULL when nothing was recorded.
 * `op` is kept as given (a string that outlives the tape: a literal); at most TG_TAPE_MAX_INPUTS
 * inputs. The backward receives the node; it reads out->grad and adds into the inputs' grads. */
TgTapeNode *tg_tape_record(TgTape *tape, const char *op, TgBackwardFn backward, TgTensor *out,
                      int n_in, TgTensor *const *in);
/* The recorded node whose backward may read the values at `data`: one that takes a tensor with
 * that data as an input, or whose output has that data and reads it (reads_out). NULL if none.
 * An op that overwrites a tensor's values in its backward asks this first. */
const TgTapeNode *tg_tape_find_reader(const TgTape *tape, const float *data);
/* The recorded node whose output is t, or NULL (t is a leaf: a parameter or the caller's). */
const TgTapeNode *tg_tape_find_producer(const TgTape *tape, const TgTensor *t);
/* No-grad mode: returns the previous setting. */
bool tg_tape_set_grad_enabled(TgTape *tape, bool enabled);
/* Mixed precision: with TG_PRECISION_BF16 every product of a linear layer (tg_linear,
 * tg_linear_residual, the FFNs and the tied output head: y = x W^T, dx = dy W, dW = dy^T x)
 * rounds its two operands to bf16 and sums in fp32; the weights, their gradients and everything
 * else (norms, softmax and attention, RoPE, cross-entropy, the optimizer) stay fp32, and no
 * activation is stored in bf16. Default TG_PRECISION_FP32. Not while a backward runs. */
void tg_tape_set_precision(TgTape *tape, TgPrecision precision);
/* Who computes and threads the products of the tape's linear layers in fp32 (bf16 products always
 * run tapegrad's kernels: OpenBLAS has none): TG_GEMM_POOL, the default, runs no OpenBLAS code at
 * all; the two OpenBLAS modes are there to compare against it (`tapegrad bench --gemm`). They set
 * OpenBLAS's thread count before each product (1, or the pool's threads), which is a setting of
 * the OpenBLAS library for the whole process: two tapes in those modes should not run products at
 * the same time on different threads. Not while a backward runs. */
void tg_tape_set_gemm_mode(TgTape *tape, TgGemmMode mode);
/* The backward of attention needs the softmax probabilities P (B, H, Tq, Tk): the forward keeps
 * them when they take at most `bytes` (TG_TAPE_SAVED_PROBS_LIMIT on a new tape), else the backward
 * recomputes them: the same bits, a few per cent more work, and memory linear in T. 0 always
 * recomputes. Not while a backward runs (the backward reads what its forward kept). */
void tg_tape_set_saved_probs_limit(TgTape *tape, size_t bytes);
/* tg_precision_name: "fp32", "bf16"; tg_precision_parse: the precision of a name (tapegrad/error.h) */
TG_ENUM_DECLARE(TgPrecision, tg_precision);

/* Backward from a scalar: seeds d(loss) = 1. Aborts when loss is not a scalar or depends on no
 * input that requires a gradient. Parameters' gradients add up over calls until zeroed. */
void tg_tape_backward(TgTape *tape, TgTensor *loss);
/* Backward from any output whose grad the caller has already seeded. */
void tg_tape_backward_from_seeded(TgTape *tape);
/* Empties the tape and resets the arena (all activations and their gradients go). */
void tg_tape_reset(TgTape *tape);

/* The gradient buffer of t, allocated zeroed from the arena the first time it is asked for.
 * Parameters carry theirs from the TgParamStore. */
float *tg_tensor_grad(TgTape *tape, TgTensor *t);
/* For a backward that writes EVERY element of t's gradient: when t has no gradient yet the
 * buffer comes back uninitialised and *accumulate is false, so the op stores ('=', beta 0 in a
 * GEMM) instead of zeroing and then adding; otherwise *accumulate is true ('+='). This saves a
 * memset and a read of every activation gradient. */
float *tg_tensor_grad_for_write(TgTape *tape, TgTensor *t, bool *accumulate);
/* Keep t's gradient after the backward of the node that produced t (see the top). */
void tg_tensor_retain_grad(TgTensor *t);
/* An op's backward asks for an input's gradient only if the input wants one. */
static inline bool tg_tensor_wants_grad(const TgTensor *t) { return t->requires_grad; }

#pragma GCC visibility pop

#endif
