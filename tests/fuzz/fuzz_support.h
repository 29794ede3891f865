/* What the fuzz harnesses share: a scratch folder for the files a reader wants by path, and
 * splitting one input into the several files of a run folder.
 *
 * Every harness is `LLVMFuzzerTestOneInput(data, size)`: libFuzzer calls it in the fuzz build
 * (TAPEGRAD_FUZZ=ON), replay_main.c over the committed corpus and regressions in every other
 * build. A harness returns 0 for any input; a crash, a sanitizer report, a leak, an abort or an
 * input that runs past the time limit is what the fuzzer looks for. */
#ifndef TAPEGRAD_FUZZ_SUPPORT_H
#define TAPEGRAD_FUZZ_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

#include "tapegrad/tokenizer.h"

/* The line that separates the files of a multi-file input (run folder text files, metrics and
 * grads): inputs are readable and the seeds are the project's files joined by it. */
#define FUZZ_SEPARATOR "\n----8<----\n"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A folder of this process's own (in $TAPEGRAD_FUZZ_TMP, else /dev/shm when it can, so that
 * writing a file per input costs no disk), created on first use and removed at exit (a crash
 * skips that: run.sh gives each run a TAPEGRAD_FUZZ_TMP it removes). The first call also limits
 * the process's files to 256 MB. */
const char *fuzz_scratch(void);
/* Writes `size` bytes to fuzz_scratch()/name, replacing it; returns its path (static storage,
 * valid until the next call). Aborts when the write fails: that is the harness's fault. */
const char *fuzz_write(const char *name, const void *data, size_t size);
/* Removes fuzz_scratch()/name if it is there. */
void fuzz_remove(const char *name);
/* Splits data at FUZZ_SEPARATOR into at most n parts (the last part takes the rest); missing
 * parts are empty. */
/* A small BPE with the ChatML markers (<|im_start|>, <|im_end|>), trained once: the conversation
 * harnesses' tokenizer. */
const TgTokenizer *fuzz_chat_tokenizer(void);
void fuzz_split(const uint8_t *data, size_t size, int n, const uint8_t **parts, size_t *lens);

#endif
