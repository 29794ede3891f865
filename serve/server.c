/* The OpenAI-compatible server (server.h): routing, limits and keys on libmicrohttpd's connection
 * threads; the model on one decoding thread, fed a queue of jobs. */
#include "serve/server.h"

#include <arpa/inet.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/checkpoint_folder.h"
#include "model/chat.h"
#include "support/clock.h"
#include "support/fault.h"
#include "support/json_write.h"
#include "tapegrad/engine.h"

typedef enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE } JobState;
typedef enum { END_NONE, END_STOP_TEXT, END_GONE, END_TIME } JobEnd;

/* One request's decoding: made by its connection, run by the decoding thread. Its fields are
 * guarded by the server's lock, but for req (read-only once queued) and text (the decoding
 * thread's alone while it runs). */
typedef struct Job {
    struct Server *server;
    struct Job *next; /* in the queue */
    int refs;         /* the connection's and the queue's (then the decoding thread's) */
    JobState state;
    bool cancelled; /* its client went away (or the server stops) */
    int fd;         /* its connection's socket, to see the client go */
    int64_t number; /* the request's, for ids and the log */
    ServeRequest req;
    int64_t prompt_tokens, completion_tokens;
    int32_t *prompt_ids; /* a completion's: its prompt's ids, then room for its reply's */
    uint64_t seed;
    /* the reply: its text so far (stop strings cut it), how much of it a stream has sent */
    char *text;
    size_t text_len, text_cap, emitted;
    JobEnd end;
    const char *finish; /* "stop" or "length" once done */
    bool failed;
    ServeError error;
    double seconds;
    /* what goes to the client: the whole body, or the stream's events not yet sent */
    char *out;
    size_t out_len, out_sent;
} Job;

struct Server {
    TgRun *run;               /* as started: its tokenizer and context for the connections */
    TgRun *active;            /* what decodes: run, or the latest reloaded (the decoding thread's alone) */
    TgRun *reloaded;          /* owned: the checkpoint reload_from last gave */
    char loaded[TG_PATH_CAP]; /* the checkpoint active holds (or the last one tried), and its inode */
    ino_t loaded_ino;
    ServeOptions o;
    char host[256];
    int port;
    TgChatTokens ct;
    struct MHD_Daemon *daemon;
    pthread_t worker;
    bool worker_started;
    pthread_mutex_t lock;
    pthread_cond_t work;    /* the decoding thread waits here for a job */
    pthread_cond_t changed; /* connections wait here for their job's progress */
    Job *head, *tail;
    int waiting; /* jobs queued */
    Job *running;
    bool stopping;
    int64_t requests;
    double mean_seconds; /* of the recent replies, for Retry-After */
    time_t created;
};

static void say(const Server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const Server *s, const char *fmt, ...) {
    if (!s->o.log) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    s->o.log(s->o.log_ctx, line);
}

/* ---------------------------------------------------------------- jobs */

static void job_unref_locked(Job *j) {
    if (--j->refs > 0) return;
    serve_request_free(&j->req);
    free(j->text), free(j->out), free(j->prompt_ids), free(j);
}

/* Appends bytes to what goes to the client. */
static void job_out(Job *j, const char *bytes, size_t n) {
    if (j->out_sent == j->out_len) j->out_len = j->out_sent = 0;
    j->out = tg_realloc(j->out, j->out_len + n + 1);
    memcpy(j->out + j->out_len, bytes, n);
    j->out_len += n;
}

/* Ends a job its client left: out of the queue when it waits there, else the decoding thread
 * stops at its next token. */
static void job_cancel_locked(Server *s, Job *j) {
    j->cancelled = true;
    if (j->state != JOB_QUEUED) return;
    Job **at = &s->head, *prev = NULL;
    while (*at && *at != j) prev = *at, at = &(*at)->next;
    if (*at) {
        *at = j->next;
        if (s->tail == j) s->tail = prev;
        s->waiting--;
    }
    j->state = JOB_DONE;
    if (!s->stopping) say(s, "request %lld: its client went away while it waited", (long long)j->number);
    job_unref_locked(j); /* the queue's */
    pthread_cond_broadcast(&s->changed);
}

/* Whether the client of socket fd closed its end. */
static bool client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    char c;
    return (p.revents & POLLIN) && recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Waits on the server's `changed` for at most 100 ms. */
static void wait_a_little(Server *s) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_nsec += 100000000L;
    if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&s->changed, &s->lock, &t);
}

/* ---------------------------------------------------------------- what is written */

/* A memory stream the JSON writers write to. */
typedef struct {
    FILE *f;
    char *buf;
    size_t len;
} Text;

