#include "lib/gemm_plan.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "lib/kernels.h"

static int64_t at_least(int64_t v, int64_t lo) { return v < lo ? lo : v; }
static int64_t down_to(int64_t v, int64_t q) { return v / q * q; }

TgGemmPlan tg_gemm_plan_for(int mr, int nr, const TgCaches *c) {
    TgGemmPlan p = {.mr = mr, .nr = nr};
    /* kc: the A micro-panel takes the ways of L1 but one, left to C and to the B panel streaming
     * through */
    int w1 = c->l1d.ways > 1 ? c->l1d.ways : 2;
    int64_t way1 = c->l1d.bytes / w1;
    int64_t kc = down_to((int64_t)(w1 - 1) * way1 / ((int64_t)mr * 4), 8);
    p.kc = kc < TG_GEMM_KC_MIN ? TG_GEMM_KC_MIN : kc > TG_GEMM_KC_MAX ? TG_GEMM_KC_MAX : kc;
    /* nc: the ways of L2 left after an A micro-panel and C */
    int w2 = c->l2.ways > 2 ? c->l2.ways : 3;
    int64_t way2 = c->l2.bytes / w2;
    int64_t a_ways = ((int64_t)mr * p.kc * 4 + way2 - 1) / way2;
    int64_t nc = at_least(w2 - 1 - a_ways, 1) * way2 / (p.kc * 4);
    p.nc = at_least(down_to(nc, nr), nr);
    /* mc: half of L3 (shared with the other cores), the ways left after a B block and C */
    if (c->l3.bytes > 0) {
        int w3 = c->l3.ways > 2 ? c->l3.ways : 3;
        int64_t way3 = c->l3.bytes / 2 / w3;
        int64_t b_ways = (p.kc * p.nc * 4 + way3 - 1) / way3;
        p.mc = at_least(w3 - 1 - b_ways, 1) * way3 / (p.kc * 4);
    } else {
        p.mc = 4 * p.nc;   /* no L3: A's block from memory, reused over 4 B blocks' worth */
    }
    p.mc = at_least(down_to(p.mc > 8192 ? 8192 : p.mc, mr), mr);
    return p;
}

static _Atomic int64_t kc_override;

TgStatus tg_gemm_plan_set_kc(int64_t kc) {
    if (kc != 0 && (kc < TG_GEMM_KC_MIN || kc > TG_GEMM_KC_MAX || kc % 8 != 0))
        return tg_fail(TG_ERR_ARG, "a GEMM k slice (kc) must be a multiple of 8 in [%d, %d], got %lld", TG_GEMM_KC_MIN,
                       TG_GEMM_KC_MAX, (long long)kc);
    atomic_store(&kc_override, kc);
    return TG_OK;
}

TgGemmPlan tg_gemm_plan(void) {
    const TgKernels *k = tg_kernels();
    TgGemmPlan p = tg_gemm_plan_for(k->gemm_mr, k->gemm_nr, tg_cpu_caches());
    int64_t kc = atomic_load(&kc_override);
    if (kc) p.kc = kc;
    return p;
}

static void describe_level(char *buf, size_t cap, const char *name, const TgCacheLevel *l) {
    size_t len = strlen(buf);
    if (l->bytes <= 0) {
        snprintf(buf + len, cap - len, ", no %s", name);
        return;
    }
    bool mib = l->bytes >= 1024 * 1024 && l->bytes % (1024 * 1024) == 0;
    snprintf(buf + len, cap - len, "%s %s %lld %s %d-way", strcmp(name, "L1d") == 0 ? "" : ",", name,
             (long long)(mib ? l->bytes / (1024 * 1024) : l->bytes / 1024), mib ? "MiB" : "KiB", l->ways);
}

void tg_gemm_plan_describe(const TgGemmPlan *p, char *buf, size_t cap) {
    const TgCaches *c = tg_cpu_caches();
    snprintf(buf, cap, "kc %lld, nc %lld, mc %lld (tile %dx%d; caches from %s:", (long long)p->kc, (long long)p->nc,
             (long long)p->mc, p->mr, p->nr, c->source);
    describe_level(buf, cap, "L1d", &c->l1d);
    describe_level(buf, cap, "L2", &c->l2);
    describe_level(buf, cap, "L3", &c->l3);
    size_t len = strlen(buf);
    snprintf(buf + len, cap - len, ")");
}
