/* A conversation with a model, turn after turn, in ChatML (data/chat_format.h): what `tapegrad
 * chat` runs, on a terminal or from a script.
 *
 * The session keeps the whole conversation as ids, each turn rendered as the chat template
 * renders it, and the model's KV cache over them: a new user turn feeds only its own ids (and
 * the generation prompt), and the reply is drawn one token at a time from the cache, until
 * <|im_end|> (or <eot>) or max_reply tokens. The reply's ids stay in the cache as they were drawn;
 * the turn is closed with <|im_end|>\n, as the template closes it.
 *
 * When the context (the model's seq_len) cannot hold the conversation, the cache is built again
 * from what fits: the system turn, then the latest turns that fit whole, leaving room for a reply
 * (a quarter of the context, or max_reply if smaller); of a single turn too long for that, its
 * last ids. A reply that fills the context on its way is handled the same way, its ids so far
 * kept with its turn. So a conversation can go on for ever, the model seeing its latest part. */
#ifndef TAPEGRAD_MODEL_CHAT_H
#define TAPEGRAD_MODEL_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/chat_format.h"
#include "tapegrad/error.h"
#include "tapegrad/model.h"
#include "tapegrad/rng.h"
#include "tapegrad/sample.h"
#include "tapegrad/tape.h"
#include "tapegrad/tokenizer.h"

typedef enum { TG_CHAT_FINISH_END, TG_CHAT_FINISH_LENGTH } TgChatFinish;

/* Called with the bytes of each drawn token of a reply as it comes (streaming). Anything but TG_OK
 * (its reader is gone) stops the reply there: tg_chat_session_reply returns it. */
typedef TgStatus (*ChatStream)(void *ctx, const char *bytes, size_t len);

typedef struct TgChatSession {
    TgModel *model;
    const TgTokenizer *tok;
    TgTape *tape;
    TgChatTokens ct;
    TgSampleOptions sampling;
    TgRng rng;
    int64_t max_reply;
    TgKVCache cache;
    TgChatIds ids;            /* the conversation, every turn */
    size_t *turn_start;     /* [n_turns + 1]: turn i is ids [turn_start[i], turn_start[i + 1]) */
    size_t n_turns, cap_turns;
    bool has_system;        /* turn 0 is the system turn */
    size_t synced;          /* ids [synced, ids.n) are not in the cache yet: they are fed next */
    int32_t *context;       /* [seq_len]: the ids the cache holds, in order */
    int64_t rebuilds;       /* times the cache was built again from a part of the conversation */
    float *probs;
    int32_t *scratch;
    uint8_t *seen;
    int32_t *counts;        /* tg_sample_penalize_drawn's */
} TgChatSession;

/* A session over model and tok (which must have the ChatML markers: tg_chat_tokens_find's message
 * otherwise), sampling as `sampling` says from a generator seeded with `seed`, replies of at most
 * max_reply tokens (>= 1). */
TgStatus tg_chat_session_open(TgChatSession *s, TgModel *model, const TgTokenizer *tok, TgTape *tape,
                           const TgSampleOptions *sampling, uint64_t seed, int64_t max_reply, const char *tok_origin);
void tg_chat_session_close(TgChatSession *s);
/* Adds a turn to the conversation without generating (a system prompt, or a conversation's
 * earlier turns given by a script). A system turn may only come first. */
TgStatus tg_chat_session_add(TgChatSession *s, TgChatRole role, const char *content, size_t len);
/* A reply as tg_chat_session_reply hands it back. */
typedef struct TgChatReply {
    char *text;          /* malloc'ed, NUL-terminated (the caller frees it); NULL when the reply failed */
    size_t len;          /* its bytes */
    TgChatFinish finish; /* why it ended */
    int64_t n_ids;       /* its ids' count */
} TgChatReply;

/* Adds the user's turn and draws the assistant's reply into *reply: `stream` (may be NULL) sees
 * its bytes as they come. The reply becomes a turn of the conversation. Fails (reply->text NULL)
 * when the stream stops it, and (TG_ERR_NUMERIC, naming the reply's token) when the logits of a
 * token are not finite (tg_sample_token); the turn is closed all the same. */
TgStatus tg_chat_session_reply(TgChatSession *s, const char *user, size_t len, ChatStream stream, void *ctx,
                               TgChatReply *reply);

#endif