static void text_open(Text *t) {
    t->buf = NULL, t->len = 0;
    t->f = open_memstream(&t->buf, &t->len);
    TG_CHECK(t->f != NULL, "open_memstream failed");
}

static void text_close(Text *t) { fclose(t->f); }

static void write_error_json(FILE *f, const ServeError *e) {
    fputs("{\"error\":{\"message\":", f);
    tg_json_write_string(f, e->message);
    fputs(",\"type\":", f);
    tg_json_write_string(f, e->type);
    fputs(",\"param\":", f);
    if (e->param[0])
        tg_json_write_string(f, e->param);
    else
        fputs("null", f);
    fputs(",\"code\":", f);
    if (e->code)
        tg_json_write_string(f, e->code);
    else
        fputs("null", f);
    fputs("}}", f);
}

static void write_usage(FILE *f, const Job *j) {
    fprintf(f, "\"usage\":{\"prompt_tokens\":%lld,\"completion_tokens\":%lld,\"total_tokens\":%lld}",
            (long long)j->prompt_tokens, (long long)j->completion_tokens,
            (long long)(j->prompt_tokens + j->completion_tokens));
}

static bool chat(const Job *j) { return j->req.kind == SERVE_CHAT; }

/* What a reply's objects are: "chat.completion" or "text_completion", and their chunks'. */
static const char *object_of(const Job *j, bool chunk) {
    return chat(j) ? chunk ? "chat.completion.chunk" : "chat.completion" : "text_completion";
}

/* The start of every object of a reply: {"id":...,"object":...,"created":...,"model":..., */
static void write_head(FILE *f, const Job *j, const char *object) {
    const Server *s = j->server;
    fprintf(f, "{\"id\":\"%s-%lld\",\"object\":\"%s\",\"created\":%lld,\"model\":", chat(j) ? "chatcmpl" : "cmpl",
            (long long)j->number, object, (long long)s->created);
    tg_json_write_string(f, s->o.model_id);
    fputc(',', f);
}

/* One event of a stream: a chunk whose choice has this delta (NULL: {}; a completion's: "text")
 * and finish_reason. */
static void stream_chunk(Job *j, const char *role, const char *content, size_t len, const char *finish) {
    Text t;
    text_open(&t);
    fputs("data: ", t.f);
    write_head(t.f, j, object_of(j, true));
    if (chat(j)) {
        fputs("\"choices\":[{\"index\":0,\"delta\":{", t.f);
        if (role) fprintf(t.f, "\"role\":\"%s\"%s", role, content ? "," : "");
        if (content) fputs("\"content\":", t.f), tg_json_write_bytes(t.f, content, len);
        fputs("},\"finish_reason\":", t.f);
    } else {
        fputs("\"choices\":[{\"index\":0,\"text\":", t.f);
        tg_json_write_bytes(t.f, content ? content : "", content ? len : 0);
        fputs(",\"logprobs\":null,\"finish_reason\":", t.f);
    }
    if (finish)
        fprintf(t.f, "\"%s\"", finish);
    else
        fputs("null", t.f);
    fputs("}]}\n\n", t.f);
    text_close(&t);
    pthread_mutex_lock(&j->server->lock);
    job_out(j, t.buf, t.len);
    pthread_cond_broadcast(&j->server->changed);
    pthread_mutex_unlock(&j->server->lock);
    free(t.buf);
}

/* ---------------------------------------------------------------- decoding */

/* The end of the text that may go out: before any tail that could still become a stop string, and
 * not inside a UTF-8 character. */
static size_t safe_end(const Job *j) {
    size_t end = j->text_len;
    for (int i = 0; i < j->req.n_stop; i++) {
        size_t n = j->req.stop_len[i];
        for (size_t k = n - 1 < j->text_len ? n - 1 : j->text_len; k > 0; k--)
            if (memcmp(j->text + j->text_len - k, j->req.stop[i], k) == 0) {
                if (j->text_len - k < end) end = j->text_len - k;
                break;
            }
    }
    for (size_t back = 1; back <= 3 && back <= end; back++) {
        unsigned char b = (unsigned char)j->text[end - back];
        if ((b & 0xC0) == 0x80) continue;
        size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
        if (need > back) end -= back;
        break;
    }
    return end;
}

/* Each drawn token's bytes (model/chat.h's stream): kept, cut at a stop string, streamed; the
 * reply stops when the client is gone or its time is up. */
