/* scripts/sft_facts.py and scripts/sft_tools.py from the tests (facts.h). */
#include "facts.h"

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ckptutil.h"
#include "datagen.h"
#include "testutil.h"

cJSON *script_json(const char *scratch, const char *script, const char *fmt, ...) {
    const char *python = "/usr/bin/python3";
    cr_assert_eq(access(python, X_OK), 0, "this test runs scripts/%s with %s (apt-get install python3)", script,
                 python);
    char args[4096], cmd[8192], *out_path = datagen_path(scratch, "script.out");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s %s/scripts/%s %s >%s 2>&1", python, TAPEGRAD_SOURCE_DIR, script, args, out_path);
    int rc = test_run(cmd);
    char *text = ckpt_read_text(out_path);
    cr_assert_eq(rc, 0, "%s failed:\n%s", cmd, text);
    cJSON *json = cJSON_Parse(text);
    cr_assert_not_null(json, "%s printed no JSON:\n%s", cmd, text);
    free(text), free(out_path);
    return json;
}
