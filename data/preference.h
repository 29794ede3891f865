/* Preference pairs, the data of DPO: a line of MiniMind's dpo.jsonl,
 *
 *     {"chosen": [turns], "rejected": [turns]}
 *
 * each list of turns a conversation as data/chat_format.h reads them. A pair is one prompt (the
 * turns before the last, the same in both) and two replies to it: the last turn of each, the
 * assistant's. Encoded, each side is the prompt's ids, encoded once and shared, then its reply's,
 * with fine-tuning's mask (the assistant turns' content and <|im_end|> are predicted): the
 * log-probability of a reply that DPO compares is the sum over those ids. Assistant turns inside
 * the prompt are predicted on both sides alike, so they cancel in the pair's margin. */
#ifndef TAPEGRAD_DATA_PREFERENCE_H
#define TAPEGRAD_DATA_PREFERENCE_H

#include <stdbool.h>
#include <stddef.h>

#include "data/chat_format.h"
#include "data/jsonl.h"
#include "tapegrad/error.h"
#include "tapegrad/tokenizer.h"

/* What a pair that parses can still be: a pair to train on, or one DPO can learn nothing from. */
typedef enum {
    TG_PAIR_OK,
    TG_PAIR_NO_REPLY,       /* a side whose last turn is not the assistant's */
    TG_PAIR_IDENTICAL,      /* the same reply on both sides: a margin of 0 whatever the model */
    TG_PAIR_PROMPTS_DIFFER, /* two prompts: the replies answer different questions */
    TG_PAIR_VERDICTS
} TgPairVerdict;

/* Reads a TG_JSONL_OBJECT line's "chosen" and "rejected" (each as
 * tg_chat_conversation_parse_member): false, the reason in why, when either is missing or no
 * conversation. */
bool tg_pair_parse(const TgJsonlLine *line, TgConversation *chosen, TgConversation *rejected, char *why,
                   size_t why_cap);

/* The pair's verdict, and for all but TG_PAIR_OK one line in why naming what is wrong. */
TgPairVerdict tg_pair_check(const TgConversation *chosen, const TgConversation *rejected, char *why, size_t why_cap);

/* The ids (and trained flags) of both sides of a pair tg_pair_check accepted, into the cleared
 * *chosen_ids and *rejected_ids: the prompt encoded once, copied to both. */
TgStatus tg_pair_encode(const TgTokenizer *tok, const TgChatTokens *ct, const TgConversation *chosen,
                        const TgConversation *rejected, TgChatIds *chosen_ids, TgChatIds *rejected_ids);

#endif
