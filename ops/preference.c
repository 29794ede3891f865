/* Preference training (DPO): the log-probability a model gives each sequence, and the DPO loss
 * over pairs of them.
 *
 * sequence_logprob: logits (B, T, V), targets (B*T) -> s (B), the sum over the counted targets of
 * sequence b of their log-probability:
 *
 *     s_b = sum_{t : target_bt != ignore} (z_bt[target_bt] - logsumexp(z_bt))
 *
 * dpo_loss: s (2P), the policy's log-probabilities of P chosen sequences then of their P rejected
 * ones, against the reference model's (constants, 2P) -> the scalar mean over pairs of
 *
 *     L_p = -log sigmoid(m_p),   m_p = beta ((s_c - ref_c) - (s_r - ref_r))
 *
 * (m_p is the pair's reward margin; docs/dpo.md). Neither op stores a softmax: the backward of
 * sequence_logprob recomputes it from the saved row logsumexp, as cross_entropy's does.
 */
#include <math.h>
#include <string.h>

#include "lib/kernels.h"
#include "ops/checks.h"
#include "tapegrad/error.h"
#include "tapegrad/ops.h"

/* ---- sequence_logprob ---- */

typedef struct {
    const float *logits;    /* (R, V), R = B T */
    const int32_t *targets; /* (R) */
    int32_t ignore_index;
    int64_t vocab, seq;
    float *lse;       /* (R) */
    double *row_logp; /* (R): forward only */
    const float *ds;  /* (B): backward only, dL/ds */
    float *dlogits;   /* (R, V): backward only */
    bool accumulate;  /* backward: add into dlogits (else store, zeros on ignored rows) */
} SequenceLogprobJob;

/* Forward, per row: log p(target) = z[target] - lse. */
static void sequence_logprob_forward_range(void *ctx, int64_t begin, int64_t end, int thread) {
    const SequenceLogprobJob *job = ctx;
    for (int64_t r = begin; r < end; r++) {
        job->row_logp[r] = 0.0;
        int32_t target = job->targets[r];
        if (target == job->ignore_index) continue;
        const float *z = job->logits + r * job->vocab; // (V)
        double lse = tg_kernels()->logsumexp(z, job->vocab);
        job->lse[r] = (float)lse;
        job->row_logp[r] = (double)z[target] - lse;
    }
}

/* Backward: dz_ri (+)= ds_b ([i == t_r] - softmax(z_r)_i), b = r / T, for counted rows only. */
static void sequence_logprob_backward_range(void *ctx, int64_t begin, int64_t end, int thread) {
    const SequenceLogprobJob *job = ctx;
    for (int64_t r = begin; r < end; r++) {
        int32_t target = job->targets[r];
        float *dz = job->dlogits + r * job->vocab; // (V)
        if (target == job->ignore_index) {
            if (!job->accumulate) memset(dz, 0, (size_t)job->vocab * sizeof(float));
            continue;
        }
        float ds = job->ds[r / job->seq];
        tg_kernels()->scaled_exp(job->logits + r * job->vocab, job->vocab, job->lse[r], -ds, dz, job->accumulate);
        dz[target] += ds;
    }
}

typedef struct {
    float *lse;       /* (R) */
    int32_t *targets; /* (R): a copy of the caller's */
} SequenceLogprobSaved;

static void sequence_logprob_backward(TgTape *tape, TgTapeNode *node) {
    TgTensor *logits = node->in[0];
    const SequenceLogprobSaved *saved = node->saved;
    SequenceLogprobJob job = {.logits = logits->data,
                              .targets = saved->targets,
                              .ignore_index = (int32_t)node->iparam[0],
                              .vocab = tg_tensor_dim(logits, -1),
                              .seq = tg_tensor_dim(logits, 1),
                              .lse = saved->lse,
                              .ds = node->out->grad};
    job.dlogits = tg_tensor_grad_for_write(tape, logits, &job.accumulate);
    tg_pool_parallel_for(tape->pool, tg_tensor_rows(logits), sequence_logprob_backward_range, &job);
}

