#include "inspect/run_history.h"

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_folder.h"
#include "inspect/inspect.h"
#include "lib/checked.h"
#include "support/file_read.h"
#include "support/json_reader.h"
#include "support/path.h"
#include "run/run_folder.h"
#include "train/tasks.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- reading */

/* Each line of metrics.jsonl and grads.jsonl is checked as strict JSON (support/json_reader.h) and
 * read in place; a member the reader takes must appear once, since two readers could disagree on
 * which of two counts. */

/* "PATH line N", what the messages of a line start with */
static void line_name(char *out, size_t cap, const char *path, int64_t line_no) {
    snprintf(out, cap, "%s line %lld", path, (long long)line_no);
}

/* The line's value, checked; *obj at it. */
static TgStatus line_value(const char *line, size_t len, const char *path, int64_t line_no, TgJsonCursor *obj) {
    char name[TG_PATH_CAP + 32];
    line_name(name, sizeof name, path, line_no);
    TG_TRY(tg_json_check(line, len, name));
    *obj = tg_json_cursor(line, len, 0);
    return TG_OK;
}

/* The member `key` of the object at obj: true and *value at it, false when there is none or obj
 * is not an object; refused when the key is given twice. */
static TgStatus member(const TgJsonCursor *obj, const char *key, TgJsonCursor *value, bool *found, const char *path,
                       int64_t line_no) {
    size_t n = tg_json_find(obj, key, value);
    *found = n == 1;
    if (n > 1)
        return tg_fail(TG_ERR_FORMAT, "%s line %lld: \"%s\" is given twice", path, (long long)line_no, key);
    return TG_OK;
}

/* The number `key` of the object at obj into *out: NaN where the line has none (null is how a
 * writer gives a value it did not have). */
static TgStatus number_or_nan(const TgJsonCursor *obj, const char *key, double *out, const char *path, int64_t line_no) {
    TgJsonCursor v;
    bool found;
    TG_TRY(member(obj, key, &v, &found, path, line_no));
    *out = found && tg_json_type(&v) == TG_JSON_NUMBER ? tg_json_read_number(&v) : NAN;
    return TG_OK;
}

/* The "step" of a line: a whole number a run can reach (JSON gives a double; casting inf, NaN or
 * 2^63 straight to int64_t would be undefined). */
static TgStatus read_step(const TgJsonCursor *obj, int64_t *step, const char *path, int64_t line_no) {
    TgJsonCursor v;
    bool found;
    TG_TRY(member(obj, "step", &v, &found, path, line_no));
    if (!found || tg_json_type(&v) != TG_JSON_NUMBER)
        return tg_fail(TG_ERR_FORMAT, "%s line %lld: not a JSON object with a step", path, (long long)line_no);
    double value = tg_json_read_number(&v);
    if (tg_double_to_i64(value, 0, TG_CHECKPOINT_MAX_STEP, step)) return TG_OK;
    return tg_fail(TG_ERR_FORMAT, "%s line %lld: step %g is not a whole number in [0, 2^53]", path, (long long)line_no,
                   value);
}

static TgStatus parse_metric_row(const TgJsonCursor *o, TgMetricRow *row, const char *path, int64_t line_no) {
    static const char *const keys[] = {"loss", "val_loss", "lr", "grad_norm", "val_bpb"};
    double *values[] = {&row->loss, &row->val_loss, &row->lr, &row->grad_norm, &row->val_bpb};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) TG_TRY(number_or_nan(o, keys[i], values[i], path, line_no));
    return read_step(o, &row->step, path, line_no);
}

static void merge_metric(TgMetricRow *into, const TgMetricRow *from) {
    if (isfinite(from->loss)) into->loss = from->loss;
    if (isfinite(from->val_loss)) into->val_loss = from->val_loss;
    if (isfinite(from->lr)) into->lr = from->lr;
    if (isfinite(from->grad_norm)) into->grad_norm = from->grad_norm;
    if (isfinite(from->val_bpb)) into->val_bpb = from->val_bpb;
}

/* The index of the task `name`, added when it is new. */
static TgStatus task_index(TgRunHistory *h, const char *name, size_t len, int *index, const char *path,
                           int64_t line_no) {
    for (int i = 0; i < h->n_tasks; i++)
        if (strlen(h->task_names[i]) == len && memcmp(h->task_names[i], name, len) == 0) {
            *index = i;
            return TG_OK;
        }
    if (h->n_tasks == TG_RUN_HISTORY_MAX_TASKS)
        return tg_fail(TG_ERR_FORMAT, "%s line %lld: a %dth task; a run's metrics name at most %d", path,
                       (long long)line_no, TG_RUN_HISTORY_MAX_TASKS + 1, TG_RUN_HISTORY_MAX_TASKS);
    h->task_names = tg_realloc(h->task_names, (size_t)(h->n_tasks + 1) * sizeof *h->task_names);
    memcpy(h->task_names[h->n_tasks], name, len);
    h->task_names[h->n_tasks][len] = '\0';
    *index = h->n_tasks++;
    return TG_OK;
}

