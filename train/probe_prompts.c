/* Probe prompts: read, encoded once, continued at every evaluation (probe_prompts.h). */
#include "train/probe_prompts.h"

#include <stdlib.h>
#include <string.h>

#include "data/chat_format.h"
#include "support/file_read.h"

/* The ids the model is given for one prompt: its text (a fine-tuning run's as a user turn, then
 * the generation prompt). */
static TgStatus encode_prompt(const TgRun *run, const TgChatTokens *ct, const char *text, size_t len, TgChatIds *out) {
    out->n = 0;
    if (!tg_train_task_chat(run->task)) return tg_chat_encode_text(&run->tok, text, len, out);
    TG_TRY(tg_chat_encode_turn(&run->tok, ct, TG_CHAT_USER, text, len, out));
    return tg_chat_encode_generation_prompt(&run->tok, ct, out);
}

/* Line `line` of `path`, text[0..len), as the next prompt. */
static TgStatus add_prompt(TgProbePrompts *p, const char *path, int line, const char *text, size_t len,
                           const TgRun *run, const TgChatTokens *ct, TgChatIds *ids) {
    if (len == 0)
        return tg_fail(TG_ERR_FORMAT, "%s line %d is empty: each line is one prompt; remove the empty line", path,
                       line);
    if (memchr(text, '\0', len))
        return tg_fail(TG_ERR_FORMAT, "%s line %d holds a NUL byte: a prompt is a line of text", path, line);
    if (p->n == TG_PROBE_MAX_PROMPTS)
        return tg_fail(TG_ERR_FORMAT, "%s line %d: more than %d prompts; each is continued at every evaluation", path,
                       line, TG_PROBE_MAX_PROMPTS);
    TgStatus s = encode_prompt(run, ct, text, len, ids);
    if (s != TG_OK)
        return tg_fail_context(TG_ERR_FORMAT, "%s line %d: the tokenizer cannot encode the prompt", path, line);
    const int64_t context = run->model.cfg.seq_len;
    if ((int64_t)ids->n > context)
        return tg_fail(TG_ERR_FORMAT, "%s line %d: the prompt is %zu tokens%s, more than the model's context of %lld",
                       path, line, ids->n, tg_train_task_chat(run->task) ? " with the chat template" : "",
                       (long long)context);
    p->prompts = tg_realloc(p->prompts, (size_t)(p->n + 1) * sizeof *p->prompts);
    p->ids = tg_realloc(p->ids, (p->n_ids + ids->n) * sizeof *p->ids);
    memcpy(p->ids + p->n_ids, ids->ids, ids->n * sizeof *p->ids);
    p->prompts[p->n++] = (TgProbePrompt){text, len, line, p->n_ids, (int64_t)ids->n};
    p->n_ids += ids->n;
    return TG_OK;
}

/* Every line of the file's `size` bytes as a prompt; a last line may lack its line break, and a
 * line may end in \r\n. */
static TgStatus add_lines(TgProbePrompts *p, const char *path, size_t size, const TgRun *run, const TgChatTokens *ct) {
    TgChatIds ids = {0};
    TgStatus s = TG_OK;
    int line = 0;
    for (size_t at = 0; at < size && s == TG_OK;) {
        const char *text = p->file + at, *end = memchr(text, '\n', size - at);
        size_t len = end ? (size_t)(end - text) : size - at;
        at += len + (end != NULL);
        if (len > 0 && text[len - 1] == '\r') len--;
        s = add_prompt(p, path, ++line, text, len, run, ct, &ids);
    }
    tg_chat_ids_free(&ids);
    return s;
}

TgStatus tg_probe_prompts_load(TgProbePrompts *p, const char *path, int64_t tokens, const TgRun *run) {
    memset(p, 0, sizeof *p);
    p->tokens = tokens;
    TgChatTokens ct = {0};
    if (tg_train_task_chat(run->task)) TG_TRY(tg_chat_tokens_find(&run->tok, run->dir, &ct));
    size_t size;
    TgStatus s = tg_file_read_all(path, TG_PROBE_MAX_FILE_BYTES, &p->file, &size);
    if (s != TG_OK) return tg_fail_context(s, "`probe_prompts` %s", path);
    TG_TRY(add_lines(p, path, size, run, &ct));
    if (p->n == 0) return tg_fail(TG_ERR_FORMAT, "`probe_prompts` %s holds no prompt: write one a line", path);
    return TG_OK;
}

TgStatus tg_probe_prompts_write(const TgProbePrompts *p, TgRun *run, TgTape *tape, int64_t step) {
    for (int64_t i = 0; i < p->n; i++) {
        const TgProbePrompt *q = &p->prompts[i];
        char *text = NULL;
        size_t len = 0;
        TgStatus s = tg_run_continue_greedily(run, tape, p->ids + q->first_id, q->n_ids, p->tokens, &text, &len);
        if (s != TG_OK) s = tg_fail_context(s, "continuing the probe prompt of line %d", q->line);
        if (s == TG_OK) tg_run_log_probe(run, step, q->text, q->len, text, len);
        free(text);
        TG_TRY(s);
    }
    return TG_OK;
}

void tg_probe_prompts_free(TgProbePrompts *p) {
    free(p->file);
    free(p->prompts);
    free(p->ids);
    memset(p, 0, sizeof *p);
}
