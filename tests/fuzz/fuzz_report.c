/* `tapegrad report`: metrics.jsonl and grads.jsonl read back (tg_run_history_load) and written as
 * the HTML report and its series (tg_run_report_write), as compare-ffn does for each of its runs.
 * The input is the two files joined by FUZZ_SEPARATOR; without a second part the run has no
 * grads.jsonl. */
#include <stdio.h>

#include "fuzz_support.h"
#include "inspect/run_history.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *parts[2];
    size_t lens[2];
    fuzz_split(data, size, 2, parts, lens);
    fuzz_write("metrics.jsonl", parts[0], lens[0]);
    if (parts[1] > parts[0] + lens[0]) fuzz_write("grads.jsonl", parts[1], lens[1]);
    else fuzz_remove("grads.jsonl");
    const char *dir = fuzz_scratch();
    TgRunHistory h;
    if (tg_run_history_load(dir, &h) == TG_OK) {
        char html[1024], jsonl[1024];
        snprintf(html, sizeof html, "%s/report.html", dir);
        snprintf(jsonl, sizeof jsonl, "%s/report.jsonl", dir);
        tg_run_report_write(dir, &h, html, jsonl);
        tg_run_history_free(&h);
    }
    return 0;
}
