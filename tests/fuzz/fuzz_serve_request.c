/* The body of a request to `tapegrad serve` (serve/request.h), read as a chat completion's and as a
 * completion's: any bytes. A body
 * refused gets a status and OpenAI's error fields (a type and a message); a body accepted holds
 * what the request rules promise: 1 to max_messages messages, a system one first at most, the
 * user's last, every setting in its range, stop strings non-empty, usage asked only of a stream; a
 * completion holds its prompt.
 * Then every message is encoded as the server encodes it, literally: whatever its text holds,
 * each turn has exactly one <|im_start|> and one <|im_end|>, its own. */
#include <stdlib.h>
#include <string.h>

#include "data/chat_format.h"
#include "fuzz_support.h"
#include "serve/request.h"

/* The settings either kind of request holds, each in its range. */
static void check_settings(const ServeRequest *req, const ServeLimits *lim) {
    if (!(req->temperature >= 0 && req->temperature <= 2) || !(req->top_p > 0 && req->top_p <= 1) || req->top_k < 0)
        abort();
    if (!(req->repetition_penalty > 0) || req->max_tokens < 0 || req->max_tokens > lim->max_tokens) abort();
    if (req->n_stop < 0 || req->n_stop > SERVE_MAX_STOP || (req->include_usage && !req->stream) || req->seed < 0)
        abort();
    for (int i = 0; i < req->n_stop; i++)
        if (!req->stop[i] || req->stop_len[i] == 0) abort();
}

static void check_accepted(const ServeRequest *req, const ServeLimits *lim) {
    const TgConversation *conv = &req->conv;
    if (conv->n_turns < 1 || (int64_t)conv->n_turns > lim->max_messages) abort();
    if (conv->turns[conv->n_turns - 1].role != TG_CHAT_USER) abort();
    for (size_t i = 1; i < conv->n_turns; i++)
        if (conv->turns[i].role == TG_CHAT_SYSTEM) abort();
    const TgTokenizer *tok = fuzz_chat_tokenizer();
    TgChatTokens ct;
    if (tg_chat_tokens_find(tok, "fuzz", &ct) != TG_OK) abort();
    for (size_t t = 0; t < conv->n_turns; t++) {
        TgChatIds ids = {0};
        if (tg_chat_encode_turn_literal(tok, &ct, conv->turns[t].role, chat_turn_text(conv, t), conv->turns[t].len,
                                        &ids) != TG_OK)
            abort();
        size_t starts = 0, ends = 0;
        for (size_t i = 0; i < ids.n; i++) starts += ids.ids[i] == ct.im_start, ends += ids.ids[i] == ct.im_end;
        if (starts != 1 || ends != 1 || ids.ids[0] != ct.im_start) abort();
        tg_chat_ids_free(&ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *body = malloc(size + 1);
    memcpy(body, data, size);
    body[size] = '\0';
    const ServeLimits lim = {.max_messages = 8, .max_tokens = 64};
    for (int kind = SERVE_CHAT; kind <= SERVE_COMPLETION; kind++) {
        ServeRequest req;
        ServeError err;
        memset(&err, 0, sizeof err);
        if (serve_request_parse((ServeKind)kind, body, size, &lim, &req, &err)) {
            if (req.kind != (ServeKind)kind) abort();
            check_settings(&req, &lim);
            if (kind == SERVE_CHAT)
                check_accepted(&req, &lim);
            else if (!req.prompt || req.prompt[req.prompt_len] != '\0' || req.conv.n_turns)
                abort();
        } else if (err.status != 400 || !err.type || !err.message[0]) {
            abort();
        }
        serve_request_free(&req);
    }
    free(body);
    return 0;
}
