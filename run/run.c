/* Run folders: creating one (data preparation, model init), continuing one, reading one. */
#include "run/run.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data/chat_format.h"
#include "data/corpus.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "tokenizer/tokenizer_hf.h"
#include "support/file_read.h"
#include "support/atomic_file.h"
#include "support/file_read.h"
#include "lib/gemm_plan.h"
#include "support/json_write.h"
#include "data/tokfile.h"
#include "model/weights_file.h"
#include "run/memory_plan.h"
#include "checkpoint/adapter.h"
#include "run/run_internal.h"
#include "tapegrad/sample.h"
#include "support/path.h"

/* ---------------------------------------------------------------- identity of a run */

/* What must not change when a run continues: the TG_TRAIN_OPT_IDENTITY options, in DIR/run.txt. */
TgStatus tg_run_identity_write(const char *dir, const TgRunSpec *id) {
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, dir, TG_RUN_IDENTITY_FILE));
    return tg_run_spec_write(path, id);
}

TgStatus tg_run_identity_read(const char *dir, TgRunSpec *id, TgOptStrings *strings) {
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, dir, TG_RUN_IDENTITY_FILE));
    TgStatus s = tg_run_spec_read(path, id, strings);
    /* a bad value in the file is the file's fault, not a flag's: exit 1, not 2 */
    if (s != TG_OK) return tg_fail(s == TG_ERR_IO ? s : TG_ERR_FORMAT, "%s", tg_error_message());
    if (id->seed < 0 || id->tokenizer.source == TG_TOKENIZER_FROM_PRESET)
        return tg_fail(TG_ERR_FORMAT, "%s: incomplete run description (seed or tokenizer missing)", path);
    return TG_OK;
}

/* ---------------------------------------------------------------- model config from flags */

TgStatus tg_run_resolve_config(const TgRunSpec *spec, int64_t vocab, TgModelConfig *out) {
    TgModelConfig c = tg_model_preset_config(spec->preset);
    const TgModelConfig *m = &spec->model;
    bool dim_changed = m->dim > 0 && m->dim != c.dim;
    bool rule_changed = spec->ffn_hidden_rule != tg_model_preset_hidden_rule(spec->preset);
    if (m->dim > 0) c.dim = m->dim;
    if (m->n_layers > 0) c.n_layers = m->n_layers;
    if (m->n_heads > 0) c.n_heads = m->n_heads;
    if (m->n_kv_heads > 0) c.n_kv_heads = m->n_kv_heads;
    else if (m->n_heads > 0 && c.n_heads % c.n_kv_heads != 0) c.n_kv_heads = c.n_heads;
    if (m->seq_len > 0) c.seq_len = m->seq_len;
    if (m->rope_theta > 0) c.rope_theta = m->rope_theta;
    if (m->qk_norm) c.qk_norm = true;
    if (m->norm_eps > 0) c.norm_eps = m->norm_eps;
    c.ffn = spec->ffn;
    if (m->hidden > 0) c.hidden = m->hidden;
    else if (c.ffn != TG_FFN_SWIGLU || dim_changed || rule_changed)
        c.hidden = tg_model_ffn_hidden_by(c.ffn, spec->ffn_hidden_rule, c.dim);
    c.vocab = vocab;
    *out = c;
    return tg_model_config_validate(&c);
}

/* A run killed after its last checkpoint logged steps the resume will train again: drop them,
 * so metrics.jsonl and probes.jsonl hold every step once. */
static TgStatus drop_lines_after(const char *path, int64_t step, const TgMessageSink *messages) {
    FILE *in = tg_file_open_read(path);
    if (!in) return errno == ENOENT ? TG_OK : tg_fail(TG_ERR_IO, "cannot read %s: %s", path, tg_file_open_error(errno));
    TgAtomicFile af;
    TgStatus s = tg_atomic_file_open(&af, path);
    if (s != TG_OK) {
        fclose(in);
        return s;
    }
    FILE *out = tg_atomic_file_stream(&af);
    int64_t dropped = 0;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, in) >= 0) {
        const char *p = strstr(line, "\"step\":");
        if (p && strtoll(p + 7, NULL, 10) > step) dropped++;
        else fputs(line, out);
    }
    free(line);
    fclose(in);
    if (dropped == 0) {
        tg_atomic_file_abandon(&af);
        return TG_OK;
    }
    TG_TRY(tg_atomic_file_commit(&af));
    tg_message_emit(messages, TG_MESSAGE_NOTE, "dropped %lld lines of %s logged after step %lld, the checkpoint resumed from",
                 (long long)dropped, path, (long long)step);
    return TG_OK;
}

static TgStatus open_metrics(TgRun *run) {
    char path[TG_PATH_CAP], probes[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, run->dir, TG_RUN_METRICS_FILE));
    TG_TRY(tg_path_join(probes, sizeof probes, run->dir, TG_RUN_PROBES_FILE));
    if (run->resumed) TG_TRY(drop_lines_after(path, run->state.step, &run->messages));
    if (run->resumed) TG_TRY(drop_lines_after(probes, run->state.step, &run->messages));
    return tg_append_file_open(&run->metrics, path);
}

