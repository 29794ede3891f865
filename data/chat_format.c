/* ChatML conversations: JSON in, text and token ids out (chat_format.h). */
#include "data/chat_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/json_reader.h"

/* Jinja's string literals read "\n" as a newline; `message['content']` and `['role']` are what
 * Hugging Face, llama.cpp and node-llama-cpp pass a template. */
const char tg_chat_template_jinja[] =
    "{%- for message in messages %}"
    "{{- '" TG_CHAT_IM_START "' + message['role'] + '\\n' + message['content'] + '" TG_CHAT_IM_END "' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '" TG_CHAT_IM_START "assistant\\n' }}{%- endif %}";

static const char *const role_names[TG_CHAT_ROLE_COUNT] = {"system", "user", "assistant"};

static const char *const template_names[TG_CHAT_TEMPLATE_COUNT] = {"chatml", "minimind-3"};

const char *tg_chat_template_name(TgChatTemplate t) {
    return t >= 0 && t < TG_CHAT_TEMPLATE_COUNT ? template_names[t] : "?";
}

const char *tg_chat_role_name(TgChatRole role) { return role >= 0 && role < TG_CHAT_ROLE_COUNT ? role_names[role] : "?"; }

/* ---- the conversation in memory ---- */

void tg_chat_conversation_clear(TgConversation *conv) {
    conv->n_turns = 0;
    conv->text_len = 0;
}

void tg_chat_conversation_free(TgConversation *conv) {
    free(conv->turns);
    free(conv->text);
    memset(conv, 0, sizeof *conv);
}

/* Room for `more` bytes of content after what conv holds. */
static char *reserve_text(TgConversation *conv, size_t more) {
    if (conv->text_len + more + 1 > conv->text_cap) {
        size_t cap = conv->text_cap ? conv->text_cap : 256;
        while (cap < conv->text_len + more + 1) cap *= 2;
        conv->text = tg_realloc(conv->text, cap);
        conv->text_cap = cap;
    }
    return conv->text + conv->text_len;
}

static void add_turn(TgConversation *conv, TgChatRole role, size_t offset, size_t len) {
    if (conv->n_turns == conv->cap_turns) {
        conv->cap_turns = conv->cap_turns ? 2 * conv->cap_turns : 8;
        conv->turns = tg_realloc(conv->turns, conv->cap_turns * sizeof *conv->turns);
    }
    conv->turns[conv->n_turns++] = (TgChatTurn){role, offset, len};
}

void tg_chat_conversation_add(TgConversation *conv, TgChatRole role, const char *content, size_t len) {
    char *at = reserve_text(conv, len);
    if (len) memcpy(at, content, len);
    add_turn(conv, role, conv->text_len, len);
    conv->text_len += len;
    conv->text[conv->text_len] = '\0';
}

bool tg_chat_conversation_has_reply(const TgConversation *conv) {
    for (size_t i = 0; i < conv->n_turns; i++)
        if (conv->turns[i].role == TG_CHAT_ASSISTANT) return true;
    return false;
}

/* ---- JSON ---- */

