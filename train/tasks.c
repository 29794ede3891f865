/* Task files scored with a model (tasks.h). */
#include "train/tasks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/hash.h"
#include "lib/memory.h"
#include "tapegrad/tape.h"

const char *tg_task_scoring_name(TgTaskScoring scoring) { return scoring == TG_TASK_SUMMED ? "acc" : "acc_norm"; }

void tg_wilson_interval(int64_t k, int64_t n, double z, double *lo, double *hi) {
    if (n <= 0) {
        *lo = *hi = NAN;
        return;
    }
    double nn = (double)n, p = (double)k / nn, z2 = z * z;
    double denominator = 1.0 + z2 / nn;
    double centre = (p + z2 / (2.0 * nn)) / denominator;
    double half = z / denominator * sqrt(p * (1.0 - p) / nn + z2 / (4.0 * nn * nn));
    /* the interval holds p within [0, 1], but for rounding (at k = 0 and k = n) */
    *lo = fmax(0.0, fmin(p, centre - half)), *hi = fmin(1.0, fmax(p, centre + half));
}

/* log softmax(row)[target] in double: row[target] - max - log(sum exp(row - max)). */
static double log_prob(const float *row, int64_t vocab, int32_t target) {
    double max = row[0];
    for (int64_t v = 1; v < vocab; v++)
        if (row[v] > max) max = row[v];
    double sum = 0.0;
    for (int64_t v = 0; v < vocab; v++) sum += exp((double)row[v] - max);
    return (double)row[target] - max - log(sum);
}

/* Candidates [first, first + rows) in one forward, padded with <eot> to the longest. */
static void score_batch(TgModel *model, TgTape *tape, const TgTaskFile *file, int64_t first, int64_t rows,
                        int32_t *tokens, double *scores) {
    int64_t T = 1, V = model->cfg.vocab;
    for (int64_t r = 0; r < rows; r++)
        if (file->candidates[first + r].len - 1 > T) T = file->candidates[first + r].len - 1;
    for (int64_t r = 0; r < rows; r++) {
        const TgTaskCandidate *c = &file->candidates[first + r];
        for (int64_t t = 0; t < T; t++) tokens[r * T + t] = t < c->len - 1 ? file->ids[c->offset + t] : file->pad_id;
    }
    TgTensor *logits = tg_model_forward(model, tape, &(TgBatch){.tokens = tokens, .batch = rows, .seq = T}, NULL);
    for (int64_t r = 0; r < rows; r++) {
        const TgTaskCandidate *c = &file->candidates[first + r];
        const int32_t *ids = file->ids + c->offset;
        double ll = 0.0;
        for (int64_t t = c->scored_from; t < c->len; t++) ll += log_prob(logits->data + (r * T + t - 1) * V, V, ids[t]);
        scores[first + r] = ll;
    }
    tg_tape_reset(tape);
}

bool tg_task_score_candidates(TgModel *model, TgTape *tape, const TgTaskFile *file, double *scores,
                              const volatile sig_atomic_t *stop) {
    int32_t longest = 2;
    for (int64_t c = 0; c < file->n_candidates; c++)
        if (file->candidates[c].len > longest) longest = file->candidates[c].len;
    int32_t *tokens = tg_malloc((size_t)TG_TASK_BATCH_ROWS * (size_t)longest * sizeof *tokens);
    bool old = tg_tape_set_grad_enabled(tape, false);
    int64_t first = 0;
    while (first < file->n_candidates) {
        int64_t rows =
            file->n_candidates - first < TG_TASK_BATCH_ROWS ? file->n_candidates - first : TG_TASK_BATCH_ROWS;
        score_batch(model, tape, file, first, rows, tokens, scores);
        first += rows;
        if (first < file->n_candidates && stop && *stop) break; /* a million items need not be waited for */
    }
    tg_tape_set_grad_enabled(tape, old);
    free(tokens);
    return first == file->n_candidates;
}

/* Whether candidate `label` of the item's is above every other under the scoring. */
static bool item_right(const TgTaskFile *file, const TgTaskItem *item, const double *scores, TgTaskScoring scoring) {
    const TgTaskCandidate *c = file->candidates + item->first;
    const double *s = scores + item->first;
    double best = scoring == TG_TASK_SUMMED ? s[item->label] : s[item->label] / (double)c[item->label].bytes;
    for (int32_t i = 0; i < item->count; i++) {
        double x = scoring == TG_TASK_SUMMED ? s[i] : s[i] / (double)c[i].bytes;
        if (i != item->label && !(best > x)) return false;
    }
    return true;
}

