/* A conversation with a model over its KV cache (chat.h). */
#include "model/chat.h"

#include <stdlib.h>
#include <string.h>

TgStatus tg_chat_session_open(TgChatSession *s, TgModel *model, const TgTokenizer *tok, TgTape *tape,
                           const TgSampleOptions *sampling, uint64_t seed, int64_t max_reply, const char *tok_origin) {
    memset(s, 0, sizeof *s);
    TG_TRY(tg_chat_tokens_find(tok, tok_origin, &s->ct));
    if (max_reply < 1) return tg_fail(TG_ERR_ARG, "a reply of %lld tokens: at least 1", (long long)max_reply);
    const TgModelConfig *c = &model->cfg;
    s->model = model, s->tok = tok, s->tape = tape, s->sampling = *sampling, s->max_reply = max_reply;
    tg_rng_seed(&s->rng, seed);
    tg_kv_cache_init(&s->cache, c, c->seq_len);
    s->context = tg_malloc((size_t)c->seq_len * sizeof *s->context);
    s->probs = tg_malloc((size_t)c->vocab * sizeof *s->probs);
    s->scratch = tg_malloc((size_t)c->vocab * sizeof *s->scratch);
    s->seen = tg_calloc((size_t)c->vocab, 1);
    s->counts = tg_calloc((size_t)c->vocab, sizeof *s->counts);
    s->cap_turns = 8;
    s->turn_start = tg_malloc(s->cap_turns * sizeof *s->turn_start);
    return TG_OK;
}

void tg_chat_session_close(TgChatSession *s) {
    tg_kv_cache_free(&s->cache);
    tg_chat_ids_free(&s->ids);
    free(s->turn_start), free(s->context), free(s->probs), free(s->scratch), free(s->seen), free(s->counts);
    memset(s, 0, sizeof *s);
}

/* Turn n_turns begins at ids.n. */
static void begin_turn(TgChatSession *s) {
    if (s->n_turns == s->cap_turns) {
        s->cap_turns *= 2;
        s->turn_start = tg_realloc(s->turn_start, s->cap_turns * sizeof *s->turn_start);
    }
    s->turn_start[s->n_turns++] = s->ids.n;
}

static size_t turn_end(const TgChatSession *s, size_t i) { return i + 1 < s->n_turns ? s->turn_start[i + 1] : s->ids.n; }

TgStatus tg_chat_session_add(TgChatSession *s, TgChatRole role, const char *content, size_t len) {
    if (role == TG_CHAT_SYSTEM && s->n_turns > 0)
        return tg_fail(TG_ERR_ARG, "a system turn comes first in a conversation, before any other");
    begin_turn(s);
    if (role == TG_CHAT_SYSTEM) s->has_system = true;
    /* what the chat is given is text: "<|im_end|>" typed by its user closes no turn */
    return tg_chat_encode_turn_literal(s->tok, &s->ct, role, content, len, &s->ids);
}

/* Feeds ids[0..n) to the cache (n >= 1, room for them); returns the logits of the last. */
static float *feed(TgChatSession *s, const int32_t *ids, int64_t n) {
    memcpy(s->context + s->cache.len, ids, (size_t)n * sizeof *ids);
    TgTensor *logits = tg_model_forward(s->model, s->tape, &(TgBatch){.tokens = ids, .batch = 1, .seq = n}, &s->cache);
    return logits->data + (size_t)(n - 1) * (size_t)s->model->cfg.vocab;
}

/* Builds the cache again from what fits in the context less `reserve` positions: the system turn
 * (when it takes at most half of that), then the latest turns that fit whole, or of the last turn
 * alone its last ids. Everything of the conversation is then in the cache. */
static float *rebuild(TgChatSession *s, int64_t reserve) {
    int64_t budget = s->model->cfg.seq_len - reserve;
    if (budget < 1) budget = 1;
    size_t first_turn = s->has_system ? 1 : 0;
    int64_t system_len = s->has_system ? (int64_t)turn_end(s, 0) : 0;
    if (system_len > budget / 2) system_len = 0;
    size_t from = s->ids.n; /* the kept tail of the conversation starts here */
    for (size_t t = s->n_turns; t > first_turn; t--) {
        size_t start = s->turn_start[t - 1];
        if ((int64_t)(s->ids.n - start) + system_len > budget) break;
        from = start;
    }
    if (from == s->ids.n) from = s->ids.n - (size_t)(budget - system_len); /* the last turn alone is too long */
    s->cache.len = 0;
    s->rebuilds++;
    int32_t *kept = tg_malloc((size_t)budget * sizeof *kept);
    memcpy(kept, s->ids.ids, (size_t)system_len * sizeof *kept);
    memcpy(kept + system_len, s->ids.ids + from, (s->ids.n - from) * sizeof *kept);
    float *last = feed(s, kept, system_len + (int64_t)(s->ids.n - from));
    free(kept);
    s->synced = s->ids.n;
    return last;
}

