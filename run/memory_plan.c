#include "run/memory_plan.h"

#include <math.h>
#include <stdio.h>

#include "lib/dist.h"

/* parameters, or +inf for a config whose count does not fit int64 */
static double param_count(const TgModelConfig *c) {
    int64_t n = tg_model_config_param_count(c);
    return n < 0 ? INFINITY : (double)n;
}

double tg_model_memory_bytes(const TgModelConfig *c) {
    /* each tensor of the store starts on a 16-float boundary: 9 per layer and 2 more at most */
    double tensors = 9.0 * (double)c->n_layers + 2, floats = param_count(c) + 16 * tensors;
    double rope = 2.0 * (double)c->seq_len * (double)(c->dim / (c->n_heads > 0 ? c->n_heads : 1)) * sizeof(float);
    return 4 * floats * sizeof(float) + rope;
}

TgStatus tg_checkpoint_model_memory_check(const TgModelConfig *c, const char *path) {
    TgMemoryPlan plan = {0};
    double params = param_count(c);
    tg_memory_plan_add(&plan, tg_model_memory_bytes(c) + 3 * params * sizeof(float), path, NULL,
                    "to load its model of %.0f parameters (weights, gradients, AdamW moments, and the weights and "
                    "moments staged while it is read)",
                    params);
    return tg_memory_plan_check(&plan);
}

void tg_memory_plan_add_activations(TgMemoryPlan *plan, const TgModelConfig *c, int64_t batch, int64_t seq, int threads,
                                 bool training, const char *subject, const char *fix) {
    double tokens = (double)batch * (double)seq;
    double bytes = tg_model_activation_bytes(c, batch, seq, threads, training) + 2 * tokens * sizeof(int32_t);
    char per_token[32];
    tg_memory_format(bytes / tokens, per_token, sizeof per_token);
    tg_memory_plan_add(plan, bytes, subject, fix, "for one %s at this model's size (%s per token at seq %lld)",
                    training ? "step's activations" : "forward's activations", per_token, (long long)seq);
}

void tg_sampling_memory_bytes(const TgModelConfig *c, int64_t tokens, int threads, double *context, double *buffers) {
    double seq = (double)c->seq_len, kv_dim = (double)(c->n_kv_heads * (c->dim / c->n_heads));
    double cache = 2 * (double)c->n_layers * seq * kv_dim * sizeof(float);
    /* the prompt's forward, and a draw's scratch (a probability and an id per vocabulary entry) */
    *context = cache + tg_model_activation_bytes(c, 1, c->seq_len, threads, false) + (double)c->vocab * 8;
    /* the prompt and generated ids twice (encoded, and the output), and their text at 32 bytes a
     * token, a generous mean */
    *buffers = 2 * (seq + (double)tokens + 1) * sizeof(int32_t) + 32 * (double)tokens;
}

TgStatus tg_sampling_memory_check(const TgModelConfig *cfg, const char *checkpoint, int64_t tokens, int threads) {
    TgMemoryPlan plan = {0};
    double context, buffers;
    tg_sampling_memory_bytes(cfg, tokens, threads, &context, &buffers);
    tg_memory_plan_add(&plan, tg_model_memory_bytes(cfg), NULL, NULL, "for the model");
    tg_memory_plan_add(&plan, context, checkpoint, NULL, "for a KV cache of its %lld-token context", (long long)cfg->seq_len);
    char subject[64];
    snprintf(subject, sizeof subject, "`tokens` %lld", (long long)tokens);
    tg_memory_plan_add(&plan, buffers, subject, "lower `tokens`", "for the tokens and their text");
    return tg_memory_plan_check(&plan);
}

TgStatus tg_train_memory_check(const TgTrainSchedule *s, bool resumed, bool seq_given, const TgModelConfig *c,
                               int64_t probe_batches, double corpus_bytes) {
    TgMemoryPlan plan = {0};
    int64_t B = s->batch, T = c->seq_len, micro_batches = s->accum * tg_dist_ranks();
    double params = param_count(c), tokens = (double)B * (double)T;
    char subject[96];
    /* a background checkpoint copies weights, m and v (checkpoint_folder.c); accumulation and the
     * gradient sum of several ranks keep one more gradient; --log-grads the weights before an update */
    double model = tg_model_memory_bytes(c) + 3 * params * sizeof(float) +
                   (micro_batches > 1 ? params * sizeof(float) : 0) +
                   (s->log_grads > 0 ? params * sizeof(float) : 0);
    tg_memory_plan_add(&plan, model, resumed ? "the resumed model" : "the model",
                       resumed ? NULL : "a smaller `preset`, or lower `dim`, `n_layers`, `hidden` or `vocab`",
                       "for its %.0f parameters (weights, gradients, AdamW moments, a checkpoint's snapshot)", params);
    if (seq_given && !resumed)
        snprintf(subject, sizeof subject, "`batch` %lld `seq_len` %lld", (long long)B, (long long)T);
    else
        snprintf(subject, sizeof subject, "`batch` %lld", (long long)B);
    const char *fix =
        resumed ? "lower `batch` (the context is the checkpoint's)" : "lower `batch` or `seq_len`";
    tg_memory_plan_add_activations(&plan, c, B, T, s->threads, true, subject, fix);
    if (s->eval_batches > 0) {
        snprintf(subject, sizeof subject, "`eval_batches` %lld", (long long)s->eval_batches);
        tg_memory_plan_add(&plan, (double)s->eval_batches * (2 * tokens * sizeof(int32_t) + sizeof(double)),
                           subject, "lower `eval_batches` or `batch`",
                           "for its fixed val batches of %lld x %lld tokens each", (long long)B, (long long)T);
    }
    if (probe_batches > 0) {
        snprintf(subject, sizeof subject, "`probe_batches` %lld", (long long)probe_batches);
        tg_memory_plan_add(&plan, (double)probe_batches * 2 * tokens * sizeof(int32_t), subject,
                        "lower `probe_batches` or `batch`", "for its fixed val batches of %lld x %lld tokens each",
                        (long long)B, (long long)T);
    }
    if (s->sample_tokens > 0) {
        snprintf(subject, sizeof subject, "`sample_tokens` %lld", (long long)s->sample_tokens);
        double context, buffers;
        tg_sampling_memory_bytes(c, s->sample_tokens, s->threads, &context, &buffers);
        tg_memory_plan_add(&plan, context + buffers, subject, "lower `sample_tokens` (0: none)",
                        "for the sample at the end (a KV cache of the %lld-token context)", (long long)T);
    }
    if (corpus_bytes > 0) tg_memory_plan_add(&plan, corpus_bytes, NULL, NULL, "for the corpus's tokens");
    return tg_memory_plan_check(&plan);
}
