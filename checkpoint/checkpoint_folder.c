/* Run folders of checkpoints (latest pointer, keep-N) and the background saver. */
#include "checkpoint/checkpoint_folder.h"

#include "data/dataset.h"
#include "support/atomic_file.h"
#include "lib/checked.h"
#include "support/file_read.h"
#include "support/clock.h"
#include "support/path.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* "ckpt-<decimal digits>.tgck" -> its step. Digit by digit, so that a name of 30 digits is no
 * checkpoint rather than an overflow (sscanf's %lld is undefined there). */
static int ckpt_step_of(const char *name, int64_t *step) {
    if (strncmp(name, "ckpt-", 5) != 0) return 0;
    const char *p = name + 5;
    int64_t s = 0;
    for (; *p >= '0' && *p <= '9'; p++)
        if (!tg_mul_i64(s, 10, &s) || !tg_add_i64(s, *p - '0', &s)) return 0;
    if (p == name + 5 || strcmp(p, ".tgck") != 0) return 0;
    *step = s;
    return 1;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The steps of DIR's checkpoints, ascending; returns how many (at most cap). */
static int list_steps(const char *dir, int64_t *steps, int cap) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < cap) {
        int64_t s;
        if (ckpt_step_of(e->d_name, &s)) steps[n++] = s;
    }
    closedir(d);
    qsort(steps, (size_t)n, sizeof steps[0], cmp_i64);
    return n;
}

static void checkpoint_name(char *name, size_t cap, int64_t step) {
    snprintf(name, cap, "ckpt-%08lld.tgck", (long long)step);
}

static TgStatus write_latest(const char *dir, const char *name) {
    char path[TG_PATH_CAP], line[256];
    TG_TRY(tg_path_join(path, sizeof path, dir, "latest"));
    int len = snprintf(line, sizeof line, "%s\n", name);
    return tg_atomic_write(path, line, (size_t)len);
}

/* The step of the checkpoint DIR/best names (-1: no such file, or it names none). */
static int64_t best_file_step(const char *dir) {
    char path[TG_PATH_CAP], name[256] = "";
    int64_t step = -1;
    if (tg_path_join(path, sizeof path, dir, TG_CHECKPOINT_BEST_FILE) != TG_OK) return -1;
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    if (!fgets(name, sizeof name, f)) name[0] = '\0';
    fclose(f);
    name[strcspn(name, "\r\n")] = '\0';
    return ckpt_step_of(name, &step) ? step : -1;
}

void tg_checkpoint_folder_best(const char *dir, char *buf, size_t cap) {
    int64_t step = best_file_step(dir);
    char name[64];
    checkpoint_name(name, sizeof name, step);
    char path[TG_PATH_CAP];
    bool there = step >= 0 && tg_path_join(path, sizeof path, dir, name) == TG_OK && access(path, F_OK) == 0;
    snprintf(buf, cap, "%s", there ? name : "none");
}

TgStatus tg_checkpoint_write_best(const char *dir, const char *metric, const TgBestRecord *record) {
    char path[TG_PATH_CAP], text[256], name[64], ckpt[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, dir, TG_CHECKPOINT_BEST_FILE));
    if (record->step < 0) {
        if (unlink(path) == 0 || errno == ENOENT) return TG_OK;
        return tg_fail(TG_ERR_IO, "cannot remove %s: %s", path, strerror(errno));
    }
    /* `best` names only a checkpoint on disk */
    checkpoint_name(name, sizeof name, record->step);
    TG_TRY(tg_path_join(ckpt, sizeof ckpt, dir, name));
    if (access(ckpt, F_OK) != 0) {
        char now[64];
        tg_checkpoint_folder_best(dir, now, sizeof now);
        return tg_fail(TG_ERR_IO, "the best checkpoint %s is not on disk (its save failed); %s still names %s", ckpt, path,
                       now);
    }
    int len = snprintf(text, sizeof text, "ckpt-%08lld.tgck\n%s %.17g\nstep %lld\n", (long long)record->step, metric,
                       record->value, (long long)record->step);
    return tg_atomic_write(path, text, (size_t)len);
}

