/* Conversations -> a run's token and mask files, and reading them back (sft_data.h). */
#include "data/sft_data.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/chat_format.h"
#include "data/chat_tools.h"
#include "data/jsonl.h"
#include "data/preference.h"
#include "data/sources.h"
#include "support/clock.h"
#include "support/path.h"

/* The reporter's messages (support/messages.h). */
static TgMessageSink sink_of(const TgPrepareReporter *rep) {
    return (TgMessageSink){rep ? rep->message : NULL, rep ? rep->ctx : NULL};
}

/* Everything one preparation holds. */
typedef struct {
    const TgSftPrepareOptions *opt;
    const TgPrepareReporter *rep;
    TgSftPrepareResult *res;
    TgChatTokens ct;
    TgConversation conv, rejected; /* pairs: conv is the chosen side */
    TgToolConversation tools;      /* a conversation of MiniMind-3's template */
    TgChatIds ids, rejected_ids;
    int32_t *mask;             /* [ids.cap] */
    size_t mask_cap;
    TgTokfileWriter tokens, masks;
    bool tokens_open, masks_open;
    uint64_t *starts;          /* [conversations + 1] */
    size_t cap_starts;
    uint64_t disk_before;      /* bytes of the files read before the current one */
    double t0, last_report;
} Prep;

static void note_malformed(Prep *p, const char *path, const char *why) {
    TgSftPrepareResult *res = p->res;
    res->malformed_lines++;
    if (res->n_errors < TG_SFT_REPORTED_ERRORS)
        snprintf(res->errors[res->n_errors++], sizeof res->errors[0], "%.100s: %.200s", path, why);
}

static void push_start(Prep *p, uint64_t at) {
    if (p->res->conversations + 1 >= p->cap_starts) {
        p->cap_starts = p->cap_starts ? 2 * p->cap_starts : 1024;
        p->starts = tg_realloc(p->starts, p->cap_starts * sizeof *p->starts);
    }
    p->starts[p->res->conversations] = at;
}

/* How many of the ids fit the window (a cut counted), and in *trained how many of them the loss
 * predicts (the first never: nothing comes before it). */
static size_t in_window(Prep *p, const TgChatIds *ids, uint64_t *trained) {
    size_t n = ids->n;
    if ((int64_t)n > p->opt->seq_len) {
        n = (size_t)p->opt->seq_len;
        p->res->truncated++;
    }
    *trained = 0;
    for (size_t i = 1; i < n; i++) *trained += ids->trained[i];
    return n;
}

/* Appends a conversation's first n ids to both files. */
static TgStatus append(Prep *p, const TgChatIds *ids, size_t n, uint64_t trained) {
    if (n > p->mask_cap) {
        p->mask_cap = ids->cap;
        p->mask = tg_realloc(p->mask, p->mask_cap * sizeof *p->mask);
    }
    p->mask[0] = TG_SFT_MASK_START; /* the first token is never predicted: nothing comes before it */
    for (size_t i = 1; i < n; i++) p->mask[i] = ids->trained[i] ? TG_SFT_MASK_TRAINED : TG_SFT_MASK_CONTEXT;
    push_start(p, p->tokens.n);
    TG_TRY(tg_tokfile_writer_append(&p->tokens, ids->ids, n));
    TG_TRY(tg_tokfile_writer_append(&p->masks, p->mask, n));
    p->res->conversations++;
    p->res->trained_tokens += trained;
    return TG_OK;
}

/* The conversation encoded in p->ids, cut to the window and appended, unless the window holds
 * none of its replies. */
static TgStatus keep_encoded(Prep *p) {
    uint64_t trained;
    size_t n = in_window(p, &p->ids, &trained);
    if (trained == 0) {
        p->res->without_reply_in_window++;
        return TG_OK;
    }
    return append(p, &p->ids, n, trained);
}

/* One conversation: encoded, cut to the window, appended to both files. */
static TgStatus add_conversation(Prep *p) {
    if (!tg_chat_conversation_has_reply(&p->conv)) {
        p->res->without_reply++;
        return TG_OK;
    }
    p->ids.n = 0;
    TG_TRY(tg_chat_encode_conversation(p->opt->tok, &p->ct, &p->conv, &p->ids));
    return keep_encoded(p);
}

/* One conversation of MiniMind-3's template: rendered, encoded with the assistant's spans
 * trained, cut to the window, appended. */
