#include "support/options.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "support/atomic_file.h"
#include "support/file_read.h"

#define FIELD(opts, spec, T) ((T *)((char *)(opts) + (spec)->offset))
#define CFIELD(opts, spec, T) ((const T *)((const char *)(opts) + (spec)->offset))

int tg_opt_find(const TgOptTable *t, const char *flag) {
    for (int i = 0; i < t->count; i++)
        if (strcmp(t->specs[i].flag, flag) == 0) return i;
    return -1;
}

const char *tg_opt_setting(const TgOptSpec *s) {
    const char *dot = s->field ? strrchr(s->field, '.') : NULL;
    return dot ? dot + 1 : s->field ? s->field : "";
}

int tg_opt_find_setting(const TgOptTable *t, const char *name) {
    for (int i = 0; i < t->count; i++)
        if (strcmp(tg_opt_setting(&t->specs[i]), name) == 0) return i;
    return -1;
}

static double numeric_value(const TgOptSpec *s, const void *opts) {
    switch (s->type) {
    case TG_OPT_INT: return *CFIELD(opts, s, int);
    case TG_OPT_INT64: return (double)*CFIELD(opts, s, int64_t);
    case TG_OPT_DOUBLE: return *CFIELD(opts, s, double);
    default: return 0;
    }
}

static bool is_integer_type(TgOptType t) { return t == TG_OPT_INT || t == TG_OPT_INT64; }

/* The whole numbers an integer option takes: its range within its type's. An open end becomes
 * the next whole number inside, so (0, 2^53] reads [1, 9007199254740992]. *bounded: the range
 * itself has an upper end (else the type's is the limit). */
static void integer_bounds(const TgOptSpec *s, long long *lo, long long *hi, bool *bounded) {
    *lo = s->type == TG_OPT_INT ? INT_MIN : LLONG_MIN;
    *hi = s->type == TG_OPT_INT ? INT_MAX : LLONG_MAX;
    double l = s->range.lo_open ? floor(s->range.lo) + 1 : ceil(s->range.lo);
    double h = s->range.hi_open ? ceil(s->range.hi) - 1 : floor(s->range.hi);
    /* (double)LLONG_MIN is -2^63 exactly and (double)LLONG_MAX rounds up to 2^63: inside those
     * the conversions are exact */
    if (isfinite(l) && l > (double)*lo) *lo = l < (double)*hi ? (long long)l : *hi;
    *bounded = isfinite(h) && h < (double)*hi;
    if (*bounded) *hi = h > (double)*lo ? (long long)h : *lo;
}

/* A bound as text: whole numbers in full (2^53 is 9007199254740992, not 9.0072e+15). */
static void format_bound(double v, char *buf, size_t cap) {
    if (v == floor(v) && fabs(v) < 1e17) snprintf(buf, cap, "%.0f", v);
    else snprintf(buf, cap, "%g", v);
}

/* "must be positive", "must be in [1, 1048576]", ... for an integer value outside the option's
 * whole numbers (`below`: under the lower end). With an upper end the whole range is named. */
static void describe_integer_range(const TgOptSpec *s, bool below, char *buf, size_t cap) {
    long long lo, hi;
    bool bounded;
    integer_bounds(s, &lo, &hi, &bounded);
    if (bounded) snprintf(buf, cap, "must be in [%lld, %lld]", lo, hi);
    else if (!below) snprintf(buf, cap, "must be at most %lld", hi);
    else if (lo == 1) snprintf(buf, cap, "must be positive");
    else if (lo == 0) snprintf(buf, cap, "must not be negative");
    else snprintf(buf, cap, "must be at least %lld", lo);
}

/* "must be positive", "must be in (0, 1)", ... for a number `v` outside r: below a range that
 * starts at 0, only that end is named. */
static void describe_range(TgOptRange r, double v, char *buf, size_t cap) {
    char lo[32], hi[32];
    format_bound(r.lo, lo, sizeof lo);
    format_bound(r.hi, hi, sizeof hi);
    bool low_end = isinf(r.hi) || (r.lo_open ? v <= r.lo : v < r.lo);
    if (r.lo == 0 && r.lo_open && low_end) snprintf(buf, cap, "must be positive");
    else if (r.lo == 0 && !r.lo_open && low_end) snprintf(buf, cap, "must not be negative");
    else if (isinf(r.hi)) snprintf(buf, cap, "must be %s %s", r.lo_open ? "above" : "at least", lo);
    else if (isinf(r.lo)) snprintf(buf, cap, "must be %s %s", r.hi_open ? "below" : "at most", hi);
    else snprintf(buf, cap, "must be in %c%s, %s%c", r.lo_open ? '(' : '[', lo, hi, r.hi_open ? ')' : ']');
}

