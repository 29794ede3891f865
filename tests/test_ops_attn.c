/* attention, embedding and cross-entropy: their finite-difference checks, plus what a
 * gradient check cannot see: the forward values against naive double-precision references,
 * causality, KV-cache decoding against the full computation, bitwise equality across thread
 * counts, and exact sums in the embedding's scatter-add. */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "lib/cpu.h"
#include "lib/kernels.h"
#include "ops/checks.h"
#include "tapegrad/ops.h"
#include "testutil.h"

/* The tests that compare against references, across thread counts and against recomputation run
 * on every kernel path this CPU supports (lib/cpu.h): FOR_EACH_PATH(isa) { ... } */
static bool select_path(TgIsa isa) {
    cr_assert_eq(tg_isa_set(isa), TG_OK);
    return true;
}
#define FOR_EACH_PATH(isa)                                                            \
    for (TgIsa isa = TG_ISA_GENERIC; (int)isa < TG_ISA_COUNT; isa = (TgIsa)(isa + 1)) \
        if (tg_isa_supported(isa) && select_path(isa))

/* ---- the registered gradient checks run in test_gradcheck.c; here the backward's other path ---- */

/* attention's cases with P recomputed in the backward instead of kept */
Test(gradcheck_attn, attention_recomputing_probs) {
    TestTape tt;
    test_tape_init(&tt, 1);
    tg_tape_set_saved_probs_limit(&tt.tape, 0);
    int failures = tg_op_checks_run("attention", &tt.tape, 2024, 1, tg_op_check_print_failures, stderr);
    test_tape_free(&tt);
    cr_assert_gt(tg_op_check_cases_of("attention"), 0);
    cr_assert_eq(failures, 0, "%d attention case(s) failed with recomputed probabilities", failures);
}

/* ---- attention helpers ---- */

typedef struct {
    int64_t batch, q_len, kv_len, heads, kv_heads, head_dim;
} AttnShape;

typedef struct {
    TgTensor *q, *k, *v;   /* (B,Tq,H*hd), (B,Tk,KVH*hd), (B,Tk,KVH*hd) */
} Qkv;

static Qkv qkv_new(AttnShape s, uint64_t seed) {
    TgRng rng;
    tg_rng_seed(&rng, seed);
    Qkv t;
    t.q = test_tensor("q", 3, (int64_t[]){s.batch, s.q_len, s.heads * s.head_dim}, &rng, -1, 1);
    t.k = test_tensor("k", 3, (int64_t[]){s.batch, s.kv_len, s.kv_heads * s.head_dim}, &rng, -1, 1);
    t.v = test_tensor("v", 3, (int64_t[]){s.batch, s.kv_len, s.kv_heads * s.head_dim}, &rng, -1, 1);
    return t;
}

static void qkv_free(Qkv t) {
    test_tensor_free(t.q);
    test_tensor_free(t.k);
    test_tensor_free(t.v);
}

/* tokens [from, from + count) of x (B, T, C) as a new heap tensor (B, count, C) */
static TgTensor *slice_tokens(const TgTensor *x, int64_t from, int64_t count) {
    int64_t batch = x->shape[0], len = x->shape[1], width = x->shape[2];
    TgTensor *y = test_tensor(x->name, 3, (int64_t[]){batch, count, width}, NULL, 0, 0);
    for (int64_t b = 0; b < batch; b++)
        memcpy(y->data + b * count * width, x->data + (b * len + from) * width,
               (size_t)(count * width) * sizeof(float));
    return y;
}

/* The definition, in double, written independently of ops/attention.c: explicit scores over
 * all keys, -inf above the causal diagonal, softmax, weighted sum. With dout given, also the
 * gradients (dq, dk, dv zeroed here), from the same explicit P. */
