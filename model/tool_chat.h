/* A reply to a conversation in MiniMind-3's template (data/chat_tools.h): the conversation
 * rendered with its generation prompt, thinking open or closed, encoded as a chat's input is
 * (literally: special-token text inside a message stays text), and the reply drawn to
 * <|im_end|>, then taken apart as the template puts it together: the thinking, the content and
 * the tool calls. What `tapegrad chat` runs for a run of that template. */
#ifndef TAPEGRAD_MODEL_TOOL_CHAT_H
#define TAPEGRAD_MODEL_TOOL_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/chat_tools.h"
#include "model/chat.h"
#include "tapegrad/model.h"
#include "tapegrad/sample.h"
#include "tapegrad/tape.h"
#include "tapegrad/tokenizer.h"

typedef struct TgToolReply {
    char *reasoning, *content; /* malloc'ed, NUL-terminated */
    size_t reasoning_len, content_len;
    char *calls; /* a JSON array of the calls the reply made ({"name", "arguments"} each, as the
                  * model wrote them); "[]" for none */
    size_t n_calls;
    TgChatFinish finish; /* END at <|im_end|>, LENGTH at max_reply */
    int64_t n_ids, prompt_ids;
} TgToolReply;

/* The ids a reply to conv is drawn after: conv rendered with the generation prompt (`think` open
 * or closed), its messages encoded literally, its end as a trained conversation holds it before
 * the reply (the prompt's ids are the first ids of the whole conversation with the reply). Appends
 * to out. */
TgStatus tg_tool_prompt_ids(const TgTokenizer *tok, const TgChatTokens *ct, const TgToolConversation *conv, bool think,
                            TgChatIds *out);

/* Draws the reply to conv (which ends with a user or tool turn) with `think` open or closed:
 * at most max_reply tokens, and no further than the context. TG_ERR_ARG when the conversation
 * leaves the context no room for a reply; TG_ERR_NUMERIC as tg_sample_generate. */
TgStatus tg_tool_chat_reply(TgModel *model, const TgTokenizer *tok, const TgChatTokens *ct, TgTape *tape,
                            const TgSampleOptions *opts, uint64_t seed, int64_t max_reply,
                            const TgToolConversation *conv, bool think, TgToolReply *out);
void tg_tool_reply_free(TgToolReply *r);

/* The reply's text taken apart: with `think`, the text up to the first </think> is the thinking;
 * otherwise (or after it) the template's rule for a content that holds </think>; each
 * <tool_call>...</tool_call> whose inside is a JSON object with a "name" is a call, out of the
 * content; the content's newlines at its ends are dropped. */
void tg_tool_reply_parse(const char *text, size_t len, bool think, TgToolReply *out);

#endif
