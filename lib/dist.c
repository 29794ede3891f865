/* Data parallel (lib/dist.h): the MPI implementation when the build has MPI
 * (TAPEGRAD_WITH_MPI), the one-rank implementation otherwise, and what both share. */
#include "lib/dist.h"
#include "support/clock.h"
#include "support/setting_names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- shared by both builds */

void tg_dist_block(int64_t n, int rank, int64_t *begin, int64_t *end) { tg_pool_range(n, tg_dist_ranks(), rank, begin, end); }

typedef struct {
    float *acc;
    const float *x;
} AddJob;

static void add_range(void *ctx, int64_t begin, int64_t end, int thread) {
    const AddJob *job = ctx;
    for (int64_t i = begin; i < end; i++) job->acc[i] = job->acc[i] + job->x[i];
}

void tg_dist_add_floats(float *acc, const float *x, size_t n, TgPool *pool) {
    AddJob job = {acc, x};
    /* elementwise: any split over threads gives the same bits */
    tg_pool_parallel_for(tg_pool_if_worth(pool, (int64_t)n), (int64_t)n, add_range, &job);
}

uint64_t tg_dist_checksum(uint64_t h, const void *data, size_t bytes) {
    const uint64_t odd = 0x9E3779B97F4A7C15ull;
    const unsigned char *p = data;
    size_t words = bytes / 8;
    for (size_t i = 0; i < words; i++) {
        uint64_t w;
        memcpy(&w, p + 8 * i, 8);
        h = (h ^ w) * odd;
    }
    if (bytes % 8) {
        uint64_t w = 0;
        memcpy(&w, p + 8 * words, bytes % 8);
        h = (h ^ w) * odd;
    }
    return h;
}

/* How launchers tell a process its place in a job: Open MPI's mpirun (OMPI_COMM_WORLD_*), PMIx
 * launchers such as `srun --mpi=pmix` (PMIX_RANK), PMI-1/2 ones such as MPICH's Hydra and
 * `srun --mpi=pmi2` (PMI_RANK, PMI_SIZE). Returns whether one started this process; *rank and
 * *size receive what it says (-1 when it does not say). */
