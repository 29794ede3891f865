/* `tapegrad chat`: talk to a fine-tuned run (model/chat.h), on a terminal or from a script.
 *
 *   tapegrad chat --run DIR                    a conversation on the terminal: a line is a turn
 *                                              (line editing, history, /help; cli/line_input.h)
 *   tapegrad chat --run DIR --message TEXT     one reply, printed
 *   tapegrad chat --run DIR --jsonl < in.jsonl conversations in, one reply each, as JSON lines out */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/line_input.h"
#include "data/chat_format.h"
#include "data/jsonl.h"
#include "support/json_write.h"
#include "tapegrad/engine.h"
#include "model/chat.h"
#include "model/tool_chat.h"
#include "support/file_read.h"
#include "support/json_reader.h"
#include "run/memory_plan.h"
#include "run/run.h"

typedef struct {
    const char *run, *system, *message, *tools;
    bool jsonl, think, no_think;
    int64_t tokens, seed;
    double temperature, top_p, repetition_penalty, frequency_penalty, presence_penalty;
    int top_k, threads;
} ChatFlags;

#define C ChatFlags
static const TgOptSpec specs[] = {
    TG_FLAG_RUN(C, run, "run folder (its latest checkpoint) or a checkpoint file of a fine-tuned run", 0, "required"),
    TG_OPT(C, system, "--system", TG_OPT_STRING, "the system turn that opens the conversation", TG_OPT_ANY, NULL, 0,
           "none"),
    TG_OPT(C, message, "--message", TG_OPT_STRING, "print the reply to this one user turn, then exit", TG_OPT_ANY, NULL,
           0, NULL),
    TG_OPT(
        C, jsonl, "--jsonl", TG_OPT_BOOL,
        "read conversations from stdin, one JSON object a line ({\"conversations\": [...]}, the last turn the user's), "
        "and write each reply as a JSON line",
        TG_OPT_ANY, NULL, 0, NULL),
    TG_OPT(C, tokens, "--tokens", TG_OPT_INT64, "the most tokens of a reply",
           ((TgOptRange){0, TG_TRAIN_MAX_COUNT, true, false}), NULL, 0, NULL),
    TG_OPT(C, think, "--think", TG_OPT_BOOL,
           "a run of MiniMind-3's template: open the thinking (the reply thinks first, shown apart); without it the "
           "template closes it empty",
           TG_OPT_ANY, NULL, 0, NULL),
    TG_OPT(C, no_think, "--no-think", TG_OPT_BOOL,
           "a run of MiniMind-3's template: close the thinking empty, as its template does by default (the default)",
           TG_OPT_ANY, NULL, 0, NULL),
    TG_OPT(C, tools, "--tools", TG_OPT_STRING,
           "a run of MiniMind-3's template: the tool definitions, a JSON array in FILE, for --message (a --jsonl line "
           "brings "
           "its own)",
           TG_OPT_ANY, NULL, 0, "none"),
    TG_FLAG_TEMPERATURE(C, temperature, 0),
    TG_FLAG_TOP_K(C, top_k, 0),
    TG_FLAG_TOP_P(C, top_p, 0),
    TG_FLAG_REPETITION_PENALTY(C, repetition_penalty, 0),
    TG_FLAG_FREQUENCY_PENALTY(C, frequency_penalty, 0),
    TG_FLAG_PRESENCE_PENALTY(C, presence_penalty, 0),
    TG_FLAG_SEED(C, seed, "sampling seed", 0, NULL),
    TG_FLAG_THREADS(C, threads, "threads", 0, NULL),
};
#undef C
static const TgOptTable table = {"chat", "--run DIR [--system TEXT] [--message TEXT | --jsonl] [flags]", specs,
                               (int)(sizeof specs / sizeof specs[0]), 0};


/* Everything a chat holds. */
typedef struct {
    const ChatFlags *o;
    TgRun run;
    TgEngine engine;
    TgChatSession session;
    bool open;
    TgSampleOptions sampling;
    TgChatTemplate chat_template;
    TgChatTokens ct;
} Chat;

