/* Options from one table: command-line flags, their help, range checks, and files of saved
 * options, all driven by the same description.
 *
 * A program describes the options of a struct once, as OptSpec entries (flag, type, field
 * offset, help, allowed range or choices, group bits); then
 *   opt_parse         fills the struct from argv and records which flags were given;
 *   opt_print_help    prints the flags with their help and defaults;
 *   opt_check         checks values against their ranges and choices (from argv or from a file
 *                     alike: a file is no more trusted than a flag);
 *   opt_write / opt_read   store a group of options as "--flag value" lines and read them back;
 *   opt_equal / opt_format compare and print single values.
 * Functions return a status with a message naming the flag and what it accepts; nothing here
 * prints except opt_print_help.
 */
#ifndef TAPEGRAD_OPTIONS_H
#define TAPEGRAD_OPTIONS_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tapegrad/error.h"

typedef enum { OPT_BOOL, OPT_INT, OPT_INT64, OPT_DOUBLE, OPT_STRING } OptType;

/* Allowed numbers: [lo, hi], either end open when *_open is set. */
typedef struct {
    double lo, hi;
    bool lo_open, hi_open;
} OptRange;

#define OPT_ANY ((OptRange){-INFINITY, INFINITY, false, false})
#define OPT_POSITIVE ((OptRange){0, INFINITY, true, false})
#define OPT_NON_NEGATIVE ((OptRange){0, INFINITY, false, false})
#define OPT_FRACTION ((OptRange){0, 1, true, true}) /* (0, 1) */
#define OPT_BETWEEN(lo, hi) ((OptRange){(lo), (hi), false, false})

typedef struct OptSpec {
    const char *flag;          /* "--steps" */
    OptType type;
    size_t offset;             /* of the field in the options struct */
    const char *help;          /* one line */
    OptRange range;            /* numbers */
    const char *choices;       /* strings: "char|bpe", or NULL for any */
    unsigned group;            /* the owner's bits: which options a file holds, which a resume may change */
    const char *default_text;  /* shown as the default instead of the struct's value, or NULL */
} OptSpec;

/* OPT(Struct, field, "--flag", TYPE, "help", range, choices, group, default_text) */
/* A macro's value as a string literal, for a default_text derived from the constant it shows. */
#define OPT_STRINGIFY(x) OPT_STRINGIFY_(x)
#define OPT_STRINGIFY_(x) #x
#define OPT(Struct, field, flag, type, help, range, choices, group, default_text) \
    {flag, type, offsetof(Struct, field), help, range, choices, group, default_text}

/* Bit i: the i-th option of a table (at most 64 per table). */
typedef uint64_t OptSet;
#define OPT_BIT(i) ((OptSet)1 << (i))

typedef struct OptTable {
    const char *command;       /* "train": messages read "tapegrad train: ..." */
    const char *usage;         /* after "usage: tapegrad <command> " */
    const OptSpec *specs;
    int count;
    int max_positional;        /* arguments that are not flags (0: none allowed) */
} OptTable;

/* Fills opts from argv[1..argc), sets the bits of the flags given, collects positional
 * arguments (up to t->max_positional) into positional[]. --help/-h sets *help and stops.
 * TG_ERR_ARG with a one-line message for an unknown flag, a missing or malformed value, or an
 * out-of-range one. */
TgStatus opt_parse(const OptTable *t, void *opts, OptSet *given, int argc, char **argv, const char **positional,
                    int *n_positional, bool *help);
/* Prints "usage: ..." and one line per flag with its help and default (from `defaults`). */
void opt_print_help(FILE *f, const OptTable *t, const void *defaults);
/* Checks the options in `which` against their ranges and choices. */
TgStatus opt_check(const OptTable *t, const void *opts, OptSet which);
/* Writes the options of `group` (all bits of group present in spec->group) to path, atomically. */
TgStatus opt_write(const OptTable *t, const void *opts, unsigned group, const char *path);
/* Reads "--flag value" lines (also "flag value", with '_' for '-') from path into opts, for the
 * options of `group` that are not in `keep` (those keep their current value); unknown flags and
 * options of other groups are skipped. Sets the bits of the options read into *read. Every value
 * is range-checked. String values point into storage owned by `strings` (freed by
 * opt_strings_free). TG_ERR_IO when the file cannot be opened, TG_ERR_FORMAT for a bad line. */
typedef struct {
    char **items;
    int count, cap;
} OptStrings;
TgStatus opt_read(const OptTable *t, void *opts, unsigned group, OptSet keep, const char *path, OptSet *read,
                   OptStrings *strings);
void opt_strings_free(OptStrings *strings);

/* Index of a flag in the table, or -1. */
int opt_find(const OptTable *t, const char *flag);
/* The value of spec i in opts, as text (strings as they are; NULL as ""). */
void opt_format(const OptTable *t, int i, const void *opts, char *buf, size_t cap);
/* Whether spec i has the same value in a and b. */
bool opt_equal(const OptTable *t, int i, const void *a, const void *b);

#endif