/* The point of `task` at `step`: the one a line of that step made already, else a new one. */
static TgTaskPoint *task_point(TgRunHistory *h, int64_t step, int task) {
    for (int64_t i = h->n_task_points - 1; i >= 0 && h->task_points[i].step == step; i--)
        if (h->task_points[i].task == task) return &h->task_points[i];
    int64_t n = h->n_task_points;
    if (n == 0 || (n >= 16 && (n & (n - 1)) == 0)) /* room for 16, then doubled at each power of two */
        h->task_points = tg_realloc(h->task_points, (size_t)(n < 16 ? 16 : 2 * n) * sizeof *h->task_points);
    h->task_points[n] = (TgTaskPoint){step, task, NAN, NAN, 0, NAN};
    h->n_task_points = n + 1;
    return &h->task_points[n];
}

/* The member `key` ("task/...", len bytes, decoded) of the object at obj, whose value is at c:
 * task/NAME/acc, acc_norm or chance, once, a number in [0, 1] or null; task/NAME/items, a whole
 * number from 1 or null. c moves past the value. */
static TgStatus read_task_member(TgRunHistory *h, const TgJsonCursor *obj, TgJsonCursor *c, const char *key, size_t len,
                                 int64_t step, const char *path, int64_t line_no) {
    const char *name = key + 5, *slash = memchr(name, '/', len - 5);
    size_t name_len = slash ? (size_t)(slash - name) : 0, rest = slash ? len - 5 - name_len - 1 : 0;
    const char *what = slash ? slash + 1 : "";
    bool norm = rest == 8 && memcmp(what, "acc_norm", 8) == 0, items = rest == 5 && memcmp(what, "items", 5) == 0,
         chance = rest == 6 && memcmp(what, "chance", 6) == 0;
    bool valid = slash && !memchr(key, '\0', len) && tg_task_name_valid(name, name_len) &&
                 (norm || items || chance || (rest == 3 && memcmp(what, "acc", 3) == 0));
    if (!valid)
        return tg_fail(TG_ERR_FORMAT, "%s line %lld: \"%.80s\" is none of task/NAME/acc, acc_norm, items and chance", path,
                       (long long)line_no, key);
    TgJsonCursor v;
    bool found;
    TG_TRY(member(obj, key, &v, &found, path, line_no));
    TgJsonType type = tg_json_type(c);
    double x = type == TG_JSON_NUMBER ? tg_json_read_number(c) : NAN;
    if (items && type != TG_JSON_NULL && !(x >= 1 && x <= 9007199254740992.0 && x == floor(x)))
        return tg_fail(TG_ERR_FORMAT, "%s line %lld: \"%s\" must be a count of items from 1, or null", path,
                       (long long)line_no, key);
    if (!items && type != TG_JSON_NULL && !(x >= 0 && x <= 1))
        return tg_fail(TG_ERR_FORMAT, "%s line %lld: \"%s\" must be a share in [0, 1] or null", path,
                       (long long)line_no, key);
    if (type == TG_JSON_NULL) tg_json_skip(c);
    int task = 0;
    TG_TRY(task_index(h, name, name_len, &task, path, line_no));
    TgTaskPoint *p = task_point(h, step, task);
    if (norm)
        p->acc_norm = x;
    else if (items)
        p->items = isfinite(x) ? (int64_t)x : 0;
    else if (chance)
        p->chance = x;
    else
        p->acc = x;
    return TG_OK;
}

/* The task members of a metrics line of `step`; the others are skipped. */
static TgStatus read_task_members(TgRunHistory *h, const TgJsonCursor *obj, int64_t step, const char *path,
                                  int64_t line_no) {
    TgJsonCursor c = *obj;
    tg_json_enter(&c);
    TgJsonString key;
    TgStatus s = TG_OK;
    while (s == TG_OK && tg_json_next_key(&c, &key)) {
        char small[256], *text = key.raw_len < sizeof small ? small : tg_malloc(key.raw_len + 1);
        size_t len = tg_json_decode(key, text);
        text[len] = '\0';
        if (len >= 5 && memcmp(text, "task/", 5) == 0)
            s = read_task_member(h, obj, &c, text, len, step, path, line_no);
        else
            tg_json_skip(&c);
        if (text != small) free(text);
    }
    return s;
}

