/* Every op of tapegrad. Each forward records itself on the tape (when the tape records and an
 * input requires grad); its backward sits beside it in the op's file and adds into the inputs'
 * gradients. Shapes: leading dims are flattened into rows unless an op says otherwise.
 *
 * An op's output comes from the tape's arena and lives until tg_tape_reset; the inputs are read,
 * never changed (the _inplace and _consuming variants say what they overwrite). Shapes that do
 * not fit are programming errors: the op aborts naming the tensors (TG_CHECK). */
#ifndef TG_OPS_H
#define TG_OPS_H

#include "tapegrad/tape.h"
#include "tapegrad/op_list.h"

#pragma GCC visibility push(default)

/* ---- linear.c ---- */
/* y = x W^T.  x (..., in), w (out, in) -> y (..., out). No bias. */
TgTensor *tg_linear(TgTape *tape, TgTensor *x, TgTensor *w);
/* y = residual + x W^T (residual (..., out), same rows as x): tg_add(residual, tg_linear(x, w))
 * in one op, without keeping the product. */
TgTensor *tg_linear_residual(TgTape *tape, TgTensor *x, TgTensor *w, TgTensor *residual);
/* LoRA: y = [residual +] x W^T + scale (x A^T) B^T, W (out, in) the base, A (rank, in), B (out,
 * rank); scale = alpha / rank. A W that requires no gradient (a frozen base) gets no dW product;
 * with B = 0 the result equals tg_linear's (tg_linear_residual's) bitwise. residual may be NULL. */
TgTensor *tg_lora_linear(TgTape *tape, TgTensor *x, TgTensor *w, TgTensor *a, TgTensor *b, float scale,
                         TgTensor *residual);

/* ---- elementwise.c ---- */
TgTensor *tg_add(TgTape *tape, TgTensor *a, TgTensor *b);     /* a + b, same shape */
TgTensor *tg_mul(TgTape *tape, TgTensor *a, TgTensor *b);     /* a * b, same shape */
TgTensor *tg_scale(TgTape *tape, TgTensor *a, float s);     /* s * a */
TgTensor *tg_sum(TgTape *tape, TgTensor *a);                /* scalar: sum of all elements */
TgTensor *tg_mean(TgTape *tape, TgTensor *a);               /* scalar: mean of all elements */

/* ---- activation.c ---- (elementwise, any shape) */
TgTensor *tg_relu(TgTape *tape, TgTensor *x);
TgTensor *tg_silu(TgTape *tape, TgTensor *x);     /* x * sigmoid(x) */
TgTensor *tg_gelu(TgTape *tape, TgTensor *x);     /* 0.5 x (1 + erf(x / sqrt 2)) */
TgTensor *tg_sigmoid(TgTape *tape, TgTensor *x);
/* The same functions on one float, for code of one's own (no tape). */
float tg_act_silu(float x);
float tg_act_gelu(float x);
float tg_act_sigmoid(float x);

/* ---- rmsnorm.c ---- */
/* y = x / sqrt(mean(x^2) + eps) * g over the last dim: x (..., d), g (d); or over each group of d
 * of it, g shared (QK-norm, per head): x (..., n*d), g (d). */
TgTensor *tg_rmsnorm(TgTape *tape, TgTensor *x, TgTensor *g, float eps);

/* ---- rope.c ---- */
/* cos/sin of angle = position * theta^(-2i/head_dim), i < head_dim/2; computed once per run. */
typedef struct TgRopeTable {
    float *cos, *sin;    /* [max_pos, head_dim/2] each */
    int64_t max_pos, head_dim;
    double theta;
} TgRopeTable;
/* Fills the table (heap memory; head_dim even); tg_rope_table_free releases it. */
void tg_rope_table_init(TgRopeTable *rope, int64_t max_pos, int64_t head_dim, double theta);
void tg_rope_table_free(TgRopeTable *rope);
/* rotate_half([a, b, c, d]) = [-c, -d, a, b] on one vector of even length d. */
void tg_rope_rotate_half(const float *x, float *out, int64_t d);
/* x' = x*cos + rotate_half(x)*sin per head; pairs (i, i + hd/2).
 * x (B, T, heads*head_dim); token t sits at position pos_offset + t. */
