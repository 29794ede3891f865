/* Sampling: generation with the KV cache equals, at every step and through the context wrap, a
 * full recomputation of the window the wrap rule keeps; and the draw keeps its contract: top-k 1
 * is the argmax, no token outside the top k is drawn, the draws follow softmax(logits / T) over
 * the top k renormalised, and a temperature near 0 is the argmax; top-p never draws outside the
 * nucleus and draws within it renormalised; a repetition penalty of 1 changes nothing; greedy
 * decoding is deterministic.
 *
 * tg_sample_generate draws every token with tg_sample_token from the logits its observer sees (the
 * first test replays those draws exactly), so the statistical checks on tg_sample_token hold for the
 * generator too. Every random stream has a fixed seed: the chi-square checks are deterministic,
 * and their bound, the 0.1% quantile, would reject a correct sampler for 1 seed in 1000. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tapegrad/model.h"
#include "tapegrad/sample.h"

/* ------------------------------------------------------------------ helpers */

/* The tiny preset with a short context and one KV head (GQA); weights 10x their init so the
 * logits differ clearly from one context to the next. */
static void build_model(TgModel *m, int64_t vocab, int64_t seq_len, uint64_t seed) {
    TgModelConfig c;
    cr_assert_eq(tg_model_preset("tiny", &c), TG_OK);
    c.vocab = vocab;
    c.seq_len = seq_len;
    c.n_kv_heads = 1;
    tg_model_build(m, &c);
    tg_model_init_weights(m, seed);
    for (size_t i = 0; i < m->params.total; i++) m->params.data[i] *= 10.0f;
}

/* What the observer saw: the text length and a copy of the logits, step by step. */
typedef struct StepLog {
    int64_t vocab, steps, capacity;
    int64_t *len;  /* (capacity) */
    float *logits; /* (capacity, vocab) */
} StepLog;

static void step_log_init(StepLog *log, int64_t vocab, int64_t capacity) {
    log->vocab = vocab;
    log->steps = 0;
    log->capacity = capacity;
    log->len = malloc((size_t)capacity * sizeof *log->len);
    log->logits = malloc((size_t)(capacity * vocab) * sizeof *log->logits);
}

static void step_log_free(StepLog *log) {
    free(log->len);
    free(log->logits);
}

static void record_step(void *ctx, const int32_t *text, int64_t len, const float *logits, int64_t vocab) {
    StepLog *log = ctx;
    (void)text;
    cr_assert_lt(log->steps, log->capacity, "observer called more often than tokens were asked for");
    cr_assert_eq(vocab, log->vocab);
    log->len[log->steps] = len;
    memcpy(log->logits + log->steps * vocab, logits, (size_t)vocab * sizeof(float));
    log->steps++;
}

/* tg_sample_generate with the observer on, seeded; out holds prompt_len + n_new tokens. */
static int64_t generate_logged(TgModel *m, TgTape *tape, const int32_t *prompt, int64_t prompt_len, int64_t n_new,
                               double temperature, int top_k, uint64_t seed, int32_t *out, StepLog *log) {
    TgSampleOptions opts = {.temperature = temperature, .top_k = top_k, .observer = record_step, .observer_ctx = log};
    TgRng rng;
    tg_rng_seed(&rng, seed);
    return tg_sample_generate(&(TgSampler){m, tape, &opts, &rng}, prompt, prompt_len, n_new, -1, out);
}

/* The most likely token, the lowest id on ties. */
static int32_t argmax(const float *logits, int64_t vocab) {
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; i++)
        if (logits[i] > logits[best]) best = i;
    return (int32_t)best;
}

/* How many tokens rank above `token`: a larger logit, or the same logit and a lower id. */
static int64_t rank_of(const float *logits, int64_t vocab, int32_t token) {
    int64_t above = 0;
    for (int64_t i = 0; i < vocab; i++)
        if (logits[i] > logits[token] || (logits[i] == logits[token] && i < token)) above++;
    return above;
}

/* softmax(logits / temperature) in double. */
static void softmax_at(const float *logits, int64_t vocab, double temperature, double *p) {
    double max = -INFINITY, total = 0.0;
    for (int64_t i = 0; i < vocab; i++) max = fmax(max, logits[i]);
    for (int64_t i = 0; i < vocab; i++) total += p[i] = exp((logits[i] - max) / temperature);
    for (int64_t i = 0; i < vocab; i++) p[i] /= total;
}

/* Pearson's statistic of counts (n draws) against probabilities p over the cells with p > 0;
 * a count in a cell of probability 0 makes it infinite. */
static double chi_square(const int64_t *counts, const double *p, int64_t cells, int64_t n) {
    double stat = 0.0;
    for (int64_t i = 0; i < cells; i++) {
        if (p[i] == 0.0) {
            if (counts[i] > 0) return INFINITY;
            continue;
        }
        double expect = p[i] * (double)n, d = (double)counts[i] - expect;
        stat += d * d / expect;
    }
    return stat;
}

/* 0.999 quantiles of chi-square with 3 and 9 degrees of freedom */
#define CHI2_999_DF3 16.266
#define CHI2_999_DF9 27.877