/* One line of metrics.jsonl into the history. */
static TgStatus add_metric_row(TgRunHistory *h, const TgJsonCursor *o, const char *path, int64_t line_no,
                               int64_t *alloc) {
    TgMetricRow row = {0};
    TG_TRY(parse_metric_row(o, &row, path, line_no));
    /* a resumed run repeats steps after its checkpoint: the newer lines win */
    while (h->n_metrics > 0 && h->metrics[h->n_metrics - 1].step > row.step) h->n_metrics--;
    while (h->n_task_points > 0 && h->task_points[h->n_task_points - 1].step > row.step) h->n_task_points--;
    TG_TRY(read_task_members(h, o, row.step, path, line_no));
    if (h->n_metrics > 0 && h->metrics[h->n_metrics - 1].step == row.step) {
        merge_metric(&h->metrics[h->n_metrics - 1], &row); /* the end-of-run val loss shares the step */
        return TG_OK;
    }
    if (h->n_metrics == *alloc) {
        *alloc = *alloc ? 2 * *alloc : 256;
        h->metrics = tg_realloc(h->metrics, (size_t)*alloc * sizeof *h->metrics);
    }
    h->metrics[h->n_metrics++] = row;
    return TG_OK;
}

/* A line of one of the run's JSONL files into the history; *alloc is the capacity of the list it
 * grows. */
typedef TgStatus (*RowReader)(TgRunHistory *h, const TgJsonCursor *o, const char *path, int64_t line_no, int64_t *alloc);

/* Every line of the JSONL file `path` that is not empty, read strictly, handed to `add`; the first
 * error stops. *f is open and is closed here. */
static TgStatus read_rows(FILE *f, const char *path, TgRunHistory *h, RowReader add) {
    char *line = NULL;
    size_t cap = 0;
    int64_t line_no = 0, alloc = 0;
    ssize_t len;
    TgStatus s = TG_OK;
    while (s == TG_OK && (len = getline(&line, &cap, f)) > 0) {
        line_no++;
        if (line[0] == '\n') continue;
        TgJsonCursor o;
        s = line_value(line, (size_t)len, path, line_no, &o);
        if (s == TG_OK) s = add(h, &o, path, line_no, &alloc);
    }
    free(line);
    fclose(f);
    return s;
}

/* DIR/name, a file the run may not have written (then nothing is read), into the history. */
static TgStatus read_optional_rows(const char *dir, const char *name, TgRunHistory *h, RowReader add) {
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, dir, name));
    FILE *f = tg_file_open_read(path);
    if (!f) return errno == ENOENT ? TG_OK : tg_fail(TG_ERR_IO, "%s: %s", path, tg_file_open_error(errno));
    return read_rows(f, path, h, add);
}

static TgStatus load_metrics(const char *dir, TgRunHistory *h) {
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, dir, "metrics.jsonl"));
    FILE *f = tg_file_open_read(path);
    if (!f)
        return tg_fail(TG_ERR_IO, "%s: %s; is %s a run folder written by `tapegrad train`?", path, tg_file_open_error(errno),
                       dir);
    return read_rows(f, path, h, add_metric_row);
}

static void free_log_row(TgGradLogRow *row) {
    free(row->grad_norm); /* one allocation holds every array of the row */
    memset(row, 0, sizeof *row);
}

/* The string `key` of the object at obj, decoded into out (cut to cap, NUL-terminated); "" when
 * there is none. */
static TgStatus string_member(const TgJsonCursor *obj, const char *key, char *out, size_t cap, const char *path,
                              int64_t line_no) {
    TgJsonCursor v;
    bool found;
    out[0] = '\0';
    TG_TRY(member(obj, key, &v, &found, path, line_no));
    if (!found || tg_json_type(&v) != TG_JSON_STRING) return TG_OK;
    char *text = tg_json_decode_alloc(tg_json_read_string(&v), NULL);
    if (!text) return tg_fail(TG_ERR_NOMEM, "out of memory reading %s line %lld", path, (long long)line_no);
    snprintf(out, cap, "%s", text);
    free(text);
    return TG_OK;
}

/* The first line fixes the parameter names and the layer count. */
static TgStatus read_log_names(TgRunHistory *h, const TgJsonCursor *params, const TgJsonCursor *ffn, const char *path,
                               int64_t line_no) {
    h->param_names = tg_calloc((size_t)h->n_params + 1, sizeof *h->param_names);
    TgJsonCursor p = *params;
    tg_json_enter(&p);
    for (int i = 0; tg_json_next_item(&p); i++) {
        TgJsonCursor name;
        bool found;
        TG_TRY(member(&p, "name", &name, &found, path, line_no));
        char *text = found && tg_json_type(&name) == TG_JSON_STRING ? tg_json_decode_alloc(tg_json_read_string(&name), NULL)
                                                                       : NULL;
        const char *shown = text ? text : "?"; /* a name cut at a NUL inside it, as it was read before */
        size_t len = strlen(shown) + 1;
        h->param_names[i] = tg_malloc(len);
        memcpy(h->param_names[i], shown, len);
        free(text);
        tg_json_skip(&p);
    }
    if (h->n_layers == 0) return TG_OK;
    TgJsonCursor first = *ffn;
    tg_json_enter(&first);
    tg_json_next_item(&first);
    return string_member(&first, "kind", h->ffn_kind, sizeof h->ffn_kind, path, line_no);
}