TgTensor *tg_rope(TgTape *tape, TgTensor *x, int64_t heads, const TgRopeTable *rope, int64_t pos_offset);
/* The same, written over x's values (the output views x's data; x's gradient stays separate).
 * For an x that no backward reads, such as the output of a linear: saves one tensor. */
TgTensor *tg_rope_inplace(TgTape *tape, TgTensor *x, int64_t heads, const TgRopeTable *rope, int64_t pos_offset);

/* ---- attention.c ---- */
/* Causal softmax(Q K^T / sqrt(hd)) V with grouped-query heads: query head h reads KV head
 * h / (heads / kv_heads).  q (B, Tq, heads*hd), k and v (B, Tk, kv_heads*hd), Tk >= Tq;
 * query t sits at position Tk - Tq + t and sees keys 0 ..= Tk - Tq + t (KV-cache decoding
 * passes Tq = 1). Output (B, Tq, heads*hd). Parallel over (batch, head). The backward needs the
 * softmax probabilities (B, H, Tq, Tk): the forward keeps them when they fit the tape's
 * saved_probs_limit (tg_tape_set_saved_probs_limit), else the backward recomputes them. */
TgTensor *tg_attention(TgTape *tape, TgTensor *q, TgTensor *k, TgTensor *v, int64_t heads, int64_t kv_heads);
/* tg_attention over packed rows: query t of row b sees keys key_start[b Tq + t] ..= its position
 * only, the start of its own sequence (key_start (B, Tq), each in [0, Tk - Tq + t] and never
 * decreasing along a row; checked). Sequences packed one after the other into a row (training
 * windows of several conversations) then never see each other. key_start must stay valid until
 * the backward has run; NULL is tg_attention. */
TgTensor *tg_attention_segmented(TgTape *tape, TgTensor *q, TgTensor *k, TgTensor *v, int64_t heads, int64_t kv_heads,
                                 const int32_t *key_start);
/* What tg_attention takes from the step arena for these shapes (bytes, as doubles: a hostile shape
 * can exceed any integer), with the alignment the arena adds: `kept` stays until the tape is reset
 * (the output, and P when the tape records and P takes at most `saved_probs_limit` bytes: the
 * tape's, TG_TAPE_SAVED_PROBS_LIMIT on a new one), `forward_scratch` and
 * `backward_scratch` are taken and given back inside the forward and the backward (the backward's
 * input gradients are not counted: they are the caller's tensors' gradients). `threads` is the
 * pool's. For a memory estimate that must stay an upper bound of what the op takes. */
typedef struct TgAttentionArena {
    double kept, forward_scratch, backward_scratch;
} TgAttentionArena;
TgAttentionArena tg_attention_arena_bytes(int64_t batch, int64_t heads, int64_t q_len, int64_t kv_len, int64_t head_dim,
                                          int threads, bool recording, size_t saved_probs_limit);

/* ---- ffn.c ---- */
/* silu(a) * b, fused. a, b same shape. */
TgTensor *tg_swiglu(TgTape *tape, TgTensor *a, TgTensor *b);
/* The three products of an FFN, for a caller that takes them its own way (the model adds LoRA
 * adapters to them). */
typedef enum { TG_FFN_GATE, TG_FFN_UP, TG_FFN_DOWN } TgFfnProduct;
/* An FFN's weights: w1 (gate), w3 (up) (hidden, dim), w2 (down) (dim, hidden); w3 NULL for the ReLU
 * FFN. project (NULL: x W^T, and residual + x W^T fused when residual is given) takes each
 * product, with ctx; residual is given only to TG_FFN_DOWN. */