static TgStatus chat_begin(Chat *c, const char *system, size_t system_len) {
    if (c->open) tg_chat_session_close(&c->session);
    c->open = false;
    TG_TRY(tg_chat_session_open(&c->session, &c->run.model, &c->run.tok, &c->engine.tape, &c->sampling, (uint64_t)c->o->seed,
                             c->o->tokens, c->run.dir));
    c->open = true;
    if (system) TG_TRY(tg_chat_session_add(&c->session, TG_CHAT_SYSTEM, system, system_len));
    return TG_OK;
}

/* --message: one reply. */
static TgStatus reply_once(Chat *c) {
    const char *system = c->o->system;
    TG_TRY(chat_begin(c, system, system ? strlen(system) : 0));
    TgChatReply reply;
    TG_TRY(tg_chat_session_reply(&c->session, c->o->message, strlen(c->o->message), NULL, NULL, &reply));
    fwrite(reply.text, 1, reply.len, stdout);
    putchar('\n');
    free(reply.text);
    return cli_stdout_check();
}

/* One --jsonl conversation: its turns as history, a reply to its last (the user's). */
static TgStatus reply_to(Chat *c, const TgConversation *conv, TgChatReply *reply) {
    size_t n = conv->n_turns;
    if (conv->turns[n - 1].role != TG_CHAT_USER)
        return tg_fail(TG_ERR_FORMAT, "the last turn is the %s's; a reply answers a user turn",
                       tg_chat_role_name(conv->turns[n - 1].role));
    bool own_system = conv->turns[0].role == TG_CHAT_SYSTEM;
    const char *system = own_system ? chat_turn_text(conv, 0) : c->o->system;
    TG_TRY(chat_begin(c, system, own_system ? conv->turns[0].len : system ? strlen(system) : 0));
    for (size_t i = own_system ? 1 : 0; i + 1 < n; i++)
        TG_TRY(tg_chat_session_add(&c->session, conv->turns[i].role, chat_turn_text(conv, i), conv->turns[i].len));
    return tg_chat_session_reply(&c->session, chat_turn_text(conv, n - 1), conv->turns[n - 1].len, NULL, NULL, reply);
}

/* One --jsonl line of a run of MiniMind-3's template (a TG_JSONL_OBJECT): its reply, as a JSON line
 * {"reply", "reasoning_content", "tool_calls", "finish", "tokens"}; or TG_ERR_FORMAT with why. */
static TgStatus answer_tool_line(Chat *c, const TgJsonlLine *line, char *why, size_t cap) {
    TgToolConversation conv = {0};
    if (!tg_tool_conversation_parse(line, &conv, why, cap)) {
        tg_tool_conversation_free(&conv);
        return TG_ERR_FORMAT;
    }
    TgToolRole last = conv.turns[conv.n_turns - 1].role;
    TgStatus s = TG_OK;
    TgToolReply reply;
    if (last != TG_TOOL_USER && last != TG_TOOL_TOOL) {
        snprintf(why, cap, "line %lld: the last turn is the %s's; a reply answers a user or tool turn",
                 (long long)line->number, last == TG_TOOL_SYSTEM ? "system" : "assistant");
        s = TG_ERR_FORMAT;
    } else {
        s = tg_tool_chat_reply(&c->run.model, &c->run.tok, &c->ct, &c->engine.tape, &c->sampling, (uint64_t)c->o->seed,
                               c->o->tokens, &conv, c->o->think, &reply);
        if (s != TG_OK) snprintf(why, cap, "line %lld: %s", (long long)line->number, tg_error_message());
    }
    tg_tool_conversation_free(&conv);
    if (s != TG_OK) return s;
    fputs("{\"reply\":", stdout);
    tg_json_write_bytes(stdout, reply.content, reply.content_len);
    fputs(",\"reasoning_content\":", stdout);
    tg_json_write_bytes(stdout, reply.reasoning, reply.reasoning_len);
    printf(",\"tool_calls\":%s,\"finish\":\"%s\",\"tokens\":%lld}\n", reply.calls,
           reply.finish == TG_CHAT_FINISH_END ? "end" : "length", (long long)reply.n_ids);
    tg_tool_reply_free(&reply);
    return TG_OK;
}