TgTensor *tg_sequence_logprob(TgTape *tape, TgTensor *logits, const int32_t *targets, int32_t ignore_index) {
    TG_CHECK(logits->ndim == 3, "sequence_logprob: logits '%s' must be (B, T, V)", logits->name);
    int64_t batch = logits->shape[0], rows = tg_tensor_rows(logits), vocab = logits->shape[2];
    for (int64_t r = 0; r < rows; r++)
        TG_CHECK(targets[r] == ignore_index || (targets[r] >= 0 && targets[r] < vocab),
                 "sequence_logprob '%s': target %d at row %lld outside [0, %lld) and not ignore_index %d", logits->name,
                 (int)targets[r], (long long)r, (long long)vocab, (int)ignore_index);
    TgTensor *out = tg_tensor_new(tape->arena, "sequence_logprob", 1, (int64_t[]){batch}); // (B)
    bool recording = tape->grad_enabled && logits->requires_grad;
    SequenceLogprobSaved *saved = NULL;
    if (recording) {
        saved = tg_arena_alloc(tape->arena, sizeof *saved);
        saved->lse = tg_arena_alloc(tape->arena, (size_t)rows * sizeof(float));       // (R)
        saved->targets = tg_arena_alloc(tape->arena, (size_t)rows * sizeof(int32_t)); // (R)
        memcpy(saved->targets, targets, (size_t)rows * sizeof(int32_t));
    }
    TgArenaMark scratch = tg_arena_mark(tape->arena);
    SequenceLogprobJob job = {.logits = logits->data, .targets = targets, .ignore_index = ignore_index, .vocab = vocab};
    job.lse = recording ? saved->lse : tg_arena_alloc(tape->arena, (size_t)rows * sizeof(float));
    job.row_logp = tg_arena_alloc(tape->arena, (size_t)rows * sizeof(double)); // (R)
    tg_pool_parallel_for(tape->pool, rows, sequence_logprob_forward_range, &job);
    /* each sequence's sum in position order on the caller: the same bits on any thread count */
    int64_t seq = logits->shape[1];
    for (int64_t b = 0; b < batch; b++) {
        double s = 0.0;
        for (int64_t t = 0; t < seq; t++) s += job.row_logp[b * seq + t];
        out->data[b] = (float)s;
    }
    tg_arena_rewind(tape->arena, scratch);
    TgTapeNode *node =
        tg_tape_record(tape, tg_op_name(TG_OP_SEQUENCE_LOGPROB), sequence_logprob_backward, out, 1, &logits);
    if (node) {
        node->saved = saved;
        node->iparam[0] = ignore_index;
    }
    return out;
}

/* ---- dpo_loss ---- */

/* -log sigmoid(m) = log(1 + e^-m), without overflow for either sign of m. */
static double softplus_neg(double m) { return m > 0 ? log1p(exp(-m)) : -m + log1p(exp(m)); }

/* The reward margin of pair p, its chosen sequence at p and its rejected one at P + p:
 * m_p = beta ((s_c - ref_c) - (s_r - ref_r)). */
static double dpo_margin(const float *s, const float *ref, int64_t pairs, int64_t p, double beta) {
    return beta * (((double)s[p] - ref[p]) - ((double)s[pairs + p] - ref[pairs + p]));
}

/* Forward: L = (1/P) sum_p softplus(-m_p).
 * Backward: dL/dm_p = -sigmoid(-m_p) / P = -1 / (P (1 + e^m_p)); ds_c += dL beta dL/dm_p, and
 * ds_r the opposite. */
static void dpo_loss_backward(TgTape *tape, TgTapeNode *node) {
    TgTensor *s = node->in[0];
    const float *ref = node->saved;
    int64_t pairs = node->iparam[0];
    double beta = node->fparam[0], dloss = node->out->grad[0];
    bool accumulate;
    float *ds = tg_tensor_grad_for_write(tape, s, &accumulate); // (2P)
    for (int64_t p = 0; p < pairs; p++) {
        double dm = -1.0 / ((double)pairs * (1.0 + exp(dpo_margin(s->data, ref, pairs, p, beta))));
        float g = (float)(dloss * beta * dm);
        ds[p] = (accumulate ? ds[p] : 0.0f) + g;
        ds[pairs + p] = (accumulate ? ds[pairs + p] : 0.0f) - g;
    }
}

