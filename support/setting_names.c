/* Settings named in the library's messages, in the program's words (setting_names.h). */
#include "support/setting_names.h"

#include <stdbool.h>
#include <string.h>

static TgSettingNamer installed;

void tg_setting_namer_set(TgSettingNamer namer) { installed = namer; }

static bool is_name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }

/* The length of the `name` at p (p at its opening backquote), or 0 when p opens none. */
static size_t quoted_name(const char *p) {
    size_t n = 0;
    while (is_name_char(p[1 + n])) n++;
    return n > 0 && p[1 + n] == '`' ? n : 0;
}

const char *tg_setting_names(const char *text, char *buf, size_t cap) {
    if (!installed || !strchr(text, '`') || cap == 0) return text;
    size_t used = 0;
    for (const char *p = text; *p && used + 1 < cap;) {
        size_t n = *p == '`' ? quoted_name(p) : 0;
        const char *word = n ? installed(p + 1, n) : NULL;
        const char *from = word ? word : p;
        size_t len = word ? strlen(word) : n ? n + 2 : 1;
        if (used + len >= cap) len = cap - 1 - used;
        memcpy(buf + used, from, len);
        used += len;
        p += n ? n + 2 : 1;
    }
    buf[used] = '\0';
    return buf;
}
