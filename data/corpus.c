#include "data/corpus.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tapegrad/limits.h"

enum { BINARY_NUL_WINDOW = 8192 };

static bool is_binary_control(unsigned char c) {
    return c <= 0x06 || (c >= 0x0e && c <= 0x1a) || (c >= 0x1c && c <= 0x1f) || c == 0x7f;
}

/* Also explains the verdict in `why` when binary. */
static bool binary_why(const unsigned char *b, size_t len, char *why, size_t cap) {
    size_t window = len < BINARY_NUL_WINDOW ? len : BINARY_NUL_WINDOW;
    const unsigned char *nul = memchr(b, 0, window);
    if (nul) {
        snprintf(why, cap, "a NUL byte at offset %zu", (size_t)(nul - b));
        return true;
    }
    size_t control = 0;
    for (size_t i = 0; i < len; i++) control += is_binary_control(b[i]);
    /* control > 30% of len, in integers */
    if (len > 0 && control * 10 > len * 3) {
        snprintf(why, cap, "%.0f%% of its bytes are control bytes", 100.0 * (double)control / (double)len);
        return true;
    }
    return false;
}

bool tg_corpus_is_binary(const char *bytes, size_t len) {
    char why[96];
    return binary_why((const unsigned char *)bytes, len, why, sizeof why);
}

typedef struct {
    char *data;
    size_t len, cap;
    TgCorpusInfo *info;
} Reader;

static void reserve(Reader *r, size_t extra) {
    if (r->cap - r->len > extra) return; /* keep room for the NUL terminator */
    size_t cap = r->cap ? r->cap : 1 << 16;
    while (cap - r->len <= extra) cap *= 2;
    r->data = tg_realloc(r->data, cap);
    r->cap = cap;
}

/* Appends the file's bytes; sets *binary or *empty instead of appending when that is the case.
 * `why` receives the binary verdict's reason. */
static TgStatus append_file(Reader *r, const char *path, bool *binary, bool *empty, char *why, size_t why_cap) {
    *binary = *empty = false;
    FILE *f = fopen(path, "rb");
    if (!f)
        return tg_fail(TG_ERR_IO, "cannot read corpus file %s: %s (fix its permissions or move it out of the corpus)",
                       path, strerror(errno));
    size_t start = r->len;
    bool need_newline = start > 0 && r->data[start - 1] != '\n';
    if (need_newline) {
        reserve(r, 1);
        r->data[r->len++] = '\n';
    }
    size_t body = r->len;
    for (;;) {
        reserve(r, 1 << 16);
        size_t got = fread(r->data + r->len, 1, r->cap - r->len - 1, f);
        r->len += got;
        if (got == 0) break;
    }
    int failed = ferror(f);
    int err = errno;
    fclose(f);
    if (failed) {
        r->len = start;
        return tg_fail(TG_ERR_IO, "cannot read corpus file %s: %s", path, strerror(err));
    }
    size_t n = r->len - body;
    if (n == 0) *empty = true;
    else *binary = binary_why((const unsigned char *)r->data + body, n, why, why_cap);
    if (*empty || *binary) r->len = start;
    return TG_OK;
}