/* Fills row from one checked line. */
static TgStatus parse_log_row(TgRunHistory *h, const TgJsonCursor *o, TgGradLogRow *row, const char *path,
                              int64_t line_no) {
    TgJsonCursor params, ffn;
    bool has_params, has_ffn;
    TG_TRY(member(o, "params", &params, &has_params, path, line_no));
    TG_TRY(member(o, "ffn", &ffn, &has_ffn, path, line_no));
    if (!has_params || !has_ffn || tg_json_type(&params) != TG_JSON_ARRAY || tg_json_type(&ffn) != TG_JSON_ARRAY)
        return tg_fail(TG_ERR_FORMAT, "%s line %lld: expected step, params and ffn", path, (long long)line_no);
    TG_TRY(read_step(o, &row->step, path, line_no));
    size_t n_params = tg_json_count(&params), n_layers = tg_json_count(&ffn);
    if (n_params > INT_MAX || n_layers > INT_MAX)
        return tg_fail(TG_ERR_FORMAT, "%s line %lld: %zu parameters and %zu layers are more than any model has", path,
                       (long long)line_no, n_params, n_layers);
    if (h->param_names == NULL) {
        h->n_params = (int)n_params;
        h->n_layers = (int)n_layers;
        TG_TRY(read_log_names(h, &params, &ffn, path, line_no));
    } else if ((int)n_params != h->n_params || (int)n_layers != h->n_layers) {
        return tg_fail(TG_ERR_FORMAT, "%s line %lld: %zu parameters and %zu layers, earlier lines had %d and %d", path,
                       (long long)line_no, n_params, n_layers, h->n_params, h->n_layers);
    }
    double *block = tg_malloc((n_params * 3 + n_layers * 7 + 1) * sizeof(double));
    row->grad_norm = block, row->weight_norm = block + n_params, row->update_ratio = block + 2 * n_params;
    double *layer = block + 3 * n_params;
    row->dead_frac = layer, row->zero_frac = layer + n_layers, row->act_mean = layer + 2 * n_layers;
    row->act_std = layer + 3 * n_layers, row->w1_zero_grad_rows = layer + 4 * n_layers;
    row->probe_dead_frac = layer + 5 * n_layers, row->probe_zero_frac = layer + 6 * n_layers;
    static const char *const param_keys[] = {"grad_norm", "weight_norm", "update_ratio"};
    double *param_values[] = {row->grad_norm, row->weight_norm, row->update_ratio};
    TgJsonCursor p = params;
    tg_json_enter(&p);
    for (int i = 0; tg_json_next_item(&p); i++) {
        for (int k = 0; k < 3; k++) TG_TRY(number_or_nan(&p, param_keys[k], &param_values[k][i], path, line_no));
        tg_json_skip(&p);
    }
    static const char *const layer_keys[] = {"dead_frac", "zero_frac", "mean", "std", "w1_zero_grad_rows",
                                             "probe_dead_frac", "probe_zero_frac"};
    double *layer_values[] = {row->dead_frac, row->zero_frac, row->act_mean, row->act_std, row->w1_zero_grad_rows,
                              row->probe_dead_frac, row->probe_zero_frac};
    p = ffn;
    tg_json_enter(&p);
    for (int i = 0; tg_json_next_item(&p); i++) {
        for (int k = 0; k < 7; k++) TG_TRY(number_or_nan(&p, layer_keys[k], &layer_values[k][i], path, line_no));
        tg_json_skip(&p);
    }
    return TG_OK;
}

/* One line of grads.jsonl into the history. */
static TgStatus add_log_row(TgRunHistory *h, const TgJsonCursor *o, const char *path, int64_t line_no, int64_t *alloc) {
    TgGradLogRow row = {0};
    TgStatus s = parse_log_row(h, o, &row, path, line_no);
    if (s != TG_OK) {
        free_log_row(&row);
        return s;
    }
    while (h->n_logs > 0 && h->logs[h->n_logs - 1].step >= row.step) free_log_row(&h->logs[--h->n_logs]);
    if (h->n_logs == *alloc) {
        *alloc = *alloc ? 2 * *alloc : 64;
        h->logs = tg_realloc(h->logs, (size_t)*alloc * sizeof *h->logs);
    }
    h->logs[h->n_logs++] = row;
    return TG_OK;
}

static TgStatus load_grad_log(const char *dir, TgRunHistory *h) {
    TgStatus s = read_optional_rows(dir, "grads.jsonl", h, add_log_row);
    h->has_probe = h->n_logs > 0 && h->n_layers > 0 && isfinite(h->logs[0].probe_dead_frac[0]);
    return s;
}

