/* The conversation reader of fine-tuning (data/chat_format.h) and what follows it: any bytes as a
 * JSONL file of conversations. Each line read as a conversation must render and encode to the
 * ids of its whole rendered text (one piece), with its mask as chat_format.h words it: every
 * <|im_start|> untrained, a reply's <|im_end|> trained, a system or user turn untrained. Then the
 * file is prepared as `tapegrad sft` prepares it (data/sft_data.h, a window of 24) and, when it
 * holds conversations enough, read back through the packing loader: every row's targets are ids
 * of the vocabulary or ignored, and each position sees from the start of its own conversation.
 * Each line is read as a preference pair of DPO too (data/preference.h): a pair accepted encodes
 * each side as its conversation encodes, the two sharing the prompt's ids; and the file is
 * prepared as pairs and read back through the pair loader (data/pair_loader.h). Each line is read
 * as a conversation with tools and thinking too (data/chat_tools.h): rendered in MiniMind-3's
 * template and encoded, the ids those of the whole text, the mask the assistant's spans. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/chat_format.h"
#include "data/chat_tools.h"
#include "data/jsonl.h"
#include "data/pair_loader.h"
#include "data/preference.h"
#include "data/sft_data.h"
#include "data/sft_loader.h"
#include "fuzz_support.h"
#include "tapegrad/ops.h"

enum { SEQ = 24 };

static void check_conversation(const TgConversation *conv, const TgTokenizer *tok, const TgChatTokens *ct) {
    TgChatIds ids = {0};
    if (tg_chat_encode_conversation(tok, ct, conv, &ids) != TG_OK) abort();
    size_t len, n;
    char *text = tg_chat_render_text(conv, false, &len);
    size_t cap = tg_tokenizer_max_ids(tok, len);
    int32_t *whole = malloc((cap + 1) * sizeof *whole);
    if (tg_tokenizer_encode(tok, text, len, whole, cap, &n) != TG_OK) abort();
    if (n != ids.n || memcmp(whole, ids.ids, n * sizeof *whole) != 0) abort(); /* the pieces are the whole text */
    /* turn by turn: <|im_start|> untrained, the closing <|im_end|> (before the "\n") trained in a
     * reply only, nothing trained in a system or user turn; the turns make the conversation */
    size_t at = 0;
    for (size_t t = 0; t < conv->n_turns; t++) {
        TgChatIds turn = {0};
        bool reply = conv->turns[t].role == TG_CHAT_ASSISTANT;
        if (tg_chat_encode_turn(tok, ct, conv->turns[t].role, chat_turn_text(conv, t), conv->turns[t].len, &turn) != TG_OK) abort();
        if (turn.n < 4 || turn.ids[0] != ct->im_start || turn.trained[0]) abort();
        if (turn.ids[turn.n - 2] != ct->im_end || turn.trained[turn.n - 2] != reply || turn.trained[turn.n - 1]) abort();
        for (size_t i = 0; i < turn.n; i++)
            if (turn.trained[i] && !reply) abort();
        if (at + turn.n > ids.n || memcmp(ids.ids + at, turn.ids, turn.n * sizeof *turn.ids) != 0 ||
            memcmp(ids.trained + at, turn.trained, turn.n) != 0)
            abort();
        at += turn.n;
        tg_chat_ids_free(&turn);
    }
    if (at != ids.n) abort();
    free(whole), free(text);
    tg_chat_ids_free(&ids);
}

/* A pair: refused with a reason, or each side encoded as its own conversation, the prompt shared. */
static void check_pair(const TgConversation *chosen, const TgConversation *rejected, const TgTokenizer *tok,
                       const TgChatTokens *ct) {
    char why[320];
    if (tg_pair_check(chosen, rejected, why, sizeof why) != TG_PAIR_OK) {
        if (!why[0]) abort();
        return;
    }
    TgChatIds c = {0}, r = {0}, whole = {0};
    if (tg_pair_encode(tok, ct, chosen, rejected, &c, &r) != TG_OK) abort();
    if (tg_chat_encode_conversation(tok, ct, chosen, &whole) != TG_OK) abort();
    if (whole.n != c.n || memcmp(whole.ids, c.ids, c.n * sizeof *c.ids) != 0 ||
        memcmp(whole.trained, c.trained, c.n) != 0)
        abort();
    whole.n = 0;
    if (tg_chat_encode_conversation(tok, ct, rejected, &whole) != TG_OK) abort();
    if (whole.n != r.n || memcmp(whole.ids, r.ids, r.n * sizeof *r.ids) != 0 ||
        memcmp(whole.trained, r.trained, r.n) != 0)
        abort();
    tg_chat_ids_free(&c), tg_chat_ids_free(&r), tg_chat_ids_free(&whole);
}