void tg_task_result_of(const TgTaskFile *file, const double *scores, TgTaskResult *out) {
    memset(out, 0, sizeof *out);
    out->count = file->n_items;
    for (int64_t i = 0; i < file->n_items; i++)
        for (int k = 0; k < TG_TASK_SCORING_COUNT; k++)
            out->correct[k] += item_right(file, &file->items[i], scores, (TgTaskScoring)k);
    for (int k = 0; k < TG_TASK_SCORING_COUNT; k++) {
        out->acc[k] = out->count ? (double)out->correct[k] / (double)out->count : NAN;
        tg_wilson_interval(out->correct[k], out->count, TG_TASK_Z95, &out->lo[k], &out->hi[k]);
    }
}

void tg_task_result_format(const TgTaskFile *file, const TgTaskResult *r, char *buf, size_t cap) {
    snprintf(buf, cap, "%s, %lld items: acc %.4f [%.4f, %.4f], acc_norm %.4f [%.4f, %.4f] (95%% Wilson interval)",
             tg_task_format_name(file->format), (long long)r->count, r->acc[TG_TASK_SUMMED], r->lo[TG_TASK_SUMMED],
             r->hi[TG_TASK_SUMMED], r->acc[TG_TASK_NORMALISED], r->lo[TG_TASK_NORMALISED], r->hi[TG_TASK_NORMALISED]);
}

TgTaskEncoding tg_task_encoding_of(const TgRun *run) {
    return (TgTaskEncoding){.tok = &run->tok,
                            .max_tokens = run->model.cfg.seq_len + 1,
                            .rendering = tg_train_task_chat(run->task) ? TG_TASK_CHATML : TG_TASK_PLAIN_TEXT};
}

/* The files read, their names distinct. */
static TgStatus read_files(TgTaskSuite *s, const char *const *paths, int n, const TgTaskEncoding *enc) {
    for (int i = 0; i < n; i++) {
        TG_TRY(tg_task_file_read(paths[i], enc, &s->files[i]));
        s->n = i + 1;
        for (int j = 0; j < i; j++)
            if (strcmp(s->files[i].name, s->files[j].name) == 0)
                return tg_fail(TG_ERR_ARG, "%s and %s are both the task '%s' (a task is named by its file): rename one",
                               paths[j], paths[i], s->files[i].name);
    }
    return TG_OK;
}

TgStatus tg_task_suite_open(TgTaskSuite *s, const char *const *paths, int n, const TgTaskEncoding *enc) {
    memset(s, 0, sizeof *s);
    if (n == 0) return TG_OK;
    s->files = tg_calloc((size_t)n, sizeof *s->files);
    TgStatus st = read_files(s, paths, n, enc);
    if (st != TG_OK) {
        tg_task_suite_free(s);
        return st;
    }
    int64_t most = 1;
    for (int i = 0; i < n; i++)
        if (s->files[i].n_candidates > most) most = s->files[i].n_candidates;
    /* as large as the largest file's candidates: its lack is said, as the files' is */
    if (tg_memory_grow((void **)&s->scores, (size_t)most * sizeof *s->scores, "the scores of `eval_tasks`") != TG_OK) {
        tg_task_suite_free(s);
        return TG_ERR_NOMEM;
    }
    s->latest = tg_calloc((size_t)n, sizeof *s->latest);
    s->names = tg_calloc((size_t)(TG_TASK_METRICS * n), sizeof *s->names);
    s->metrics = tg_calloc((size_t)(TG_TASK_METRICS * n), sizeof *s->metrics);
    for (int i = 0; i < n; i++) {
        static const char *const kinds[TG_TASK_METRICS] = {"acc", "acc_norm", "items", "chance"};
        for (int k = 0; k < TG_TASK_METRICS; k++) {
            snprintf(s->names[TG_TASK_METRICS * i + k], sizeof s->names[0], "task/%s/%s", s->files[i].name, kinds[k]);
            s->metrics[TG_TASK_METRICS * i + k] = (TgRunMetric){s->names[TG_TASK_METRICS * i + k], NAN};
        }
    }
    return TG_OK;
}

bool tg_task_suite_score(TgTaskSuite *s, TgModel *model, TgTape *tape, const volatile sig_atomic_t *stop) {
    for (int i = 0; i < s->n; i++) {
        if (!tg_task_score_candidates(model, tape, &s->files[i], s->scores, stop)) {
            for (int j = 0; j < s->n; j++) {
                memset(&s->latest[j], 0, sizeof s->latest[j]);
                for (int k = 0; k < TG_TASK_METRICS; k++) s->metrics[TG_TASK_METRICS * j + k].value = NAN;
            }
            return false;
        }
        tg_task_result_of(&s->files[i], s->scores, &s->latest[i]);
        TgRunMetric *m = &s->metrics[TG_TASK_METRICS * i];
        for (int k = 0; k < TG_TASK_SCORING_COUNT; k++) m[k].value = s->latest[i].acc[k];
        m[2].value = (double)s->latest[i].count, m[3].value = tg_task_chance(&s->files[i]);
    }
    return true;
}

