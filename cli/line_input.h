/* Lines a person types, for `tapegrad chat`: on a terminal through libedit (line editing with the
 * usual Emacs keys, arrows, history of this session's lines, ~/.editrc honoured), from a pipe or a
 * file as plain lines.
 *
 * On a terminal, Ctrl-C while a line is being edited is a key, not a signal: it drops the line and
 * cli_lines_read says so (CLI_LINE_INTERRUPTED, with whether the line held text). Outside the
 * editor (while the program writes a reply) Ctrl-C is SIGINT as always, for the caller to handle. */
#ifndef TAPEGRAD_CLI_LINE_INPUT_H
#define TAPEGRAD_CLI_LINE_INPUT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct CliLines CliLines;

typedef enum {
    CLI_LINE_TEXT,        /* a line (without its line break) */
    CLI_LINE_END,         /* end of input: Ctrl-D on an empty line, or the pipe's end */
    CLI_LINE_INTERRUPTED, /* Ctrl-C (or SIGINT) while the line was edited: the line is dropped */
} CliLineKind;

/* Reads stdin: edited when `editing` (stdin and stdout are a terminal), prompted by `prompt`. */
CliLines *cli_lines_open(bool editing, const char *prompt);
/* The next line: *line stays valid until the next call. For CLI_LINE_INTERRUPTED, *had_text says
 * whether the dropped line held any text. Lines with text go into the history. */
CliLineKind cli_lines_read(CliLines *in, const char **line, size_t *len, bool *had_text);
void cli_lines_close(CliLines *in);

#endif
