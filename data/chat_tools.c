/* Conversations with tools and thinking, in MiniMind-3's template (chat_tools.h). */
#include "data/chat_tools.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/json_reader.h"

#define IM_START "<|im_start|>"
#define IM_END "<|im_end|>"
#define TOOLS_HEAD                                                                                                     \
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function "  \
    "signatures within <tools></tools> XML tags:\n<tools>"
#define TOOLS_TAIL                                                                                                     \
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "              \
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n" \
    "</tool_call>"

/* The same words as Jinja: its string literals read "\n" as a newline. */
const char tg_tool_template_jinja[] =
    "{%- if tools -%}"
    "{{- '" IM_START "system\\n' -}}"
    "{%- if messages[0].role == 'system' -%}{{- messages[0].content + '\\n\\n' -}}{%- endif -%}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with "
    "function signatures within <tools></tools> XML tags:\\n<tools>' -}}"
    "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\\n</tool_call>" IM_END "\\n' -}}"
    "{%- elif messages[0].role == 'system' -%}"
    "{{- '" IM_START "system\\n' + messages[0].content + '" IM_END "\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message.content is string -%}{%- set content = message.content -%}{%- else -%}{%- set content = '' -%}{%- "
    "endif -%}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) -%}"
    "{{- '" IM_START "' + message.role + '\\n' + content + '" IM_END "\\n' -}}"
    "{%- elif message.role == 'assistant' -%}"
    "{%- set reasoning = '' -%}"
    "{%- if message.reasoning_content is string -%}{%- set reasoning = message.reasoning_content -%}"
    "{%- elif '</think>' in content -%}"
    "{%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}"
    "{%- endif -%}"
    "{{- '" IM_START
    "assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') -}}"
    "{%- if message.tool_calls -%}{%- for call in message.tool_calls -%}"
    "{%- if call.function -%}{%- set call = call.function -%}{%- endif -%}"
    "{%- if content or not loop.first -%}{{- '\\n' -}}{%- endif -%}"
    "{{- '<tool_call>\\n{\"name\": \"' + call.name + '\", \"arguments\": ' -}}"
    "{%- if call.arguments is string -%}{{- call.arguments -}}{%- else -%}{{- call.arguments | tojson -}}{%- endif -%}"
    "{{- '}\\n</tool_call>' -}}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '" IM_END "\\n' -}}"
    "{%- elif message.role == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '" IM_START "user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' -}}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '" IM_END "\\n' -}}{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '" IM_START "assistant\\n' -}}"
    "{%- if open_thinking is defined and open_thinking -%}{{- '<think>\\n' -}}"
    "{%- else -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}"
    "{%- endif -%}";

const char *tg_chat_template_text(TgChatTemplate t) {
    return t == TG_CHAT_TEMPLATE_MINIMIND3 ? tg_tool_template_jinja : tg_chat_template_jinja;
}

static const char *const role_names[TG_TOOL_ROLE_COUNT] = {"system", "user", "assistant", "tool"};

void tg_tool_conversation_free(TgToolConversation *conv) {
    free(conv->turns), free(conv->text);
    memset(conv, 0, sizeof *conv);
}

/* ---- text the conversation holds ---- */

/* Room for n more bytes and a NUL after what conv holds. */
static void reserve(TgToolConversation *conv, size_t n) {
    if (conv->text_len + n + 1 <= conv->text_cap) return;
    size_t cap = conv->text_cap ? conv->text_cap : 256;
    while (cap < conv->text_len + n + 1) cap *= 2;
    conv->text = tg_realloc(conv->text, conv->text_cap = cap);
}

static void put(TgToolConversation *conv, const char *s, size_t n) {
    reserve(conv, n);
    if (n) memcpy(conv->text + conv->text_len, s, n);
    conv->text_len += n;
    conv->text[conv->text_len] = '\0';
}

static void puts_(TgToolConversation *conv, const char *s) { put(conv, s, strlen(s)); }

/* s's bytes as a JSON string as Python's json.dumps(ensure_ascii=False) writes it. */
static void put_json_string(TgToolConversation *conv, const char *s, size_t n) {
    put(conv, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char esc[8];
        const char *e = ch == '"'    ? "\\\""
                        : ch == '\\' ? "\\\\"
                        : ch == '\n' ? "\\n"
                        : ch == '\r' ? "\\r"
                        : ch == '\t' ? "\\t"
                        : ch == '\b' ? "\\b"
                        : ch == '\f' ? "\\f"
                                     : NULL;
        if (!e && ch < 0x20) snprintf(esc, sizeof esc, "\\u%04x", ch), e = esc;
        if (e)
            puts_(conv, e);
        else
            put(conv, s + i, 1);
    }
    put(conv, "\"", 1);
}