/* The conversation so far of a run of MiniMind-3's template, as the JSON members of one line:
 * its messages, and its tools. */
typedef struct {
    char *messages; /* "{...}, {...}" */
    size_t len;
    int n;
    char *tools; /* a JSON array, or NULL */
} ToolHistory;

static void history_free(ToolHistory *h) {
    free(h->messages), free(h->tools);
    memset(h, 0, sizeof *h);
}

/* Appends a message: role, content (NULL: null), and for a reply its thinking and calls. */
static void history_add(ToolHistory *h, const char *role, const char *content, size_t len, const char *reasoning,
                        size_t reasoning_len, const char *calls) {
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    fprintf(f, "%s{\"role\": \"%s\", \"content\": ", h->n ? ", " : "", role);
    if (content)
        tg_json_write_bytes(f, content, len);
    else
        fputs("null", f);
    if (reasoning) fputs(", \"reasoning_content\": ", f), tg_json_write_bytes(f, reasoning, reasoning_len);
    if (calls) fprintf(f, ", \"tool_calls\": %s", calls);
    fputc('}', f);
    fclose(f);
    h->messages = tg_realloc(h->messages, h->len + n + 1);
    memcpy(h->messages + h->len, text, n + 1);
    h->len += n, h->n++;
    free(text);
}

/* The reply to the history; with `shown`, printed as a chat shows it (the thinking and the calls
 * apart), and kept in the history. */
static TgStatus history_reply(Chat *c, ToolHistory *h, TgToolReply *reply) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    fprintf(f, "{\"conversations\": [%s]", h->messages ? h->messages : "");
    if (h->tools) fprintf(f, ", \"tools\": %s", h->tools);
    fputc('}', f);
    fclose(f);
    TgJsonlLine line;
    tg_jsonl_line_of(text, len, 1, &line);
    TgToolConversation conv = {0};
    char why[320];
    TgStatus s = line.kind == TG_JSONL_OBJECT && tg_tool_conversation_parse(&line, &conv, why, sizeof why)
                     ? TG_OK
                     : tg_fail(TG_ERR_FORMAT, "%s", line.kind == TG_JSONL_OBJECT ? why : line.why);
    if (s == TG_OK)
        s = tg_tool_chat_reply(&c->run.model, &c->run.tok, &c->ct, &c->engine.tape, &c->sampling, (uint64_t)c->o->seed,
                               c->o->tokens, &conv, c->o->think, reply);
    tg_tool_conversation_free(&conv);
    free(text);
    TG_TRY(s);
    if (reply->reasoning_len) printf("(thinking) %s\n", reply->reasoning);
    if (reply->content_len || !reply->n_calls) { /* a reply of calls alone has no text to show */
        fwrite(reply->content, 1, reply->content_len, stdout);
        putchar('\n');
    }
    if (reply->n_calls) printf("(tool calls) %s\n", reply->calls);
    history_add(h, "assistant", reply->content, reply->content_len, reply->reasoning, reply->reasoning_len,
                reply->n_calls ? reply->calls : NULL);
    return cli_stdout_check();
}

/* --tools FILE: its JSON array, checked. */
static TgStatus read_tools(const char *path, char **tools) {
    size_t len;
    TgStatus s = tg_file_read_all(path, 16u << 20, tools, &len);
    if (s != TG_OK) return tg_fail_context(s, "--tools %s", path);
    if ((s = tg_json_check(*tools, len, path)) == TG_OK) {
        TgJsonCursor cur = tg_json_cursor(*tools, len, 0);
        if (tg_json_type(&cur) != TG_JSON_ARRAY)
            s = tg_fail(TG_ERR_FORMAT, "--tools %s holds no JSON array of tools", path);
    }
    if (s != TG_OK) free(*tools), *tools = NULL;
    return s;
}

static const char tool_help_text[] =
    "Each line you type is your turn; the reply comes whole, its thinking and tool calls apart.\n"
    "  /help            this list\n"
    "  /tool TEXT       the response of the tool the model called: the model answers from it\n"
    "  /reset           start a new conversation (the system turn and the tools stay)\n"
    "  /exit, /quit     leave (so does Ctrl-D on an empty line)\n"
    "  //TEXT           send a turn that begins with one '/': /TEXT\n";

