/* Conversations with tools and thinking, as MiniMind-3's SFT data holds them, rendered as
 * MiniMind-3's chat template renders them (the `chat_template` of its tokenizer_config.json, a
 * Qwen3-style ChatML).
 *
 * A line is {"conversations": [turn, ...]} (or {"messages": [...]}, an API request's), each turn
 * {"role": "system"|"user"|"assistant"|"tool", "content": string or null, ...} with, besides:
 *   "reasoning_content"  an assistant's thinking (a string);
 *   "tool_calls"         an assistant's calls: an array, or a JSON string of one (MiniMind's data
 *                        writes them so), of {"name", "arguments"} or {"function": {"name",
 *                        "arguments"}}, the arguments an object or a JSON string;
 *   "tools"              the tool definitions, on the system turn: an array or a JSON string of one.
 * A "tools" member of the line itself is read as well (an API request's).
 *
 * The rendering (tg_tool_render), byte for byte MiniMind-3's template:
 *   a system turn first: with tools, <|im_start|>system\n + (its content + \n\n) + the tools
 *   preamble, one JSON per line between <tools> and </tools>, and the call format, <|im_end|>\n;
 *   without, <|im_start|>system\n{content}<|im_end|>\n. Then each turn:
 *   user (and a system turn past the first)  <|im_start|>{role}\n{content}<|im_end|>\n
 *   assistant  <|im_start|>assistant\n<think>\n{reasoning}\n</think>\n\n{content}{calls}<|im_end|>\n
 *              (reasoning: reasoning_content, or else, when the content holds </think>, what the
 *              content has between <think> and the first </think>, the content then what follows
 *              the last </think>; newlines stripped at the ends as the template strips them; each
 *              call <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>, a \n between
 *              two and after non-empty content)
 *   tool       consecutive tool turns make one user turn: <|im_start|>user, then for each
 *              \n<tool_response>\n{content}\n</tool_response>, then <|im_end|>\n
 * and the generation prompt <|im_start|>assistant\n<think>\n\n</think>\n\n, or with open
 * thinking <|im_start|>assistant\n<think>\n.
 *
 * JSON inside the rendering (each tool, non-string arguments) is written as the template's
 * `tojson` writes it (Python's json.dumps(ensure_ascii=False)): members in their order, ", " and
 * ": " between, strings with \" \\ \n \r \t \b \f and \u00XX escapes and every other character as
 * it is, whole numbers as written, other numbers as Python's repr of the double (1e-05, 100000.0).
 *
 * What the assistant writes (its whole turn after <|im_start|>assistant\n, through <|im_end|>) is
 * what fine-tuning trains on; the spans say where it is. */
#ifndef TAPEGRAD_DATA_CHAT_TOOLS_H
#define TAPEGRAD_DATA_CHAT_TOOLS_H

#include <stdbool.h>
#include <stddef.h>

#include "data/chat_format.h"
#include "data/jsonl.h"

/* MiniMind-3's chat template as tapegrad writes it in exports: Jinja that renders as
 * tg_tool_render does (tests/test_clients.c renders both and compares). */
extern const char tg_tool_template_jinja[];

/* The Jinja an export writes for template t: tg_chat_template_jinja or tg_tool_template_jinja. */
const char *tg_chat_template_text(TgChatTemplate t);

typedef enum { TG_TOOL_SYSTEM, TG_TOOL_USER, TG_TOOL_ASSISTANT, TG_TOOL_TOOL, TG_TOOL_ROLE_COUNT } TgToolRole;

/* Text in a conversation's buffer: [offset, offset + len). */
typedef struct TgToolText {
    size_t offset, len;
} TgToolText;

typedef struct TgToolTurn {
    TgToolRole role;
    TgToolText content; /* "" for null */
    bool has_reasoning; /* reasoning_content was a string */
    TgToolText reasoning;
    TgToolText calls; /* the <tool_call> blocks, rendered and joined by \n ("" for none) */
    size_t n_calls;
} TgToolTurn;

typedef struct TgToolConversation {
    TgToolTurn *turns;
    size_t n_turns, cap_turns;
    bool has_tools;
    TgToolText tools; /* each tool's JSON after a \n, rendered */
    size_t n_tools;
    char *text;
    size_t text_len, text_cap;
} TgToolConversation;

void tg_tool_conversation_free(TgToolConversation *conv);
/* The text of t in conv. */
static inline const char *tg_tool_text(const TgToolConversation *conv, TgToolText t) { return conv->text + t.offset; }

/* Reads a TG_JSONL_OBJECT line's "conversations" (or "messages") into conv: false, with the reason
 * in why (naming the line, the turn and the member), when it is none: a turn of another role, a
 * member of the wrong type, tools or tool calls that are not JSON of the form above. */
bool tg_tool_conversation_parse(const TgJsonlLine *line, TgToolConversation *conv, char *why, size_t why_cap);

/* A rendered conversation: its text (malloc'ed, NUL-terminated) and the byte spans the assistant
 * wrote, in order. */
typedef struct TgToolRendering {
    char *text;
    size_t len;
    TgToolText *trained;
    size_t n_trained;
    size_t *markers; /* where the template wrote <|im_start|> or <|im_end|>, in order */
    size_t n_markers;
} TgToolRendering;

void tg_tool_render(const TgToolConversation *conv, bool add_generation_prompt, bool open_thinking,
                    TgToolRendering *out);
void tg_tool_rendering_free(TgToolRendering *r);

/* The ids of a rendering as the tokenizer encodes its whole text (Hugging Face's tokenizer(text)
 * after apply_chat_template, MiniMind's SFT loader): <|im_start|> and <|im_end|> one id each
 * wherever the text holds them, the text between two of them one piece. With `literal`, what a
 * chat is given: only the markers the template wrote are markers, and special-token text inside a
 * content stays text (tg_tokenizer_encode_literal), so it cannot open or close a turn. An id is
 * trained when any of its bytes lies in a span the assistant wrote: its thinking, content, calls
 * and <|im_end|> (an id holding the header's "\n" and the reply's first bytes counts as the
 * reply's). */
TgStatus tg_tool_encode(const TgTokenizer *tok, const TgChatTokens *ct, const TgToolRendering *r, bool literal,
                        TgChatIds *out);

#endif
