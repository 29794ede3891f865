/* Options from one table: range checks and files of saved options (a run's run.txt and
 * train_options.txt), driven by the same description as the command line's flags.
 *
 * A program describes the options of a struct once, as TgOptSpec entries (flag, type, field
 * offset, help, allowed range or choices, group bits); then
 *   tg_opt_parse_value   sets one option from its text;
 *   tg_opt_check         checks values against their ranges and choices (from argv or from a file
 *                     alike: a file is no more trusted than a flag);
 *   tg_opt_write / tg_opt_read   store a group of options as "--flag value" lines and read them back
 *                     (strictly: every line one known option of the group, once, and no byte a
 *                     text file of options never holds);
 *   tg_opt_equal / tg_opt_format compare and print single values.
 * A TG_OPT_LIST option is a flag given any number of times (--eval-task A --eval-task B): each
 * value is appended to its TgOptList, one "--flag value" line each in a file.
 * Functions return a status with a message naming the flag and what it accepts; nothing here
 * prints. The CLI reads argv and prints the help from the same table (cli/flags.h).
 */
#ifndef TAPEGRAD_SUPPORT_OPTIONS_H
#define TAPEGRAD_SUPPORT_OPTIONS_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tapegrad/error.h"

/* TG_OPT_ENUM: an enum field (stored as an int) whose `choices` name its values 0, 1, ... in
 * order; the text is the name. TG_OPT_VALUE: a field of a type its `codec` reads and writes.
 * TG_OPT_LIST: a TgOptList of strings, one per time the flag is given. */
typedef enum {
    TG_OPT_BOOL,
    TG_OPT_INT,
    TG_OPT_INT64,
    TG_OPT_DOUBLE,
    TG_OPT_STRING,
    TG_OPT_ENUM,
    TG_OPT_VALUE,
    TG_OPT_LIST
} TgOptType;

/* The values of a repeatable flag, in the order given. Parsing a value appends it (refused past
 * TG_OPT_LIST_MAX); the first time a command line gives the flag, and the first line of a file that
 * holds it, replace what the list held (a default, or the values a file saved). The strings point
 * into their text (argv, or storage a TgOptStrings keeps), as a TG_OPT_STRING's do. */
enum { TG_OPT_LIST_MAX = 16 };
typedef struct TgOptList {
    const char *items[TG_OPT_LIST_MAX];
    int count;
} TgOptList;

/* Allowed numbers: [lo, hi], either end open when *_open is set. */
typedef struct {
    double lo, hi;
    bool lo_open, hi_open;
} TgOptRange;

#define TG_OPT_ANY ((TgOptRange){-INFINITY, INFINITY, false, false})
#define TG_OPT_POSITIVE ((TgOptRange){0, INFINITY, true, false})
#define TG_OPT_NON_NEGATIVE ((TgOptRange){0, INFINITY, false, false})
#define TG_OPT_FRACTION ((TgOptRange){0, 1, true, true}) /* (0, 1) */
#define TG_OPT_BETWEEN(lo, hi) ((TgOptRange){(lo), (hi), false, false})

struct TgOptSpec;
/* A further check of a value beyond its range and choices (the form of a string, say), as a
 * status naming the flag; `field` points at the value in the options struct. */
typedef TgStatus (*OptValueCheck)(const struct TgOptSpec *spec, const void *field);

/* How a TG_OPT_VALUE field is read from text and written back. The text given to parse outlives
 * the field (argv, or storage a TgOptStrings keeps), so the value may point into it. */
typedef struct TgOptCodec {
    size_t size; /* of the field */
    TgStatus (*parse)(const struct TgOptSpec *spec, void *field, const char *text);
    void (*format)(const void *field, char *buf, size_t cap); /* "" for a value left unset */
    bool (*equal)(const void *a, const void *b);
} TgOptCodec;

typedef struct TgOptSpec {
    const char *flag;          /* "--steps" */
    TgOptType type;
    size_t offset;             /* of the field in the options struct */
    const char *help;          /* one line */
    TgOptRange range;            /* numbers */
    const char *choices;       /* strings: "char|bpe", or NULL for any */
    unsigned group;            /* the owner's bits: which options a file holds, which a resume may change */
    const char *default_text;  /* shown as the default instead of the struct's value, or NULL */
    OptValueCheck check;       /* or NULL */
    const TgOptCodec *codec;   /* TG_OPT_VALUE's */
    const char *field;         /* the field's path in the options struct ("schedule.batch"); its last part is the
                                * setting's name, which the library's messages write as `batch` */
} TgOptSpec;

