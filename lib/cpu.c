#include "lib/cpu.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define TG_HAVE_X86_KERNELS 1
#else
#define TG_HAVE_X86_KERNELS 0
#endif

static const char *const isa_names[TG_ISA_COUNT] = {"generic", "avx2", "avx512", "avx512bf16", "amx"};

const char *tg_isa_name(TgIsa isa) { return (unsigned)isa < TG_ISA_COUNT ? isa_names[isa] : "unknown"; }

#if TG_HAVE_X86_KERNELS
/* One feature bit of cpuid (leaf, subleaf; register 0..3 = EAX, EBX, ECX, EDX). The bf16 and AMX
 * features are read here rather than through __builtin_cpu_supports, which not every compiler
 * tapegrad builds with knows them by name. */
static bool cpuid_bit(unsigned leaf, unsigned subleaf, int reg, int bit) {
    unsigned r[4] = {0};
    if (!__get_cpuid_count(leaf, subleaf, &r[0], &r[1], &r[2], &r[3])) return false;
    return (r[reg] >> bit) & 1u;
}

/* Linux hands out the AMX tile data state (8 KiB per thread) only to a process that asks for it;
 * without it the first tile instruction faults. Asked once; a refusal (an older kernel, a
 * hypervisor, a seccomp filter) leaves the amx path unsupported, so avx512bf16 runs instead. */
enum { ARCH_REQ_XCOMP_PERM_CODE = 0x1023, XFEATURE_XTILEDATA_BIT = 18 };
static bool amx_granted;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static void request_amx(void) {
    amx_granted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM_CODE, XFEATURE_XTILEDATA_BIT) == 0;
}
#endif

bool tg_cpu_runs(TgIsa isa) {
#if TG_HAVE_X86_KERNELS
    /* __builtin_cpu_supports reports a feature only when the operating system also saves the
     * registers it needs (xgetbv: YMM state for AVX2, opmask and ZMM state for AVX-512). */
    __builtin_cpu_init();
    switch (isa) {
    case TG_ISA_GENERIC: return true;
    case TG_ISA_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case TG_ISA_AVX512:
        return tg_cpu_runs(TG_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq");
    case TG_ISA_AVX512BF16: return tg_cpu_runs(TG_ISA_AVX512) && cpuid_bit(7, 1, 0, 5);   /* EAX: AVX512_BF16 */
    case TG_ISA_AMX:
        /* EDX of leaf 7: AMX-BF16 (bit 22) and AMX-TILE (bit 24); the operating system's grant is asked below */
        if (!tg_cpu_runs(TG_ISA_AVX512BF16) || !cpuid_bit(7, 0, 3, 22) || !cpuid_bit(7, 0, 3, 24)) return false;
        pthread_once(&amx_once, request_amx);
        return amx_granted;
    }
    return false;
#else
    return isa == TG_ISA_GENERIC;
#endif
}

/* ---- the CPU's name ---- */

static char cpu_name[128];
static pthread_once_t cpu_name_once = PTHREAD_ONCE_INIT;

static void read_cpu_name(void) {
    char brand[49] = "";
#if defined(__x86_64__)
    unsigned regs[12], eax, ebx, ecx, edx;
    if (__get_cpuid(0x80000000u, &eax, &ebx, &ecx, &edx) && eax >= 0x80000004u) {
        for (unsigned i = 0; i < 3; i++) __get_cpuid(0x80000002u + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
        memcpy(brand, regs, 48);
        brand[48] = '\0';
    }
    /* family and model as Linux's /proc/cpuinfo shows them (extended fields folded in) */
    unsigned family = 0, model = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
        family = (eax >> 8) & 0xf;
        model = (eax >> 4) & 0xf;
        if (family == 0xf) family += (eax >> 20) & 0xff;
        if (family >= 6) model += ((eax >> 16) & 0xf) << 4;
    }
#endif
    /* the brand string is padded with spaces, at either end depending on the vendor */
    char *start = brand;
    while (*start == ' ') start++;
    size_t len = strlen(start);
    while (len > 0 && start[len - 1] == ' ') start[--len] = '\0';
#if defined(__x86_64__)
    snprintf(cpu_name, sizeof cpu_name, "%s (family %u, model %u)", len ? start : "unnamed x86-64 CPU", family, model);
#else
    snprintf(cpu_name, sizeof cpu_name, "%s", len ? start : "unknown CPU");
#endif
}

const char *tg_cpu_name(void) {
    pthread_once(&cpu_name_once, read_cpu_name);
    return cpu_name;
}

/* ---- the caches ---- */

int64_t tg_cache_size_parse(const char *text) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || errno || v < 0) return -1;
    int64_t unit = 1;
    if (*end == 'K') unit = 1024, end++;
    else if (*end == 'M') unit = 1024 * 1024, end++;
    else if (*end == 'G') unit = (int64_t)1024 * 1024 * 1024, end++;
    while (*end == '\n' || *end == ' ') end++;
    if (*end || v > INT64_MAX / unit) return -1;
    return (int64_t)v * unit;
}

static TgCaches caches;
static pthread_once_t caches_once = PTHREAD_ONCE_INIT;