TgStatus tg_checkpoint_save_in_folder(const char *dir, const TgCheckpointSource *src, const TgCheckpointKeep *keep,
                                      char *path_out, size_t path_cap) {
    char name[64], path[TG_PATH_CAP];
    checkpoint_name(name, sizeof name, src->state.step);
    TG_TRY(tg_path_join(path, sizeof path, dir, name));
    TG_TRY(tg_checkpoint_write(path, src));
    /* only a complete, renamed checkpoint is ever named by `latest` or `best` */
    TG_TRY(write_latest(dir, name));
    const TgBestRecord *best = &src->state.best;
    bool keeps_best = keep->best && best->kept && best->step >= 0;
    if (keeps_best && best->step == src->state.step) TG_TRY(tg_checkpoint_write_best(dir, keep->metric, best));
    if (path_out) TG_TRY(tg_path_format(path_out, path_cap, "%s", path));
    if (keep->newest <= 0) return TG_OK;
    /* the one `best` names stays, even when the record's best is another (whose save failed) */
    int64_t named = keep->best ? best_file_step(dir) : -1;
    int64_t steps[4096];
    int n = list_steps(dir, steps, 4096);
    for (int i = 0; i + keep->newest < n; i++) {
        /* the ones `latest` and `best` name stay */
        if (steps[i] == src->state.step || (keeps_best && steps[i] == best->step) || steps[i] == named) continue;
        checkpoint_name(name, sizeof name, steps[i]);
        if (tg_path_join(path, sizeof path, dir, name) == TG_OK) unlink(path); /* dir/name fits: it was written */
    }
    return TG_OK;
}

void tg_checkpoint_folder_others(const char *dir, const char *except, char *buf, size_t cap) {
    int64_t steps[4096];
    int n = list_steps(dir, steps, 4096);
    size_t used = 0;
    buf[0] = '\0';
    for (int i = n - 1; i >= 0 && used + 32 < cap; i--) {
        char name[64];
        snprintf(name, sizeof name, "ckpt-%08lld.tgck", (long long)steps[i]);
        if (except && strcmp(name, except) == 0) continue;
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", name);
    }
}

void tg_checkpoint_folder_remove_stale(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[TG_PATH_CAP];
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        bool tmp = len > 4 && strcmp(e->d_name + len - 4, ".tmp") == 0;
        if (tmp && (strncmp(e->d_name, "ckpt-", 5) == 0 || strncmp(e->d_name, "latest.", 7) == 0 ||
                    strncmp(e->d_name, TG_CHECKPOINT_BEST_FILE ".", sizeof TG_CHECKPOINT_BEST_FILE) == 0)) {
            if (tg_path_join(path, sizeof path, dir, e->d_name) == TG_OK) unlink(path);
        }
    }
    closedir(d);
}

/* The checkpoint the pointer file `pointer` (DIR/latest or DIR/best) names on its first line, in DIR. */
static TgStatus follow_pointer(const char *dir, const char *pointer, char *path_out, size_t path_cap) {
    char name[256] = "", others[512];
    FILE *f = tg_file_open_read(pointer);
    if (!f) return tg_fail(errno == ENOENT ? TG_ERR_IO : TG_ERR_FORMAT, "%s: %s", pointer, tg_file_open_error(errno));
    if (!fgets(name, sizeof name, f)) name[0] = '\0';
    fclose(f);
    name[strcspn(name, "\r\n")] = '\0';
    int64_t step;
    if (!ckpt_step_of(name, &step))
        return tg_fail(TG_ERR_FORMAT, "%s: does not name a checkpoint ('%s'); pass a ckpt-*.tgck file instead", pointer,
                       name);
    TG_TRY(tg_path_join(path_out, path_cap, dir, name));
    if (access(path_out, F_OK) != 0) {
        tg_checkpoint_folder_others(dir, name, others, sizeof others);
        return tg_fail(TG_ERR_IO, "%s names %s, which is missing%s%s", pointer, name,
                       others[0] ? "; the folder's other checkpoints: " : "", others);
    }
    return TG_OK;
}

TgStatus tg_checkpoint_resolve(const char *dir_or_file, char *path_out, size_t path_cap) {
    struct stat st;
    if (stat(dir_or_file, &st) != 0)
        return tg_fail(TG_ERR_IO, "%s: no such checkpoint file or run folder", dir_or_file);
    if (!S_ISDIR(st.st_mode)) {
        /* RUN/latest or RUN/best: the checkpoint it names */
        const char *slash = strrchr(dir_or_file, '/'), *base = slash ? slash + 1 : dir_or_file;
        if (strcmp(base, "latest") != 0 && strcmp(base, TG_CHECKPOINT_BEST_FILE) != 0)
            return tg_path_format(path_out, path_cap, "%s", dir_or_file);
        char dir[TG_PATH_CAP];
        TG_TRY(
            tg_path_format(dir, sizeof dir, "%.*s", slash ? (int)(slash - dir_or_file) : 1, slash ? dir_or_file : "."));
        return follow_pointer(dir[0] ? dir : "/", dir_or_file, path_out, path_cap);
    }
    char latest[TG_PATH_CAP], others[512];
    TG_TRY(tg_path_join(latest, sizeof latest, dir_or_file, "latest"));
    if (access(latest, F_OK) != 0 && errno == ENOENT) {
        tg_checkpoint_folder_others(dir_or_file, NULL, others, sizeof others);
        if (others[0])
            return tg_fail(TG_ERR_IO, "%s: folder has no 'latest' file; pass one of its checkpoints instead: %s", dir_or_file,
                           others);
        /* a dataset folder: its manifest and no run's run.txt (a run prepared into its folder has both) */
        char manifest[TG_PATH_CAP], identity[TG_PATH_CAP];
        if (tg_path_join(manifest, sizeof manifest, dir_or_file, TG_DATASET_MANIFEST_FILE) == TG_OK &&
            tg_path_join(identity, sizeof identity, dir_or_file, "run.txt") == TG_OK && access(manifest, F_OK) == 0 &&
            access(identity, F_OK) != 0)
            return tg_fail(TG_ERR_IO,
                           "%s is a dataset folder (tapegrad prepare's), not a run: train a run on it (`dataset` %s, "
                           "`out_dir` RUN), then give that run",
                           dir_or_file, dir_or_file);
        return tg_fail(TG_ERR_IO, "%s: folder holds no checkpoint (no 'latest' file, no ckpt-*.tgck); train into it first or "
                                  "pass a .tgck file",
                       dir_or_file);
    }
    return follow_pointer(dir_or_file, latest, path_out, path_cap);
}