/* The next line of a conversation, false at its end. On a terminal, Ctrl-C drops the line being
 * typed (said as ^C, with how to leave when it was empty); from a pipe, each line is written
 * "> TEXT", so that the output reads as a transcript. */
static bool next_line(CliLines *in, bool terminal, const char **line, size_t *len) {
    for (;;) {
        bool had_text;
        CliLineKind kind = cli_lines_read(in, line, len, &had_text);
        if (kind == CLI_LINE_END) return false;
        if (kind == CLI_LINE_INTERRUPTED) {
            printf(had_text ? "^C\n" : "^C\n(Ctrl-D or /exit leaves)\n");
            continue;
        }
        if (!terminal) printf("> %s\n", *line);
        return true;
    }
}

/* A conversation of MiniMind-3's template, on the terminal or from a pipe (lines written
 * "> TEXT"): each line a user turn, "/tool TEXT" a tool's response, each reply whole. */
static TgStatus converse_tools(Chat *c) {
    bool terminal = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    ToolHistory h = {0};
    TgStatus s = c->o->tools ? read_tools(c->o->tools, &h.tools) : TG_OK;
    if (s == TG_OK && c->o->system) history_add(&h, "system", c->o->system, strlen(c->o->system), NULL, 0, NULL);
    int kept = h.n; /* what /reset keeps */
    size_t kept_len = h.len;
    if (s == TG_OK && terminal)
        printf(
            "chat with %s in MiniMind-3's template (%s thinking; /help lists the commands, /exit or Ctrl-D leaves)\n",
            c->run.last_checkpoint, c->o->think ? "open" : "closed");
    CliLines *in = cli_lines_open(terminal, terminal ? "> " : NULL);
    const char *line;
    size_t len;
    while (s == TG_OK && (s = cli_stdout_check()) == TG_OK && next_line(in, terminal, &line, &len)) {
        const char *role = "user";
        if (line[0] == '/' && line[1] != '/') {
            if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
            if (!strcmp(line, "/help")) {
                fputs(tool_help_text, stdout);
                continue;
            }
            if (!strcmp(line, "/reset")) {
                h.n = kept, h.len = kept_len;
                if (h.messages) h.messages[h.len] = '\0';
                printf("(a new conversation)\n");
                continue;
            }
            if (strncmp(line, "/tool ", 6) != 0) {
                printf("(unknown command %s: /help lists the commands)\n", line);
                continue;
            }
            role = "tool", line += 6, len -= 6;
        } else if (line[0] == '/') {
            line++, len--; /* "//TEXT" is the turn "/TEXT" */
        }
        int before = h.n;
        size_t before_len = h.len;
        history_add(&h, role, line, len, NULL, 0, NULL);
        TgToolReply reply;
        s = history_reply(c, &h, &reply);
        if (s == TG_ERR_ARG) { /* the conversation outgrew the context: said, and the turn left out */
            printf("(%s: /reset starts a new conversation)\n", tg_error_message());
            tg_error_clear();
            h.n = before, h.len = before_len, h.messages[h.len] = '\0';
            s = TG_OK;
            continue;
        }
        if (s == TG_OK) tg_tool_reply_free(&reply);
    }
    cli_lines_close(in);
    history_free(&h);
    return s == TG_OK ? cli_stdout_check() : s;
}

/* --message on a run of MiniMind-3's template: the conversation [--system] + the message, with
 * the --tools file's tools; the thinking and the calls shown apart from the reply. */
static TgStatus tool_message(Chat *c) {
    ToolHistory h = {0};
    TgStatus s = c->o->tools ? read_tools(c->o->tools, &h.tools) : TG_OK;
    if (c->o->system) history_add(&h, "system", c->o->system, strlen(c->o->system), NULL, 0, NULL);
    history_add(&h, "user", c->o->message, strlen(c->o->message), NULL, 0, NULL);
    TgToolReply reply;
    if (s == TG_OK && (s = history_reply(c, &h, &reply)) == TG_OK) tg_tool_reply_free(&reply);
    history_free(&h);
    return s;
}