static TgStatus on_bytes(void *ctx, const char *bytes, size_t n) {
    Job *j = ctx;
    Server *s = j->server;
    if (fault_token_delay_ms() > 0)
        usleep((useconds_t)fault_token_delay_ms() * 1000u); /* the test variant's slow machine */
    size_t from = j->text_len;
    if (j->text_len + n + 1 > j->text_cap) j->text = tg_realloc(j->text, j->text_cap = 2 * (j->text_len + n + 1));
    memcpy(j->text + j->text_len, bytes, n);
    j->text_len += n;
    size_t cut = SIZE_MAX;
    for (int i = 0; i < j->req.n_stop; i++) {
        size_t len = j->req.stop_len[i], start = from >= len ? from - len + 1 : 0;
        const char *at = memmem(j->text + start, j->text_len - start, j->req.stop[i], len);
        if (at && (size_t)(at - j->text) < cut) cut = (size_t)(at - j->text);
    }
    if (cut != SIZE_MAX) {
        j->text_len = cut;
        j->end = END_STOP_TEXT;
    }
    if (j->req.stream) {
        size_t end = j->end == END_STOP_TEXT ? j->text_len : safe_end(j);
        if (end > j->emitted) {
            stream_chunk(j, NULL, j->text + j->emitted, end - j->emitted, NULL);
            j->emitted = end;
        }
    }
    if (j->end == END_STOP_TEXT) return tg_fail(TG_ERR_INTERRUPTED, "a stop string");
    pthread_mutex_lock(&s->lock);
    bool gone = j->cancelled;
    pthread_mutex_unlock(&s->lock);
    if (gone)
        j->end = END_GONE;
    else if (tg_clock_seconds() - j->seconds > s->o.timeout_s)
        j->end = END_TIME;
    return j->end == END_NONE ? TG_OK : tg_fail(TG_ERR_INTERRUPTED, "stopped");
}

/* A chat job's reply, drawn over a session of its own as `tapegrad chat` draws one over the same
 * turns. */
static TgStatus draw_reply(TgRun *run, TgEngine *engine, const TgSampleOptions *sampling, Job *j) {
    TgChatSession session;
    const TgConversation *conv = &j->req.conv;
    TgStatus st = tg_chat_session_open(&session, &run->model, &run->tok, &engine->tape, sampling, j->seed,
                                       j->req.max_tokens, run->dir);
    for (size_t i = 0; st == TG_OK && i + 1 < conv->n_turns; i++)
        st = tg_chat_session_add(&session, conv->turns[i].role, chat_turn_text(conv, i), conv->turns[i].len);
    TgChatReply reply = {0};
    size_t last = conv->n_turns - 1;
    if (st == TG_OK)
        st = tg_chat_session_reply(&session, chat_turn_text(conv, last), conv->turns[last].len, on_bytes, j, &reply);
    j->completion_tokens = reply.n_ids;
    if (st == TG_OK && reply.finish == TG_CHAT_FINISH_LENGTH) j->finish = "length";
    free(reply.text);
    tg_chat_session_close(&session);
    return st;
}

/* A completion job's continuation of its prompt's ids, drawn as tg_sample_generate draws one
 * (`tapegrad sample`): the repetition penalty over the ids the cache holds, <eot> ends it. The
 * request was refused unless prompt and reply fit the context, so the cache never fills. */
static TgStatus draw_continuation(TgRun *run, TgEngine *engine, const TgSampleOptions *sampling, Job *j) {
    TgModel *model = &run->model;
    const TgModelConfig *c = &model->cfg;
    TgRng rng;
    tg_rng_seed(&rng, j->seed);
    bool old = tg_tape_set_grad_enabled(&engine->tape, false);
    TgKVCache cache;
    tg_kv_cache_init(&cache, c, c->seq_len);
    float *probs = tg_malloc((size_t)c->vocab * sizeof *probs);
    int32_t *scratch = tg_malloc((size_t)c->vocab * sizeof *scratch), *ids = j->prompt_ids;
    uint8_t *seen = tg_calloc((size_t)c->vocab, 1);
    int32_t *counts = tg_calloc((size_t)c->vocab, sizeof *counts);
    int64_t len = j->prompt_tokens;
    TgTensor *logits =
        tg_model_forward(model, &engine->tape, &(TgBatch){.tokens = ids, .batch = 1, .seq = len}, &cache);
    float *last = logits->data + (size_t)(len - 1) * (size_t)c->vocab;
    TgStatus st = TG_OK;
    j->finish = "length";
    for (int64_t i = 0; i < j->req.max_tokens; i++) {
        if (sampling->repetition_penalty > 0)
            tg_sample_penalize(last, c->vocab, ids + len - cache.len, cache.len, sampling->repetition_penalty, seen);
        tg_sample_penalize_drawn(last, c->vocab, ids + j->prompt_tokens, len - j->prompt_tokens,
                                 sampling->frequency_penalty, sampling->presence_penalty, counts);
        int32_t next = tg_sample_token(last, c->vocab, sampling, &rng, probs, scratch);
        tg_tape_reset(&engine->tape);
        if (next < 0) {
            st = tg_fail_context(TG_ERR_NUMERIC, "token %lld of the completion", (long long)i + 1);
            break;
        }
        if (next == run->tok.eot_id) {
            j->finish = "stop";
            break;
        }
        ids[len++] = next;
        j->completion_tokens++;
        size_t n;
        const uint8_t *bytes = tg_tokenizer_token_bytes(&run->tok, next, &n);
        if (n && (st = on_bytes(j, (const char *)bytes, n)) != TG_OK) break;
        if (i + 1 == j->req.max_tokens) break;
        logits =
            tg_model_forward(model, &engine->tape, &(TgBatch){.tokens = &ids[len - 1], .batch = 1, .seq = 1}, &cache);
        last = logits->data;
    }
    tg_tape_reset(&engine->tape);
    free(probs), free(scratch), free(seen), free(counts);
    tg_kv_cache_free(&cache);
    tg_tape_set_grad_enabled(&engine->tape, old);
    return st;
}

