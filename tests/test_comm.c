// test_comm.c: the collectives of llm/parallel/comm.h on the CPU path and the per-rank
// model state of each ZeRO stage.
//
// Runs as one process (the test runner) and under `mpirun -np 3/4`
// (tests/test_zero.sh); case names end in _w<ranks>. Every rank checks its
// own results; a case fails if it failed on any rank, and rank 0 prints it.
// Inputs are random floats that every rank can regenerate for any rank, so
// each rank computes its expected results itself: the rank-order sums
// ((c0 + c1) + c2) + ..., bit for bit.
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "llm/arch/arch.h"
#include "llm/parallel/comm.h"
#include "llm/model/model.h"
#include "llm/util/rng.h"
#include "llm/parallel/zero.h"
#include "tests/testlib_mpi.h"

static Comm* comm;
static Backend* be;
static int W, R;

// Contribution of rank r at index i (distinct per test through `salt`).
static float value(uint64_t salt, int r, size_t i) { return rng_normal(rng_key(salt, (uint64_t)r, 7), i); }

// Reduce-scatter over more than one staging piece (4 MiB) and a chunk that is
// not a multiple of it: in place, and onto an accumulator.
static void reduce_scatter_sums_in_rank_order(void) {
    size_t chunk = (5u << 20) / 4 + 37;  // 1.25M + 37 floats
    float* buf = (float*)xmalloc(W * chunk * sizeof(float));
    float* acc = (float*)xmalloc(chunk * sizeof(float));
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < W * chunk; i++) buf[i] = value(11 + pass, R, i);
        for (size_t i = 0; i < chunk; i++) acc[i] = value(99, R, i);
        comm_reduce_scatter(comm, COMM_WORLD, buf, chunk, DTYPE_F32, pass ? acc : NULL);
        const float* got = pass ? acc : buf + (size_t)R * chunk;
        size_t bad = 0;
        for (size_t i = 0; i < chunk; i++) {
            size_t j = (size_t)R * chunk + i;
            float want = pass ? value(99, R, i) + value(11 + pass, 0, j) : value(11 + pass, 0, j);
            for (int r = 1; r < W; r++) want += value(11 + pass, r, j);
            bad += got[i] != want;
        }
        CHECK(bad == 0, "%s: %zu of %zu elements differ from the rank-order sum", pass ? "accumulate" : "in place", bad,
              chunk);
    }
    free(buf);
    free(acc);
}

// BF16: each addition rounds to bf16, in rank order.
static void reduce_scatter_bf16(void) {
    size_t chunk = 1000;
    uint16_t* buf = (uint16_t*)xmalloc(W * chunk * 2);
    for (size_t i = 0; i < W * chunk; i++) buf[i] = f32_to_bf16(value(21, R, i));
    comm_reduce_scatter(comm, COMM_WORLD, buf, chunk, DTYPE_BF16, NULL);
    size_t bad = 0;
    for (size_t i = 0; i < chunk; i++) {
        size_t j = (size_t)R * chunk + i;
        uint16_t want = f32_to_bf16(value(21, 0, j));
        for (int r = 1; r < W; r++) want = f32_to_bf16(bf16_to_f32(want) + bf16_to_f32(f32_to_bf16(value(21, r, j))));
        bad += buf[(size_t)R * chunk + i] != want;
    }
    CHECK(bad == 0, "%zu bf16 elements differ", bad);
    free(buf);
}

// All-reduce of a length that does not split evenly: the same bits everywhere.
static void all_reduce_uneven_length(void) {
    size_t n = 100003;
    float* buf = (float*)xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) buf[i] = value(31, R, i);
    comm_all_reduce(comm, COMM_WORLD, buf, n, DTYPE_F32);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = value(31, 0, i);
        for (int r = 1; r < W; r++) want += value(31, r, i);
        bad += buf[i] != want;
    }
    CHECK(bad == 0, "%zu of %zu elements differ", bad, n);
    free(buf);
}

static void all_gather_from_separate_and_in_place(void) {
    size_t chunk = 777;
    float* buf = (float*)xmalloc(W * chunk * sizeof(float));
    float* mine = (float*)xmalloc(chunk * sizeof(float));
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < W * chunk; i++) buf[i] = NAN;
        for (size_t i = 0; i < chunk; i++) (pass ? buf + (size_t)R * chunk : mine)[i] = value(41, R, i);
        comm_all_gather(comm, COMM_WORLD, pass ? NULL : mine, buf, chunk, DTYPE_F32);
        size_t bad = 0;
        for (int r = 0; r < W; r++)
            for (size_t i = 0; i < chunk; i++) bad += buf[(size_t)r * chunk + i] != value(41, r, i);
        CHECK(bad == 0, "pass %d: %zu elements differ", pass, bad);
    }
    free(buf);
    free(mine);
}

static void host_sum_in_rank_order(void) {
    double x[3], want[3];
    for (int j = 0; j < 3; j++) {
        x[j] = value(51, R, j) * 1e3;
        want[j] = value(51, 0, j) * 1e3;
        for (int r = 1; r < W; r++) want[j] += value(51, r, j) * 1e3;
    }
    comm_host_sum(comm, COMM_WORLD, x, 3);
    for (int j = 0; j < 3; j++) CHECK(x[j] == want[j], "element %d: %.17g vs %.17g", j, x[j], want[j]);
}