/* The string `key` of the object at obj, decoded into *out (malloc'ed); refused when there is none. */
static TgStatus string_alloc(const TgJsonCursor *obj, const char *key, char **out, const char *path, int64_t line_no) {
    TgJsonCursor v;
    bool found;
    TG_TRY(member(obj, key, &v, &found, path, line_no));
    if (!found || tg_json_type(&v) != TG_JSON_STRING)
        return tg_fail(TG_ERR_FORMAT, "%s line %lld: expected a step, a prompt and a text", path, (long long)line_no);
    *out = tg_json_decode_alloc(tg_json_read_string(&v), NULL);
    if (!*out) return tg_fail(TG_ERR_NOMEM, "out of memory reading %s line %lld", path, (long long)line_no);
    return TG_OK;
}

static void free_probe_rows(TgRunHistory *h, int64_t keep) {
    for (; h->n_probes > keep; h->n_probes--) {
        free(h->probes[h->n_probes - 1].prompt);
        free(h->probes[h->n_probes - 1].text);
    }
}

/* One checked line of probes.jsonl onto h->probes: a step below the last row's is a resumed
 * run's, which replaces the rows from that step on. */
static TgStatus add_probe_row(TgRunHistory *h, const TgJsonCursor *o, const char *path, int64_t line_no,
                              int64_t *alloc) {
    TgProbeRow row = {0};
    TG_TRY(read_step(o, &row.step, path, line_no));
    int64_t keep = h->n_probes;
    if (keep > 0 && h->probes[keep - 1].step > row.step)
        while (keep > 0 && h->probes[keep - 1].step >= row.step) keep--;
    free_probe_rows(h, keep);
    if (h->n_probes == *alloc) {
        *alloc = *alloc ? 2 * *alloc : 64;
        h->probes = tg_realloc(h->probes, (size_t)*alloc * sizeof *h->probes);
    }
    TgStatus s = string_alloc(o, "prompt", &row.prompt, path, line_no);
    if (s == TG_OK) s = string_alloc(o, "text", &row.text, path, line_no);
    if (s == TG_OK)
        h->probes[h->n_probes++] = row;
    else
        free(row.prompt), free(row.text);
    return s;
}

static TgStatus load_probes(const char *dir, TgRunHistory *h) {
    return read_optional_rows(dir, TG_RUN_PROBES_FILE, h, add_probe_row);
}

TgStatus tg_run_history_load(const char *dir, TgRunHistory *h) {
    memset(h, 0, sizeof *h);
    TgStatus s = load_metrics(dir, h);
    if (s == TG_OK) s = load_grad_log(dir, h);
    if (s == TG_OK) s = load_probes(dir, h);
    if (s != TG_OK) tg_run_history_free(h);
    return s;
}

void tg_run_history_free(TgRunHistory *h) {
    free_probe_rows(h, 0);
    free(h->probes);
    for (int64_t i = 0; i < h->n_logs; i++) free_log_row(&h->logs[i]);
    for (int i = 0; i < h->n_params; i++) free(h->param_names[i]);
    free(h->param_names);
    free(h->logs);
    free(h->metrics);
    free(h->task_names);
    free(h->task_points);
    memset(h, 0, sizeof *h);
}

double tg_run_history_final_val_bpb(const TgRunHistory *h) {
    for (int64_t i = h->n_metrics - 1; i >= 0; i--)
        if (isfinite(h->metrics[i].val_bpb)) return h->metrics[i].val_bpb;
    return NAN;
}

double tg_run_history_final_val_loss(const TgRunHistory *h) {
    for (int64_t i = h->n_metrics - 1; i >= 0; i--)
        if (isfinite(h->metrics[i].val_loss)) return h->metrics[i].val_loss;
    return NAN;
}

double tg_run_history_final_train_loss(const TgRunHistory *h, int64_t n) {
    double sum = 0;
    int64_t count = 0;
    for (int64_t i = h->n_metrics - 1; i >= 0 && count < n; i--)
        if (isfinite(h->metrics[i].loss)) sum += h->metrics[i].loss, count++;
    return count ? sum / (double)count : NAN;
}

double tg_run_history_layer_mean(const TgRunHistory *h, const double *per_layer) {
    double sum = 0;
    for (int l = 0; l < h->n_layers; l++) sum += per_layer[l];
    return h->n_layers ? sum / h->n_layers : NAN;
}

/* ---------------------------------------------------------------- the report of one run */

/* Parameters grouped by role, so a chart has a handful of lines rather than one per tensor. */
static const char *const group_names[] = {"embedding", "attn q", "attn k", "attn v", "attn o",
                                          "mlp gate (w1)", "mlp up (w3)", "mlp down (w2)", "norm gains"};
enum { N_GROUPS = sizeof group_names / sizeof group_names[0] };