static bool in_range(TgOptRange r, double v) {
    if (isnan(v)) return false;
    if (r.lo_open ? !(v > r.lo) : !(v >= r.lo)) return false;
    if (r.hi_open ? !(v < r.hi) : !(v <= r.hi)) return false;
    return true;
}

/* The position of `value` among "a|b|c", or -1. */
static int choice_index(const char *choices, const char *value) {
    size_t n = strlen(value);
    int i = 0;
    for (const char *c = choices; *c; i++) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && strncmp(c, value, n) == 0) return i;
        if (!bar) break;
        c = bar + 1;
    }
    return -1;
}

/* The name of choice i of "a|b|c" into buf ("" when there is none). */
static void choice_name(const char *choices, int i, char *buf, size_t cap) {
    const char *c = choices;
    for (; c && i > 0; i--) c = strchr(c, '|'), c = c ? c + 1 : NULL;
    size_t len = c ? strcspn(c, "|") : 0;
    snprintf(buf, cap, "%.*s", (int)len, c ? c : "");
}

/* An integer option's value against its whole numbers; `text` is the value as given (NULL: as
 * stored). */
static TgStatus check_integer(const TgOptSpec *s, long long v, bool overflowed, const char *text) {
    long long lo, hi;
    bool bounded;
    integer_bounds(s, &lo, &hi, &bounded);
    if (!overflowed && v >= lo && v <= hi) return TG_OK;
    char want[96];
    describe_integer_range(s, overflowed ? text[0] == '-' : v < lo, want, sizeof want);
    if (text) return tg_fail(TG_ERR_ARG, "%s %s, got %s", s->flag, want, text);
    return tg_fail(TG_ERR_ARG, "%s %s, got %lld", s->flag, want, v);
}

/* The value of spec s in opts against its range, choices and check; `text` is the value as
 * given (NULL: the stored value is shown). */
static TgStatus check_spec(const TgOptSpec *s, const void *opts, const char *text) {
    if (s->type == TG_OPT_STRING) {
        const char *v = *CFIELD(opts, s, char *);
        if (v && s->choices && choice_index(s->choices, v) < 0)
            return tg_fail(TG_ERR_ARG, "%s must be one of %s, got '%s'", s->flag, s->choices, v);
    } else if (s->type == TG_OPT_LIST) {
        const TgOptList *list = CFIELD(opts, s, TgOptList);
        for (int i = 0; i < list->count && s->choices; i++)
            if (choice_index(s->choices, list->items[i]) < 0)
                return tg_fail(TG_ERR_ARG, "%s must be one of %s, got '%s'", s->flag, s->choices, list->items[i]);
    } else if (s->type == TG_OPT_ENUM) {
        char name[64];
        choice_name(s->choices, *CFIELD(opts, s, int), name, sizeof name);
        if (!name[0]) return tg_fail(TG_ERR_ARG, "%s must be one of %s, got value %d", s->flag, s->choices, *CFIELD(opts, s, int));
    } else if (is_integer_type(s->type)) {
        long long v = s->type == TG_OPT_INT ? *CFIELD(opts, s, int) : (long long)*CFIELD(opts, s, int64_t);
        TG_TRY(check_integer(s, v, false, NULL));
    } else if (s->type == TG_OPT_DOUBLE) {
        double v = numeric_value(s, opts);
        if (!in_range(s->range, v)) {
            char want[96];
            describe_range(s->range, v, want, sizeof want);
            if (text) return tg_fail(TG_ERR_ARG, "%s %s, got %s", s->flag, want, text);
            return tg_fail(TG_ERR_ARG, "%s %s, got %g", s->flag, want, v);
        }
    }
    return s->check ? s->check(s, CFIELD(opts, s, char)) : TG_OK;
}

