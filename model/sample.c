#include "tapegrad/sample.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad/error.h"

/* The rank order: a larger logit first, ties by the lower id. It is total, so whichever way the
 * top k are found they come out in one order, and so do the draws. */
static bool ranks_above(const float *logits, int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
}

/* heap[0..n) with the lowest-ranked id at the root: restores that below `at` */
static void sift_down(const float *logits, int32_t *heap, int64_t n, int64_t at) {
    for (;;) {
        int64_t low = at, l = 2 * at + 1, r = l + 1;
        if (l < n && ranks_above(logits, heap[low], heap[l])) low = l;
        if (r < n && ranks_above(logits, heap[low], heap[r])) low = r;
        if (low == at) return;
        int32_t t = heap[at];
        heap[at] = heap[low], heap[low] = t;
        at = low;
    }
}

/* ids[0..k) = the k highest-ranked ids of logits, best first: a heap of the best k seen so far
 * (O(vocab log k)), then sorted in place. Reentrant: everything it touches is its arguments. */
static void top_k_ids(const float *logits, int64_t vocab, int64_t k, int32_t *ids) {
    for (int64_t i = 0; i < k; i++) ids[i] = (int32_t)i;
    for (int64_t i = k / 2 - 1; i >= 0; i--) sift_down(logits, ids, k, i);
    for (int64_t i = k; i < vocab; i++)
        if (ranks_above(logits, (int32_t)i, ids[0])) {
            ids[0] = (int32_t)i;
            sift_down(logits, ids, k, 0);
        }
    /* heap sort: the lowest-ranked goes to the end each time, leaving the best first */
    for (int64_t n = k - 1; n > 0; n--) {
        int32_t t = ids[0];
        ids[0] = ids[n], ids[n] = t;
        sift_down(logits, ids, n, 0);
    }
}

TgSampleOptions tg_sample_defaults(void) { return (TgSampleOptions){.temperature = 0.8, .top_k = 40}; }

void tg_sample_penalize(float *logits, int64_t vocab, const int32_t *history, int64_t n, double penalty, uint8_t *seen) {
    const float p = (float)penalty;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = history[i];
        if (id < 0 || id >= vocab || seen[id]) continue;
        seen[id] = 1;
        logits[id] = logits[id] > 0 ? logits[id] / p : logits[id] * p;
    }
    for (int64_t i = 0; i < n; i++)
        if (history[i] >= 0 && history[i] < vocab) seen[history[i]] = 0;
}

void tg_sample_penalize_drawn(float *logits, int64_t vocab, const int32_t *drawn, int64_t n, double frequency, double presence,
                              int32_t *counts) {
    if (frequency == 0 && presence == 0) return;
    for (int64_t i = 0; i < n; i++)
        if (drawn[i] >= 0 && drawn[i] < vocab) counts[drawn[i]]++;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = drawn[i];
        if (id < 0 || id >= vocab || counts[id] == 0) continue;
        logits[id] -= (float)(frequency * counts[id] + presence);
        counts[id] = 0;
    }
}

/* NaN and the infinities are the floats whose 8 exponent bits are all ones, and only they: adding
 * 1 to such an exponent field (bits 23-30) carries into bit 31. So one pass of integer ANDs, adds
 * and ORs, 4 lanes at a time (GCC's vector extension, as lib/isa/simd.h uses it: one SSE2
 * register on the baseline build), tells whether the row holds one: vocab / 4 steps, where the
 * forward that made the row took vocab x dim multiply-adds for its output layer alone. */
typedef uint32_t U32x4 __attribute__((vector_size(16)));

static bool row_is_finite(const float *logits, int64_t vocab) {
    U32x4 carry = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= vocab; i += 4) {
        U32x4 bits;
        memcpy(&bits, logits + i, sizeof bits);
        carry |= (bits & 0x7f800000u) + 0x00800000u;
    }
    uint32_t any = carry[0] | carry[1] | carry[2] | carry[3];
    for (; i < vocab; i++) {
        uint32_t bits;
        memcpy(&bits, logits + i, sizeof bits);
        any |= (bits & 0x7f800000u) + 0x00800000u;
    }
    return !(any & 0x80000000u);
}

