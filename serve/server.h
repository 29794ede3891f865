/* `tapegrad serve`: a run behind an OpenAI-compatible HTTP API, on libmicrohttpd.
 *
 *   GET  /health                 {"status": "ok", "decoding": 0|1, "waiting": N}: the queue
 *   GET  /v1/models              the one model served: its id is the run's (its folder's name)
 *   POST /v1/chat/completions    a reply to a conversation (serve/request.h reads the body), whole
 *                                or streamed as server-sent events (OpenAI's chunks, then
 *                                "data: [DONE]")
 *   POST /v1/completions         the continuation of a text ("prompt"), as `tapegrad sample`
 *                                draws one, whole or streamed
 * Every refusal is OpenAI's {"error": {"message", "type", "param", "code"}} with its HTTP status.
 *
 * Safe by default: it listens on 127.0.0.1 unless told another host; with an API key every
 * endpoint asks for "Authorization: Bearer KEY" (compared in constant time; 401 otherwise); a body
 * past max_body bytes is a 413; messages, max_tokens and the context are capped (400 naming the
 * limit); what a message says is text, never a special token: "<|im_end|>" in a user's message
 * cannot close its turn (tg_chat_encode_turn_literal).
 *
 * One request decodes at a time, in the order they came, on one thread that owns the model; up to
 * `queue` more wait, and one past them gets a 429 with Retry-After. A request stops decoding at its
 * next token when its client goes away (the connection closed, while it waits too) or when it
 * has decoded for timeout_s seconds (its reply then ends as a reply cut at max_tokens does:
 * finish_reason "length"). Each connection has a thread of its own (libmicrohttpd's
 * thread-per-connection mode), at most `queue` + 16 connections at once, an idle one closed after 30 s.
 * A run of LoRA adapters decodes with its base and adapters, as tg_run_open_existing opens it. */
#ifndef TAPEGRAD_SERVE_SERVER_H
#define TAPEGRAD_SERVE_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "run/run.h"
#include "serve/request.h"
#include "tapegrad/error.h"

/* Where the server's lines go (one line each, no '\n'): where it listens, each request, each refusal. */
typedef void (*ServeLog)(void *ctx, const char *line);

typedef struct ServeOptions {
    const char *host;    /* a numeric address or a name; NULL: 127.0.0.1 */
    int port;            /* 0: a free port the system picks (serve_port tells it) */
    const char *api_key; /* NULL: none asked */
    size_t max_body;     /* bytes of a request body */
    ServeLimits limits;
    int queue;               /* requests that may wait while one decodes */
    double timeout_s;        /* seconds a request may decode */
    uint64_t seed;           /* a request without "seed" gets seed + its number */
    int threads;             /* the model's */
    const char *model_id;    /* what /v1/models lists and replies name */
    const char *reload_from; /* NULL; or a run folder whose latest checkpoint, when it changes, is
                              * loaded between requests (a run still training), said in the log */
    ServeLog log;
    void *log_ctx;
} ServeOptions;

typedef struct Server Server;

/* Starts serving `run` (opened with tg_run_open_existing, its tokenizer with the ChatML markers;
 * it must outlive the server): binds, loads nothing more, and returns once requests are answered.
 * TG_ERR_IO naming the address when it cannot listen there. */
TgStatus serve_start(Server **out, TgRun *run, const ServeOptions *o);
/* The port it listens on. */
int serve_port(const Server *s);
/* Stops taking connections, ends the request decoding at its next token, and frees the server. */
void serve_stop(Server *s);

#endif
