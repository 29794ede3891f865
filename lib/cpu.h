/* What the CPU is, and which kernel paths it can run (lib/kernels.h holds the paths and picks one).
 *
 * tapegrad carries its hot kernels (lib/kernels.h) compiled once per path into one binary:
 *   generic     no intrinsics, the build's baseline (SSE2 on x86-64): any CPU
 *   avx2        AVX2 + FMA, 8-float vectors (x86-64 since about 2013-2015)
 *   avx512      AVX-512 F/VL/BW/DQ, 16-float vectors
 *   avx512bf16  avx512, and a bf16 GEMM of vdpbf16ps (AMD Zen 4/5, Intel Cooper Lake and later)
 *   amx         avx512bf16, and a bf16 GEMM of AMX tiles (Intel Sapphire Rapids and later), when
 *               the operating system grants the tiles (arch_prctl, asked once per process)
 * The bf16 paths run avx512's fp32 code; only `--precision bf16` (lib/blas.h) tells them apart.
 * One is chosen at start-up: the highest the CPU reports (cpuid, and xgetbv for the operating
 * system's support of the wider registers; __builtin_cpu_supports checks both), or the one the
 * environment variable TAPEGRAD_ISA names, which may be lower but never higher than the CPU has.
 * The choice holds for the whole process; tests switch paths with tg_isa_set between ops
 * (tg_isa_init, tg_isa_set: lib/kernels.h). */
#ifndef TAPEGRAD_LIB_CPU_H
#define TAPEGRAD_LIB_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include "tapegrad/error.h"
#include "tapegrad/pool.h"

/* Ordered: a path needs everything the lower ones need. */
typedef enum { TG_ISA_GENERIC = 0, TG_ISA_AVX2 = 1, TG_ISA_AVX512 = 2, TG_ISA_AVX512BF16 = 3, TG_ISA_AMX = 4 } TgIsa;
enum { TG_ISA_COUNT = 5 };

/* "generic", "avx2", "avx512", "avx512bf16", "amx" */
const char *tg_isa_name(TgIsa isa);
/* Whether this CPU, and the operating system's saving of its registers, can run a path (whether
 * the build carries it too: tg_isa_supported, lib/kernels.h). */
bool tg_cpu_runs(TgIsa isa);

/* The CPU's name as it reports it (the cpuid brand string, e.g. "AMD EPYC 9R14 96-Core
 * Processor") with its family and model: "AMD EPYC (family 25, model 17)". */
const char *tg_cpu_name(void);

/* The data caches the blocked GEMM sizes its blocks from (lib/gemm_plan.h): for each level, its
 * size in bytes, its associativity (ways) and line size; 0 where the level is absent (no L3).
 * Read once: from Linux's /sys/devices/system/cpu/cpu0/cache/index*, else from cpuid (leaf 4 on
 * Intel, 0x8000001D on AMD), else assumed (32 KiB 8-way, 512 KiB 8-way, 8 MiB 16-way, 64-byte
 * lines); `source` says which ("sysfs", "cpuid", "assumed"). */
typedef struct {
    int64_t bytes;
    int ways, line;
} TgCacheLevel;
typedef struct {
    TgCacheLevel l1d, l2, l3;
    const char *source; /* "sysfs", "cpuid" or "assumed": where the figures came from, for people */
} TgCaches;
const TgCaches *tg_cpu_caches(void);
typedef enum { TG_CACHES_FROM_SYSFS, TG_CACHES_FROM_CPUID } TgCacheSource;
/* The caches from one source only (for tests: the two should agree); false when that source says
 * nothing of L1d and L2 here. */
bool tg_cpu_caches_from(TgCacheSource source, TgCaches *out);
/* Parses one sysfs size ("32K", "1024K", "32M", "48"), -1 when it is not one. Exposed for tests. */
int64_t tg_cache_size_parse(const char *text);

#endif
