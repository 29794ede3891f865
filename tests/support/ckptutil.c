#include "ckptutil.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

extern char **environ;

#include "datagen.h"
#include "testutil.h"
#include "checkpoint/checkpoint_folder.h"

#if !defined(TAPEGRAD_BIN) || !defined(TAPEGRAD_FAULT_BIN)
#error "TAPEGRAD_BIN and TAPEGRAD_FAULT_BIN must name the tapegrad program and its test variant"
#endif

char *ckpt_test_setup(char **corpus_out) {
    char *dir = datagen_tempdir();
    char *text = datagen_english(7, 20000);
    datagen_write(dir, "corpus.txt", text, strlen(text));
    free(text);
    *corpus_out = datagen_path(dir, "corpus.txt");
    return dir;
}

static int run_cli(char **output, const char *launcher, const char *program, const char *fmt, va_list ap) {
    char args[8192], log_path[] = "/tmp/tapegrad-cli-XXXXXX";
    vsnprintf(args, sizeof args, fmt, ap);
    int fd = mkstemp(log_path);
    cr_assert(fd >= 0, "mkstemp failed");
    close(fd);
    char *cmd = malloc(strlen(launcher) + strlen(args) + 2 * sizeof log_path + 64 + strlen(program));
    sprintf(cmd, "%s %s %s >%s 2>&1 </dev/null", launcher, program, args, log_path);
    int rc = test_run(cmd);
    free(cmd);
    char *text = ckpt_read_text(log_path);
    unlink(log_path);
    if (output) *output = text;
    else free(text);
    return rc;
}

int ckpt_cli(char **output, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = run_cli(output, "", TAPEGRAD_BIN, fmt, ap);
    va_end(ap);
    return rc;
}

int ckpt_cli_launched(char **output, const char *launcher, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = run_cli(output, launcher, TAPEGRAD_BIN, fmt, ap);
    va_end(ap);
    return rc;
}

int ckpt_cli_faults(char **output, const char *launcher, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = run_cli(output, launcher, TAPEGRAD_FAULT_BIN, fmt, ap);
    va_end(ap);
    return rc;
}

void ckpt_train_small(const char *corpus, const char *out, int steps, const char *extra) {
    char *text = NULL;
    int rc = ckpt_cli(&text, "train " CKPT_SMALL_FLAGS " --data %s --steps %d --eval-every 0 --out %s %s", corpus, steps,
                      out, extra);
    cr_assert_eq(rc, 0, "training %s failed:\n%s", out, text);
    free(text);
}

void ckpt_expect_resume_reaches(const char *run, const char *extra, int step, const char *why) {
    char *out = NULL, name[64];
    int rc = ckpt_cli(&out, "train --resume %s %s", run, extra);
    cr_assert_eq(rc, 0, "%s: the resume exited %d:\n%s", why, rc, out);
    free(out);
    snprintf(name, sizeof name, "ckpt-%08d.tgck", step);
    char *path = datagen_path(run, name);
    cr_expect_eq(access(path, F_OK), 0, "%s: no %s", why, name);
    free(path);
}

TgStatus ckpt_load_model(const char *path, TgModel *model, TgCheckpointInfo *info) {
    TgModelConfig cfg;
    uint64_t fingerprint;
    memset(model, 0, sizeof *model);
    TG_TRY(tg_checkpoint_read_config(path, &cfg, &fingerprint));
    tg_model_build(model, &cfg);
    TgStatus s = tg_checkpoint_load(path, model, info);
    if (s != TG_OK) tg_model_free(model);
    return s;
}

bool ckpt_models_equal(const TgModel *a, const TgModel *b) {
    const TgParamStore *x = &a->params, *y = &b->params;
    size_t bytes = x->total * sizeof(float);
    return x->total == y->total && memcmp(x->data, y->data, bytes) == 0 && memcmp(x->m, y->m, bytes) == 0 &&
           memcmp(x->v, y->v, bytes) == 0;
}