/* ---------------------------------------------------------------- background saver */

void tg_checkpoint_saver_init(TgCheckpointSaver *s, const char *dir, const TgCheckpointKeep *keep, TgModel *model) {
    memset(s, 0, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    s->keep = *keep;
    s->layout = tg_model_trainable(model);
    s->snapshot = tg_malloc(3 * s->layout->total * sizeof(float) + 64);
    /* touch every page now: a first copy into fresh memory takes a page fault per page, many
     * times a warm copy (docs/results.md, 2026-11-29, checkpoint save and load), and that
     * would be training's pause */
    memset(s->snapshot, 0, 3 * s->layout->total * sizeof(float) + 64);
}

static void *saver_thread(void *arg) {
    TgCheckpointSaver *s = arg;
    double t0 = tg_clock_seconds();
    s->result = tg_checkpoint_save_in_folder(s->dir, &s->src, &s->keep, s->writing, sizeof s->writing);
    if (s->result != TG_OK) snprintf(s->error, sizeof s->error, "%s", tg_error_message());
    s->write_s += tg_clock_seconds() - t0;
    return NULL;
}

TgStatus tg_checkpoint_saver_wait(TgCheckpointSaver *s) {
    if (!s->in_flight) return TG_OK;
    pthread_join(s->thread, NULL);
    s->in_flight = false;
    if (s->result != TG_OK) return tg_fail(s->result, "%s", s->error);
    snprintf(s->last_saved, sizeof s->last_saved, "%s", s->writing);
    s->saves++;
    return TG_OK;
}

TgStatus tg_checkpoint_saver_start(TgCheckpointSaver *s, const TgModel *model, uint64_t tokenizer_fingerprint,
                                 const TgTrainerState *state) {
    double t0 = tg_clock_seconds();
    TgStatus previous = tg_checkpoint_saver_wait(s);
    s->blocked_s += tg_clock_seconds() - t0;
    if (previous != TG_OK) return previous;
    t0 = tg_clock_seconds();
    s->src = tg_checkpoint_source_of(model, tokenizer_fingerprint, state);
    size_t n = s->src.layout->total;
    TG_CHECK(s->src.layout == s->layout, "the checkpoint saver was set up for another model");
    float *data = s->snapshot, *m = s->snapshot + n, *v = s->snapshot + 2 * n;
    memcpy(data, s->src.data, n * sizeof(float));
    memcpy(m, s->src.m, n * sizeof(float));
    memcpy(v, s->src.v, n * sizeof(float));
    s->src.data = data, s->src.m = m, s->src.v = v;
    s->pause_s += tg_clock_seconds() - t0;
    s->result = TG_OK;
    s->error[0] = '\0';
    /* the writer thread takes no signals: SIGINT/SIGTERM belong to the training loop, and a
     * handler running on the writer would only interrupt its system calls */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->thread, NULL, saver_thread, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        /* no thread: save right here instead */
        saver_thread(s);
        if (s->result != TG_OK) return tg_fail(s->result, "%s", s->error);
        snprintf(s->last_saved, sizeof s->last_saved, "%s", s->writing);
        s->saves++;
        return TG_OK;
    }
    s->in_flight = true;
    return TG_OK;
}

TgStatus tg_checkpoint_saver_retry(TgCheckpointSaver *s) {
    TG_CHECK(!s->in_flight && s->result != TG_OK, "no failed save to try again");
    double t0 = tg_clock_seconds();
    saver_thread(s);
    s->blocked_s += tg_clock_seconds() - t0;
    if (s->result != TG_OK) return tg_fail(s->result, "%s", s->error);
    snprintf(s->last_saved, sizeof s->last_saved, "%s", s->writing);
    s->saves++;
    return TG_OK;
}

void tg_checkpoint_saver_free(TgCheckpointSaver *s) {
    tg_checkpoint_saver_wait(s);
    free(s->snapshot);
    s->snapshot = NULL;
}
