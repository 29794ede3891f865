/* Conversations in ChatML, the chat format of MiniMind (and Qwen): read from JSON, rendered to
 * text, encoded to token ids with the loss mask of supervised fine-tuning.
 *
 * A conversation is a JSON object {"conversations": [{"role": R, "content": C}, ...]}, one per
 * line of a JSONL file, as MiniMind's SFT sets (sft_mini_512.jsonl and its kin) hold them: R is
 * "system", "user" or "assistant", C a string (any bytes JSON can hold, "\u0000" included).
 * Other members of the object and of each turn (MiniMind's newer sets add "reasoning_content",
 * tools, ...) are ignored; a turn of another role ("tool", "function") is refused, naming it.
 *
 * Each turn renders as
 *     <|im_start|>{role}\n{content}<|im_end|>\n
 * and a prompt for a reply ends with the generation prompt <|im_start|>assistant\n: exactly
 * what tg_chat_template_jinja renders (Hugging Face's apply_chat_template, llama.cpp, and
 * @huggingface/jinja in tests/clients agree with tg_chat_render_text byte for byte). Nothing is
 * added that the turns do not say: no default system turn (MiniMind2's template adds "You are a
 * helpful assistant" to a conversation without one; give it as a system turn to train that way),
 * no begin-of-text token.
 *
 * Encoding gives the ids of the whole rendered text as the tokenizer encodes it in one piece
 * (Hugging Face's tokenizer(text) after apply_chat_template, MiniMind's SFT loader): the markers
 * are single ids, and the text between two markers is encoded as one piece, so special-token
 * text inside a content becomes that token, as it does there. With each id comes whether the
 * loss of fine-tuning predicts it: the ids of an assistant turn's content and its closing
 * <|im_end|>, and nothing else: not the <|im_start|>assistant\n that opens it (the prompt gives
 * those), not the \n after <|im_end|>, not a system or user turn. An id holding bytes of both
 * the header and the content (a content that begins with white space can merge with the header's
 * \n) counts as content: it is predicted, since it holds content. */
#ifndef TAPEGRAD_DATA_CHAT_FORMAT_H
#define TAPEGRAD_DATA_CHAT_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/jsonl.h"
#include "tapegrad/error.h"
#include "tapegrad/tokenizer.h"

#define TG_CHAT_IM_START "<|im_start|>"
#define TG_CHAT_IM_END "<|im_end|>"
#define TG_CHAT_GENERATION_PROMPT TG_CHAT_IM_START "assistant\n"

/* The Jinja chat template of ChatML as tapegrad renders it (Hugging Face's tokenizer_config.json
 * "chat_template", GGUF's tokenizer.chat_template). */
extern const char tg_chat_template_jinja[];

typedef enum { TG_CHAT_SYSTEM, TG_CHAT_USER, TG_CHAT_ASSISTANT, TG_CHAT_ROLE_COUNT } TgChatRole;

/* How a run renders its conversations: ChatML as above, or MiniMind-3's template with tools and
 * thinking (data/chat_tools.h). "chatml", "minimind-3". */
typedef enum { TG_CHAT_TEMPLATE_CHATML, TG_CHAT_TEMPLATE_MINIMIND3, TG_CHAT_TEMPLATE_COUNT } TgChatTemplate;
const char *tg_chat_template_name(TgChatTemplate t);
/* "system", "user", "assistant" */
const char *tg_chat_role_name(TgChatRole role);

typedef struct TgChatTurn {
    TgChatRole role;
    size_t offset, len; /* the content: conv->text[offset, offset + len) */
} TgChatTurn;

/* A conversation read from JSON: its turns, their contents in one buffer. A zeroed struct is
 * empty; tg_chat_conversation_free releases it. */
typedef struct TgConversation {
    TgChatTurn *turns;
    size_t n_turns, cap_turns;
    char *text;
    size_t text_len, text_cap;
} TgConversation;

void tg_chat_conversation_clear(TgConversation *conv);
void tg_chat_conversation_free(TgConversation *conv);
/* Appends a turn (the content is copied). */
void tg_chat_conversation_add(TgConversation *conv, TgChatRole role, const char *content, size_t len);
/* The content of turn i. */
static inline const char *chat_turn_text(const TgConversation *conv, size_t i) { return conv->text + conv->turns[i].offset; }
/* Whether any turn is the assistant's. */
bool tg_chat_conversation_has_reply(const TgConversation *conv);

/* Reads a TG_JSONL_OBJECT line (data/jsonl.h) into conv (cleared first): false, with the reason in
 * why (naming the line, the turn and the member), when it is no conversation: no
 * "conversations" array (or one given twice), an empty one, a turn that is not an object, a
 * "role" or "content" missing, given twice or not a string, a role tapegrad does not train. */
bool tg_chat_conversation_parse(const TgJsonlLine *line, TgConversation *conv, char *why, size_t why_cap);
/* The same for the turns of another member ("chosen", "rejected"), which the messages name. */
bool tg_chat_conversation_parse_member(const TgJsonlLine *line, const char *member, TgConversation *conv, char *why,
                                       size_t why_cap);

/* The rendered text of conv (and the generation prompt when asked), malloc'ed, NUL-terminated
 * (contents may hold NULs: *len says how long it is). */
char *tg_chat_render_text(const TgConversation *conv, bool add_generation_prompt, size_t *len);

/* The ids of the ChatML markers in a tokenizer. */
typedef struct TgChatTokens {
    int32_t im_start, im_end, eot;
} TgChatTokens;

/* The markers of tok: each must be one special (control) token of it. Otherwise TG_ERR_MISMATCH
 * naming the tokenizer (`origin`), what it lacks and how to get one that has them. */
TgStatus tg_chat_tokens_find(const TgTokenizer *tok, const char *origin, TgChatTokens *out);

/* Token ids with, for each, whether fine-tuning's loss predicts it (see above). */
typedef struct TgChatIds {
    int32_t *ids;
    uint8_t *trained;
    size_t n, cap;
} TgChatIds;

void tg_chat_ids_free(TgChatIds *ids);
/* Appends a copy of from's ids and flags. */
void tg_chat_ids_append(TgChatIds *out, const TgChatIds *from);
/* Appends the ids of one rendered turn. */
TgStatus tg_chat_encode_turn(const TgTokenizer *tok, const TgChatTokens *ct, TgChatRole role, const char *content, size_t len,
                          TgChatIds *out);
/* The same with the content taken literally (tg_tokenizer_encode_literal): special-token text in
 * it stays text, so it cannot open or close a turn. For what a chat's user (or its client) sends. */
TgStatus tg_chat_encode_turn_literal(const TgTokenizer *tok, const TgChatTokens *ct, TgChatRole role,
                                     const char *content, size_t len, TgChatIds *out);
/* Appends the ids of every turn of conv (out is not cleared). */
TgStatus tg_chat_encode_conversation(const TgTokenizer *tok, const TgChatTokens *ct, const TgConversation *conv, TgChatIds *out);
/* Appends the ids of text[0..len), none of them trained. */
TgStatus tg_chat_encode_text(const TgTokenizer *tok, const char *text, size_t len, TgChatIds *out);
/* The same with special-token text kept text (tg_tokenizer_encode_literal). */
TgStatus tg_chat_encode_text_literal(const TgTokenizer *tok, const char *text, size_t len, TgChatIds *out);
/* Appends the generation prompt's ids. */
TgStatus tg_chat_encode_generation_prompt(const TgTokenizer *tok, const TgChatTokens *ct, TgChatIds *out);

#endif