/* Counts of n draws of tg_sample_token from one row of logits. */
static void draw_counts(const float *logits, int64_t vocab, double temperature, int top_k, uint64_t seed, int64_t n,
                        int64_t *counts) {
    TgSampleOptions opts = {.temperature = temperature, .top_k = top_k};
    float *probs = malloc((size_t)vocab * sizeof *probs);
    int32_t *ids = malloc((size_t)vocab * sizeof *ids);
    TgRng rng;
    tg_rng_seed(&rng, seed);
    memset(counts, 0, (size_t)vocab * sizeof *counts);
    for (int64_t i = 0; i < n; i++) {
        int32_t t = tg_sample_token(logits, vocab, &opts, &rng, probs, ids);
        cr_assert(t >= 0 && t < vocab, "token %d outside the vocabulary", t);
        counts[t]++;
    }
    free(probs);
    free(ids);
}

/* ------------------------------------------------------------------ the context wrap */

/* sample.h's wrap rule: the context is the whole text until the text outgrows seq_len tokens;
 * then the cache restarts from the last max(seq_len/2, 1) tokens and grows from there. Given the
 * window's start for the text so far, returns its start once the text has len tokens. */
static int64_t window_start(int64_t start, int64_t len, int64_t seq_len) {
    int64_t keep = seq_len / 2 > 0 ? seq_len / 2 : 1;
    return len - start > seq_len ? len - keep : start;
}

Test(sample, kv_cache_generation_through_the_context_wrap_equals_full_recomputation) {
    const int64_t vocab = 37, seq_lens[] = {1, 2, 7, 12};
    const double temperatures[] = {0.0, 1.0};
    TestTape tt;
    test_tape_init(&tt, 1);
    tg_tape_set_grad_enabled(&tt.tape, false);
    float *probs = malloc((size_t)vocab * sizeof *probs);
    int32_t *ids = malloc((size_t)vocab * sizeof *ids);
    for (size_t si = 0; si < sizeof seq_lens / sizeof seq_lens[0]; si++) {
        int64_t seq = seq_lens[si], n_new = 6 * seq + 5;
        TgModel m;
        build_model(&m, vocab, seq, 3 + (uint64_t)seq);
        int32_t prompt[12];
        for (int64_t i = 0; i < seq; i++) prompt[i] = (int32_t)((i * 7 + 3) % vocab);
        const int64_t prompt_lens[] = {1, (seq + 1) / 2, seq};
        for (size_t pi = 0; pi < 3; pi++)
            for (size_t ti = 0; ti < 2; ti++) {
                int64_t plen = prompt_lens[pi];
                if (pi > 0 && plen == prompt_lens[pi - 1]) continue;
                double temperature = temperatures[ti];
                uint64_t seed = 100 + pi * 10 + ti;
                int32_t *out = malloc((size_t)(plen + n_new) * sizeof *out);
                StepLog log;
                step_log_init(&log, vocab, n_new);
                int64_t total = generate_logged(&m, &tt.tape, prompt, plen, n_new, temperature, 0, seed, out, &log);
                cr_assert_eq(total, plen + n_new);
                cr_assert_eq(log.steps, n_new, "observer called %lld times for %lld tokens", (long long)log.steps,
                             (long long)n_new);
                TgSampleOptions opts = {.temperature = temperature};
                TgRng replay;
                tg_rng_seed(&replay, seed);
                int64_t start = 0, restarts = 0, bad_step = -1, bad_start = 0;
                double bad_diff = 0.0, bad_scale = 0.0;
                for (int64_t s = 0; s < n_new; s++) {
                    int64_t len = plen + s;
                    cr_assert_eq(log.len[s], len, "step %lld sees %lld tokens", (long long)s, (long long)log.len[s]);
                    int64_t next = window_start(start, len, seq);
                    restarts += next != start;
                    start = next;
                    TgTensor *full = tg_model_forward(
                        &m, &tt.tape, &(TgBatch){.tokens = out + start, .batch = 1, .seq = len - start}, NULL);
                    const float *want = full->data + (len - start - 1) * vocab;
                    const float *got = log.logits + s * vocab;
                    double diff = 0.0, scale = 0.0;
                    for (int64_t v = 0; v < vocab; v++) {
                        diff = fmax(diff, fabs((double)got[v] - want[v]));
                        scale = fmax(scale, fabs(want[v]));
                    }
                    if (bad_step < 0 && !(diff <= 1e-4 * scale)) {
                        bad_step = s, bad_start = start, bad_diff = diff, bad_scale = scale;
                    }
                    if (temperature == 0.0)
                        cr_expect_eq(out[len], argmax(want, vocab), "seq %lld prompt %lld step %lld: greedy %d, argmax %d",
                                     (long long)seq, (long long)plen, (long long)s, out[len], argmax(want, vocab));
                    tg_tape_reset(&tt.tape);
                    /* the token is tg_sample_token's draw from exactly these logits */
                    int32_t drawn = tg_sample_token(got, vocab, &opts, &replay, probs, ids);
                    cr_expect_eq(out[len], drawn, "seq %lld prompt %lld T %g step %lld: generated %d, replayed draw %d",
                                 (long long)seq, (long long)plen, temperature, (long long)s, out[len], drawn);
                }
                cr_expect_eq(bad_step, -1,
                             "seq %lld prompt %lld T %g: step %lld (window %lld..%lld): cached logits differ from "
                             "the recomputation by %g (scale %g)",
                             (long long)seq, (long long)plen, temperature, (long long)bad_step, (long long)bad_start,
                             (long long)(plen + bad_step - 1), bad_diff, bad_scale);
                cr_expect_geq(restarts, 5, "seq %lld prompt %lld: the window restarted only %lld times",
                              (long long)seq, (long long)plen, (long long)restarts);
                step_log_free(&log);
                free(out);
            }
        tg_model_free(&m);
    }
    free(probs);
    free(ids);
    test_tape_free(&tt);
}