static void naive_attention(AttnShape s, const TgTensor *q, const TgTensor *k, const TgTensor *v,
                            double *out, const float *dout, double *dq, double *dk, double *dv) {
    int64_t hd = s.head_dim, group = s.heads / s.kv_heads;
    int64_t qw = s.heads * hd, kw = s.kv_heads * hd;
    double scale = 1.0 / sqrt((double)hd);
    double *scores = malloc((size_t)s.kv_len * sizeof(double));
    double *dp = malloc((size_t)s.kv_len * sizeof(double));
    if (dq) memset(dq, 0, (size_t)q->numel * sizeof(double));
    if (dk) memset(dk, 0, (size_t)k->numel * sizeof(double));
    if (dv) memset(dv, 0, (size_t)v->numel * sizeof(double));
    for (int64_t b = 0; b < s.batch; b++)
        for (int64_t h = 0; h < s.heads; h++) {
            int64_t g = h / group;
            for (int64_t t = 0; t < s.q_len; t++) {
                int64_t pos = s.kv_len - s.q_len + t;
                const float *qt = q->data + (b * s.q_len + t) * qw + h * hd;
                double max_score = -INFINITY;
                for (int64_t j = 0; j < s.kv_len; j++) {
                    const float *kj = k->data + (b * s.kv_len + j) * kw + g * hd;
                    double dot = 0;
                    for (int64_t d = 0; d < hd; d++) dot += (double)qt[d] * kj[d];
                    scores[j] = j <= pos ? dot * scale : -INFINITY;
                    max_score = fmax(max_score, scores[j]);
                }
                double denom = 0;
                for (int64_t j = 0; j < s.kv_len; j++) denom += exp(scores[j] - max_score);
                for (int64_t j = 0; j < s.kv_len; j++) scores[j] = exp(scores[j] - max_score) / denom;
                double *ot = out + (b * s.q_len + t) * qw + h * hd;
                for (int64_t d = 0; d < hd; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j < s.kv_len; j++)
                        acc += scores[j] * v->data[(b * s.kv_len + j) * kw + g * hd + d];
                    ot[d] = acc;
                }
                if (!dout) continue;
                const float *dout_t = dout + (b * s.q_len + t) * qw + h * hd;
                double p_dot_dp = 0;
                for (int64_t j = 0; j < s.kv_len; j++) {
                    const float *vj = v->data + (b * s.kv_len + j) * kw + g * hd;
                    dp[j] = 0;
                    for (int64_t d = 0; d < hd; d++) dp[j] += (double)dout_t[d] * vj[d];
                    p_dot_dp += scores[j] * dp[j];
                }
                for (int64_t j = 0; j < s.kv_len; j++) {
                    double ds = scores[j] * (dp[j] - p_dot_dp) * scale;
                    int64_t kv_at = (b * s.kv_len + j) * kw + g * hd;
                    for (int64_t d = 0; d < hd; d++) {
                        dv[kv_at + d] += scores[j] * dout_t[d];
                        dq[(b * s.q_len + t) * qw + h * hd + d] += ds * k->data[kv_at + d];
                        dk[kv_at + d] += ds * qt[d];
                    }
                }
            }
        }
    free(scores);
    free(dp);
}

/* max |a - b| over n elements, against max(max |b|, 1) */
static double rel_diff(const float *a, const double *b, int64_t n) {
    double worst = 0, scale = 1;
    for (int64_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs(a[i] - b[i]));
        scale = fmax(scale, fabs(b[i]));
    }
    return worst / scale;
}

static void check_against_reference(AttnShape s, uint64_t seed, bool with_backward) {
    TestTape tt;
    test_tape_init(&tt, 1);
    Qkv in = qkv_new(s, seed);
    in.q->requires_grad = in.k->requires_grad = in.v->requires_grad = with_backward;
    TgTensor *out = tg_attention(&tt.tape, in.q, in.k, in.v, s.heads, s.kv_heads);
    cr_assert_eq(out->ndim, 3);
    cr_assert(out->shape[0] == s.batch && out->shape[1] == s.q_len && out->shape[2] == s.heads * s.head_dim);

    double *ref = malloc((size_t)out->numel * sizeof(double));
    double *dq = malloc((size_t)in.q->numel * sizeof(double));
    double *dk = malloc((size_t)in.k->numel * sizeof(double));
    double *dv = malloc((size_t)in.v->numel * sizeof(double));
    TgRng rng;
    tg_rng_seed(&rng, seed + 1);
    TgTensor *dout = test_tensor("dout", 3, out->shape, &rng, -1, 1);
    naive_attention(s, in.q, in.k, in.v, ref, with_backward ? dout->data : NULL, dq, dk, dv);
    double err = rel_diff(out->data, ref, out->numel);
    cr_expect_lt(err, 1e-5, "forward off by %g (T=%lld hd=%lld)", err, (long long)s.q_len,
                 (long long)s.head_dim);
    if (with_backward) {
        memcpy(tg_tensor_grad(&tt.tape, out), dout->data, (size_t)out->numel * sizeof(float));
        tg_tape_backward_from_seeded(&tt.tape);
        double eq = rel_diff(in.q->grad, dq, in.q->numel), ek = rel_diff(in.k->grad, dk, in.k->numel),
               ev = rel_diff(in.v->grad, dv, in.v->numel);
        cr_expect_lt(eq, 1e-5, "dq off by %g", eq);
        cr_expect_lt(ek, 1e-5, "dk off by %g", ek);
        cr_expect_lt(ev, 1e-5, "dv off by %g", ev);
    }
    free(ref);
    free(dq);
    free(dk);
    free(dv);
    test_tensor_free(dout);
    qkv_free(in);
    test_tape_free(&tt);
}

/* ---- attention ---- */

Test(attention, forward_matches_naive_double_reference) {
    check_against_reference((AttnShape){2, 9, 9, 4, 2, 8}, 11, false);
}

/* 83 keys and hd 72 take the 64- and 16-wide blocks and the scalar tails of every product,
 * forward and backward; Tq < Tk as in chunked decoding. */
Test(attention, forward_and_backward_match_reference_on_wide_heads) {
    FOR_EACH_PATH(isa) {
        check_against_reference((AttnShape){1, 83, 83, 4, 2, 72}, 12, true);
        check_against_reference((AttnShape){2, 21, 83, 2, 1, 72}, 13, true);
    }
}