static TgStatus add_tool_conversation(Prep *p) {
    TgToolRendering r;
    tg_tool_render(&p->tools, false, false, &r);
    if (r.n_trained == 0) {
        tg_tool_rendering_free(&r);
        p->res->without_reply++;
        return TG_OK;
    }
    p->ids.n = 0;
    TgStatus s = tg_tool_encode(p->opt->tok, &p->ct, &r, false, &p->ids);
    tg_tool_rendering_free(&r);
    TG_TRY(s);
    return keep_encoded(p);
}

/* One preference pair: checked (a pair DPO learns nothing from is counted and named, or stops
 * the preparation with `strict`), encoded, both sides cut to the window and appended, the chosen
 * first. */
static TgStatus add_pair(Prep *p, const char *path, int64_t line) {
    TgSftPrepareResult *res = p->res;
    char why[320];
    TgPairVerdict verdict = tg_pair_check(&p->conv, &p->rejected, why, sizeof why);
    if (verdict != TG_PAIR_OK) {
        uint64_t *count = verdict == TG_PAIR_NO_REPLY    ? &res->without_reply
                          : verdict == TG_PAIR_IDENTICAL ? &res->identical_pairs
                                                         : &res->prompts_differ;
        (*count)++;
        if (res->n_errors < TG_SFT_REPORTED_ERRORS)
            snprintf(res->errors[res->n_errors++], sizeof res->errors[0], "%.100s: line %lld: %.180s", path,
                     (long long)line, why);
        if (p->opt->strict)
            return tg_fail(TG_ERR_FORMAT, "%s: line %lld: %s (`strict` stops at the first such pair)", path,
                           (long long)line, why);
        return TG_OK;
    }
    TG_TRY(tg_pair_encode(p->opt->tok, &p->ct, &p->conv, &p->rejected, &p->ids, &p->rejected_ids));
    uint64_t chosen_trained, rejected_trained;
    size_t nc = in_window(p, &p->ids, &chosen_trained), nr = in_window(p, &p->rejected_ids, &rejected_trained);
    if (chosen_trained == 0 || rejected_trained == 0) {
        res->without_reply_in_window++;
        return TG_OK;
    }
    TG_TRY(append(p, &p->ids, nc, chosen_trained));
    return append(p, &p->rejected_ids, nr, rejected_trained);
}

static void report_progress(Prep *p, const TgJsonlReader *r, bool last) {
    double now = tg_clock_seconds();
    if (!p->rep || !p->rep->progress || (!last && now - p->last_report < 0.5)) return;
    p->last_report = now;
    TgPrepareProgress pp = {"encoding", p->disk_before + tg_file_stream_disk_offset(&r->fs), p->res->file_bytes, now - p->t0};
    p->rep->progress(p->rep->ctx, &pp);
}

static TgStatus read_file(Prep *p, const char *path) {
    TgJsonlReader r;
    TG_TRY(tg_jsonl_open(&r, path));
    TgStatus s = TG_OK;
    for (;;) {
        TgJsonlLine line;
        s = tg_jsonl_next(&r, &line);
        if (s != TG_OK || line.kind == TG_JSONL_END) break;
        p->res->lines++;
        char why[320];
        bool tools = p->opt->chat_template == TG_CHAT_TEMPLATE_MINIMIND3 && !p->opt->pairs;
        bool ok = line.kind == TG_JSONL_OBJECT &&
                  (p->opt->pairs ? tg_pair_parse(&line, &p->conv, &p->rejected, why, sizeof why)
                   : tools       ? tg_tool_conversation_parse(&line, &p->tools, why, sizeof why)
                                 : tg_chat_conversation_parse(&line, &p->conv, why, sizeof why));
        if (!ok) {
            const char *reason = line.kind == TG_JSONL_OBJECT ? why : line.why;
            note_malformed(p, path, reason);
            if (p->opt->strict) {
                s = tg_fail(TG_ERR_FORMAT, "%s: %s (`strict` stops at the first malformed line)", path, reason);
                break;
            }
            continue;
        }
        s = p->opt->pairs ? add_pair(p, path, line.number) : tools ? add_tool_conversation(p) : add_conversation(p);
        if (s != TG_OK && p->opt->pairs && s == TG_ERR_FORMAT) break; /* a refused pair: its message names it */
        if (s != TG_OK) {
            s = tg_fail_context(s, "%s, line %lld", path, (long long)line.number);
            break;
        }
        report_progress(p, &r, false);
    }
    report_progress(p, &r, true);
    p->disk_before += r.fs.file_bytes;
    tg_jsonl_close(&r);
    return s;
}