static int param_group(const char *name) {
    static const char *const keys[] = {"embed_tokens", "q_proj", "k_proj", "v_proj", "o_proj",
                                       "gate_proj", "up_proj", "down_proj"};
    for (int g = 0; g < 8; g++)
        if (strstr(name, keys[g])) return g;
    return 8;
}

static void add_group_charts(TgReport *r, const TgRunHistory *h) {
    TgReportChart *norms = tg_report_chart(r, "Gradient norm by parameter group (before clipping)", "step", "||g||", true);
    TgReportChart *ratios = tg_report_chart(r, "Update / weight ratio by parameter group", "step", "||dw|| / ||w||", true);
    int *group = tg_malloc((size_t)(h->n_params + 1) * sizeof *group);
    bool present[N_GROUPS] = {false};
    for (int i = 0; i < h->n_params; i++) present[group[i] = param_group(h->param_names[i])] = true;
    for (int g = 0; g < N_GROUPS; g++) {
        if (!present[g]) continue; /* a ReLU FFN has no up projection */
        TgReportSeries *sn = tg_report_series(norms, group_names[g], g, false);
        TgReportSeries *sr = tg_report_series(ratios, group_names[g], g, false);
        for (int64_t k = 0; k < h->n_logs; k++) {
            const TgGradLogRow *row = &h->logs[k];
            /* a group's norm is the norm of its tensors taken together */
            double g2 = 0, w2 = 0, d2 = 0;
            for (int i = 0; i < h->n_params; i++) {
                if (group[i] != g) continue;
                g2 += row->grad_norm[i] * row->grad_norm[i];
                w2 += row->weight_norm[i] * row->weight_norm[i];
                double d = row->update_ratio[i] * row->weight_norm[i];
                d2 += d * d;
            }
            tg_report_point(sn, (double)row->step, sqrt(g2));
            tg_report_point(sr, (double)row->step, w2 > 0 ? sqrt(d2 / w2) : NAN);
        }
    }
    free(group);
}

const double *tg_grad_log_layer_values(const TgGradLogRow *row, TgLayerStat stat) {
    switch (stat) {
    case TG_LAYER_DEAD_FRAC: return row->dead_frac;
    case TG_LAYER_ZERO_FRAC: return row->zero_frac;
    case TG_LAYER_ACT_MEAN: return row->act_mean;
    case TG_LAYER_ACT_STD: return row->act_std;
    case TG_LAYER_W1_ZERO_GRAD_ROWS: return row->w1_zero_grad_rows;
    case TG_LAYER_PROBE_DEAD_FRAC: return row->probe_dead_frac;
    case TG_LAYER_PROBE_ZERO_FRAC: return row->probe_zero_frac;
    }
    return row->dead_frac;
}

static void add_layer_chart(TgReport *r, const TgRunHistory *h, const char *title, const char *y_label, TgLayerStat stat) {
    TgReportChart *c = tg_report_chart(r, title, "step", y_label, false);
    for (int l = 0; l < h->n_layers; l++) {
        char name[32];
        snprintf(name, sizeof name, "layer %d", l);
        TgReportSeries *s = tg_report_series(c, name, l, false);
        for (int64_t k = 0; k < h->n_logs; k++) {
            tg_report_point(s, (double)h->logs[k].step, tg_grad_log_layer_values(&h->logs[k], stat)[l]);
        }
    }
}

/* The 95% Wilson interval of an accuracy over `items` items (train/tasks.h); NaN without items. */
static void accuracy_interval(double acc, int64_t items, double *lo, double *hi) {
    *lo = *hi = NAN;
    if (items > 0 && isfinite(acc)) tg_wilson_interval((int64_t)llround(acc * (double)items), items, TG_TASK_Z95, lo, hi);
}

/* A chart of every task's two accuracies, the summed one over the band of its 95% interval, with
 * the line of chance (what guessing scores: an accuracy near it is no skill, whatever its wiggles);
 * and a table of the last evaluation's. */
