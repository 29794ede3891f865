/* A new run's temporary folder: choosing the run folder, building under a temporary name,
 * moving it into place, and removing it when the run fails first. */
#include "run/run_folder.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/atomic_file.h"
#include "checkpoint/checkpoint_folder.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "tokenizer/tokenizer_hf.h"
#include "support/path.h"

/* The files a run writes into its folder, besides ckpt-*.tgck, and what each is to the run: a
 * folder holding one belongs to a run. (A *.tmp file a killed save left is no run's: the next
 * save overwrites it.) */
static const struct {
    const char *name, *what;
    bool marks_a_run; /* only a run writes it: its presence makes the folder a run folder */
} RUN_FILES[] = {
    {TG_PREPARE_TOKENIZER_FILE, "the tokenizer", true},
    {TG_TOKENIZER_HF_FILE, "the imported tokenizer", false},
    {TG_PREPARE_TRAIN_FILE, "the tokenized training data", false},
    {TG_PREPARE_VAL_FILE, "the tokenized validation data", false},
    {TG_DATASET_MANIFEST_FILE, "the manifest of its data", false},
    {TG_RUN_IDENTITY_FILE, "the description", true},
    {TG_TRAIN_OPTIONS_FILE, "the training options", false},
    {TG_RUN_METRICS_FILE, "the metrics", false},
    {TG_RUN_PROBES_FILE, "the continuations of its probe prompts", false},
    {"grads.jsonl", "the gradient log", false},
    {TG_RUN_LOG_FILE, "the log of what the run printed", false},
    {"latest", "the pointer to the newest checkpoint", true},
    {TG_CHECKPOINT_BEST_FILE, "the pointer to the best checkpoint", false},
    {TG_RUN_LOCK_FILE, "the lock", false},
};

static bool is_checkpoint_name(const char *name) {
    size_t len = strlen(name);
    return strncmp(name, "ckpt-", 5) == 0 && len > 10 && strcmp(name + len - 5, ".tgck") == 0;
}

bool tg_run_file_name(const char *name, const char **what) {
    if (is_checkpoint_name(name)) {
        if (what) *what = "a checkpoint";
        return true;
    }
    for (size_t i = 0; i < sizeof RUN_FILES / sizeof RUN_FILES[0]; i++)
        if (strcmp(name, RUN_FILES[i].name) == 0) {
            if (what) *what = RUN_FILES[i].what;
            return true;
        }
    return false;
}

static bool is_run_file(const char *name) { return tg_run_file_name(name, NULL); }

bool tg_run_folder_is_run(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return false;
    bool run = false;
    struct dirent *e;
    while (!run && (e = readdir(d))) {
        run = is_checkpoint_name(e->d_name);
        for (size_t i = 0; !run && i < sizeof RUN_FILES / sizeof RUN_FILES[0]; i++)
            run = RUN_FILES[i].marks_a_run && strcmp(e->d_name, RUN_FILES[i].name) == 0;
    }
    closedir(d);
    return run;
}

#define WHAT_A_RUN_HOLDS                                                                                         \
    "a run folder holds the files `tapegrad train` writes (" TG_PREPARE_TOKENIZER_FILE ", " TG_RUN_IDENTITY_FILE \
    ", " TG_PREPARE_TRAIN_FILE ", ckpt-*.tgck, latest, ...); give one, or a checkpoint file inside one"

TgStatus tg_run_folder_locate(const char *given, char *dir, size_t cap) {
    if (!given[0]) return tg_fail(TG_ERR_ARG, "an empty path names no run; " WHAT_A_RUN_HOLDS);
    struct stat st;
    if (stat(given, &st) != 0) {
        char folder[TG_PATH_CAP], held[1024];
        tg_path_folder(given, folder, sizeof folder);
        const char *name = strrchr(given, '/') ? strrchr(given, '/') + 1 : given;
        if (errno == ENOENT && is_checkpoint_name(name) && tg_run_folder_is_run(folder)) {
            /* a checkpoint the run no longer keeps (--keep removed it), or a name mistyped */
            tg_checkpoint_folder_others(folder, NULL, held, sizeof held);
            return tg_fail(TG_ERR_IO,
                           "%s: no such checkpoint; the run folder %s holds %s (a run keeps its newest `keep` checkpoints, "
                           "and its best with `keep_best`): give one of those, or the folder for its latest",
                           given, folder, held[0] ? held : "no checkpoint yet");
        }
        if (errno == ENOENT || errno == ENOTDIR)
            return tg_fail(TG_ERR_IO, "%s: no such run folder or checkpoint file; " WHAT_A_RUN_HOLDS, given);
        return tg_fail(TG_ERR_IO, "%s: %s", given, strerror(errno));
    }
    TG_TRY(tg_run_folder_of(given, dir, cap));
    if (!tg_run_folder_is_run(dir))
        return tg_fail(TG_ERR_IO, "%s is not a run folder or a checkpoint in one: " WHAT_A_RUN_HOLDS, given);
    return TG_OK;
}

