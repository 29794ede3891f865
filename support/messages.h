/* What a long library call has to tell a person (what it prepares, the model it built, notes,
 * warnings) goes to the caller's sink, one message at a time: the library writes to no stream of
 * its own and decides nothing about where text goes. The program formats and prints (cli/); a
 * test may collect the messages; a NULL sink drops them.
 *
 * A message is one line of plain text without its final newline (a few, such as a table, hold
 * several lines). Notes and warnings carry no "note:" or "warning:" prefix: the level says it. */
#ifndef TAPEGRAD_SUPPORT_MESSAGES_H
#define TAPEGRAD_SUPPORT_MESSAGES_H

typedef enum {
    TG_MESSAGE_INFO,    /* what is happening: "corpus: 2576674 bytes from 43 files ..." */
    TG_MESSAGE_NOTE,    /* worth knowing, nothing wrong: "the run already did 50 steps; ..." */
    TG_MESSAGE_WARNING, /* something did not work and the call went on without it */
} TgMessageLevel;

typedef struct TgMessageSink {
    void (*emit)(void *ctx, TgMessageLevel level, const char *text);
    void *ctx;
} TgMessageSink;

/* Formats a message (printf-style) and hands it to sink->emit; nothing when sink or its emit is
 * NULL. A message longer than 4 KiB is cut there. */
void tg_message_emit(const TgMessageSink *sink, TgMessageLevel level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
