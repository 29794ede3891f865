/* `tapegrad report DIR`: an offline HTML report of one run folder (loss, val loss, lr, gradient
 * norms, FFN dead/zero fractions), with its series as JSON lines beside it. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "inspect/report.h"
#include "inspect/run_history.h"
#include "lib/path.h"

typedef struct {
    const char *out;
} ReportFlags;

static const OptSpec specs[] = {
    OPT(ReportFlags, out, "--out", OPT_STRING, "HTML file to write; the series go beside it as .jsonl", OPT_ANY, NULL,
        0, "DIR/report.html"),
};
static const OptTable table = {"report", "DIR [--out FILE.html]", specs, 1, 1};

static int run_report(int argc, char **argv) {
    ReportFlags o = {0};
    const char *positional[1];
    int n_positional = 0;
    int rc = cli_parse(&table, &o, &o, NULL, argc, argv, positional, &n_positional);
    if (rc >= 0) return rc;
    const char *out = o.out;
    if (n_positional != 1)
        return cli_usage_error("report", "give one run folder, e.g. `tapegrad report checkpoints/small-char-...`");
    const char *dir = positional[0];
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "tapegrad report: %s is not a folder; give a run folder written by `tapegrad train`\n", dir);
        return 1;
    }
    RunHistory h;
    if (run_history_load(dir, &h) != TG_OK) {
        fprintf(stderr, "tapegrad report: %s\n", tg_error_message());
        return 1;
    }
    char html[TG_PATH_CAP], jsonl[TG_PATH_CAP];
    TgStatus s = out ? path_format(html, sizeof html, "%s", out) : path_join(html, sizeof html, dir, "report.html");
    /* the series file sits beside the HTML: NAME.html -> NAME.jsonl */
    if (s == TG_OK) {
        char stem[TG_PATH_CAP];
        memcpy(stem, html, sizeof stem);
        char *dot = strrchr(stem, '.'), *slash = strrchr(stem, '/');
        if (dot && (!slash || dot > slash)) *dot = '\0';
        s = path_format(jsonl, sizeof jsonl, "%s.jsonl", stem);
    }
    if (s != TG_OK) {
        run_history_free(&h);
        return cli_exit("report", s);
    }

    s = run_report_write(dir, &h, html, jsonl);
    run_history_free(&h);
    if (s != TG_OK) {
        fprintf(stderr, "tapegrad report: %s\n", tg_error_message());
        return 1;
    }
    printf("report: %s (open it in a browser; works offline)\nseries: %s\n", html, jsonl);
    return 0;
}

CLI_ONE_TABLE(option_tables, &table)

const Subcommand cmd_report = {"report", "an offline HTML report (inline SVG charts) of a run folder",
                               run_report, option_tables};
