/* Task files read and encoded (task_file.h). */
#include "data/task_file.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/chat_format.h"
#include "data/jsonl.h"
#include "lib/memory.h"
#include "support/path.h"

const char *tg_task_format_name(TgTaskFormat format) {
    return format == TG_TASK_MINIMAL_PAIRS ? "minimal_pairs" : "multiple_choice";
}

bool tg_task_name_valid(const char *name, size_t len) {
    bool ok = len > 0 && len < TG_TASK_NAME_CAP;
    for (size_t i = 0; ok && i < len; i++) {
        char c = name[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
             c == '.';
    }
    return ok;
}

TgStatus tg_task_file_name(const char *path, char *name, size_t cap) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t len = strlen(base);
    if (len > 3 && strcmp(base + len - 3, ".gz") == 0) len -= 3;
    for (size_t i = len; i > 0; i--)
        if (base[i - 1] == '.') {
            len = i - 1;
            break;
        }
    if (!tg_task_name_valid(base, len) || len >= cap)
        return tg_fail(TG_ERR_ARG,
                       "%s: a task is named by its file's name without the extension, which must be 1 to %d letters, "
                       "digits, '-', '_' or '.' (metrics call it task/NAME/acc): rename the file",
                       path, TG_TASK_NAME_CAP - 1);
    memcpy(name, base, len);
    name[len] = '\0';
    return TG_OK;
}

/* What reading one file holds besides the file itself. */
typedef struct {
    const TgTaskEncoding *enc;
    TgTaskFile *file;
    int64_t line;        /* the line being read */
    int64_t format_line; /* the line that fixed the format (0: none yet) */
    int64_t cap_items, cap_candidates, cap_ids;
    int32_t *scratch; /* plain text: the ids of a candidate */
    size_t scratch_cap;
    TgChatIds chat; /* ChatML: the ids of a candidate and whether each is the reply's */
    TgChatTokens markers;
} TaskReader;

/* The message of s prefixed with the line being read: "FILE line N: ..." */
static TgStatus fail_at(const TaskReader *r, TgStatus s) {
    return tg_fail_context(s, "%s line %lld", r->file->path, (long long)r->line);
}

/* A refusal of the line being read (TG_ERR_FORMAT). */
__attribute__((format(printf, 2, 3))) static TgStatus line_fail(const TaskReader *r, const char *fmt, ...) {
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return tg_fail(TG_ERR_FORMAT, "%s line %lld: %s", r->file->path, (long long)r->line, why);
}

/* Room for `need` elements of `size` bytes at *p (capacity *cap, doubling from `first`). A task file
 * too large for the memory left is the user's to hear about: "out of memory reading FILE", never
 * an abort. */
static TgStatus grow(TaskReader *r, void **p, int64_t *cap, int64_t need, size_t size, int64_t first, const char *what) {
    if (need <= *cap) return TG_OK;
    int64_t c = *cap ? *cap : first;
    while (c < need) c *= 2;
    if (tg_memory_grow(p, (size_t)c * size, what) != TG_OK) {
        char bytes[32];
        tg_memory_format((double)c * (double)size, bytes, sizeof bytes);
        return tg_fail(TG_ERR_NOMEM, "out of memory reading %s (%s for %s at line %lld): free memory, or split the file",
                       r->file->path, bytes, what, (long long)r->line);
    }
    *cap = c;
    return TG_OK;
}

/* Room for `n` more ids, refused past TG_TASK_MAX_IDS. */
static TgStatus reserve_ids(TaskReader *r, int64_t n) {
    TgTaskFile *f = r->file;
    if (f->n_ids + n > TG_TASK_MAX_IDS)
        return line_fail(r, "the file's candidates pass %d tokens, the most one task file holds: split it",
                         TG_TASK_MAX_IDS);
    return grow(r, (void **)&f->ids, &r->cap_ids, f->n_ids + n, sizeof *f->ids, 4096, "its candidates' token ids");
}

