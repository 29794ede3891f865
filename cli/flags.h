/* The command line of a subcommand, read with its option table (support/options.h): the table
 * describes each flag once; here argv fills the struct and --help lists the flags. */
#ifndef TAPEGRAD_CLI_FLAGS_H
#define TAPEGRAD_CLI_FLAGS_H

#include <stdbool.h>
#include <stdio.h>

#include "support/options.h"

/* Fills opts from argv[1..argc), sets the bits of the flags given, collects positional
 * arguments (up to t->max_positional) into positional[]. --help/-h sets *help and stops.
 * TG_ERR_ARG with a one-line message for an unknown flag (naming the nearest known one), a
 * missing or malformed value, or an out-of-range one. */
TgStatus cli_flags_parse(const TgOptTable *t, void *opts, TgOptSet *given, int argc, char **argv,
                         const char **positional, int *n_positional, bool *help);
/* Prints "usage: ..." and one line per flag with its help and default (from `defaults`). */
void cli_flags_print_help(FILE *f, const TgOptTable *t, const void *defaults);

#endif