/* The first line of a small sysfs file, or "" */
static void read_line(const char *path, char *buf, size_t cap) {
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (!fgets(buf, (int)cap, f)) buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
}

/* A data or unified cache at level 1..3 into its slot; a level seen twice keeps the first. */
static void set_level(TgCaches *c, int level, int64_t bytes, int ways, int line) {
    TgCacheLevel *slot = level == 1 ? &c->l1d : level == 2 ? &c->l2 : level == 3 ? &c->l3 : NULL;
    if (!slot || slot->bytes > 0 || bytes <= 0) return;
    *slot = (TgCacheLevel){bytes, ways > 0 ? ways : 8, line > 0 ? line : 64};
}

static bool caches_from_sysfs(TgCaches *c) {
    for (int i = 0; i < 16; i++) {
        char path[128], text[64];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        read_line(path, text, sizeof text);
        if (!text[0]) break;
        if (strcmp(text, "Data") != 0 && strcmp(text, "Unified") != 0) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        read_line(path, text, sizeof text);
        int level = atoi(text);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        read_line(path, text, sizeof text);
        int64_t bytes = tg_cache_size_parse(text);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/ways_of_associativity", i);
        read_line(path, text, sizeof text);
        int ways = atoi(text);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/coherency_line_size", i);
        read_line(path, text, sizeof text);
        set_level(c, level, bytes, ways, atoi(text));
    }
    return c->l1d.bytes > 0 && c->l2.bytes > 0;
}

#if defined(__x86_64__)
/* AMD's 4-bit associativity code of leaf 0x80000006 in ways (0: unknown, the default then) */
static int amd_ways(unsigned code) {
    static const int ways[16] = {0, 1, 2, 3, 4, 6, 8, 0, 16, 0, 32, 48, 64, 96, 128, 256};
    return ways[code & 15];
}

/* AMD's older leaves 0x80000005 (L1d) and 0x80000006 (L2, L3): what a CPU (or a hypervisor that
 * hides the topology extensions, as some do) reports when leaf 0x8000001D is empty */
static bool caches_from_amd_legacy(TgCaches *c) {
    unsigned eax, ebx, ecx, edx, top = 0;
    __get_cpuid(0x80000000u, &top, &ebx, &ecx, &edx);
    if (top < 0x80000006u) return false;
    __cpuid(0x80000005u, eax, ebx, ecx, edx);
    unsigned l1_ways = (ecx >> 16) & 255;
    set_level(c, 1, (int64_t)(ecx >> 24) * 1024, l1_ways == 255 ? 256 : (int)l1_ways, (int)(ecx & 255));
    __cpuid(0x80000006u, eax, ebx, ecx, edx);
    set_level(c, 2, (int64_t)(ecx >> 16) * 1024, amd_ways(ecx >> 12), (int)(ecx & 255));
    set_level(c, 3, (int64_t)(edx >> 18) * 512 * 1024, amd_ways(edx >> 12), (int)(edx & 255));
    return c->l1d.bytes > 0 && c->l2.bytes > 0;
}
#endif

static bool caches_from_cpuid(TgCaches *c) {
#if defined(__x86_64__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0, leaf = 4;
    __get_cpuid(0, &eax, &ebx, &ecx, &edx);
    bool amd = ebx == 0x68747541u; /* "Auth"enticAMD */
    if (amd) {   /* leaf 0x8000001D, when the CPU reports topology extensions; else the older leaves */
        if (!__get_cpuid(0x80000001u, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 22))) return caches_from_amd_legacy(c);
        leaf = 0x8000001Du;
    } else if (eax < 4) {
        return false;
    }
    for (unsigned i = 0; i < 16; i++) {
        __cpuid_count(leaf, i, eax, ebx, ecx, edx);
        unsigned type = eax & 31, level = (eax >> 5) & 7;
        if (type == 0) break;
        if (type != 1 && type != 3) continue;   /* data or unified */
        int64_t ways = ((ebx >> 22) & 1023) + 1, parts = ((ebx >> 12) & 1023) + 1, line = (ebx & 4095) + 1,
                sets = (int64_t)ecx + 1;
        set_level(c, (int)level, ways * parts * line * sets, (int)ways, (int)line);
    }
    return c->l1d.bytes > 0 && c->l2.bytes > 0;
#else
    (void)c;
    return false;
#endif
}

static void read_caches(void) {
    TgCaches c = {0};
    if (caches_from_sysfs(&c)) c.source = "sysfs";
    else if (c = (TgCaches){0}, caches_from_cpuid(&c)) c.source = "cpuid";
    else c = (TgCaches){{32 * 1024, 8, 64}, {512 * 1024, 8, 64}, {8 * 1024 * 1024, 16, 64}, "assumed"};
    caches = c;
}

bool tg_cpu_caches_from(TgCacheSource source, TgCaches *out) {
    *out = (TgCaches){0};
    bool ok = source == TG_CACHES_FROM_SYSFS ? caches_from_sysfs(out) : caches_from_cpuid(out);
    out->source = !ok ? NULL : source == TG_CACHES_FROM_SYSFS ? "sysfs" : "cpuid";
    return ok;
}

const TgCaches *tg_cpu_caches(void) {
    pthread_once(&caches_once, read_caches);
    return &caches;
}
