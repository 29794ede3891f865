#include "support/messages.h"

#include <stdarg.h>
#include <stdio.h>

#include "support/setting_names.h"

void tg_message_emit(const TgMessageSink *sink, TgMessageLevel level, const char *fmt, ...) {
    if (!sink || !sink->emit) return;
    char text[4096], named[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    sink->emit(sink->ctx, level, tg_setting_names(text, named, sizeof named));
}