/* ------------------------------------------------------------------ top-k */

Test(sample, top_k_1_is_the_argmax_at_any_temperature) {
    const int64_t vocab = 50;
    const double temperatures[] = {1e-3, 0.5, 1.0, 10.0, 1e4};
    float logits[50], probs[50];
    int32_t ids[50];
    TgRng data, rng;
    tg_rng_seed(&data, 21);
    tg_rng_seed(&rng, 22);
    for (size_t ti = 0; ti < sizeof temperatures / sizeof temperatures[0]; ti++) {
        TgSampleOptions top1 = {.temperature = temperatures[ti], .top_k = 1};
        int64_t wrong = 0;
        for (int64_t row = 0; row < 1000; row++) {
            tg_rng_fill_uniform(&data, logits, (size_t)vocab, -4.0f, 4.0f);
            wrong += tg_sample_token(logits, vocab, &top1, &rng, probs, ids) != argmax(logits, vocab);
        }
        cr_expect_eq(wrong, 0, "T %g: top-k 1 missed the argmax in %lld of 1000 rows", temperatures[ti], (long long)wrong);
    }
    /* a tie at the top: top-k 1 and greedy both take the lowest id */
    const float tied[5] = {0.5f, 2.0f, -1.0f, 2.0f, 2.0f};
    TgSampleOptions greedy = {.temperature = 0.0}, top1 = {.temperature = 1e4, .top_k = 1};
    cr_expect_eq(tg_sample_token(tied, 5, &greedy, &rng, probs, ids), 1);
    for (int i = 0; i < 100; i++) cr_expect_eq(tg_sample_token(tied, 5, &top1, &rng, probs, ids), 1);
}

Test(sample, generation_with_top_k_1_is_greedy_through_the_wrap) {
    const int64_t vocab = 29, seq = 8, n_new = 40;
    TgModel m;
    build_model(&m, vocab, seq, 5);
    TestTape tt;
    test_tape_init(&tt, 1);
    int32_t prompt[3] = {1, 2, 3}, greedy[43], out[43];
    StepLog log;
    step_log_init(&log, vocab, n_new);
    generate_logged(&m, &tt.tape, prompt, 3, n_new, 0.0, 0, 1, greedy, &log);
    const double temperatures[] = {0.5, 1.0, 1e4};
    for (size_t ti = 0; ti < 3; ti++) {
        log.steps = 0;
        generate_logged(&m, &tt.tape, prompt, 3, n_new, temperatures[ti], 1, 7 + ti, out, &log);
        cr_assert_eq(log.steps, n_new);
        for (int64_t s = 0; s < n_new; s++)
            cr_expect_eq(out[3 + s], argmax(log.logits + s * vocab, vocab), "T %g step %lld: top-k 1 drew %d, argmax %d",
                         temperatures[ti], (long long)s, out[3 + s], argmax(log.logits + s * vocab, vocab));
        cr_expect_eq(memcmp(out, greedy, sizeof out), 0, "T %g: top-k 1 generation differs from greedy", temperatures[ti]);
    }
    step_log_free(&log);
    test_tape_free(&tt);
    tg_model_free(&m);
}

Test(sample, no_token_outside_the_top_k_is_drawn) {
    /* fresh logits every draw; at T 100 the whole vocabulary would be nearly uniform, so a draw
     * that leaked past the top k would be almost certain */
    const int64_t vocab = 64;
    const int top_ks[] = {1, 2, 3, 5};
    const double temperatures[] = {1.0, 100.0};
    float logits[64], probs[64];
    int32_t ids[64];
    TgRng data, rng;
    tg_rng_seed(&data, 31);
    tg_rng_seed(&rng, 32);
    for (size_t ki = 0; ki < 4; ki++)
        for (size_t ti = 0; ti < 2; ti++) {
            TgSampleOptions opts = {.temperature = temperatures[ti], .top_k = top_ks[ki]};
            int64_t outside = 0, worst = 0;
            for (int64_t draw = 0; draw < 3000; draw++) {
                tg_rng_fill_uniform(&data, logits, (size_t)vocab, -3.0f, 3.0f);
                int64_t rank = rank_of(logits, vocab, tg_sample_token(logits, vocab, &opts, &rng, probs, ids));
                outside += rank >= top_ks[ki];
                if (rank > worst) worst = rank;
            }
            cr_expect_eq(outside, 0, "top-k %d T %g: %lld of 3000 draws outside the top k (worst rank %lld)",
                         top_ks[ki], temperatures[ti], (long long)outside, (long long)worst);
            cr_expect_eq(worst, top_ks[ki] - 1, "top-k %d T %g: the k-th token was never drawn", top_ks[ki],
                         temperatures[ti]);
        }
    /* a tie at the k-th place goes to the lower id: ids 1 and 0 are the top 2, id 3 never drawn */
    const float tied[5] = {2.0f, 3.0f, 1.0f, 2.0f, -1.0f};
    int64_t counts[5];
    draw_counts(tied, 5, 1e3, 2, 33, 2000, counts);
    cr_expect(counts[0] > 0 && counts[1] > 0 && counts[0] + counts[1] == 2000,
              "top-2 of {2,3,1,2,-1} drew %lld x id0, %lld x id1, %lld x id3", (long long)counts[0], (long long)counts[1],
              (long long)counts[3]);
}