/* What goes to the client once the job is drawn: the stream's last events, or the whole body. */
static void finish_output(Server *s, Job *j) {
    Text t;
    if (j->req.stream && !j->failed) {
        if (j->text_len > j->emitted) stream_chunk(j, NULL, j->text + j->emitted, j->text_len - j->emitted, NULL);
        j->emitted = j->text_len;
        stream_chunk(j, NULL, chat(j) ? NULL : "", 0, j->finish);
    }
    text_open(&t);
    if (j->req.stream) {
        if (j->failed) {
            fputs("data: ", t.f);
            write_error_json(t.f, &j->error);
            fputs("\n\n", t.f);
        } else if (j->req.include_usage) {
            fputs("data: ", t.f);
            write_head(t.f, j, object_of(j, true));
            fputs("\"choices\":[],", t.f);
            write_usage(t.f, j);
            fputs("}\n\n", t.f);
        }
        fputs("data: [DONE]\n\n", t.f);
    } else if (!j->failed) {
        write_head(t.f, j, object_of(j, false));
        if (chat(j))
            fputs("\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":", t.f);
        else
            fputs("\"choices\":[{\"index\":0,\"text\":", t.f);
        tg_json_write_bytes(t.f, j->text ? j->text : "", j->text_len);
        fprintf(t.f, "%s,\"finish_reason\":\"%s\"}],", chat(j) ? "}" : ",\"logprobs\":null", j->finish);
        write_usage(t.f, j);
        fputs("}", t.f);
    } else {
        write_error_json(t.f, &j->error);
    }
    text_close(&t);
    pthread_mutex_lock(&s->lock);
    job_out(j, t.buf, t.len);
    pthread_mutex_unlock(&s->lock);
    free(t.buf);
}

/* Draws the job's reply or continuation and puts together what goes to the client. */
static void decode(Server *s, TgEngine *engine, Job *j) {
    TgSampleOptions sampling = tg_sample_defaults();
    sampling.temperature = j->req.temperature, sampling.top_k = j->req.top_k, sampling.top_p = j->req.top_p;
    sampling.repetition_penalty = j->req.repetition_penalty;
    sampling.frequency_penalty = j->req.frequency_penalty, sampling.presence_penalty = j->req.presence_penalty;
    j->seconds = tg_clock_seconds();
    if (j->req.stream && chat(j)) stream_chunk(j, "assistant", "", 0, NULL);
    TgRun *run = s->active;
    TgStatus st = chat(j) ? draw_reply(run, engine, &sampling, j) : draw_continuation(run, engine, &sampling, j);
    if (st == TG_OK || j->end != END_NONE) {
        tg_error_clear();
        if (j->end != END_NONE)
            j->finish = j->end == END_TIME ? "length" : "stop";
        else if (!j->finish)
            j->finish = "stop";
    } else {
        j->failed = true;
        serve_error_set(&j->error, 500, "server_error", NULL, NULL, "%s: %s", run->last_checkpoint, tg_error_message());
        tg_error_clear();
    }
    j->seconds = tg_clock_seconds() - j->seconds;
    finish_output(s, j);
}

/* With reload_from: the run's latest checkpoint, when another than the one decoding (a new name,
 * or a file written anew), is loaded before the next request, and the server says so. One that
 * does not load, or whose tokenizer or context differ, leaves the one decoding as it was. */
static void maybe_reload(Server *s) {
    char path[TG_PATH_CAP];
    struct stat st;
    if (tg_checkpoint_resolve(s->o.reload_from, path, sizeof path) != TG_OK || stat(path, &st) != 0) {
        tg_error_clear();
        return;
    }
    if (strcmp(path, s->loaded) == 0 && st.st_ino == s->loaded_ino) return;
    snprintf(s->loaded, sizeof s->loaded, "%s", path);
    s->loaded_ino = st.st_ino;
    TgRun *next = tg_calloc(1, sizeof *next);
    TgStatus r = tg_run_open_existing(path, next);
    if (r == TG_OK &&
        (next->tok.fingerprint != s->run->tok.fingerprint || next->model.cfg.seq_len != s->run->model.cfg.seq_len)) {
        r = tg_fail(TG_ERR_MISMATCH, "its tokenizer or context is not that of the checkpoint served");
        tg_run_close(next);
    }
    if (r != TG_OK) {
        say(s, "not reloaded: %s: %s; still serving %s", path, tg_error_message(), s->active->last_checkpoint);
        tg_error_clear();
        free(next);
        return;
    }
    if (s->reloaded) tg_run_close(s->reloaded), free(s->reloaded);
    s->active = s->reloaded = next;
    say(s, "reloaded %s (step %lld)", path, (long long)next->state.step);
}

static void *worker_main(void *arg) {
    Server *s = arg;
    TgEngine engine;
    tg_engine_open(&engine, s->o.threads, 16u << 20);
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->stopping && !s->head) pthread_cond_wait(&s->work, &s->lock);
        if (s->stopping) break;
        Job *j = s->head;
        s->head = j->next;
        if (!s->head) s->tail = NULL;
        s->waiting--;
        j->state = JOB_RUNNING;
        s->running = j;
        pthread_mutex_unlock(&s->lock);
        if (s->o.reload_from) maybe_reload(s);
        decode(s, &engine, j);
        pthread_mutex_lock(&s->lock);
        const char *how = j->failed            ? "failed"
                          : j->end == END_GONE ? "its client went away"
                          : j->end == END_TIME ? "time limit"
                                               : j->finish;
        say(s, "request %lld: %lld prompt + %lld reply tokens in %.2f s (%s)%s", (long long)j->number,
            (long long)j->prompt_tokens, (long long)j->completion_tokens, j->seconds, how,
            j->failed ? j->error.message : "");
        s->mean_seconds = s->mean_seconds > 0 ? 0.7 * s->mean_seconds + 0.3 * j->seconds : j->seconds;
        j->state = JOB_DONE;
        s->running = NULL;
        pthread_cond_broadcast(&s->changed);
        job_unref_locked(j);
    }
    pthread_mutex_unlock(&s->lock);
    tg_engine_close(&engine);
    return NULL;
}