TgStatus tg_opt_check(const TgOptTable *t, const void *opts, TgOptSet which) {
    for (int i = 0; i < t->count; i++)
        if (which & TG_OPT_BIT(i)) TG_TRY(check_spec(&t->specs[i], opts, NULL));
    return TG_OK;
}

/* Numbers are written as strtoll and strtod read them, from the first byte to the last: no
 * white space before (strto* would skip it) or after. */
static bool number_text(const char *text, const char *end) {
    return end != text && *end == '\0' && !isspace((unsigned char)text[0]);
}

TgStatus tg_opt_parse_value(const TgOptSpec *s, void *opts, const char *text) {
    char *end = NULL;
    errno = 0;
    switch (s->type) {
    case TG_OPT_INT:
    case TG_OPT_INT64: {
        long long v = strtoll(text, &end, 10);
        if (!number_text(text, end)) return tg_fail(TG_ERR_ARG, "%s expects an integer, got '%s'", s->flag, text);
        TG_TRY(check_integer(s, v, errno == ERANGE, text));
        if (s->type == TG_OPT_INT) *FIELD(opts, s, int) = (int)v;
        else *FIELD(opts, s, int64_t) = (int64_t)v;
        return check_spec(s, opts, text);
    }
    case TG_OPT_DOUBLE: {
        double v = strtod(text, &end);
        if (!number_text(text, end)) return tg_fail(TG_ERR_ARG, "%s expects a number, got '%s'", s->flag, text);
        if (isnan(v) || (isinf(v) && errno != ERANGE))
            return tg_fail(TG_ERR_ARG, "%s expects a finite number, got '%s'", s->flag, text);
        if (isinf(v))
            return tg_fail(TG_ERR_ARG, "%s %s is beyond the largest double, %.17g", s->flag, text, DBL_MAX);
        /* A subnormal (or one that underflows to 0) would be taken for another number: the
         * training threads flush subnormals to 0 (FTZ/DAZ), and most are not what was typed. */
        if (errno == ERANGE || (v != 0 && fabs(v) < DBL_MIN)) {
            bool zero_allowed = in_range(s->range, 0.0);
            return tg_fail(TG_ERR_ARG,
                           "%s %s is below %.17g, the smallest normal double; training flushes such subnormal "
                           "numbers to 0, so give %sa value of at least that",
                           s->flag, text, DBL_MIN, zero_allowed ? "0 or " : "");
        }
        *FIELD(opts, s, double) = v;
        return check_spec(s, opts, text);
    }
    case TG_OPT_STRING:
        *FIELD(opts, s, const char *) = text;
        return check_spec(s, opts, text);
    case TG_OPT_ENUM: {
        int i = choice_index(s->choices, text);
        if (i < 0) return tg_fail(TG_ERR_ARG, "%s must be one of %s, got '%s'", s->flag, s->choices, text);
        *FIELD(opts, s, int) = i;
        return check_spec(s, opts, text);
    }
    case TG_OPT_VALUE:
        TG_TRY(s->codec->parse(s, FIELD(opts, s, char), text));
        return check_spec(s, opts, text);
    case TG_OPT_LIST: {
        TgOptList *list = FIELD(opts, s, TgOptList);
        if (list->count == TG_OPT_LIST_MAX)
            return tg_fail(TG_ERR_ARG, "%s is given more than %d times", s->flag, TG_OPT_LIST_MAX);
        list->items[list->count++] = text;
        return check_spec(s, opts, text);
    }
    case TG_OPT_BOOL:
        if (strcmp(text, "true") == 0 || strcmp(text, "1") == 0) *FIELD(opts, s, bool) = true;
        else if (strcmp(text, "false") == 0 || strcmp(text, "0") == 0) *FIELD(opts, s, bool) = false;
        else return tg_fail(TG_ERR_ARG, "%s expects true or false, got '%s'", s->flag, text);
        return TG_OK;
    }
    return tg_fail(TG_ERR_ARG, "%s: unknown option type", s->flag);
}

/* Edit distance (insertions, deletions, substitutions) of two short strings. */
static size_t edit_distance(const char *a, const char *b) {
    size_t n = strlen(b), row[65];
    if (n > 64) n = 64;
    for (size_t j = 0; j <= n; j++) row[j] = j;
    for (size_t i = 1; a[i - 1] && i <= 64; i++) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= n; j++) {
            size_t up = row[j];
            size_t best = diagonal + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diagonal = up;
        }
    }
    return row[n];
}