typedef TgTensor *(*TgFfnProjectFn)(void *ctx, TgTape *tape, TgFfnProduct which, TgTensor *x, TgTensor *w,
                                   TgTensor *residual);
typedef struct TgFfn {
    TgTensor *w1, *w3, *w2;
    TgFfnProjectFn project;
    void *ctx;
} TgFfn;
/* residual + w2(silu(w1 x) * w3 x), or residual + w2(relu(w1 x)) without w3; residual (..., dim)
 * or NULL (then no add). *hidden_out (may be NULL) receives the input of w2, (..., hidden), for
 * inspection; like every activation it lives until the tape is reset. */
TgTensor *tg_ffn(TgTape *tape, const TgFfn *ffn, TgTensor *x, TgTensor *residual, TgTensor **hidden_out);
/* tg_ffn of the SwiGLU FFN (w1, w3, w2). */
TgTensor *tg_ffn_swiglu(TgTape *tape, TgTensor *x, TgTensor *w1, TgTensor *w3, TgTensor *w2, TgTensor *residual, TgTensor **hidden_out);
/* tg_ffn of the ReLU FFN (w1, w2). */
TgTensor *tg_ffn_relu(TgTape *tape, TgTensor *x, TgTensor *w1, TgTensor *w2, TgTensor *residual, TgTensor **hidden_out);

/* ---- embedding.c ---- */
/* out[..., :] = table[ids[...], :].  table (V, D); ids has ndim dims `shape`; out (shape..., D).
 * Backward: a deterministic scatter-add into the table's gradient. Aborts on an id outside
 * [0, V) (callers validate user input first). */
TgTensor *tg_embedding(TgTape *tape, TgTensor *table, const int32_t *ids, int ndim, const int64_t *shape);
/* The table (V, D) with row ids[j] replaced by rows[j] (K, D), the ids ascending in [0, V): a
 * new (V, D) tensor. Backward: the replaced rows' gradient goes to `rows`, every other row's to
 * the table. */
TgTensor *tg_rows_replaced(TgTape *tape, TgTensor *table, TgTensor *rows, const int32_t *ids);

/* ---- cross_entropy.c ---- */
/* Mean over counted targets of -log softmax(logits)[target]; logits (..., V), one target per
 * row; rows whose target == ignore_index are skipped (TG_IGNORE_INDEX = -1). Scalar output.
 * The softmax is fused into the backward: dlogits = (softmax - onehot) / count. */
enum { TG_IGNORE_INDEX = -1 };
TgTensor *tg_cross_entropy(TgTape *tape, TgTensor *logits, const int32_t *targets, int32_t ignore_index);
/* The same, but the backward may write dlogits over the logits' values (saving an (R, V)
 * buffer): for logits that nobody reads after the backward. */
TgTensor *tg_cross_entropy_consuming(TgTape *tape, TgTensor *logits, const int32_t *targets, int32_t ignore_index);

/* ---- preference.c ---- */
/* The log-probability of each sequence's counted targets: logits (B, T, V), targets (B*T), out
 * (B), out_b = sum_t log softmax(logits_bt)[target_bt] over the rows whose target is not
 * ignore_index (a sequence with none counted gives 0). Backward: dlogits_bt = dout_b (onehot -
 * softmax) on counted rows. */
TgTensor *tg_sequence_logprob(TgTape *tape, TgTensor *logits, const int32_t *targets, int32_t ignore_index);
/* DPO's loss over P pairs: logps (2P) holds the policy's log-probabilities of the chosen
 * sequences, then of the rejected ones, ref (2P) the reference model's in the same order
 * (constants, copied); the scalar mean over pairs of -log sigmoid(beta ((c - ref_c) - (r - ref_r))). */
TgTensor *tg_dpo_loss(TgTape *tape, TgTensor *logps, const float *ref, double beta);

#pragma GCC visibility pop

#endif
