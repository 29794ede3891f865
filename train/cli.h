/* Subcommands of the `tapegrad` program and the small flag parser they share. */
#ifndef TAPEGRAD_CLI_H
#define TAPEGRAD_CLI_H

#include <stdbool.h>
#include <stdint.h>

#define TAPEGRAD_VERSION "0.1.0"

typedef struct {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand's name */
} Subcommand;

extern const Subcommand cmd_gradcheck;
extern const Subcommand cmd_selftest;
extern const Subcommand cmd_train;
extern const Subcommand cmd_sample;
extern const Subcommand cmd_eval;
extern const Subcommand cmd_inspect;
extern const Subcommand cmd_report;
extern const Subcommand cmd_compare_ffn;
extern const Subcommand cmd_ckpt;
extern const Subcommand cmd_bench;

/* ---- flags ---- */
typedef enum { FLAG_BOOL, FLAG_INT, FLAG_INT64, FLAG_DOUBLE, FLAG_STRING } FlagType;

typedef struct {
    const char *name;  /* "--steps" */
    FlagType type;
    void *target;      /* bool*, int*, int64_t*, double*, const char** */
    const char *help;
    bool seen;         /* set by the parser when the flag was given */
} Flag;

/* Parses argv[1..] against flags; `--help` prints usage and sets *help_shown. Returns 0, or
 * prints one line naming the bad flag or value and returns 2. Positional arguments are
 * collected into positional[0..*n_positional) when positional is non-NULL. */
int flags_parse(const char *command, const char *usage, Flag *flags, int n_flags, int argc,
                char **argv, const char **positional, int max_positional, int *n_positional,
                bool *help_shown);
void flags_print_help(const char *command, const char *usage, const Flag *flags, int n_flags);
const Flag *flags_find(const Flag *flags, int n_flags, const char *name);

#endif
