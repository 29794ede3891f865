/* A model scored on task files (data/task_file.h): every candidate by the log-likelihood of its
 * continuation, each item right or wrong, the accuracy with its confidence interval; for `tapegrad
 * eval --task` and for --eval-task at every evaluation of a run.
 *
 * A candidate's score is the summed log-probability of its continuation given what comes before it,
 * from the model's logits in double, with no gradients:
 *     ll = sum over t in [scored_from, len) of  log softmax(logits at t - 1)[ids[t]]
 * Two scorings of an item: summed (ll) and normalised by the continuation's UTF-8 bytes (ll /
 * bytes). An item is right under a scoring when its label's figure is above every other
 * candidate's (a tie is wrong); the accuracy is k right of n items. lm-evaluation-harness's
 * acc_norm divides by the choice's length in characters: the same figure on ASCII text.
 *
 * The 95% confidence interval is the Wilson score interval, with p = k / n and z = TG_TASK_Z95:
 *     centre = (p + z^2 / (2n)) / (1 + z^2 / n)
 *     half   = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / (4 n^2))
 *     [centre - half, centre + half], which holds p within [0, 1] (clamped there against rounding)
 *
 * Candidates run TG_TASK_BATCH_ROWS at a time in the file's order, each batch padded with <eot> to
 * its longest row. The batches are the file's alone and a row's logits at a position depend only on
 * the ids up to it, so the scores are the same bits on any number of threads, in `eval` and during
 * training. */
#ifndef TAPEGRAD_TRAIN_TASKS_H
#define TAPEGRAD_TRAIN_TASKS_H

#include <stdbool.h>
#include <signal.h>
#include <stdint.h>

#include "data/task_file.h"
#include "support/messages.h"
#include "run/run.h"
#include "tapegrad/error.h"
#include "tapegrad/model.h"

enum { TG_TASK_BATCH_ROWS = 8 };
/* the normal quantile of 0.975: a two-sided 95% interval */
#define TG_TASK_Z95 1.959963984540054

typedef enum { TG_TASK_SUMMED, TG_TASK_NORMALISED, TG_TASK_SCORING_COUNT } TgTaskScoring;
/* "acc", "acc_norm": the names metrics and JSON give each scoring's accuracy */
const char *tg_task_scoring_name(TgTaskScoring scoring);

/* The Wilson score interval of k successes in n trials (formula above); NaN for n = 0. */
void tg_wilson_interval(int64_t k, int64_t n, double z, double *lo, double *hi);

/* scores[c]: the log-likelihood ll of every candidate c of the file. With `stop` (may be NULL),
 * it looks at *stop between batches of candidates and gives up when it is set: false then, the
 * scores partial. */
bool tg_task_score_candidates(TgModel *model, TgTape *tape, const TgTaskFile *file, double *scores,
                              const volatile sig_atomic_t *stop);

typedef struct TgTaskResult {
    int64_t count; /* items */
    int64_t correct[TG_TASK_SCORING_COUNT];
    double acc[TG_TASK_SCORING_COUNT];                           /* correct / count */
    double lo[TG_TASK_SCORING_COUNT], hi[TG_TASK_SCORING_COUNT]; /* the 95% Wilson interval */
} TgTaskResult;
/* The items of the file judged from the scores of its candidates. */
void tg_task_result_of(const TgTaskFile *file, const double *scores, TgTaskResult *out);
/* "minimal_pairs, 1000 items: acc 0.8120 [0.7865, 0.8351], acc_norm ..." */
void tg_task_result_format(const TgTaskFile *file, const TgTaskResult *r, char *buf, size_t cap);

/* A task's members of a metrics line: task/NAME/acc and task/NAME/acc_norm (null where a scoring
 * stopped), task/NAME/items (its items) and task/NAME/chance (the accuracy of a guess: the mean over
 * items of 1 / candidates), so that a reader can draw the interval and the line of chance. */
enum { TG_TASK_METRICS = 4 };

/* The task files a run or a command scores together, and their latest results. */
typedef struct TgTaskSuite {
    TgTaskFile *files;
    int n;
    TgTaskResult *latest;                 /* [n]; count 0 until scored */
    double *scores;                       /* the candidates of the largest file */
    char (*names)[TG_TASK_NAME_CAP + 16]; /* [TG_TASK_METRICS n]: "task/NAME/acc", ..._norm, .../items, .../chance */
    TgRunMetric *metrics;                 /* [TG_TASK_METRICS n]: the latest values under those names */
} TgTaskSuite;

/* How a run's model reads tasks: its tokenizer, its context, and ChatML for a fine-tuned run
 * (run->task TG_TASK_SFT) */
TgTaskEncoding tg_task_encoding_of(const TgRun *run);
/* Reads the n files (n may be 0: an empty suite); refused when one cannot be read (task_file.h) or
 * two have the same name. On failure the suite is left empty. */
TgStatus tg_task_suite_open(TgTaskSuite *s, const char *const *paths, int n, const TgTaskEncoding *enc);
/* Scores every file with the model as it is now, into s->latest. With `stop` (may be NULL: never),
 * a scoring that sees *stop set gives up: false, and no file's result or metric is kept from
 * this scoring (latest counts 0, metrics NaN), so that nothing half-scored is logged. */
bool tg_task_suite_score(TgTaskSuite *s, TgModel *model, TgTape *tape, const volatile sig_atomic_t *stop);
/* The accuracy of a guess on the file: the mean over its items of 1 / candidates (NaN for none). */
double tg_task_chance(const TgTaskFile *file);
/* Adds the latest accuracies to a metrics line (TG_TASK_METRICS members a task). */
void tg_task_suite_add_metrics(const TgTaskSuite *s, TgRunMetrics *line);
/* The latest result of every scored file, a line each ("task NAME: ..."), to `messages`. */
void tg_task_suite_report(const TgTaskSuite *s, const TgMessageSink *messages);
void tg_task_suite_free(TgTaskSuite *s);

/* ---- a task's accuracy as the figure that selects checkpoints (--keep-best task:NAME) ---- */

/* Whether `name` is the task of one of the files `paths` (the --eval-task list), checked before
 * anything is read: TG_ERR_ARG naming the tasks there are when it is none of theirs. */
TgStatus tg_task_check_name(const char *name, const char *const *paths, int n);
/* The latest accuracy of the task `name` by `scoring` (NaN before its first scoring); TG_ERR_ARG
 * as above. */
/* A fingerprint of the task `name` as encoded (its tokens, candidates and items; never 0), or 0
 * when the suite has no such task: a best record of its accuracy keeps it, so that a resume tells
 * when the file changed. */
uint64_t tg_task_suite_fingerprint(const TgTaskSuite *s, const char *name);
TgStatus tg_task_suite_accuracy(const TgTaskSuite *s, const char *name, TgTaskScoring scoring, double *value);

#endif