/* TG_OPT(Struct, field, "--flag", TYPE, "help", range, choices, group, default_text) */
/* A macro's value as a string literal, for a default_text derived from the constant it shows. */
#define TG_OPT_STRINGIFY(x) TG_OPT_STRINGIFY_(x)
#define TG_OPT_STRINGIFY_(x) #x
#define TG_OPT(Struct, field, flag, type, help, range, choices, group, default_text) \
    {flag, type, offsetof(Struct, field), help, range, choices, group, default_text, NULL, NULL, #field}
/* The same with a further check of the value (OptValueCheck). */
#define TG_OPT_CHECKED(Struct, field, flag, type, help, range, choices, group, default_text, check) \
    {flag, type, offsetof(Struct, field), help, range, choices, group, default_text, check, NULL, #field}
/* A TG_OPT_VALUE option of a type `codec` reads; `choices` (or NULL) is for the help only. */
#define TG_OPT_CODEC(Struct, field, flag, help, choices, group, default_text, codec) \
    {flag, TG_OPT_VALUE, offsetof(Struct, field), help, TG_OPT_ANY, choices, group, default_text, NULL, codec, #field}

/* Bit i: the i-th option of a table (at most 64 per table). */
typedef uint64_t TgOptSet;
#define TG_OPT_BIT(i) ((TgOptSet)1 << (i))

typedef struct TgOptTable {
    const char *command;       /* "train": messages read "tapegrad train: ..." */
    const char *usage;         /* after "usage: tapegrad <command> " */
    const TgOptSpec *specs;
    int count;
    int max_positional;        /* arguments that are not flags (0: none allowed) */
} TgOptTable;

/* The setting an option sets: the last part of its field's path ("batch" for "schedule.batch"). */
const char *tg_opt_setting(const TgOptSpec *s);
/* The option of `t` whose setting is `name`; -1 when none is. */
int tg_opt_find_setting(const TgOptTable *t, const char *name);
/* Checks the options in `which` against their ranges and choices. */
TgStatus tg_opt_check(const TgOptTable *t, const void *opts, TgOptSet which);
/* Writes the options of `group` (all bits of group present in spec->group) to path, atomically. */
TgStatus tg_opt_write(const TgOptTable *t, const void *opts, unsigned group, const char *path);
/* Whether tg_opt_write could store the options of `group` in a file named `path` (for messages):
 * TG_ERR_ARG naming the flag of a value with a line break, which no line can hold. */
TgStatus tg_opt_check_storable(const TgOptTable *t, const void *opts, unsigned group, const char *path);
/* Reads "--flag value" lines (also the older "flag value", with '_' for '-') from path into opts,
 * for the options of `group` that are not in `keep` (those keep their current value, but the
 * file's is checked all the same). Every line must be one option of the group, set once (a
 * TG_OPT_LIST's lines are its values, one a line), its value checked as the flag's is; a line with a NUL byte, an
 * unknown flag (the message names the nearest known one), an option of another group or one set twice is refused. *from
 * (may be NULL) receives which options were read and their lines. String values point into storage owned by `strings`
 * (freed by tg_opt_strings_free). TG_ERR_IO when the file cannot be opened, TG_ERR_FORMAT naming the file and line for
 * anything wrong inside it. */
typedef struct {
    char **items;
    int count, cap;
} TgOptStrings;
typedef struct TgOptFileRead {
    TgOptSet read;      /* the options whose values were taken from the file */
    int line[64];     /* the line of each option in the file (0: not in it) */
} TgOptFileRead;
TgStatus tg_opt_read(const TgOptTable *t, void *opts, unsigned group, TgOptSet keep, const char *path, TgOptFileRead *from,
                   TgOptStrings *strings);
/* A copy of s kept in `strings` until tg_opt_strings_free. */
const char *tg_opt_strings_keep(TgOptStrings *strings, const char *s);
void tg_opt_strings_free(TgOptStrings *strings);

/* Parses `text` as a value of `spec` into its field of opts, checked as a flag's value is (a list
 * item can be parsed as its flag is: a spec with offset 0 and the item's variable as opts); a
 * TG_OPT_LIST's value is appended to its list. */
TgStatus tg_opt_parse_value(const TgOptSpec *spec, void *opts, const char *text);
/* Index of a flag in the table, or -1. */
int tg_opt_find(const TgOptTable *t, const char *flag);
/* The flag of the table (among those of `group`: all bits present; 0 for any) closest to `name`
 * by edit distance, leading dashes aside, or NULL when none is close: for "did you mean". */
const char *tg_opt_nearest(const TgOptTable *t, const char *name, unsigned group);
/* The value of spec i in opts, as text (strings as they are; NULL as ""; a list's items joined
 * by ", "). */
void tg_opt_format(const TgOptTable *t, int i, const void *opts, char *buf, size_t cap);
/* Whether spec i has the same value in a and b. */
bool tg_opt_equal(const TgOptTable *t, int i, const void *a, const void *b);

#endif