/* The file prepared as pairs, through the pair loader: rows of the vocabulary, each side's
 * targets its next ids. */
static void check_prepared_pairs(const char *path, const TgTokenizer *tok) {
    const char *dir = fuzz_scratch();
    TgSftPrepareOptions opt = {.sources = path, .tok = tok, .seq_len = SEQ, .val_fraction = 0.5, .pairs = true};
    TgSftPrepareResult res;
    if (tg_sft_prepare(&opt, dir, NULL, &res) != TG_OK) return; /* too few pairs, say: refused */
    if (res.conversations < 4 || res.conversations % 2 || res.train_conversations % 2) abort();
    TgSplit split;
    if (tg_sft_split_open(&split, dir, TG_PREPARE_TRAIN_FILE, TG_SFT_TRAIN_MASK_FILE, (uint32_t)tok->vocab_size,
                          tok->fingerprint, SEQ) != TG_OK)
        abort();
    TgPairLoader ld;
    if (tg_pair_loader_init(&ld, &split, 2, SEQ, 7, tok->eot_id, true) != TG_OK) abort();
    int32_t in[4 * SEQ], tg[4 * SEQ];
    uint64_t which[2];
    for (int b = 0; b < 3; b++) {
        if (tg_pair_loader_next(&ld, in, tg, which) != TG_OK) abort();
        for (int i = 0; i < 4 * SEQ; i++) {
            if (in[i] < 0 || in[i] >= tok->vocab_size) abort();
            if (tg[i] != TG_IGNORE_INDEX && (i % SEQ == SEQ - 1 || tg[i] != in[i + 1])) abort();
        }
        if (which[0] >= ld.n_pairs || which[1] >= ld.n_pairs) abort();
    }
    tg_pair_loader_free(&ld);
    tg_split_close(&split);
    const char *files[] = {TG_PREPARE_TRAIN_FILE, TG_PREPARE_VAL_FILE, TG_SFT_TRAIN_MASK_FILE, TG_SFT_VAL_MASK_FILE};
    for (size_t i = 0; i < 4; i++) fuzz_remove(files[i]);
}

/* The prepared file through the packing loader. */
static void check_prepared(const char *path, const TgTokenizer *tok) {
    const char *dir = fuzz_scratch();
    TgSftPrepareOptions opt = {.sources = path, .tok = tok, .seq_len = SEQ, .val_fraction = 0.5};
    TgSftPrepareResult res;
    if (tg_sft_prepare(&opt, dir, NULL, &res) != TG_OK) return; /* too few conversations, say: refused */
    if (res.conversations < 2 || res.train_conversations + res.val_conversations != res.conversations) abort();
    TgSplit split;
    if (tg_sft_split_open(&split, dir, TG_PREPARE_TRAIN_FILE, TG_SFT_TRAIN_MASK_FILE, (uint32_t)tok->vocab_size, tok->fingerprint, SEQ) !=
            TG_OK ||
        split.n_conversations != res.train_conversations)
        abort();
    TgSftLoader ld;
    if (tg_sft_loader_init(&ld, &split, 2, SEQ, 7, tok->eot_id, TG_SFT_ORDER_SHUFFLED) != TG_OK) abort();
    int32_t in[2 * SEQ], tg[2 * SEQ], ks[2 * SEQ];
    for (int b = 0; b < 3; b++) {
        if (tg_sft_loader_next(&ld, in, tg, ks) != TG_OK) abort();
        for (int i = 0; i < 2 * SEQ; i++) {
            int p = i % SEQ;
            if (in[i] < 0 || in[i] >= tok->vocab_size) abort();
            if (tg[i] != TG_IGNORE_INDEX && (tg[i] < 0 || tg[i] >= tok->vocab_size)) abort();
            if (ks[i] < 0 || ks[i] > p || (p > 0 && ks[i] < ks[i - 1])) abort();
        }
    }
    tg_sft_loader_free(&ld);
    tg_split_close(&split);
    const char *files[] = {TG_PREPARE_TRAIN_FILE, TG_PREPARE_VAL_FILE, TG_SFT_TRAIN_MASK_FILE, TG_SFT_VAL_MASK_FILE};
    for (size_t i = 0; i < 4; i++) fuzz_remove(files[i]);
}

