/* Preference pairs: read, checked and encoded (preference.h). */
#include "data/preference.h"

#include <stdio.h>
#include <string.h>

bool tg_pair_parse(const TgJsonlLine *line, TgConversation *chosen, TgConversation *rejected, char *why,
                   size_t why_cap) {
    return tg_chat_conversation_parse_member(line, "chosen", chosen, why, why_cap) &&
           tg_chat_conversation_parse_member(line, "rejected", rejected, why, why_cap);
}

static bool same_turn(const TgConversation *a, size_t i, const TgConversation *b, size_t j) {
    return a->turns[i].role == b->turns[j].role && a->turns[i].len == b->turns[j].len &&
           memcmp(chat_turn_text(a, i), chat_turn_text(b, j), a->turns[i].len) == 0;
}

TgPairVerdict tg_pair_check(const TgConversation *chosen, const TgConversation *rejected, char *why, size_t why_cap) {
    const TgConversation *side[2] = {chosen, rejected};
    for (int k = 0; k < 2; k++)
        if (side[k]->turns[side[k]->n_turns - 1].role != TG_CHAT_ASSISTANT) {
            snprintf(why, why_cap,
                     "the %s conversation does not end with an assistant turn: a pair is two replies to one prompt",
                     k ? "rejected" : "chosen");
            return TG_PAIR_NO_REPLY;
        }
    size_t prompt = chosen->n_turns - 1;
    bool same_prompt = rejected->n_turns - 1 == prompt;
    for (size_t i = 0; same_prompt && i < prompt; i++) same_prompt = same_turn(chosen, i, rejected, i);
    if (!same_prompt) {
        snprintf(
            why, why_cap,
            "the chosen and rejected conversations differ before their last turn: a pair is two replies to one prompt");
        return TG_PAIR_PROMPTS_DIFFER;
    }
    if (same_turn(chosen, prompt, rejected, prompt)) {
        snprintf(why, why_cap, "the chosen and rejected replies are the same: the pair prefers nothing");
        return TG_PAIR_IDENTICAL;
    }
    return TG_PAIR_OK;
}

TgStatus tg_pair_encode(const TgTokenizer *tok, const TgChatTokens *ct, const TgConversation *chosen,
                        const TgConversation *rejected, TgChatIds *chosen_ids, TgChatIds *rejected_ids) {
    chosen_ids->n = rejected_ids->n = 0;
    size_t last = chosen->n_turns - 1;
    for (size_t i = 0; i < last; i++)
        TG_TRY(tg_chat_encode_turn(tok, ct, chosen->turns[i].role, chat_turn_text(chosen, i), chosen->turns[i].len,
                                   chosen_ids));
    tg_chat_ids_append(rejected_ids, chosen_ids);
    TG_TRY(tg_chat_encode_turn(tok, ct, TG_CHAT_ASSISTANT, chat_turn_text(chosen, last), chosen->turns[last].len,
                               chosen_ids));
    return tg_chat_encode_turn(tok, ct, TG_CHAT_ASSISTANT, chat_turn_text(rejected, last), rejected->turns[last].len,
                               rejected_ids);
}