Test(sample, top_k_draws_follow_the_renormalised_softmax) {
    /* top 4 at T 1.5: ids 1, 6, 3, 4 with probabilities 0.388, 0.278, 0.199, 0.134 */
    const float logits[12] = {0.1f, 2.0f, -0.5f, 1.0f, 0.4f, -1.2f, 1.5f, 0.0f, 0.2f, -0.3f, 0.15f, -2.0f};
    const int64_t vocab = 12, n = 20000, k = 4;
    const double temperature = 1.5;
    int64_t counts[12];
    draw_counts(logits, vocab, temperature, (int)k, 41, n, counts);
    double p[12], unnormalised[12];
    softmax_at(logits, vocab, temperature, p);
    /* the top k renormalised; everything else has probability 0 */
    double top_mass = 0.0;
    for (int64_t i = 0; i < vocab; i++)
        if (rank_of(logits, vocab, (int32_t)i) < k) top_mass += p[i];
    int32_t kth = 0;
    for (int64_t i = 0; i < vocab; i++) {
        int64_t rank = rank_of(logits, vocab, (int32_t)i);
        unnormalised[i] = rank < k ? p[i] : 0.0;
        if (rank == k - 1) kth = (int32_t)i;
        if (rank < k) cr_expect_gt(counts[i], 0, "top-k token %lld never drawn", (long long)i);
        else cr_expect_eq(counts[i], 0, "token %lld (rank %lld) drawn %lld times", (long long)i, (long long)rank,
                          (long long)counts[i]);
        p[i] = rank < k ? p[i] / top_mass : 0.0;
    }
    double stat = chi_square(counts, p, vocab, n);
    cr_expect_lt(stat, CHI2_999_DF3, "chi-square %.2f against the renormalised top-%lld softmax", stat, (long long)k);
    /* the bound has power: the same draws reject the top k's unrenormalised probabilities with the
     * missing mass on the k-th token (what a draw scaled by the whole vocabulary's total gives) */
    unnormalised[kth] += 1.0 - top_mass;
    double wrong = chi_square(counts, unnormalised, vocab, n);
    cr_expect_gt(wrong, CHI2_999_DF3, "chi-square %.2f: the check cannot tell an unrenormalised top k", wrong);
}

Test(sample, generation_draws_only_from_each_steps_top_k) {
    const int64_t vocab = 29, seq = 8, n_new = 80, k = 3;
    TgModel m;
    build_model(&m, vocab, seq, 6);
    TestTape tt;
    test_tape_init(&tt, 1);
    int32_t prompt[3] = {4, 5, 6}, out[83];
    StepLog log;
    step_log_init(&log, vocab, n_new);
    generate_logged(&m, &tt.tape, prompt, 3, n_new, 2.0, (int)k, 11, out, &log);
    cr_assert_eq(log.steps, n_new);
    int64_t by_rank[3] = {0};
    for (int64_t s = 0; s < n_new; s++) {
        int64_t rank = rank_of(log.logits + s * vocab, vocab, out[3 + s]);
        cr_expect_lt(rank, k, "step %lld: drew token %d of rank %lld", (long long)s, out[3 + s], (long long)rank);
        if (rank < k) by_rank[rank]++;
    }
    /* a sampler, not greedy: the second and third most likely tokens were drawn too */
    cr_expect(by_rank[1] > 0 && by_rank[2] > 0, "draws by rank: %lld, %lld, %lld", (long long)by_rank[0],
              (long long)by_rank[1], (long long)by_rank[2]);
    step_log_free(&log);
    test_tape_free(&tt);
    tg_model_free(&m);
}

/* ------------------------------------------------------------------ temperature */

Test(sample, a_temperature_near_0_is_the_argmax) {
    /* the best logit at least 0.1 above the rest: at T 1e-3 the others weigh below e^-100 */
    const int64_t vocab = 50;
    float logits[50], probs[50];
    int32_t ids[50];
    TgRng data, rng;
    tg_rng_seed(&data, 51);
    tg_rng_seed(&rng, 52);
    const int top_ks[] = {0, 5};
    for (size_t ki = 0; ki < 2; ki++) {
        TgSampleOptions cold = {.temperature = 1e-3, .top_k = top_ks[ki]};
        int64_t wrong = 0;
        for (int64_t row = 0; row < 2000; row++) {
            tg_rng_fill_uniform(&data, logits, (size_t)vocab, -2.0f, 2.0f);
            int32_t best = argmax(logits, vocab);
            logits[best] += 0.1f;
            wrong += tg_sample_token(logits, vocab, &cold, &rng, probs, ids) != best;
        }
        cr_expect_eq(wrong, 0, "T 1e-3 top-k %d: %lld of 2000 draws not the argmax", top_ks[ki], (long long)wrong);
    }
    /* the generator at T 1e-6 gives the greedy text */
    TgModel m;
    build_model(&m, 29, 8, 7);
    TestTape tt;
    test_tape_init(&tt, 1);
    int32_t prompt[3] = {1, 2, 3}, greedy[43], cold[43];
    StepLog log;
    step_log_init(&log, 29, 40);
    generate_logged(&m, &tt.tape, prompt, 3, 40, 0.0, 0, 1, greedy, &log);
    log.steps = 0;
    generate_logged(&m, &tt.tape, prompt, 3, 40, 1e-6, 0, 2, cold, &log);
    cr_expect_eq(memcmp(greedy, cold, sizeof cold), 0, "T 1e-6 generation differs from greedy");
    step_log_free(&log);
    test_tape_free(&tt);
    tg_model_free(&m);
}

