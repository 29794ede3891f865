/* scripts/sft_facts.py and scripts/sft_tools.py from the tests: the invented-facts task of
 * fine-tuning and DPO, and the tool-use task. */
#ifndef TAPEGRAD_SUPPORT_FACTS_H
#define TAPEGRAD_SUPPORT_FACTS_H

#include <cjson/cJSON.h>

/* Runs `/usr/bin/python3 scripts/SCRIPT ARGS` (ARGS printf-style), its output into
 * scratch/script.out, and returns the JSON line it printed (the caller deletes it); a failure, or
 * no JSON, fails the test with the output. */
cJSON *script_json(const char *scratch, const char *script, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define facts_script(scratch, ...) script_json((scratch), "sft_facts.py", __VA_ARGS__)
#define tools_script(scratch, ...) script_json((scratch), "sft_tools.py", __VA_ARGS__)

#endif
