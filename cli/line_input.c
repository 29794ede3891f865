/* Lines a person types: libedit on a terminal, getline(3) otherwise (cli/line_input.h). */
#include "cli/line_input.h"

#include <errno.h>
#include <histedit.h>
#include <langinfo.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad/error.h"

enum { HISTORY_LINES = 1000 };

struct CliLines {
    EditLine *el; /* NULL: plain lines from stdin */
    History *history;
    const char *prompt;
    char *buffer; /* the plain reader's line */
    size_t cap;
    int ctrl_c;   /* set by the Ctrl-C key: -1 none, 0 on an empty line, 1 on a line with text */
};

static char *prompt_of(EditLine *el) {
    CliLines *in = NULL;
    el_get(el, EL_CLIENTDATA, &in);
    return (char *)in->prompt;
}

/* The Ctrl-C key: notes whether the line held text, and ends the edit (el_gets returns at once). */
static unsigned char ctrl_c_key(EditLine *el, int ch) {
    (void)ch;
    CliLines *in = NULL;
    el_get(el, EL_CLIENTDATA, &in);
    const LineInfo *li = el_line(el);
    in->ctrl_c = li->lastchar > li->buffer;
    return CC_NEWLINE;
}

CliLines *cli_lines_open(bool editing, const char *prompt) {
    CliLines *in = tg_calloc(1, sizeof *in);
    in->prompt = prompt;
    if (!editing) return in;
    /* libedit reads and shows UTF-8 when the character type locale is UTF-8; a C locale would show
     * every byte past ASCII as an octal escape and split characters */
    if (!setlocale(LC_CTYPE, "") || strcmp(nl_langinfo(CODESET), "UTF-8") != 0) setlocale(LC_CTYPE, "C.UTF-8");
    in->el = el_init("tapegrad", stdin, stdout, stderr);
    if (!in->el) return in; /* no terminal description: plain lines still work */
    in->history = history_init();
    HistEvent ev;
    history(in->history, &ev, H_SETSIZE, HISTORY_LINES);
    history(in->history, &ev, H_SETUNIQUE, 1);
    el_set(in->el, EL_CLIENTDATA, in);
    el_set(in->el, EL_PROMPT, prompt_of);
    el_set(in->el, EL_EDITOR, "emacs");
    el_set(in->el, EL_HIST, history, in->history);
    el_set(in->el, EL_SIGNAL, 1); /* the terminal restored on a signal that ends the program */
    /* while a line is edited Ctrl-C is a key that drops it (no signal), as in a shell */
    el_set(in->el, EL_SETTY, "-d", "-isig", NULL);
    /* the wide call keeps the two names as given; the narrow one copies them and never frees them */
    el_wset(in->el, EL_ADDFN, L"tg-drop-line", L"drop the line (Ctrl-C)", ctrl_c_key);
    el_set(in->el, EL_BIND, "^C", "tg-drop-line", NULL);
    el_source(in->el, NULL); /* the user's ~/.editrc */
    return in;
}

static size_t without_line_break(const char *line, size_t len) {
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
    return len;
}

CliLineKind cli_lines_read(CliLines *in, const char **line, size_t *len, bool *had_text) {
    *line = "", *len = 0, *had_text = false;
    if (!in->el) {
        if (in->prompt) fputs(in->prompt, stdout), fflush(stdout);
        errno = 0;
        ssize_t got = getline(&in->buffer, &in->cap, stdin);
        if (got < 0) return errno == EINTR ? CLI_LINE_INTERRUPTED : CLI_LINE_END;
        *line = in->buffer, *len = without_line_break(in->buffer, (size_t)got);
        in->buffer[*len] = '\0';
        return CLI_LINE_TEXT;
    }
    in->ctrl_c = -1;
    int count = 0;
    errno = 0;
    const char *got = el_gets(in->el, &count);
    if (in->ctrl_c >= 0) {
        *had_text = in->ctrl_c == 1;
        return CLI_LINE_INTERRUPTED;
    }
    if (!got || count <= 0) return errno == EINTR ? CLI_LINE_INTERRUPTED : CLI_LINE_END;
    size_t n = without_line_break(got, (size_t)count);
    if (n + 1 > in->cap) in->buffer = tg_realloc(in->buffer, in->cap = n + 1);
    memcpy(in->buffer, got, n);
    in->buffer[n] = '\0';
    if (n > 0) {
        HistEvent ev;
        history(in->history, &ev, H_ENTER, in->buffer);
    }
    *line = in->buffer, *len = n;
    return CLI_LINE_TEXT;
}

void cli_lines_close(CliLines *in) {
    if (!in) return;
    if (in->el) el_end(in->el);
    if (in->history) history_end(in->history);
    free(in->buffer);
    free(in);
}