TgTensor *tg_dpo_loss(TgTape *tape, TgTensor *s, const float *ref, double beta) {
    TG_CHECK(s->ndim == 1 && s->shape[0] % 2 == 0 && s->shape[0] > 0,
             "dpo_loss: '%s' must hold the chosen then the rejected log-probabilities (2P)", s->name);
    int64_t pairs = s->shape[0] / 2;
    TgTensor *loss = tg_tensor_new(tape->arena, "dpo_loss", 0, NULL); // scalar
    double total = 0.0;
    for (int64_t p = 0; p < pairs; p++) total += softplus_neg(dpo_margin(s->data, ref, pairs, p, beta));
    loss->data[0] = (float)(total / (double)pairs);
    TgTapeNode *node = tg_tape_record(tape, tg_op_name(TG_OP_DPO_LOSS), dpo_loss_backward, loss, 1, &s);
    if (node) {
        float *kept = tg_arena_alloc(tape->arena, (size_t)(2 * pairs) * sizeof(float)); // (2P): the caller's may go
        memcpy(kept, ref, (size_t)(2 * pairs) * sizeof(float));
        node->saved = kept;
        node->iparam[0] = pairs;
        node->fparam[0] = beta;
    }
    return loss;
}

/* ---- gradient checks (tapegrad/op_list.h) ---- */

/* Targets made from the shape: row r is ignored when r % 4 == 2, else its target is
 * (V - 1 + 3 r) mod V (row 0 aims at the last column, in the vector kernels' tail); ctx unused. */
static TgTensor *fwd_sequence_logprob(TgTape *t, TgTensor *const *in, void *ctx) {
    int64_t rows = tg_tensor_rows(in[0]), vocab = tg_tensor_dim(in[0], -1);
    int32_t *targets = tg_arena_alloc(t->arena, (size_t)rows * sizeof *targets); // (rows)
    for (int64_t r = 0; r < rows; r++)
        targets[r] = r % 4 == 2 ? TG_IGNORE_INDEX : (int32_t)((vocab - 1 + 3 * r) % vocab);
    return tg_sequence_logprob(t, in[0], targets, TG_IGNORE_INDEX);
}

static const TgOpCheck sequence_logprob_cases[] = {
    {.variant = "B2 T5 V11", .inputs = {{"logits", {2, 5, 11}}}, .forward = fwd_sequence_logprob, .lo = -2, .hi = 2},
    {.variant = "B3 T3 V17", .inputs = {{"logits", {3, 3, 17}}}, .forward = fwd_sequence_logprob, .lo = -2, .hi = 2},
    {.variant = "B4 T7 V33", .inputs = {{"logits", {4, 7, 33}}}, .forward = fwd_sequence_logprob, .lo = -2, .hi = 2},
    {.variant = "B1 T2 V1", .inputs = {{"logits", {1, 2, 1}}}, .forward = fwd_sequence_logprob},
};
const TgOpCheckList tg_sequence_logprob_checks = TG_OP_CHECK_LIST(sequence_logprob_cases);

/* The reference's log-probabilities, 2P of them (P <= 4), and beta. */
typedef struct {
    float ref[8];
    double beta;
} DpoCheckParams;
static DpoCheckParams dpo_small_beta = {{-0.3f, 0.8f, -1.1f, 0.2f, 0.5f, -0.7f, 0.9f, -0.2f}, 0.1};
static DpoCheckParams dpo_large_beta = {{0.4f, -0.9f, 0.1f, 1.2f, -0.6f, 0.3f, -1.0f, 0.7f}, 2.5};

static TgTensor *fwd_dpo_loss(TgTape *t, TgTensor *const *in, void *ctx) {
    const DpoCheckParams *p = ctx;
    return tg_dpo_loss(t, in[0], p->ref, p->beta);
}

/* margins of both signs and of several sizes: beta 2.5 on [-3, 3) reaches |m| ~ 20 */
static const TgOpCheck dpo_loss_cases[] = {
    {.variant = "P1 beta 0.1",
     .inputs = {{"logps", {2}}},
     .forward = fwd_dpo_loss,
     .ctx = &dpo_small_beta,
     .lo = -3,
     .hi = 3},
    {.variant = "P4 beta 0.1",
     .inputs = {{"logps", {8}}},
     .forward = fwd_dpo_loss,
     .ctx = &dpo_small_beta,
     .lo = -3,
     .hi = 3},
    {.variant = "P3 beta 2.5",
     .inputs = {{"logps", {6}}},
     .forward = fwd_dpo_loss,
     .ctx = &dpo_large_beta,
     .lo = -3,
     .hi = 3},
    {.variant = "P4 beta 2.5",
     .inputs = {{"logps", {8}}},
     .forward = fwd_dpo_loss,
     .ctx = &dpo_large_beta,
     .lo = -1,
     .hi = 1},
};
const TgOpCheckList tg_dpo_loss_checks = TG_OP_CHECK_LIST(dpo_loss_cases);
