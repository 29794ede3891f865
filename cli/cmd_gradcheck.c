/* `tapegrad gradcheck`: every registered finite-difference check (tapegrad/op_list.h), as a table. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "tapegrad/arena.h"
#include "ops/checks.h"
#include "run/shared_flags.h"

typedef struct {
    const char *op;
    int64_t seed, seeds;
} GradcheckFlags;

#define G GradcheckFlags
static const TgOptSpec specs[] = {
    TG_OPT(G, op, "--op", TG_OPT_STRING, "check only this op (e.g. rmsnorm)", TG_OPT_ANY, NULL, 0, "all"),
    TG_FLAG_SEED(G, seed, "seed of the inputs and of R", 0, NULL),
    TG_OPT(G, seeds, "--seeds", TG_OPT_INT64, "run seeds seed .. seed+N-1 and show each input's worst", TG_OPT_POSITIVE, NULL,
        0, NULL),
};
#undef G
static const TgOptTable table = {"gradcheck", "[--op NAME] [--seed N] [--seeds N]", specs,
                               (int)(sizeof specs / sizeof specs[0]), 0};

static void print_row(void *ctx, const char *op, const TgOpCheck *c, const TgGradcheckResult *worst) {
    double rtol = c->rtol > 0 ? c->rtol : tg_gradcheck_defaults().rtol;
    int n_inputs = tg_op_check_input_count(c);
    for (int k = 0; k < n_inputs; k++)
        printf("%-16s %-32s %-6s %6.0e %7lld %14.6e %14.6e %9.2e %11.2e  %s\n", op, c->variant, worst[k].input, rtol,
               (long long)worst[k].worst_index, worst[k].worst_analytic, worst[k].worst_numeric, worst[k].worst_ratio,
               worst[k].rel_err, worst[k].pass ? "ok" : "FAIL");
}

static int run_gradcheck(int argc, char **argv) {
    const GradcheckFlags defaults = {.seed = 2024, .seeds = 1};
    GradcheckFlags o = defaults;
    int rc = cli_parse(&table, &o, &defaults, NULL, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    int cases = o.op ? tg_op_check_cases_of(o.op) : tg_op_checks_count();
    if (cases == 0) return cli_usage_error("gradcheck", "no op named '%s'; run without --op to see them all", o.op);
    TgArena arena;
    tg_arena_init(&arena, 1 << 20);
    TgTape tape;
    tg_tape_init(&tape, &arena, NULL);
    TgGradcheckOptions d = tg_gradcheck_defaults();
    printf("every element: |analytic - numeric| <= %g * max|numeric| + %g * noise + rtol * |numeric|; "
           "'x bound' is the worst element's error over its bound (pass <= 1)\n",
           d.atol_scale, d.atol_noise);
    printf("%-16s %-32s %-6s %6s %7s %14s %14s %9s %11s  %s\n", "op", "case", "input", "rtol", "worst", "analytic",
           "numeric", "x bound", "tensor err", "result");
    int failures = tg_op_checks_run(o.op, &tape, (uint64_t)o.seed, o.seeds, print_row, NULL);
    tg_tape_free(&tape);
    tg_arena_free(&arena);
    printf("%d checks, %d failed\n", cases, failures);
    return failures ? 1 : 0;
}

CLI_ONE_TABLE(option_tables, &table)

const Subcommand cmd_gradcheck = {"gradcheck", "finite-difference check of every op's backward",
                                  run_gradcheck, option_tables};
