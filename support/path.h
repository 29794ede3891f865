/* Building paths. Every path tapegrad builds lives in a buffer of TG_PATH_CAP bytes (the system's
 * own limit: a longer one could not be opened anyway) and is made by these functions, which refuse
 * a path that does not fit, with a message naming it, instead of cutting it short: a cut path
 * names another file. */
#ifndef TAPEGRAD_SUPPORT_PATH_H
#define TAPEGRAD_SUPPORT_PATH_H

#include <stddef.h>

#include "tapegrad/error.h"
#include "tapegrad/limits.h"

/* out = dir "/" name (dir "" or "." gives name alone). TG_ERR_ARG when it needs cap bytes or more. */
TgStatus tg_path_join(char *out, size_t cap, const char *dir, const char *name);
/* out = the formatted text (printf-style), for paths of other shapes ("%s.%d.tmp"). TG_ERR_ARG
 * when it does not fit. */
TgStatus tg_path_format(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The folder part of a path: "a/b/c" -> "a/b", "c" -> ".", "/c" -> "/"; out may be path itself.
 * Never longer than path. */
void tg_path_folder(const char *path, char *out, size_t cap);

#endif
