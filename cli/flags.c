/* A subcommand's flags from its option table (cli/flags.h): argv into the options struct, and
 * the help that lists them. */
#include "cli/flags.h"

#include <stdio.h>
#include <string.h>

TgStatus cli_flags_parse(const TgOptTable *t, void *opts, TgOptSet *given, int argc, char **argv, const char **positional,
                        int *n_positional, bool *help) {
    TG_CHECK(t->count <= 64, "option table %s has %d entries; at most 64", t->command, t->count);
    *help = false;
    TgOptSet seen = 0;
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
        int i = tg_opt_find(t, name);
        if (i < 0) {
            const char *near = tg_opt_nearest(t, name, 0);
            char hint[96] = "";
            if (near) snprintf(hint, sizeof hint, " (did you mean %s?)", near);
            return tg_fail(TG_ERR_ARG, "unknown flag '%s'%s; `tapegrad %s --help` lists the flags", name, hint,
                           t->command);
        }
        if (given) *given |= TG_OPT_BIT(i);
        /* a repeatable flag's values replace the default list, then add up */
        if (t->specs[i].type == TG_OPT_LIST && !(seen & TG_OPT_BIT(i)))
            ((TgOptList *)((char *)opts + t->specs[i].offset))->count = 0;
        seen |= TG_OPT_BIT(i);
        if (t->specs[i].type == TG_OPT_BOOL) {
            if (eq) return tg_fail(TG_ERR_ARG, "%s takes no value", name);
            *(bool *)((char *)opts + t->specs[i].offset) = true;
            continue;
        }
        const char *value = eq ? eq + 1 : (a + 1 < argc ? argv[++a] : NULL);
        if (!value) return tg_fail(TG_ERR_ARG, "%s needs a value", name);
        TG_TRY(tg_opt_parse_value(&t->specs[i], opts, value));
    }
    return TG_OK;
}

void cli_flags_print_help(FILE *f, const TgOptTable *t, const void *defaults) {
    fprintf(f, "usage: tapegrad %s %s\n\n", t->command, t->usage ? t->usage : "[flags]");
    for (int i = 0; i < t->count; i++) {
        const TgOptSpec *s = &t->specs[i];
        bool text =
            s->type == TG_OPT_STRING || s->type == TG_OPT_ENUM || s->type == TG_OPT_VALUE || s->type == TG_OPT_LIST;
        const char *arg = s->type == TG_OPT_BOOL ? "" : text ? " S" : " N";
        char left[64], value[256];
        snprintf(left, sizeof left, "%s%s", s->flag, arg);
        fprintf(f, "  %-22s %s", left, s->help);
        if (s->choices) fprintf(f, ": %s", s->choices);
        if (s->type == TG_OPT_LIST) fprintf(f, " (repeatable, up to %d)", TG_OPT_LIST_MAX);
        if (s->default_text && strcmp(s->default_text, "required") == 0) {
            fputs(" (required)", f); /* a flag the command cannot go without has no default */
        } else if (s->default_text) {
            fprintf(f, " (default %s)", s->default_text);
        } else if (defaults && s->type != TG_OPT_BOOL) {
            tg_opt_format(t, i, defaults, value, sizeof value);
            if (s->type == TG_OPT_DOUBLE) snprintf(value, sizeof value, "%g", *(const double *)((const char *)defaults + s->offset));
            if (value[0]) fprintf(f, " (default %s)", value);
        }
        fputc('\n', f);
    }
}