/* ---------------------------------------------------------------- HTTP */

/* What a connection gathers of its request. */
typedef struct {
    char *body;
    size_t len;
    bool too_large;
} Conn;

static enum MHD_Result send_body(struct MHD_Connection *c, unsigned status, const char *body, size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_error(Server *s, struct MHD_Connection *c, const char *method, const char *url,
                                  const ServeError *e) {
    say(s, "%s %s %d: %s", method, url, e->status, e->message);
    Text t;
    text_open(&t);
    write_error_json(t.f, e);
    text_close(&t);
    struct MHD_Response *r = MHD_create_response_from_buffer(t.len, t.buf, MHD_RESPMEM_MUST_COPY);
    free(t.buf);
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (e->status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (e->status == 429) {
        char after[32];
        pthread_mutex_lock(&s->lock);
        double wait = ceil(s->mean_seconds * (s->waiting + 1));
        pthread_mutex_unlock(&s->lock);
        snprintf(after, sizeof after, "%d", wait < 1 ? 1 : wait > 3600 ? 3600 : (int)wait);
        MHD_add_response_header(r, "Retry-After", after);
    }
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)e->status, r);
    MHD_destroy_response(r);
    return ok;
}

/* Whether `given` is the key, compared in time that depends on the key's length alone. */
static bool key_matches(const char *given, size_t given_len, const char *key) {
    size_t n = strlen(key);
    volatile unsigned char diff = given_len != n;
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)(key[i] ^ (i < given_len ? given[i] : 0));
    return diff == 0;
}

static bool authorized(const Server *s, struct MHD_Connection *c, ServeError *e) {
    if (!s->o.api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) {
        serve_error_set(
            e, 401, "invalid_request_error", "invalid_api_key", NULL,
            "no API key given: this server asks for the header 'Authorization: Bearer KEY' on every request");
        return false;
    }
    const char *key = h + 7;
    while (*key == ' ') key++;
    if (!key_matches(key, strlen(key), s->o.api_key)) {
        serve_error_set(e, 401, "invalid_request_error", "invalid_api_key", NULL,
                        "the API key given is not this server's");
        return false;
    }
    return true;
}