/* The files to read: a file itself, or a folder's JSONL files (the others skipped, counted). */
static TgStatus list_sources(const char *sources, TgSourceList *list, TgSftPrepareResult *res) {
    TG_TRY(tg_sources_list(sources, list));
    struct stat sb;
    bool folder = stat(sources, &sb) == 0 && S_ISDIR(sb.st_mode);
    size_t kept = 0;
    for (size_t i = 0; i < list->count; i++) {
        TgSource *s = &list->items[i];
        if (folder && s->kind != TG_SOURCE_JSONL) {
            if (res->files_skipped++ == 0) snprintf(res->first_skipped, sizeof res->first_skipped, "%s", s->path);
            list->file_bytes -= s->file_bytes;
            free(s->path);
            continue;
        }
        list->items[kept++] = *s;
    }
    list->count = kept;
    if (kept == 0)
        return tg_fail(TG_ERR_FORMAT, "%s holds no JSONL file (*.jsonl, *.ndjson, gzip-compressed or not) of conversations",
                       sources);
    res->files = kept;
    res->file_bytes = list->file_bytes;
    return TG_OK;
}

/* The split: the last val_fraction of the conversations, or of the pairs (rounded, at least one
 * each side). */
static TgStatus commit_split(Prep *p, const char *dir) {
    TgSftPrepareResult *res = p->res;
    uint64_t unit = p->opt->pairs ? 2 : 1, n = res->conversations / unit;
    if (n < 2 && p->opt->pairs)
        return tg_fail(TG_ERR_FORMAT,
                       "%s holds %" PRIu64 " pair%s to train on (%" PRIu64 " lines: %" PRIu64 " malformed, %" PRIu64
                       " without an assistant reply, %" PRIu64 " with the same reply twice, %" PRIu64
                       " with two prompts, %" PRIu64 " without a reply within `seq_len` %lld tokens): preference "
                                                     "training needs at least two, one for each split",
                       p->opt->sources, n, n == 1 ? "" : "s", res->lines, res->malformed_lines, res->without_reply,
                       res->identical_pairs, res->prompts_differ, res->without_reply_in_window,
                       (long long)p->opt->seq_len);
    if (n < 2)
        return tg_fail(TG_ERR_FORMAT,
                       "%s holds %" PRIu64 " conversation%s to train on (%" PRIu64 " lines, %" PRIu64 " malformed, %" PRIu64
                       " without an assistant turn, %" PRIu64 " without one within `seq_len` %lld tokens): fine-tuning needs at "
                       "least two, one for each split",
                       p->opt->sources, n, n == 1 ? "" : "s", res->lines, res->malformed_lines, res->without_reply,
                       res->without_reply_in_window, (long long)p->opt->seq_len);
    uint64_t n_val = (uint64_t)((double)n * p->opt->val_fraction + 0.5);
    if (n_val < 1) n_val = 1;
    if (n_val > n - 1) n_val = n - 1;
    res->train_conversations = (n - n_val) * unit, res->val_conversations = n_val * unit;
    uint64_t split = p->starts[(n - n_val) * unit];
    res->train_tokens = split, res->val_tokens = p->tokens.n - split;
    char val_tokens[TG_PATH_CAP], val_mask[TG_PATH_CAP];
    TG_TRY(tg_path_join(val_tokens, sizeof val_tokens, dir, TG_PREPARE_VAL_FILE));
    TG_TRY(tg_path_join(val_mask, sizeof val_mask, dir, TG_SFT_VAL_MASK_FILE));
    p->tokens_open = p->masks_open = false;
    TgStatus s = tg_tokfile_writer_commit_split(&p->tokens, split, val_tokens);
    TgStatus m = tg_tokfile_writer_commit_split(&p->masks, split, val_mask);
    return s != TG_OK ? s : m;
}

static TgStatus prepare(Prep *p, const char *dir) {
    const TgSftPrepareOptions *opt = p->opt;
    TG_TRY(tg_chat_tokens_find(opt->tok, "the tokenizer", &p->ct));
    if (!(opt->val_fraction > 0 && opt->val_fraction < 1))
        return tg_fail(TG_ERR_ARG, "`val_fraction` %g must be in (0, 1)", opt->val_fraction);
    TgSourceList list;
    TgStatus s = list_sources(opt->sources, &list, p->res);
    char path[TG_PATH_CAP];
    if (s == TG_OK) s = tg_path_join(path, sizeof path, dir, TG_PREPARE_TRAIN_FILE);
    if (s == TG_OK) s = tg_tokfile_writer_open(&p->tokens, path, (uint32_t)opt->tok->vocab_size, opt->tok->fingerprint);
    p->tokens_open = s == TG_OK;
    if (s == TG_OK) s = tg_path_join(path, sizeof path, dir, TG_SFT_TRAIN_MASK_FILE);
    if (s == TG_OK) s = tg_tokfile_writer_open(&p->masks, path, TG_SFT_MASK_VALUES, opt->tok->fingerprint);
    p->masks_open = s == TG_OK;
    TgMessageSink sink = sink_of(p->rep);
    if (s == TG_OK) {
        tg_sources_report_skips(&list, opt->sources, &sink);
        tg_message_emit(&sink, TG_MESSAGE_INFO, "preparing conversations from %s: %zu file%s, %.1f MiB", opt->sources, list.count,
                     list.count == 1 ? "" : "s", (double)list.file_bytes / (1 << 20));
    }
    for (size_t i = 0; s == TG_OK && i < list.count; i++) s = read_file(p, list.items[i].path);
    tg_sources_free(&list);
    if (s == TG_OK) {
        push_start(p, p->tokens.n);
        s = commit_split(p, dir);
    }
    return s;
}