Test(sample, draws_at_temperature_t_follow_softmax_of_logits_over_t) {
    const float logits[10] = {0.3f, -0.7f, 1.1f, 0.0f, -0.2f, 0.8f, -1.0f, 0.5f, 0.9f, -0.4f};
    const int64_t vocab = 10, n = 20000;
    const double temperatures[] = {0.5, 1.0, 2.5};
    for (size_t ti = 0; ti < 3; ti++) {
        double t = temperatures[ti], p[10], off[10];
        int64_t counts[10];
        draw_counts(logits, vocab, t, 0, 61 + ti, n, counts);
        softmax_at(logits, vocab, t, p);
        double stat = chi_square(counts, p, vocab, n);
        cr_expect_lt(stat, CHI2_999_DF9, "T %g: chi-square %.2f against softmax(logits / T)", t, stat);
        for (int64_t i = 0; i < vocab; i++) cr_expect_gt(counts[i], 0, "T %g: token %lld never drawn", t, (long long)i);
        /* the bound has power: the same draws reject a temperature 25% off */
        softmax_at(logits, vocab, 1.25 * t, off);
        double wrong = chi_square(counts, off, vocab, n);
        cr_expect_gt(wrong, CHI2_999_DF9, "T %g: chi-square %.2f, the check cannot tell T from 1.25 T", t, wrong);
    }
}

/* ------------------------------------------------------------------ pinned draws, threads */

/* Fresh logits per draw, rounded to quarters so that ties occur and their order (lower id
 * first) decides which token a top-k keeps; the top k cycles through 1, 7, 40 and the whole
 * vocabulary. */
enum { PIN_VOCAB = 300, PIN_DRAWS = 48 };
static void pinned_draws(uint64_t seed, int32_t *tokens, int n) {
    const int top_ks[] = {1, 7, 40, 0};
    float logits[PIN_VOCAB], probs[PIN_VOCAB];
    int32_t ids[PIN_VOCAB];
    TgRng data, rng;
    tg_rng_seed(&data, seed);
    tg_rng_seed(&rng, seed + 1);
    for (int i = 0; i < n; i++) {
        tg_rng_fill_uniform(&data, logits, PIN_VOCAB, -4.0f, 4.0f);
        for (int v = 0; v < PIN_VOCAB; v++) logits[v] = roundf(logits[v] * 4.0f) / 4.0f;
        TgSampleOptions opts = {.temperature = 0.8, .top_k = top_ks[i % 4]};
        tokens[i] = tg_sample_token(logits, PIN_VOCAB, &opts, &rng, probs, ids);
    }
}

Test(sample, a_seed_draws_the_pinned_tokens) {
    /* drawn by the implementation that sorted through a file-level pointer: a rewrite of the
     * top-k selection must keep every token */
    static const int32_t pinned[PIN_DRAWS] = {
        84, 146, 47, 285, 136, 179, 115, 51, 166, 17, 176, 53, 36, 72, 132, 73, 27, 192, 34, 195, 0, 266, 106, 130,
        90, 98, 267, 209, 68, 105, 27, 88, 8, 53, 60, 296, 57, 228, 197, 157, 21, 51, 56, 133, 64, 141, 136, 2,
    };
    int32_t got[PIN_DRAWS];
    pinned_draws(77, got, PIN_DRAWS);
    for (int i = 0; i < PIN_DRAWS; i++) cr_expect_eq(got[i], pinned[i], "draw %d: token %d, pinned %d", i, got[i], pinned[i]);
}

/* Two threads drawing at once each get exactly the tokens they draw alone: tg_sample_token keeps no
 * state outside its arguments. */
enum { THREAD_VOCAB = 4096, THREAD_DRAWS = 200 };
typedef struct {
    uint64_t seed;
    int32_t tokens[THREAD_DRAWS];
} DrawJob;

static void *draw_many(void *arg) {
    DrawJob *job = arg;
    float *logits = malloc(THREAD_VOCAB * sizeof *logits), *probs = malloc(THREAD_VOCAB * sizeof *probs);
    int32_t *ids = malloc(THREAD_VOCAB * sizeof *ids);
    TgRng data, rng;
    tg_rng_seed(&data, job->seed);
    tg_rng_seed(&rng, job->seed + 1);
    TgSampleOptions opts = {.temperature = 1.0, .top_k = 50};
    for (int i = 0; i < THREAD_DRAWS; i++) {
        tg_rng_fill_uniform(&data, logits, THREAD_VOCAB, -5.0f, 5.0f);
        job->tokens[i] = tg_sample_token(logits, THREAD_VOCAB, &opts, &rng, probs, ids);
    }
    free(logits);
    free(probs);
    free(ids);
    return NULL;
}

Test(sample, two_threads_drawing_at_once_draw_what_each_draws_alone) {
    DrawJob alone[2] = {{.seed = 5}, {.seed = 6}}, together[2] = {{.seed = 5}, {.seed = 6}};
    draw_many(&alone[0]);
    draw_many(&alone[1]);
    pthread_t threads[2];
    for (int t = 0; t < 2; t++) cr_assert_eq(pthread_create(&threads[t], NULL, draw_many, &together[t]), 0);
    for (int t = 0; t < 2; t++) pthread_join(threads[t], NULL);
    for (int t = 0; t < 2; t++) {
        int differ = 0;
        for (int i = 0; i < THREAD_DRAWS; i++) differ += together[t].tokens[i] != alone[t].tokens[i];
        cr_expect_eq(differ, 0, "thread %d: %d of %d draws differ from the same draws made alone", t, differ,
                     THREAD_DRAWS);
    }
}

