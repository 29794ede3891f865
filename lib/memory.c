#include "lib/memory.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "support/path.h"

/* cgroup v1 writes "no limit" as the largest page-aligned int64, 2^63 - 4096: anything this large is none */
#define CGROUP_NO_LIMIT 1e18

/* The number in a cgroup limit file, or INFINITY ("max", missing, unreadable). */
static double read_limit_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return INFINITY;
    char text[64] = "";
    bool ok = fgets(text, sizeof text, f) != NULL;
    fclose(f);
    if (!ok) return INFINITY;
    char *end;
    double v = strtod(text, &end);
    if (end == text || !(v > 0) || v >= CGROUP_NO_LIMIT) return INFINITY;
    return v;
}

/* The lowest of `file` in root/path and each of its parents up to root. */
static double lowest_up_the_tree(const char *root, const char *cgroup_path, const char *file) {
    char path[TG_PATH_CAP], dir[TG_PATH_CAP];
    double lowest = INFINITY;
    if (tg_path_format(dir, sizeof dir, "%s%s", root, cgroup_path) != TG_OK) return INFINITY;
    for (;;) {
        size_t len = strlen(dir);
        while (len > 1 && dir[len - 1] == '/') dir[--len] = '\0';
        if (tg_path_format(path, sizeof path, "%s/%s", dir, file) == TG_OK) lowest = fmin(lowest, read_limit_file(path));
        if (len <= strlen(root)) break;
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir) break;
        *slash = '\0';
    }
    return lowest;
}

TgMemoryLimit tg_memory_cgroup_limit(const char *proc_self_cgroup, const char *root) {
    TgMemoryLimit limit = {INFINITY, "cgroup memory limit"};
    char line[TG_PATH_CAP], sub[TG_PATH_CAP];
    for (const char *p = proc_self_cgroup; p && *p;) {
        size_t len = strcspn(p, "\n");
        if (len < sizeof line) {
            memcpy(line, p, len);
            line[len] = '\0';
            /* hierarchy-ID:controllers:path */
            char *first = strchr(line, ':'), *second = first ? strchr(first + 1, ':') : NULL;
            if (second) {
                *first = '\0', *second = '\0';
                const char *controllers = first + 1, *cgroup = second + 1;
                bool v2 = strcmp(line, "0") == 0 && controllers[0] == '\0';
                bool v1_memory = false;
                for (const char *c = controllers; *c; c += strcspn(c, ",") + (c[strcspn(c, ",")] == ',')) {
                    size_t n = strcspn(c, ",");
                    v1_memory |= n == 6 && strncmp(c, "memory", 6) == 0;
                }
                double v = INFINITY;
                const char *source = NULL;
                if (v2) {
                    v = lowest_up_the_tree(root, cgroup, "memory.max"), source = "cgroup memory.max";
                } else if (v1_memory && tg_path_format(sub, sizeof sub, "%s/memory", root) == TG_OK) {
                    /* inside a container the path may be the host's: the namespace's root holds the limit */
                    v = fmin(lowest_up_the_tree(sub, cgroup, "memory.limit_in_bytes"),
                             lowest_up_the_tree(sub, "/", "memory.limit_in_bytes"));
                    source = "cgroup memory.limit_in_bytes";
                }
                if (v < limit.bytes) limit = (TgMemoryLimit){v, source};
            }
        }
        p += len;
        if (*p == '\n') p++;
    }
    return limit;
}

