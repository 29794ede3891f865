/* Data-parallel training across processes and machines: every MPI call of tapegrad is in
 * lib/dist.c, behind this interface.
 *
 * A job is N copies of the program (ranks), started by an MPI launcher (`mpirun -np N`, srun).
 * Each rank holds the whole model, trains on its slice of every global batch, and the gradients
 * are summed over the ranks after the backward, so every rank applies the same update and the
 * replicas stay bitwise equal. Rank 0 alone writes files.
 *
 * One process (a program not started by a launcher, or a build without MPI) is a job of one
 * rank: the collectives below then return at once and change nothing, and MPI is never
 * initialised. A build without MPI refuses to run as one of several ranks, rather than train N
 * unrelated copies into one folder.
 *
 * Collectives: every rank must call the same collectives in the same order. A rank waits in one
 * at most the timeout given to tg_dist_open for the others to join; past it the rank's process ends
 * (tg_dist_open's on_timeout says how), so a job with a dead or hung rank never waits forever: the
 * launcher then ends the other ranks. A collective that fails (MPI reports an error) returns
 * TG_ERR_IO with a message; the job is then broken: every later collective fails at once, and
 * tg_dist_close ends the whole job (MPI_Abort) instead of waiting for ranks that will not come.
 */
#ifndef TAPEGRAD_LIB_DIST_H
#define TAPEGRAD_LIB_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tapegrad/error.h"
#include "tapegrad/pool.h"

/* The timeout of tg_dist_open when the caller has no other: longer than anything one rank
 * legitimately waits for another (rank 0 writing a checkpoint, one rank reading a corpus more
 * slowly), short enough that a dead job frees its machines within minutes. */
#define TG_DIST_DEFAULT_TIMEOUT_S 300.0

/* What ends the process when a collective waited past the timeout, called on the watchdog's
 * thread with a message naming the rank, the wait and the collective. It must not return: the
 * main thread is blocked inside MPI and cannot be woken. The CLI prints the message and calls
 * _exit(1) (cli/cli.c); the launcher then ends the other ranks. When it returns, or there is
 * none, the process aborts with the message (tg_abort_at). */
typedef void (*DistTimeoutFn)(const char *message);

/* Joins the job this process was started in (MPI_Init when a launcher started it). timeout_s
 * bounds every collective's wait (0: no bound), on_timeout (may be NULL) ends the process past
 * it. TG_ERR_ARG when started as one of several ranks by a build without MPI; TG_ERR_IO when MPI
 * cannot start, or the watchdog thread cannot. */
TgStatus tg_dist_open(double timeout_s, DistTimeoutFn on_timeout);
/* Leaves the job: MPI_Finalize; MPI_Abort of the whole job once it is broken. job_ending: the
 * launcher is ending the job (it passes SIGINT/SIGTERM on to the ranks, then kills them), so the
 * rank leaves without MPI_Finalize, whose closing handshake the launcher no longer answers: the
 * rank's work is done and it exits with its own status instead of being killed in it. */
void tg_dist_close(bool job_ending);
/* This process's rank, 0 .. tg_dist_ranks() - 1 (0 of 1 without a job). */
int tg_dist_rank(void);
int tg_dist_ranks(void);
/* Whether this build can run data-parallel (it was built with MPI). */
bool tg_dist_available(void);

/* The block of [0, n) that `rank` owns when n items are split over the ranks in rank order:
 * [n rank / N, n (rank + 1) / N). */
void tg_dist_block(int64_t n, int rank, int64_t *begin, int64_t *end);

/* acc[i] = acc[i] + x[i]: the one float addition every gradient sum makes, micro-batch after
 * micro-batch and rank after rank, so that the two sums round alike (split over the pool). */
void tg_dist_add_floats(float *acc, const float *x, size_t n, TgPool *pool);

/* buf = buf(rank 0) + buf(rank 1) + ... + buf(rank N-1), added left to right in rank order
 * with tg_dist_add_floats, on every rank: the same bits everywhere, and the same bits as one
 * process adding N buffers in that order. A reduce-scatter then an all-gather, each rank summing
 * 1/N of the buffer: every rank sends and receives 2 (N-1)/N of it, as a ring all-reduce does,
 * but in an order fixed by the ranks. scratch holds n floats (min(n, a bucket) are used). */
TgStatus tg_dist_sum_floats(float *buf, size_t n, float *scratch, TgPool *pool);
/* The same sum through MPI_Allreduce, whose order of additions MPI leaves open (for more than
 * two ranks the bits may differ from run to run): for measuring what the fixed order costs. */
TgStatus tg_dist_allreduce_floats(float *buf, size_t n);

/* values[0, n): on entry each rank has filled its block (tg_dist_block); on return every rank
 * holds all n. */
TgStatus tg_dist_share_blocks(double *values, int64_t n);
/* The largest of the values the ranks pass: how the ranks agree on a decision. */
TgStatus tg_dist_max_int(int value, int *max_out);
/* Compares a value across the ranks: *differing_rank receives the lowest rank whose value is not
 * rank 0's, or -1 when every rank passed the same. */
TgStatus tg_dist_compare_u64(uint64_t value, int *differing_rank);
/* Waits until every rank is here (for measuring how long ranks wait for each other). */
TgStatus tg_dist_barrier(void);

/* A checksum of `bytes` bytes, continued from h (start with 0): h = (h xor w) * K over 64-bit
 * words w, K odd. Each step is a bijection of h and of w, so changing any one word of the data
 * always changes the result. For comparing replicas, not for security. */
uint64_t tg_dist_checksum(uint64_t h, const void *data, size_t bytes);

#endif