/* "metrics.jsonl, train.tok": the run files in dir (empty when none). */
static void list_run_files(const char *dir, char *buf, size_t cap) {
    buf[0] = '\0';
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (is_run_file(e->d_name)) {
            size_t used = strlen(buf);
            snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", e->d_name);
        }
    closedir(d);
}

TgStatus tg_run_folder_of(const char *dir_or_file, char *out, size_t cap) {
    struct stat st;
    TG_TRY(tg_path_format(out, cap, "%s", dir_or_file));
    if (stat(dir_or_file, &st) == 0 && !S_ISDIR(st.st_mode)) tg_path_folder(out, out, cap);
    return TG_OK;
}

static bool exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

static TgStatus set_path(char *dst, const char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--; /* "runs/x/" is the folder runs/x */
    if (n == 0) return tg_fail(TG_ERR_ARG, "`out_dir` is empty; pass a folder");
    /* room for the temporary folder's name, and a generated name's "-999" */
    size_t room = TG_PATH_CAP - sizeof ".tmp-XXXXXX" - 4;
    if (n >= room)
        return tg_fail(TG_ERR_ARG, "`out_dir` is too long: %zu bytes, at most %zu for a run folder (%.60s...); pass a shorter one",
                       n, room - 1, path);
    memcpy(dst, path, n);
    dst[n] = '\0';
    return TG_OK;
}

bool tg_run_folder_code_file(const char *name) {
    static const char *const names[] = {"CMakeLists.txt", "Makefile", "meson.build", "setup.py", "package.json"};
    static const char *const ends[] = {".c", ".h", ".cc", ".cpp", ".hpp", ".py", ".rs", ".go", ".js", ".mjs", ".ts",
                                       ".java", ".sh", ".cmake"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i]) == 0) return true;
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
        size_t e = strlen(ends[i]);
        if (n > e && strcmp(name + n - e, ends[i]) == 0) return true;
    }
    return false;
}

/* When `dir` holds a code file and lies in a git work tree (a folder at or above it has a .git
 * entry): "DIR holds FILE, in the git work tree ROOT" into why. */
static bool among_sources(const char *dir, char *why, size_t cap) {
    DIR *d = opendir(dir);
    if (!d) return false;
    char found[256] = "";
    for (struct dirent *e; !found[0] && (e = readdir(d));)
        if (tg_run_folder_code_file(e->d_name)) snprintf(found, sizeof found, "%s", e->d_name);
    closedir(d);
    char root[TG_PATH_CAP], git[TG_PATH_CAP + 8];
    if (!found[0] || !realpath(dir, root)) return false;
    for (;;) {
        struct stat st;
        snprintf(git, sizeof git, "%s/.git", root);
        if (lstat(git, &st) == 0) break;
        char *slash = strrchr(root, '/');
        if (!slash || slash == root) return false;
        *slash = '\0';
    }
    snprintf(why, cap, "%s holds %s, in the git work tree %s", dir, found, root);
    return true;
}

