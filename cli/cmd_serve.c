/* `tapegrad serve`: a fine-tuned run behind an OpenAI-compatible API (serve/server.h).
 *
 *   tapegrad serve --run DIR [--port 8080] [--host 127.0.0.1] [--api-key-file FILE] [--reload] [limits]
 *
 * It says where it listens on stderr, then one line a request; Ctrl-C (SIGINT) or SIGTERM stops
 * it, the request decoding then ending at its next token. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "run/memory_plan.h"
#include "run/run.h"
#include "serve/server.h"
#include "support/file_read.h"
#include "support/path.h"

typedef struct {
    const char *run, *host, *api_key, *api_key_file, *model;
    int port, queue, threads;
    bool reload;
    int64_t max_body, max_messages, max_tokens, seed;
    double timeout;
} ServeFlags;

#define C ServeFlags
static const TgOptSpec specs[] = {
    TG_FLAG_RUN(C, run, "run folder (its latest checkpoint) or a checkpoint file of a fine-tuned run", 0, "required"),
    TG_OPT(C, host, "--host", TG_OPT_STRING,
           "the address to listen on; another than this machine's own is said on stderr", TG_OPT_ANY, NULL, 0, NULL),
    TG_OPT(C, port, "--port", TG_OPT_INT, "the port to listen on (0: any free one, said on stderr)",
           TG_OPT_BETWEEN(0, 65535), NULL, 0, NULL),
    TG_OPT(C, api_key, "--api-key", TG_OPT_STRING,
           "ask every request for 'Authorization: Bearer KEY' (other users of this machine can read a command line: "
           "--api-key-file keeps it out of it)",
           TG_OPT_ANY, NULL, 0, "none"),
    TG_OPT(C, api_key_file, "--api-key-file", TG_OPT_STRING, "the API key as the first line of FILE", TG_OPT_ANY, NULL,
           0, "none"),
    TG_OPT(C, model, "--model", TG_OPT_STRING, "the model's id in /v1/models and in replies", TG_OPT_ANY, NULL, 0,
           "the run folder's name"),
    TG_OPT(C, max_body, "--max-body", TG_OPT_INT64, "the most bytes of a request body (past it: 413)",
           TG_OPT_BETWEEN(1024, 1 << 30), NULL, 0, NULL),
    TG_OPT(C, max_messages, "--max-messages", TG_OPT_INT64, "the most messages of a request (past it: 400)",
           TG_OPT_BETWEEN(1, 1 << 20), NULL, 0, NULL),
    TG_OPT(C, max_tokens, "--max-tokens", TG_OPT_INT64,
           "the most tokens of a reply (past it: 400); the context caps it too",
           ((TgOptRange){0, TG_TRAIN_MAX_COUNT, true, false}), NULL, 0, NULL),
    TG_OPT(C, queue, "--queue", TG_OPT_INT, "requests that may wait while one decodes (past them: 429)",
           TG_OPT_BETWEEN(0, 1024), NULL, 0, NULL),
    TG_OPT(C, timeout, "--timeout", TG_OPT_DOUBLE, "the most seconds a request decodes (its reply then ends, cut)",
           TG_OPT_POSITIVE, NULL, 0, NULL),
    TG_OPT(
        C, reload, "--reload", TG_OPT_BOOL,
        "between requests, load the run folder's latest checkpoint when it changes (a run still training), and say so",
        TG_OPT_ANY, NULL, 0, NULL),
    TG_FLAG_SEED(C, seed, "sampling seed of a request that gives none (the n-th request gets seed + n)", 0, NULL),
    TG_FLAG_THREADS(C, threads, "threads", 0, NULL),
};
#undef C
static const TgOptTable table = {"serve", "--run DIR [--port N] [--host ADDR] [--api-key-file FILE] [flags]", specs,
                                 (int)(sizeof specs / sizeof specs[0]), 0};

static void log_line(void *ctx, const char *line) {
    (void)ctx;
    fprintf(stderr, "tapegrad serve: %s\n", line);
}

/* The key of --api-key-file: its first line, without the line end. */
static TgStatus read_key_file(const char *path, char **key) {
    size_t len;
    char *text;
    TgStatus s = tg_file_read_all(path, 4096, &text, &len);
    if (s != TG_OK) return tg_fail_context(s, "--api-key-file %s", path);
    size_t n = strcspn(text, "\r\n");
    text[n] = '\0';
    if (n == 0) {
        free(text);
        return tg_fail(TG_ERR_ARG, "--api-key-file %s: its first line is empty; write the key there", path);
    }
    *key = text;
    return TG_OK;
}

