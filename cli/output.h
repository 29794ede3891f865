/* What a training command prints, written so that training never waits for whoever reads it.
 *
 * A pipe nobody drains (`tapegrad train | less` left on one screen), a terminal that is gone, or
 * mpirun, which stops reading its ranks the moment it is told to end the job: a write(2) to any of
 * them can block for good, and a process blocked there cannot finish its step nor save when the
 * launcher's SIGTERM comes. So once cli_output_start has run, nothing is written to stdout or
 * stderr by the thread that trains: each text goes into a queue, and one thread per stream writes
 * its queue out.
 *
 *   - A reader that falls behind costs lines, never steps: past CLI_OUTPUT_QUEUE_MAX bytes waiting,
 *     new text is dropped and counted, and once the stream takes text again one line says how
 *     much was lost (the run's own log, RUN/log.txt, has all of it: cli/train_report.h).
 *   - A write that fails (EPIPE: the reader is gone; EIO: the terminal hung up; ENOSPC: stdout is
 *     a full disk) ends that stream for good: later text goes nowhere, and training goes on.
 *   - SIGPIPE is ignored by the whole program (cli/main.c), so a closed pipe is an error that a
 *     write returns, never a signal that ends a process holding unsaved work.
 *
 * Before cli_output_start, and after cli_output_finish, the same calls write through stdio at
 * once, so a subcommand uses one set of calls whatever mode the output is in. */
#ifndef TAPEGRAD_CLI_OUTPUT_H
#define TAPEGRAD_CLI_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { CLI_STDOUT, CLI_STDERR, CLI_STREAMS } CliStream;

/* What one stream's queue may hold: enough for a burst of lines, little next to a model. */
#define CLI_OUTPUT_QUEUE_MAX ((size_t)1 << 20)

/* At the program's start: a standard stream that the process was started without (`>&-`) gets a
 * stand-in, so that no file the program opens later takes its number and receives its text:
 * stdin reads /dev/null, stdout writes /dev/full (every write fails, and is reported as a closed
 * stdout), stderr writes /dev/null. */
void cli_output_guard_standard_streams(void);
/* Whether the stream was closed when the program started (it writes to a stand-in). */
bool cli_output_was_closed(CliStream stream);
/* From here on, stdout and stderr are written by threads of their own (stdio flushed first). */
void cli_output_start(void);
/* Waits until both queues are written out, or their streams failed, at most max_wait_s seconds
 * (negative: no bound), then writes through stdio again. Returns false when text was lost: dropped,
 * refused by a stream, or still waiting at the bound (its thread is left to the process's exit). */
bool cli_output_finish(double max_wait_s);
/* Queues (or, outside the threaded mode, writes) len bytes / a formatted text on a stream. */
void cli_output_write(CliStream stream, const char *text, size_t len);
void cli_output_printf(CliStream stream, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The errno with which the stream failed (0 while it works) and how many bytes it lost so far. */
int cli_output_error(CliStream stream);
uint64_t cli_output_lost(CliStream stream);

#endif
