// launcher.c: the launcher's environment variables (launcher.h).
#include "llm/platform/launcher.h"

#include <stdlib.h>

// The variable's value as a non-negative int; -1 when unset; fatal when not a number.
static int env_int(const char* name) {
    const char* v = name ? getenv(name) : NULL;
    if (!v || !v[0]) return -1;
    char* end;
    long x = strtol(v, &end, 10);
    if (*end || x < 0 || x > 1 << 24) fatal("%s='%s' is not a rank or a number of ranks", name, v);
    return (int)x;
}

LauncherInfo launcher_info(void) {
    static const struct {
        const char *source, *rank, *world, *local_rank, *local_world;
    } kinds[] = {
        {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
         "OMPI_COMM_WORLD_LOCAL_SIZE"},
        {"MPICH", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
        {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL},  // SLURM_NTASKS_PER_NODE may read "4(x2)",
        {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    };
    LauncherInfo info = {0, 1, -1, -1, NULL};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        int rank = env_int(kinds[i].rank), world = env_int(kinds[i].world);
        if (rank < 0 || world < 1) continue;
        info.rank = rank;
        info.world = world;
        info.local_rank = env_int(kinds[i].local_rank);
        info.local_world = env_int(kinds[i].local_world);
        info.source = kinds[i].source;
        break;
    }
    return info;
}