/* Output rows <= t must not depend on q, k or v at positions > t: perturb those, the early rows
 * stay bitwise equal (and the late rows do change, so the perturbation is real). */
Test(attention, causal_rows_ignore_later_positions) {
    AttnShape s = {2, 9, 9, 4, 2, 8};
    TestTape tt;
    test_tape_init(&tt, 1);
    Qkv base = qkv_new(s, 21);
    TgTensor *out = tg_attention(&tt.tape, base.q, base.k, base.v, s.heads, s.kv_heads);
    int64_t width = out->shape[2];
    float *expected = malloc((size_t)out->numel * sizeof(float));
    memcpy(expected, out->data, (size_t)out->numel * sizeof(float));
    tg_tape_reset(&tt.tape);

    TgRng rng;
    tg_rng_seed(&rng, 22);
    for (int64_t t = 0; t + 1 < s.q_len; t++) {
        Qkv changed = qkv_new(s, 21);
        TgTensor *all[3] = {changed.q, changed.k, changed.v};
        for (int m = 0; m < 3; m++) {
            int64_t w = all[m]->shape[2];
            for (int64_t b = 0; b < s.batch; b++)
                for (int64_t later = t + 1; later < s.q_len; later++)
                    for (int64_t c = 0; c < w; c++) all[m]->data[(b * s.q_len + later) * w + c] += tg_rng_uniform(&rng) + 0.5f;
        }
        TgTensor *got = tg_attention(&tt.tape, changed.q, changed.k, changed.v, s.heads, s.kv_heads);
        for (int64_t b = 0; b < s.batch; b++) {
            const float *row0 = got->data + b * s.q_len * width, *exp0 = expected + b * s.q_len * width;
            cr_expect(memcmp(row0, exp0, (size_t)((t + 1) * width) * sizeof(float)) == 0,
                      "batch %lld: rows <= %lld changed when later positions did", (long long)b, (long long)t);
            cr_expect(memcmp(row0 + (t + 1) * width, exp0 + (t + 1) * width,
                             (size_t)((s.q_len - t - 1) * width) * sizeof(float)) != 0,
                      "batch %lld: rows > %lld did not change", (long long)b, (long long)t);
        }
        tg_tape_reset(&tt.tape);
        qkv_free(changed);
    }
    free(expected);
    qkv_free(base);
    test_tape_free(&tt);
}

/* KV-cache decoding: query s alone against keys 0..=s gives row s of the full computation;
 * and a chunk of the last 4 queries against all keys gives the last 4 rows. */
static void check_decoding(AttnShape s, uint64_t seed) {
    TestTape tt;
    test_tape_init(&tt, 1);
    Qkv full = qkv_new(s, seed);
    TgTensor *out = tg_attention(&tt.tape, full.q, full.k, full.v, s.heads, s.kv_heads);
    int64_t width = out->shape[2];
    double worst = 0;
    for (int64_t pos = 0; pos < s.q_len; pos++) {
        TgTensor *q1 = slice_tokens(full.q, pos, 1), *k1 = slice_tokens(full.k, 0, pos + 1),
               *v1 = slice_tokens(full.v, 0, pos + 1);
        TgTensor *step = tg_attention(&tt.tape, q1, k1, v1, s.heads, s.kv_heads);   // (B,1,H*hd)
        cr_assert_eq(step->shape[1], 1);
        for (int64_t b = 0; b < s.batch; b++)
            for (int64_t c = 0; c < width; c++)
                worst = fmax(worst, fabs(step->data[b * width + c] - out->data[(b * s.q_len + pos) * width + c]));
        test_tensor_free(q1);
        test_tensor_free(k1);
        test_tensor_free(v1);
    }
    cr_expect_leq(worst, 1e-6, "decoding step differs from the full row by %g", worst);

    int64_t chunk = 4;
    TgTensor *q_last = slice_tokens(full.q, s.q_len - chunk, chunk);
    TgTensor *last = tg_attention(&tt.tape, q_last, full.k, full.v, s.heads, s.kv_heads);   // (B,4,H*hd)
    worst = 0;
    for (int64_t b = 0; b < s.batch; b++)
        for (int64_t t = 0; t < chunk; t++)
            for (int64_t c = 0; c < width; c++)
                worst = fmax(worst, fabs(last->data[(b * chunk + t) * width + c] -
                                         out->data[(b * s.q_len + s.q_len - chunk + t) * width + c]));
    cr_expect_leq(worst, 1e-6, "a chunk of %lld queries differs from the full rows by %g", (long long)chunk, worst);
    test_tensor_free(q_last);
    qkv_free(full);
    test_tape_free(&tt);
}

Test(attention, decode_step_matches_full_row) {
    check_decoding((AttnShape){2, 9, 9, 4, 2, 8}, 31);
    check_decoding((AttnShape){1, 40, 40, 4, 1, 72}, 32);
}

/* Forward output and q/k/v gradients of one run, copied out of the arena. */
typedef struct {
    float *out, *dq, *dk, *dv;
} AttnRun;

