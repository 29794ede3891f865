#include "train/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/error.h"

/* descending by value, ties by id, so the order is total and the result deterministic */
static const float *sort_values;
static int by_value_desc(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (sort_values[i] != sort_values[j]) return sort_values[i] > sort_values[j] ? -1 : 1;
    return (i > j) - (i < j);
}

int32_t sample_token(const float *logits, int64_t vocab, const SampleOptions *opts, Rng *rng,
                     float *probs, int32_t *ids) {
    if (opts->temperature <= 0.0) {
        int64_t best = 0;
        for (int64_t i = 1; i < vocab; i++)
            if (logits[i] > logits[best]) best = i;
        return (int32_t)best;
    }
    int64_t k = opts->top_k > 0 && opts->top_k < vocab ? opts->top_k : vocab;
    for (int64_t i = 0; i < vocab; i++) ids[i] = (int32_t)i;
    if (k < vocab) {
        sort_values = logits;
        qsort(ids, (size_t)vocab, sizeof *ids, by_value_desc);
    }
    float max = -INFINITY;
    for (int64_t i = 0; i < k; i++) max = fmaxf(max, logits[ids[i]]);
    double total = 0.0;
    for (int64_t i = 0; i < k; i++) {
        probs[i] = expf((float)((logits[ids[i]] - max) / opts->temperature));
        total += probs[i];
    }
    double u = (double)rng_uniform(rng) * total, acc = 0.0;
    for (int64_t i = 0; i < k; i++) {
        acc += probs[i];
        if (u < acc) return ids[i];
    }
    return ids[k - 1];
}

int64_t sample_generate(Model *model, Tape *tape, const int32_t *prompt, int64_t prompt_len, int64_t n_new,
                        const SampleOptions *opts, int32_t stop_id, Rng *rng, int32_t *out) {
    const ModelConfig *c = &model->cfg;
    TG_CHECK(prompt_len >= 1 && prompt_len <= c->seq_len, "prompt of %lld tokens", (long long)prompt_len);
    bool old = tape_set_grad_enabled(tape, false);
    KVCache cache;
    kv_cache_init(&cache, c, c->seq_len);
    float *probs = tg_malloc((size_t)c->vocab * sizeof(float));
    int32_t *ids = tg_malloc((size_t)c->vocab * sizeof(int32_t));
    memcpy(out, prompt, (size_t)prompt_len * sizeof *out);
    int64_t len = prompt_len;
    /* the whole prompt in one pass; afterwards one token per pass, the prefix read from the cache */
    Tensor *logits = model_forward(model, tape, prompt, 1, prompt_len, &cache);
    const float *last = logits->data + (size_t)(prompt_len - 1) * (size_t)c->vocab;
    for (int64_t i = 0; i < n_new; i++) {
        if (opts->observer) opts->observer(opts->observer_ctx, out, len, last, c->vocab);
        int32_t next = sample_token(last, c->vocab, opts, rng, probs, ids);
        out[len++] = next;
        tape_reset(tape);
        if (next == stop_id || i + 1 == n_new) break;
        if (cache.len == c->seq_len) {
            /* context full: restart the cache from the last half of the text (one recomputation
             * per seq/2 new tokens), since positions beyond the context were never trained */
            int64_t keep = c->seq_len / 2 > 0 ? c->seq_len / 2 : 1;
            cache.len = 0;
            logits = model_forward(model, tape, &out[len - keep], 1, keep, &cache);
            last = logits->data + (size_t)(keep - 1) * (size_t)c->vocab;
            continue;
        }
        logits = model_forward(model, tape, &out[len - 1], 1, 1, &cache);
        last = logits->data;
    }
    tape_reset(tape);
    free(probs);
    free(ids);
    kv_cache_free(&cache);
    tape_set_grad_enabled(tape, old);
    return len;
}