static bool launcher_place(long *rank, long *size) {
    static const char *const rank_variables[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    static const char *const size_variables[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    *rank = *size = -1;
    for (size_t i = 0; i < sizeof rank_variables / sizeof *rank_variables && *rank < 0; i++)
        if (getenv(rank_variables[i])) *rank = strtol(getenv(rank_variables[i]), NULL, 10);
    for (size_t i = 0; i < sizeof size_variables / sizeof *size_variables && *size < 0; i++)
        if (getenv(size_variables[i])) *size = strtol(getenv(size_variables[i]), NULL, 10);
    return *rank >= 0 || *size >= 0;
}

#ifdef TAPEGRAD_WITH_MPI

#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

/* Buffers go to MPI in buckets of at most this many floats: MPI counts are int, and the sum's
 * scratch needs one bucket. */
enum { DIST_BUCKET_FLOATS = 1 << 26 };

static struct {
    bool initialized;
    bool broken;               /* a collective failed: see dist.h */
    char broken_message[1024];
    MPI_Comm comm;             /* a duplicate of MPI_COMM_WORLD whose errors return */
    int rank, ranks;
    int *part_counts, *part_displs;  /* [ranks]: the split of a buffer (tg_dist_block) */
    int *recv_counts, *recv_displs;  /* [ranks] */
    uint64_t *values;                /* [ranks] */
} job = {.ranks = 1};

int tg_dist_rank(void) { return job.rank; }
int tg_dist_ranks(void) { return job.ranks; }
bool tg_dist_available(void) { return true; }

/* ---------------------------------------------------------------- the watchdog */

/* A thread that ends the process when a collective waits longer than the timeout: a dead peer
 * is not an error MPI reports on every transport (over shared memory the survivors would spin
 * forever). The main thread arms it on entering a collective and disarms it on leaving. */
static struct {
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t wake;
    bool running, quit;
    double timeout_s;
    double deadline;   /* tg_clock_seconds(); 0 while no collective waits */
    const char *what;
    DistTimeoutFn on_timeout;
} watch = {.mutex = PTHREAD_MUTEX_INITIALIZER};

static void *watchdog_main(void *unused) {
    pthread_mutex_lock(&watch.mutex);
    while (!watch.quit) {
        double now = tg_clock_seconds();
        /* deadlines only move later, so arming needs no wake-up (no futex call per collective):
         * disarmed, the watchdog looks again one timeout from now, no later than any new deadline */
        if (watch.deadline == 0 || now < watch.deadline) {
            struct timespec until = tg_clock_timespec(watch.deadline == 0 ? now + watch.timeout_s : watch.deadline);
            pthread_cond_timedwait(&watch.wake, &watch.mutex, &until);
            continue;
        }
        char message[1024];
        snprintf(message, sizeof message,
                 "rank %d of %d: no answer from the other ranks for %.0f s (in %s): a rank died, hangs or cannot be "
                 "reached. Ending this rank so that the job ends; the run folder's `latest` names the last complete "
                 "checkpoint (`comm_timeout_s` sets this limit)",
                 job.rank, job.ranks, watch.timeout_s, watch.what);
        char named[1024];
        if (watch.on_timeout) watch.on_timeout(tg_setting_names(message, named, sizeof named));
        /* the handler returned, or there is none: the main thread stays blocked inside MPI, so the
         * process ends here, as a broken invariant does */
        tg_abort_at(__FILE__, __LINE__, "%s", message);
    }
    pthread_mutex_unlock(&watch.mutex);
    return NULL;
}

static TgStatus watchdog_start(double timeout_s, DistTimeoutFn on_timeout) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&watch.wake, &attr);
    pthread_condattr_destroy(&attr);
    watch.timeout_s = timeout_s;
    watch.on_timeout = on_timeout;
    watch.deadline = 0;
    watch.quit = false;
    /* the watchdog takes no signals: SIGINT/SIGTERM belong to the training loop */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&watch.thread, NULL, watchdog_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    watch.running = err == 0;
    if (err)
        return tg_fail(TG_ERR_IO, "rank %d of %d: cannot start the watchdog thread (%s), without which a dead rank "
                                  "would hang this one; `comm_timeout_s` 0 trains without it",
                       job.rank, job.ranks, strerror(err));
    return TG_OK;
}

static void watchdog_stop(void) {
    if (!watch.running) return;
    pthread_mutex_lock(&watch.mutex);
    watch.quit = true;
    pthread_cond_signal(&watch.wake);
    pthread_mutex_unlock(&watch.mutex);
    pthread_join(watch.thread, NULL);
    pthread_cond_destroy(&watch.wake);
    watch.running = false;
}

static void watchdog_arm(const char *what) {
    if (!watch.running) return;
    pthread_mutex_lock(&watch.mutex);
    watch.deadline = tg_clock_seconds() + watch.timeout_s;
    watch.what = what;
    pthread_mutex_unlock(&watch.mutex);
}

static void watchdog_disarm(void) {
    if (!watch.running) return;
    pthread_mutex_lock(&watch.mutex);
    watch.deadline = 0;
    pthread_mutex_unlock(&watch.mutex);
}

/* ---------------------------------------------------------------- joining and leaving */