/* A double as Python's repr writes it: the fewest digits that read back as it, positional from
 * 1e-4 up to 1e16 (with ".0" when whole), else d.ddde+XX. */
static void put_python_float(TgToolConversation *conv, double v) {
    if (!isfinite(v)) {
        puts_(conv, isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
        return;
    }
    char sci[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(sci, sizeof sci, "%.*e", p - 1, v);
        if (strtod(sci, NULL) == v) break;
    }
    /* sci: [-]d[.ddd]e[+-]XX */
    const char *m = sci;
    bool negative = *m == '-';
    if (negative) m++;
    char digits[24];
    size_t nd = 0;
    for (; *m && *m != 'e'; m++)
        if (*m != '.') digits[nd++] = *m;
    int exp = atoi(m + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    char out[64];
    size_t o = 0;
    if (negative) out[o++] = '-';
    if (exp >= -5 + 1 && exp < 16) {
        if (exp >= 0) {
            for (int i = 0; i <= exp; i++) out[o++] = (size_t)i < nd ? digits[i] : '0';
            out[o++] = '.';
            if ((size_t)exp + 1 < nd)
                for (size_t i = (size_t)exp + 1; i < nd; i++) out[o++] = digits[i];
            else
                out[o++] = '0';
        } else {
            out[o++] = '0', out[o++] = '.';
            for (int i = 0; i < -exp - 1; i++) out[o++] = '0';
            for (size_t i = 0; i < nd; i++) out[o++] = digits[i];
        }
        out[o] = '\0';
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (size_t i = 1; i < nd; i++) out[o++] = digits[i];
        }
        snprintf(out + o, sizeof out - o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    puts_(conv, out);
}

/* The value at c written as Python's json.dumps(ensure_ascii=False) writes what json.loads read
 * of it; c moves past it. */
static void put_json_value(TgToolConversation *conv, TgJsonCursor *c) {
    TgJsonType t = tg_json_type(c);
    switch (t) {
    case TG_JSON_NULL:
        puts_(conv, "null"), tg_json_skip(c);
        return;
    case TG_JSON_TRUE:
        puts_(conv, "true"), tg_json_skip(c);
        return;
    case TG_JSON_FALSE:
        puts_(conv, "false"), tg_json_skip(c);
        return;
    case TG_JSON_NUMBER: {
        const char *raw = c->text + c->pos;
        size_t n = strspn(raw, "-+0123456789.eE");
        bool whole = strcspn(raw, ".eE") >= n;
        double v = tg_json_read_number(c);
        if (whole && !(n == 2 && raw[0] == '-' && raw[1] == '0'))
            put(conv, raw, n);
        else if (whole)
            puts_(conv, "0");
        else
            put_python_float(conv, v);
        return;
    }
    case TG_JSON_STRING: {
        size_t n;
        char *s = tg_json_decode_alloc(tg_json_read_string(c), &n);
        put_json_string(conv, s, n);
        free(s);
        return;
    }
    case TG_JSON_ARRAY:
    case TG_JSON_OBJECT: {
        bool object = t == TG_JSON_OBJECT;
        put(conv, object ? "{" : "[", 1);
        tg_json_enter(c);
        TgJsonString key;
        for (bool first = true; object ? tg_json_next_key(c, &key) : tg_json_next_item(c); first = false) {
            if (!first) put(conv, ", ", 2);
            if (object) {
                size_t n;
                char *k = tg_json_decode_alloc(key, &n);
                put_json_string(conv, k, n);
                free(k);
                put(conv, ": ", 2);
            }
            put_json_value(conv, c);
        }
        put(conv, object ? "}" : "]", 1);
        return;
    }
    }
}

/* ---- reading ---- */

static bool fail(char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(char *why, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return false;
}

/* A member that is an array, or a string holding one as JSON (MiniMind's data writes them so): a
 * cursor at the array, over `owned` text when it came from a string (the caller frees it). */
static bool array_of(TgJsonCursor *c, const char *where, const char *member, TgJsonCursor *array, char **owned,
                     char *why, size_t cap) {
    *owned = NULL;
    TgJsonType t = tg_json_type(c);
    if (t == TG_JSON_ARRAY) {
        *array = *c;
        return true;
    }
    if (t != TG_JSON_STRING)
        return fail(why, cap, "%s: \"%s\" is %s, not an array or a JSON string of one", where, member,
                    tg_json_type_name(t));
    TgJsonCursor at = *c;
    size_t n;
    *owned = tg_json_decode_alloc(tg_json_read_string(&at), &n);
    if (tg_json_check(*owned, n, member) != TG_OK) {
        fail(why, cap, "%s: %s", where, tg_error_message());
        tg_error_clear();
    } else {
        *array = tg_json_cursor(*owned, n, 0);
        if (tg_json_type(array) == TG_JSON_ARRAY) return true;
        fail(why, cap, "%s: \"%s\" holds %s, not an array", where, member, tg_json_type_name(tg_json_type(array)));
    }
    free(*owned); /* a refusal holds nothing */
    *owned = NULL;
    return false;
}

/* The tools: each one's JSON after a \n. */
static bool read_tools(TgJsonCursor *c, const char *where, TgToolConversation *conv, char *why, size_t cap) {
    TgJsonCursor array;
    char *owned;
    if (!array_of(c, where, "tools", &array, &owned, why, cap)) return false;
    conv->has_tools = true;
    conv->tools.offset = conv->text_len;
    tg_json_enter(&array);
    while (tg_json_next_item(&array)) {
        put(conv, "\n", 1);
        put_json_value(conv, &array);
        conv->n_tools++;
    }
    conv->tools.len = conv->text_len - conv->tools.offset;
    free(owned);
    return true;
}

/* An assistant's tool calls, rendered into the turn. */
static bool read_calls(TgJsonCursor *c, const char *where, TgToolConversation *conv, TgToolTurn *turn, char *why,
                       size_t cap) {
    TgJsonCursor array;
    char *owned;
    if (!array_of(c, where, "tool_calls", &array, &owned, why, cap)) return false;
    turn->calls.offset = conv->text_len;
    tg_json_enter(&array);
    bool ok = true;
    while (ok && tg_json_next_item(&array)) {
        TgJsonCursor call = array, name, args, function;
        if (tg_json_type(&call) != TG_JSON_OBJECT) {
            ok = fail(why, cap, "%s: tool call %zu is %s, not an object", where, turn->n_calls + 1,
                      tg_json_type_name(tg_json_type(&call)));
            break;
        }
        if (tg_json_find(&call, "function", &function) == 1 && tg_json_type(&function) == TG_JSON_OBJECT)
            call = function;
        if (tg_json_find(&call, "name", &name) != 1 || tg_json_type(&name) != TG_JSON_STRING) {
            ok = fail(why, cap, "%s: tool call %zu has no \"name\" string", where, turn->n_calls + 1);
            break;
        }
        if (tg_json_find(&call, "arguments", &args) != 1) {
            ok = fail(why, cap, "%s: tool call %zu has no \"arguments\"", where, turn->n_calls + 1);
            break;
        }
        if (turn->n_calls++) put(conv, "\n", 1);
        puts_(conv, "<tool_call>\n{\"name\": \"");
        size_t n;
        char *s = tg_json_decode_alloc(tg_json_read_string(&name), &n);
        put(conv, s, n);
        free(s);
        puts_(conv, "\", \"arguments\": ");
        if (tg_json_type(&args) == TG_JSON_STRING) {
            s = tg_json_decode_alloc(tg_json_read_string(&args), &n);
            put(conv, s, n);
            free(s);
        } else {
            put_json_value(conv, &args);
        }
        puts_(conv, "}\n</tool_call>");
        tg_json_skip(&array);
    }
    turn->calls.len = conv->text_len - turn->calls.offset;
    free(owned);
    return ok;
}

/* A string member into the buffer: *t. */
static void read_text(TgJsonCursor *c, TgToolConversation *conv, TgToolText *t) {
    TgJsonString s = tg_json_read_string(c);
    reserve(conv, s.raw_len); /* decoding never lengthens a string */
    t->offset = conv->text_len;
    t->len = tg_json_decode(s, conv->text + conv->text_len);
    conv->text_len += t->len;
    conv->text[conv->text_len] = '\0';
}

static bool read_turn(TgJsonCursor *c, const char *where, TgToolConversation *conv, char *why, size_t cap) {
    if (tg_json_type(c) != TG_JSON_OBJECT)
        return fail(why, cap, "%s is %s, not an object with \"role\" and \"content\"", where,
                    tg_json_type_name(tg_json_type(c)));
    TgJsonCursor role, v;
    size_t n_role = tg_json_find(c, "role", &role);
    if (n_role != 1 || tg_json_type(&role) != TG_JSON_STRING)
        return fail(why, cap, n_role > 1 ? "%s gives \"role\" twice" : "%s has no \"role\" string", where);
    TgJsonString r = tg_json_read_string(&role);
    int k = 0;
    while (k < TG_TOOL_ROLE_COUNT && !tg_json_string_is(r, role_names[k])) k++;
    if (k == TG_TOOL_ROLE_COUNT)
        return fail(why, cap, "%s: the role is none of system, user, assistant and tool", where);
    if (conv->n_turns == conv->cap_turns)
        conv->turns = tg_realloc(conv->turns,
                                 (conv->cap_turns = conv->cap_turns ? 2 * conv->cap_turns : 8) * sizeof *conv->turns);
    TgToolTurn turn = {.role = (TgToolRole)k};
    static const char *const members[] = {"content", "reasoning_content", "tool_calls", "tools"};
    for (int m = 0; m < 4; m++) {
        size_t n = tg_json_find(c, members[m], &v);
        if (n > 1) return fail(why, cap, "%s gives \"%s\" twice", where, members[m]);
        if (n == 0 || tg_json_type(&v) == TG_JSON_NULL) continue;
        if (m < 2 && tg_json_type(&v) != TG_JSON_STRING)
            return fail(why, cap, "%s: \"%s\" is %s, not a string", where, members[m],
                        tg_json_type_name(tg_json_type(&v)));
        if (m == 0) read_text(&v, conv, &turn.content);
        if (m == 1 && turn.role == TG_TOOL_ASSISTANT) read_text(&v, conv, &turn.reasoning), turn.has_reasoning = true;
        if (m == 2 && turn.role == TG_TOOL_ASSISTANT && !read_calls(&v, where, conv, &turn, why, cap)) return false;
        if (m == 3 && turn.role == TG_TOOL_SYSTEM) {
            if (conv->has_tools) return fail(why, cap, "%s gives the tools again", where);
            if (!read_tools(&v, where, conv, why, cap)) return false;
        }
    }
    conv->turns[conv->n_turns++] = turn;
    return true;
}

bool tg_tool_conversation_parse(const TgJsonlLine *line, TgToolConversation *conv, char *why, size_t why_cap) {
    conv->n_turns = conv->text_len = conv->n_tools = 0;
    conv->has_tools = false;
    conv->tools = (TgToolText){0, 0};
    put(conv, "", 0);
    long long number = (long long)line->number;
    TgJsonCursor top = tg_json_cursor(line->text, line->len, 0), turns, tools;
    const char *member = "conversations";
    size_t found = tg_json_find(&top, member, &turns);
    if (found == 0 && tg_json_find(&top, "messages", &turns) == 1) found = 1, member = "messages";
    if (found != 1 || tg_json_type(&turns) != TG_JSON_ARRAY)
        return fail(why, why_cap, found > 1 ? "line %lld gives \"%s\" twice" : "line %lld has no \"%s\" array", number,
                    member);
    tg_json_enter(&turns);
    for (size_t i = 0; tg_json_next_item(&turns); i++) {
        char where[64];
        snprintf(where, sizeof where, "line %lld, turn %zu", number, i + 1);
        if (!read_turn(&turns, where, conv, why, why_cap)) return false;
        tg_json_skip(&turns);
    }
    if (conv->n_turns == 0) return fail(why, why_cap, "line %lld: \"%s\" is empty", number, member);
    size_t n_tools = tg_json_find(&top, "tools", &tools);
    if (n_tools == 1 && tg_json_type(&tools) != TG_JSON_NULL) {
        char where[32];
        snprintf(where, sizeof where, "line %lld", number);
        if (conv->has_tools)
            return fail(why, why_cap, "line %lld gives the tools on its system turn and beside it", number);
        if (!read_tools(&tools, where, conv, why, why_cap)) return false;
    }
    return true;
}

/* ---- rendering ---- */

typedef struct {
    TgToolRendering *r;
    size_t cap, cap_spans, cap_markers;
} Out;

static void emit(Out *o, const char *s, size_t n) {
    TgToolRendering *r = o->r;
    if (r->len + n + 1 > o->cap) {
        while (o->cap < r->len + n + 1) o->cap = o->cap ? 2 * o->cap : 1024;
        r->text = tg_realloc(r->text, o->cap);
    }
    if (n) memcpy(r->text + r->len, s, n);
    r->len += n;
    r->text[r->len] = '\0';
}

static void emits(Out *o, const char *s) { emit(o, s, strlen(s)); }

/* A marker the template writes (not one a content holds): where it is, then its text. */
static void mark(Out *o, bool start) {
    TgToolRendering *r = o->r;
    if (r->n_markers == o->cap_markers)
        r->markers =
            tg_realloc(r->markers, (o->cap_markers = o->cap_markers ? 2 * o->cap_markers : 16) * sizeof *r->markers);
    r->markers[r->n_markers++] = r->len;
    emits(o, start ? IM_START : IM_END);
}

static void trained_from(Out *o, size_t start) {
    TgToolRendering *r = o->r;
    if (r->n_trained == o->cap_spans)
        r->trained = tg_realloc(r->trained, (o->cap_spans = o->cap_spans ? 2 * o->cap_spans : 8) * sizeof *r->trained);
    r->trained[r->n_trained++] = (TgToolText){start, r->len - start};
}

/* s[0..n) without the newlines at its start (lead), its end (trail). */
static void strip_newlines(const char **s, size_t *n, bool lead, bool trail) {
    while (lead && *n && **s == '\n') (*s)++, (*n)--;
    while (trail && *n && (*s)[*n - 1] == '\n') (*n)--;
}

/* The last occurrence of needle in s[0..n), or NULL. */
static const char *last_of(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = n >= k ? n - k + 1 : 0; i-- > 0;)
        if (memcmp(s + i, needle, k) == 0) return s + i;
    return NULL;
}

static void render_assistant(Out *o, const TgToolConversation *conv, const TgToolTurn *t) {
    const char *content = tg_tool_text(conv, t->content), *reasoning = "";
    size_t content_len = t->content.len, reasoning_len = 0;
    if (t->has_reasoning) {
        reasoning = tg_tool_text(conv, t->reasoning), reasoning_len = t->reasoning.len;
    } else {
        const char *close = memmem(content, content_len, "</think>", 8);
        if (close) {
            /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
            reasoning = content, reasoning_len = (size_t)(close - content);
            strip_newlines(&reasoning, &reasoning_len, false, true);
            const char *open = last_of(reasoning, reasoning_len, "<think>");
            if (open) reasoning_len -= (size_t)(open + 7 - reasoning), reasoning = open + 7;
            strip_newlines(&reasoning, &reasoning_len, true, false);
            /* content.split('</think>')[-1].lstrip('\n') */
            const char *after = last_of(content, content_len, "</think>") + 8;
            content_len -= (size_t)(after - content), content = after;
            strip_newlines(&content, &content_len, true, false);
        }
    }
    bool has_content = content_len > 0; /* the template's `content` (before its own lstrip) */
    strip_newlines(&reasoning, &reasoning_len, true, true);
    strip_newlines(&content, &content_len, true, false);
    mark(o, true);
    emits(o, "assistant\n");
    size_t start = o->r->len;
    emits(o, "<think>\n");
    emit(o, reasoning, reasoning_len);
    emits(o, "\n</think>\n\n");
    emit(o, content, content_len);
    if (t->n_calls) {
        if (has_content) emits(o, "\n");
        emit(o, tg_tool_text(conv, t->calls), t->calls.len);
    }
    mark(o, false);
    trained_from(o, start);
    emits(o, "\n");
}

void tg_tool_render(const TgToolConversation *conv, bool add_generation_prompt, bool open_thinking,
                    TgToolRendering *out) {
    memset(out, 0, sizeof *out);
    Out o = {.r = out};
    emit(&o, "", 0);
    bool first_system = conv->n_turns > 0 && conv->turns[0].role == TG_TOOL_SYSTEM;
    if (conv->n_tools > 0) { /* an empty list is no tools, as the template's `if tools` reads it */
        mark(&o, true);
        emits(&o, "system\n");
        if (first_system) {
            emit(&o, tg_tool_text(conv, conv->turns[0].content), conv->turns[0].content.len);
            emits(&o, "\n\n");
        }
        emits(&o, TOOLS_HEAD);
        emit(&o, tg_tool_text(conv, conv->tools), conv->tools.len);
        emits(&o, TOOLS_TAIL);
        mark(&o, false);
        emits(&o, "\n");
    } else if (first_system) {
        mark(&o, true);
        emits(&o, "system\n");
        emit(&o, tg_tool_text(conv, conv->turns[0].content), conv->turns[0].content.len);
        mark(&o, false);
        emits(&o, "\n");
    }
    for (size_t i = 0; i < conv->n_turns; i++) {
        const TgToolTurn *t = &conv->turns[i];
        const char *content = tg_tool_text(conv, t->content);
        switch (t->role) {
        case TG_TOOL_SYSTEM: /* past the first, a system turn renders as a user turn does */
        case TG_TOOL_USER:
            if (t->role == TG_TOOL_SYSTEM && i == 0) break;
            mark(&o, true);
            emits(&o, role_names[t->role]);
            emits(&o, "\n");
            emit(&o, content, t->content.len);
            mark(&o, false);
            emits(&o, "\n");
            break;
        case TG_TOOL_ASSISTANT:
            render_assistant(&o, conv, t);
            break;
        case TG_TOOL_TOOL:
            if (i == 0 || conv->turns[i - 1].role != TG_TOOL_TOOL) mark(&o, true), emits(&o, "user");
            emits(&o, "\n<tool_response>\n");
            emit(&o, content, t->content.len);
            emits(&o, "\n</tool_response>");
            if (i + 1 == conv->n_turns || conv->turns[i + 1].role != TG_TOOL_TOOL) mark(&o, false), emits(&o, "\n");
            break;
        case TG_TOOL_ROLE_COUNT:
            break;
        }
    }
    if (add_generation_prompt)
        mark(&o, true), emits(&o, "assistant\n<think>\n"), emits(&o, open_thinking ? "" : "\n</think>\n\n");
}

void tg_tool_rendering_free(TgToolRendering *r) {
    free(r->text), free(r->trained), free(r->markers);
    memset(r, 0, sizeof *r);
}

/* ---- ids ---- */

TgStatus tg_tool_encode(const TgTokenizer *tok, const TgChatTokens *ct, const TgToolRendering *r, bool literal,
                        TgChatIds *out) {
    static const char *const markers[2] = {IM_START, IM_END};
    const size_t marker_len[2] = {strlen(IM_START), strlen(IM_END)};
    size_t at = 0, span = 0, next_marker = 0;
    TgChatIds piece = {0};
    for (;;) {
        /* the next marker at or after `at` (literal: the next the template wrote), and the piece
         * before it */
        size_t next = r->len;
        int which = -1;
        if (literal) {
            if (next_marker < r->n_markers) {
                next = r->markers[next_marker++];
                which = memcmp(r->text + next, IM_START, marker_len[0]) == 0 ? 0 : 1;
            }
        } else {
            for (int m = 0; m < 2; m++) {
                const char *hit = memmem(r->text + at, r->len - at, markers[m], marker_len[m]);
                if (hit && (size_t)(hit - r->text) < next) next = (size_t)(hit - r->text), which = m;
            }
        }
        piece.n = 0;
        TgStatus s = literal ? tg_chat_encode_text_literal(tok, r->text + at, next - at, &piece)
                             : tg_chat_encode_text(tok, r->text + at, next - at, &piece);
        if (s != TG_OK) {
            tg_chat_ids_free(&piece);
            return s;
        }
        /* each id's bytes [from, to), the marker's after the piece's; trained when they meet a span
         * (the spans come in order, as the ids do) */
        size_t from = at;
        for (size_t i = 0; i < piece.n + (which >= 0); i++) {
            bool marker = i == piece.n;
            size_t n = marker_len[which < 0 ? 0 : which];
            if (!marker) tg_tokenizer_token_bytes(tok, piece.ids[i], &n);
            size_t to = from + n;
            while (span < r->n_trained && r->trained[span].offset + r->trained[span].len <= from) span++;
            bool trained = span < r->n_trained && r->trained[span].offset < to;
            int32_t id = marker ? (which == 0 ? ct->im_start : ct->im_end) : piece.ids[i];
            uint8_t flag = trained;
            tg_chat_ids_append(out, &(TgChatIds){.ids = &id, .trained = &flag, .n = 1, .cap = 1});
            from = to;
        }
        if (which < 0) break;
        at = next + marker_len[which];
    }
    tg_chat_ids_free(&piece);
    return TG_OK;
}
