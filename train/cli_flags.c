#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void flags_print_help(const char *command, const char *usage, const Flag *flags, int n_flags) {
    printf("usage: tapegrad %s %s\n\n", command, usage ? usage : "[flags]");
    for (int i = 0; i < n_flags; i++) {
        const char *arg = flags[i].type == FLAG_BOOL ? "" : flags[i].type == FLAG_STRING ? " S" : " N";
        char left[64];
        snprintf(left, sizeof left, "%s%s", flags[i].name, arg);
        printf("  %-22s %s\n", left, flags[i].help);
    }
}

const Flag *flags_find(const Flag *flags, int n_flags, const char *name) {
    for (int i = 0; i < n_flags; i++)
        if (strcmp(flags[i].name, name) == 0) return &flags[i];
    return NULL;
}

static int parse_value(const char *command, Flag *f, const char *value) {
    char *end = NULL;
    errno = 0;
    switch (f->type) {
    case FLAG_INT: {
        long v = strtol(value, &end, 10);
        if (errno || end == value || *end || v < -2147483647L || v > 2147483647L) break;
        *(int *)f->target = (int)v;
        return 0;
    }
    case FLAG_INT64: {
        long long v = strtoll(value, &end, 10);
        if (errno || end == value || *end) break;
        *(int64_t *)f->target = v;
        return 0;
    }
    case FLAG_DOUBLE: {
        double v = strtod(value, &end);
        if (errno || end == value || *end || !isfinite(v)) break;
        *(double *)f->target = v;
        return 0;
    }
    case FLAG_STRING:
        *(const char **)f->target = value;
        return 0;
    case FLAG_BOOL:
        break;
    }
    fprintf(stderr, "tapegrad %s: %s expects %s, got '%s'\n", command, f->name,
            f->type == FLAG_DOUBLE ? "a number" : "an integer", value);
    return 2;
}

int flags_parse(const char *command, const char *usage, Flag *flags, int n_flags, int argc,
                char **argv, const char **positional, int max_positional, int *n_positional,
                bool *help_shown) {
    *help_shown = false;
    if (n_positional) *n_positional = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            flags_print_help(command, usage, flags, n_flags);
            *help_shown = true;
            return 0;
        }
        if (arg[0] != '-' || arg[1] == '\0') {
            if (!positional || *n_positional >= max_positional) {
                fprintf(stderr, "tapegrad %s: unexpected argument '%s'; `tapegrad %s --help` lists the flags\n",
                        command, arg, command);
                return 2;
            }
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
        Flag *f = (Flag *)flags_find(flags, n_flags, name);
        if (!f) {
            fprintf(stderr, "tapegrad %s: unknown flag '%s'; `tapegrad %s --help` lists the flags\n",
                    command, name, command);
            return 2;
        }
        f->seen = true;
        if (f->type == FLAG_BOOL) {
            if (eq) {
                fprintf(stderr, "tapegrad %s: %s takes no value\n", command, name);
                return 2;
            }
            *(bool *)f->target = true;
            continue;
        }
        const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!value) {
            fprintf(stderr, "tapegrad %s: %s needs a value\n", command, name);
            return 2;
        }
        int rc = parse_value(command, f, value);
        if (rc) return rc;
    }
    return 0;
}