/* A text into r->scratch after the `at` ids there. */
static TgStatus encode_plain(TaskReader *r, const char *text, size_t len, size_t at, size_t *n) {
    size_t need = at + tg_tokenizer_max_ids(r->enc->tok, len) + 1;
    if (need > r->scratch_cap) {
        int64_t cap = (int64_t)r->scratch_cap;
        TG_TRY(grow(r, (void **)&r->scratch, &cap, (int64_t)need, sizeof *r->scratch, (int64_t)need, "a line's token ids"));
        r->scratch_cap = (size_t)cap;
    }
    return tg_tokenizer_encode(r->enc->tok, text, len, r->scratch + at, need - at, n);
}

/* The candidate <eot> context continuation, or a ChatML user turn and reply (task_file.h): its
 * ids at *ids (n of them), the continuation from *from on. */
static TgStatus render(TaskReader *r, const char *context, size_t context_len, const char *text, size_t len,
                       const int32_t **ids, size_t *n, size_t *from) {
    if (r->enc->rendering == TG_TASK_PLAIN_TEXT || !context) {
        size_t n_context = 0, n_text = 0;
        if (context) TG_TRY(encode_plain(r, context, context_len, 1, &n_context));
        TG_TRY(encode_plain(r, text, len, 1 + n_context, &n_text));
        r->scratch[0] = tg_tokenizer_doc_start(r->enc->tok);
        *ids = r->scratch, *n = 1 + n_context + n_text, *from = 1 + n_context;
        return TG_OK;
    }
    const TgTokenizer *tok = r->enc->tok;
    r->chat.n = 0;
    TG_TRY(tg_chat_encode_turn(tok, &r->markers, TG_CHAT_USER, context, context_len, &r->chat));
    TG_TRY(tg_chat_encode_turn(tok, &r->markers, TG_CHAT_ASSISTANT, text, len, &r->chat));
    size_t first = 0, end = r->chat.n;
    while (first < r->chat.n && !r->chat.trained[first]) first++;
    while (end > first && !r->chat.trained[end - 1]) end--; /* the "\n" after <|im_end|> */
    *ids = r->chat.ids, *n = end, *from = first;
    return TG_OK;
}

/* One candidate of the item being read: `what` names its text in messages ("\"choices\"[2]"). */
static TgStatus add_candidate(TaskReader *r, const char *context, size_t context_len, const char *text, size_t len,
                              const char *what) {
    if (len == 0) return line_fail(r, "%s is empty: a candidate needs text to score", what);
    const int32_t *ids;
    size_t n, from;
    TgStatus s = render(r, context, context_len, text, len, &ids, &n, &from);
    if (s != TG_OK)
        return fail_at(r, tg_fail_context(TG_ERR_FORMAT, "%s cannot be encoded with the run's tokenizer", what));
    if ((int64_t)n > r->enc->max_tokens)
        return line_fail(r, "%s takes %zu tokens with what comes before it, more than the model's context of %lld",
                         what, n - 1, (long long)r->enc->max_tokens - 1);
    TG_TRY(reserve_ids(r, (int64_t)n));
    TgTaskFile *f = r->file;
    TG_TRY(grow(r, (void **)&f->candidates, &r->cap_candidates, f->n_candidates + 1, sizeof *f->candidates, 256,
                "its candidates"));
    f->candidates[f->n_candidates++] =
        (TgTaskCandidate){.offset = f->n_ids, .len = (int32_t)n, .scored_from = (int32_t)from, .bytes = (int64_t)len};
    memcpy(f->ids + f->n_ids, ids, n * sizeof *ids);
    f->n_ids += (int64_t)n;
    return TG_OK;
}

/* The member `key` of the line's object, once: *value at it (NULL when absent), refused when given
 * twice or when it is not of `type`. */
static TgStatus member(TaskReader *r, const TgJsonCursor *obj, const char *key, TgJsonType type, TgJsonCursor *value,
                       bool *found) {
    size_t n = tg_json_find(obj, key, value);
    *found = n == 1;
    if (n > 1) return line_fail(r, "\"%s\" is given twice", key);
    if (n == 1 && tg_json_type(value) != type)
        return line_fail(r, "\"%s\" is %s, not %s", key, tg_json_type_name(tg_json_type(value)),
                         type == TG_JSON_STRING  ? "a string"
                         : type == TG_JSON_ARRAY ? "an array"
                                                 : "a number");
    return TG_OK;
}