/* ------------------------------------------------------------------ top-p and the repetition penalty */

/* The nucleus of logits as the contract words it, computed here in double over a full sort:
 * the candidates (the top k, or all) in rank order, kept up to and including the first at which
 * their share of the candidates' mass reaches top_p. in[id] set for its members; returns them. */
static int nucleus_of(const float *logits, int vocab, double temperature, int top_k, double top_p, bool *in) {
    int order[512];
    for (int i = 0; i < vocab; i++) order[i] = i;
    for (int i = 1; i < vocab; i++) /* insertion sort: larger logit first, ties by lower id */
        for (int j = i; j > 0; j--) {
            int a = order[j - 1], b = order[j];
            if (logits[a] > logits[b] || (logits[a] == logits[b] && a < b)) break;
            order[j - 1] = b, order[j] = a;
        }
    int k = top_k > 0 && top_k < vocab ? top_k : vocab;
    double total = 0, mass = 0;
    for (int i = 0; i < k; i++) total += exp((logits[order[i]] - logits[order[0]]) / temperature);
    int kept = 0;
    memset(in, 0, (size_t)vocab * sizeof *in);
    while (kept < k && mass < top_p * total) {
        mass += exp((logits[order[kept]] - logits[order[0]]) / temperature);
        in[order[kept++]] = true;
    }
    return kept;
}

/* No draw falls outside the nucleus: random logits (rounded to quarters, so that ties decide
 * members), several temperatures, top-p and top-k; each setting drawn 300 times. */
Test(sample, top_p_never_draws_outside_the_nucleus) {
    enum { VOCAB = 200 };
    const double temperatures[] = {0.5, 1.0, 2.0}, top_ps[] = {0.05, 0.3, 0.6, 0.9, 0.99};
    const int top_ks[] = {0, 50};
    float logits[VOCAB], probs[VOCAB];
    int32_t ids[VOCAB];
    bool in[VOCAB];
    TgRng data, rng;
    tg_rng_seed(&data, 101);
    tg_rng_seed(&rng, 102);
    int64_t outside = 0, draws = 0, seen_more_than_one = 0;
    for (int round = 0; round < 4; round++) {
        tg_rng_fill_uniform(&data, logits, VOCAB, -4.0f, 4.0f);
        for (int v = 0; v < VOCAB; v++) logits[v] = roundf(logits[v] * 4.0f) / 4.0f;
        for (size_t t = 0; t < 3; t++)
            for (size_t p = 0; p < 5; p++)
                for (size_t k = 0; k < 2; k++) {
                    int members = nucleus_of(logits, VOCAB, temperatures[t], top_ks[k], top_ps[p], in);
                    TgSampleOptions opts = {.temperature = temperatures[t], .top_k = top_ks[k], .top_p = top_ps[p]};
                    bool drawn[VOCAB] = {false};
                    int distinct = 0;
                    for (int i = 0; i < 300; i++, draws++) {
                        int32_t id = tg_sample_token(logits, VOCAB, &opts, &rng, probs, ids);
                        outside += !in[id];
                        distinct += !drawn[id];
                        drawn[id] = true;
                    }
                    seen_more_than_one += members > 1 && distinct > 1;
                }
    }
    cr_expect_eq(outside, 0, "%lld of %lld draws fell outside the nucleus", (long long)outside, (long long)draws);
    cr_expect_gt(seen_more_than_one, 20, "the nucleus is sampled, not only its first member");
}

/* Within the nucleus the draws follow the renormalised probabilities: three members of
 * probabilities 0.5, 0.3, 0.2 of the nucleus (0.9 of the whole), 30000 draws, each frequency
 * within 4 standard deviations. */
Test(sample, top_p_draws_the_nucleus_renormalised) {
    float logits[5] = {logf(0.45f), logf(0.27f), logf(0.18f), logf(0.06f), logf(0.04f)}, probs[5];
    int32_t ids[5];
    TgRng rng;
    tg_rng_seed(&rng, 7);
    TgSampleOptions opts = {.temperature = 1.0, .top_p = 0.85};
    int counts[5] = {0};
    enum { N = 30000 };
    for (int i = 0; i < N; i++) counts[tg_sample_token(logits, 5, &opts, &rng, probs, ids)]++;
    const double expect[5] = {0.5, 0.3, 0.2, 0, 0};
    for (int i = 0; i < 5; i++) {
        double sd = sqrt(N * expect[i] * (1 - expect[i]));
        cr_expect_leq(fabs(counts[i] - N * expect[i]), 4 * sd + 0.5, "token %d drawn %d times of %d, expected %.0f", i,
                      counts[i], N, N * expect[i]);
    }
}

/* The penalty divides a positive logit, multiplies a negative one, once per distinct id of the
 * history, and leaves every other logit (and everything at penalty 1) bit for bit as it was. */