/* One turn object at c: its role and content, the content decoded into conv's buffer. */
static bool parse_turn(TgJsonCursor *c, TgConversation *conv, const char *where, char *why, size_t why_cap) {
    TgJsonType type = tg_json_type(c);
    if (type != TG_JSON_OBJECT) {
        snprintf(why, why_cap, "%s is %s, not an object with \"role\" and \"content\"", where, tg_json_type_name(type));
        return false;
    }
    tg_json_enter(c);
    TgJsonString key, role = {0}, content = {0};
    int n_role = 0, n_content = 0;
    TgJsonType role_type = TG_JSON_STRING, content_type = TG_JSON_STRING;
    while (tg_json_next_key(c, &key)) {
        bool is_role = tg_json_string_is(key, "role"), is_content = !is_role && tg_json_string_is(key, "content");
        if (!is_role && !is_content) {
            tg_json_skip(c);
            continue;
        }
        TgJsonType t = tg_json_type(c);
        if (is_role ? n_role++ : n_content++) {
            snprintf(why, why_cap, "%s gives \"%s\" twice", where, is_role ? "role" : "content");
            return false;
        }
        if (is_role) role_type = t;
        else content_type = t;
        if (t != TG_JSON_STRING) {
            tg_json_skip(c);
            continue;
        }
        if (is_role) role = tg_json_read_string(c);
        else content = tg_json_read_string(c);
    }
    if (!n_role || !n_content || role_type != TG_JSON_STRING || content_type != TG_JSON_STRING) {
        bool role_bad = !n_role || role_type != TG_JSON_STRING;
        const char *member = role_bad ? "role" : "content";
        if (!(role_bad ? n_role : n_content)) snprintf(why, why_cap, "%s has no \"%s\"", where, member);
        else
            snprintf(why, why_cap, "%s: \"%s\" is %s, not a string", where, member,
                     tg_json_type_name(role_bad ? role_type : content_type));
        return false;
    }
    int r = 0;
    while (r < TG_CHAT_ROLE_COUNT && !tg_json_string_is(role, role_names[r])) r++;
    if (r == TG_CHAT_ROLE_COUNT) {
        char name[40];
        size_t n = role.raw_len < sizeof name - 1 ? role.raw_len : sizeof name - 1;
        /* the line is checked UTF-8: a cut before a continuation byte (10xxxxxx) would split a
         * character, and the message would not be UTF-8 */
        while (n < role.raw_len && n > 0 && ((unsigned char)role.raw[n] & 0xC0) == 0x80) n--;
        memcpy(name, role.raw, n);
        name[n] = '\0';
        snprintf(why, why_cap, "%s has the role \"%s\": tapegrad's conversations hold system, user and assistant turns",
                 where, name);
        return false;
    }
    char *at = reserve_text(conv, content.raw_len);
    size_t len = tg_json_decode(content, at);
    add_turn(conv, (TgChatRole)r, conv->text_len, len);
    conv->text_len += len;
    conv->text[conv->text_len] = '\0';
    return true;
}

bool tg_chat_conversation_parse(const TgJsonlLine *line, TgConversation *conv, char *why, size_t why_cap) {
    return tg_chat_conversation_parse_member(line, "conversations", conv, why, why_cap);
}

bool tg_chat_conversation_parse_member(const TgJsonlLine *line, const char *member, TgConversation *conv, char *why,
                                       size_t why_cap) {
    tg_chat_conversation_clear(conv);
    TgJsonCursor c = tg_json_cursor(line->text, line->len, 0);
    tg_json_enter(&c);
    TgJsonString key;
    int found = 0;
    TgJsonType type = TG_JSON_NULL;
    size_t at = 0;
    while (tg_json_next_key(&c, &key)) {
        if (tg_json_string_is(key, member)) {
            if (found++ == 0) {
                type = tg_json_type(&c);
                at = c.pos;
            }
        }
        tg_json_skip(&c);
    }
    long long number = (long long)line->number;
    if (found != 1 || type != TG_JSON_ARRAY) {
        if (!found)
            snprintf(why, why_cap, "line %lld has no \"%s\" array", number, member);
        else if (found > 1)
            snprintf(why, why_cap, "line %lld gives \"%s\" twice", number, member);
        else
            snprintf(why, why_cap, "line %lld: \"%s\" is %s, not an array", number, member, tg_json_type_name(type));
        return false;
    }
    c = tg_json_cursor(line->text, line->len, at);
    tg_json_enter(&c);
    for (size_t i = 0; tg_json_next_item(&c); i++) {
        char where[64];
        if (strcmp(member, "conversations") == 0)
            snprintf(where, sizeof where, "line %lld, turn %zu", number, i + 1);
        else
            snprintf(where, sizeof where, "line %lld, %s turn %zu", number, member, i + 1);
        if (!parse_turn(&c, conv, where, why, why_cap)) return false;
    }
    if (conv->n_turns == 0) {
        snprintf(why, why_cap, "line %lld: \"%s\" is empty", number, member);
        return false;
    }
    return true;
}