const char *tg_opt_nearest(const TgOptTable *t, const char *name, unsigned group) {
    while (*name == '-') name++;
    const char *best = NULL;
    size_t best_distance = 0, len = strlen(name);
    for (int i = 0; i < t->count; i++) {
        if ((t->specs[i].group & group) != group) continue;
        const char *flag = t->specs[i].flag;
        while (*flag == '-') flag++;
        size_t d = edit_distance(name, flag);
        if (!best || d < best_distance) best = t->specs[i].flag, best_distance = d;
    }
    /* close: a third of the letters at most, and at least one must match */
    size_t allowed = len / 3 > 2 ? len / 3 : 2;
    return best && best_distance <= allowed && best_distance < len ? best : NULL;
}

/* " (did you mean --steps?)" or "" */
static void nearest_hint(const TgOptTable *t, const char *name, unsigned group, char *buf, size_t cap) {
    const char *near = tg_opt_nearest(t, name, group);
    if (near) snprintf(buf, cap, " (did you mean %s?)", near);
    else buf[0] = '\0';
}

void tg_opt_format(const TgOptTable *t, int i, const void *opts, char *buf, size_t cap) {
    const TgOptSpec *s = &t->specs[i];
    switch (s->type) {
    case TG_OPT_BOOL: snprintf(buf, cap, "%s", *CFIELD(opts, s, bool) ? "true" : "false"); break;
    case TG_OPT_INT: snprintf(buf, cap, "%d", *CFIELD(opts, s, int)); break;
    case TG_OPT_INT64: snprintf(buf, cap, "%lld", (long long)*CFIELD(opts, s, int64_t)); break;
    case TG_OPT_DOUBLE: snprintf(buf, cap, "%.17g", *CFIELD(opts, s, double)); break;
    case TG_OPT_STRING: {
        const char *v = *CFIELD(opts, s, char *);
        snprintf(buf, cap, "%s", v ? v : "");
        break;
    }
    case TG_OPT_ENUM: choice_name(s->choices, *CFIELD(opts, s, int), buf, cap); break;
    case TG_OPT_VALUE: s->codec->format(CFIELD(opts, s, char), buf, cap); break;
    case TG_OPT_LIST: {
        const TgOptList *list = CFIELD(opts, s, TgOptList);
        size_t used = 0;
        buf[0] = '\0';
        for (int k = 0; k < list->count && used < cap; k++) {
            int n = snprintf(buf + used, cap - used, "%s%s", k ? ", " : "", list->items[k]);
            used += n > 0 ? (size_t)n : 0;
        }
        break;
    }
    }
}

/* Whether two lists hold the same strings in the same order. */
static bool lists_equal(const TgOptList *x, const TgOptList *y) {
    if (x->count != y->count) return false;
    for (int k = 0; k < x->count; k++)
        if (strcmp(x->items[k], y->items[k]) != 0) return false;
    return true;
}

bool tg_opt_equal(const TgOptTable *t, int i, const void *a, const void *b) {
    const TgOptSpec *s = &t->specs[i];
    switch (s->type) {
    case TG_OPT_BOOL: return *CFIELD(a, s, bool) == *CFIELD(b, s, bool);
    case TG_OPT_INT: return *CFIELD(a, s, int) == *CFIELD(b, s, int);
    case TG_OPT_INT64: return *CFIELD(a, s, int64_t) == *CFIELD(b, s, int64_t);
    case TG_OPT_DOUBLE: return *CFIELD(a, s, double) == *CFIELD(b, s, double);
    case TG_OPT_STRING: {
        const char *x = *CFIELD(a, s, char *), *y = *CFIELD(b, s, char *);
        return (!x && !y) || (x && y && strcmp(x, y) == 0);
    }
    case TG_OPT_ENUM: return *CFIELD(a, s, int) == *CFIELD(b, s, int);
    case TG_OPT_VALUE: return s->codec->equal(CFIELD(a, s, char), CFIELD(b, s, char));
    case TG_OPT_LIST:
        return lists_equal(CFIELD(a, s, TgOptList), CFIELD(b, s, TgOptList));
    }
    return false;
}