/* The string member `key`, decoded (malloc'ed; the caller frees it). */
static TgStatus string_member(TaskReader *r, const TgJsonCursor *obj, const char *key, char **text, size_t *len) {
    TgJsonCursor v;
    bool found;
    *text = NULL;
    TG_TRY(member(r, obj, key, TG_JSON_STRING, &v, &found));
    if (!found) return line_fail(r, "no \"%s\"", key);
    *text = tg_json_decode_alloc(tg_json_read_string(&v), len);
    if (!*text) return fail_at(r, tg_fail(TG_ERR_NOMEM, "out of memory for \"%s\"", key));
    return TG_OK;
}

/* Which format the line is, refused when it is neither, both, or not the file's. */
static TgStatus line_format(TaskReader *r, const TgJsonCursor *obj, TgTaskFormat *format) {
    bool pair = tg_json_find(obj, "sentence_good", NULL) || tg_json_find(obj, "sentence_bad", NULL);
    bool choice =
        tg_json_find(obj, "context", NULL) || tg_json_find(obj, "choices", NULL) || tg_json_find(obj, "label", NULL);
    if (pair == choice)
        return line_fail(r,
                         "%s: a line is a minimal pair {\"sentence_good\", \"sentence_bad\"} or a multiple-choice "
                         "item {\"context\", \"choices\", \"label\"}",
                         pair ? "members of both formats" : "members of neither format");
    *format = pair ? TG_TASK_MINIMAL_PAIRS : TG_TASK_MULTIPLE_CHOICE;
    if (r->format_line == 0) {
        r->format_line = r->line;
        r->file->format = *format;
    } else if (*format != r->file->format) {
        return line_fail(r, "a %s item in a file of %s (line %lld): every line of a task file has one format",
                         pair ? "minimal-pair" : "multiple-choice", pair ? "multiple-choice items" : "minimal pairs",
                         (long long)r->format_line);
    }
    return TG_OK;
}

/* A minimal pair: the good sentence, then the bad one. */
static TgStatus read_pair(TaskReader *r, const TgJsonCursor *obj) {
    char *good = NULL, *bad = NULL;
    size_t good_len = 0, bad_len = 0;
    TgStatus s = string_member(r, obj, "sentence_good", &good, &good_len);
    if (s == TG_OK) s = string_member(r, obj, "sentence_bad", &bad, &bad_len);
    if (s == TG_OK) s = add_candidate(r, NULL, 0, good, good_len, "\"sentence_good\"");
    if (s == TG_OK) s = add_candidate(r, NULL, 0, bad, bad_len, "\"sentence_bad\"");
    free(good), free(bad);
    return s;
}

/* The label of an item of `count` choices: a whole number in [0, count). */
static TgStatus read_label(TaskReader *r, const TgJsonCursor *obj, int32_t count, int32_t *label) {
    TgJsonCursor v;
    bool found;
    TG_TRY(member(r, obj, "label", TG_JSON_NUMBER, &v, &found));
    if (!found) return line_fail(r, "no \"label\"");
    double x = tg_json_read_number(&v);
    if (!(x >= 0 && x < count && x == (double)(int32_t)x))
        return line_fail(r, "\"label\" %g is not the index of one of its %d choices (0 to %d)", x, count, count - 1);
    *label = (int32_t)x;
    return TG_OK;
}

