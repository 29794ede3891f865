/* A reply in MiniMind-3's template (tool_chat.h). */
#include "model/tool_chat.h"

#include <stdlib.h>
#include <string.h>

#include "support/json_reader.h"

void tg_tool_reply_free(TgToolReply *r) {
    free(r->reasoning), free(r->content), free(r->calls);
    memset(r, 0, sizeof *r);
}

static char *copy(const char *s, size_t n) {
    char *c = tg_malloc(n + 1);
    if (n) memcpy(c, s, n);
    c[n] = '\0';
    return c;
}

/* s[0..*n) without the newlines at its ends. */
static const char *trim_newlines(const char *s, size_t *n) {
    while (*n && *s == '\n') s++, (*n)--;
    while (*n && s[*n - 1] == '\n') (*n)--;
    return s;
}

void tg_tool_reply_parse(const char *text, size_t len, bool think, TgToolReply *out) {
    const char *reasoning = "", *content = text;
    size_t reasoning_len = 0, content_len = len;
    const char *close = memmem(text, len, "</think>", 8);
    if (close) {
        /* the thinking ends at the first </think>; an opening <think> the model wrote (closed
         * thinking) starts it */
        reasoning = text, reasoning_len = (size_t)(close - text);
        const char *open = memmem(reasoning, reasoning_len, "<think>", 7);
        if (open && !think) reasoning_len -= (size_t)(open + 7 - reasoning), reasoning = open + 7;
        content = close + 8, content_len = len - (size_t)(content - text);
    }
    reasoning = trim_newlines(reasoning, &reasoning_len);
    out->reasoning = copy(reasoning, reasoning_len), out->reasoning_len = reasoning_len;
    /* the calls out of the content */
    char *rest = tg_malloc(content_len + 1), *calls = tg_malloc(content_len + 3);
    size_t rest_len = 0, calls_len = 0;
    calls[calls_len++] = '[';
    const char *p = content, *end = content + content_len;
    while (p < end) {
        const char *open = memmem(p, (size_t)(end - p), "<tool_call>", 11);
        const char *shut = open ? memmem(open, (size_t)(end - open), "</tool_call>", 12) : NULL;
        if (!shut) {
            memcpy(rest + rest_len, p, (size_t)(end - p)), rest_len += (size_t)(end - p);
            break;
        }
        memcpy(rest + rest_len, p, (size_t)(open - p)), rest_len += (size_t)(open - p);
        size_t inner_len = (size_t)(shut - open - 11);
        const char *inner = trim_newlines(open + 11, &inner_len);
        char *json = copy(inner, inner_len);
        bool call = tg_json_check(json, inner_len, "a tool call") == TG_OK;
        tg_error_clear();
        TgJsonCursor c = tg_json_cursor(json, inner_len, 0), name;
        call = call && tg_json_type(&c) == TG_JSON_OBJECT && tg_json_find(&c, "name", &name) == 1 &&
               tg_json_type(&name) == TG_JSON_STRING;
        if (call) {
            if (out->n_calls++) calls[calls_len++] = ',';
            memcpy(calls + calls_len, json, inner_len), calls_len += inner_len;
        } else { /* not a call: text of the content */
            size_t whole = (size_t)(shut + 12 - open);
            memcpy(rest + rest_len, open, whole), rest_len += whole;
        }
        free(json);
        p = shut + 12;
    }
    calls[calls_len++] = ']';
    calls[calls_len] = '\0';
    const char *kept = trim_newlines(rest, &rest_len);
    out->content = copy(kept, rest_len), out->content_len = rest_len;
    out->calls = calls;
    free(rest);
}

/* The prompt's ids. A pre-split cuts a run of newlines before a non-space otherwise than at the
 * end of a text (GPT-2's: "\n\n<" is "\n" "\n" "<", a last "\n\n" one chunk), and the closed
 * thinking's prompt ends in "\n\n", which a model trained on whole conversations never saw as one
 * id before a reply: the prompt is encoded as if the reply's first byte followed, and that byte's
 * id dropped (when it is one id of its own). */
static TgStatus encode_prompt(const TgTokenizer *tok, const TgChatTokens *ct, TgToolRendering *r, TgChatIds *ids) {
    size_t start = ids->n;
    if (r->len > 0 && r->text[r->len - 1] == '\n') {
        r->text = tg_realloc(r->text, r->len + 2);
        memcpy(r->text + r->len, "<", 2), r->len++;
        TgStatus s = tg_tool_encode(tok, ct, r, true, ids);
        r->text[--r->len] = '\0';
        size_t n = 0;
        const uint8_t *last =
            s == TG_OK && ids->n > start ? tg_tokenizer_token_bytes(tok, ids->ids[ids->n - 1], &n) : NULL;
        if (last && n == 1 && last[0] == '<') {
            ids->n--;
            return TG_OK;
        }
        tg_error_clear(); /* a tokenizer without that byte alone: the text as it ends */
        ids->n = start;
    }
    return tg_tool_encode(tok, ct, r, true, ids);
}

TgStatus tg_tool_prompt_ids(const TgTokenizer *tok, const TgChatTokens *ct, const TgToolConversation *conv, bool think,
                            TgChatIds *out) {
    TgToolRendering r;
    tg_tool_render(conv, true, think, &r);
    TgStatus s = encode_prompt(tok, ct, &r, out);
    tg_tool_rendering_free(&r);
    return s;
}

TgStatus tg_tool_chat_reply(TgModel *model, const TgTokenizer *tok, const TgChatTokens *ct, TgTape *tape,
                            const TgSampleOptions *opts, uint64_t seed, int64_t max_reply,
                            const TgToolConversation *conv, bool think, TgToolReply *out) {
    memset(out, 0, sizeof *out);
    TgChatIds ids = {0};
    TgStatus s = tg_tool_prompt_ids(tok, ct, conv, think, &ids);
    int64_t seq = model->cfg.seq_len, n = (int64_t)ids.n;
    if (s == TG_OK && n >= seq)
        s = tg_fail(TG_ERR_ARG,
                    "the conversation takes %lld tokens; the model's context holds %lld, the reply's included",
                    (long long)n, (long long)seq);
    if (s != TG_OK) {
        tg_chat_ids_free(&ids);
        return s;
    }
    int64_t room = max_reply < seq - n ? max_reply : seq - n;
    int32_t *drawn = tg_malloc((size_t)(n + room + 1) * sizeof *drawn);
    TgRng rng;
    tg_rng_seed(&rng, seed);
    TgSampler sampler = {model, tape, opts, &rng};
    int64_t total = tg_sample_generate(&sampler, ids.ids, n, room, ct->im_end, drawn);
    tg_chat_ids_free(&ids);
    if (total < 0) {
        free(drawn);
        return TG_ERR_NUMERIC; /* tg_sample_generate's message */
    }
    int64_t got = total - n;
    out->finish = got > 0 && drawn[total - 1] == ct->im_end ? TG_CHAT_FINISH_END : TG_CHAT_FINISH_LENGTH;
    out->n_ids = got - (out->finish == TG_CHAT_FINISH_END);
    out->prompt_ids = n;
    char *text;
    size_t len;
    s = tg_tokenizer_decode(tok, drawn + n, (size_t)out->n_ids, &text, &len);
    free(drawn);
    TG_TRY(s);
    tg_tool_reply_parse(text, len, think, out);
    free(text);
    return TG_OK;
}
