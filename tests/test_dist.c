/* train/dist in one process (every build): the gradient addition, the replica checksum, a job of
 * one rank, and a build without MPI refusing to be one rank of several. The 2-rank behaviour
 * runs through mpirun in test_mpi.c. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad/pool.h"
#include "testutil.h"
#include "lib/dist.h"

/* Any one flipped bit of the data, the last partial word included, changes the checksum. */
Test(dist, checksum_changes_with_any_one_bit) {
    unsigned char data[21];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 37 + 11);
    uint64_t h = tg_dist_checksum(0, data, sizeof data);
    cr_expect_eq(tg_dist_checksum(0, data, sizeof data), h, "not deterministic");
    int unchanged = 0;
    for (size_t bit = 0; bit < 8 * sizeof data; bit++) {
        data[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        unchanged += tg_dist_checksum(0, data, sizeof data) == h;
        data[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    }
    cr_expect_eq(unchanged, 0, "%d one-bit changes left the checksum as it was", unchanged);
    cr_expect_neq(tg_dist_checksum(1, data, sizeof data), h, "the starting value is ignored");
}

/* acc + x element by element, bitwise, however the pool splits it. */
Test(dist, add_floats_is_one_addition_per_element_on_any_split) {
    enum { N = 100003 };
    float *acc = malloc(N * sizeof(float)), *x = malloc(N * sizeof(float)), *want = malloc(N * sizeof(float));
    TgRng rng;
    tg_rng_seed(&rng, 5);
    tg_rng_fill_uniform(&rng, acc, N, -1.0f, 1.0f);
    tg_rng_fill_uniform(&rng, x, N, -1e-3f, 1e-3f);
    for (int i = 0; i < N; i++) want[i] = acc[i] + x[i];
    TgPool *pool = tg_pool_create(2);
    tg_dist_add_floats(acc, x, N, pool);
    cr_expect_eq(memcmp(acc, want, N * sizeof(float)), 0, "the sum differs from acc[i] + x[i]");
    tg_pool_destroy(pool);
    free(acc);
    free(x);
    free(want);
}

/* A process no launcher started is a job of one rank, whose collectives change nothing. */
Test(dist, one_process_is_a_job_of_one_rank) {
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMIX_RANK");
    unsetenv("PMI_RANK");
    unsetenv("PMI_SIZE");
    assert_ok(tg_dist_open(TG_DIST_DEFAULT_TIMEOUT_S, NULL));
    cr_expect_eq(tg_dist_rank(), 0);
    cr_expect_eq(tg_dist_ranks(), 1);
    int64_t begin, end;
    tg_dist_block(10, 0, &begin, &end);
    cr_expect(begin == 0 && end == 10, "rank 0 of 1 owns [%lld, %lld) of 10", (long long)begin, (long long)end);
    float buf[3] = {1.0f, 2.0f, 3.0f}, scratch[3];
    assert_ok(tg_dist_sum_floats(buf, 3, scratch, NULL));
    cr_expect(buf[0] == 1.0f && buf[1] == 2.0f && buf[2] == 3.0f, "a one-rank sum changed the buffer");
    double values[2] = {0.5, 0.25};
    assert_ok(tg_dist_share_blocks(values, 2));
    cr_expect(values[0] == 0.5 && values[1] == 0.25);
    int max = 0, differing = 0;
    assert_ok(tg_dist_max_int(7, &max));
    cr_expect_eq(max, 7);
    assert_ok(tg_dist_compare_u64(42, &differing));
    cr_expect_eq(differing, -1);
    tg_dist_close(false);
}

/* Without MPI, rank 1 of 2 would train alone into rank 0's folder: refused. One rank of one
 * (`mpirun -np 1`) is fine. */
Test(dist, a_build_without_mpi_refuses_to_be_one_rank_of_several) {
    if (tg_dist_available()) cr_skip_test("this build has MPI: test_mpi.c runs 2 ranks");
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    assert_fails(tg_dist_open(TG_DIST_DEFAULT_TIMEOUT_S, NULL), TG_ERR_ARG, "built without MPI");
    setenv("OMPI_COMM_WORLD_RANK", "0", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
    assert_ok(tg_dist_open(TG_DIST_DEFAULT_TIMEOUT_S, NULL));
    cr_expect_eq(tg_dist_ranks(), 1);
}