/* ---- text ---- */

char *tg_chat_render_text(const TgConversation *conv, bool add_generation_prompt, size_t *len) {
    size_t total = add_generation_prompt ? strlen(TG_CHAT_GENERATION_PROMPT) : 0;
    for (size_t i = 0; i < conv->n_turns; i++)
        total += strlen(TG_CHAT_IM_START) + strlen(role_names[conv->turns[i].role]) + 1 + conv->turns[i].len +
                 strlen(TG_CHAT_IM_END) + 1;
    char *out = tg_malloc(total + 1), *p = out;
#define PUT(s, n) (memcpy(p, (s), (n)), p += (n))
#define PUT_STR(s) PUT(s, strlen(s))
    for (size_t i = 0; i < conv->n_turns; i++) {
        PUT_STR(TG_CHAT_IM_START);
        PUT_STR(role_names[conv->turns[i].role]);
        PUT_STR("\n");
        PUT(chat_turn_text(conv, i), conv->turns[i].len);
        PUT_STR(TG_CHAT_IM_END "\n");
    }
    if (add_generation_prompt) PUT_STR(TG_CHAT_GENERATION_PROMPT);
#undef PUT_STR
#undef PUT
    *p = '\0';
    *len = total;
    return out;
}

/* ---- ids ---- */

/* The special token whose text is `name`, or -1. */
static int32_t find_special(const TgTokenizer *tok, const char *name) {
    for (int32_t i = 0; i < tok->n_added; i++) {
        if (!tok->added[i].special) continue;
        size_t len;
        const uint8_t *b = tg_tokenizer_token_bytes(tok, tok->added[i].id, &len);
        if (len == strlen(name) && memcmp(b, name, len) == 0) return tok->added[i].id;
    }
    return -1;
}

TgStatus tg_chat_tokens_find(const TgTokenizer *tok, const char *origin, TgChatTokens *out) {
    out->im_start = find_special(tok, TG_CHAT_IM_START);
    out->im_end = find_special(tok, TG_CHAT_IM_END);
    out->eot = tok->eot_id;
    if (out->im_start >= 0 && out->im_end >= 0) return TG_OK;
    const char *missing = out->im_start < 0 && out->im_end < 0 ? TG_CHAT_IM_START " and " TG_CHAT_IM_END
                          : out->im_start < 0                  ? TG_CHAT_IM_START
                                                               : TG_CHAT_IM_END;
    return tg_fail(TG_ERR_MISMATCH,
                   "%s has no %s as a special token (a %s tokenizer): conversations need " TG_CHAT_IM_START " and " TG_CHAT_IM_END
                   " as single ids. Pretrain the base model with a tokenizer that has them: tapegrad train `tokenizer` bpe "
                   "`special_tokens` chatml (or tapegrad prepare ... `special_tokens` chatml), or `tokenizer` hf:FILE with "
                   "MiniMind's tokenizer.json",
                   origin, missing, tg_tokenizer_kind_name(tok->kind));
}

void tg_chat_ids_free(TgChatIds *ids) {
    free(ids->ids);
    free(ids->trained);
    memset(ids, 0, sizeof *ids);
}

static void reserve_ids(TgChatIds *out, size_t more) {
    if (out->n + more <= out->cap) return;
    size_t cap = out->cap ? out->cap : 256;
    while (cap < out->n + more) cap *= 2;
    out->ids = tg_realloc(out->ids, cap * sizeof *out->ids);
    out->trained = tg_realloc(out->trained, cap);
    out->cap = cap;
}

void tg_chat_ids_append(TgChatIds *out, const TgChatIds *from) {
    reserve_ids(out, from->n);
    memcpy(out->ids + out->n, from->ids, from->n * sizeof *from->ids);
    memcpy(out->trained + out->n, from->trained, from->n);
    out->n += from->n;
}