TgMemoryLimit tg_memory_limit(void) {
    TgMemoryLimit limit = {INFINITY, "nothing known"};
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) limit = (TgMemoryLimit){(double)pages * (double)page, "physical memory"};
    static const struct {
        int resource;
        const char *name;
    } rlimits[] = {{RLIMIT_AS, "RLIMIT_AS, ulimit -v"}, {RLIMIT_DATA, "RLIMIT_DATA, ulimit -d"}};
    for (size_t i = 0; i < sizeof rlimits / sizeof rlimits[0]; i++) {
        struct rlimit rl;
        if (getrlimit(rlimits[i].resource, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
            (double)rl.rlim_cur < limit.bytes)
            limit = (TgMemoryLimit){(double)rl.rlim_cur, rlimits[i].name};
    }
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (f) {
        char text[8192];
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = '\0';
        TgMemoryLimit cg = tg_memory_cgroup_limit(text, "/sys/fs/cgroup");
        if (cg.bytes < limit.bytes) limit = cg;
    }
    return limit;
}

void tg_memory_format(double bytes, char *buf, size_t cap) {
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    while (bytes >= 1024 && u < 6) bytes /= 1024, u++;
    if (u == 0) snprintf(buf, cap, "%.0f bytes", bytes);
    else snprintf(buf, cap, bytes < 10 ? "%.2f %s" : bytes < 100 ? "%.1f %s" : "%.0f %s", bytes, units[u]);
}

void tg_memory_plan_add(TgMemoryPlan *plan, double bytes, const char *subject, const char *fix, const char *purpose_fmt,
                     ...) {
    TG_CHECK(plan->n < TG_MEMORY_PLAN_ITEMS, "a memory plan holds at most %d items", TG_MEMORY_PLAN_ITEMS);
    TgMemoryItem *it = &plan->items[plan->n++];
    it->bytes = bytes;
    snprintf(it->subject, sizeof it->subject, "%s", subject ? subject : "");
    snprintf(it->fix, sizeof it->fix, "%s", fix ? fix : "");
    va_list ap;
    va_start(ap, purpose_fmt);
    vsnprintf(it->purpose, sizeof it->purpose, purpose_fmt, ap);
    va_end(ap);
}

double tg_memory_plan_total(const TgMemoryPlan *plan) {
    double total = 0;
    for (int i = 0; i < plan->n; i++) total += plan->items[i].bytes;
    return total;
}

TgStatus tg_memory_plan_check_against(const TgMemoryPlan *plan, TgMemoryLimit limit) {
    double total = tg_memory_plan_total(plan);
    if (!(total > limit.bytes)) return TG_OK;
    /* the largest item a flag asked for, else the largest */
    int blamed = -1;
    for (int pass = 0; pass < 2 && blamed < 0; pass++)
        for (int i = 0; i < plan->n; i++)
            if ((pass == 1 || plan->items[i].subject[0]) &&
                (blamed < 0 || plan->items[i].bytes > plan->items[blamed].bytes))
                blamed = i;
    const TgMemoryItem *it = &plan->items[blamed];
    char need[32], all[32], has[32], with[96] = "";
    tg_memory_format(it->bytes, need, sizeof need);
    tg_memory_format(total, all, sizeof all);
    tg_memory_format(limit.bytes, has, sizeof has);
    if (total > 1.01 * it->bytes) snprintf(with, sizeof with, ", %s in all", all);
    /* a flag can fix it (exit 2), or the file it came from cannot fit here (exit 1) */
    return tg_fail(it->fix[0] ? TG_ERR_ARG : TG_ERR_NOMEM, "%s%sneeds about %s %s%s; this machine has %s (%s)%s%s",
                   it->subject, it->subject[0] ? " " : "", need, it->purpose, with, has, limit.source,
                   it->fix[0] ? ": " : "", it->fix);
}

TgStatus tg_memory_plan_check(const TgMemoryPlan *plan) { return tg_memory_plan_check_against(plan, tg_memory_limit()); }

TgStatus tg_memory_grow(void **p, size_t bytes, const char *what) {
    void *q = realloc(*p, bytes ? bytes : 1);
    if (!q) {
        char size[32];
        tg_memory_format((double)bytes, size, sizeof size);
        return tg_fail(TG_ERR_NOMEM, "out of memory for %s (%s)", what, size);
    }
    *p = q;
    return TG_OK;
}