void tg_run_clear(TgRun *run) {
    memset(run, 0, sizeof *run);
    tg_split_init(&run->train);
    tg_split_init(&run->val);
}

/* The model of the flags and the tokenizer: its weights from --init-from (checked against the
 * tokenizer, every shape, every value) or initialised from the seed. */
TgStatus tg_run_build_new_model(TgRun *run, const TgRunSpec *spec, uint64_t seed) {
    TgModelConfig cfg;
    TG_TRY(tg_run_resolve_config(spec, run->tok.vocab_size, &cfg));
    tg_model_build(&run->model, &cfg);
    run->model_built = true;
    if (spec->init_from) {
        TG_TRY(tg_model_import_safetensors(&run->model, spec->init_from, &run->tok, &run->messages));
        run->initialized_from_file = true;
    } else {
        tg_model_init_weights(&run->model, seed);
    }
    return TG_OK;
}

/* The new run's temporary folder, locked (run_folder.h). */
TgStatus tg_run_begin_new_folder(TgRun *run) {
    TG_TRY(tg_run_folder_begin(&run->folder));
    snprintf(run->dir, sizeof run->dir, "%s", run->folder.temp);
    return tg_folder_lock_acquire(&run->lock, run->dir, TG_RUN_LOCK_FILE);
}

/* ---------------------------------------------------------------- a new run */

/* The folder of a new run given no --out: checkpoints/<kind>-<local time>. */
void tg_run_generated_folder(char *out, size_t cap, const char *kind) {
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    snprintf(out, cap, "checkpoints/%s-%s", kind, stamp);
}

TgStatus tg_run_start(TgRun *run) {
    if (run->resumed) tg_checkpoint_folder_remove_stale(run->dir);
    return open_metrics(run);
}

TgStatus tg_run_commit(TgRun *run) {
    if (!run->folder.temp[0]) return TG_OK;
    char asked[TG_PATH_CAP];
    memcpy(asked, run->folder.path, sizeof asked);
    TG_TRY(tg_run_folder_commit(&run->folder));
    /* the logs open in the temporary folder are now in its place */
    char path[TG_PATH_CAP];
    if (tg_path_join(path, sizeof path, run->folder.path, TG_RUN_METRICS_FILE) == TG_OK)
        tg_append_file_moved(&run->metrics, path);
    if (tg_path_join(path, sizeof path, run->folder.path, TG_RUN_PROBES_FILE) == TG_OK)
        tg_append_file_moved(&run->probes, path);
    if (strcmp(asked, run->folder.path) != 0)
        tg_message_emit(&run->messages, TG_MESSAGE_NOTE, "%s was taken by another run meanwhile; this run is in %s", asked,
                     run->folder.path);
    snprintf(run->dir, sizeof run->dir, "%s", run->folder.path);
    return TG_OK;
}

void tg_run_discard(TgRun *run) {
    tg_append_file_close(&run->metrics);
    tg_append_file_close(&run->probes);
    tg_run_folder_discard(&run->folder);
}

void tg_run_close(TgRun *run) {
    if (tg_append_file_close(&run->metrics) != 0)
        tg_message_emit(&run->messages, TG_MESSAGE_WARNING, "%s/%s lacks its last lines: %s", run->dir, TG_RUN_METRICS_FILE,
                     strerror(run->metrics_error ? run->metrics_error : ENOSPC));
    if (tg_append_file_close(&run->probes) != 0)
        tg_message_emit(&run->messages, TG_MESSAGE_WARNING, "%s/%s lacks its last lines: %s", run->dir,
                        TG_RUN_PROBES_FILE, strerror(run->probes_error ? run->probes_error : ENOSPC));
    tg_folder_lock_release(&run->lock);
    if (run->model_built) tg_model_free(&run->model);
    tg_tokenizer_free(&run->tok);
    tg_split_close(&run->train);
    tg_split_close(&run->val);
    tg_run_clear(run);
}

/* ---------------------------------------------------------------- during training */

/* Losses, lr and gradient norm with 9 significant digits, enough to tell any two floats apart,
 * so that comparing the metrics of a resumed run with an uninterrupted one is meaningful. */
static void json_number(FILE *f, const char *key, double v, int digits) {
    if (isfinite(v)) fprintf(f, ",\"%s\":%.*g", key, digits, v);
}

/* What a log line went to: a full disk loses no line, it waits (support/append_file.h), and the
 * person is told once. *last_error: the errno of the log's previous flush. */
static void flush_log(TgRun *run, TgAppendFile *log, int *last_error, const char *name) {
    int err = tg_append_file_flush(log);
    if (err && !*last_error)
        tg_message_emit(&run->messages, TG_MESSAGE_WARNING,
                        "cannot write %s/%s (%s): its lines wait in memory and are written once there is space",
                        run->dir, name, strerror(err));
    else if (!err && *last_error)
        tg_message_emit(&run->messages, TG_MESSAGE_NOTE, "%s/%s is written again; no line was lost", run->dir, name);
    *last_error = err;
}

/* Before a line of `step`: a log removed or replaced while the run trains is made again at its
 * path and the person told, once each time; one that cannot be is said once (its lines are lost). */
