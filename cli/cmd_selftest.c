/* `tapegrad selftest`: a quick end-to-end check of the installation: every op's gradient checks. */
#include <stdio.h>

#include "cli/cli.h"
#include "tapegrad/arena.h"
#include "lib/cpu.h"
#include "lib/kernels.h"
#include "ops/checks.h"

static const TgOptTable table = {"selftest", "", NULL, 0, 0};

static int run_selftest(int argc, char **argv) {
    int rc = cli_parse(&table, NULL, NULL, NULL, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
    TgArena arena;
    tg_arena_init(&arena, 1 << 20);
    TgTape tape;
    tg_tape_init(&tape, &arena, NULL);
    int failures = tg_op_checks_run(NULL, &tape, 7, 1, tg_op_check_print_failures, stderr);
    tg_tape_free(&tape);
    tg_arena_free(&arena);
    printf("selftest: %d op checks, %s (kernels: %s on %s)\n", tg_op_checks_count(), failures ? "FAILED" : "all passed",
           tg_isa_name(tg_isa_active()), tg_cpu_name());
    return failures ? 1 : 0;
}

CLI_ONE_TABLE(option_tables, &table)

const Subcommand cmd_selftest = {"selftest", "check that this build computes right (gradients, BLAS)",
                                 run_selftest, option_tables};