TgStatus tg_dist_open(double timeout_s, DistTimeoutFn on_timeout) {
    long launcher_rank, launcher_size;
    if (job.initialized || !launcher_place(&launcher_rank, &launcher_size)) return TG_OK;
    int provided = 0;
    /* only the main thread calls MPI (the pool's and the saver's threads never do) */
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return tg_fail(TG_ERR_IO, "MPI_Init failed: this process cannot join its job");
    job.initialized = true;
    MPI_Comm_dup(MPI_COMM_WORLD, &job.comm);
    MPI_Comm_set_errhandler(job.comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(job.comm, &job.rank);
    MPI_Comm_size(job.comm, &job.ranks);
    if (provided < MPI_THREAD_FUNNELED) {
        job.broken = true;
        return tg_fail(TG_ERR_IO, "this MPI library does not allow threads beside the one calling MPI "
                                  "(MPI_THREAD_FUNNELED), which tapegrad's thread pool needs");
    }
    size_t n = (size_t)job.ranks;
    job.part_counts = tg_calloc(n, sizeof(int));
    job.part_displs = tg_calloc(n, sizeof(int));
    job.recv_counts = tg_calloc(n, sizeof(int));
    job.recv_displs = tg_calloc(n, sizeof(int));
    job.values = tg_calloc(n, sizeof(uint64_t));
    if (job.ranks > 1 && timeout_s > 0) {
        TgStatus s = watchdog_start(timeout_s, on_timeout);
        if (s != TG_OK) job.broken = true;
        return s;
    }
    return TG_OK;
}

void tg_dist_close(bool job_ending) {
    if (!job.initialized) return;
    watchdog_stop();
    if (job.broken) {
        /* the other ranks may wait in a collective this one will never join: end them all */
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (!job_ending) {
        MPI_Comm_free(&job.comm);
        MPI_Finalize();
    }
    free(job.part_counts);
    free(job.part_displs);
    free(job.recv_counts);
    free(job.recv_displs);
    free(job.values);
    memset(&job, 0, sizeof job);
    job.ranks = 1;
}

/* ---------------------------------------------------------------- collectives */

static TgStatus collective_begin(const char *what) {
    if (job.broken) return tg_fail(TG_ERR_IO, "%s: the job is broken (%s)", what, job.broken_message);
    watchdog_arm(what);
    return TG_OK;
}

/* The end of a collective: its MPI result as a status (a failure breaks the job). */
static TgStatus collective_end(int rc, const char *what) {
    watchdog_disarm();
    if (rc == MPI_SUCCESS) return TG_OK;
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, text, &len);
    job.broken = true;
    snprintf(job.broken_message, sizeof job.broken_message, "%s failed: %s", what, text);
    return tg_fail(TG_ERR_IO, "rank %d of %d: %s failed: %s; the job ends", job.rank, job.ranks, what, text);
}

/* One bucket (m <= DIST_BUCKET_FLOATS floats) of tg_dist_sum_floats. Rank r sums part r of it
 * (tg_dist_block): an all-to-all gives it every rank's copy of that part, it adds them in rank
 * order, and an all-gather gives every rank every summed part. */
static TgStatus sum_bucket(float *buf, int m, float *scratch, TgPool *pool) {
    int ranks = job.ranks, me = job.rank;
    for (int r = 0; r < ranks; r++) {
        int64_t begin, end;
        tg_dist_block(m, r, &begin, &end);
        job.part_counts[r] = (int)(end - begin);
        job.part_displs[r] = (int)begin;
    }
    int mine = job.part_counts[me];
    for (int r = 0; r < ranks; r++) job.recv_counts[r] = mine, job.recv_displs[r] = r * mine;
    TG_TRY(collective_begin("MPI_Alltoallv (the gradient sum)"));
    int rc = MPI_Alltoallv(buf, job.part_counts, job.part_displs, MPI_FLOAT, scratch, job.recv_counts, job.recv_displs,
                           MPI_FLOAT, job.comm);
    TG_TRY(collective_end(rc, "MPI_Alltoallv (the gradient sum)"));
    float *part = buf + job.part_displs[me];
    /* scratch holds rank r's copy of this part at r * mine */
    memcpy(part, scratch, (size_t)mine * sizeof(float));
    for (int r = 1; r < ranks; r++) tg_dist_add_floats(part, scratch + (size_t)r * (size_t)mine, (size_t)mine, pool);
    TG_TRY(collective_begin("MPI_Allgatherv (the gradient sum)"));
    rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, job.part_counts, job.part_displs, MPI_FLOAT, job.comm);
    return collective_end(rc, "MPI_Allgatherv (the gradient sum)");
}

TgStatus tg_dist_sum_floats(float *buf, size_t n, float *scratch, TgPool *pool) {
    if (job.ranks == 1) return TG_OK;
    for (size_t start = 0; start < n; start += DIST_BUCKET_FLOATS) {
        size_t m = n - start < DIST_BUCKET_FLOATS ? n - start : DIST_BUCKET_FLOATS;
        TG_TRY(sum_bucket(buf + start, (int)m, scratch, pool));
    }
    return TG_OK;
}

