/* tapegrad: the command-line program. Each subcommand parses its own flags. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "lib/cpu.h"

#define subcommands cli_subcommands
#define N_SUBCOMMANDS cli_subcommand_count

static void print_help(FILE *f) {
    fprintf(f,
            "tapegrad %s: train small language models from scratch on a CPU, with a tape-based\n"
            "autograd engine whose every backward is checked by finite differences.\n\n"
            "usage: tapegrad <subcommand> [flags]     (tapegrad <subcommand> --help for its flags)\n\n"
            "subcommands:\n",
            tg_version());
    for (int i = 0; i < N_SUBCOMMANDS; i++)
        fprintf(f, "  %-12s %s\n", subcommands[i]->name, subcommands[i]->summary);
}

int main(int argc, char **argv) {
    /* the kernel path, from TAPEGRAD_ISA or the CPU, before anything computes */
    if (tg_isa_init() != TG_OK) {
        fprintf(stderr, "tapegrad: %s\n", tg_error_message());
        return 2;
    }
    if (argc < 2) {
        print_help(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        print_help(stdout);
        return 0;
    }
    if (strcmp(name, "--version") == 0) {
        printf("tapegrad %s\nfile formats: checkpoint %d, tokenizer %d, token file %d\n", tg_version(),
               TG_CHECKPOINT_FORMAT, TG_TOKENIZER_FORMAT, TG_TOKFILE_FORMAT);
        printf("kernels: %s on %s (this CPU runs:", tg_isa_name(tg_isa_active()), tg_cpu_name());
        for (int isa = TG_ISA_COUNT - 1; isa >= 0; isa--)
            if (tg_isa_supported((tg_isa)isa)) printf(" %s", tg_isa_name((tg_isa)isa));
        printf(")\n");
        return 0;
    }
    for (int i = 0; i < N_SUBCOMMANDS; i++)
        if (strcmp(name, subcommands[i]->name) == 0) return subcommands[i]->run(argc - 1, argv + 1);
    if (name[0] == '-')
        fprintf(stderr, "tapegrad: unknown flag '%s'; `tapegrad --help` lists the subcommands\n", name);
    else
        fprintf(stderr, "tapegrad: unknown subcommand '%s'; `tapegrad --help` lists the subcommands\n", name);
    return 2;
}