static enum MHD_Result send_models(Server *s, struct MHD_Connection *c, bool one) {
    Text t;
    text_open(&t);
    if (!one) fputs("{\"object\":\"list\",\"data\":[", t.f);
    fputs("{\"id\":", t.f);
    tg_json_write_string(t.f, s->o.model_id);
    fprintf(t.f, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"tapegrad\",\"context_length\":%lld}",
            (long long)s->created, (long long)s->run->model.cfg.seq_len);
    if (!one) fputs("]}", t.f);
    text_close(&t);
    enum MHD_Result ok = send_body(c, 200, t.buf, t.len);
    free(t.buf);
    return ok;
}

/* The ids the conversation takes, generation prompt included, as the session will feed them. */
static bool count_prompt(Server *s, const TgConversation *conv, int64_t *n, ServeError *e) {
    TgChatIds ids = {0};
    TgStatus st = TG_OK;
    for (size_t i = 0; st == TG_OK && i < conv->n_turns; i++)
        st = tg_chat_encode_turn_literal(&s->run->tok, &s->ct, conv->turns[i].role, chat_turn_text(conv, i),
                                         conv->turns[i].len, &ids);
    if (st == TG_OK) st = tg_chat_encode_generation_prompt(&s->run->tok, &s->ct, &ids);
    *n = (int64_t)ids.n;
    tg_chat_ids_free(&ids);
    if (st != TG_OK) {
        serve_error_set(e, 400, "invalid_request_error", NULL, "messages", "%s", tg_error_message());
        tg_error_clear();
        return false;
    }
    return true;
}

/* A completion's prompt as `tapegrad sample` encodes it (tg_sample_text): a document's start (after
 * the BOS of a tokenizer that frames documents with one; an empty prompt is the token a document
 * starts after), into j->prompt_ids with room for the reply. */
static bool encode_prompt(Server *s, Job *j, int64_t *n, ServeError *e) {
    const TgTokenizer *tok = &s->run->tok;
    int64_t seq = s->run->model.cfg.seq_len;
    size_t cap = tg_tokenizer_max_ids(tok, j->req.prompt_len), got = 0;
    int32_t *ids = tg_malloc((cap + 2 + (size_t)seq) * sizeof *ids), *from = ids + 1;
    if (j->req.prompt_len && tg_tokenizer_encode(tok, j->req.prompt, j->req.prompt_len, from, cap, &got) != TG_OK) {
        serve_error_set(e, 400, "invalid_request_error", NULL, "prompt", "%s", tg_error_message());
        tg_error_clear();
        free(ids);
        return false;
    }
    if (got == 0)
        from[got++] = tg_tokenizer_doc_start(tok);
    else if (tok->has_bos && from[0] != tok->bos_id)
        *--from = tok->bos_id, got++;
    if (from != ids) memmove(ids, from, got * sizeof *ids);
    j->prompt_ids = ids;
    *n = (int64_t)got;
    return true;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    Job *j = cls;
    Server *s = j->server;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        if (j->out_sent < j->out_len) {
            size_t n = j->out_len - j->out_sent < max ? j->out_len - j->out_sent : max;
            memcpy(buf, j->out + j->out_sent, n);
            j->out_sent += n;
            pthread_mutex_unlock(&s->lock);
            return (ssize_t)n;
        }
        if (j->state == JOB_DONE || s->stopping) break;
        wait_a_little(s);
        if (j->state != JOB_DONE && client_gone(j->fd)) {
            job_cancel_locked(s, j);
            break;
        }
    }
    bool whole = j->state == JOB_DONE && !j->cancelled;
    pthread_mutex_unlock(&s->lock);
    return whole ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void stream_free(void *cls) {
    Job *j = cls;
    Server *s = j->server;
    pthread_mutex_lock(&s->lock);
    if (j->state != JOB_DONE) job_cancel_locked(s, j);
    job_unref_locked(j);
    pthread_mutex_unlock(&s->lock);
}

/* POST /v1/chat/completions and /v1/completions: the request read, judged against the limits and
 * the context, and queued; then its reply, whole or streamed. */
