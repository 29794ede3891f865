/* How much of the step arena one forward (and backward) of the model takes: an upper bound,
 * derived from the shapes the way forward() in model.c allocates them, so that a batch or context
 * too large for the machine is refused before the arena grows into an abort.
 *
 * Every tensor an op makes is a header and its data, each rounded up to the arena's alignment.
 * What stays until the tape is reset (the "kept" bytes): per layer
 *     n1, q, k, v, attention (and P when it is saved), h, n2, the FFN's hidden tensors, out
 * plus the embedding, the final norm, the logits and the loss's saved rows. The backward adds the
 * gradients of activations, which the tape recycles by size (tape.h): of the size (tokens, dim)
 * at most 4 are live at once (the residual's, q's, n1's and q-before-RoPE's), of (tokens, kv dim)
 * 2, of (tokens, hidden) 3 for SwiGLU (gate, up, hidden) and 2 for ReLU; when two of these sizes
 * are equal their lists merge, and the sum stays an upper bound. RMSNorm's backward keeps a
 * (dim) double sum each time. QK-norm (qk_norm) adds its outputs and their rstd to every layer, and
 * a gradient of q's size and one of k's to the live ones. On top comes the largest scratch any op takes and gives back
 * within its call: attention's per-thread blocks (forward and backward), cross-entropy's row
 * losses. The logits' gradient is written over the logits (tg_cross_entropy_consuming). */
#include "tapegrad/model.h"

#include <math.h>

#include "tapegrad/arena.h"
#include "tapegrad/tensor.h"

static double rounded(double bytes) { return ceil(bytes / TG_ARENA_ALIGN) * TG_ARENA_ALIGN; }

/* a tensor of n floats: header and data */
static double tensor_bytes(double n) { return rounded(sizeof(TgTensor)) + rounded(n * sizeof(float)); }

double tg_model_activation_bytes(const TgModelConfig *c, int64_t batch, int64_t seq, int threads, bool training) {
    return tg_model_activation_bytes_for(c, batch, seq, threads, training, TG_TAPE_SAVED_PROBS_LIMIT);
}

double tg_model_activation_bytes_for(const TgModelConfig *c, int64_t batch, int64_t seq, int threads, bool training,
                                     size_t saved_probs_limit) {
    double n = (double)batch * (double)seq, d = (double)c->dim, hidden = (double)c->hidden, vocab = (double)c->vocab;
    int64_t head_dim = c->dim / c->n_heads;
    double kv = (double)(c->n_kv_heads * head_dim), header = rounded(sizeof(TgTensor));
    double hidden_tensors = c->ffn == TG_FFN_SWIGLU ? 3 : 2; /* gate, up, silu(gate)*up | w1 x, relu */
    double rows = rounded(n * sizeof(float));                /* rmsnorm's rstd, the loss's saved rows */
    TgAttentionArena att =
        tg_attention_arena_bytes(batch, c->n_heads, seq, seq, head_dim, threads > 0 ? threads : 1, training,
                                 saved_probs_limit);

    double layer = 2 * (tensor_bytes(n * d) + rows)                  /* n1, n2 and their rstd */
                   + tensor_bytes(n * d) + header                     /* q, its RoPE view */
                   + 2 * tensor_bytes(n * kv) + header                /* k, its RoPE view, v */
                   + att.kept                                         /* the attention, P */
                   + 2 * tensor_bytes(n * d)                          /* h = x + attn, out = h + ffn */
                   + hidden_tensors * tensor_bytes(n * hidden);
    if (c->qk_norm) /* QK-norm's outputs, RoPE's views of them, their rstd (a row per head) */
        layer += tensor_bytes(n * d) + tensor_bytes(n * kv) + 2 * header +
                 rounded(n * (double)c->n_heads * sizeof(float)) + rounded(n * (double)c->n_kv_heads * sizeof(float));
    double kept = tensor_bytes(n * d) + (training ? rounded(n * sizeof(int32_t)) : 0) /* embedding, saved ids */
                  + (double)c->n_layers * layer + tensor_bytes(n * d) + rows          /* the final norm */
                  + tensor_bytes(n * vocab)                                           /* logits */
                  + tensor_bytes(1);                                                  /* the loss */
    /* scratch given back within one call: cross-entropy's row losses (and its lse without a tape) */
    double scratch = rounded(n * sizeof(double)) + (training ? 0 : rows);
    if (att.forward_scratch > scratch) scratch = att.forward_scratch;
    if (!training) return kept + scratch;

    /* the loss's saved rows (lse, targets) and struct; a scaled loss (accumulation) and its gradient */
    kept += 2 * rows + TG_ARENA_ALIGN + 2 * tensor_bytes(1) + 2 * rounded(sizeof(float));
    double grads = 4 * rounded(n * d * sizeof(float)) + 2 * rounded(n * kv * sizeof(float)) +
                   hidden_tensors * rounded(n * hidden * sizeof(float));
    double norm_sums = (double)(2 * c->n_layers + 1) * rounded(d * sizeof(double));
    if (c->qk_norm) { /* the gradients before QK-norm, and its gains' sums */
        grads += rounded(n * d * sizeof(float)) + rounded(n * kv * sizeof(float));
        norm_sums += (double)(2 * c->n_layers) * rounded((double)head_dim * sizeof(double));
    }
    if (att.backward_scratch > scratch) scratch = att.backward_scratch;
    return kept + grads + norm_sums + scratch;
}