static AttnRun run_attention(int threads, AttnShape s, uint64_t seed, size_t saved_probs_limit) {
    TestTape tt;
    test_tape_init(&tt, threads);
    tg_tape_set_saved_probs_limit(&tt.tape, saved_probs_limit);
    cr_assert_eq(tg_pool_threads(tt.pool), threads);
    Qkv in = qkv_new(s, seed);
    in.q->requires_grad = in.k->requires_grad = in.v->requires_grad = true;
    TgTensor *out = tg_attention(&tt.tape, in.q, in.k, in.v, s.heads, s.kv_heads);
    TgRng rng;
    tg_rng_seed(&rng, seed + 7);
    tg_rng_fill_uniform(&rng, tg_tensor_grad(&tt.tape, out), (size_t)out->numel, -1, 1);
    tg_tape_backward_from_seeded(&tt.tape);
    AttnRun run;
    TgTensor *src[4] = {out, in.q, in.k, in.v};
    float **dst[4] = {&run.out, &run.dq, &run.dk, &run.dv};
    for (int m = 0; m < 4; m++) {
        *dst[m] = malloc((size_t)src[m]->numel * sizeof(float));
        memcpy(*dst[m], m == 0 ? src[m]->data : src[m]->grad, (size_t)src[m]->numel * sizeof(float));
    }
    qkv_free(in);
    test_tape_free(&tt);
    return run;
}

Test(attention, two_threads_bitwise_equal_one_thread) {
    AttnShape shapes[] = {{2, 9, 9, 4, 2, 8}, {3, 37, 37, 4, 2, 72}, {3, 5, 37, 4, 1, 16}};
    FOR_EACH_PATH(isa)
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        AttnShape s = shapes[i];
        AttnRun one = run_attention(1, s, 41 + i, TG_TAPE_SAVED_PROBS_LIMIT);
        AttnRun two = run_attention(2, s, 41 + i, TG_TAPE_SAVED_PROBS_LIMIT);
        size_t q_bytes = (size_t)(s.batch * s.q_len * s.heads * s.head_dim) * sizeof(float);
        size_t kv_bytes = (size_t)(s.batch * s.kv_len * s.kv_heads * s.head_dim) * sizeof(float);
        const char *path = tg_isa_name(isa);
        cr_expect(memcmp(one.out, two.out, q_bytes) == 0, "%s, shape %zu: forward differs", path, i);
        cr_expect(memcmp(one.dq, two.dq, q_bytes) == 0, "%s, shape %zu: dq differs", path, i);
        cr_expect(memcmp(one.dk, two.dk, kv_bytes) == 0, "%s, shape %zu: dk differs", path, i);
        cr_expect(memcmp(one.dv, two.dv, kv_bytes) == 0, "%s, shape %zu: dv differs", path, i);
        AttnRun runs[2] = {one, two};
        for (int r = 0; r < 2; r++) {
            free(runs[r].out);
            free(runs[r].dq);
            free(runs[r].dk);
            free(runs[r].dv);
        }
    }
}

/* Keeping P or recomputing it in the backward gives the same bits, on 1 and 2 threads. */
Test(attention, recomputed_probs_give_the_same_bits_as_kept_ones) {
    AttnShape shapes[] = {{2, 9, 9, 4, 2, 8}, {3, 37, 37, 4, 2, 72}, {3, 5, 37, 4, 1, 16}};
    FOR_EACH_PATH(isa)
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int threads = 1; threads <= 2; threads++) {
            AttnShape s = shapes[i];
            AttnRun kept = run_attention(threads, s, 61 + i, TG_TAPE_SAVED_PROBS_LIMIT);
            AttnRun recomputed = run_attention(threads, s, 61 + i, 0);
            size_t q_bytes = (size_t)(s.batch * s.q_len * s.heads * s.head_dim) * sizeof(float);
            size_t kv_bytes = (size_t)(s.batch * s.kv_len * s.kv_heads * s.head_dim) * sizeof(float);
            const char *path = tg_isa_name(isa);
            cr_expect(memcmp(kept.out, recomputed.out, q_bytes) == 0, "%s, shape %zu: forward differs", path, i);
            cr_expect(memcmp(kept.dq, recomputed.dq, q_bytes) == 0, "%s, shape %zu, %d threads: dq differs", path, i, threads);
            cr_expect(memcmp(kept.dk, recomputed.dk, kv_bytes) == 0, "%s, shape %zu, %d threads: dk differs", path, i, threads);
            cr_expect(memcmp(kept.dv, recomputed.dv, kv_bytes) == 0, "%s, shape %zu, %d threads: dv differs", path, i, threads);
            AttnRun runs[2] = {kept, recomputed};
            for (int r = 0; r < 2; r++) {
                free(runs[r].out);
                free(runs[r].dq);
                free(runs[r].dk);
                free(runs[r].dv);
            }
        }
}

/* The forward leaves most of P's upper triangle unwritten and the blocked products read a few
 * entries past the diagonal, which must be the zeros written there. With the arena filled with
 * NaN first, any read of memory that was not written would make an output or a gradient NaN. */
