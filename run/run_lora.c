/* LoRA runs: adapters attached to a new run's base, and a LoRA run's checkpoints (its adapters
 * alone, checkpoint/adapter.h) opened on the base its run.txt names. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/chat_format.h"
#include "support/path.h"
#include "checkpoint/adapter.h"
#include "model/weights_file.h"
#include "run/run_internal.h"

TgStatus tg_run_lora_check(const TgRunSpec *spec, const TgModelConfig *cfg) {
    if (spec->lora_rank <= 0) return TG_OK;
    TgLoraConfig lora;
    TG_TRY(tg_run_spec_lora(spec, &lora));
    return tg_lora_config_validate(&lora, cfg);
}

static int cmp_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* counts[id] += its occurrences in the store. */
static TgStatus count_ids(const TgTokenStore *store, uint64_t *counts, int64_t vocab) {
    enum { CHUNK = 1 << 16 };
    int32_t *ids = tg_malloc(CHUNK * sizeof *ids);
    TgStatus s = TG_OK;
    for (uint64_t at = 0; at < store->n && s == TG_OK; at += CHUNK) {
        size_t n = store->n - at < CHUNK ? (size_t)(store->n - at) : CHUNK;
        s = tg_token_store_read(store, at, n, ids);
        for (size_t i = 0; s == TG_OK && i < n; i++)
            if (ids[i] >= 0 && ids[i] < vocab) counts[ids[i]]++;
    }
    free(ids);
    return s;
}

static const uint64_t *sort_counts; /* qsort's: the ids by their count in the run's data, most first */
static int by_count(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return sort_counts[y] > sort_counts[x] ? 1 : sort_counts[y] < sort_counts[x] ? -1 : (x > y) - (x < y);
}

/* "auto": the tokens of the run's train split that its base's train split never held. Their rows,
 * never trained but pushed down by every softmax, all point one way: the adapters cannot tell one
 * from another, and a reply that needs one draws any (docs/sft.md). The most frequent
 * TG_LORA_MAX_TOKENS less those already in cfg, said when more are left out. */
static TgStatus add_unseen_tokens(const TgRun *run, TgLoraConfig *cfg) {
    if (!run->base_train_tokens[0] || run->train.tokens.n == 0) return TG_OK;
    int64_t vocab = run->tok.vocab_size;
    uint64_t *base = tg_calloc((size_t)vocab, sizeof *base), *data = tg_calloc((size_t)vocab, sizeof *data);
    TgTokenStore store;
    TgStatus s = tg_token_store_open(&store, run->base_train_tokens, (uint32_t)vocab, run->tok.fingerprint);
    if (s == TG_OK) {
        s = count_ids(&store, base, vocab);
        tg_token_store_close(&store);
    }
    if (s == TG_OK) s = count_ids(&run->train.tokens, data, vocab);
    int32_t *unseen = tg_malloc((size_t)vocab * sizeof *unseen);
    int n = 0;
    for (int64_t id = 0; s == TG_OK && id < vocab; id++) {
        bool had = false;
        for (int j = 0; j < cfg->n_tokens; j++) had |= cfg->tokens[j] == id;
        if (data[id] > 0 && base[id] == 0 && !had) unseen[n++] = (int32_t)id;
    }
    sort_counts = data;
    qsort(unseen, (size_t)n, sizeof *unseen, by_count);
    int room = TG_LORA_MAX_TOKENS - cfg->n_tokens, taken = n < room ? n : room;
    for (int j = 0; j < taken; j++) cfg->tokens[cfg->n_tokens++] = unseen[j];
    if (s == TG_OK && n > taken)
        tg_message_emit(&run->messages, TG_MESSAGE_NOTE,
                        "%d tokens of the data never occur in the base's %s; the rows of the %d most frequent train "
                        "beside the adapters (`lora_tokens` auto), the other %d stay as the base left them",
                        n, run->base_train_tokens, taken, n - taken);
    free(base), free(data), free(unseen);
    if (s != TG_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", tg_error_message());
        return tg_fail(s, "`lora_tokens` auto counts the tokens the base trained on: %s", why);
    }
    return TG_OK;
}

/* --lora-tokens into cfg->tokens (ascending, distinct): "none"; "chat", the chat markers when the
 * run's tokenizer has them as single ids (none otherwise); "auto", those and the tokens of the
 * data the base never trained on (add_unseen_tokens); or a comma-separated list whose items are
 * ids or texts that encode to one id each. */
