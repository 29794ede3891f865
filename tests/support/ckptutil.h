/* Helpers for the checkpoint suites: running the CLI, loading checkpoints into models, and
 * taking a checkpoint's decompressed stream apart to craft damaged or odd files. */
#ifndef TAPEGRAD_SUPPORT_CKPTUTIL_H
#define TAPEGRAD_SUPPORT_CKPTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#include "checkpoint/checkpoint.h"
#include "tapegrad/model.h"

/* The flags every suite trains with: the tiny preset, small batches, one thread (bitwise
 * comparisons need a fixed thread count; one is also the fastest on a busy machine). */
#define CKPT_TEST_FLAGS "--preset tiny --batch 4 --threads 1 --eval-batches 2 --sample-tokens 0"

/* A model small enough that its checkpoint is a few kB and quick to take apart: 1 layer, dim 8. */
#define CKPT_SMALL_FLAGS CKPT_TEST_FLAGS " --layers 1 --dim 8 --heads 2 --kv-heads 1 --hidden 16 --seq 8"

/* A fresh scratch folder holding corpus.txt (about 20 kB of English-like text). */
char *ckpt_test_setup(char **corpus_out);
/* A suite's fixture around it: `dir` and `corpus` for each test, setup and teardown for
 * Test(..., .init = setup, .fini = teardown). Needs datagen.h and <stdlib.h>. */
#define CKPT_SCRATCH_FIXTURE                                     \
    static char *dir, *corpus;                                   \
    static void setup(void) { dir = ckpt_test_setup(&corpus); }  \
    static void teardown(void) {                                 \
        datagen_remove_tree(dir);                                \
        free(dir);                                               \
        free(corpus);                                            \
    }

/* Runs `tapegrad <args>` (printf-style) with stdout and stderr into *output (malloc'ed, may be
 * NULL); returns the exit code (128+N when killed by signal N). */
int ckpt_cli(char **output, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same through a launcher: `<launcher> tapegrad <args>` (launcher: "mpirun -np 2 ...", the
 * exit code is then the launcher's). */
int ckpt_cli_launched(char **output, const char *launcher, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The same with the test variant of the program, build/tapegrad-faults, whose environment can
 * inject faults (support/fault.h); launcher "" for none. */
int ckpt_cli_faults(char **output, const char *launcher, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Starts `tapegrad` with argv `args` (args[0] is the program name), stdin from /dev/null and
 * stdout+stderr into the file `log`; returns its pid without waiting. */
pid_t ckpt_spawn_cli(const char *log, char *const args[]);
/* The same for any program (a path; args[0] its name). */
pid_t ckpt_spawn(const char *program, const char *log, char *const args[]);

/* Waits for pid at most `seconds`: its wait status, or -1 after killing it (SIGKILL) past the bound. */
int ckpt_wait_at_most(pid_t pid, double seconds);
/* RUN's latest checkpoint loads (asserted); returns its step. */
int64_t ckpt_latest_step(const char *run);

/* A chat model for the CLI checks, in `dir`: *base, 2 steps of the tiny preset on `corpus` with a
 * BPE that has the ChatML markers, and *tuned, 3 steps of sft on it (twenty "hi" -> "hello"
 * conversations). Both malloc'ed paths. */
void ckpt_chat_runs(const char *dir, const char *corpus, char **base, char **tuned);

/* The lines of a file (0 when it is missing). */
int ckpt_count_lines(const char *path);

/* A training line of metrics.jsonl, its numbers as written (bitwise comparisons compare text). */
typedef struct {
    int64_t step;
    char loss[40], val_loss[40], lr[40], grad_norm[40];
} CkptMetricLine;
/* The training lines (those with a loss) of RUN/metrics.jsonl with step > after. */
int ckpt_read_metrics(const char *run, int64_t after, CkptMetricLine *out, int cap);
/* Both runs logged expected_lines training lines after step `after` (at most 256), with the same
 * step, loss, val loss, lr and gradient norm, as text. */
void ckpt_expect_same_metrics(const char *a, const char *b, int64_t after, int expected_lines);
/* The newest checkpoints of two run folders are at `step` and hold bitwise the same model and
 * trainer state (its best record too). */
void ckpt_expect_same_checkpoints(const char *a, const char *b, int64_t step);

/* Trains `steps` steps of CKPT_SMALL_FLAGS on `corpus` into `out` (plus `extra` flags, may be
 * ""); a failure fails the test with the output. */
void ckpt_train_small(const char *corpus, const char *out, int steps, const char *extra);

/* `tapegrad train --resume RUN EXTRA` exits 0 and leaves RUN/ckpt-<step>.tgck (`why` says what
 * that shows when it does not). */
void ckpt_expect_resume_reaches(const char *run, const char *extra, int step, const char *why);

/* Builds a model from the checkpoint's config and loads it. */
TgStatus ckpt_load_model(const char *path, TgModel *model, TgCheckpointInfo *info);

/* Bitwise equality of weights and both AdamW moments. */
bool ckpt_models_equal(const TgModel *a, const TgModel *b);

/* The whole file / the decompressed stream of a checkpoint (malloc'ed). */
uint8_t *ckpt_read_file(const char *path, size_t *len);
/* The whole file as a NUL-terminated string (malloc'ed). */
char *ckpt_read_text(const char *path);
/* The lines of a JSON Lines file, each parsed (a line that is not JSON fails the test), as one
 * array; the caller deletes it. */
cJSON *ckpt_read_json_lines(const char *path);
void ckpt_write_file(const char *path, const void *data, size_t len);
uint8_t *ckpt_raw_read(const char *path, size_t *len);
/* Compresses `len` bytes into a gzip file at path. */
void ckpt_raw_write(const char *path, const void *raw, size_t len);

/* Byte offsets of the fields of a version-2 stream. */
enum {
    CKPT_OFF_VERSION = 8,
    CKPT_OFF_FLAGS = 12,
    CKPT_OFF_CONFIG = 16, /* i64 dim, layers, heads, kv_heads, hidden, vocab, seq; u32 ffn; f64 x2 */
    CKPT_OFF_COUNT = 16 + 7 * 8 + 4 + 16 + 8,
};

/* One tensor record inside a decompressed stream. */
typedef struct {
    size_t begin, end;  /* the whole record */
    size_t shape;       /* offset of shape[0] */
    uint32_t ndim;
} CkptRecord;
/* Finds the record of `name` with `kind` (CHECKPOINT_KIND_*) in a model's or an adapter's stream;
 * false when absent. */
bool ckpt_raw_find(const uint8_t *raw, size_t len, const char *name, int kind, CkptRecord *rec);
/* Rewrites the checkpoint at path (CRC-valid) with `value` at indexes [from, from + count) of the
 * record `name` of `kind`, through the byte-plane shuffle (checkpoint.h) when the file has it;
 * count -1: every index from `from` on. */
void ckpt_plant_values(const char *path, const char *name, int kind, int64_t from, int64_t count, float value);

#endif