static void push_id(TgChatIds *out, int32_t id, bool trained) {
    reserve_ids(out, 1);
    out->ids[out->n] = id;
    out->trained[out->n++] = trained;
}

/* text's ids appended, none trained; literal: special tokens' text stays text. */
static TgStatus encode_text(const TgTokenizer *tok, const char *text, size_t len, bool literal, TgChatIds *out) {
    size_t cap = tg_tokenizer_max_ids(tok, len), n = 0;
    reserve_ids(out, cap);
    if (len && literal)
        TG_TRY(tg_tokenizer_encode_literal(tok, text, len, out->ids + out->n, cap, &n));
    else if (len)
        TG_TRY(tg_tokenizer_encode(tok, text, len, out->ids + out->n, cap, &n));
    if (n) memset(out->trained + out->n, 0, n); /* an empty text on empty ids: no memory to point into */
    out->n += n;
    return TG_OK;
}

TgStatus tg_chat_encode_text(const TgTokenizer *tok, const char *text, size_t len, TgChatIds *out) {
    return encode_text(tok, text, len, false, out);
}

TgStatus tg_chat_encode_text_literal(const TgTokenizer *tok, const char *text, size_t len, TgChatIds *out) {
    return encode_text(tok, text, len, true, out);
}

static TgStatus encode_turn(const TgTokenizer *tok, const TgChatTokens *ct, TgChatRole role, const char *content,
                            size_t len, bool literal, TgChatIds *out) {
    /* "{role}\n{content}" is one piece between the markers, encoded as the whole text is */
    const char *name = role_names[role];
    size_t header = strlen(name) + 1;
    char *piece = tg_malloc(header + len + 1);
    memcpy(piece, name, header - 1);
    piece[header - 1] = '\n';
    if (len) memcpy(piece + header, content, len);
    push_id(out, ct->im_start, false);
    size_t first = out->n;
    TgStatus s = encode_text(tok, piece, header + len, literal, out);
    free(piece);
    TG_TRY(s);
    bool reply = role == TG_CHAT_ASSISTANT;
    if (reply) {
        /* the ids that lie wholly inside "assistant\n" are the header's; from the first that
         * reaches past it on, the content's */
        size_t bytes = 0, i = first;
        for (; i < out->n; i++) {
            size_t n;
            tg_tokenizer_token_bytes(tok, out->ids[i], &n);
            if (bytes + n > header) break;
            bytes += n;
        }
        for (; i < out->n; i++) out->trained[i] = 1;
    }
    push_id(out, ct->im_end, reply);
    return tg_chat_encode_text(tok, "\n", 1, out);
}

TgStatus tg_chat_encode_turn(const TgTokenizer *tok, const TgChatTokens *ct, TgChatRole role, const char *content,
                             size_t len, TgChatIds *out) {
    return encode_turn(tok, ct, role, content, len, false, out);
}

TgStatus tg_chat_encode_turn_literal(const TgTokenizer *tok, const TgChatTokens *ct, TgChatRole role,
                                     const char *content, size_t len, TgChatIds *out) {
    return encode_turn(tok, ct, role, content, len, true, out);
}

TgStatus tg_chat_encode_conversation(const TgTokenizer *tok, const TgChatTokens *ct, const TgConversation *conv, TgChatIds *out) {
    for (size_t i = 0; i < conv->n_turns; i++)
        TG_TRY(tg_chat_encode_turn(tok, ct, conv->turns[i].role, chat_turn_text(conv, i), conv->turns[i].len, out));
    return TG_OK;
}

TgStatus tg_chat_encode_generation_prompt(const TgTokenizer *tok, const TgChatTokens *ct, TgChatIds *out) {
    push_id(out, ct->im_start, false);
    return tg_chat_encode_text(tok, "assistant\n", strlen("assistant\n"), out);
}
