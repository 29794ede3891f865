/* A chat completion request read and judged (request.h). */
#include "serve/request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/json_reader.h"

void serve_error_set(ServeError *e, int status, const char *type, const char *code, const char *param, const char *fmt,
                     ...) {
    e->status = status, e->type = type, e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

void serve_request_free(ServeRequest *req) {
    tg_chat_conversation_free(&req->conv);
    free(req->prompt);
    for (int i = 0; i < req->n_stop; i++) free(req->stop[i]);
    memset(req, 0, sizeof *req);
}

#define BAD(param, ...) (serve_error_set(err, 400, "invalid_request_error", NULL, param, __VA_ARGS__), false)

/* The number at c into *v, refused unless it is a number in [lo, hi]. */
static bool read_number(TgJsonCursor *c, const char *param, double lo, double hi, double *v, ServeError *err) {
    if (tg_json_type(c) != TG_JSON_NUMBER) return BAD(param, "'%s' must be a number", param);
    *v = tg_json_read_number(c);
    if (!(*v >= lo && *v <= hi)) return BAD(param, "'%s' is %g; it must be between %g and %g", param, *v, lo, hi);
    return true;
}

/* The integer at c into *v, refused unless it is a whole number in [lo, hi]. */
static bool read_integer(TgJsonCursor *c, const char *param, double lo, double hi, int64_t *v, ServeError *err) {
    double d;
    if (!read_number(c, param, lo, hi, &d, err)) return false;
    if (d != floor(d)) return BAD(param, "'%s' must be a whole number, not %g", param, d);
    *v = (int64_t)d;
    return true;
}

/* A message's content: a string, or an array of {"type": "text", "text": ...} parts, joined;
 * null (allowed for an assistant's) is "". Appended to conv as a turn of `role`. */
static bool read_content(TgJsonCursor *c, TgChatRole role, const char *param, TgConversation *conv, ServeError *err) {
    TgJsonType t = tg_json_type(c);
    if (t == TG_JSON_NULL && role == TG_CHAT_ASSISTANT) {
        tg_json_skip(c);
        tg_chat_conversation_add(conv, role, "", 0);
        return true;
    }
    if (t == TG_JSON_STRING) {
        TgJsonString s = tg_json_read_string(c);
        size_t n;
        char *text = tg_json_decode_alloc(s, &n);
        tg_chat_conversation_add(conv, role, text, n);
        free(text);
        return true;
    }
    if (t != TG_JSON_ARRAY) return BAD(param, "'%s' must be a string or an array of text parts", param);
    char *joined = NULL;
    size_t len = 0;
    tg_json_enter(c);
    int part = 0;
    bool ok = true;
    while (ok && tg_json_next_item(c)) {
        TgJsonCursor text;
        if (tg_json_type(c) != TG_JSON_OBJECT) {
            ok = BAD(param, "'%s' part %d must be an object {\"type\": \"text\", \"text\": ...}", param, part);
        } else {
            TgJsonCursor type;
            if (tg_json_find(c, "type", &type) != 1 || tg_json_type(&type) != TG_JSON_STRING ||
                !tg_json_string_is(tg_json_read_string(&type), "text")) {
                ok = BAD(param, "'%s' part %d: only parts of \"type\": \"text\" are read by this server", param, part);
            } else if (tg_json_find(c, "text", &text) != 1 || tg_json_type(&text) != TG_JSON_STRING) {
                ok = BAD(param, "'%s' part %d needs one \"text\" string", param, part);
            } else {
                TgJsonString s = tg_json_read_string(&text);
                joined = tg_realloc(joined, len + s.raw_len + 1);
                len += tg_json_decode(s, joined + len);
            }
            tg_json_skip(c);
        }
        part++;
    }
    if (ok) tg_chat_conversation_add(conv, role, joined ? joined : "", len);
    free(joined);
    return ok;
}

/* The messages array at c into req->conv. */
static bool read_messages(TgJsonCursor *c, const ServeLimits *limits, ServeRequest *req, ServeError *err) {
    if (tg_json_type(c) != TG_JSON_ARRAY)
        return BAD("messages", "'messages' must be an array of {\"role\", \"content\"}");
    size_t n = tg_json_count(c);
    if (n == 0) return BAD("messages", "'messages' is empty: a chat needs at least the user's message");
    if ((int64_t)n > limits->max_messages)
        return BAD("messages", "%zu messages: this server takes at most %lld a request", n,
                   (long long)limits->max_messages);
    tg_json_enter(c);
    size_t i = 0;
    while (tg_json_next_item(c)) {
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (tg_json_type(c) != TG_JSON_OBJECT)
            return BAD(param, "'%s' must be an object {\"role\", \"content\"}", param);
        TgJsonCursor role_at, content_at;
        size_t roles = tg_json_find(c, "role", &role_at), contents = tg_json_find(c, "content", &content_at);
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (roles != 1 || tg_json_type(&role_at) != TG_JSON_STRING)
            return BAD(param, roles > 1 ? "'%s' is given twice" : "'%s' must be one string", param);
        TgJsonString r = tg_json_read_string(&role_at);
        TgChatRole role;
        if (tg_json_string_is(r, "system") || tg_json_string_is(r, "developer"))
            role = TG_CHAT_SYSTEM;
        else if (tg_json_string_is(r, "user"))
            role = TG_CHAT_USER;
        else if (tg_json_string_is(r, "assistant"))
            role = TG_CHAT_ASSISTANT;
        else
            return BAD(param, "'%s' must be \"system\", \"user\" or \"assistant\"", param);
        if (role == TG_CHAT_SYSTEM && i > 0) return BAD(param, "a system message may only come first (%s)", param);
        snprintf(param, sizeof param, "messages[%zu].content", i);
        if (contents != 1) return BAD(param, contents ? "'%s' is given twice" : "'%s' is missing", param);
        if (!read_content(&content_at, role, param, &req->conv, err)) return false;
        tg_json_skip(c);
        i++;
    }
    if (req->conv.turns[req->conv.n_turns - 1].role != TG_CHAT_USER)
        return BAD("messages", "the last message is the %s's; a reply answers a user message",
                   tg_chat_role_name(req->conv.turns[req->conv.n_turns - 1].role));
    return true;
}

/* stop: a string or an array of up to SERVE_MAX_STOP non-empty strings. */
static bool read_stop(TgJsonCursor *c, ServeRequest *req, ServeError *err) {
    TgJsonType t = tg_json_type(c);
    if (t == TG_JSON_NULL) return tg_json_skip(c), true;
    bool one = t == TG_JSON_STRING;
    if (!one && t != TG_JSON_ARRAY) return BAD("stop", "'stop' must be a string or an array of strings");
    if (!one) {
        if (tg_json_count(c) > SERVE_MAX_STOP) return BAD("stop", "'stop' holds at most %d strings", SERVE_MAX_STOP);
        tg_json_enter(c);
    }
    while (one || tg_json_next_item(c)) {
        if (tg_json_type(c) != TG_JSON_STRING) return BAD("stop", "'stop' must hold strings only");
        size_t n;
        char *s = tg_json_decode_alloc(tg_json_read_string(c), &n);
        if (n == 0) {
            free(s);
            return BAD("stop", "'stop' holds an empty string, which would end every reply before it starts");
        }
        req->stop[req->n_stop] = s, req->stop_len[req->n_stop++] = n;
        if (one) break;
    }
    return true;
}

/* A completion's prompt: a string, or an array of one string. */
static bool read_prompt(TgJsonCursor *c, ServeRequest *req, ServeError *err) {
    TgJsonType t = tg_json_type(c);
    if (t == TG_JSON_ARRAY) {
        if (tg_json_count(c) != 1)
            return BAD("prompt", "'prompt' as an array holds one string here: one completion a request");
        tg_json_enter(c);
        tg_json_next_item(c);
        if (tg_json_type(c) != TG_JSON_STRING)
            return BAD("prompt", "'prompt' must be a string, or an array of one string");
        req->prompt = tg_json_decode_alloc(tg_json_read_string(c), &req->prompt_len);
        tg_json_next_item(c); /* past the closing bracket */
        return true;
    }
    if (t != TG_JSON_STRING) return BAD("prompt", "'prompt' must be a string, or an array of one string");
    req->prompt = tg_json_decode_alloc(tg_json_read_string(c), &req->prompt_len);
    return true;
}

static bool read_bool(TgJsonCursor *c, const char *param, bool *v, ServeError *err) {
    TgJsonType t = tg_json_type(c);
    if (t != TG_JSON_TRUE && t != TG_JSON_FALSE) return BAD(param, "'%s' must be true or false", param);
    *v = t == TG_JSON_TRUE;
    tg_json_skip(c);
    return true;
}

static const char *const known[] = {"messages",
                                    "temperature",
                                    "top_p",
                                    "top_k",
                                    "max_tokens",
                                    "max_completion_tokens",
                                    "stop",
                                    "seed",
                                    "repetition_penalty",
                                    "frequency_penalty",
                                    "presence_penalty",
                                    "stream",
                                    "stream_options",
                                    "n",
                                    "prompt",
                                    "echo",
                                    "best_of",
                                    "suffix",
                                    "logprobs"};
enum { N_KNOWN = sizeof known / sizeof known[0] };

/* One known member's value (at c) into req; c moves past it. */
static bool read_member(int k, TgJsonCursor *c, const ServeLimits *limits, ServeRequest *req, ServeError *err) {
    const char *name = known[k];
    if (tg_json_type(c) == TG_JSON_NULL && k != 0) return tg_json_skip(c), true; /* null: the default */
    int64_t i;
    switch (k) {
    case 0:
        return read_messages(c, limits, req, err); /* it moves past the array */
    case 1:
        return read_number(c, name, 0, 2, &req->temperature, err);
    case 2:
        if (!read_number(c, name, 0, 1, &req->top_p, err)) return false;
        return req->top_p > 0 || BAD(name, "'top_p' must be above 0 (1 samples from every token)");
    case 3:
        if (!read_integer(c, name, 0, 1e9, &i, err)) return false;
        req->top_k = (int)i;
        return true;
    case 4:
    case 5:
        if (req->max_tokens) return BAD(name, "give 'max_tokens' or 'max_completion_tokens', not both");
        if (!read_integer(c, name, 1, 1e18, &i, err)) return false;
        if (i > limits->max_tokens)
            return BAD(name, "'%s' is %lld; this server draws at most %lld tokens a reply", name, (long long)i,
                       (long long)limits->max_tokens);
        req->max_tokens = i;
        return true;
    case 6:
        return read_stop(c, req, err);
    case 7:
        if (!read_integer(c, name, 0, 9007199254740992.0, &req->seed, err)) return false;
        req->has_seed = true;
        return true;
    case 8:
        if (!read_number(c, name, 0, 100, &req->repetition_penalty, err)) return false;
        return req->repetition_penalty > 0 || BAD(name, "'repetition_penalty' must be above 0 (1: none)");
    case 9:
        return read_number(c, name, -2, 2, &req->frequency_penalty, err);
    case 10:
        return read_number(c, name, -2, 2, &req->presence_penalty, err);
    case 11:
        return read_bool(c, name, &req->stream, err);
    case 12: {
        if (tg_json_type(c) != TG_JSON_OBJECT) return BAD(name, "'stream_options' must be an object");
        TgJsonCursor v;
        size_t n = tg_json_find(c, "include_usage", &v);
        if (n > 1) return BAD("stream_options.include_usage", "'stream_options.include_usage' is given twice");
        if (n == 1 && tg_json_type(&v) != TG_JSON_NULL &&
            !read_bool(&v, "stream_options.include_usage", &req->include_usage, err))
            return false;
        tg_json_skip(c);
        return true;
    }
    case 13:
    case 16:
        if (!read_integer(c, name, 1, 1e9, &i, err)) return false;
        return i == 1 || BAD(name, "'%s' is %lld: this server draws one reply a request", name, (long long)i);
    case 14:
        return read_prompt(c, req, err);
    case 15: {
        bool echo;
        if (!read_bool(c, name, &echo, err)) return false;
        return !echo || BAD(name, "'echo' is not supported by this server (false only)");
    }
    case 17:
    case 18:
        /* null (the default) was taken above; logprobs false asks for none either */
        if (k == 18 && tg_json_type(c) == TG_JSON_FALSE) return tg_json_skip(c), true;
        return BAD(name, "'%s' is not supported by this server (null only)", name);
    }
    return false;
}

bool serve_request_parse(ServeKind kind, const char *body, size_t len, const ServeLimits *limits, ServeRequest *req,
                         ServeError *err) {
    memset(req, 0, sizeof *req);
    req->kind = kind;
    req->temperature = 1, req->top_p = 1, req->repetition_penalty = 1;
    if (tg_json_check(body, len, "the request body") != TG_OK) {
        serve_error_set(err, 400, "invalid_request_error", "invalid_json", NULL, "%s", tg_error_message());
        tg_error_clear();
        return false;
    }
    TgJsonCursor c = tg_json_cursor(body, len, 0);
    if (tg_json_type(&c) != TG_JSON_OBJECT) return BAD(NULL, "the request body must be a JSON object");
    bool seen[N_KNOWN] = {false};
    tg_json_enter(&c);
    TgJsonString key;
    while (tg_json_next_key(&c, &key)) {
        int k = 0;
        while (k < N_KNOWN && !tg_json_string_is(key, known[k])) k++;
        if (k == N_KNOWN) {
            tg_json_skip(&c);
            continue;
        }
        if (seen[k]) return BAD(known[k], "'%s' is given twice", known[k]);
        if ((k == 0 && kind != SERVE_CHAT) || (k >= 14 && kind != SERVE_COMPLETION)) {
            const char *where =
                kind == SERVE_CHAT ? "a chat completion (/v1/chat/completions)" : "a completion (/v1/completions)";
            return BAD(known[k], "'%s' is no member of %s", known[k], where);
        }
        seen[k] = true;
        if (!read_member(k, &c, limits, req, err)) return false;
    }
    if (kind == SERVE_CHAT && !seen[0])
        return BAD("messages", "'messages' is missing: a chat completion needs the conversation");
    if (kind == SERVE_COMPLETION && !seen[14])
        return BAD("prompt", "'prompt' is missing: a completion needs the text to continue");
    if (req->include_usage && !req->stream)
        return BAD("stream_options", "'stream_options' is only allowed when 'stream' is true");
    return true;
}