Test(sample, the_repetition_penalty_acts_on_the_history_once_per_id) {
    float logits[6] = {2.0f, -1.5f, 0.75f, -0.25f, 3.0f, 0.0f}, before[6];
    memcpy(before, logits, sizeof logits);
    const int32_t history[] = {0, 1, 0, 0, 5, 1};
    uint8_t seen[6] = {0};
    tg_sample_penalize(logits, 6, history, 6, 1.25, seen);
    cr_expect_eq(logits[0], 2.0f / 1.25f);
    cr_expect_eq(logits[1], -1.5f * 1.25f);
    cr_expect_eq(logits[5], 0.0f);
    cr_expect(logits[2] == before[2] && logits[3] == before[3] && logits[4] == before[4], "ids not in the history change");
    for (int i = 0; i < 6; i++) cr_expect_eq(seen[i], 0, "seen[%d] left set", i);
    memcpy(logits, before, sizeof logits);
    tg_sample_penalize(logits, 6, history, 6, 1.0, seen);
    cr_expect(memcmp(logits, before, sizeof logits) == 0, "penalty 1 changed a logit");
}

/* OpenAI's frequency and presence penalties: each id drawn loses frequency x its count + presence,
 * once; the others keep their logits bitwise, as do all with 0 and 0. In generation they count the
 * tokens drawn, not the prompt's (the first draw is greedy's); a presence penalty past every gap
 * between logits, at temperature 0, draws no id twice where greedy decoding alone repeats one. */
Test(sample, the_frequency_and_presence_penalties_count_the_tokens_drawn) {
    float logits[6] = {2.0f, -1.5f, 0.75f, -0.25f, 3.0f, 0.0f}, before[6];
    memcpy(before, logits, sizeof logits);
    const int32_t drawn[] = {0, 1, 0, 0, 5, 1};
    int32_t counts[6] = {0};
    tg_sample_penalize_drawn(logits, 6, drawn, 6, 0.5, 0.25, counts);
    cr_expect_eq(logits[0], 2.0f - (float)(0.5 * 3 + 0.25));
    cr_expect_eq(logits[1], -1.5f - (float)(0.5 * 2 + 0.25));
    cr_expect_eq(logits[5], 0.0f - (float)(0.5 * 1 + 0.25));
    cr_expect(logits[2] == before[2] && logits[3] == before[3] && logits[4] == before[4], "ids not drawn change");
    for (int i = 0; i < 6; i++) cr_expect_eq(counts[i], 0, "counts[%d] left set", i);
    memcpy(logits, before, sizeof logits);
    tg_sample_penalize_drawn(logits, 6, drawn, 6, 0, 0, counts);
    cr_expect(memcmp(logits, before, sizeof logits) == 0, "penalties of 0 changed a logit");

    TgModel m;
    build_model(&m, 40, 24, 17);
    TestTape tt;
    test_tape_init(&tt, 1);
    const int32_t prompt[] = {3, 9, 9, 4};
    enum { NEW = 30 };
    int32_t plain[4 + NEW], penalized[4 + NEW];
    TgRng rng;
    tg_rng_seed(&rng, 1);
    TgSampleOptions g = {.temperature = 0};
    cr_assert_eq(tg_sample_generate(&(TgSampler){&m, &tt.tape, &g, &rng}, prompt, 4, NEW, -1, plain), 4 + NEW);
    bool repeats = false;
    for (int i = 4; i < 4 + NEW && !repeats; i++)
        for (int k = 4; k < i; k++) repeats |= plain[k] == plain[i];
    cr_assert(repeats, "greedy decoding drew no id twice: the test cannot see the penalty");
    g.presence_penalty = 1000; /* past any gap between this model's logits */
    cr_assert_eq(tg_sample_generate(&(TgSampler){&m, &tt.tape, &g, &rng}, prompt, 4, NEW, -1, penalized), 4 + NEW);
    cr_expect_eq(penalized[4], plain[4], "the first draw has nothing drawn before it: no penalty");
    for (int i = 4; i < 4 + 20; i++)
        for (int k = 4; k < i; k++) cr_expect_neq(penalized[k], penalized[i], "id %d drawn at %d and %d", penalized[i], k, i);
    test_tape_free(&tt);
    tg_model_free(&m);
}

/* Generation with penalty 1 draws bitwise what it draws without one (the penalty's arithmetic runs
 * all the same), and a penalty above 1 changes what is drawn; greedy decoding is deterministic:
 * the same tokens from any generator seed, with or without a penalty. */
Test(sample, penalty_1_changes_nothing_and_greedy_is_deterministic) {
    TgModel m;
    build_model(&m, 40, 24, 17);
    TestTape tt;
    test_tape_init(&tt, 1);
    const int32_t prompt[] = {3, 9, 9, 4};
    enum { NEW = 60 };
    int32_t off[4 + NEW], one[4 + NEW], strong[4 + NEW], greedy[3][4 + NEW];
    TgRng rng;
    TgSampleOptions opts = {.temperature = 1.0, .top_k = 20, .top_p = 0.95};
    tg_rng_seed(&rng, 5);
    int64_t n_off = tg_sample_generate(&(TgSampler){&m, &tt.tape, &opts, &rng}, prompt, 4, NEW, -1, off);
    opts.repetition_penalty = 1.0;
    tg_rng_seed(&rng, 5);
    int64_t n_one = tg_sample_generate(&(TgSampler){&m, &tt.tape, &opts, &rng}, prompt, 4, NEW, -1, one);
    cr_assert_eq(n_off, n_one);
    cr_expect(memcmp(off, one, (size_t)n_off * sizeof *off) == 0, "penalty 1 changed the tokens drawn");
    opts.repetition_penalty = 3.0;
    tg_rng_seed(&rng, 5);
    int64_t n_strong = tg_sample_generate(&(TgSampler){&m, &tt.tape, &opts, &rng}, prompt, 4, NEW, -1, strong);
    cr_expect(n_strong != n_off || memcmp(off, strong, (size_t)n_off * sizeof *off) != 0,
              "penalty 3 changed nothing: the test does not see the penalty");
    for (int s = 0; s < 3; s++) {
        TgSampleOptions g = {.temperature = 0, .top_k = 7, .top_p = 0.5, .repetition_penalty = s == 2 ? 1.0 : 0};
        tg_rng_seed(&rng, 100 + (uint64_t)s);
        cr_assert_eq(tg_sample_generate(&(TgSampler){&m, &tt.tape, &g, &rng}, prompt, 4, NEW, -1, greedy[s]), 4 + NEW);
    }
    cr_expect(memcmp(greedy[0], greedy[1], sizeof greedy[0]) == 0, "greedy decoding depends on the generator's seed");
    cr_expect(memcmp(greedy[0], greedy[2], sizeof greedy[0]) == 0, "greedy decoding changed with penalty 1");
    test_tape_free(&tt);
    tg_model_free(&m);
}

