/* Options from one table: command-line flags, their help, range checks, and files of saved
 * options, all driven by the same description.
 *
 * A program describes the options of a struct once, as OptSpec entries (flag, type, field
 * offset, help, allowed range or choices, group bits); then
 *   opt_parse         fills the struct from argv and records which flags were given;
 *   opt_print_help    prints the flags with their help and defaults;
 *   opt_check         checks values against their ranges and choices (from argv or from a file
 *                     alike: a file is no more trusted than a flag);
 *   opt_write / opt_read   store a group of options as "--flag value" lines and read them back
 *                     (strictly: every line one known option of the group, once, and no byte a
 *                     text file of options never holds);
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

struct OptSpec;
/* A further check of a value beyond its range and choices (the form of a string, say), as a
 * status naming the flag; `field` points at the value in the options struct. */
typedef TgStatus (*OptValueCheck)(const struct OptSpec *spec, const void *field);

typedef struct OptSpec {
    const char *flag;          /* "--steps" */
    OptType type;
    size_t offset;             /* of the field in the options struct */
    const char *help;          /* one line */
    OptRange range;            /* numbers */
    const char *choices;       /* strings: "char|bpe", or NULL for any */
    unsigned group;            /* the owner's bits: which options a file holds, which a resume may change */
    const char *default_text;  /* shown as the default instead of the struct's value, or NULL */
    OptValueCheck check;       /* or NULL */
} OptSpec;

/* OPT(Struct, field, "--flag", TYPE, "help", range, choices, group, default_text) */
/* A macro's value as a string literal, for a default_text derived from the constant it shows. */
#define OPT_STRINGIFY(x) OPT_STRINGIFY_(x)
#define OPT_STRINGIFY_(x) #x
#define OPT(Struct, field, flag, type, help, range, choices, group, default_text) \
    {flag, type, offsetof(Struct, field), help, range, choices, group, default_text, NULL}
/* The same with a further check of the value (OptValueCheck). */
#define OPT_CHECKED(Struct, field, flag, type, help, range, choices, group, default_text, check) \
    {flag, type, offsetof(Struct, field), help, range, choices, group, default_text, check}

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
/* Reads "--flag value" lines (also the older "flag value", with '_' for '-') from path into opts,
 * for the options of `group` that are not in `keep` (those keep their current value, but the
 * file's is checked all the same). Every line must be one option of the group, set once, its
 * value checked as the flag's is; a line with a NUL byte, an unknown flag (the message names the
 * nearest known one), an option of another group or one set twice is refused. *from (may be
 * NULL) receives which options were read and their lines. String values point into storage owned
 * by `strings` (freed by opt_strings_free). TG_ERR_IO when the file cannot be opened,
 * TG_ERR_FORMAT naming the file and line for anything wrong inside it. */
typedef struct {
    char **items;
    int count, cap;
} OptStrings;
typedef struct OptFileRead {
    OptSet read;      /* the options whose values were taken from the file */
    int line[64];     /* the line of each option in the file (0: not in it) */
} OptFileRead;
TgStatus opt_read(const OptTable *t, void *opts, unsigned group, OptSet keep, const char *path, OptFileRead *from,
                   OptStrings *strings);
/* A copy of s kept in `strings` until opt_strings_free. */
const char *opt_strings_keep(OptStrings *strings, const char *s);
void opt_strings_free(OptStrings *strings);

/* Parses `text` as a value of `spec` into its field of opts, checked as a flag's value is (a list
 * item can be parsed as its flag is: a spec with offset 0 and the item's variable as opts). */
TgStatus opt_parse_value(const OptSpec *spec, void *opts, const char *text);
/* Index of a flag in the table, or -1. */
int opt_find(const OptTable *t, const char *flag);
/* The flag of the table (among those of `group`: all bits present; 0 for any) closest to `name`
 * by edit distance, leading dashes aside, or NULL when none is close: for "did you mean". */
const char *opt_nearest(const OptTable *t, const char *name, unsigned group);
/* The value of spec i in opts, as text (strings as they are; NULL as ""). */
void opt_format(const OptTable *t, int i, const void *opts, char *buf, size_t cap);
/* Whether spec i has the same value in a and b. */
bool opt_equal(const OptTable *t, int i, const void *a, const void *b);

#endif
