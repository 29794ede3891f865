#include "lib/options.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/atomic_file.h"
#include "lib/file_read.h"

#define FIELD(opts, spec, T) ((T *)((char *)(opts) + (spec)->offset))
#define CFIELD(opts, spec, T) ((const T *)((const char *)(opts) + (spec)->offset))

int opt_find(const OptTable *t, const char *flag) {
    for (int i = 0; i < t->count; i++)
        if (strcmp(t->specs[i].flag, flag) == 0) return i;
    return -1;
}

static double numeric_value(const OptSpec *s, const void *opts) {
    switch (s->type) {
    case OPT_INT: return *CFIELD(opts, s, int);
    case OPT_INT64: return (double)*CFIELD(opts, s, int64_t);
    case OPT_DOUBLE: return *CFIELD(opts, s, double);
    default: return 0;
    }
}

/* A bound as text: whole numbers in full (2^53 is 9007199254740992, not 9.0072e+15). */
static void format_bound(double v, char *buf, size_t cap) {
    if (v == floor(v) && fabs(v) < 1e17) snprintf(buf, cap, "%.0f", v);
    else snprintf(buf, cap, "%g", v);
}

/* "must be positive", "must be in (0, 1)", ... for a value `v` outside r: below a range that
 * starts at 0, only that end is named. */
static void describe_range(OptRange r, double v, char *buf, size_t cap) {
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

static bool in_range(OptRange r, double v) {
    if (isnan(v)) return false;
    if (r.lo_open ? !(v > r.lo) : !(v >= r.lo)) return false;
    if (r.hi_open ? !(v < r.hi) : !(v <= r.hi)) return false;
    return true;
}

static bool is_choice(const char *choices, const char *value) {
    size_t n = strlen(value);
    for (const char *c = choices; *c;) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && strncmp(c, value, n) == 0) return true;
        if (!bar) break;
        c = bar + 1;
    }
    return false;
}

static TgStatus check_one(const OptTable *t, int i, const void *opts) {
    const OptSpec *s = &t->specs[i];
    if (s->type == OPT_STRING) {
        const char *v = *CFIELD(opts, s, char *);
        if (v && s->choices && !is_choice(s->choices, v))
            return tg_fail(TG_ERR_ARG, "%s must be one of %s, got '%s'", s->flag, s->choices, v);
        return TG_OK;
    }
    if (s->type == OPT_BOOL) return TG_OK;
    double v = numeric_value(s, opts);
    if (!in_range(s->range, v)) {
        char want[96], got[64];
        describe_range(s->range, v, want, sizeof want);
        opt_format(t, i, opts, got, sizeof got);
        return tg_fail(TG_ERR_ARG, "%s %s, got %s", s->flag, want, got);
    }
    return TG_OK;
}

TgStatus opt_check(const OptTable *t, const void *opts, OptSet which) {
    for (int i = 0; i < t->count; i++)
        if (which & OPT_BIT(i)) TG_TRY(check_one(t, i, opts));
    return TG_OK;
}

/* Parses `text` as spec i's type into opts. */
static TgStatus set_value(const OptTable *t, int i, void *opts, const char *text) {
    const OptSpec *s = &t->specs[i];
    char *end = NULL;
    errno = 0;
    switch (s->type) {
    case OPT_INT: {
        long v = strtol(text, &end, 10);
        if (errno || end == text || *end || v < -2147483647L || v > 2147483647L) break;
        *FIELD(opts, s, int) = (int)v;
        return check_one(t, i, opts);
    }
    case OPT_INT64: {
        long long v = strtoll(text, &end, 10);
        if (errno || end == text || *end) break;
        *FIELD(opts, s, int64_t) = (int64_t)v;
        return check_one(t, i, opts);
    }
    case OPT_DOUBLE: {
        double v = strtod(text, &end);
        if (errno || end == text || *end || !isfinite(v)) break;
        *FIELD(opts, s, double) = v;
        return check_one(t, i, opts);
    }
    case OPT_STRING:
        *FIELD(opts, s, const char *) = text;
        return check_one(t, i, opts);
    case OPT_BOOL:
        if (strcmp(text, "true") == 0 || strcmp(text, "1") == 0) *FIELD(opts, s, bool) = true;
        else if (strcmp(text, "false") == 0 || strcmp(text, "0") == 0) *FIELD(opts, s, bool) = false;
        else break;
        return TG_OK;
    }
    const char *kind = s->type == OPT_DOUBLE ? "a finite number"
                     : s->type == OPT_BOOL   ? "true or false"
                     : s->type == OPT_INT    ? "an integer"
                                             : "an integer below 2^63";
    return tg_fail(TG_ERR_ARG, "%s expects %s, got '%s'", s->flag, kind, text);
}

TgStatus opt_parse(const OptTable *t, void *opts, OptSet *given, int argc, char **argv, const char **positional,
                    int *n_positional, bool *help) {
    TG_CHECK(t->count <= 64, "option table %s has %d entries; at most 64", t->command, t->count);
    *help = false;
    if (given) *given = 0;
    if (n_positional) *n_positional = 0;
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            *help = true;
            return TG_OK;
        }
        if (arg[0] != '-' || arg[1] == '\0') {
            if (!positional || !n_positional || *n_positional >= t->max_positional)
                return tg_fail(TG_ERR_ARG, "unexpected argument '%s'; `tapegrad %s --help` lists the flags", arg,
                               t->command);
            positional[(*n_positional)++] = arg;
            continue;
        }
        /* --name=value or --name value */
        char name[64];
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (len >= sizeof name) len = sizeof name - 1;
        memcpy(name, arg, len);
        name[len] = '\0';
        int i = opt_find(t, name);
        if (i < 0) return tg_fail(TG_ERR_ARG, "unknown flag '%s'; `tapegrad %s --help` lists the flags", name, t->command);
        if (given) *given |= OPT_BIT(i);
        if (t->specs[i].type == OPT_BOOL) {
            if (eq) return tg_fail(TG_ERR_ARG, "%s takes no value", name);
            *FIELD(opts, &t->specs[i], bool) = true;
            continue;
        }
        const char *value = eq ? eq + 1 : (a + 1 < argc ? argv[++a] : NULL);
        if (!value) return tg_fail(TG_ERR_ARG, "%s needs a value", name);
        TG_TRY(set_value(t, i, opts, value));
    }
    return TG_OK;
}

