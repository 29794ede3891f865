/* Reading a training corpus: one text file, or a folder of text files.
 *
 * A folder is walked depth-first with the entries of each folder in byte-wise (strcmp) name
 * order, symbolic links followed (tg_corpus_walk). Skipped: hidden entries (names starting with '.'),
 * names ending in ".dat" or ".u8" (the index files and UTF-8 symlinks of fortune databases), a
 * link to a folder already read (no cycles), anything that is neither a regular file nor a folder,
 * empty files, and binary files (see tg_corpus_is_binary; they are counted in TgCorpusInfo so the
 * caller can warn). Files are joined in that order, with a '\n' added after a file that does not
 * end in one. Fortune files' '%' record separator lines are kept as they are.
 *
 * Failures (each with a message naming the path and what to do): a missing path, a file that
 * cannot be read, a symbolic link whose target is missing, a corpus with no bytes, and a corpus
 * whose files are all binary.
 */
#ifndef TAPEGRAD_DATA_CORPUS_H
#define TAPEGRAD_DATA_CORPUS_H

#include <stdbool.h>
#include <stddef.h>

#include "tapegrad/error.h"

/* Debian package `fortunes` (and `fortunes-min`) installs its plain-text files here. */
#define TG_CORPUS_DEFAULT_PATH "/usr/share/games/fortunes"
/* The corpus used when none is given: $TAPEGRAD_DEFAULT_CORPUS when it is set and not empty,
 * else TG_CORPUS_DEFAULT_PATH. CI points the variable at a missing path while the test suite runs,
 * so a test that silently reads the installed corpus fails there. */
const char *tg_corpus_default_path(void);

typedef struct TgCorpusInfo {
    size_t files_read;           /* text files that went into the corpus */
    size_t files_empty;          /* skipped: no bytes */
    size_t files_binary;         /* skipped: binary */
    char first_binary[1024];     /* path of the first binary file skipped ("" if none) */
} TgCorpusInfo;

/* Reads the corpus at `path` into a malloc'ed buffer (*buf, caller frees; NUL-terminated for
 * convenience, the terminator not counted in *len). On failure *buf is NULL. */
TgStatus tg_corpus_read(const char *path, char **buf, size_t *len);
/* Same, and fills *info (which may be NULL). */
TgStatus tg_corpus_read_info(const char *path, char **buf, size_t *len, TgCorpusInfo *info);

/* The binary rule: a NUL byte within the first 8192 bytes (as git and grep decide), or more
 * than 30% of all bytes being control bytes that text does not use: 0x00-0x06, 0x0E-0x1A,
 * 0x1C-0x1F and 0x7F (so TAB, LF, CR, VT, FF, BEL, backspace and ESC, which fortune files and
 * ANSI art use, count as text, as do all bytes >= 0x80). An empty buffer is not binary. */
bool tg_corpus_is_binary(const char *bytes, size_t len);

/* Whether a folder entry of this name is skipped (hidden, *.dat, *.u8). */
bool tg_corpus_skipped_name(const char *name);

/* What tg_corpus_walk leaves out of a folder, besides the files it hands over. */
typedef enum {
    TG_CORPUS_SKIP_NAME,         /* a hidden name, *.dat or *.u8 */
    TG_CORPUS_SKIP_NOT_FILE,     /* a FIFO, socket or device, or a symbolic link to one: never opened */
    TG_CORPUS_SKIP_FOLDER_AGAIN, /* a folder already entered, reached again through a link (a cycle, or twice) */
    TG_CORPUS_SKIP_KINDS
} TgCorpusSkip;
typedef TgStatus (*CorpusFileFn)(void *ctx, const char *path);
/* what: "a FIFO", "a link to a character device", "a link to a folder already read, DIR/sub";
 * "" for a skipped name */
typedef void (*CorpusSkipFn)(void *ctx, const char *path, TgCorpusSkip why, const char *what);

/* Calls fn(ctx, path) for every file of the folder `dir` in the order above, stopping at the first
 * status that is not TG_OK, which it returns, and skipped(ctx, ...) (may be NULL) for every entry
 * it leaves out. Symbolic links are followed, to files and to folders alike; a link to a folder
 * already entered is skipped (so a cycle ends), and a link that cannot be followed (its target
 * is missing: a missing shard) is an error naming it and its target. Nothing but lstat and stat
 * touches an entry before fn is called, so a FIFO or a device never blocks the walk. */
TgStatus tg_corpus_walk(const char *dir, CorpusFileFn fn, CorpusSkipFn skipped, void *ctx);

#endif