/* One "--flag value" line; a value with a line break could not be read back. */
/* One "--flag value" line into f (NULL: only the check that the file can hold it). */
static TgStatus write_line(FILE *f, const char *flag, const char *value, const char *path) {
    if (strpbrk(value, "\n\r"))
        return tg_fail(TG_ERR_ARG, "%s '%.80s' holds a line break, which %s (one option a line) cannot store: give a "
                                   "value without one",
                       flag, value, path);
    if (f) fprintf(f, "%s %s\n", flag, value);
    return TG_OK;
}

/* The lines of option i: none for a string or value left unset, one per item of a list. */
static TgStatus write_option(FILE *f, const TgOptTable *t, int i, const void *opts, const char *path) {
    const TgOptSpec *s = &t->specs[i];
    if (s->type == TG_OPT_STRING && !*CFIELD(opts, s, char *)) return TG_OK;
    if (s->type == TG_OPT_LIST) {
        const TgOptList *list = CFIELD(opts, s, TgOptList);
        for (int k = 0; k < list->count; k++) TG_TRY(write_line(f, s->flag, list->items[k], path));
        return TG_OK;
    }
    char value[4096];
    tg_opt_format(t, i, opts, value, sizeof value);
    if (s->type == TG_OPT_VALUE && !value[0]) return TG_OK; /* left unset */
    return write_line(f, s->flag, value, path);
}

TgStatus tg_opt_write(const TgOptTable *t, const void *opts, unsigned group, const char *path) {
    TgAtomicFile af;
    TG_TRY(tg_atomic_file_open(&af, path));
    FILE *f = tg_atomic_file_stream(&af);
    TgStatus s = TG_OK;
    for (int i = 0; i < t->count && s == TG_OK; i++)
        if ((t->specs[i].group & group) == group) s = write_option(f, t, i, opts, path);
    if (s != TG_OK) {
        tg_atomic_file_abandon(&af);
        return s;
    }
    return tg_atomic_file_commit(&af);
}

TgStatus tg_opt_check_storable(const TgOptTable *t, const void *opts, unsigned group, const char *path) {
    for (int i = 0; i < t->count; i++)
        if ((t->specs[i].group & group) == group) TG_TRY(write_option(NULL, t, i, opts, path));
    return TG_OK;
}

const char *tg_opt_strings_keep(TgOptStrings *strings, const char *s) {
    if (strings->count == strings->cap) {
        strings->cap = strings->cap ? 2 * strings->cap : 16;
        strings->items = tg_realloc(strings->items, (size_t)strings->cap * sizeof *strings->items);
    }
    size_t n = strlen(s) + 1;
    char *copy = tg_malloc(n);
    memcpy(copy, s, n);
    strings->items[strings->count++] = copy;
    return copy;
}

void tg_opt_strings_free(TgOptStrings *strings) {
    for (int i = 0; i < strings->count; i++) free(strings->items[i]);
    free(strings->items);
    memset(strings, 0, sizeof *strings);
}

/* The field of spec s, saved and put back around a value that is checked but not kept. */
typedef union {
    bool b;
    int i;
    int64_t i64;
    double d;
    const char *str;
    TgOptList list;
    unsigned char value[128]; /* a TG_OPT_VALUE's: its codec's size at most this */
} FieldValue;

static size_t field_size(const TgOptSpec *s) {
    switch (s->type) {
    case TG_OPT_BOOL: return sizeof(bool);
    case TG_OPT_INT: return sizeof(int);
    case TG_OPT_INT64: return sizeof(int64_t);
    case TG_OPT_DOUBLE: return sizeof(double);
    case TG_OPT_STRING: return sizeof(const char *);
    case TG_OPT_ENUM: return sizeof(int);
    case TG_OPT_VALUE: return s->codec->size;
    case TG_OPT_LIST:
        return sizeof(TgOptList);
    }
    return 0;
}

/* One line "--flag value" (without its newline) of the file: the option it sets, if the line is
 * one of the group's options not yet seen. */
/* A file of options being read into opts (tg_opt_read's arguments). */
typedef struct {
    const TgOptTable *t;
    void *opts;
    unsigned group;
    TgOptSet keep;
    const char *path;
    TgOptFileRead *from;
    TgOptStrings *strings;
} FileReading;