static enum MHD_Result completion(Server *s, struct MHD_Connection *c, const char *url, Conn *conn, ServeKind kind) {
    ServeError e;
    Job *j = tg_calloc(1, sizeof *j);
    j->server = s, j->refs = 1, j->fd = -1;
    int64_t prompt = 0, seq = s->run->model.cfg.seq_len;
    bool ok = serve_request_parse(kind, conn->body ? conn->body : "", conn->len, &s->o.limits, &j->req, &e) &&
              (kind == SERVE_CHAT ? count_prompt(s, &j->req.conv, &prompt, &e) : encode_prompt(s, j, &prompt, &e));
    const char *what = kind == SERVE_CHAT ? "messages" : "prompt";
    if (ok && prompt >= seq) {
        serve_error_set(&e, 400, "invalid_request_error", "context_length_exceeded", what,
                        "the %s take%s %lld tokens; the model's context holds %lld, the reply's included", what,
                        kind == SERVE_CHAT ? "" : "s", (long long)prompt, (long long)seq);
        ok = false;
    } else if (ok && j->req.max_tokens && prompt + j->req.max_tokens > seq) {
        serve_error_set(&e, 400, "invalid_request_error", "context_length_exceeded", "max_tokens",
                        "the %s take%s %lld tokens and max_tokens asks %lld more; the model's context holds %lld", what,
                        kind == SERVE_CHAT ? "" : "s", (long long)prompt, (long long)j->req.max_tokens, (long long)seq);
        ok = false;
    }
    if (!ok) {
        job_unref_locked(j);
        return send_error(s, c, "POST", url, &e);
    }
    if (!j->req.max_tokens)
        j->req.max_tokens = seq - prompt < s->o.limits.max_tokens ? seq - prompt : s->o.limits.max_tokens;
    j->prompt_tokens = prompt;
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info) j->fd = info->connect_fd;
    pthread_mutex_lock(&s->lock);
    j->number = ++s->requests;
    j->seed = j->req.has_seed ? (uint64_t)j->req.seed : s->o.seed + (uint64_t)j->number;
    if (s->stopping || (s->running && s->waiting >= s->o.queue)) {
        bool stopping = s->stopping;
        job_unref_locked(j);
        pthread_mutex_unlock(&s->lock);
        if (stopping)
            serve_error_set(&e, 503, "server_error", NULL, NULL, "the server is stopping");
        else
            serve_error_set(&e, 429, "rate_limit_error", "queue_full", NULL,
                            "the server is busy: one request decodes and %d wait; try again after Retry-After seconds",
                            s->o.queue);
        return send_error(s, c, "POST", url, &e);
    }
    j->refs = 2;
    if (s->tail)
        s->tail->next = j;
    else
        s->head = j;
    s->tail = j;
    s->waiting++;
    pthread_cond_signal(&s->work);
    if (j->req.stream) {
        pthread_mutex_unlock(&s->lock);
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, j, stream_free);
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result res = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return res;
    }
    while (j->state != JOB_DONE && !s->stopping) {
        wait_a_little(s);
        if (j->state != JOB_DONE && client_gone(j->fd)) job_cancel_locked(s, j);
    }
    bool answered = j->state == JOB_DONE && !j->cancelled;
    char *body = answered ? j->out : NULL;
    size_t len = j->out_len;
    unsigned status = j->failed ? (unsigned)j->error.status : 200;
    j->out = NULL;
    job_unref_locked(j);
    pthread_mutex_unlock(&s->lock);
    if (!answered) return MHD_NO;
    enum MHD_Result res = send_body(c, status, body, len);
    free(body);
    return res;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    Server *s = cls;
    Conn *conn = *con_cls;
    ServeError e;
    if (!conn) {
        /* before the body is read: a request without the key, or whose body says it is too large,
         * is answered at once, and its body never held */
        conn = *con_cls = tg_calloc(1, sizeof *conn);
        if (!authorized(s, c, &e)) return send_error(s, c, method, url, &e);
        const char *length = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (length && strtoull(length, NULL, 10) > s->o.max_body) {
            serve_error_set(&e, 413, "invalid_request_error", "request_too_large", NULL,
                            "the request body is larger than %zu bytes, this server's limit", s->o.max_body);
            return send_error(s, c, method, url, &e);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!conn->too_large && conn->len + *upload_size > s->o.max_body) {
            conn->too_large = true;
            free(conn->body), conn->body = NULL, conn->len = 0;
        }
        if (!conn->too_large) {
            conn->body = tg_realloc(conn->body, conn->len + *upload_size + 1);
            memcpy(conn->body + conn->len, upload, *upload_size);
            conn->len += *upload_size;
            conn->body[conn->len] = '\0';
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (conn->too_large) { /* a body whose length was not said before it came */
        serve_error_set(&e, 413, "invalid_request_error", "request_too_large", NULL,
                        "the request body is larger than %zu bytes, this server's limit", s->o.max_body);
        return send_error(s, c, method, url, &e);
    }
    bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    const char *allow = NULL;
    if (strcmp(url, "/health") == 0) {
        if (get) {
            char ok[96];
            pthread_mutex_lock(&s->lock);
            int n = snprintf(ok, sizeof ok, "{\"status\":\"ok\",\"decoding\":%d,\"waiting\":%d}", s->running != NULL,
                             s->waiting);
            pthread_mutex_unlock(&s->lock);
            return send_body(c, 200, ok, (size_t)n);
        }
        allow = "GET";
    } else if (strcmp(url, "/v1/models") == 0) {
        if (get) return send_models(s, c, false);
        allow = "GET";
    } else if (strncmp(url, "/v1/models/", 11) == 0) {
        if (get && strcmp(url + 11, s->o.model_id) == 0) return send_models(s, c, true);
        if (get) {
            serve_error_set(&e, 404, "invalid_request_error", "model_not_found", "model",
                            "no model '%s' here: this server serves '%s'", url + 11, s->o.model_id);
            return send_error(s, c, method, url, &e);
        }
        allow = "GET";
    } else if (strcmp(url, "/v1/chat/completions") == 0) {
        if (post) return completion(s, c, url, conn, SERVE_CHAT);
        allow = "POST";
    } else if (strcmp(url, "/v1/completions") == 0) {
        if (post) return completion(s, c, url, conn, SERVE_COMPLETION);
        allow = "POST";
    } else {
        serve_error_set(&e, 404, "invalid_request_error", "not_found", NULL,
                        "no endpoint %s %s: this server has GET /health, GET /v1/models, POST /v1/chat/completions and "
                        "POST /v1/completions",
                        method, url);
        return send_error(s, c, method, url, &e);
    }
    serve_error_set(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s takes %s, not %s", url, allow,
                    method);
    return send_error(s, c, method, url, &e);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    Conn *conn = *con_cls;
    if (conn) free(conn->body), free(conn);
    *con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n') line[--n] = '\0';
    say(cls, "libmicrohttpd: %s", line);
}

/* ---------------------------------------------------------------- start and stop */

TgStatus serve_start(Server **out, TgRun *run, const ServeOptions *o) {
    *out = NULL;
    Server *s = tg_calloc(1, sizeof *s);
    s->run = s->active = run, s->o = *o, s->created = time(NULL);
    struct stat loaded;
    snprintf(s->loaded, sizeof s->loaded, "%s", run->last_checkpoint);
    s->loaded_ino = stat(run->last_checkpoint, &loaded) == 0 ? loaded.st_ino : 0;
    snprintf(s->host, sizeof s->host, "%s", o->host ? o->host : "127.0.0.1");
    s->o.host = s->host;
    TgChatTemplate t = TG_CHAT_TEMPLATE_CHATML;
    TgStatus st = tg_run_chat_template(run->dir, &t);
    if (st == TG_OK && t != TG_CHAT_TEMPLATE_CHATML)
        st = tg_fail(
            TG_ERR_MISMATCH,
            "%s renders MiniMind-3's template (tools, thinking), which this server does not hold yet: export it "
            "(ckpt export) and serve the file with llama.cpp's server",
            run->dir);
    if (st == TG_OK) st = tg_chat_tokens_find(&run->tok, run->dir, &s->ct);
    if (st != TG_OK) {
        free(s);
        return st;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int gai = getaddrinfo(s->host, port, &hints, &ai);
    if (gai != 0) {
        free(s);
        return tg_fail(
            TG_ERR_ARG,
            "cannot listen on host '%s': %s (give an address such as 127.0.0.1, or a name this machine resolves)",
            o->host, gai_strerror(gai));
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->changed, NULL);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->daemon = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER,
                                 on_mhd_log, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED,
                                 on_completed, s, MHD_OPTION_CONNECTION_LIMIT, (unsigned)(o->queue + 16),
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) {
        pthread_mutex_destroy(&s->lock), pthread_cond_destroy(&s->work), pthread_cond_destroy(&s->changed);
        free(s);
        return tg_fail(
            TG_ERR_IO,
            "cannot listen on %s port %d (in use by another program? give another `port`, or 0 for any free one)",
            o->host ? o->host : "127.0.0.1", o->port);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : o->port;
    if (pthread_create(&s->worker, NULL, worker_main, s) != 0) {
        serve_stop(s);
        return tg_fail(TG_ERR_NOMEM, "cannot start the decoding thread");
    }
    s->worker_started = true;
    *out = s;
    return TG_OK;
}

int serve_port(const Server *s) { return s->port; }

void serve_stop(Server *s) {
    if (!s) return;
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    if (s->running) s->running->cancelled = true;
    while (s->head) job_cancel_locked(s, s->head);
    pthread_cond_broadcast(&s->work);
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->lock);
    if (s->worker_started) pthread_join(s->worker, NULL);
    if (s->daemon) MHD_stop_daemon(s->daemon);
    pthread_mutex_destroy(&s->lock), pthread_cond_destroy(&s->work), pthread_cond_destroy(&s->changed);
    if (s->reloaded) tg_run_close(s->reloaded), free(s->reloaded);
    free(s);
}
