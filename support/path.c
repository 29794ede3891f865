#include "support/path.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static TgStatus too_long(size_t needed, size_t cap, const char *start) {
    return tg_fail(TG_ERR_ARG, "the path %.80s... would be %zu bytes long, more than the %zu a path may have; use a "
                               "shorter folder name",
                   start, needed, cap - 1);
}

TgStatus tg_path_format(char *out, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    if (n < 0) return tg_fail(TG_ERR_ARG, "cannot format a path from '%s'", fmt);
    if ((size_t)n >= cap) {
        out[cap ? cap - 1 : 0] = '\0';
        return too_long((size_t)n, cap, out);
    }
    return TG_OK;
}

TgStatus tg_path_join(char *out, size_t cap, const char *dir, const char *name) {
    if (!dir[0] || strcmp(dir, ".") == 0) return tg_path_format(out, cap, "%s", name);
    size_t len = strlen(dir);
    const char *sep = dir[len - 1] == '/' ? "" : "/";
    return tg_path_format(out, cap, "%s%s%s", dir, sep, name);
}

void tg_path_folder(const char *path, char *out, size_t cap) {
    if (out != path) {
        size_t n = strlen(path);
        if (n >= cap) n = cap - 1;
        memmove(out, path, n);
        out[n] = '\0';
    }
    char *slash = strrchr(out, '/');
    if (slash == out) out[1] = '\0';
    else if (slash) *slash = '\0';
    else snprintf(out, cap, ".");
}
