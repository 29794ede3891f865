/* The registry of tapegrad's own op checks: every op and composite of tapegrad/op_list.h with its
 * cases (tapegrad/op_check.h says what a case is), and the one runner over them that the test suite,
 * `tapegrad gradcheck` and `tapegrad selftest` share. An op's cases sit at the end of the op's
 * own file:
 *
 *   static const TgOpCheck rmsnorm_cases[] = {
 *       {.variant = "3x7", .inputs = {{"x", {3, 7}}, {"g", {7}}}, .forward = fwd_rmsnorm},
 *   };
 *   const TgOpCheckList tg_rmsnorm_checks = TG_OP_CHECK_LIST(rmsnorm_cases);
 *
 * Where an op's backward has branches (vector tails, blocks, head groups, a KV cache's offset),
 * its file adds a grid: a macro writing one case per point, so a list stays static data and
 * its count is the array's.
 */
#ifndef TAPEGRAD_OPS_CHECKS_H
#define TAPEGRAD_OPS_CHECKS_H

#include <stdbool.h>
#include <stdint.h>

#include "tapegrad/gradcheck.h"
#include "tapegrad/op_check.h"
#include "tapegrad/op_list.h"

#define TG_OP_CHECKS_DECLARE(id, name, checks) extern const TgOpCheckList checks;
TG_OP_LIST(TG_OP_CHECKS_DECLARE)
TG_COMPOSITE_LIST(TG_OP_CHECKS_DECLARE)
#undef TG_OP_CHECKS_DECLARE

/* Every case of every op and composite, in list order. */
typedef struct {
    const char *op;       /* the op's (or composite's) name */
    const TgOpCheck *check;
} TgOpCheckRef;

int tg_op_checks_count(void);
TgOpCheckRef tg_op_check_get(int i);
/* Cases registered under `name` (an op or a composite); 0 for an unknown name. */
int tg_op_check_cases_of(const char *name);
/* The names of the ops and composites, in list order: name_count() of them. */
int tg_op_check_name_count(void);
const char *tg_op_check_name(int i);

/* Runs every case of `op` (NULL: all) for seeds seed .. seed + n_seeds - 1 and reports each
 * (report may be NULL). Returns the number of failing cases. */
int tg_op_checks_run(const char *op, TgTape *tape, uint64_t seed, int64_t n_seeds, TgOpCheckReportFn report, void *ctx);

#endif