static void add_task_charts(TgReport *r, const TgRunHistory *h) {
    if (h->n_tasks == 0) return;
    TgReportChart *c = tg_report_chart(r, "Task accuracy (band: 95% interval of acc; grey: chance)", "step", "accuracy",
                                       false);
    static const char *const header[] = {"task", "step", "items", "acc", "acc 95% interval", "acc_norm", "chance"};
    TgReportTable *t = tg_report_table(r, "Task accuracy at the last evaluation", 7, header);
    for (int k = 0; k < h->n_tasks; k++) {
        char name[TG_TASK_NAME_CAP + 16];
        snprintf(name, sizeof name, "%s acc", h->task_names[k]);
        TgReportSeries *acc = tg_report_series(c, name, k, false);
        snprintf(name, sizeof name, "%s acc_norm", h->task_names[k]);
        TgReportSeries *norm = tg_report_series(c, name, k, true);
        const TgTaskPoint *first = NULL, *last = NULL;
        for (int64_t i = 0; i < h->n_task_points; i++) {
            const TgTaskPoint *p = &h->task_points[i];
            if (p->task != k) continue;
            double lo, hi;
            accuracy_interval(p->acc, p->items, &lo, &hi);
            tg_report_point_range(acc, (double)p->step, p->acc, lo, hi);
            tg_report_point(norm, (double)p->step, p->acc_norm);
            if (!first) first = p;
            last = p;
        }
        if (!last) continue;
        if (isfinite(last->chance)) {
            snprintf(name, sizeof name, "%s chance", h->task_names[k]);
            TgReportSeries *chance = tg_report_series(c, name, 7 /* grey */, true);
            tg_report_point(chance, (double)first->step, last->chance);
            tg_report_point(chance, (double)last->step, last->chance);
        }
        double lo, hi;
        accuracy_interval(last->acc, last->items, &lo, &hi);
        tg_report_cell(t, "%s", h->task_names[k]);
        tg_report_cell(t, "%lld", (long long)last->step);
        if (last->items > 0) tg_report_cell(t, "%lld", (long long)last->items);
        else tg_report_cell(t, "-");
        tg_report_cell(t, "%.4f", last->acc);
        if (isfinite(lo)) tg_report_cell(t, "%.4f - %.4f", lo, hi);
        else tg_report_cell(t, "-");
        tg_report_cell(t, "%.4f", last->acc_norm);
        if (isfinite(last->chance)) tg_report_cell(t, "%.4f", last->chance);
        else tg_report_cell(t, "-");
    }
}

void tg_report_add_run(TgReport *r, const TgRunHistory *h) {
    TgReportChart *loss = tg_report_chart(r, "Loss", "step", "cross-entropy", false);
    TgReportSeries *train = tg_report_series(loss, "train loss", 0, false);
    TgReportSeries *val = tg_report_series(loss, "val loss", 1, false);
    TgReportChart *bpb_chart = tg_report_chart(r, "Val loss in bits per byte of text", "step", "bits per byte", false);
    TgReportSeries *bpb = tg_report_series(bpb_chart, "val bits per byte", 1, false);
    TgReportChart *lr_chart = tg_report_chart(r, "Learning rate", "step", "lr", false);
    TgReportSeries *lr = tg_report_series(lr_chart, "lr", 2, false);
    TgReportChart *gn_chart = tg_report_chart(r, "Global gradient norm (before clipping)", "step", "||g||", true);
    TgReportSeries *gn = tg_report_series(gn_chart, "grad norm", 4, false);
    for (int64_t i = 0; i < h->n_metrics; i++) {
        const TgMetricRow *m = &h->metrics[i];
        tg_report_point(train, (double)m->step, m->loss);
        tg_report_point(val, (double)m->step, m->val_loss);
        tg_report_point(bpb, (double)m->step, m->val_bpb);
        tg_report_point(lr, (double)m->step, m->lr);
        tg_report_point(gn, (double)m->step, m->grad_norm);
    }
    add_task_charts(r, h);
    if (h->n_logs == 0) {
        tg_report_text(r, "This run has no grads.jsonl: train with `log_grads` N to see gradient and FFN activation "
                       "statistics here.");
        return;
    }
    add_group_charts(r, h);
    add_layer_chart(r, h, "FFN dead units (zero for every token of the logged batch)", "fraction of units",
                    TG_LAYER_DEAD_FRAC);
    if (h->has_probe)
        add_layer_chart(r, h, "FFN dead units on the probe set (fixed held-out batches)", "fraction of units",
                        TG_LAYER_PROBE_DEAD_FRAC);
    add_layer_chart(r, h, "FFN hidden activations that are exactly zero", "fraction of activations",
                    TG_LAYER_ZERO_FRAC);
    add_layer_chart(r, h, "FFN hidden activation std", "std", TG_LAYER_ACT_STD);
    add_layer_chart(r, h, "w1 rows whose gradient is all zero", "fraction of rows",
                    TG_LAYER_W1_ZERO_GRAD_ROWS);
    const TgGradLogRow *last = &h->logs[h->n_logs - 1];
    char caption[96];
    snprintf(caption, sizeof caption, "FFN hidden activations at step %lld (%s)", (long long)last->step,
             h->ffn_kind[0] ? h->ffn_kind : "?");
    static const char *const header[] = {"layer", "dead units", "exact zeros", "mean", "std", "w1 zero-grad rows"};
    TgReportTable *t = tg_report_table(r, caption, 6, header);
    for (int l = 0; l < h->n_layers; l++) {
        tg_report_cell(t, "%d", l);
        tg_report_cell(t, "%.4f", last->dead_frac[l]);
        tg_report_cell(t, "%.4f", last->zero_frac[l]);
        tg_report_cell(t, "%.4g", last->act_mean[l]);
        tg_report_cell(t, "%.4g", last->act_std[l]);
        tg_report_cell(t, "%.4f", last->w1_zero_grad_rows[l]);
    }
}

