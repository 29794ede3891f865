/* `tapegrad report DIR`: an offline HTML report of one run folder (loss, val loss, lr, gradient
 * norms, FFN dead/zero fractions), with its series as JSON lines beside it. */
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "inspect/report.h"
#include "inspect/run_history.h"
#include "support/path.h"
#include "run/output_check.h"
#include "run/run_folder.h"

typedef struct {
    const char *out;
    bool force;
} ReportFlags;

static const TgOptSpec specs[] = {
    TG_OPT(ReportFlags, out, "--out", TG_OPT_STRING, "HTML file to write; the series go beside it as .jsonl", TG_OPT_ANY, NULL,
        0, "DIR/report.html"),
    TG_OPT(ReportFlags, force, "--force", TG_OPT_BOOL, "replace existing files at --out and beside it (a run's own files never)",
        TG_OPT_ANY, NULL, 0, NULL),
};
static const TgOptTable table = {"report", "DIR [--out FILE.html] [--force]", specs, 2, 1};

/* The report's two files, checked before the run is read: FILE.html and FILE.jsonl beside it
 * (the default DIR/report.html is the report's own, and a report written there before is
 * replaced). */
static TgStatus plan_outputs(const char *dir, const ReportFlags *o, char *html, char *jsonl) {
    if (o->out) TG_TRY(tg_path_format(html, TG_PATH_CAP, "%s", o->out));
    else TG_TRY(tg_path_join(html, TG_PATH_CAP, dir, "report.html"));
    /* the series file sits beside the HTML: NAME.html -> NAME.jsonl */
    char stem[TG_PATH_CAP];
    memcpy(stem, html, sizeof stem);
    char *dot = strrchr(stem, '.'), *slash = strrchr(stem, '/');
    if (dot && (!slash || dot > slash + 1)) *dot = '\0';
    TG_TRY(tg_path_format(jsonl, TG_PATH_CAP, "%s.jsonl", stem));
    bool force = o->force || !o->out;
    TgOutputPlan *plan = tg_malloc(sizeof *plan);
    tg_output_plan_init(plan);
    TgStatus s = tg_output_check(plan, o->out ? "--out" : "the report", html, force);
    if (s == TG_OK) s = tg_output_check(plan, o->out ? "the series beside --out" : "the report's series", jsonl, force);
    free(plan);
    return s;
}

static int run_report(int argc, char **argv) {
    ReportFlags o = {0};
    const char *positional[1];
    int n_positional = 0;
    int rc = cli_parse(&table, &o, &o, NULL, argc, argv, positional, &n_positional);
    if (rc >= 0) return rc;
    if (n_positional != 1)
        return cli_usage_error("report", "give one run folder, e.g. `tapegrad report checkpoints/small-char-...`");
    char dir[TG_PATH_CAP], html[TG_PATH_CAP], jsonl[TG_PATH_CAP];
    TgStatus s = tg_run_folder_locate(positional[0], dir, sizeof dir);
    if (s == TG_OK) s = plan_outputs(dir, &o, html, jsonl);
    if (s != TG_OK) return cli_exit("report", s);
    TgRunHistory h;
    s = tg_run_history_load(dir, &h);
    if (s != TG_OK) return cli_exit("report", s);
    s = tg_run_report_write(dir, &h, html, jsonl);
    tg_run_history_free(&h);
    if (s != TG_OK) return cli_exit("report", s);
    printf("report: %s (open it in a browser; works offline)\nseries: %s\n", html, jsonl);
    return 0;
}

CLI_ONE_TABLE(option_tables, &table)

const Subcommand cmd_report = {"report", "an offline HTML report (inline SVG charts) of a run folder",
                               run_report, option_tables};