// The formulas of gpt_state_bytes, written out from the layout.
static void check_formulas(const GPTConfig* c, int world) {
    ParamLayout pl;
    param_layout_build(&pl, c, world);
    size_t N = pl.total, S = N / world, E = unit_size(&pl, 0), F = unit_size(&pl, pl.num_units - 1), L = 0;
    for (int u = 1; u + 1 < pl.num_units; u++) L = unit_size(&pl, u) > L ? unit_size(&pl, u) : L;
    param_layout_free(&pl);
    size_t staged = S + E + F + 2 * L;
    for (int stage = 0; stage <= 3; stage++) {
        StateBytes b = gpt_state_bytes(c, DTYPE_BF16, world, stage);
        size_t opt = stage == 0 ? N : S;
        CHECK(b.params == (stage == 3 ? staged : N) * 2, "w%d stage %d params %zu", world, stage, b.params);
        CHECK(b.grads == (stage >= 2 ? staged : N) * 2, "w%d stage %d grads %zu", world, stage, b.grads);
        CHECK(b.master == opt * 4 && b.adam == opt * 8, "w%d stage %d master %zu adam %zu", world, stage, b.master,
              b.adam);
        StateBytes f = gpt_state_bytes(c, DTYPE_F32, world, stage);
        CHECK(f.master == 0 && f.params == b.params * 2, "w%d stage %d fp32", world, stage);
    }
}

// A model with many layers, where each stage saves memory.
static const GPTConfig LAYERED = {.max_seq_len = 32, .vocab_size = 1000, .num_layers = 8, .num_heads = 2, .channels = 64};

static void state_bytes_follow_the_formulas(void) {
    GPTConfig c = LAYERED;
    gpt_config_finish(&c);
    for (int world = 1; world <= 5; world++) check_formulas(&c, world);
}

// Each rank's allocation at each stage is gpt_state_bytes plus the
// activations, token buffers and scalars, and it falls from stage to stage.
static void allocated_equals_state_bytes(void) {
    GPTConfig c = LAYERED;
    gpt_config_finish(&c);
    int B = 2, T = 16;
    size_t previous = 0;
    for (int stage = 0; stage <= 3; stage++) {
        size_t before = be->allocated_bytes(be);
        GPT m;
        Zero z;
        gpt_create(&m, &c, be, B, T, comm->group[COMM_SHARD].size, comm->group[COMM_SHARD].rank, stage);
        zero_init(&z, &m, comm);
        size_t got = be->allocated_bytes(be) - before;
        StateBytes sb = gpt_state_bytes(&c, DTYPE_F32, comm->group[COMM_SHARD].size, stage);
        size_t want = sb.params + sb.grads + sb.master + sb.adam + m.acts.bytes + 2 * (size_t)B * T * sizeof(int32_t) +
                      4 * sizeof(float);
        CHECK(got == want, "stage %d: allocated %zu bytes, state bytes + activations = %zu", stage, got, want);
        if (W > 1 && stage > 0)
            CHECK(got < previous, "stage %d allocates %zu bytes, not less than stage %d's %zu", stage, got, stage - 1,
                  previous);
        if (R == 0 && W > 1)
            fprintf(stderr, "test_comm: %d ranks, ZeRO-%d: %zu bytes per rank (params %zu grads %zu adam %zu)\n", W, stage,
                    got, sb.params, sb.grads, sb.adam);
        previous = got;
        zero_free(&z);
        gpt_free(&m);
    }
    // ZeRO-3 prefetching two units ahead: one more layer of parameter staging, billed.
    size_t before = be->allocated_bytes(be);
    GPT m;
    int world = comm->group[COMM_SHARD].size;
    gpt_create_staged(&m, &c, be, B, T, world, comm->group[COMM_SHARD].rank, 3, NULL, 3);
    size_t got = be->allocated_bytes(be) - before;
    StateBytes s2 = gpt_state_bytes(&c, DTYPE_F32, world, 3), s3 = gpt_state_bytes_staged(&c, DTYPE_F32, world, 3, 3);
    size_t layer = unit_size(&m.layout, 1) * sizeof(float);
    CHECK(got == s3.params + s3.grads + s3.master + s3.adam + m.acts.bytes + 2 * (size_t)B * T * sizeof(int32_t) +
                     4 * sizeof(float),
          "3 parameter layer slots: allocated %zu bytes, not the state bytes", got);
    CHECK(s3.params == s2.params + layer && s3.grads == s2.grads, "a third parameter layer slot bills %zu bytes, not %zu",
          s3.params - s2.params, layer);
    gpt_free(&m);
    CHECK(be->allocated_bytes(be) == 0, "%zu bytes still allocated", be->allocated_bytes(be));
}

int main(int argc, char** argv) {
    comm = comm_init(&argc, &argv);
    W = comm->world;
    R = comm->rank;
    be = cpu_backend_create(DTYPE_F32, 1);
    comm_attach_backend(comm, be);
    MPI_RUN(reduce_scatter_sums_in_rank_order);
    MPI_RUN(reduce_scatter_bf16);
    MPI_RUN(all_reduce_uneven_length);
    MPI_RUN(all_gather_from_separate_and_in_place);
    MPI_RUN(host_sum_in_rank_order);
    MPI_RUN(state_bytes_follow_the_formulas);
    MPI_RUN(allocated_equals_state_bytes);
    int failures = TESTS_DONE();
    comm_finalize(comm);
    be->destroy(be);
    return failures;
}