static TgStatus resolve_lora_tokens(const TgRun *run, const char *list, TgLoraConfig *cfg) {
    cfg->n_tokens = 0;
    if (strcmp(list, "none") == 0) return TG_OK;
    if (strcmp(list, "chat") == 0 || strcmp(list, "auto") == 0) {
        TgChatTokens ct;
        if (tg_chat_tokens_find(&run->tok, "the run's tokenizer", &ct) == TG_OK) {
            cfg->tokens[cfg->n_tokens++] = ct.im_start;
            cfg->tokens[cfg->n_tokens++] = ct.im_end;
        }
        tg_error_clear(); /* a tokenizer without the markers: no rows of theirs to train */
        if (strcmp(list, "auto") == 0) TG_TRY(add_unseen_tokens(run, cfg));
    } else {
        for (const char *p = list; *p;) {
            size_t len = strcspn(p, ",");
            char *end;
            long id = strtol(p, &end, 10);
            int32_t ids[64];
            size_t n = 0;
            if (len > 0 && end == p + len && id >= 0 && id < run->tok.vocab_size) {
                ids[0] = (int32_t)id, n = 1;
            } else if (len == 0 || tg_tokenizer_max_ids(&run->tok, len) > 64 ||
                       tg_tokenizer_encode(&run->tok, p, len, ids, 64, &n) != TG_OK || n != 1) {
                tg_error_clear();
                return tg_fail(TG_ERR_ARG,
                               "`lora_tokens`: '%.*s' is not one token of the run's tokenizer (an id below %lld, or "
                               "a text it encodes as a single id); give chat, none, or such tokens separated by commas",
                               (int)len, p, (long long)run->tok.vocab_size);
            }
            if (cfg->n_tokens == TG_LORA_MAX_TOKENS)
                return tg_fail(TG_ERR_ARG, "`lora_tokens` names more than %d tokens", TG_LORA_MAX_TOKENS);
            cfg->tokens[cfg->n_tokens++] = ids[0];
            p += len;
            if (*p == ',') p++;
        }
    }
    qsort(cfg->tokens, (size_t)cfg->n_tokens, sizeof cfg->tokens[0], cmp_id);
    int kept = 0;
    for (int j = 0; j < cfg->n_tokens; j++)
        if (kept == 0 || cfg->tokens[j] != cfg->tokens[kept - 1]) cfg->tokens[kept++] = cfg->tokens[j];
    cfg->n_tokens = kept;
    return TG_OK;
}

TgStatus tg_run_attach_lora(TgRun *run, const TgRunSpec *spec) {
    if (spec->lora_rank <= 0) return TG_OK;
    TgLoraConfig cfg;
    TG_TRY(tg_run_spec_lora(spec, &cfg));
    TG_TRY(resolve_lora_tokens(run, spec->lora_tokens ? spec->lora_tokens : TG_TRAIN_DEFAULT_LORA_TOKENS, &cfg));
    TG_TRY(tg_lora_config_validate(&cfg, &run->model.cfg));
    /* the adapters' own stream: their init does not depend on how the base was made */
    tg_lora_attach(&run->model, &cfg, (uint64_t)spec->seed ^ 0x4c6f5241u);
    char targets[64];
    tg_lora_targets_format(cfg.targets, targets, sizeof targets);
    int64_t base = tg_model_param_count(&run->model), trained = (int64_t)0;
    for (int i = 0; i < run->model.lora->params.count; i++) trained += run->model.lora->params.tensors[i]->numel;
    char rows[256] = "";
    if (cfg.n_tokens > 0) {
        size_t used = (size_t)snprintf(rows, sizeof rows, " and the embedding rows of %d tokens (", cfg.n_tokens);
        for (int j = 0; j < cfg.n_tokens && j < 6; j++) {
            size_t len;
            const uint8_t *bytes = tg_tokenizer_token_bytes(&run->tok, cfg.tokens[j], &len);
            used += (size_t)snprintf(rows + used, sizeof rows - used, "%s", j ? ", " : "");
            for (size_t b = 0; b < len && b < 24 && used + 8 < sizeof rows; b++) /* a byte token may be any byte */
                used += (size_t)snprintf(rows + used, sizeof rows - used, bytes[b] >= 0x20 && bytes[b] < 0x7f ? "%c" : "\\x%02x",
                                         bytes[b]);
        }
        snprintf(rows + used, sizeof rows - used, "%s)", cfg.n_tokens > 6 ? ", ..." : "");
    }
    tg_message_emit(&run->messages, TG_MESSAGE_INFO,
                 "LoRA rank %lld, alpha %g on %s%s: %lld trainable parameters (%.2f%% of the base's %lld, frozen; base "
                 "weights %016" PRIx64 ")",
                 (long long)cfg.rank, cfg.alpha, targets, rows, (long long)trained, 100.0 * (double)trained / (double)base,
                 (long long)base, run->model.lora->base_fingerprint);
    return TG_OK;
}

