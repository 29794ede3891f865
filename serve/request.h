/* The body of a request to the OpenAI-compatible API (serve/server.h), read and judged before
 * anything is queued: a chat completion's messages or a completion's prompt, and the sampling
 * settings, checked against the server's limits. Pure: no HTTP, no model; tests/fuzz/fuzz_serve_request.c drives it
 * with any bytes.
 *
 * The body must be one JSON object (support/json_reader.h: strict UTF-8, so a body that is not
 * UTF-8 is refused here). Of its members (a completion has `prompt` in place of `messages`: a
 * string, or an array of one string; `echo` false, `best_of` 1, `suffix` and `logprobs` null only):
 *   messages            1 to max_messages objects {"role", "content"}: role "system" (or
 *                       "developer", OpenAI's newer name for it) only first, "user", "assistant";
 *                       the last is the user's. content is a string or an array of
 *                       {"type": "text", "text": ...} parts (joined); an assistant's may be null.
 *   temperature         [0, 2], default 1 (0: greedy, as `tapegrad chat --temperature 0`)
 *   top_p               (0, 1], default 1;  top_k (tapegrad's and llama.cpp's): >= 0, default 0 (all)
 *   max_tokens          >= 1 and at most the server's cap (max_completion_tokens is the same);
 *                       default: what the context has room for, at most the cap
 *   stop                a string or up to 4 non-empty strings: the reply ends before the first
 *   seed                an integer >= 0: the same request, the same reply
 *   repetition_penalty  > 0, default 1 (none);  frequency_penalty, presence_penalty: [-2, 2], 0
 *   stream              true: server-sent events;  stream_options {"include_usage": bool}
 *   n                   1 only;  model, user and other members are read as given and ignored
 * A member given twice, of the wrong type or out of range is refused naming it (the error's
 * "param"). Every refusal is a ServeError: the HTTP status and OpenAI's error fields. */
#ifndef TAPEGRAD_SERVE_REQUEST_H
#define TAPEGRAD_SERVE_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/chat_format.h"

enum { SERVE_MAX_STOP = 4 };

/* What the server allows a request (its flags). */
typedef struct ServeLimits {
    int64_t max_messages; /* messages of a chat */
    int64_t max_tokens;   /* a reply's tokens */
} ServeLimits;

/* A refusal as OpenAI's API writes one: {"error": {"message", "type", "param", "code"}}. */
typedef struct ServeError {
    int status;       /* 400, 401, 404, 405, 413, 429, 500, 503 */
    const char *type; /* "invalid_request_error", "authentication_error", "server_error", ... */
    const char *code; /* NULL: null */
    char param[64];   /* "" : null */
    char message[512];
} ServeError;

void serve_error_set(ServeError *e, int status, const char *type, const char *code, const char *param, const char *fmt,
                     ...) __attribute__((format(printf, 6, 7)));

/* What a request asks: a reply to messages (POST /v1/chat/completions) or the continuation of a
 * text (POST /v1/completions). */
typedef enum { SERVE_CHAT, SERVE_COMPLETION } ServeKind;

typedef struct ServeRequest {
    ServeKind kind;
    TgConversation conv; /* SERVE_CHAT: the messages, system first when there is one, the user's last */
    char *prompt;        /* SERVE_COMPLETION: the text to continue (may hold NULs), NUL-terminated */
    size_t prompt_len;
    double temperature, top_p, repetition_penalty, frequency_penalty, presence_penalty;
    int top_k;
    int64_t max_tokens; /* 0: not given */
    bool has_seed;
    int64_t seed;
    char *stop[SERVE_MAX_STOP];
    size_t stop_len[SERVE_MAX_STOP];
    int n_stop;
    bool stream, include_usage;
} ServeRequest;

/* Reads body[0..len) (body[len] must be '\0') as a request of `kind` into *req (freed with
 * serve_request_free whatever the result). false, with the refusal in *err, when it is no valid
 * request within `limits`. */
bool serve_request_parse(ServeKind kind, const char *body, size_t len, const ServeLimits *limits, ServeRequest *req,
                         ServeError *err);
void serve_request_free(ServeRequest *req);

#endif