/* The choices of a multiple-choice item, each after the context. */
static TgStatus read_choices(TaskReader *r, const TgJsonCursor *obj, const char *context, size_t context_len,
                             int32_t *count) {
    TgJsonCursor list;
    bool found;
    TG_TRY(member(r, obj, "choices", TG_JSON_ARRAY, &list, &found));
    if (!found) return line_fail(r, "no \"choices\"");
    size_t n = tg_json_count(&list);
    if (n < 2 || n > TG_TASK_MAX_CHOICES)
        return line_fail(r, "%zu choices: an item has 2 to %d", n, TG_TASK_MAX_CHOICES);
    tg_json_enter(&list);
    TgStatus s = TG_OK;
    for (int32_t i = 0; s == TG_OK && tg_json_next_item(&list); i++) {
        char what[32];
        snprintf(what, sizeof what, "\"choices\"[%d]", i);
        if (tg_json_type(&list) != TG_JSON_STRING)
            return line_fail(r, "%s is %s, not a string", what, tg_json_type_name(tg_json_type(&list)));
        size_t len;
        char *text = tg_json_decode_alloc(tg_json_read_string(&list), &len);
        if (!text) return fail_at(r, tg_fail(TG_ERR_NOMEM, "out of memory for %s", what));
        s = add_candidate(r, context, context_len, text, len, what);
        free(text);
    }
    *count = (int32_t)n;
    return s;
}

static TgStatus read_choice_item(TaskReader *r, const TgJsonCursor *obj, int32_t *count, int32_t *label) {
    char *context = NULL;
    size_t context_len = 0;
    TgStatus s = string_member(r, obj, "context", &context, &context_len);
    if (s == TG_OK) s = read_choices(r, obj, context, context_len, count);
    if (s == TG_OK) s = read_label(r, obj, *count, label);
    free(context);
    return s;
}

/* One item from a checked line. */
static TgStatus read_item(TaskReader *r, const TgJsonlLine *line) {
    TgTaskFile *f = r->file;
    TgJsonCursor obj = tg_json_cursor(line->text, line->len, 0);
    TgTaskFormat format = TG_TASK_MINIMAL_PAIRS;
    TG_TRY(line_format(r, &obj, &format));
    TgTaskItem item = {.line = r->line, .first = f->n_candidates, .count = 2, .label = 0};
    if (format == TG_TASK_MINIMAL_PAIRS)
        TG_TRY(read_pair(r, &obj));
    else
        TG_TRY(read_choice_item(r, &obj, &item.count, &item.label));
    TG_TRY(grow(r, (void **)&f->items, &r->cap_items, f->n_items + 1, sizeof *f->items, 256, "its items"));
    f->items[f->n_items++] = item;
    return TG_OK;
}

static TgStatus read_lines(TaskReader *r, TgJsonlReader *jr) {
    for (;;) {
        TgJsonlLine line;
        TG_TRY(tg_jsonl_next(jr, &line));
        if (line.kind == TG_JSONL_END) break;
        r->line = line.number;
        /* the reader's reason names the line: "line 12 is not valid JSON: ..." */
        if (line.kind == TG_JSONL_MALFORMED) return tg_fail(TG_ERR_FORMAT, "%s %s", r->file->path, line.why);
        TG_TRY(read_item(r, &line));
    }
    if (r->file->n_items == 0)
        return tg_fail(TG_ERR_FORMAT,
                       "%s holds no task item: give JSON lines of minimal pairs or multiple-choice items",
                       r->file->path);
    return TG_OK;
}

TgStatus tg_task_file_read(const char *path, const TgTaskEncoding *enc, TgTaskFile *out) {
    memset(out, 0, sizeof *out);
    TaskReader r = {.enc = enc, .file = out};
    out->pad_id = enc->tok->eot_id;
    TgStatus s = tg_path_format(out->path, sizeof out->path, "%s", path);
    if (s == TG_OK) s = tg_task_file_name(path, out->name, sizeof out->name);
    if (s == TG_OK && enc->rendering == TG_TASK_CHATML)
        s = tg_chat_tokens_find(enc->tok, "the run's tokenizer", &r.markers);
    TgJsonlReader jr;
    bool opened = false;
    if (s == TG_OK) {
        s = tg_jsonl_open(&jr, path);
        opened = s == TG_OK;
    }
    if (s == TG_OK) s = read_lines(&r, &jr);
    if (opened) tg_jsonl_close(&jr);
    free(r.scratch);
    tg_chat_ids_free(&r.chat);
    if (s != TG_OK) tg_task_file_free(out);
    return s;
}

void tg_task_file_free(TgTaskFile *file) {
    free(file->items);
    free(file->candidates);
    free(file->ids);
    memset(file, 0, sizeof *file);
}