double tg_task_chance(const TgTaskFile *file) {
    double sum = 0; /* a guess among an item's candidates is right once in count */
    for (int64_t j = 0; j < file->n_items; j++) sum += 1.0 / file->items[j].count;
    return file->n_items ? sum / (double)file->n_items : NAN;
}

void tg_task_suite_add_metrics(const TgTaskSuite *s, TgRunMetrics *line) {
    line->extra = s->metrics;
    line->n_extra = TG_TASK_METRICS * s->n;
}

void tg_task_suite_report(const TgTaskSuite *s, const TgMessageSink *messages) {
    for (int i = 0; i < s->n; i++) {
        if (s->latest[i].count == 0) continue;
        char text[256];
        tg_task_result_format(&s->files[i], &s->latest[i], text, sizeof text);
        tg_message_emit(messages, TG_MESSAGE_INFO, "task %s: %s", s->files[i].name, text);
    }
}

void tg_task_suite_free(TgTaskSuite *s) {
    for (int i = 0; i < s->n; i++) tg_task_file_free(&s->files[i]);
    free(s->files), free(s->latest), free(s->scores), free(s->names), free(s->metrics);
    memset(s, 0, sizeof *s);
}

/* ---------------------------------------------------------------- task metrics */

/* TG_ERR_ARG for a task none of the n names is, listing them. */
static TgStatus unknown_task(const char *name, const char (*names)[TG_TASK_NAME_CAP], int n) {
    char list[512] = "";
    size_t used = 0;
    for (int i = 0; i < n && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", names[i]);
    return tg_fail(TG_ERR_ARG, "task:%s: no `eval_tasks` file is the task '%s'%s%s", name, name,
                   n ? "; the tasks are " : "", n ? list : " (give the file with `eval_tasks`)");
}

TgStatus tg_task_check_name(const char *name, const char *const *paths, int n) {
    char(*names)[TG_TASK_NAME_CAP] = tg_calloc((size_t)(n > 0 ? n : 1), sizeof *names);
    TgStatus s = TG_OK;
    bool found = false;
    for (int i = 0; s == TG_OK && i < n; i++) {
        s = tg_task_file_name(paths[i], names[i], sizeof names[i]);
        found |= s == TG_OK && strcmp(names[i], name) == 0;
    }
    if (s == TG_OK && !found) s = unknown_task(name, (const char(*)[TG_TASK_NAME_CAP])names, n);
    free(names);
    return s;
}

uint64_t tg_task_suite_fingerprint(const TgTaskSuite *s, const char *name) {
    for (int i = 0; i < s->n; i++) {
        const TgTaskFile *f = &s->files[i];
        if (strcmp(f->name, name) != 0) continue;
        TgHash64 h;
        tg_hash64_init(&h, 0x7461736bu /* "task" */);
        tg_hash64_update(&h, f->ids, (size_t)f->n_ids * sizeof *f->ids);
        for (int64_t c = 0; c < f->n_candidates; c++) {
            const TgTaskCandidate *k = &f->candidates[c];
            int64_t fields[4] = {k->offset, k->len, k->scored_from, k->bytes};
            tg_hash64_update(&h, fields, sizeof fields);
        }
        for (int64_t t = 0; t < f->n_items; t++) {
            int64_t fields[3] = {f->items[t].first, f->items[t].count, f->items[t].label};
            tg_hash64_update(&h, fields, sizeof fields);
        }
        uint64_t v = tg_hash64_final(&h);
        return v ? v : 1;
    }
    return 0;
}

TgStatus tg_task_suite_accuracy(const TgTaskSuite *s, const char *name, TgTaskScoring scoring, double *value) {
    for (int i = 0; i < s->n; i++) {
        if (strcmp(s->files[i].name, name) != 0) continue;
        *value = s->latest[i].count ? s->latest[i].acc[scoring] : NAN;
        return TG_OK;
    }
    char(*names)[TG_TASK_NAME_CAP] = tg_calloc((size_t)(s->n > 0 ? s->n : 1), sizeof *names);
    for (int i = 0; i < s->n; i++) memcpy(names[i], s->files[i].name, sizeof names[i]);
    TgStatus st = unknown_task(name, (const char(*)[TG_TASK_NAME_CAP])names, s->n);
    free(names);
    return st;
}
