/* What a long library call has to tell a person (what it prepares, the model it built, notes,
 * warnings) goes to the caller's sink, one message at a time: the library writes to no stream of
 * its own and decides nothing about where text goes. The program formats and prints (cli/); a
 * test may collect the messages; a NULL sink drops them.
 *
 * A message is one line of plain text without its final newline (a few, such as a table, hold
 * several lines). Notes and warnings carry no "note:" or "warning:" prefix: the level says it. */
#ifndef TAPEGRAD_MESSAGES_H
#define TAPEGRAD_MESSAGES_H

typedef enum {
    MESSAGE_INFO,    /* what is happening: "corpus: 2576674 bytes from 43 files ..." */
    MESSAGE_NOTE,    /* worth knowing, nothing wrong: "the run already did 50 steps; ..." */
    MESSAGE_WARNING, /* something did not work and the call went on without it */
} MessageLevel;

typedef struct MessageSink {
    void (*emit)(void *ctx, MessageLevel level, const char *text);
    void *ctx;
} MessageSink;

/* Formats a message (printf-style) and hands it to sink->emit; nothing when sink or its emit is
 * NULL. A message longer than 4 KiB is cut there. */
void message_emit(const MessageSink *sink, MessageLevel level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