Test(attention, reads_only_what_it_wrote) {
    AttnShape shapes[] = {{1, 30, 30, 2, 2, 5}, {2, 21, 83, 2, 1, 72}, {2, 1, 5, 4, 2, 4}, {1, 17, 17, 3, 3, 17}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        AttnShape s = shapes[i];
        enum { ARENA_BYTES = 8 << 20 };
        TgArena arena;
        tg_arena_init(&arena, ARENA_BYTES);
        float *poison = tg_arena_alloc(&arena, ARENA_BYTES);   /* the whole chunk, reused after reset */
        for (size_t f = 0; f < ARENA_BYTES / sizeof(float); f++) poison[f] = NAN;
        tg_arena_reset(&arena);
        TgPool *pool = i % 2 ? tg_pool_create(2) : NULL;
        TgTape tape;
        tg_tape_init(&tape, &arena, pool);
        Qkv in = qkv_new(s, 71 + i);
        in.q->requires_grad = in.k->requires_grad = in.v->requires_grad = true;
        TgTensor *out = tg_attention(&tape, in.q, in.k, in.v, s.heads, s.kv_heads);
        TgRng rng;
        tg_rng_seed(&rng, 81 + i);
        tg_rng_fill_uniform(&rng, tg_tensor_grad(&tape, out), (size_t)out->numel, -1, 1);
        tg_tape_backward_from_seeded(&tape);
        cr_assert_eq(arena.system_allocs, 1, "the arena grew: part of it was never poisoned");
        int64_t bad = 0;
        for (int64_t e = 0; e < out->numel; e++) bad += !isfinite(out->data[e]) || !isfinite(in.q->grad[e]);
        for (int64_t e = 0; e < in.k->numel; e++) bad += !isfinite(in.k->grad[e]) || !isfinite(in.v->grad[e]);
        cr_expect_eq(bad, 0, "shape %zu: %lld outputs or gradients are not finite", i, (long long)bad);
        qkv_free(in);
        tg_tape_free(&tape);
        tg_pool_destroy(pool);
        tg_arena_free(&arena);
    }
}

/* ---- packed rows (tg_attention_segmented) ---- */

/* Rows of t tokens (heads, kv_heads, hd) packed with sequences of the given lengths (ending at
 * the row's end). Each sequence must get, in the packed row, bitwise what it gets alone: its
 * outputs and its q, k, v gradients, from the same upstream gradient; on every path, 1 and 2
 * threads, P kept and recomputed, and with the arena poisoned with NaN, so that a read of a
 * score of another sequence, or of memory not written, shows. */
typedef struct {
    int64_t heads, kv_heads, head_dim, n_rows, seq;
    int n_segments[2];
    int64_t lengths[2][10];
} PackedCase;

/* out/dq/dk/dv of attention over the (B, T, width) tensors x[0..2], upstream gradient dout, key_start or
 * NULL; copied out (caller frees). The arena is poisoned with NaN first. */
static void packed_run(const PackedCase *pc, TgTensor *const x[3], const float *dout,
                       const int32_t *key_start, int threads, size_t saved_probs_limit, float *out_copy,
                       float *grads_copy[3]) {
    enum { ARENA_BYTES = 4 << 20 };
    TgArena arena;
    tg_arena_init(&arena, ARENA_BYTES);
    float *poison = tg_arena_alloc(&arena, ARENA_BYTES);
    for (size_t f = 0; f < ARENA_BYTES / sizeof(float); f++) poison[f] = NAN;
    tg_arena_reset(&arena);
    TgPool *pool = threads > 1 ? tg_pool_create(threads) : NULL;
    TgTape tape;
    tg_tape_init(&tape, &arena, pool);
    tg_tape_set_saved_probs_limit(&tape, saved_probs_limit);
    for (int m = 0; m < 3; m++) {
        x[m]->requires_grad = true;
        x[m]->grad = NULL;
    }
    TgTensor *out = tg_attention_segmented(&tape, x[0], x[1], x[2], pc->heads, pc->kv_heads, key_start);
    memcpy(tg_tensor_grad(&tape, out), dout, (size_t)out->numel * sizeof(float));
    tg_tape_backward_from_seeded(&tape);
    cr_assert_eq(arena.system_allocs, 1, "the arena grew: part of it was never poisoned");
    memcpy(out_copy, out->data, (size_t)out->numel * sizeof(float));
    for (int m = 0; m < 3; m++) memcpy(grads_copy[m], x[m]->grad, (size_t)x[m]->numel * sizeof(float));
    tg_tape_free(&tape);
    tg_pool_destroy(pool);
    tg_arena_free(&arena);
}