TgStatus tg_dist_allreduce_floats(float *buf, size_t n) {
    if (job.ranks == 1) return TG_OK;
    for (size_t start = 0; start < n; start += DIST_BUCKET_FLOATS) {
        size_t m = n - start < DIST_BUCKET_FLOATS ? n - start : DIST_BUCKET_FLOATS;
        TG_TRY(collective_begin("MPI_Allreduce (the gradient sum)"));
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf + start, (int)m, MPI_FLOAT, MPI_SUM, job.comm);
        TG_TRY(collective_end(rc, "MPI_Allreduce (the gradient sum)"));
    }
    return TG_OK;
}

TgStatus tg_dist_share_blocks(double *values, int64_t n) {
    if (job.ranks == 1) return TG_OK;
    TG_CHECK(n >= 0 && n <= INT32_MAX, "dist_share_blocks of %lld values", (long long)n);
    for (int r = 0; r < job.ranks; r++) {
        int64_t begin, end;
        tg_dist_block(n, r, &begin, &end);
        job.part_counts[r] = (int)(end - begin);
        job.part_displs[r] = (int)begin;
    }
    TG_TRY(collective_begin("MPI_Allgatherv (sharing losses)"));
    int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, values, job.part_counts, job.part_displs, MPI_DOUBLE,
                            job.comm);
    return collective_end(rc, "MPI_Allgatherv (sharing losses)");
}

TgStatus tg_dist_max_int(int value, int *max_out) {
    *max_out = value;
    if (job.ranks == 1) return TG_OK;
    TG_TRY(collective_begin("MPI_Allreduce (agreeing on the next step)"));
    int rc = MPI_Allreduce(&value, max_out, 1, MPI_INT, MPI_MAX, job.comm);
    return collective_end(rc, "MPI_Allreduce (agreeing on the next step)");
}

TgStatus tg_dist_compare_u64(uint64_t value, int *differing_rank) {
    *differing_rank = -1;
    if (job.ranks == 1) return TG_OK;
    TG_TRY(collective_begin("MPI_Allgather (comparing replicas)"));
    int rc = MPI_Allgather(&value, 1, MPI_UINT64_T, job.values, 1, MPI_UINT64_T, job.comm);
    TG_TRY(collective_end(rc, "MPI_Allgather (comparing replicas)"));
    for (int r = 1; r < job.ranks && *differing_rank < 0; r++)
        if (job.values[r] != job.values[0]) *differing_rank = r;
    return TG_OK;
}

TgStatus tg_dist_barrier(void) {
    if (job.ranks == 1) return TG_OK;
    TG_TRY(collective_begin("MPI_Barrier"));
    return collective_end(MPI_Barrier(job.comm), "MPI_Barrier");
}

#else /* one rank: a build without MPI */

int tg_dist_rank(void) { return 0; }
int tg_dist_ranks(void) { return 1; }
bool tg_dist_available(void) { return false; }

TgStatus tg_dist_open(double timeout_s, DistTimeoutFn on_timeout) {
    long rank, size;
    if (launcher_place(&rank, &size) && (rank > 0 || size > 1))
        return tg_fail(TG_ERR_ARG,
                       "an MPI launcher started this process as rank %ld of %ld, but this tapegrad was built without "
                       "MPI, so every rank would train alone into the same run folder. Install libopenmpi-dev and "
                       "rebuild (cmake then reports \"MPI: data-parallel training on\"), or run without mpirun",
                       rank, size);
    return TG_OK;
}

void tg_dist_close(bool job_ending) {}
TgStatus tg_dist_sum_floats(float *buf, size_t n, float *scratch, TgPool *pool) { return TG_OK; }
TgStatus tg_dist_allreduce_floats(float *buf, size_t n) { return TG_OK; }
TgStatus tg_dist_share_blocks(double *values, int64_t n) { return TG_OK; }
TgStatus tg_dist_barrier(void) { return TG_OK; }

TgStatus tg_dist_max_int(int value, int *max_out) {
    *max_out = value;
    return TG_OK;
}

TgStatus tg_dist_compare_u64(uint64_t value, int *differing_rank) {
    *differing_rank = -1;
    return TG_OK;
}

#endif