/* The longest message a line can get: a line number before the longest library message. */
enum { WHY_CAP = 2304 };

/* --jsonl: every line in, one line out, by the JSON Lines rules of data/jsonl.h (a BOM on the first
 * line, empty and blank lines skipped). A line that cannot be answered gets {"error": ...} in its
 * place and the exit code 1; non-finite logits (the model, not the line) and lost output end it. */
static TgStatus reply_jsonl(Chat *c) {
    char *text = NULL;
    size_t cap = 0;
    ssize_t got;
    int64_t number = 0, failed = 0;
    TgConversation conv = {0};
    char *why = tg_malloc(WHY_CAP), *first_error = tg_malloc(WHY_CAP);
    TgStatus result = TG_OK;
    while ((got = getline(&text, &cap, stdin)) >= 0) {
        number++;
        const char *content = text;
        size_t len = (size_t)got;
        while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r')) text[--len] = '\0';
        if (!tg_jsonl_line_content(&content, &len, number == 1)) continue;
        TgJsonlLine line;
        if (len > TG_JSONL_MAX_LINE_BYTES) {
            line.kind = TG_JSONL_MALFORMED;
            snprintf(line.why, sizeof line.why, "line %lld is longer than %d MiB", (long long)number, TG_JSONL_MAX_LINE_BYTES >> 20);
        } else {
            tg_jsonl_line_of(content, len, number, &line);
        }
        TgStatus s = TG_ERR_FORMAT;
        TgChatReply reply = {0};
        if (line.kind != TG_JSONL_OBJECT) {
            snprintf(why, WHY_CAP, "%s", line.why);
        } else if (c->chat_template == TG_CHAT_TEMPLATE_MINIMIND3) {
            s = answer_tool_line(c, &line, why, WHY_CAP);
            if (s == TG_OK) {
                if ((result = cli_stdout_check()) != TG_OK) break;
                continue;
            }
        } else if (tg_chat_conversation_parse(&line, &conv, why, WHY_CAP)) {
            s = reply_to(c, &conv, &reply);
            if (s != TG_OK) snprintf(why, WHY_CAP, "line %lld: %s", (long long)number, tg_error_message());
        }
        if (s == TG_OK) {
            fputs("{\"reply\":", stdout);
            tg_json_write_bytes(stdout, reply.text, reply.len);
            printf(",\"finish\":\"%s\",\"tokens\":%lld}\n", reply.finish == TG_CHAT_FINISH_END ? "end" : "length",
                   (long long)reply.n_ids);
            free(reply.text);
        } else {
            fputs("{\"error\":", stdout);
            tg_json_write_string(stdout, why);
            fputs("}\n", stdout);
        }
        if ((result = cli_stdout_check()) != TG_OK) break;
        if (s == TG_ERR_NUMERIC) {
            result = tg_fail(s, "%s", why);
            break;
        }
        if (s != TG_OK && failed++ == 0) snprintf(first_error, WHY_CAP, "%s", why);
    }
    if (result == TG_OK && failed)
        result = tg_fail(TG_ERR_FORMAT, "%lld of %lld lines got no reply (each is an \"error\" line of the output); the first: %s",
                         (long long)failed, (long long)number, first_error);
    free(text), free(why), free(first_error);
    tg_chat_conversation_free(&conv);
    return result;
}

/* Set by SIGINT while a reply is written (on a terminal): the reply stops at its next token. */
static volatile sig_atomic_t stop_reply;

static void on_sigint(int signo) {
    (void)signo;
    stop_reply = 1;
}

/* Each token's bytes as they come; Ctrl-C or a reader that is gone stops the reply. */
static TgStatus stream_bytes(void *ctx, const char *bytes, size_t len) {
    (void)ctx;
    fwrite(bytes, 1, len, stdout);
    TG_TRY(cli_stdout_check());
    return stop_reply ? tg_fail(TG_ERR_INTERRUPTED, "stopped by Ctrl-C") : TG_OK;
}

