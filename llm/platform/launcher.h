// launcher.h: what the program that started this process (mpirun, srun,
// torchrun, SageMaker's mpirun) says about it in the environment. Readable
// before MPI and before any CUDA call, so the GPU can be chosen first.
#pragma once

#include "llm/util/util.h"

EXTERN_C_BEGIN

typedef struct {
    int rank, world;              // world 1, rank 0 when no launcher says otherwise
    int local_rank, local_world;  // among the ranks on this machine (-1: not said)
    const char* source;           // "Open MPI", "Slurm", ... or NULL
} LauncherInfo;

// The first launcher whose variables are set, in this order: Open MPI
// (OMPI_COMM_WORLD_*; SageMaker runs Open MPI), MPICH/Hydra (PMI_RANK,
// PMI_SIZE, MPI_LOCALRANKID), Slurm (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID), torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK). A value
// that is not a number is fatal, naming the variable.
LauncherInfo launcher_info(void);

EXTERN_C_END