static void check_packed(const PackedCase *pc, uint64_t seed, int threads, size_t saved_probs_limit) {
    int64_t B = pc->n_rows, T = pc->seq, hd = pc->head_dim;
    int64_t widths[3] = {pc->heads * hd, pc->kv_heads * hd, pc->kv_heads * hd};
    TgRng rng;
    tg_rng_seed(&rng, seed);
    TgTensor *x[3];
    for (int m = 0; m < 3; m++) x[m] = test_tensor("x", 3, (int64_t[]){B, T, widths[m]}, &rng, -1.5f, 1.5f);
    float *dout = malloc((size_t)(B * T * widths[0]) * sizeof(float));
    tg_rng_fill_uniform(&rng, dout, (size_t)(B * T * widths[0]), -1, 1);
    int32_t *key_start = malloc((size_t)(B * T) * sizeof(int32_t));
    for (int64_t b = 0; b < B; b++) {
        int64_t at = 0;
        for (int s = 0; s < pc->n_segments[b]; s++) {
            int64_t start = at;
            for (int64_t i = 0; i < pc->lengths[b][s]; i++) key_start[b * T + at++] = (int32_t)start;
        }
        cr_assert_eq(at, T, "the case's lengths of row %lld add up to %lld, not %lld", (long long)b, (long long)at, (long long)T);
    }
    float *out = malloc((size_t)(B * T * widths[0]) * sizeof(float)), *grads[3];
    for (int m = 0; m < 3; m++) grads[m] = malloc((size_t)(B * T * widths[m]) * sizeof(float));
    packed_run(pc, x, dout, key_start, threads, saved_probs_limit, out, grads);
    /* each sequence alone: a (1, len, w) copy of its tokens */
    for (int64_t b = 0; b < B; b++) {
        int64_t at = 0;
        for (int s = 0; s < pc->n_segments[b]; s++) {
            int64_t len = pc->lengths[b][s];
            TgTensor *y[3];
            for (int m = 0; m < 3; m++) {
                y[m] = test_tensor("y", 3, (int64_t[]){1, len, widths[m]}, NULL, 0, 0);
                memcpy(y[m]->data, x[m]->data + (b * T + at) * widths[m], (size_t)(len * widths[m]) * sizeof(float));
            }
            float *y_out = malloc((size_t)(len * widths[0]) * sizeof(float)), *y_grads[3];
            for (int m = 0; m < 3; m++) y_grads[m] = malloc((size_t)(len * widths[m]) * sizeof(float));
            packed_run(pc, y, dout + (b * T + at) * widths[0], NULL, threads, saved_probs_limit, y_out, y_grads);
            cr_expect(memcmp(y_out, out + (b * T + at) * widths[0], (size_t)(len * widths[0]) * sizeof(float)) == 0,
                      "row %lld, sequence %d: the output differs from the sequence's alone", (long long)b, s);
            static const char *const names[3] = {"dq", "dk", "dv"};
            for (int m = 0; m < 3; m++)
                cr_expect(memcmp(y_grads[m], grads[m] + (b * T + at) * widths[m], (size_t)(len * widths[m]) * sizeof(float)) == 0,
                          "row %lld, sequence %d: %s differs from the sequence's alone", (long long)b, s, names[m]);
            for (int m = 0; m < 3; m++) {
                test_tensor_free(y[m]);
                free(y_grads[m]);
            }
            free(y_out);
            at += len;
        }
    }
    for (int m = 0; m < 3; m++) {
        test_tensor_free(x[m]);
        free(grads[m]);
    }
    free(out), free(dout), free(key_start);
}

Test(attention, packed_sequences_get_what_they_get_alone) {
    static const PackedCase cases[] = {
        /* lengths cut unevenly into blocks of 4 queries and keys; a one-token tail (padding) */
        {4, 2, 8, 2, 23, {4, 3}, {{3, 6, 13, 1}, {5, 17, 1}}},
        /* the 16-wide vectors of the products and a sequence after a long one */
        {2, 1, 72, 1, 40, {2, 0}, {{21, 19}}},
        /* every token its own sequence, and one sequence filling a row */
        {3, 3, 5, 2, 9, {9, 1}, {{1, 1, 1, 1, 1, 1, 1, 1, 1}, {9}}},
    };
    FOR_EACH_PATH(isa)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int threads = 1; threads <= 2; threads++)
            for (int recompute = 0; recompute <= 1; recompute++)
                check_packed(&cases[i], 90 + i, threads, recompute ? 0 : TG_TAPE_SAVED_PROBS_LIMIT);
}

/* A key_start that moves backwards, or past its query's position, is a caller's bug. */
static void attend_with_bad_starts(void *ctx) {
    TestTape tt;
    test_tape_init(&tt, 1);
    Qkv in = qkv_new((AttnShape){1, 4, 4, 2, 2, 4}, 3);
    tg_attention_segmented(&tt.tape, in.q, in.k, in.v, 2, 2, ctx);
}

Test(attention, key_starts_out_of_order_abort) {
    static const int32_t backwards[] = {0, 1, 0, 3}, ahead[] = {0, 0, 3, 3};
    char msg[512];
    cr_expect_eq(test_run_expecting_abort(attend_with_bad_starts, (void *)backwards, msg, sizeof msg), SIGABRT);
    cr_expect(strstr(msg, "key_start 0 of query 2") != NULL, "%s", msg);
    cr_expect_eq(test_run_expecting_abort(attend_with_bad_starts, (void *)ahead, msg, sizeof msg), SIGABRT);
    cr_expect(strstr(msg, "key_start 3 of query 2") != NULL, "%s", msg);
}