void opt_format(const OptTable *t, int i, const void *opts, char *buf, size_t cap) {
    const OptSpec *s = &t->specs[i];
    switch (s->type) {
    case OPT_BOOL: snprintf(buf, cap, "%s", *CFIELD(opts, s, bool) ? "true" : "false"); break;
    case OPT_INT: snprintf(buf, cap, "%d", *CFIELD(opts, s, int)); break;
    case OPT_INT64: snprintf(buf, cap, "%lld", (long long)*CFIELD(opts, s, int64_t)); break;
    case OPT_DOUBLE: snprintf(buf, cap, "%.17g", *CFIELD(opts, s, double)); break;
    case OPT_STRING: {
        const char *v = *CFIELD(opts, s, char *);
        snprintf(buf, cap, "%s", v ? v : "");
        break;
    }
    }
}

bool opt_equal(const OptTable *t, int i, const void *a, const void *b) {
    const OptSpec *s = &t->specs[i];
    switch (s->type) {
    case OPT_BOOL: return *CFIELD(a, s, bool) == *CFIELD(b, s, bool);
    case OPT_INT: return *CFIELD(a, s, int) == *CFIELD(b, s, int);
    case OPT_INT64: return *CFIELD(a, s, int64_t) == *CFIELD(b, s, int64_t);
    case OPT_DOUBLE: return *CFIELD(a, s, double) == *CFIELD(b, s, double);
    case OPT_STRING: {
        const char *x = *CFIELD(a, s, char *), *y = *CFIELD(b, s, char *);
        return (!x && !y) || (x && y && strcmp(x, y) == 0);
    }
    }
    return false;
}

void opt_print_help(FILE *f, const OptTable *t, const void *defaults) {
    fprintf(f, "usage: tapegrad %s %s\n\n", t->command, t->usage ? t->usage : "[flags]");
    for (int i = 0; i < t->count; i++) {
        const OptSpec *s = &t->specs[i];
        const char *arg = s->type == OPT_BOOL ? "" : s->type == OPT_STRING ? " S" : " N";
        char left[64], value[256];
        snprintf(left, sizeof left, "%s%s", s->flag, arg);
        fprintf(f, "  %-22s %s", left, s->help);
        if (s->choices) fprintf(f, ": %s", s->choices);
        if (s->default_text) {
            fprintf(f, " (default %s)", s->default_text);
        } else if (defaults && s->type != OPT_BOOL) {
            opt_format(t, i, defaults, value, sizeof value);
            if (s->type == OPT_DOUBLE) snprintf(value, sizeof value, "%g", *CFIELD(defaults, s, double));
            if (value[0]) fprintf(f, " (default %s)", value);
        }
        fputc('\n', f);
    }
}

TgStatus opt_write(const OptTable *t, const void *opts, unsigned group, const char *path) {
    AtomicFile af;
    TG_TRY(atomic_file_open(&af, path));
    FILE *f = atomic_file_stream(&af);
    for (int i = 0; i < t->count; i++) {
        if ((t->specs[i].group & group) != group) continue;
        if (t->specs[i].type == OPT_STRING && !*CFIELD(opts, &t->specs[i], char *)) continue;
        char value[4096];
        opt_format(t, i, opts, value, sizeof value);
        fprintf(f, "%s %s\n", t->specs[i].flag, value);
    }
    return atomic_file_commit(&af);
}

static char *keep_string(OptStrings *strings, const char *s) {
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

void opt_strings_free(OptStrings *strings) {
    for (int i = 0; i < strings->count; i++) free(strings->items[i]);
    free(strings->items);
    memset(strings, 0, sizeof *strings);
}

TgStatus opt_read(const OptTable *t, void *opts, unsigned group, OptSet keep, const char *path, OptSet *read,
                   OptStrings *strings) {
    if (read) *read = 0;
    FILE *f = file_open_read(path);
    if (!f) return tg_fail(TG_ERR_IO, "cannot read %s: %s", path, file_open_error(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int line_no = 0;
    TgStatus st = TG_OK;
    while (st == TG_OK && (len = getline(&line, &cap, f)) >= 0) {
        line_no++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0) continue;
        char *value = strchr(line, ' ');
        if (!value) {
            st = tg_fail(TG_ERR_FORMAT, "%s line %d: expected \"--flag value\", got '%.80s'", path, line_no, line);
            break;
        }
        *value++ = '\0';
        char flag[64];
        if (line[0] == '-') snprintf(flag, sizeof flag, "%s", line);
        else snprintf(flag, sizeof flag, "--%s", line);
        for (char *c = flag + 2; *c; c++)
            if (*c == '_') *c = '-';
        int i = opt_find(t, flag);
        if (i < 0 || (t->specs[i].group & group) != group || (keep & OPT_BIT(i))) continue;
        const char *text = t->specs[i].type == OPT_STRING ? keep_string(strings, value) : value;
        st = set_value(t, i, opts, text);
        if (st != TG_OK) tg_fail_context(st, "%s line %d", path, line_no);
        else if (read) *read |= OPT_BIT(i);
    }
    free(line);
    fclose(f);
    return st;
}