uint8_t *ckpt_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    size_t k;
    while ((k = fread(buf + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    *len = n;
    return buf;
}

char *ckpt_read_text(const char *path) {
    size_t len;
    char *text = (char *)ckpt_read_file(path, &len);
    text = realloc(text, len + 1);
    text[len] = '\0';
    return text;
}

cJSON *ckpt_read_json_lines(const char *path) {
    char *text = ckpt_read_text(path);
    cJSON *all = cJSON_CreateArray();
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        cr_assert_not_null(j, "%s: %s", path, line);
        cJSON_AddItemToArray(all, j);
    }
    free(text);
    return all;
}

void ckpt_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot write %s", path);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

uint8_t *ckpt_raw_read(const char *path, size_t *len) {
    gzFile gz = gzopen(path, "rb");
    cr_assert_not_null(gz, "cannot open %s", path);
    size_t cap = 1 << 20, n = 0;
    uint8_t *buf = malloc(cap);
    int k;
    while ((k = gzread(gz, buf + n, (unsigned)(cap - n))) > 0) {
        n += (size_t)k;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    cr_assert_eq(k, 0, "%s: gzread failed", path);
    gzclose(gz);
    *len = n;
    return buf;
}

void ckpt_raw_write(const char *path, const void *raw, size_t len) {
    gzFile gz = gzopen(path, "wb6");
    cr_assert_not_null(gz, "cannot write %s", path);
    cr_assert_eq(gzwrite(gz, raw, (unsigned)len), (int)len);
    cr_assert_eq(gzclose(gz), Z_OK);
}

bool ckpt_raw_find(const uint8_t *raw, size_t len, const char *name, int kind, CkptRecord *rec) {
    uint32_t version, flags = 0, count;
    memcpy(&version, raw + CKPT_OFF_VERSION, 4);
    cr_assert_eq(version, 2u, "ckpt_raw_find reads version 2 streams");
    memcpy(&flags, raw + CKPT_OFF_FLAGS, 4);
    size_t p = CKPT_OFF_COUNT;
    if (flags & TG_CHECKPOINT_FLAG_ADAPTER) { /* an adapter's tag sits before the count */
        uint16_t tag_len;
        memcpy(&tag_len, raw + p, 2);
        p += 2 + tag_len;
    }
    memcpy(&count, raw + p, 4);
    p += 4;
    for (uint32_t i = 0; i < count; i++) {
        size_t begin = p;
        uint16_t name_len;
        memcpy(&name_len, raw + p, 2);
        char rec_name[256];
        memcpy(rec_name, raw + p + 2, name_len);
        rec_name[name_len] = '\0';
        p += 2 + name_len;
        uint8_t rec_kind = raw[p++];
        uint32_t ndim;
        memcpy(&ndim, raw + p, 4);
        p += 4;
        size_t shape = p;
        int64_t numel = 1;
        for (uint32_t d = 0; d < ndim; d++) {
            int64_t dim;
            memcpy(&dim, raw + p, 8);
            p += 8;
            numel *= dim;
        }
        p += (size_t)numel * 4;
        cr_assert(p <= len, "record %u runs past the stream", i);
        if (strcmp(rec_name, name) == 0 && rec_kind == kind) {
            *rec = (CkptRecord){begin, p, shape, ndim};
            return true;
        }
    }
    return false;
}

void ckpt_plant_values(const char *path, const char *name, int kind, int64_t from, int64_t count, float value) {
    size_t len;
    uint8_t *raw = ckpt_raw_read(path, &len);
    CkptRecord rec;
    cr_assert(ckpt_raw_find(raw, len, name, kind, &rec), "%s: no record %s", path, name);
    size_t data = rec.shape + 8 * (size_t)rec.ndim, n = (rec.end - data) / 4;
    size_t end = count < 0 ? n : (size_t)(from + count);
    cr_assert(from >= 0 && end <= n, "%s: indexes [%lld, %zu) of %s, which has %zu", path, (long long)from, end, name, n);
    uint32_t flags;
    memcpy(&flags, raw + CKPT_OFF_FLAGS, 4);
    uint8_t bytes[4];
    memcpy(bytes, &value, 4);
    for (size_t i = (size_t)from; i < end; i++)
        for (size_t b = 0; b < 4; b++) raw[(flags & TG_CHECKPOINT_FLAG_SHUFFLED) ? data + b * n + i : data + 4 * i + b] = bytes[b];
    ckpt_raw_write(path, raw, len);
    free(raw);
}

pid_t ckpt_spawn(const char *program, const char *log, char *const args[]) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    pid_t pid;
    cr_assert_eq(posix_spawn(&pid, program, &fa, NULL, args, environ), 0, "cannot start %s", program);
    posix_spawn_file_actions_destroy(&fa);
    return pid;
}

pid_t ckpt_spawn_cli(const char *log, char *const args[]) { return ckpt_spawn(TAPEGRAD_BIN, log, args); }

int ckpt_wait_at_most(pid_t pid, double seconds) {
    int status;
    for (int i = 0; i < (int)(seconds * 100); i++) {
        if (waitpid(pid, &status, WNOHANG) == pid) return status;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

int64_t ckpt_latest_step(const char *run) {
    char path[4200];
    TgModel model;
    TgCheckpointInfo info;
    cr_assert_eq(tg_checkpoint_resolve(run, path, sizeof path), TG_OK, "%s", tg_error_message());
    cr_assert_eq(ckpt_load_model(path, &model, &info), TG_OK, "%s", tg_error_message());
    tg_model_free(&model);
    return info.state.step;
}

void ckpt_chat_runs(const char *dir, const char *corpus, char **base, char **tuned) {
    *base = datagen_path(dir, "base"), *tuned = datagen_path(dir, "tuned");
    char *out = NULL;
    int rc = ckpt_cli(&out, "train " CKPT_TEST_FLAGS " --data %s --tokenizer bpe --vocab 320 --special-tokens chatml --steps 2 "
                            "--eval-every 0 --out %s",
                      corpus, *base);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    const char *line = "{\"conversations\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": "
                       "\"hello\"}]}\n";
    char text[4096] = "";
    for (int i = 0; i < 20; i++) strcat(text, line);
    datagen_write(dir, "c.jsonl", text, strlen(text));
    char *data = datagen_path(dir, "c.jsonl");
    rc = ckpt_cli(&out, "sft " CKPT_TEST_FLAGS " --init-from %s --data %s --steps 3 --eval-every 0 --out %s", *base, data, *tuned);
    cr_assert_eq(rc, 0, "%s", out);
    free(out), free(data);
}

int ckpt_count_lines(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

/* ---------------------------------------------------------------- comparing runs */

/* The raw text of "key":value in a metrics line ("" when absent). */
static void field(const char *line, const char *key, char *out, size_t cap) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *p = strstr(line, pattern);
    out[0] = '\0';
    if (!p) return;
    p += strlen(pattern);
    size_t n = strcspn(p, ",}");
    if (n >= cap) n = cap - 1;
    memcpy(out, p, n);
    out[n] = '\0';
}

int ckpt_read_metrics(const char *run, int64_t after, CkptMetricLine *out, int cap) {
    char path[512], line[1024];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s missing", path);
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        CkptMetricLine m;
        char step[32];
        field(line, "step", step, sizeof step);
        m.step = strtoll(step, NULL, 10);
        field(line, "loss", m.loss, sizeof m.loss);
        if (m.step <= after || !m.loss[0]) continue;
        field(line, "val_loss", m.val_loss, sizeof m.val_loss);
        field(line, "lr", m.lr, sizeof m.lr);
        field(line, "grad_norm", m.grad_norm, sizeof m.grad_norm);
        cr_assert_lt(n, cap);
        out[n++] = m;
    }
    fclose(f);
    return n;
}

void ckpt_expect_same_metrics(const char *a, const char *b, int64_t after, int expected_lines) {
    CkptMetricLine ma[256], mb[256];
    int na = ckpt_read_metrics(a, after, ma, 256), nb = ckpt_read_metrics(b, after, mb, 256);
    cr_assert_eq(na, expected_lines, "%s: %d training lines after step %lld, expected %d", a, na, (long long)after,
                 expected_lines);
    cr_assert_eq(nb, expected_lines, "%s: %d training lines after step %lld, expected %d", b, nb, (long long)after,
                 expected_lines);
    for (int i = 0; i < na; i++) {
        cr_assert_eq(ma[i].step, mb[i].step);
        cr_expect_str_eq(ma[i].loss, mb[i].loss, "step %lld: loss %s in %s, %s in %s", (long long)ma[i].step, ma[i].loss,
                         a, mb[i].loss, b);
        cr_expect_str_eq(ma[i].val_loss, mb[i].val_loss, "step %lld: val loss", (long long)ma[i].step);
        cr_expect_str_eq(ma[i].lr, mb[i].lr, "step %lld: lr", (long long)ma[i].step);
        cr_expect_str_eq(ma[i].grad_norm, mb[i].grad_norm, "step %lld: grad norm", (long long)ma[i].step);
    }
}

void ckpt_expect_same_checkpoints(const char *a, const char *b, int64_t step) {
    char pa[4200], pb[4200];
    cr_assert_eq(tg_checkpoint_resolve(a, pa, sizeof pa), TG_OK, "%s", tg_error_message());
    cr_assert_eq(tg_checkpoint_resolve(b, pb, sizeof pb), TG_OK, "%s", tg_error_message());
    TgModel ma, mb;
    TgCheckpointInfo ia, ib;
    cr_assert_eq(ckpt_load_model(pa, &ma, &ia), TG_OK, "%s", tg_error_message());
    cr_assert_eq(ckpt_load_model(pb, &mb, &ib), TG_OK, "%s", tg_error_message());
    cr_assert_eq(ia.state.step, step, "%s is at step %lld", pa, (long long)ia.state.step);
    cr_assert_eq(ib.state.step, step, "%s is at step %lld", pb, (long long)ib.state.step);
    cr_expect(ckpt_models_equal(&ma, &mb), "%s and %s hold different weights or moments", pa, pb);
    cr_expect_eq(ia.state.tokens_seen, ib.state.tokens_seen);
    cr_expect_eq(memcmp(&ia.state.loader, &ib.state.loader, sizeof ia.state.loader), 0, "loader states differ");
    cr_expect_eq(memcmp(&ia.state.best_val_loss, &ib.state.best_val_loss, sizeof(double)), 0, "best val losses differ");
    const TgBestRecord *ba = &ia.state.best, *bb = &ib.state.best;
    cr_expect(ba->kept == bb->kept && ba->step == bb->step && ba->evals_since == bb->evals_since &&
                  memcmp(&ba->value, &bb->value, sizeof(double)) == 0,
              "best records differ: step %lld (%lld since) and %lld (%lld since)", (long long)ba->step,
              (long long)ba->evals_since, (long long)bb->step, (long long)bb->evals_since);
    tg_model_free(&ma);
    tg_model_free(&mb);
}