static TgStatus read_line(const FileReading *r, int line_no, char *line, size_t len) {
    const TgOptTable *t = r->t;
    void *opts = r->opts;
    unsigned group = r->group;
    TgOptSet keep = r->keep;
    const char *path = r->path;
    TgOptFileRead *from = r->from;
    TgOptStrings *strings = r->strings;
    if (strlen(line) != len)
        return tg_fail(TG_ERR_FORMAT, "%s line %d holds a NUL byte, which no file of options does: the file is damaged",
                       path, line_no);
    char *value = strchr(line, ' ');
    if (!value || value == line)
        return tg_fail(TG_ERR_FORMAT, "%s line %d: expected \"--flag value\", got '%.80s'", path, line_no, line);
    *value++ = '\0';
    char flag[64];
    if (strlen(line) >= sizeof flag - 2) {
        snprintf(flag, sizeof flag, "%.60s", line);
    } else {
        /* "--steps", or the older "steps" and "val_fraction" */
        if (line[0] == '-') snprintf(flag, sizeof flag, "%s", line);
        else snprintf(flag, sizeof flag, "--%s", line);
        if (flag[0] == '-' && flag[1] == '-')
            for (char *c = flag + 2; *c; c++)
                if (*c == '_') *c = '-';
    }
    int i = tg_opt_find(t, flag);
    if (i < 0) {
        char hint[96];
        nearest_hint(t, line, group, hint, sizeof hint);
        return tg_fail(TG_ERR_FORMAT, "%s line %d: unknown option '%.64s'%s", path, line_no, line, hint);
    }
    const TgOptSpec *s = &t->specs[i];
    if ((s->group & group) != group)
        return tg_fail(TG_ERR_FORMAT, "%s line %d: %s is not one of the options this file holds", path, line_no,
                       s->flag);
    bool list = s->type == TG_OPT_LIST;
    if (from->line[i] && !list)
        return tg_fail(TG_ERR_FORMAT, "%s line %d: %s again (line %d set it already); each option appears once", path,
                       line_no, s->flag, from->line[i]);
    bool first = !from->line[i];
    if (first) from->line[i] = line_no;
    bool kept = s->type == TG_OPT_STRING || s->type == TG_OPT_VALUE || list; /* a value that may point into its text */
    const char *text = kept ? tg_opt_strings_keep(strings, value) : value;
    /* a value the caller keeps is still checked: a bad one is a bad file whichever wins */
    FieldValue saved;
    TG_CHECK(field_size(s) <= sizeof saved, "%s: a value of %zu bytes", s->flag, field_size(s));
    memcpy(&saved, FIELD(opts, s, char), field_size(s));
    /* the file's list replaces the one held; a kept list's items are checked one at a time */
    if (list && (first || (keep & TG_OPT_BIT(i)))) FIELD(opts, s, TgOptList)->count = 0;
    TgStatus st = tg_opt_parse_value(s, opts, text);
    if (st != TG_OK || (keep & TG_OPT_BIT(i))) memcpy(FIELD(opts, s, char), &saved, field_size(s));
    if (st != TG_OK) return tg_fail_context(TG_ERR_FORMAT, "%s line %d", path, line_no);
    if (!(keep & TG_OPT_BIT(i))) from->read |= TG_OPT_BIT(i);
    return TG_OK;
}

TgStatus tg_opt_read(const TgOptTable *t, void *opts, unsigned group, TgOptSet keep, const char *path, TgOptFileRead *from,
                   TgOptStrings *strings) {
    TG_CHECK(t->count <= 64, "option table %s has %d entries; at most 64", t->command, t->count);
    TgOptFileRead local;
    if (!from) from = &local;
    memset(from, 0, sizeof *from);
    FILE *f = tg_file_open_read(path);
    if (!f) return tg_fail(TG_ERR_IO, "cannot read %s: %s", path, tg_file_open_error(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int line_no = 0;
    TgStatus st = TG_OK;
    const FileReading reading = {t, opts, group, keep, path, from, strings};
    while (st == TG_OK && (len = getline(&line, &cap, f)) >= 0) {
        line_no++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0) continue;
        st = read_line(&reading, line_no, line, (size_t)len);
    }
    free(line);
    fclose(f);
    return st;
}