TgStatus tg_sft_prepare(const TgSftPrepareOptions *opt, const char *dir, const TgPrepareReporter *rep, TgSftPrepareResult *res) {
    memset(res, 0, sizeof *res);
    Prep p = {.opt = opt, .rep = rep, .res = res};
    p.t0 = p.last_report = tg_clock_seconds();
    TgStatus s = prepare(&p, dir);
    if (p.tokens_open) tg_tokfile_writer_abandon(&p.tokens);
    if (p.masks_open) tg_tokfile_writer_abandon(&p.masks);
    tg_chat_conversation_free(&p.conv);
    tg_chat_conversation_free(&p.rejected);
    tg_tool_conversation_free(&p.tools);
    tg_chat_ids_free(&p.ids);
    tg_chat_ids_free(&p.rejected_ids);
    free(p.mask);
    free(p.starts);
    res->seconds = tg_clock_seconds() - p.t0;
    return s;
}

/* ---- reading ---- */


/* Where each conversation starts, from the mask read a block at a time. */
static TgStatus index_conversations(TgSplit *split, int64_t seq_len) {
    const TgTokenStore *m = &split->mask;
    enum { BLOCK = 1 << 16 };
    int32_t *buf = tg_malloc(BLOCK * sizeof *buf);
    size_t cap = 1024;
    split->starts = tg_malloc(cap * sizeof *split->starts);
    TgStatus s = TG_OK;
    for (uint64_t at = 0; at < m->n && s == TG_OK;) {
        size_t n = m->n - at < BLOCK ? (size_t)(m->n - at) : BLOCK;
        s = tg_token_store_read(m, at, n, buf);
        for (size_t i = 0; i < n && s == TG_OK; i++) {
            if (at + i == 0 && buf[i] != TG_SFT_MASK_START)
                s = tg_fail(TG_ERR_FORMAT, "%s does not begin a conversation at its first token", m->path);
            if (buf[i] == TG_SFT_MASK_TRAINED) split->trained++;
            if (buf[i] != TG_SFT_MASK_START) continue;
            if (split->n_conversations + 1 >= cap) split->starts = tg_realloc(split->starts, (cap *= 2) * sizeof *split->starts);
            split->starts[split->n_conversations++] = at + i;
        }
        at += n;
    }
    free(buf);
    TG_TRY(s);
    split->starts[split->n_conversations] = m->n;
    for (size_t c = 0; c < split->n_conversations; c++)
        if ((int64_t)(split->starts[c + 1] - split->starts[c]) > seq_len)
            return tg_fail(TG_ERR_FORMAT, "%s: conversation %zu holds %" PRIu64 " tokens, more than the %lld of the window it was prepared for",
                           m->path, c + 1, split->starts[c + 1] - split->starts[c], (long long)seq_len);
    return TG_OK;
}

TgStatus tg_sft_split_open(TgSplit *split, const char *dir, const char *tokens_file, const char *mask_file, uint32_t vocab,
                        uint64_t fingerprint, int64_t seq_len) {
    tg_split_init(split);
    split->kind = TG_SPLIT_CONVERSATIONS;
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, dir, tokens_file));
    TG_TRY(tg_token_store_open(&split->tokens, path, vocab, fingerprint));
    TG_TRY(tg_path_join(path, sizeof path, dir, mask_file));
    TG_TRY(tg_token_store_open(&split->mask, path, TG_SFT_MASK_VALUES, fingerprint));
    if (split->mask.n != split->tokens.n || split->tokens.n == 0)
        return tg_fail(TG_ERR_FORMAT, "%s holds %" PRIu64 " tokens and %s %" PRIu64 ": they are prepared together and must agree",
                       split->tokens.path, split->tokens.n, split->mask.path, split->mask.n);
    return index_conversations(split, seq_len);
}