/* ------------------------------------------------------------------ logits that are not numbers */

/* A row holding NaN or an infinity anywhere has no token to draw, in every mode: -1 and the first
 * such id named. Before, a NaN compared false with every logit and came out as an ordinary id
 * (id 0 at temperature 0, whose bytes `tapegrad sample` printed as NULs). The largest finite
 * logits are numbers like any other, and are drawn. */
Test(sample, a_row_that_is_not_finite_draws_nothing_in_every_mode) {
    enum { V = 50 };
    float logits[V], probs[V];
    int32_t ids[V];
    const float bad[] = {NAN, INFINITY, -INFINITY};
    const char *bad_name[] = {"NaN", "+Inf", "-Inf"};
    const int64_t at[] = {0, 17, V - 1};
    const TgSampleOptions modes[] = {{.temperature = 0},
                                     {.temperature = 0.8},
                                     {.temperature = 0.8, .top_k = 5},
                                     {.temperature = 1, .top_p = 0.9},
                                     {.temperature = 1, .top_k = 3, .top_p = 0.5}};
    TgRng rng;
    tg_rng_seed(&rng, 3);
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++)
            for (size_t a = 0; a < sizeof at / sizeof at[0]; a++) {
                for (int i = 0; i < V; i++) logits[i] = 0.1f * (float)i - 2.0f;
                logits[at[a]] = bad[b];
                logits[V - 1 - at[a]] = bad[b]; /* a second one: the first is named */
                int64_t first = at[a] < V - 1 - at[a] ? at[a] : V - 1 - at[a];
                tg_error_clear();
                int32_t t = tg_sample_token(logits, V, &modes[m], &rng, probs, ids);
                char says[96];
                snprintf(says, sizeof says, "the logits hold %s at id %lld (of 50 ids)", bad_name[b], (long long)first);
                cr_expect_eq(t, -1, "mode %zu, %s at %lld: drew %d", m, bad_name[b], (long long)at[a], t);
                cr_expect(strstr(tg_error_message(), says), "mode %zu: \"%s\" does not say \"%s\"", m, tg_error_message(), says);
            }
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        for (int i = 0; i < V; i++) logits[i] = -FLT_MAX;
        logits[23] = FLT_MAX;
        cr_expect_eq(tg_sample_token(logits, V, &modes[m], &rng, probs, ids), 23, "mode %zu refused finite logits", m);
    }
}

/* The observer is handed the row the next token is drawn from: it plants a NaN at one step. */
static void plant_nan_at_step_3(void *ctx, const int32_t *text, int64_t len, const float *logits, int64_t vocab) {
    int *steps = ctx;
    (void)text, (void)len;
    if (++*steps == 3) ((float *)logits)[vocab / 2] = NAN;
}

/* Generation stops at the step whose logits are not finite: -1, naming that step, whatever the
 * weights (a model whose final-norm weights are all 3e38 overflows at the first step). */
Test(sample, generation_stops_at_the_step_whose_logits_are_not_finite) {
    TgModel m;
    build_model(&m, 40, 24, 17);
    TestTape tt;
    test_tape_init(&tt, 1);
    const int32_t prompt[] = {3, 9, 9, 4};
    int32_t out[4 + 10];
    int steps = 0;
    TgSampleOptions opts = {.temperature = 0, .observer = plant_nan_at_step_3, .observer_ctx = &steps};
    TgRng rng;
    tg_rng_seed(&rng, 5);
    tg_error_clear();
    cr_expect_eq(tg_sample_generate(&(TgSampler){&m, &tt.tape, &opts, &rng}, prompt, 4, 10, -1, out), -1);
    cr_expect_eq(steps, 3, "generation went on after the NaN");
    cr_expect(strstr(tg_error_message(), "generated token 3 of 10: the logits hold NaN at id 20 (of 40 ids)"), "%s",
              tg_error_message());
    TgTensor *norm = tg_params_find(&m.params, "model.norm.weight");
    cr_assert_not_null(norm);
    for (int64_t i = 0; i < norm->numel; i++) norm->data[i] = 3e38f;
    TgSampleOptions warm = {.temperature = 0.8, .top_k = 10};
    cr_expect_eq(tg_sample_generate(&(TgSampler){&m, &tt.tape, &warm, &rng}, prompt, 4, 10, -1, out), -1);
    cr_expect(strstr(tg_error_message(), "generated token 1 of 10: the logits hold "), "%s", tg_error_message());
    test_tape_free(&tt);
    tg_model_free(&m);
}