static const char help_text[] =
    "Each line you type is your turn; the reply is written as it is drawn.\n"
    "  /help            this list\n"
    "  /reset           start a new conversation (the system turn stays)\n"
    "  /system TEXT     start a new conversation with TEXT as its system turn (/system alone: none)\n"
    "  /exit, /quit     leave (so does Ctrl-D on an empty line)\n"
    "  //TEXT           send a turn that begins with one '/': /TEXT\n"
    "Ctrl-C stops a reply being written (what it wrote stays in the conversation); at the prompt it\n"
    "drops the line. Left and right arrows, Home, End and the Emacs keys edit the line; up and down\n"
    "walk the lines of this session.\n";

/* The conversation's state across commands. */
typedef struct {
    char *system; /* the system turn (NULL: none) */
    size_t system_len;
    bool terminal;
} Conversation;

static void set_system(Conversation *v, const char *text, size_t len) {
    free(v->system);
    v->system = NULL, v->system_len = 0;
    if (!text) return;
    v->system = tg_malloc(len + 1);
    memcpy(v->system, text, len);
    v->system[len] = '\0', v->system_len = len;
}

/* A line that begins with '/': a command. Returns false for /exit and /quit (the chat ends). */
static bool run_command(Chat *c, Conversation *v, const char *line, size_t len, TgStatus *s) {
    const char *arg = line + strcspn(line, " \t");
    size_t name_len = (size_t)(arg - line);
    while (*arg == ' ' || *arg == '\t') arg++;
    size_t arg_len = len - (size_t)(arg - line);
#define IS(name) (name_len == strlen(name) && memcmp(line, name, name_len) == 0)
    if (IS("/exit") || IS("/quit")) return false;
    if (IS("/help")) {
        fputs(help_text, stdout);
    } else if (IS("/reset")) {
        if ((*s = chat_begin(c, v->system, v->system_len)) == TG_OK)
            printf(v->system ? "(a new conversation; the system turn stays)\n" : "(a new conversation)\n");
    } else if (IS("/system")) {
        set_system(v, arg_len ? arg : NULL, arg_len);
        if ((*s = chat_begin(c, v->system, v->system_len)) != TG_OK) return true;
        if (v->system) printf("(a new conversation, its system turn: %s)\n", v->system);
        else printf("(a new conversation, with no system turn)\n");
    } else {
        printf("(unknown command %.*s: /help lists the commands; //%.*s sends /%.*s as your turn)\n", (int)name_len, line,
               (int)(len - 1), line + 1, (int)(len - 1), line + 1);
    }
#undef IS
    return true;
}

/* One user turn and its reply, streamed. */
static TgStatus take_turn(Chat *c, const char *line, size_t len) {
    int64_t rebuilds = c->session.rebuilds;
    TgChatReply reply;
    stop_reply = 0;
    TgStatus s = tg_chat_session_reply(&c->session, line, len, stream_bytes, NULL, &reply);
    bool stopped = s == TG_ERR_INTERRUPTED && stop_reply;
    if (stopped) tg_error_clear(), s = TG_OK;
    if (s != TG_OK) return s;
    if (!stopped) free(reply.text);
    putchar('\n');
    if (stopped) printf("(stopped by Ctrl-C; what it wrote stays in the conversation)\n");
    else if (reply.finish == TG_CHAT_FINISH_LENGTH) printf("(cut at --tokens %lld)\n", (long long)c->o->tokens);
    if (c->session.rebuilds > rebuilds)
        printf("(the conversation is longer than the context: the model now sees its latest part)\n");
    return cli_stdout_check();
}

/* On a terminal: each line a user turn, edited with libedit, the reply streamed. From a pipe, the
 * same without prompt or editing, each turn written as "> TEXT" before its reply, so that the
 * output reads as a transcript. */
