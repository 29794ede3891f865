/* scripts/sft_facts.py and scripts/sft_tools.py from the tests: the invented-facts task of
 * fine-tuning and DPO, and the tool-use task. */
#ifndef TAPEGRAD_SUPPORT_FACTS_H
#define TAPEGRAD_SUPPORT_FACTS_H

#include <cjson/cJSON.h>

/* Runs `/usr/bin/python3 scripts/sft_facts.py ARGS` (ARGS printf-style), its output into
 * scratch/script.out, and returns the JSON line it printed (the caller deletes it); a failure, or
 * no JSON, fails the test with the output. */
cJSON *facts_script(const char *scratch, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same with scripts/sft_tools.py. */
cJSON *tools_script(const char *scratch, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