/* ---- cross-entropy ---- */

Test(cross_entropy, uniform_logits_give_ln_vocab) {
    TestTape tt;
    test_tape_init(&tt, 2);
    int64_t rows = 5, vocab = 6400;
    TgTensor *logits = test_tensor("logits", 2, (int64_t[]){rows, vocab}, NULL, 0, 0);
    for (int64_t i = 0; i < logits->numel; i++) logits->data[i] = 0.37f;
    int32_t targets[] = {0, 6399, 17, -1, 3200};
    TgTensor *loss = tg_cross_entropy(&tt.tape, logits, targets, TG_IGNORE_INDEX);
    cr_assert_eq(loss->numel, 1);
    cr_expect_leq(fabs(loss->data[0] - log(6400.0)), 1e-5, "loss %.7f, ln(6400) = %.7f", loss->data[0], log(6400.0));
    test_tensor_free(logits);
    test_tape_free(&tt);
}

Test(cross_entropy, all_ignored_gives_zero_loss_and_no_gradient) {
    TestTape tt;
    test_tape_init(&tt, 1);
    TgRng rng;
    tg_rng_seed(&rng, 51);
    TgTensor *logits = test_tensor("logits", 3, (int64_t[]){2, 2, 11}, &rng, -3, 3);
    logits->requires_grad = true;
    int32_t targets[] = {-1, -1, -1, -1};
    TgTensor *loss = tg_cross_entropy(&tt.tape, logits, targets, TG_IGNORE_INDEX);
    cr_expect_eq(loss->data[0], 0.0f, "loss %g", loss->data[0]);
    tg_tape_backward(&tt.tape, loss);
    const float *g = tg_tensor_grad(&tt.tape, logits);
    for (int64_t i = 0; i < logits->numel; i++) cr_expect_eq(g[i], 0.0f, "grad[%lld] = %g", (long long)i, g[i]);
    test_tensor_free(logits);
    test_tape_free(&tt);
}

/* loss and gradient against the definition in double, with an ignored row and a custom index */
static void check_cross_entropy(int threads, int32_t ignore_index) {
    TestTape tt;
    test_tape_init(&tt, threads);
    TgRng rng;
    tg_rng_seed(&rng, 61);
    int64_t rows = 7, vocab = 37;
    TgTensor *logits = test_tensor("logits", 2, (int64_t[]){rows, vocab}, &rng, -4, 4);
    logits->requires_grad = true;
    int32_t targets[] = {0, 36, ignore_index, 5, 5, 20, 11};
    TgTensor *loss = tg_cross_entropy(&tt.tape, logits, targets, ignore_index);
    tg_tape_backward(&tt.tape, loss);

    double total = 0, count = 0;
    double *softmax = malloc((size_t)logits->numel * sizeof(double));
    for (int64_t r = 0; r < rows; r++) {
        const float *z = logits->data + r * vocab;
        double denom = 0;
        for (int64_t i = 0; i < vocab; i++) denom += exp((double)z[i]);
        for (int64_t i = 0; i < vocab; i++) softmax[r * vocab + i] = exp((double)z[i]) / denom;
        if (targets[r] == ignore_index) continue;
        total += -log(softmax[r * vocab + targets[r]]);
        count++;
    }
    double expected = total / count;
    cr_expect_leq(fabs(loss->data[0] - expected), 1e-6 * fabs(expected), "loss %.8f, expected %.8f", loss->data[0], expected);
    double worst = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < vocab; i++) {
            double want = targets[r] == ignore_index ? 0.0 : (softmax[r * vocab + i] - (i == targets[r])) / count;
            worst = fmax(worst, fabs(logits->grad[r * vocab + i] - want));
        }
    cr_expect_lt(worst, 1e-7, "dlogits off by %g", worst);
    for (int64_t i = 0; i < vocab; i++)
        cr_expect_eq(logits->grad[2 * vocab + i], 0.0f, "ignored row got a gradient");
    free(softmax);
    test_tensor_free(logits);
    test_tape_free(&tt);
}

Test(cross_entropy, matches_naive_reference) {
    check_cross_entropy(1, TG_IGNORE_INDEX);
    check_cross_entropy(2, -100);
}

/* The consuming loss writes dlogits over the logits' values: it refuses logits that a recorded
 * backward still reads, or that belong to the caller. */
typedef enum { READ_BY_SIGMOID, READ_BY_MUL, LEAF_LOGITS, NOT_READ } ConsumingCase;