/* The message of a row that is not finite, naming its first value that is not. */
static int32_t refuse_row(const float *logits, int64_t vocab) {
    int64_t at = 0;
    while (at < vocab && isfinite(logits[at])) at++;
    tg_fail(TG_ERR_NUMERIC,
            "the logits hold %s at id %lld (of %lld ids): no token can be drawn from them; the model's activations "
            "overflow float32",
            isnan(logits[at]) ? "NaN" : logits[at] > 0 ? "+Inf" : "-Inf", (long long)at, (long long)vocab);
    return -1;
}

int32_t tg_sample_token(const float *logits, int64_t vocab, const TgSampleOptions *opts, TgRng *rng,
                     float *probs, int32_t *ids) {
    /* a NaN would compare false with every logit and come out as an ordinary id (id 0 at
     * temperature 0): refused before the ranking */
    if (!row_is_finite(logits, vocab)) return refuse_row(logits, vocab);
    if (opts->temperature <= 0.0) {
        int64_t best = 0;
        for (int64_t i = 1; i < vocab; i++)
            if (logits[i] > logits[best]) best = i;
        return (int32_t)best;
    }
    bool nucleus = opts->top_p > 0.0 && opts->top_p < 1.0;
    int64_t k = opts->top_k > 0 && opts->top_k < vocab ? opts->top_k : vocab;
    /* the nucleus needs the candidates in rank order: top_k_ids sorts them */
    if (k < vocab || nucleus) top_k_ids(logits, vocab, k, ids);
    else
        for (int64_t i = 0; i < vocab; i++) ids[i] = (int32_t)i;
    float max = -INFINITY;
    for (int64_t i = 0; i < k; i++) max = fmaxf(max, logits[ids[i]]);
    double total = 0.0;
    for (int64_t i = 0; i < k; i++) {
        probs[i] = expf((float)((logits[ids[i]] - max) / opts->temperature));
        total += probs[i];
    }
    if (nucleus) {
        /* the fewest best-ranked candidates whose share of the mass reaches top_p (at least one) */
        double need = opts->top_p * total, mass = 0.0;
        int64_t kept = 0;
        while (kept < k && mass < need) mass += probs[kept++];
        k = kept > 0 ? kept : 1;
        total = mass > 0 ? mass : probs[0];
    }
    double u = (double)tg_rng_uniform(rng) * total, acc = 0.0;
    for (int64_t i = 0; i < k; i++) {
        acc += probs[i];
        if (u < acc) return ids[i];
    }
    return ids[k - 1];
}

