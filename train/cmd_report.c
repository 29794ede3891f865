/* `tapegrad report DIR`: an offline HTML report of one run folder (loss, val loss, lr, gradient
 * norms, FFN dead/zero fractions), with its series as JSON lines beside it. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "cli.h"
#include "inspect.h"
#include "report.h"
#include "run_history.h"

/* The facts of a run as a two-column table; the model config comes from its latest checkpoint. */
static void add_run_facts(Report *r, const char *dir, const RunHistory *h) {
    static const char *const header[] = {"", "value"};
    ReportTable *t = report_table(r, "Run", 2, header);
    report_cell(t, "folder");
    report_cell(t, "%s", dir);
    char ckpt[4200];
    ModelConfig c;
    uint64_t fingerprint;
    if (checkpoint_resolve(dir, ckpt, sizeof ckpt) == TG_OK && checkpoint_read_config(ckpt, &c, &fingerprint) == TG_OK) {
        report_cell(t, "model");
        report_cell(t, "dim %lld, %lld layers, %lld heads (%lld kv), vocab %lld, context %lld", (long long)c.dim,
                    (long long)c.n_layers, (long long)c.n_heads, (long long)c.n_kv_heads, (long long)c.vocab,
                    (long long)c.seq_len);
        report_cell(t, "FFN");
        report_cell(t, "%s, hidden %lld", ffn_kind_name(c.ffn), (long long)c.hidden);
        report_cell(t, "parameters");
        report_cell(t, "%lld (FFN %lld)", (long long)model_config_param_count(&c),
                    (long long)model_config_ffn_param_count(&c));
    }
    tg_error_clear();
    report_cell(t, "steps logged");
    report_cell(t, "%lld", (long long)(h->n_metrics ? h->metrics[h->n_metrics - 1].step : 0));
    report_cell(t, "final val loss");
    report_cell(t, "%.4f", run_history_final_val_loss(h));
    report_cell(t, "train loss, mean of the last 10 steps");
    report_cell(t, "%.4f", run_history_final_train_loss(h, 10));
}

static int run_report(int argc, char **argv) {
    const char *out = NULL;
    const char *positional[1];
    int n_positional = 0;
    Flag flags[] = {
        {"--out", FLAG_STRING, &out, "HTML file to write (default DIR/report.html; the series go beside it as .jsonl)", false},
    };
    bool help;
    int rc = flags_parse("report", "DIR [--out FILE.html]", flags, 1, argc, argv, positional, 1, &n_positional, &help);
    if (rc || help) return rc;
    if (n_positional != 1) {
        fprintf(stderr, "tapegrad report: give one run folder, e.g. `tapegrad report checkpoints/small-char-...`\n");
        return 2;
    }
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
    char html[4200], jsonl[4200];
    if (out) snprintf(html, sizeof html, "%s", out);
    else snprintf(html, sizeof html, "%s/report.html", dir);
    /* the series file sits beside the HTML: NAME.html -> NAME.jsonl */
    snprintf(jsonl, sizeof jsonl, "%s", html);
    char *dot = strrchr(jsonl, '.'), *slash = strrchr(jsonl, '/');
    if (dot && (!slash || dot > slash)) *dot = '\0';
    strncat(jsonl, ".jsonl", sizeof jsonl - strlen(jsonl) - 1);

    char title[4200];
    snprintf(title, sizeof title, "tapegrad run %s", dir);
    Report *r = report_new(title);
    add_run_facts(r, dir, &h);
    report_add_run(r, &h);
    tg_status s = report_write_html(r, html);
    if (s == TG_OK) s = report_write_series_jsonl(r, jsonl);
    report_free(r);
    run_history_free(&h);
    if (s != TG_OK) {
        fprintf(stderr, "tapegrad report: %s\n", tg_error_message());
        return 1;
    }
    printf("report: %s (open it in a browser; works offline)\nseries: %s\n", html, jsonl);
    return 0;
}

const Subcommand cmd_report = {"report", "an offline HTML report (inline SVG charts) of a run folder", run_report};