static void recheck_log(TgRun *run, TgAppendFile *log, int *gone, const char *name, int64_t step) {
    int r = tg_append_file_recheck(log);
    if (r > 0) {
        tg_message_emit(&run->messages, TG_MESSAGE_WARNING,
                        "%s/%s was removed or replaced while the run trained: written anew from step %lld on (the "
                        "lines before are not in it)",
                        run->dir, name, (long long)step);
        *gone = 0;
    } else if (r < 0 && !*gone) {
        tg_message_emit(&run->messages, TG_MESSAGE_WARNING,
                        "%s/%s was removed or replaced while the run trained and cannot be made again (%s): its lines "
                        "from step %lld on are lost",
                        run->dir, name, strerror(-r), (long long)step);
        *gone = -r;
    }
}

TgRunMetrics tg_run_metrics_at(int64_t step) {
    return (TgRunMetrics){step, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NULL, 0};
}

void tg_run_log_metrics(TgRun *run, const TgRunMetrics *m) {
    FILE *f = run->metrics.f;
    if (!f) return;
    recheck_log(run, &run->metrics, &run->metrics_gone, TG_RUN_METRICS_FILE, m->step);
    fprintf(f, "{\"step\":%lld", (long long)m->step);
    json_number(f, "loss", m->loss, 9);
    json_number(f, "val_loss", m->val_loss, 9);
    json_number(f, "val_bpb", m->val_bpb, 9);
    json_number(f, "lr", m->lr, 9);
    json_number(f, "grad_norm", m->grad_norm, 9);
    json_number(f, "tokens_per_s", m->tokens_per_s, 6);
    json_number(f, "elapsed_s", m->elapsed_s, 6);
    for (int i = 0; i < m->n_extra; i++) {
        if (!isfinite(m->extra[i].value)) continue;
        fputc(',', f);
        tg_json_write_string(f, m->extra[i].name);
        fprintf(f, ":%.9g", m->extra[i].value);
    }
    fputs("}\n", f);
    flush_log(run, &run->metrics, &run->metrics_error, TG_RUN_METRICS_FILE);
}

TgStatus tg_run_open_probes(TgRun *run) {
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, run->dir, TG_RUN_PROBES_FILE));
    return tg_append_file_open(&run->probes, path);
}

void tg_run_log_probe(TgRun *run, int64_t step, const char *prompt, size_t prompt_len, const char *text,
                      size_t text_len) {
    FILE *f = run->probes.f;
    if (!f) return;
    recheck_log(run, &run->probes, &run->probes_gone, TG_RUN_PROBES_FILE, step);
    fprintf(f, "{\"step\":%lld,\"prompt\":", (long long)step);
    tg_json_write_bytes(f, prompt, prompt_len);
    fputs(",\"text\":", f);
    tg_json_write_bytes(f, text, text_len);
    fputs("}\n", f);
    flush_log(run, &run->probes, &run->probes_error, TG_RUN_PROBES_FILE);
}

TgStatus tg_run_sample(TgRun *run, TgTape *tape, const char *prompt, int64_t n, const TgSampleOptions *sampling, uint64_t seed,
                    char **text, size_t *text_len) {
    TgRng rng;
    tg_rng_seed(&rng, seed);
    TgSampler sampler = {.model = &run->model, .tape = tape, .opts = sampling, .rng = &rng};
    return tg_sample_text(&sampler, &run->tok, prompt, strlen(prompt), n, text, text_len);
}

TgStatus tg_run_continue_greedily(TgRun *run, TgTape *tape, const int32_t *ids, int64_t n, int64_t n_new, char **text,
                                  size_t *text_len) {
    *text = NULL, *text_len = 0;
    TgChatTokens ends = {.im_start = -1, .im_end = -1, .eot = run->tok.eot_id};
    if (tg_train_task_chat(run->task)) TG_TRY(tg_chat_tokens_find(&run->tok, run->dir, &ends));
    /* greedy: no draw takes a number from the generator */
    const TgSampleOptions greedy = {.temperature = 0};
    TgRng rng;
    tg_rng_seed(&rng, 0);
    int32_t *out = tg_malloc((size_t)(n + n_new) * sizeof *out);
    int32_t stop = tg_train_task_chat(run->task) ? ends.im_end : ends.eot;
    TgSampler sampler = {.model = &run->model, .tape = tape, .opts = &greedy, .rng = &rng};
    int64_t total = tg_sample_generate(&sampler, ids, n, n_new, stop, out);
    /* the reply ends before the first end of either kind: what stopping at it would have drawn */
    int64_t end = n;
    while (end < total && out[end] != ends.eot && out[end] != ends.im_end) end++;
    TgStatus s = total < 0 ? TG_ERR_NUMERIC /* tg_sample_generate's message */
                           : tg_tokenizer_decode(&run->tok, out + n, (size_t)(end - n), text, text_len);
    free(out);
    return s;
}

bool tg_run_init_from_is_run(const char *path) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return true;
    size_t n = strlen(path);
    return n > 5 && strcmp(path + n - 5, ".tgck") == 0;
}