/* Feeds what the cache lacks, leaving `reserve` positions free (building it again when it is too
 * full); returns the logits of the conversation's last id. */
static float *sync(TgChatSession *s, int64_t reserve) {
    int64_t pending = (int64_t)(s->ids.n - s->synced);
    if (s->cache.len + pending + reserve > s->model->cfg.seq_len) return rebuild(s, reserve);
    float *last = feed(s, s->ids.ids + s->synced, pending);
    s->synced = s->ids.n;
    return last;
}

/* The room a reply wants: max_reply, at most a quarter of the context. */
static int64_t reply_room(const TgChatSession *s, int64_t drawn) {
    int64_t left = s->max_reply - drawn, quarter = s->model->cfg.seq_len / 4 > 0 ? s->model->cfg.seq_len / 4 : 1;
    return left < quarter ? left : quarter;
}

/* Appends id to the conversation's ids. */
static void push(TgChatSession *s, int32_t id) {
    if (s->ids.n == s->ids.cap) {
        s->ids.cap = s->ids.cap ? 2 * s->ids.cap : 256;
        s->ids.ids = tg_realloc(s->ids.ids, s->ids.cap * sizeof *s->ids.ids);
        s->ids.trained = tg_realloc(s->ids.trained, s->ids.cap);
    }
    s->ids.ids[s->ids.n] = id;
    s->ids.trained[s->ids.n++] = 0;
}

TgStatus tg_chat_session_reply(TgChatSession *s, const char *user, size_t len, ChatStream stream, void *ctx,
                               TgChatReply *reply) {
    *reply = (TgChatReply){.finish = TG_CHAT_FINISH_LENGTH};
    TG_TRY(tg_chat_session_add(s, TG_CHAT_USER, user, len));
    begin_turn(s); /* the assistant's: the generation prompt, the reply, <|im_end|>\n */
    TG_TRY(tg_chat_encode_generation_prompt(s->tok, &s->ct, &s->ids));
    const int64_t vocab = s->model->cfg.vocab;
    bool old = tg_tape_set_grad_enabled(s->tape, false);
    float *logits = sync(s, reply_room(s, 0));
    const size_t reply_start = s->ids.n; /* the reply's ids follow: the frequency and presence penalties count them */
    size_t text_len = 0, text_cap = 256;
    char *text = tg_malloc(text_cap);
    int64_t drawn = 0;
    TgStatus failed = TG_OK;
    for (;;) {
        if (s->sampling.repetition_penalty > 0)
            tg_sample_penalize(logits, vocab, s->context, s->cache.len, s->sampling.repetition_penalty, s->seen);
        tg_sample_penalize_drawn(logits, vocab, s->ids.ids + reply_start, drawn, s->sampling.frequency_penalty,
                                 s->sampling.presence_penalty, s->counts);
        int32_t next = tg_sample_token(logits, vocab, &s->sampling, &s->rng, s->probs, s->scratch);
        tg_tape_reset(s->tape);
        if (next < 0) {
            failed = tg_fail_context(TG_ERR_NUMERIC, "token %lld of the reply", (long long)drawn + 1);
            break;
        }
        if (next == s->ct.im_end || next == s->ct.eot) {
            reply->finish = TG_CHAT_FINISH_END;
            break;
        }
        push(s, next);
        drawn++;
        size_t n;
        const uint8_t *bytes = tg_tokenizer_token_bytes(s->tok, next, &n);
        if (text_len + n + 1 > text_cap) text = tg_realloc(text, text_cap = 2 * (text_len + n + 1));
        memcpy(text + text_len, bytes, n);
        text_len += n;
        if (stream && n && (failed = stream(ctx, (const char *)bytes, n)) != TG_OK) break;
        if (drawn == s->max_reply) break;
        logits = s->cache.len < s->model->cfg.seq_len ? sync(s, 0) : rebuild(s, reply_room(s, drawn));
    }
    tg_tape_set_grad_enabled(s->tape, old);
    text[text_len] = '\0';
    reply->n_ids = drawn;
    /* the turn closes as the template closes it; those ids are fed with the next turn */
    push(s, s->ct.im_end);
    TgStatus closed = tg_chat_encode_text(s->tok, "\n", 1, &s->ids);
    if (failed != TG_OK || closed != TG_OK) {
        free(text);
        return closed != TG_OK ? closed : failed; /* the message is that of the last failure */
    }
    reply->text = text;
    reply->len = text_len;
    return TG_OK;
}