bool tg_corpus_skipped_name(const char *name) {
    size_t n = strlen(name);
    if (name[0] == '.') return true;
    if (n >= 4 && strcmp(name + n - 4, ".dat") == 0) return true;
    if (n >= 3 && strcmp(name + n - 3, ".u8") == 0) return true;
    return false;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static TgStatus read_file_entry(void *ctx, const char *path) {
    Reader *r = ctx;
    bool binary, empty;
    char why[96];
    TG_TRY(append_file(r, path, &binary, &empty, why, sizeof why));
    TgCorpusInfo *info = r->info;
    if (empty) info->files_empty++;
    else if (binary) {
        if (info->files_binary++ == 0) snprintf(info->first_binary, sizeof info->first_binary, "%s (%s)", path, why);
    } else {
        info->files_read++;
    }
    return TG_OK;
}

/* The folders a walk has entered, by device and inode: a symbolic link to one of them is not
 * followed again, so a link to a parent folder (a cycle) or two links to one folder read
 * nothing twice. */
typedef struct {
    CorpusFileFn fn;
    CorpusSkipFn skipped;
    void *ctx;
    struct {
        dev_t dev;
        ino_t ino;
        char *path;
    } *seen;
    size_t n_seen, cap_seen;
} Walk;

static const char *kind_name(mode_t mode) {
    return S_ISFIFO(mode) ? "a FIFO" : S_ISSOCK(mode) ? "a socket" : S_ISCHR(mode) ? "a character device"
         : S_ISBLK(mode)  ? "a block device" : "neither a file nor a folder";
}

static void skip(Walk *w, const char *path, TgCorpusSkip why, const char *what) {
    if (w->skipped) w->skipped(w->ctx, path, why, what);
}

static TgStatus walk_folder(Walk *w, const char *dir, const struct stat *sb, bool link);

/* One entry of a folder: a file handed over, a folder walked, or skipped (named to w->skipped). */
static TgStatus walk_entry(Walk *w, const char *path) {
    struct stat lst, target;
    if (lstat(path, &lst) != 0) return tg_fail(TG_ERR_IO, "cannot stat corpus entry %s: %s", path, strerror(errno));
    bool link = S_ISLNK(lst.st_mode);
    if (link && stat(path, &target) != 0) {
        int err = errno;
        char to[1024];
        ssize_t n = readlink(path, to, sizeof to - 1);
        to[n > 0 ? n : 0] = '\0';
        if (err == ENOENT)
            return tg_fail(TG_ERR_IO,
                           "corpus entry %s is a symbolic link to %s, which does not exist (a missing file?): restore "
                           "it, or remove the link",
                           path, to);
        return tg_fail(TG_ERR_IO, "corpus entry %s is a symbolic link to %s, which cannot be followed: %s", path, to,
                       strerror(err));
    }
    const struct stat *sb = link ? &target : &lst;
    if (S_ISREG(sb->st_mode)) return w->fn(w->ctx, path);
    if (S_ISDIR(sb->st_mode)) return walk_folder(w, path, sb, link);
    char what[64];
    snprintf(what, sizeof what, "%s%s", link ? "a link to " : "", kind_name(sb->st_mode));
    skip(w, path, TG_CORPUS_SKIP_NOT_FILE, what);
    return TG_OK;
}

/* A folder, unless the walk entered it already (reached through a link: a cycle, or one folder twice). */
static TgStatus walk_folder(Walk *w, const char *dir, const struct stat *sb, bool link) {
    for (size_t i = 0; i < w->n_seen; i++)
        if (w->seen[i].dev == sb->st_dev && w->seen[i].ino == sb->st_ino) {
            char what[TG_PATH_CAP + 64];
            snprintf(what, sizeof what, "%s folder already read, %s", link ? "a link to a" : "a", w->seen[i].path);
            skip(w, dir, TG_CORPUS_SKIP_FOLDER_AGAIN, what);
            return TG_OK;
        }
    if (w->n_seen == w->cap_seen) {
        w->cap_seen = w->cap_seen ? 2 * w->cap_seen : 16;
        w->seen = tg_realloc(w->seen, w->cap_seen * sizeof *w->seen);
    }
    w->seen[w->n_seen].dev = sb->st_dev, w->seen[w->n_seen].ino = sb->st_ino;
    w->seen[w->n_seen++].path = strdup(dir);
    TG_CHECK(w->seen[w->n_seen - 1].path != NULL, "out of memory");
    DIR *d = opendir(dir);
    if (!d) return tg_fail(TG_ERR_IO, "cannot open corpus folder %s: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            names = tg_realloc(names, cap * sizeof *names);
        }
        names[n++] = strdup(e->d_name);
        TG_CHECK(names[n - 1] != NULL, "out of memory");
    }
    closedir(d);
    if (n > 1) qsort(names, n, sizeof *names, by_name);
    TgStatus st = TG_OK;
    for (size_t i = 0; i < n && st == TG_OK; i++) {
        size_t len = strlen(dir) + strlen(names[i]) + 2;
        char *path = tg_malloc(len);
        snprintf(path, len, "%s/%s", dir, names[i]);
        if (tg_corpus_skipped_name(names[i])) skip(w, path, TG_CORPUS_SKIP_NAME, "");
        else st = walk_entry(w, path);
        free(path);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return st;
}

TgStatus tg_corpus_walk(const char *dir, CorpusFileFn fn, CorpusSkipFn skipped, void *ctx) {
    Walk w = {.fn = fn, .skipped = skipped, .ctx = ctx};
    struct stat sb;
    TgStatus st = stat(dir, &sb) == 0 ? walk_folder(&w, dir, &sb, false)
                                      : tg_fail(TG_ERR_IO, "cannot open corpus folder %s: %s", dir, strerror(errno));
    for (size_t i = 0; i < w.n_seen; i++) free(w.seen[i].path);
    free(w.seen);
    return st;
}

const char *tg_corpus_default_path(void) {
    const char *env = getenv("TAPEGRAD_DEFAULT_CORPUS");
    return env && *env ? env : TG_CORPUS_DEFAULT_PATH;
}

TgStatus tg_corpus_read_info(const char *path, char **buf, size_t *len, TgCorpusInfo *info_out) {
    *buf = NULL;
    *len = 0;
    TgCorpusInfo local;
    TgCorpusInfo *info = info_out ? info_out : &local;
    memset(info, 0, sizeof *info);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return tg_fail(TG_ERR_IO,
                       "corpus path %s: %s; give a text file or a folder of text files (the "
                       "default, %s, comes with the Debian package fortunes)",
                       path, strerror(errno), tg_corpus_default_path());
    Reader r = {.info = info};
    TgStatus st;
    if (S_ISDIR(sb.st_mode)) {
        st = tg_corpus_walk(path, read_file_entry, NULL, &r);
        if (st == TG_OK && r.len == 0) {
            if (info->files_binary > 0)
                st = tg_fail(TG_ERR_FORMAT,
                             "corpus folder %s holds no text: all %zu non-empty files look binary "
                             "(first: %s); give a folder of text files",
                             path, info->files_binary, info->first_binary);
            else
                st = tg_fail(TG_ERR_FORMAT,
                             "corpus folder %s is empty: it holds no non-empty files (hidden files "
                             "and names ending in .dat or .u8 are skipped)",
                             path);
        }
    } else if (S_ISREG(sb.st_mode)) {
        bool binary, empty;
        char why[96];
        st = append_file(&r, path, &binary, &empty, why, sizeof why);
        if (st == TG_OK && empty)
            st = tg_fail(TG_ERR_FORMAT, "corpus file %s is empty: give a file with some text in it", path);
        else if (st == TG_OK && binary)
            st = tg_fail(TG_ERR_FORMAT,
                         "corpus file %s looks binary (%s), not text: give a UTF-8 or ASCII text file",
                         path, why);
        else if (st == TG_OK)
            info->files_read = 1;
    } else {
        st = tg_fail(TG_ERR_ARG, "corpus path %s is neither a regular file nor a folder", path);
    }
    if (st != TG_OK) {
        free(r.data);
        return st;
    }
    reserve(&r, 1);
    r.data[r.len] = '\0';
    *buf = r.data;
    *len = r.len;
    return TG_OK;
}

TgStatus tg_corpus_read(const char *path, char **buf, size_t *len) {
    return tg_corpus_read_info(path, buf, len, NULL);
}