static TgStatus converse(Chat *c) {
    Conversation v = {.terminal = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO)};
    if (c->o->system) set_system(&v, c->o->system, strlen(c->o->system));
    TgStatus s = chat_begin(c, v.system, v.system_len);
    if (s == TG_OK && v.terminal) {
        TgTrainTask task = TG_TASK_PRETRAIN;
        TgStatus known = tg_run_task(c->run.dir, &task);
        tg_error_clear();
        printf("chat with %s (%lld-token context; each line is your turn; /help lists the commands, /exit or Ctrl-D "
               "leaves)\n",
               c->run.last_checkpoint, (long long)c->run.model.cfg.seq_len);
        if (known == TG_OK && !tg_train_task_chat(task))
            printf("note: this run was not fine-tuned on conversations (tapegrad sft); it may not answer\n");
        struct sigaction sa = {.sa_handler = on_sigint};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
    }
    CliLines *in = cli_lines_open(v.terminal, v.terminal ? "> " : NULL);
    const char *line;
    size_t len;
    while (s == TG_OK && (s = cli_stdout_check()) == TG_OK && next_line(in, v.terminal, &line, &len)) {
        if (line[0] == '/' && line[1] != '/') {
            if (!run_command(c, &v, line, len, &s)) break;
            continue;
        }
        if (line[0] == '/') line++, len--; /* "//TEXT" is the turn "/TEXT" */
        s = take_turn(c, line, len);
    }
    if (v.terminal && s == TG_OK) putchar('\n');
    cli_lines_close(in);
    free(v.system);
    return s == TG_OK ? cli_stdout_check() : s;
}

static int chat_main(int argc, char **argv) {
    const TgSampleOptions sampling = tg_sample_defaults();
    const ChatFlags defaults = {.tokens = 256, .seed = 1, .temperature = sampling.temperature, .top_k = sampling.top_k,
                                .top_p = 0.9, .repetition_penalty = 1.1, .threads = TG_TRAIN_DEFAULT_THREADS};
    ChatFlags o = defaults;
    int rc = cli_parse(&table, &o, &defaults, NULL, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    if (!o.run) return cli_usage_error("chat", "--run DIR is required (a folder written by `tapegrad sft`)");
    if (o.message && o.jsonl) return cli_usage_error("chat", "give --message or --jsonl, not both");
    if (o.think && o.no_think) return cli_usage_error("chat", "give --think or --no-think, not both");
    Chat c = {.o = &o};
    c.sampling = sampling;
    c.sampling.temperature = o.temperature, c.sampling.top_k = o.top_k, c.sampling.top_p = o.top_p;
    c.sampling.repetition_penalty = o.repetition_penalty;
    c.sampling.frequency_penalty = o.frequency_penalty, c.sampling.presence_penalty = o.presence_penalty;
    TgStatus s = tg_run_open_existing(o.run, &c.run);
    if (s == TG_OK) s = tg_sampling_memory_check(&c.run.model.cfg, c.run.last_checkpoint, o.tokens, o.threads);
    if (s == TG_OK) s = tg_run_chat_template(c.run.dir, &c.chat_template);
    bool tools = c.chat_template == TG_CHAT_TEMPLATE_MINIMIND3;
    if (s == TG_OK && !tools && (o.think || o.no_think || o.tools))
        s = tg_fail(TG_ERR_ARG,
                    "--think, --no-think and --tools are for a run of MiniMind-3's template (sft --chat-template "
                    "minimind-3); "
                    "%s renders ChatML",
                    c.run.dir);
    if (s == TG_OK && o.tools && o.jsonl)
        s = tg_fail(TG_ERR_ARG, "--tools gives the tools of a conversation; a --jsonl line brings its own");
    if (s == TG_OK) s = tg_chat_tokens_find(&c.run.tok, c.run.dir, &c.ct);
    if (s == TG_OK) {
        tg_engine_open(&c.engine, o.threads, 16u << 20);
        s = o.message ? (tools ? tool_message(&c) : reply_once(&c))
            : o.jsonl ? reply_jsonl(&c)
            : tools   ? converse_tools(&c)
                      : converse(&c);
        /* the model, not the input: the message names the checkpoint */
        if (s == TG_ERR_NUMERIC) tg_fail_context(s, "%s", c.run.last_checkpoint);
        if (c.open) tg_chat_session_close(&c.session);
        tg_engine_close(&c.engine);
    }
    tg_run_close(&c.run);
    return cli_exit("chat", s);
}

CLI_ONE_TABLE(option_tables, &table)

const Subcommand cmd_chat = {"chat", "talk to a fine-tuned run: a terminal conversation, --message, or --jsonl",
                             chat_main, option_tables};
