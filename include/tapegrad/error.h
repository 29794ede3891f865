/* Errors with context.
 *
 * Two kinds of failure, two mechanisms:
 *  - Anything user input can cause (a flag, a file, a config) returns a TgStatus and leaves a
 *    message with context in a thread-local buffer; the CLI prints it once and exits non-zero.
 *  - Broken internal invariants (shape mismatch inside the engine) abort with file:line.
 */
#ifndef TG_ERROR_H
#define TG_ERROR_H

#include <stdarg.h>
#include <stddef.h>

#pragma GCC visibility push(default)

/* An enum whose values come from one X-macro list, X(ID, "name", ...), takes its other forms from
 * the same list: TG_ENUM_CHOICES(LIST) is "a|b|c" (a flag's choices, named by its parse's error),
 * {LIST(TG_ENUM_NAME)} the array of its names, in the values' order, and TG_ENUM_DEFINE (below)
 * its name and parse functions. */
#define TG_ENUM_FIRST_(name, ...) name
#define TG_ENUM_CHOICE(id, ...) "|" TG_ENUM_FIRST_(__VA_ARGS__, ~)
#define TG_ENUM_CHOICES(list) (&(list(TG_ENUM_CHOICE))[1])
#define TG_ENUM_NAME(id, ...) TG_ENUM_FIRST_(__VA_ARGS__, ~),

typedef enum {
    TG_OK = 0,
    TG_ERR_ARG,      /* bad flag, value or config */
    TG_ERR_IO,       /* open/read/write/rename failed */
    TG_ERR_FORMAT,   /* file exists but its contents are malformed */
    TG_ERR_MISMATCH, /* well-formed but does not match what was expected */
    TG_ERR_NUMERIC,  /* NaN/Inf */
    TG_ERR_NOMEM,
    TG_ERR_INTERRUPTED,
} TgStatus;

/* Sets the thread's message (printf-style) and returns `status`, so callers can write
 * `return tg_fail(TG_ERR_IO, "cannot open %s: %s", path, strerror(errno));`. */
TgStatus tg_fail(TgStatus status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The name and parse functions of an enum of an X-macro list (above), declared in its header with
 * TG_ENUM_DECLARE(Type, fn) and defined in one .c with TG_ENUM_DEFINE(Type, fn, LIST, COUNT, "what"):
 *   const char *fn_name(Type value)                "?" for a value past the list
 *   TgStatus fn_parse(const char *text, Type *out) TG_ERR_ARG for any other text:
 *                                                  "unknown what 'text'; the choices are a|b|c" */
#define TG_ENUM_DECLARE(Type, fn)                                                                                      \
    const char *fn##_name(Type value);                                                                                 \
    TgStatus fn##_parse(const char *text, Type *out)
#define TG_ENUM_DEFINE(Type, fn, list, count, what)                                                                    \
    static const char *const fn##_names_[] = {list(TG_ENUM_NAME)};                                                     \
    _Static_assert(sizeof fn##_names_ / sizeof fn##_names_[0] == (count), "one name per value of " #Type);             \
    const char *fn##_name(Type value) { return (unsigned)value < (unsigned)(count) ? fn##_names_[value] : "?"; }       \
    TgStatus fn##_parse(const char *text, Type *out) {                                                                 \
        int i = tg_enum_index(fn##_names_, (int)(count), text);                                                        \
        if (i < 0)                                                                                                     \
            return tg_fail(TG_ERR_ARG, "unknown %s '%s'; the choices are %s", what, text ? text : "",                  \
                           TG_ENUM_CHOICES(list));                                                                     \
        *out = (Type)i;                                                                                                \
        return TG_OK;                                                                                                  \
    }
/* The index of `text` among count names, -1 when it is none of them (or NULL). */
int tg_enum_index(const char *const *names, int count, const char *text);

/* Prepends context to the current message: "loading ckpt.tgz: " + old message. */
TgStatus tg_fail_context(TgStatus status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The calling thread's message of its last failure ("" when none): valid until that thread's
 * next failure or tg_error_clear. Each thread has its own. */
const char *tg_error_message(void);
/* "I/O error", "malformed file", ...: a static string. */
const char *tg_status_name(TgStatus status);
/* Empties the calling thread's message. */
void tg_error_clear(void);

/* A broken invariant (what TG_CHECK and the tg_malloc family catch) ends the process: the
 * message "tapegrad: internal error at FILE:LINE: ...\n" goes to the abort handler, then abort().
 * These two never return. */
_Noreturn void tg_abort_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

_Noreturn void tg_abort_check(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Receives the message of a broken invariant just before abort(); abort() follows when it
 * returns. The default writes it to file descriptor 2: the one thing the library writes on its
 * own, and only on its way out. A program that logs elsewhere sets its own. */
typedef void (*TgAbortHandler)(const char *message);
/* Installs `handler` (NULL: the default) for every thread; returns the previous one. */
TgAbortHandler tg_set_abort_handler(TgAbortHandler handler);

/* Internal invariant: aborts with file:line, the condition and the formatted message when false. */
#define TG_CHECK(cond, ...)                                                  \
    do {                                                                     \
        if (!(cond)) tg_abort_check(__FILE__, __LINE__, #cond, __VA_ARGS__); \
    } while (0)

#define TG_TRY(expr)                         \
    do {                                     \
        TgStatus tg_try_status_ = (expr);   \
        if (tg_try_status_ != TG_OK) return tg_try_status_; \
    } while (0)

/* malloc/calloc that abort on failure with file:line (out of memory is not recoverable here). */
void *tg_malloc_at(size_t size, const char *file, int line);
void *tg_calloc_at(size_t n, size_t size, const char *file, int line);
void *tg_realloc_at(void *p, size_t size, const char *file, int line);
#define tg_malloc(size) tg_malloc_at((size), __FILE__, __LINE__)
#define tg_calloc(n, size) tg_calloc_at((n), (size), __FILE__, __LINE__)
#define tg_realloc(p, size) tg_realloc_at((p), (size), __FILE__, __LINE__)

#pragma GCC visibility pop

#endif
