/* What this process may allocate, and a plan of what a command will allocate, checked against it
 * before anything large is allocated: a setting that asks for more than the machine has is refused
 * in one line naming the setting (as `field`, support/setting_names.h), the memory it would take
 * and what there is, instead of ending in an out-of-memory abort halfway through.
 *
 *   TgMemoryPlan plan = {0};
 *   tg_memory_plan_add(&plan, bytes, "`batch` 4096", "lower `batch` or `seq_len`", "for one step's activations");
 *   tg_memory_plan_add(&plan, weights, NULL, NULL, "for the weights and AdamW moments");
 *   TG_TRY(tg_memory_plan_check(&plan));
 *
 * The limit is the smallest of the physical memory, RLIMIT_AS and RLIMIT_DATA (when set), and the
 * memory.max (cgroup v2) or memory.limit_in_bytes (cgroup v1) of the process's cgroup and its
 * parents. */
#ifndef TAPEGRAD_LIB_MEMORY_H
#define TAPEGRAD_LIB_MEMORY_H

#include <stdarg.h>

#include "tapegrad/error.h"

typedef struct TgMemoryLimit {
    double bytes;        /* INFINITY when nothing is known */
    const char *source;  /* "physical memory", "RLIMIT_AS", "cgroup memory.max", ... */
} TgMemoryLimit;

/* This process's limit, as above. */
TgMemoryLimit tg_memory_limit(void);
/* The cgroup part alone: the lowest limit of the cgroup named in `proc_self_cgroup` (the text of
 * /proc/self/cgroup) and its parents, under `root` (/sys/fs/cgroup); INFINITY when none is set.
 * For tests of the parsing. */
TgMemoryLimit tg_memory_cgroup_limit(const char *proc_self_cgroup, const char *root);

/* realloc(*p, bytes) that fails with a status instead of aborting: TG_ERR_NOMEM, "out of memory for
 * WHAT (N MiB)", with *p unchanged. For the buffers of code that reads a user's files, so that a
 * tight memory limit is a message and a clean exit. */
TgStatus tg_memory_grow(void **p, size_t bytes, const char *what);

/* "23.4 GiB", "512 KiB", "2.1 TiB": binary units, 3 significant digits. */
void tg_memory_format(double bytes, char *buf, size_t cap);

enum { TG_MEMORY_PLAN_ITEMS = 12 };

typedef struct TgMemoryItem {
    double bytes;
    char subject[96];  /* "`batch` 4096": what asks for it; "" for what no setting chose (the weights) */
    char purpose[224]; /* "for one step's activations at this model's size (2.2 MiB per token)" */
    char fix[96];      /* "lower `batch` or `seq_len`" */
} TgMemoryItem;

typedef struct TgMemoryPlan {
    TgMemoryItem items[TG_MEMORY_PLAN_ITEMS];
    int n;
} TgMemoryPlan;

/* Adds an item (bytes may be 0 or beyond any integer; a plan holds at most TG_MEMORY_PLAN_ITEMS).
 * subject and fix may be NULL: a part of the total no flag chose. An item with a fix is one a flag
 * can change (the check then fails with TG_ERR_ARG), one without comes from a file (TG_ERR_NOMEM). */
void tg_memory_plan_add(TgMemoryPlan *plan, double bytes, const char *subject, const char *fix, const char *purpose_fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The plan's total. */
double tg_memory_plan_total(const TgMemoryPlan *plan);
/* TG_ERR_ARG when the total exceeds `limit`, naming the largest item a flag asked for (else the
 * largest), what it would take, the total when others add to it, what the machine has and the fix:
 *   "`batch` 1048576 needs about 2.1 TiB for one step's activations (...); this machine has
 *    23.4 GiB (physical memory): lower `batch` or `seq_len`" */
TgStatus tg_memory_plan_check_against(const TgMemoryPlan *plan, TgMemoryLimit limit);
/* tg_memory_plan_check_against(plan, tg_memory_limit()) */
TgStatus tg_memory_plan_check(const TgMemoryPlan *plan);

#endif
