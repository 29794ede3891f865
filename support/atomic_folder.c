#include "support/atomic_folder.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "support/atomic_file.h"
#include "support/path.h"

enum { SUFFIX_LETTERS = 6, OPEN_TRIES = 100 };

/* Six letters or digits for a temporary name: from the kernel's random bytes, else (a kernel
 * without getrandom) from the clock and the pid. Only uniqueness matters: mkdir refuses a name
 * that exists, and the next try draws again. */
static void random_suffix(char out[SUFFIX_LETTERS + 1]) {
    static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    unsigned char bytes[SUFFIX_LETTERS];
    if (getrandom(bytes, sizeof bytes, GRND_NONBLOCK) != (ssize_t)sizeof bytes) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        uint64_t x = (uint64_t)now.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)now.tv_sec ^ (uint64_t)getpid() << 32;
        for (int i = 0; i < SUFFIX_LETTERS; i++, x >>= 8) bytes[i] = (unsigned char)x;
    }
    for (int i = 0; i < SUFFIX_LETTERS; i++) out[i] = letters[bytes[i] % (sizeof letters - 1)];
    out[SUFFIX_LETTERS] = '\0';
}

TgStatus tg_atomic_folder_open(TgAtomicFolder *af, const char *path) {
    memset(af, 0, sizeof *af);
    TG_TRY(tg_path_format(af->path, sizeof af->path, "%s", path));
    size_t n = strlen(af->path);
    while (n > 1 && af->path[n - 1] == '/') af->path[--n] = '\0'; /* "data/ds/" is the folder data/ds */
    char temp[TG_PATH_CAP];
    int err = EEXIST;
    for (int i = 0; i < OPEN_TRIES && err == EEXIST; i++) {
        char suffix[SUFFIX_LETTERS + 1];
        random_suffix(suffix);
        TG_TRY(tg_path_format(temp, sizeof temp, "%s.tmp-%s", af->path, suffix));
        err = mkdir(temp, 0777) == 0 ? 0 : errno;
    }
    if (err) return tg_fail(TG_ERR_IO, "cannot create a folder beside %s: %s", af->path, strerror(err));
    memcpy(af->temp, temp, sizeof temp);
    return TG_OK;
}

TgStatus tg_atomic_folder_commit(TgAtomicFolder *af, const char *path, bool *taken) {
    if (taken) *taken = false;
    TG_CHECK(af->temp[0], "tg_atomic_folder_commit of a folder committed or abandoned");
    if (path) TG_TRY(tg_path_format(af->path, sizeof af->path, "%s", path));
    if (rename(af->temp, af->path) != 0) {
        int err = errno;
        if (taken) *taken = err == EEXIST || err == ENOTEMPTY;
        if (err == EEXIST || err == ENOTEMPTY)
            return tg_fail(TG_ERR_IO, "cannot rename %s to %s: %s exists and is not empty", af->temp, af->path,
                           af->path);
        return tg_fail(TG_ERR_IO, "cannot rename %s to %s: %s", af->temp, af->path, strerror(err));
    }
    af->temp[0] = '\0';
    tg_sync_parent_folder(af->path);
    return TG_OK;
}

void tg_atomic_folder_abandon(TgAtomicFolder *af) {
    if (!af->temp[0]) return;
    DIR *d = opendir(af->temp);
    const struct dirent *e;
    char file[TG_PATH_CAP];
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
            tg_path_join(file, sizeof file, af->temp, e->d_name) == TG_OK)
            (void)unlink(file);
    if (d) closedir(d);
    (void)rmdir(af->temp);
    af->temp[0] = '\0';
}