int64_t tg_sample_generate(const TgSampler *sampler, const int32_t *prompt, int64_t prompt_len, int64_t n_new,
                           int32_t stop_id, int32_t *out) {
    TgModel *model = sampler->model;
    TgTape *tape = sampler->tape;
    const TgSampleOptions *opts = sampler->opts;
    const TgModelConfig *c = &model->cfg;
    TG_CHECK(prompt_len >= 1 && prompt_len <= c->seq_len, "prompt of %lld tokens", (long long)prompt_len);
    bool old = tg_tape_set_grad_enabled(tape, false);
    TgKVCache cache;
    tg_kv_cache_init(&cache, c, c->seq_len);
    float *probs = tg_malloc((size_t)c->vocab * sizeof(float));
    int32_t *ids = tg_malloc((size_t)c->vocab * sizeof(int32_t));
    uint8_t *seen = opts->repetition_penalty > 0 ? tg_calloc((size_t)c->vocab, 1) : NULL;
    int32_t *counts = tg_calloc((size_t)c->vocab, sizeof *counts);
    memcpy(out, prompt, (size_t)prompt_len * sizeof *out);
    int64_t len = prompt_len;
    /* the whole prompt in one pass; afterwards one token per pass, the prefix read from the cache */
    TgTensor *logits =
        tg_model_forward(model, tape, &(TgBatch){.tokens = prompt, .batch = 1, .seq = prompt_len}, &cache);
    float *last = logits->data + (size_t)(prompt_len - 1) * (size_t)c->vocab;
    for (int64_t i = 0; i < n_new; i++) {
        if (opts->observer) opts->observer(opts->observer_ctx, out, len, last, c->vocab);
        /* the text the cache holds: the last cache.len tokens */
        if (seen) tg_sample_penalize(last, c->vocab, out + len - cache.len, cache.len, opts->repetition_penalty, seen);
        tg_sample_penalize_drawn(last, c->vocab, out + prompt_len, len - prompt_len, opts->frequency_penalty,
                                 opts->presence_penalty, counts);
        int32_t next = tg_sample_token(last, c->vocab, opts, sampler->rng, probs, ids);
        if (next < 0) {
            tg_fail_context(TG_ERR_NUMERIC, "generated token %lld of %lld", (long long)(i + 1), (long long)n_new);
            len = -1;
            break;
        }
        out[len++] = next;
        tg_tape_reset(tape);
        if (next == stop_id || i + 1 == n_new) break;
        if (cache.len == c->seq_len) {
            /* context full: restart the cache from the last half of the text (one recomputation
             * per seq/2 new tokens), since positions beyond the context were never trained */
            int64_t keep = c->seq_len / 2 > 0 ? c->seq_len / 2 : 1;
            cache.len = 0;
            logits =
                tg_model_forward(model, tape, &(TgBatch){.tokens = &out[len - keep], .batch = 1, .seq = keep}, &cache);
            last = logits->data + (size_t)(keep - 1) * (size_t)c->vocab;
            continue;
        }
        logits = tg_model_forward(model, tape, &(TgBatch){.tokens = &out[len - 1], .batch = 1, .seq = 1}, &cache);
        last = logits->data;
    }
    tg_tape_reset(tape);
    free(probs);
    free(ids);
    free(seen);
    free(counts);
    tg_kv_cache_free(&cache);
    tg_tape_set_grad_enabled(tape, old);
    return len;
}

/* The continuation of the prompt's n_prompt ids (none: the token a document starts after; of more
 * than the context, the last seq_len), decoded into *text. ids holds room for one more. */
static TgStatus continue_ids(const TgSampler *sampler, const TgTokenizer *tok, int32_t *ids, size_t n_prompt,
                             int64_t n_new, char **text, size_t *text_len) {
    const int64_t seq_len = sampler->model->cfg.seq_len;
    if (n_prompt == 0) ids[n_prompt++] = tg_tokenizer_doc_start(tok);
    const int32_t *kept = ids;
    if ((int64_t)n_prompt > seq_len) {
        /* the end of a long prompt: it is what the next token depends on */
        kept = ids + n_prompt - (size_t)seq_len;
        n_prompt = (size_t)seq_len;
    }
    int32_t *out = tg_malloc((n_prompt + (size_t)n_new + 1) * sizeof(int32_t));
    int64_t total = tg_sample_generate(sampler, kept, (int64_t)n_prompt, n_new, tok->eot_id, out);
    TgStatus s = total < 0 ? TG_ERR_NUMERIC /* tg_sample_generate's message */
                           : tg_tokenizer_decode(tok, out + n_prompt, (size_t)(total - (int64_t)n_prompt), text, text_len);
    free(out);
    return s;
}

TgStatus tg_sample_text(const TgSampler *sampler, const TgTokenizer *tok, const char *prompt, size_t prompt_len,
                        int64_t n_new, char **text, size_t *text_len) {
    *text = NULL;
    *text_len = 0;
    size_t n_prompt = 0;
    size_t cap = tg_tokenizer_max_ids(tok, prompt_len);
    int32_t *ids = tg_malloc((cap + 2) * sizeof(int32_t)), *from = ids + 1; /* ids[0]: room for a BOS */
    TgStatus s = prompt_len > 0 ? tg_tokenizer_encode(tok, prompt, prompt_len, from, cap, &n_prompt) : TG_OK;
    if (s != TG_OK) s = tg_fail_context(s, "encoding the prompt");
    /* a prompt starts a document: after the BOS, with a tokenizer that frames documents with one */
    if (tok->has_bos && n_prompt > 0 && from[0] != tok->bos_id) *--from = tok->bos_id, n_prompt++;
    if (s == TG_OK) s = continue_ids(sampler, tok, from, n_prompt, n_new, text, text_len);
    free(ids);
    return s;
}