/* A line as a conversation with tools and thinking (data/chat_tools.h): refused naming its line,
 * or rendered and encoded to the ids of the whole rendered text, each trained exactly when its
 * bytes meet a span the assistant wrote, those spans inside the text and in order. */
static void check_tool_line(const TgJsonlLine *line, const TgTokenizer *tok, const TgChatTokens *ct, TgToolConversation *conv) {
    char why[320];
    if (!tg_tool_conversation_parse(line, conv, why, sizeof why)) {
        if (!why[0] || !strstr(why, "line ")) abort();
        return;
    }
    for (int open = 0; open < 2; open++) {
        TgToolRendering r;
        tg_tool_render(conv, open, open, &r);
        size_t end = 0;
        for (size_t k = 0; k < r.n_trained; k++) {
            if (r.trained[k].offset < end || r.trained[k].offset + r.trained[k].len > r.len) abort();
            end = r.trained[k].offset + r.trained[k].len;
        }
        TgChatIds ids = {0};
        if (tg_tool_encode(tok, ct, &r, false, &ids) != TG_OK) abort();
        size_t cap = tg_tokenizer_max_ids(tok, r.len), n;
        int32_t *whole = malloc((cap + 1) * sizeof *whole);
        if (tg_tokenizer_encode(tok, r.text, r.len, whole, cap, &n) != TG_OK) abort();
        if (n != ids.n || memcmp(whole, ids.ids, n * sizeof *whole) != 0) abort();
        size_t from = 0;
        for (size_t i = 0; i < ids.n; i++) {
            size_t len;
            tg_tokenizer_token_bytes(tok, ids.ids[i], &len);
            bool meets = false;
            for (size_t k = 0; k < r.n_trained; k++)
                meets |= from < r.trained[k].offset + r.trained[k].len && r.trained[k].offset < from + len;
            if (ids.trained[i] != meets) abort();
            from += len;
        }
        if (from != r.len) abort();
        /* literally: the template's markers alone are markers, and the ids still spell the text */
        TgChatIds lit = {0};
        if (tg_tool_encode(tok, ct, &r, true, &lit) != TG_OK) abort();
        size_t markers = 0, bytes = 0;
        for (size_t i = 0; i < lit.n; i++) {
            size_t len;
            tg_tokenizer_token_bytes(tok, lit.ids[i], &len);
            markers += lit.ids[i] == ct->im_start || lit.ids[i] == ct->im_end;
            bytes += len;
        }
        if (markers != r.n_markers || bytes != r.len) abort();
        tg_chat_ids_free(&lit);
        free(whole);
        tg_chat_ids_free(&ids);
        tg_tool_rendering_free(&r);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const TgTokenizer *tok = fuzz_chat_tokenizer();
    TgChatTokens ct;
    if (tg_chat_tokens_find(tok, "fuzz", &ct) != TG_OK) abort();
    const char *written = fuzz_write("conversations.jsonl", data, size);
    char path[1024];
    snprintf(path, sizeof path, "%s", written);
    TgJsonlReader r;
    if (tg_jsonl_open(&r, path) != TG_OK) return 0;
    TgConversation conv = {0}, rejected = {0};
    TgToolConversation tools = {0};
    TgJsonlLine line;
    while (tg_jsonl_next(&r, &line) == TG_OK && line.kind != TG_JSONL_END) {
        char why[320];
        if (line.kind != TG_JSONL_OBJECT) continue;
        check_tool_line(&line, tok, &ct, &tools);
        if (tg_pair_parse(&line, &conv, &rejected, why, sizeof why))
            check_pair(&conv, &rejected, tok, &ct);
        else if (!why[0] || !strstr(why, "line "))
            abort();
        if (!tg_chat_conversation_parse(&line, &conv, why, sizeof why)) {
            if (!why[0] || !strstr(why, "line ")) abort(); /* a refusal names its line */
            continue;
        }
        if (conv.n_turns == 0) abort();
        check_conversation(&conv, tok, &ct);
    }
    tg_jsonl_close(&r);
    tg_chat_conversation_free(&conv);
    tg_chat_conversation_free(&rejected);
    tg_tool_conversation_free(&tools);
    check_prepared(path, tok);
    check_prepared_pairs(path, tok);
    return 0;
}
