/* tapegrad: the command-line program. Each subcommand parses its own flags. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/output.h"
#include "lib/cpu.h"
#include "lib/kernels.h"

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

/* Every command's output is checked to its end: a write that failed (a full disk, a closed stdout)
 * is one line on stderr and exit 1, never a lost result reported as success; a reader that closed
 * the pipe (`| head`) had what it wanted, and the command ends quietly with 0. The
 * training commands write their terminal output by cli/output.h instead, whose failures mean the
 * terminal is gone, not that the run failed (the run's log has every line): nothing of theirs waits
 * in stdout's buffer here. */
static int check_output(const char *command, int rc) {
    if (rc != 0) return rc; /* a command that failed has said why, a lost write among them */
    TgStatus s = cli_stdout_check();
    if (s == TG_OK && fclose(stdout) != 0) {
        if (errno == EPIPE) return 0; /* | head: the reader had what it wanted */
        s = tg_fail(TG_ERR_IO, "cannot write its output: %s", strerror(errno));
    }
    if (s == TG_OK || cli_stdout_reader_gone()) return 0;
    fprintf(stderr, "tapegrad%s%s: %s\n", command ? " " : "", command ? command : "", tg_error_message());
    return 1;
}

int main(int argc, char **argv) {
    /* a closed pipe is an error a write returns (and check_output reports), not a signal that ends
     * a process holding unsaved work */
    signal(SIGPIPE, SIG_IGN);
    cli_output_guard_standard_streams();
    cli_name_settings_by_flags(); /* the library's messages in the words of the flags */
    /* the kernel path, from TAPEGRAD_ISA or the CPU, before anything computes */
    if (tg_isa_init() != TG_OK) {
        fprintf(stderr, "tapegrad: %s\n", tg_error_message());
        return 2;
    }
    cli_program_set(argv[0]); /* hints print commands that run as printed */
    if (argc < 2) {
        print_help(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        print_help(stdout);
        return check_output(NULL, 0);
    }
    if (strcmp(name, "--version") == 0) {
        printf("tapegrad %s\nfile formats: checkpoint %d, tokenizer %d, token file %d\n", tg_version(),
               TG_CHECKPOINT_FORMAT, TG_TOKENIZER_FORMAT, TG_TOKFILE_FORMAT);
        printf("kernels: %s on %s (this CPU runs:", tg_isa_name(tg_isa_active()), tg_cpu_name());
        for (int isa = TG_ISA_COUNT - 1; isa >= 0; isa--)
            if (tg_isa_supported((TgIsa)isa)) printf(" %s", tg_isa_name((TgIsa)isa));
        printf(")\n");
        return check_output(NULL, 0);
    }
    for (int i = 0; i < N_SUBCOMMANDS; i++)
        if (strcmp(name, subcommands[i]->name) == 0) return check_output(name, subcommands[i]->run(argc - 1, argv + 1));
    if (name[0] == '-')
        fprintf(stderr, "tapegrad: unknown flag '%s'; `tapegrad --help` lists the subcommands\n", name);
    else
        fprintf(stderr, "tapegrad: unknown subcommand '%s'; `tapegrad --help` lists the subcommands\n", name);
    return 2;
}
