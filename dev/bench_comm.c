// bench_comm.c: the bus bandwidth of ZeRO's collectives (llm/parallel/comm.h)
// at the unit sizes of the presets: all-gather (ZeRO-3's parameter gathers),
// reduce-scatter (gradients, onto an accumulator as ZeRO-2/3 do) and
// all-reduce (ZeRO-0, and the cross-group reduction), over all ranks.
//
//   mpirun -np 2 build/bench_comm                      MPI on the CPU backend
//   mpirun -np 8 build/gpu/bench_comm --device cuda    NCCL on GPUs
//
// Sizes: the layer unit and the final unit of gpt-7B, llama3-8B and gpt-64B
// (parameters in the backend's dtype: FP32 on the CPU, BF16 on GPUs), each
// skipped when larger than --max-mib (default 1024 on the CPU, no limit on
// GPUs). Bus bandwidth follows NCCL's tests:
// the bytes each rank moves over its busiest link per second, algorithm
// bandwidth (size / time) times (n - 1) / n for all-gather and reduce-scatter
// and 2 (n - 1) / n for all-reduce, so that it compares with the link's speed
// whatever the rank count. Times are the median of --iters runs after one
// warm-up, each ended by a host synchronisation and a barrier.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llm/config.h"
#include "llm/model/model.h"
#include "llm/parallel/comm.h"
#include "llm/platform/device.h"
#include "llm/presets.h"
#include "llm/util/util.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

typedef enum { ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE } Op;
static const char* op_name[] = {"all-gather", "reduce-scatter", "all-reduce"};

// The median seconds of `iters` runs of op on `n` elements (n a multiple of the world).
static double time_op(Comm* c, Backend* be, Op op, void* buf, void* acc, size_t n, int iters) {
    size_t chunk = n / (size_t)c->world;
    double* t = (double*)xmalloc((size_t)(iters + 1) * sizeof(double));
    for (int i = 0; i <= iters; i++) {  // run 0 warms up
        double dummy = 0;
        comm_host_sum(c, COMM_WORLD, &dummy, 1);  // a barrier
        double t0 = now();
        if (op == ALL_GATHER)
            comm_all_gather(c, COMM_WORLD, (char*)acc, buf, chunk, be->dtype);
        else if (op == REDUCE_SCATTER)
            comm_reduce_scatter(c, COMM_WORLD, buf, chunk, be->dtype, acc);
        else
            comm_all_reduce(c, COMM_WORLD, buf, n, be->dtype);
        comm_compute_wait_all(c);
        be->synchronize(be);
        double mine = now() - t0, slowest = mine;
        // The collective ends when its last rank does.
        double lo = mine;
        comm_host_minmax(c, COMM_WORLD, &lo, &slowest, 1);
        t[i] = slowest;
    }
    qsort(t + 1, (size_t)iters, sizeof(double), cmp_double);
    double median = t[1 + iters / 2];
    free(t);
    return median;
}

typedef struct {
    char name[64];
    size_t elems;
} Size;

// The layer and final units of a preset, in elements, padded to the world.
static int preset_sizes(const char* preset, const char* arch, int world, Size* out) {
    char* argv[] = {"bench_comm", "--model", (char*)preset, "--arch", (char*)arch, "--tokenizer", ""};
    TrainConfig cfg;
    config_parse(&cfg, 7, argv);
    GPTConfig c = model_config_from_flags(&cfg, 0);
    config_free(&cfg);
    ParamLayout pl;
    param_layout_build(&pl, &c, world);
    snprintf(out[0].name, sizeof out[0].name, "%s layer", preset);
    out[0].elems = unit_size(&pl, 1);
    snprintf(out[1].name, sizeof out[1].name, "%s final unit", preset);
    out[1].elems = unit_size(&pl, pl.num_units - 1);
    param_layout_free(&pl);
    return 2;
}

int main(int argc, char** argv) {
    Comm* c = comm_init(&argc, &argv);
    const char* device = "auto";
    double max_mib = -1;
    int iters = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "--max-mib") && i + 1 < argc) max_mib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else fatal("bench_comm: unknown argument '%s' (--device auto|cpu|cuda, --max-mib N, --iters N)", argv[i]);
    }
    if (iters < 1) fatal("bench_comm: --iters must be at least 1");
    DeviceChoice dev = !strcmp(device, "cpu") ? DEVICE_CPU : !strcmp(device, "cuda") ? DEVICE_CUDA : DEVICE_AUTO;
    if (strcmp(device, "cpu") && strcmp(device, "cuda") && strcmp(device, "auto"))
        fatal("bench_comm: --device '%s' is not auto, cpu or cuda", device);
    device_select_gpu(dev, c->local_rank);
    // Parameters and gradients in the dtype training uses: BF16 on GPUs, FP32 on the CPU.
    Backend* be = backend_open(dev, device_wants_cuda(dev) ? PRECISION_BF16 : PRECISION_FP32, 0, c->local_rank,
                               c->local_world);
    comm_attach_backend(c, be);
    int gpu = strcmp(be->name, "cpu") != 0;
    if (max_mib < 0) max_mib = gpu ? 0 : 1024;  // gpt-64B's 3 GiB layer is too much for a CPU bench

    Size sizes[6];
    int ns = 0;
    ns += preset_sizes("gpt-7B", "gpt2", c->world, sizes + ns);
    ns += preset_sizes("llama3-8B", "llama", c->world, sizes + ns);
    ns += preset_sizes("gpt-64B", "gpt2", c->world, sizes + ns);
    size_t es = dtype_size(be->dtype), largest = 0;
    for (int i = 0; i < ns; i++) {
        double mib = (double)sizes[i].elems * es / 1048576.0;
        if (max_mib > 0 && mib > max_mib) sizes[i].elems = 0;
        else if (sizes[i].elems > largest) largest = sizes[i].elems;
    }
    printf("bench_comm | %d ranks, %d per node | backend %s (%s) | median of %d | bus bandwidth as NCCL's tests count it\n",
           c->world, c->node_size, be->name, dtype_name(be->dtype), iters);
    void* buf = largest ? be->alloc(be, largest * es, "bench buffer") : NULL;
    void* acc = largest ? be->alloc(be, largest / (size_t)c->world * es, "bench accumulator") : NULL;
    if (buf) be->zero(be, buf, largest * es);
    if (acc) be->zero(be, acc, largest / (size_t)c->world * es);
    for (int i = 0; i < ns; i++) {
        if (!sizes[i].elems) {
            printf("%-24s | skipped: larger than --max-mib %g\n", sizes[i].name, max_mib);
            continue;
        }
        size_t n = sizes[i].elems;
        double bytes = (double)n * es;
        printf("%-24s | %9.1f MiB", sizes[i].name, bytes / 1048576.0);
        for (int op = 0; op < 3; op++) {
            double t = time_op(c, be, (Op)op, buf, acc, n, iters);
            double factor = c->world == 1 ? 0 : (op == ALL_REDUCE ? 2.0 : 1.0) * (c->world - 1) / c->world;
            if (c->world == 1) printf(" | %s n/a (one rank)", op_name[op]);
            else printf(" | %s %8.3f ms %8.3g GB/s", op_name[op], t * 1e3, bytes / t * factor / 1e9);
        }
        printf("\n");
    }
    if (buf) be->free(be, buf);
    if (acc) be->free(be, acc);
    be->destroy(be);
    comm_finalize(c);
    return 0;
}