/* The best checkpoint DIR/best names (--keep-best), as a row of the facts: its lines joined. */
static void add_best_fact(TgReportTable *t, const char *dir) {
    char path[TG_PATH_CAP], *text = NULL;
    size_t size;
    if (tg_path_join(path, sizeof path, dir, TG_CHECKPOINT_BEST_FILE) != TG_OK ||
        tg_file_read_all(path, 4096, &text, &size) != TG_OK) {
        tg_error_clear();
        return;
    }
    for (size_t i = 0; i < size; i++)
        if (text[i] == '\n' || text[i] == '\0') text[i] = i + 1 < size ? ' ' : '\0';
    tg_report_cell(t, "best checkpoint (DIR/best)");
    tg_report_cell(t, "%s", text);
    free(text);
}

/* The facts of a run as a two-column table; the model config comes from its latest checkpoint. */
static void add_run_facts(TgReport *r, const char *dir, const TgRunHistory *h) {
    static const char *const header[] = {"", "value"};
    TgReportTable *t = tg_report_table(r, "Run", 2, header);
    tg_report_cell(t, "folder");
    tg_report_cell(t, "%s", dir);
    char ckpt[TG_PATH_CAP];
    TgModelConfig c;
    uint64_t fingerprint;
    if (tg_checkpoint_resolve(dir, ckpt, sizeof ckpt) == TG_OK && tg_checkpoint_read_config(ckpt, &c, &fingerprint) == TG_OK) {
        tg_report_cell(t, "model");
        tg_report_cell(t, "dim %lld, %lld layers, %lld heads (%lld kv), vocab %lld, context %lld", (long long)c.dim,
                    (long long)c.n_layers, (long long)c.n_heads, (long long)c.n_kv_heads, (long long)c.vocab,
                    (long long)c.seq_len);
        tg_report_cell(t, "FFN");
        tg_report_cell(t, "%s, hidden %lld", tg_ffn_kind_name(c.ffn), (long long)c.hidden);
        tg_report_cell(t, "parameters");
        tg_report_cell(t, "%lld (FFN %lld)", (long long)tg_model_config_param_count(&c),
                    (long long)tg_model_config_ffn_param_count(&c));
    }
    tg_error_clear();
    tg_report_cell(t, "steps logged");
    tg_report_cell(t, "%lld", (long long)(h->n_metrics ? h->metrics[h->n_metrics - 1].step : 0));
    tg_report_cell(t, "final val loss");
    tg_report_cell(t, "%.4f", tg_run_history_final_val_loss(h));
    tg_report_cell(t, "final val bits per byte");
    tg_report_cell(t, "%.4f", tg_run_history_final_val_bpb(h));
    tg_report_cell(t, "train loss, mean of the last 10 steps");
    tg_report_cell(t, "%.4f", tg_run_history_final_train_loss(h, 10));
    add_best_fact(t, dir);
}

/* A table per probe prompt (in the order of their first lines): its continuation at each step. */
static void add_probe_tables(TgReport *r, const TgRunHistory *h) {
    if (h->n_probes == 0) return;
    tg_report_heading(r, "Probe prompts");
    tg_report_text(r, "The greedy continuation of each line of `probe_prompts` at every evaluation (probes.jsonl).");
    static const char *const header[] = {"step", "continuation"};
    for (int64_t i = 0; i < h->n_probes; i++) {
        bool first = true; /* the prompt's first row: it gets the table */
        for (int64_t j = 0; j < i && first; j++) first = strcmp(h->probes[j].prompt, h->probes[i].prompt) != 0;
        if (!first) continue;
        char caption[160];
        snprintf(caption, sizeof caption, "%.120s%s", h->probes[i].prompt,
                 strlen(h->probes[i].prompt) > 120 ? "..." : "");
        TgReportTable *t = tg_report_table(r, caption, 2, header);
        for (int64_t j = i; j < h->n_probes; j++) {
            if (strcmp(h->probes[j].prompt, h->probes[i].prompt) != 0) continue;
            tg_report_cell(t, "%lld", (long long)h->probes[j].step);
            tg_report_cell(t, "%s", h->probes[j].text);
        }
    }
}

TgStatus tg_run_report_write(const char *dir, const TgRunHistory *h, const char *html_path, const char *jsonl_path) {
    char title[TG_PATH_CAP + 32];
    snprintf(title, sizeof title, "tapegrad run %s", dir);
    TgReport *r = tg_report_new(title);
    add_run_facts(r, dir, h);
    tg_report_add_run(r, h);
    add_probe_tables(r, h);
    TgStatus s = tg_report_write_html(r, html_path);
    if (s == TG_OK) s = tg_report_write_series_jsonl(r, jsonl_path);
    tg_report_free(r);
    return s;
}
