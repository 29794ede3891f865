#include "lib/messages.h"

#include <stdarg.h>
#include <stdio.h>

void message_emit(const MessageSink *sink, MessageLevel level, const char *fmt, ...) {
    if (!sink || !sink->emit) return;
    char text[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    sink->emit(sink->ctx, level, text);
}