static void record_consuming_loss(void *ctx) {
    ConsumingCase c = *(ConsumingCase *)ctx;
    TestTape tt;
    test_tape_init(&tt, 1);
    TgRng rng;
    tg_rng_seed(&rng, 7);
    TgTensor *x = test_tensor("x", 2, (int64_t[]){3, 5}, &rng, -1, 1);
    x->requires_grad = true;
    int32_t targets[] = {1, 4, 0};
    TgTensor *logits = x;
    if (c == READ_BY_SIGMOID) logits = tg_sigmoid(&tt.tape, x);   /* sigmoid's backward reads its output */
    if (c == READ_BY_MUL || c == NOT_READ) logits = tg_scale(&tt.tape, x, 2.0f);
    if (c == READ_BY_MUL) tg_mul(&tt.tape, logits, x);            /* mul's backward reads logits */
    TgTensor *loss = tg_cross_entropy_consuming(&tt.tape, logits, targets, TG_IGNORE_INDEX);
    tg_tape_backward(&tt.tape, loss);
    test_tensor_free(x);
    test_tape_free(&tt);
}

Test(cross_entropy, consuming_refuses_logits_still_needed) {
    char msg[1024];
    ConsumingCase c = READ_BY_SIGMOID;
    cr_expect_eq(test_run_expecting_abort(record_consuming_loss, &c, msg, sizeof msg), SIGABRT);
    cr_expect(strstr(msg, "the backward of 'sigmoid' reads the values of logits"), "%s", msg);
    c = READ_BY_MUL;
    cr_expect_eq(test_run_expecting_abort(record_consuming_loss, &c, msg, sizeof msg), SIGABRT);
    cr_expect(strstr(msg, "the backward of 'mul' reads the values of logits"), "%s", msg);
    c = LEAF_LOGITS;
    cr_expect_eq(test_run_expecting_abort(record_consuming_loss, &c, msg, sizeof msg), SIGABRT);
    cr_expect(strstr(msg, "were not computed on this tape"), "%s", msg);
    c = NOT_READ;
    cr_expect_eq(test_run_expecting_abort(record_consuming_loss, &c, msg, sizeof msg), 0, "%s", msg);
}

Test(cross_entropy, aborts_on_target_outside_vocab, .signal = SIGABRT) {
    TestTape tt;
    test_tape_init(&tt, 1);
    TgTensor *logits = test_tensor("logits", 2, (int64_t[]){2, 5}, NULL, 0, 0);
    int32_t targets[] = {1, 5};
    tg_cross_entropy(&tt.tape, logits, targets, TG_IGNORE_INDEX);
}

/* ---- embedding ---- */

/* out rows are the table's rows; dtable[v] = sum of dout over the tokens whose id is v, with
 * small integers so every sum is exact. Run on 1 and 2 threads (the backward splits columns). */
static void check_embedding_scatter(int threads) {
    TestTape tt;
    test_tape_init(&tt, threads);
    int64_t vocab = 5, dim = 3;
    TgTensor *table = test_tensor("table", 2, (int64_t[]){vocab, dim}, NULL, 0, 0);
    for (int64_t i = 0; i < table->numel; i++) table->data[i] = (float)(100 + i);
    table->requires_grad = true;
    const int32_t ids[] = {1, 3, 1, 1, 0, 3};   /* (2, 3): 1 three times, 3 twice, 2 and 4 never */
    TgTensor *out = tg_embedding(&tt.tape, table, ids, 2, (int64_t[]){2, 3});
    cr_assert(out->ndim == 3 && out->shape[0] == 2 && out->shape[1] == 3 && out->shape[2] == dim);
    for (int64_t n = 0; n < 6; n++)
        for (int64_t d = 0; d < dim; d++)
            cr_expect_eq(out->data[n * dim + d], table->data[ids[n] * dim + d]);

    float *dout = tg_tensor_grad(&tt.tape, out);   /* dout[n][d] = 10 (n + 1) + d */
    for (int64_t n = 0; n < 6; n++)
        for (int64_t d = 0; d < dim; d++) dout[n * dim + d] = (float)(10 * (n + 1) + d);
    tg_tape_backward_from_seeded(&tt.tape);
    const float expected[5][3] = {
        {50, 51, 52},                   /* id 0: token 4 */
        {10 + 30 + 40, 83, 86},         /* id 1: tokens 0, 2, 3 */
        {0, 0, 0},                      /* id 2: unused */
        {20 + 60, 82, 84},              /* id 3: tokens 1, 5 */
        {0, 0, 0},                      /* id 4: unused */
    };
    for (int64_t v = 0; v < vocab; v++)
        for (int64_t d = 0; d < dim; d++)
            cr_expect_eq(table->grad[v * dim + d], expected[v][d], "threads %d: dtable[%lld][%lld] = %g, expected %g",
                         threads, (long long)v, (long long)d, table->grad[v * dim + d], expected[v][d]);
    test_tensor_free(table);
    test_tape_free(&tt);
}

Test(embedding, backward_sums_rows_of_repeated_ids) {
    check_embedding_scatter(1);
    check_embedding_scatter(2);
}

Test(embedding, aborts_on_id_outside_table, .signal = SIGABRT) {
    TestTape tt;
    test_tape_init(&tt, 1);
    TgTensor *table = test_tensor("table", 2, (int64_t[]){4, 2}, NULL, 0, 0);
    const int32_t ids[] = {0, 4};
    tg_embedding(&tt.tape, table, ids, 1, (int64_t[]){2});
}