static bool is_loopback(const char *host) {
    return strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0 || strcmp(host, "localhost") == 0;
}

static int serve_main(int argc, char **argv) {
    const ServeFlags defaults = {.host = "127.0.0.1",
                                 .port = 8080,
                                 .queue = 8,
                                 .threads = TG_TRAIN_DEFAULT_THREADS,
                                 .max_body = 1 << 20,
                                 .max_messages = 256,
                                 .max_tokens = 1024,
                                 .timeout = 300};
    ServeFlags o = defaults;
    int rc = cli_parse(&table, &o, &defaults, NULL, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    if (!o.run) return cli_usage_error("serve", "--run DIR is required (a folder written by `tapegrad sft`)");
    if (o.api_key && o.api_key_file) return cli_usage_error("serve", "give --api-key or --api-key-file, not both");
    if (o.api_key && !o.api_key[0]) return cli_usage_error("serve", "--api-key is empty");
    struct stat run_stat;
    if (o.reload && (stat(o.run, &run_stat) != 0 || !S_ISDIR(run_stat.st_mode)))
        return cli_usage_error(
            "serve", "--reload follows a run folder's latest checkpoint: give --run the folder, not %s", o.run);
    char *key = NULL;
    TgStatus s = o.api_key_file ? read_key_file(o.api_key_file, &key) : TG_OK;
    TgRun run;
    memset(&run, 0, sizeof run);
    bool opened = false;
    if (s == TG_OK) s = tg_run_open_existing(o.run, &run), opened = true;
    if (s == TG_OK) s = tg_sampling_memory_check(&run.model.cfg, run.last_checkpoint, o.max_tokens, o.threads);
    char id[TG_PATH_CAP];
    if (s == TG_OK) {
        if (o.model)
            snprintf(id, sizeof id, "%s", o.model);
        else {
            char dir[TG_PATH_CAP];
            snprintf(dir, sizeof dir, "%s", run.dir);
            size_t n = strlen(dir);
            while (n > 1 && dir[n - 1] == '/') dir[--n] = '\0';
            const char *base = strrchr(dir, '/');
            snprintf(id, sizeof id, "%s", base && base[1] ? base + 1 : dir);
        }
    }
    Server *server = NULL;
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    if (s == TG_OK) {
        /* the server's threads inherit the mask: the signals reach sigwait below alone */
        pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
        ServeOptions so = {.host = o.host,
                           .port = o.port,
                           .api_key = key ? key : o.api_key,
                           .max_body = (size_t)o.max_body,
                           .limits = {.max_messages = o.max_messages, .max_tokens = o.max_tokens},
                           .queue = o.queue,
                           .timeout_s = o.timeout,
                           .seed = (uint64_t)o.seed,
                           .threads = o.threads,
                           .model_id = id,
                           .reload_from = o.reload ? o.run : NULL,
                           .log = log_line};
        s = serve_start(&server, &run, &so);
    }
    if (s == TG_OK) {
        fprintf(stderr,
                "tapegrad serve: %s as \"%s\" on http://%s%s%s:%d/v1 (one request decodes at a time, %d more may wait; "
                "Ctrl-C stops)\n",
                run.last_checkpoint, id, strchr(o.host, ':') ? "[" : "", o.host, strchr(o.host, ':') ? "]" : "",
                serve_port(server), o.queue);
        if (!is_loopback(o.host))
            fprintf(stderr, "tapegrad serve: listening on %s: other machines can reach it%s\n", o.host,
                    key || o.api_key ? "; each request needs the API key"
                                     : "; with no API key (--api-key-file) anyone of them can use it");
        int sig = 0;
        sigwait(&stop_signals, &sig);
        fprintf(stderr, "tapegrad serve: stopped by %s\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        serve_stop(server);
    }
    if (opened) tg_run_close(&run);
    free(key);
    return cli_exit("serve", s);
}

CLI_ONE_TABLE(option_tables, &table)

const Subcommand cmd_serve = {"serve",
                              "a fine-tuned run behind an OpenAI-compatible HTTP API (chat completions, streaming)",
                              serve_main, option_tables};