/* An existing folder can take a new run when it holds no run's files and can be written into. */
static TgStatus check_existing(const char *path) {
    char latest[TG_PATH_CAP], found[512];
    TG_TRY(tg_path_join(latest, sizeof latest, path, "latest"));
    if (exists(latest))
        return tg_fail(TG_ERR_ARG, "%s already holds a run; continue it with `resume` %s, or pass another `out_dir`", path, path);
    list_run_files(path, found, sizeof found);
    if (found[0])
        return tg_fail(TG_ERR_ARG, "%s holds files of another run (%s) but no checkpoint to resume; delete them or pass "
                                   "another `out_dir`",
                       path, found);
    if (access(path, W_OK | X_OK) != 0)
        return tg_fail(TG_ERR_ARG, "cannot write into %s: %s; pass a writable `out_dir`", path, strerror(errno));
    char why[3 * TG_PATH_CAP];
    if (among_sources(path, why, sizeof why))
        return tg_fail(TG_ERR_ARG, "%s: a run's files do not belong among source files; pass `out_dir` checkpoints/NAME (the "
                                   "folder made for runs) or another folder of the run's own",
                       why);
    return TG_OK;
}

TgStatus tg_run_folder_choose(TgRunFolder *f, const char *out_dir, const char *generated) {
    memset(f, 0, sizeof *f);
    if (out_dir) {
        TG_TRY(set_path(f->path, out_dir));
    } else {
        TG_TRY(set_path(f->generated, generated));
        TG_TRY(tg_path_format(f->path, sizeof f->path, "%s", f->generated));
        for (int k = 2; exists(f->path); k++) /* runs started in the same second */
            TG_TRY(tg_path_format(f->path, sizeof f->path, "%s-%d", f->generated, k));
    }
    struct stat st;
    if (stat(f->path, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return tg_fail(TG_ERR_ARG, "%s is a file, not a folder; pass another `out_dir`", f->path);
        TG_TRY(check_existing(f->path));
        f->existed = true;
        return TG_OK;
    }
    if (errno != ENOENT && errno != ENOTDIR) return tg_fail(TG_ERR_ARG, "%s: %s; pass another `out_dir`", f->path, strerror(errno));
    /* the nearest existing parent must be a folder that a folder can be made in */
    char parent[TG_PATH_CAP];
    tg_path_folder(f->path, parent, sizeof parent);
    while (stat(parent, &st) != 0 && (errno == ENOENT || errno == ENOTDIR) && strcmp(parent, ".") != 0 &&
           strcmp(parent, "/") != 0)
        tg_path_folder(parent, parent, sizeof parent);
    if (stat(parent, &st) != 0) return tg_fail(TG_ERR_ARG, "%s: %s: %s; pass another `out_dir`", f->path, parent, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return tg_fail(TG_ERR_ARG, "%s: %s is a file, not a folder; pass another `out_dir`", f->path, parent);
    if (access(parent, W_OK | X_OK) != 0)
        return tg_fail(TG_ERR_ARG, "%s: cannot create it in %s: %s; pass a writable `out_dir`", f->path, parent, strerror(errno));
    among_sources(parent, f->among_sources, sizeof f->among_sources);
    return TG_OK;
}

/* mkdir -p dir, remembering the outermost folder it made, so that a discard can remove it. */
static TgStatus make_parents(TgRunFolder *f, const char *dir) {
    char buf[TG_PATH_CAP];
    TG_TRY(tg_path_format(buf, sizeof buf, "%s", dir));
    size_t n = strlen(buf);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0777) == 0) {
            if (!f->made_parent[0]) memcpy(f->made_parent, buf, i + 1); /* buf[i] is its NUL */
        } else if (errno != EEXIST) {
            return tg_fail(TG_ERR_IO, "cannot create folder %s: %s", buf, strerror(errno));
        }
        buf[i] = saved;
    }
    return TG_OK;
}

TgStatus tg_run_folder_begin(TgRunFolder *f) {
    char home[TG_PATH_CAP], base[TG_PATH_CAP];
    const char *slash = strrchr(f->path, '/');
    tg_path_folder(f->path, home, sizeof home);
    snprintf(base, sizeof base, "%s", slash ? slash + 1 : f->path); /* no longer than f->path */
    if (f->existed) {
        memcpy(home, f->path, sizeof home);
        snprintf(base, sizeof base, "run");
    } else {
        TgStatus s = make_parents(f, home);
        if (s != TG_OK) {
            tg_run_folder_discard(f);
            return s;
        }
    }
    char name[TG_PATH_CAP];
    TgStatus s = tg_path_format(name, sizeof name, "%s.tmp-XXXXXX", base);
    if (s == TG_OK) s = tg_path_join(f->temp, sizeof f->temp, home, name);
    if (s != TG_OK) {
        f->temp[0] = '\0';
        tg_run_folder_discard(f);
        return s;
    }
    if (!mkdtemp(f->temp)) {
        int err = errno;
        f->temp[0] = '\0';
        tg_run_folder_discard(f);
        return tg_fail(TG_ERR_IO, "cannot create a folder in %s: %s; pass a writable `out_dir`", home, strerror(err));
    }
    return TG_OK;
}

