#include "tapegrad/error.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/setting_names.h"

enum { TG_MSG_CAP = 2048 };
static _Thread_local char tg_message[TG_MSG_CAP];

TgStatus tg_fail(TgStatus status, const char *fmt, ...) {
    /* formatted aside first: the arguments may include tg_error_message() itself */
    char message[TG_MSG_CAP], named[TG_MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    snprintf(tg_message, sizeof tg_message, "%s", tg_setting_names(message, named, sizeof named));
    return status;
}

TgStatus tg_fail_context(TgStatus status, const char *fmt, ...) {
    char prefix[TG_MSG_CAP], old[TG_MSG_CAP], named[TG_MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    const char *named_prefix = tg_setting_names(prefix, named, sizeof named);
    memcpy(old, tg_message, sizeof old);
    size_t n = strlen(named_prefix);
    if (n > TG_MSG_CAP - 3) n = TG_MSG_CAP - 3;
    memcpy(tg_message, named_prefix, n);
    memcpy(tg_message + n, ": ", 2);
    size_t rest = TG_MSG_CAP - n - 3, len = strlen(old);
    if (len > rest) len = rest;
    memcpy(tg_message + n + 2, old, len);
    tg_message[n + 2 + len] = '\0';
    return status;
}

const char *tg_error_message(void) { return tg_message; }
void tg_error_clear(void) { tg_message[0] = '\0'; }

const char *tg_status_name(TgStatus status) {
    switch (status) {
    case TG_OK: return "ok";
    case TG_ERR_ARG: return "invalid argument";
    case TG_ERR_IO: return "I/O error";
    case TG_ERR_FORMAT: return "malformed file";
    case TG_ERR_MISMATCH: return "mismatch";
    case TG_ERR_NUMERIC: return "non-finite value";
    case TG_ERR_NOMEM: return "out of memory";
    case TG_ERR_INTERRUPTED: return "interrupted";
    }
    return "unknown error";
}

/* The default handler: the message to file descriptor 2 (unbuffered, safe however broken the
 * process is), then abort() follows in the caller. */
static void write_to_fd2(const char *message) {
    size_t len = strlen(message);
    while (len > 0) {
        ssize_t n = write(STDERR_FILENO, message, len);
        if (n <= 0) return;
        message += n, len -= (size_t)n;
    }
}

static _Atomic(TgAbortHandler) abort_handler;

TgAbortHandler tg_set_abort_handler(TgAbortHandler handler) {
    TgAbortHandler old = atomic_exchange(&abort_handler, handler);
    return old ? old : write_to_fd2;
}

static _Noreturn void abort_with(const char *head, const char *fmt, va_list ap) {
    char message[TG_MSG_CAP + 512];
    size_t n = (size_t)snprintf(message, sizeof message, "%s", head);
    if (n < sizeof message) vsnprintf(message + n, sizeof message - n, fmt, ap);
    n = strlen(message);
    if (n + 1 < sizeof message) message[n] = '\n', message[n + 1] = '\0';
    TgAbortHandler handler = atomic_load(&abort_handler);
    (handler ? handler : write_to_fd2)(message);
    abort();
}

void tg_abort_at(const char *file, int line, const char *fmt, ...) {
    char head[512];
    snprintf(head, sizeof head, "tapegrad: internal error at %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    abort_with(head, fmt, ap);
}

void tg_abort_check(const char *file, int line, const char *cond, const char *fmt, ...) {
    char head[512];
    snprintf(head, sizeof head, "tapegrad: internal error at %s:%d: check failed: %.200s -- ", file, line, cond);
    va_list ap;
    va_start(ap, fmt);
    abort_with(head, fmt, ap);
}

void *tg_malloc_at(size_t size, const char *file, int line) {
    void *p = malloc(size ? size : 1);
    if (!p) tg_abort_at(file, line, "out of memory allocating %zu bytes", size);
    return p;
}

void *tg_calloc_at(size_t n, size_t size, const char *file, int line) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) tg_abort_at(file, line, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *tg_realloc_at(void *p, size_t size, const char *file, int line) {
    void *q = realloc(p, size ? size : 1);
    if (!q) tg_abort_at(file, line, "out of memory reallocating to %zu bytes", size);
    return q;
}

int tg_enum_index(const char *const *names, int count, const char *text) {
    for (int i = 0; text && i < count; i++)
        if (strcmp(text, names[i]) == 0) return i;
    return -1;
}
