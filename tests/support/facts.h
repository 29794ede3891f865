/* scripts/sft_facts.py from the tests: the invented-facts task of fine-tuning and DPO. */
#ifndef TAPEGRAD_SUPPORT_FACTS_H
#define TAPEGRAD_SUPPORT_FACTS_H

#include <cjson/cJSON.h>

/* Runs `/usr/bin/python3 scripts/sft_facts.py ARGS` (ARGS printf-style), its output into
 * scratch/script.out, and returns the JSON line it printed (the caller deletes it); a failure, or
 * no JSON, fails the test with the output. */
cJSON *facts_script(const char *scratch, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