/* Moves every file of `from` into `to`, all or none: a name `to` holds already is refused. */
static TgStatus move_files_into(const char *from, const char *to) {
    enum { MAX_FILES = 64 };
    char names[MAX_FILES][256], src[TG_PATH_CAP], dst[TG_PATH_CAP];
    int n = 0;
    DIR *d = opendir(from);
    if (!d) return tg_fail(TG_ERR_IO, "cannot read folder %s: %s", from, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (n == MAX_FILES) { /* a run writes a handful */
            closedir(d);
            return tg_fail(TG_ERR_IO, "%s holds more than %d files; it is not a run being prepared", from, MAX_FILES);
        }
        snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        TG_TRY(tg_path_join(src, sizeof src, from, names[i]));
        TG_TRY(tg_path_join(dst, sizeof dst, to, names[i]));
        if (exists(dst))
            return tg_fail(TG_ERR_IO, "%s appeared while the run was prepared; pass another `out_dir`", dst);
    }
    for (int i = 0; i < n; i++) {
        /* both fit: checked above */
        (void)tg_path_join(src, sizeof src, from, names[i]);
        (void)tg_path_join(dst, sizeof dst, to, names[i]);
        if (rename(src, dst) != 0) {
            TgStatus s = tg_fail(TG_ERR_IO, "cannot move %s to %s: %s", src, dst, strerror(errno));
            for (int j = 0; j < i; j++) { /* back where they were, for the discard */
                (void)tg_path_join(src, sizeof src, from, names[j]);
                (void)tg_path_join(dst, sizeof dst, to, names[j]);
                (void)rename(dst, src);
            }
            return s;
        }
    }
    return TG_OK;
}

TgStatus tg_run_folder_commit(TgRunFolder *f) {
    if (!f->temp[0] || f->committed) return TG_OK;
    for (int k = 2; !f->existed && k < 1000; k++) {
        if (rename(f->temp, f->path) == 0) {
            f->committed = true;
            break;
        }
        if (errno != EEXIST && errno != ENOTEMPTY)
            return tg_fail(TG_ERR_IO, "cannot rename %s to %s: %s", f->temp, f->path, strerror(errno));
        if (f->generated[0]) { /* another run took the name while this one was prepared */
            TG_TRY(tg_path_format(f->path, sizeof f->path, "%s-%d", f->generated, k));
            continue;
        }
        f->existed = true; /* --out was made meanwhile: move the files into it */
    }
    if (!f->committed && !f->existed)
        return tg_fail(TG_ERR_IO, "cannot rename %s to %s or a free name beside it; pass `out_dir`", f->temp, f->generated);
    if (!f->committed) {
        TG_TRY(move_files_into(f->temp, f->path));
        (void)rmdir(f->temp);
        f->committed = true;
    }
    tg_sync_parent_folder(f->path);
    f->temp[0] = '\0';
    return TG_OK;
}

void tg_run_folder_discard(TgRunFolder *f) {
    if (f->committed) return;
    if (f->temp[0]) {
        DIR *d = opendir(f->temp);
        struct dirent *e;
        char path[TG_PATH_CAP];
        while (d && (e = readdir(d)))
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
                tg_path_join(path, sizeof path, f->temp, e->d_name) == TG_OK)
                (void)unlink(path);
        if (d) closedir(d);
        (void)rmdir(f->temp);
        f->temp[0] = '\0';
    }
    if (f->made_parent[0]) { /* from the run folder's parent up to the outermost one made */
        char dir[TG_PATH_CAP];
        size_t outermost = strlen(f->made_parent);
        for (tg_path_folder(f->path, dir, sizeof dir); strlen(dir) >= outermost; tg_path_folder(dir, dir, sizeof dir)) {
            if (rmdir(dir) != 0 && errno != ENOENT) break; /* not empty: no longer only this run's */
            if (strlen(dir) == outermost) break;
        }
        f->made_parent[0] = '\0';
    }
}
